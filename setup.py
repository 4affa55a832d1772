"""Build of the `streams` extension.

cudart is linked statically, so the wheel needs only the NVIDIA driver.  The
CUDA headers and libcudart_static.a come from, in this order (the search is
tools/build/cuda_paths.py, which the benchmark's C floor shares):

1. ``CUDA_HOME`` or ``CUDA_PATH`` if set;
2. the ``nvidia-cuda-runtime`` / ``nvidia-cuda-crt`` wheels (``nvidia/cu13``
   on ``sys.path``; both are in ``build-system.requires``);
3. ``/usr/local/cuda``.

``STREAMS_CUDA_MAJOR`` (13, the default, or 12) selects the CUDA major the
build targets and with it the distribution (``cuda-streams`` or
``cuda-streams-cu12``; see tools/build/streams_build.py, which an sdist's
``CUDA_MAJOR`` marker overrides).  The headers found must be of that major.
CUDA 12's wheels lay out differently: ``nvidia/cuda_runtime`` holds the
runtime, and ``crt/host_defines.h`` comes from ``nvidia-cuda-nvcc-cu12``.
The CUDA inputs are looked up when extensions are built, not when the
script is read: an sdist needs none.

NVTX (``streams.nvtx``) is header-only NVTX3: ``nvtx3/`` beside the CUDA
headers found, else in the ``nvidia-nvtx`` wheel (``cuda_paths.find_nvtx``).
Without it, or with ``STREAMS_NVTX=0``, ``streams._nvtx`` is built with its
calls compiled out (``streams.nvtx.available`` is False).

The extensions are built without debug information (``-g0``, and the
static runtime's stripped at link time); ``STREAMS_DEBUG_INFO=1`` keeps it
(tools/build/streams_build.py, ``debug_info_flags``).

Set ``STREAMS_CYTHON_ANNOTATE=1`` for Cython's HTML annotation, and
``STREAMS_DEBUG_REFCOUNTS=1`` for the debug build, which counts every
reference taken and dropped on callback payloads and DLPack exports and
every allocation and module made and given back (``streams.debug_build()``,
``streams.debug_counters()``).
"""
import os
import re
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
# The PEP 517 backend has tools/build/ on sys.path already; `python setup.py` not.
sys.path.insert(0, os.path.join(HERE, "tools", "build"))
import cuda_paths  # noqa: E402  (the CUDA search, shared with benchmarks/)
import streams_build  # noqa: E402

try:
    CUDA_MAJOR = streams_build.cuda_major(HERE)
except streams_build.CudaMajorError as exc:
    sys.exit(f"streams: {exc}")


def find_cuda():
    """Return (include_dirs, static_lib_path), or stop with what was tried."""
    try:
        return cuda_paths.find_cuda(CUDA_MAJOR)
    except cuda_paths.CudaNotFound as exc:
        sys.exit(f"streams: {exc}")


class build_py_with_headers(build_py):
    """Ship include/streams/*.h inside the package, for streams.get_include():
    exactly the headers a project that cimports streams compiles (the
    private ones are in src/, which only the sdist carries)."""

    def run(self):
        super().run()
        src = os.path.join(HERE, "include", "streams")
        dst = os.path.join(self.build_lib, "streams", "include", "streams")
        os.makedirs(dst, exist_ok=True)
        for name in sorted(os.listdir(src)):
            if name.endswith(".h"):
                shutil.copy2(os.path.join(src, name), os.path.join(dst, name))


class DistributionForCudaMajor(Distribution):
    """pyproject.toml names the CUDA 13 distribution; a CUDA 12 build renames
    itself after reading it (the name cannot be `dynamic` in pyproject)."""

    def parse_config_files(self, *args, **kwargs):
        super().parse_config_files(*args, **kwargs)
        self.metadata.name = streams_build.DISTRIBUTION[CUDA_MAJOR]
        self.metadata.classifiers = [
            c.replace("NVIDIA CUDA :: 13", f"NVIDIA CUDA :: {CUDA_MAJOR}")
            for c in (self.metadata.classifiers or [])]
        if CUDA_MAJOR == "12" and self.extras_require:
            # The nvrtc extra: the CUDA 12 wheel of NVRTC.
            self.extras_require = {
                extra: [r.replace("nvidia-cuda-nvrtc==13.*", "nvidia-cuda-nvrtc-cu12==12.*")
                        for r in reqs]
                for extra, reqs in self.extras_require.items()}


# What builds leave in the source tree, which is no source: Cython's C and
# HTML and the modules of an in-place build, the benchmarks' build folder.
# Dropped by the sdist command rather than MANIFEST.in, whose excludes warn
# on a clean checkout, where they match nothing.
BUILD_OUTPUTS = re.compile(r"^(src/streams/[^/]+\.(c|html|so)|benchmarks/build/.*)$")


