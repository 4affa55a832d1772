"""Where the CUDA runtime's headers and ``libcudart_static.a`` are: the one
search that ``setup.py`` (building the extension) and the benchmark's C
floor (``benchmarks/builders.py``) share, so that both link the same cudart.

In this order:

1. ``CUDA_HOME`` or ``CUDA_PATH`` if set (and then only it);
2. the ``nvidia-cuda-runtime`` / ``nvidia-cuda-crt`` wheels on ``sys.path``
   (``nvidia/cu13``; CUDA 12's wheels lay out differently:
   ``nvidia/cuda_runtime`` holds the runtime, and ``crt/host_defines.h``
   comes from ``nvidia-cuda-nvcc-cu12``);
3. ``/usr/local/cuda``.

The headers found must be of the CUDA major asked for: the caller's, else
``STREAMS_CUDA_MAJOR``, else 13.  Standard library only: the build backend
imports it before anything is installed.
"""
import os
import re
import sys

DEFAULT_MAJOR = "13"
# Where the PyPI wheels of each major put the runtime and the crt/ headers.
WHEEL_RUNTIME = {"13": ("cu13",), "12": ("cuda_runtime",)}
WHEEL_CRT = {"13": ("cu13",), "12": ("cuda_nvcc", "cuda_runtime")}
WHEEL_FIX = {"13": "nvidia-cuda-runtime==13.* nvidia-cuda-crt==13.*",
             "12": "nvidia-cuda-runtime-cu12==12.* nvidia-cuda-nvcc-cu12==12.*"}


class CudaNotFound(Exception):
    """No usable CUDA inputs; the message says what was tried and the fix."""


def requested_major(major=None):
    """``major``, else ``STREAMS_CUDA_MAJOR``, else 13, as a string."""
    major = str(major or os.environ.get("STREAMS_CUDA_MAJOR", "").strip() or DEFAULT_MAJOR)
    if major not in WHEEL_RUNTIME:
        raise CudaNotFound(f"STREAMS_CUDA_MAJOR must be 12 or 13, not {major!r}")
    return major


def candidates(major):
    """``(label, include_dir, lib_dirs)`` to try, in order."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            yield f"${var}", os.path.join(root, "include"), [
                os.path.join(root, "lib64"), os.path.join(root, "lib"),
                os.path.join(root, "targets", "x86_64-linux", "lib"),
                os.path.join(root, "targets", "sbsa-linux", "lib")]
            return  # an explicit choice is never second-guessed
    for entry in sys.path:
        for sub in WHEEL_RUNTIME[major]:
            root = os.path.join(entry or ".", "nvidia", sub)
            if os.path.isdir(root):
                yield f"the nvidia-cuda-runtime wheel ({root})", os.path.join(root, "include"), [
                    os.path.join(root, "lib")]
    yield "/usr/local/cuda", "/usr/local/cuda/include", [
        "/usr/local/cuda/lib64", "/usr/local/cuda/lib"]


def header_major(include_dir):
    """The CUDA major of ``include_dir/cuda_runtime_api.h``, or "?"."""
    with open(os.path.join(include_dir, "cuda_runtime_api.h"), errors="replace") as f:
        found = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
    return str(int(found.group(1)) // 1000) if found else "?"


def _crt_elsewhere(major):
    """An include folder of a CUDA wheel that holds crt/host_defines.h, or None.

    nvidia-cuda-crt installs crt/ beside the runtime's headers, possibly
    under another sys.path entry.
    """
    for entry in sys.path:
        for sub in WHEEL_CRT[major]:
            alt = os.path.join(entry or ".", "nvidia", sub, "include")
            if os.path.isfile(os.path.join(alt, "crt", "host_defines.h")):
                return alt
    return None


def find_cuda(major=None):
    """``(include_dirs, static_lib_path)`` for CUDA ``major`` (see
    :func:`requested_major`); raises CudaNotFound with what was tried."""
    major = requested_major(major)
    tried = []
    for label, inc, libdirs in candidates(major):
        has_api = os.path.isfile(os.path.join(inc, "cuda_runtime_api.h"))
        has_crt = os.path.isfile(os.path.join(inc, "crt", "host_defines.h"))
        lib = next((os.path.join(d, "libcudart_static.a") for d in libdirs
                    if os.path.isfile(os.path.join(d, "libcudart_static.a"))), None)
        tried.append(f"  {label}: cuda_runtime_api.h {'found' if has_api else 'missing'}, "
                     f"crt/host_defines.h {'found' if has_crt else 'missing'}, "
                     f"libcudart_static.a {'found' if lib else 'missing'}")
        if not (has_api and lib):
            continue
        incs = [inc]
        if not has_crt:
            alt = _crt_elsewhere(major)
            if alt is None:
                continue
            incs.append(alt)
        found = header_major(inc)
        if found != major:
            raise CudaNotFound(
                f"{label} has CUDA {found} headers, but STREAMS_CUDA_MAJOR is {major}; point "
                f"CUDA_HOME at a CUDA {major} toolkit or set STREAMS_CUDA_MAJOR={found}")
        return incs, lib
    raise CudaNotFound(
        "cannot find the CUDA runtime headers and static library.\n"
        "Looked for cuda_runtime_api.h, crt/host_defines.h and libcudart_static.a in:\n"
        + "\n".join(tried) + "\n"
        f"Fix: `pip install {WHEEL_FIX[major]}` "
        "into the build environment (pip does this by itself without "
        "--no-build-isolation), or set CUDA_HOME to a CUDA toolkit.")


def find_nvtx(include_dirs=()):
    """The folder holding ``nvtx3/nvToolsExt.h`` (header-only NVTX3), or None.

    In this order: the CUDA include folders found by :func:`find_cuda`
    (``include_dirs``: a toolkit has ``include/nvtx3``), then the
    ``nvidia-nvtx`` wheels on ``sys.path`` (``nvidia/cu13/include``, CUDA
    12's ``nvidia/nvtx/include``: any ``nvidia/*/include``).
    ``STREAMS_NVTX=0`` says None: a build with NVTX compiled out.
    """
    if os.environ.get("STREAMS_NVTX", "").strip() == "0":
        return None
    wanted = os.path.join("nvtx3", "nvToolsExt.h")
    for inc in include_dirs:
        if os.path.isfile(os.path.join(inc, wanted)):
            return inc
    for entry in sys.path:
        root = os.path.join(entry or ".", "nvidia")
        if not os.path.isdir(root):
            continue
        for sub in sorted(os.listdir(root)):
            inc = os.path.join(root, sub, "include")
            if os.path.isfile(os.path.join(inc, wanted)):
                return inc
    return None
