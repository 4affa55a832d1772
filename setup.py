"""Build of the `streams` extension.

cudart is linked statically, so the wheel needs only the NVIDIA driver.  The
CUDA headers and libcudart_static.a come from, in this order:

1. ``CUDA_HOME`` or ``CUDA_PATH`` if set;
2. the ``nvidia-cuda-runtime`` / ``nvidia-cuda-crt`` wheels (``nvidia/cu13``
   on ``sys.path``; both are in ``build-system.requires``);
3. ``/usr/local/cuda``.

Set ``STREAMS_CYTHON_ANNOTATE=1`` for Cython's HTML annotation.
"""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_MAJOR = "13"


def _candidates():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield f"${var}", os.path.join(root, "include"), [
                os.path.join(root, "lib64"), os.path.join(root, "lib"),
                os.path.join(root, "targets", "x86_64-linux", "lib"),
                os.path.join(root, "targets", "sbsa-linux", "lib")]
            return  # an explicit choice is never second-guessed
    for entry in sys.path:
        root = os.path.join(entry or ".", "nvidia", f"cu{CUDA_MAJOR}")
        if os.path.isdir(root):
            yield f"the nvidia-cuda-runtime wheel ({root})", os.path.join(root, "include"), [
                os.path.join(root, "lib")]
    yield "/usr/local/cuda", "/usr/local/cuda/include", [
        "/usr/local/cuda/lib64", "/usr/local/cuda/lib"]


def find_cuda():
    """Return (include_dirs, static_lib_path), or stop with what was tried."""
    tried = []
    headers = None
    for label, inc, libdirs in _candidates():
        has_api = os.path.isfile(os.path.join(inc, "cuda_runtime_api.h"))
        has_crt = os.path.isfile(os.path.join(inc, "crt", "host_defines.h"))
        lib = next((os.path.join(d, "libcudart_static.a") for d in libdirs
                    if os.path.isfile(os.path.join(d, "libcudart_static.a"))), None)
        tried.append(f"  {label}: cuda_runtime_api.h {'found' if has_api else 'missing'}, "
                     f"crt/host_defines.h {'found' if has_crt else 'missing'}, "
                     f"libcudart_static.a {'found' if lib else 'missing'}")
        if has_api and lib:
            incs = [inc]
            if not has_crt:
                # nvidia-cuda-crt installs crt/ beside the runtime's headers,
                # possibly under another sys.path entry.
                for entry in sys.path:
                    alt = os.path.join(entry or ".", "nvidia", f"cu{CUDA_MAJOR}", "include")
                    if os.path.isfile(os.path.join(alt, "crt", "host_defines.h")):
                        incs.append(alt)
                        has_crt = True
                        break
            if has_crt:
                return incs, lib
    sys.exit(
        "streams: cannot find the CUDA runtime headers and static library.\n"
        "Looked for cuda_runtime_api.h, crt/host_defines.h and libcudart_static.a in:\n"
        + "\n".join(tried) + "\n"
        f"Fix: `pip install nvidia-cuda-runtime=={CUDA_MAJOR}.* nvidia-cuda-crt=={CUDA_MAJOR}.*` "
        "into the build environment (pip does this by itself without "
        "--no-build-isolation), or set CUDA_HOME to a CUDA toolkit.")


class build_py_with_headers(build_py):
    """Ship include/streams/*.h inside the package, for streams.get_include()."""

    def run(self):
        super().run()
        src = os.path.join(HERE, "include", "streams")
        dst = os.path.join(self.build_lib, "streams", "include", "streams")
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            if name.endswith(".h"):
                shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


def extensions():
    from Cython.Build import cythonize

    include_dirs, static_lib = find_cuda()
    ext = Extension(
        "streams._core",
        sources=["streams/_core.pyx"],
        include_dirs=[os.path.join(HERE, "include")] + include_dirs,
        extra_objects=[static_lib],
        libraries=["rt", "dl", "pthread"],
        extra_compile_args=["-O2", "-std=gnu11", "-Wno-unused-function"],
        # Keep cudart's symbols private to this extension.
        extra_link_args=["-Wl,--exclude-libs,ALL"],
    )
    return cythonize(
        [ext],
        compiler_directives={
            "language_level": 3,
            # Signatures in docstrings: help() and the API docs show them.
            "embedsignature": True,
            # Real function objects: inspect.signature and stubtest work.
            "binding": True,
            # Handles and counters are checked explicitly where they matter.
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
        },
        annotate=bool(os.environ.get("STREAMS_CYTHON_ANNOTATE")),
    )


setup(ext_modules=extensions(), cmdclass={"build_py": build_py_with_headers})