class sdist_with_cuda_major(sdist):
    """Record the major in the sdist, which then always builds that one."""

    def make_distribution(self):
        self.filelist.files = [f for f in self.filelist.files
                               if not BUILD_OUTPUTS.match(f.replace(os.sep, "/"))]
        super().make_distribution()

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        marker = os.path.join(base_dir, streams_build.MARKER)
        if os.path.lexists(marker):     # a hard link into the source tree
            os.unlink(marker)
        with open(marker, "w") as f:
            f.write(CUDA_MAJOR + "\n")


class build_ext_with_cuda(build_ext):
    """Find the CUDA inputs and cythonize only when building extensions."""

    def run(self):
        from Cython.Build import cythonize

        include_dirs, static_lib = find_cuda()
        nvtx_dir = cuda_paths.find_nvtx(include_dirs)
        debug = os.environ.get("STREAMS_DEBUG_REFCOUNTS", "") not in ("", "0")
        try:
            debug_compile, debug_link = streams_build.debug_info_flags()
        except ValueError as exc:
            sys.exit(f"streams: {exc}")
        for ext in self.extensions:
            # After Python's own flags (its -g), so that ours win.
            ext.extra_compile_args.extend(debug_compile)
            ext.extra_link_args.extend(debug_link)
            # Every module reads the CUDA headers' types; only the call
            # layer links the runtime (one copy per process).
            ext.include_dirs.extend(include_dirs)
            if ext.name == CALL_LAYER:
                ext.extra_objects.append(static_lib)
            if ext.name == NVTX_LAYER and nvtx_dir is not None:
                # Only here: NVTX3 keeps a function table per shared object.
                ext.include_dirs.append(nvtx_dir)
                ext.define_macros.append(("STREAMS_HAVE_NVTX", "1"))
            if debug:
                ext.define_macros.append(("STREAMS_DEBUG_REFCOUNTS", "1"))
        # Independent modules: compile them side by side.
        if not self.parallel:
            self.parallel = os.cpu_count() or 1
        # The flavour changes no source file: an up-to-date check would keep
        # the other flavour's binary.
        flavour = (("debug-refcounts" if debug else "release") + " " + " ".join(debug_compile)
                   + (" nvtx" if nvtx_dir is not None else " no-nvtx"))
        stamp = os.path.join(self.build_temp, "streams-flavour")
        try:
            with open(stamp) as f:
                self.force = self.force or f.read() != flavour
        except OSError:
            self.force = True
        # cythonize() returns new Extension objects; keep the ones setuptools
        # finalized (it annotated them) and take over only their C sources.
        translated = cythonize(
            self.extensions,
            nthreads=os.cpu_count() or 1,
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
                # No generated __reduce_cython__/__setstate_cython__: they
                # would set C fields (a module held in use, a config's event
                # flags) that only the library may set.  A class that can be
                # pickled says how (Device.__reduce__).
                "auto_pickle": False,
                # Free-threaded CPython (3.13t): the modules keep their shared
                # state safe without the GIL (docs/safety.rst, "Free-threaded
                # Python"), so importing them leaves the GIL off.  Without
                # this, the import turns the GIL back on for the process.
                "freethreading_compatible": True,
            },
            annotate=bool(os.environ.get("STREAMS_CYTHON_ANNOTATE")),
        )
        sources = {ext.name: ext.sources for ext in translated}
        for ext in self.extensions:
            ext.sources = sources[ext.name]
        super().run()
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(flavour)


# One extension per concept; the imports between them point one way (see
# docs/architecture.rst).  streams._cudart alone links libcudart_static.a.
CALL_LAYER = "streams._cudart"
# The one module that makes NVTX calls (src/nvtx.h).
NVTX_LAYER = "streams._nvtx"
MODULES = ["_cudart", "_nvtx", "_handle", "_args", "_device", "_foreign", "_stream", "_hostcall",
           "_asyncio", "_memory", "_launch", "_graph", "_green", "_semaphore", "_deadline"]


def _extension(name):
    full = f"streams.{name}"
    owner = full == CALL_LAYER
    return Extension(
        full,
        sources=[f"src/streams/{name}.pyx"],
        # include/: the headers shipped for cimporters; src/: the private
        # ones (the shim of the call layer, the floor, the counters' names),
        # built with the package and never shipped.
        include_dirs=[os.path.join(HERE, "include"), os.path.join(HERE, "src")],
        # The checkout's headers it compiles: Cython regenerates the C when
        # a .pyx, .pxi or .pxd changes, but only these make the C compiler
        # run again when a header changes.
        depends=streams_build.module_headers(HERE, name),
        # NVTX3 loads a tool with dlopen.
        libraries=["rt", "dl", "pthread"] if owner else ["dl"] if full == NVTX_LAYER else [],
        extra_compile_args=["-O2", "-std=gnu11", "-Wno-unused-function"],
        # Keep cudart's symbols private to the call layer.
        extra_link_args=["-Wl,--exclude-libs,ALL"] if owner else [],
    )


setup(
    distclass=DistributionForCudaMajor,
    ext_modules=[_extension(name) for name in MODULES],
    cmdclass={"build_py": build_py_with_headers, "build_ext": build_ext_with_cuda,
              "sdist": sdist_with_cuda_major},
)
