"""The two contenders that are compiled on demand: the C program
(``c_floor/bench.c``, the loops of src/floor.h in a process of
their own) and the Cython contender (``cy_bench.pyx``).

Both are built into a cache folder and rebuilt only when an input changes;
a missing piece (compiler, CUDA, Cython) makes a builder return the reason
instead of a product, so that its column says "unavailable" and the run
goes on.
"""
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from benchmarks import CHECKOUT
from benchmarks.under_test import builtin_ptx

C_FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra"]
C_LIBS = ["-lrt", "-ldl", "-lpthread"]
CY_MODULE = "streams_cy_bench"


def c_string_literal(text):
    """``text`` as C string literal lines (one per PTX line, for readable headers)."""
    lines = []
    for line in text.splitlines(keepends=True):
        esc = (line.replace("\\", "\\\\").replace('"', '\\"')
               .replace("\t", "\\t").replace("\n", "\\n"))
        lines.append(f'"{esc}"')
    return "\n".join(lines) if lines else '""'


def _cuda_paths():
    """tools/build/cuda_paths.py of the checkout: the search setup.py makes, so
    that the C program links the cudart that streams links."""
    spec = importlib.util.spec_from_file_location(
        "streams_tools_cuda_paths", os.path.join(CHECKOUT, "tools", "build", "cuda_paths.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def find_cuda():
    """``(include_dirs, libcudart_static.a)``, or ``(None, why)``: setup.py's
    search, for the major in STREAMS_CUDA_MAJOR (13 when unset)."""
    paths = _cuda_paths()
    try:
        return paths.find_cuda()
    except paths.CudaNotFound as exc:
        return None, str(exc)


def default_cache_dir():
    """Where built helpers go: $STREAMS_BENCH_CACHE, the checkout's
    benchmarks/build (git ignores build/), or ~/.cache/streams-bench."""
    env = os.environ.get("STREAMS_BENCH_CACHE")
    if env:
        return env
    if os.access(os.path.join(CHECKOUT, "benchmarks"), os.W_OK):
        return os.path.join(CHECKOUT, "benchmarks", "build")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streams-bench")


def _digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def _stamp_ok(build_dir, key, product):
    stamp = os.path.join(build_dir, "stamp")
    return (os.path.isfile(product) and os.path.isfile(stamp)
            and read(stamp).strip() == key)


def _tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def compiler():
    """The C compiler command (a list), or None: $CC, else gcc, else cc."""
    cc = os.environ.get("CC")
    if cc:
        return shlex.split(cc)
    for name in ("gcc", "cc"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


def compiler_version(cc):
    """The first line of ``cc --version``, or None."""
    try:
        proc = subprocess.run(cc + ["--version"], capture_output=True, text=True, timeout=30)
        return proc.stdout.splitlines()[0] if proc.stdout else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def build_c_floor(cache_dir=None, force=False, root=None):
    """Compile benchmarks/c_floor/bench.c with the floor's loops
    (src/floor.h); returns ``(executable, None)`` or
    ``(None, why)``.  Rebuilt only when an input changes.  ``root``: the
    source checkout (default: the one this package is in)."""
    src = os.path.join(root or CHECKOUT, "benchmarks", "c_floor", "bench.c")
    include = os.path.join(root or CHECKOUT, "include")
    private = os.path.join(root or CHECKOUT, "src")
    if os.path.isfile(os.path.join(private, "floor.h")):
        headers = [os.path.join(private, n) for n in ("floor.h", "cuda_versions.h")]
    else:   # a checkout from before the private headers moved to src/
        private = None
        headers = [os.path.join(include, "streams", "floor.h")]
    headers.append(os.path.join(include, "streams", "clock.h"))
    for path in [src] + headers:
        if not os.path.isfile(path):
            return None, f"{path} not found"
    cc = compiler()
    if cc is None:
        return None, "no C compiler (set CC, or install gcc)"
    incs, lib = find_cuda()
    if incs is None:
        return None, lib
    try:
        ptx = builtin_ptx()
    except (ImportError, ValueError) as exc:
        return None, f"no PTX: {exc}"
    build = os.path.join(cache_dir or default_cache_dir(), "c_floor")
    exe = os.path.join(build, "bench_c")
    st = os.stat(lib)
    key = _digest(read(src, "rb"), *(read(h, "rb") for h in headers), ptx, incs, lib,
                  st.st_size, st.st_mtime_ns, cc, C_FLAGS)
    if not force and _stamp_ok(build, key, exe):
        return exe, None
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, "streams_ptx.h"), "w") as f:
        f.write("/* Written by benchmarks/builders.py from streams.testing.BUILTIN_PTX; "
                "do not edit. */\n"
                "static const char streams_builtin_ptx[] =\n" + c_string_literal(ptx) + ";\n")
    cmd = (cc + C_FLAGS + ["-I", build, "-I", include] + (["-I", private] if private else [])
           + [a for i in incs for a in ("-I", i)]
           + [src, lib] + C_LIBS + ["-o", exe + ".tmp"])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{cc[0]} failed to run: {exc}"
    if proc.returncode != 0:
        return None, f"{' '.join(cmd)} failed:\n{_tail(proc.stderr)}"
    os.replace(exe + ".tmp", exe)
    with open(os.path.join(build, "stamp"), "w") as f:
        f.write(key + "\n")
    with open(os.path.join(build, "build.log"), "w") as f:
        f.write(" ".join(map(shlex.quote, cmd)) + "\n" + proc.stdout + proc.stderr)
    return exe, None


# Run in a child interpreter: setuptools' state and output stay out of ours.
_CY_SETUP = """\
import sys
from setuptools import Extension, setup
from Cython.Build import cythonize
build, pyx, include, pxd_root = sys.argv[1:5]
ext = Extension(%r, [pyx], include_dirs=[include], extra_compile_args=["-O2"])
setup(name="streams-cy-bench",
      ext_modules=cythonize([ext], include_path=[pxd_root], build_dir=build,
                            # No module state of its own: a free-threaded
                            # CPython may keep the GIL off when it loads it.
                            compiler_directives={"language_level": 3,
                                                 "freethreading_compatible": True},
                            quiet=True),
      script_args=["build_ext", "--build-lib", build, "--build-temp", build + "/tmp"])
""" % CY_MODULE

# What the Cython contender compiles against, printed by a child Python
# that imports the streams of another folder (a baseline build): this
# process has imported the streams under test, and one process cannot hold
# two.
_STREAMS_FACTS = """\
import json, os, streams
print(json.dumps([os.path.dirname(os.path.abspath(streams.__file__)), streams.get_include(),
                  getattr(streams, "__version__", "")]))
"""

#: The include that cy_bench.pyx takes its cimports from, written next to
#: the copy it compiles (see cython_api).
CY_API = "cy_bench_api.pxi"
_CY_CLASSES = ("Event", "GraphExec", "Kernel", "PreparedLaunch", "Stream")
_KERNEL_LAUNCH = {
    True: "    return kernel.c_launch(stream, 1, 1, 1, 1, 1, 1, args, 0)\n",
    False: ("    # Never called: run_batch refuses the argument launches first.\n"
            "    with gil:\n"
            "        raise NotImplementedError(\"this build of streams has no Kernel.c_launch\")\n"),
}


def cython_api(pkg):
    """The include of cy_bench.pyx for the streams package folder ``pkg``
    (its .pxd files): ``(text, None)``, or ``(None, why)``.

    The C-level API has changed shape: the layered modules export every
    class from ``streams/__init__.pxd`` and have ``Kernel.c_launch``; the one
    extension before them (``streams/_core.pxd``) exported only Stream and
    Event from ``streams`` and had no ``Kernel.c_launch``.  What differs is
    here, so that one cy_bench.pyx times both.
    """
    def pxd(name):
        path = os.path.join(pkg, name)
        return read(path) if os.path.isfile(path) else ""

    init = pxd("__init__.pxd")
    if all(re.search(rf"\b{c}\b", init) for c in _CY_CLASSES):
        source = "streams"
    elif os.path.isfile(os.path.join(pkg, "_core.pxd")):
        source = "streams._core"
    else:
        return None, (f"{pkg}: neither streams/__init__.pxd nor streams/_core.pxd declares "
                      f"{', '.join(_CY_CLASSES)}")
    decls = "".join(pxd(n) for n in sorted(os.listdir(pkg)) if n.endswith(".pxd"))
    kernel = re.search(r"^cdef class Kernel\b.*?(?=^cdef class |\Z)", decls, re.M | re.S)
    has_launch = bool(kernel and "c_launch(" in kernel.group(0))
    text = ("# Written by benchmarks/builders.py for the streams this copy of cy_bench.pyx\n"
            "# is compiled against; do not edit.\n"
            f"from {source} cimport {', '.join(_CY_CLASSES)}\n\n"
            f"KERNEL_C_LAUNCH = {has_launch}\n\n\n"
            "cdef inline int kernel_launch(Kernel kernel, Stream stream, void** args) "
            "except -1 nogil:\n" + _KERNEL_LAUNCH[has_launch])
    return text, None


def _streams_to_build_against(streams_dir):
    """``(package folder, include folder, version)`` of the streams in
    ``streams_dir`` (None: the streams under test), or ``(None, why)``."""
    if streams_dir is None:
        import streams
        return (os.path.dirname(os.path.abspath(streams.__file__)), streams.get_include(),
                getattr(streams, "__version__", "")), None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (streams_dir, os.environ.get("PYTHONPATH")) if p))
    try:
        # cwd: `-c` puts it first on sys.path, before any installed streams.
        proc = subprocess.run([sys.executable, "-c", _STREAMS_FACTS], capture_output=True,
                              text=True, timeout=120, cwd=streams_dir, env=env)
        facts = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return None, f"cannot import the streams in {streams_dir}: {exc}"
    if facts is None:
        return None, (f"cannot import the streams in {streams_dir}:\n"
                      f"{_tail(proc.stderr, 5)}")
    if os.path.realpath(facts[0]) != os.path.realpath(os.path.join(streams_dir, "streams")):
        return None, (f"cannot import the streams in {streams_dir}: a child Python "
                      f"found {facts[0]} instead")
    return tuple(facts), None


def build_cython_bench(cache_dir=None, force=False, root=None, streams_dir=None):
    """Compile benchmarks/cy_bench.pyx against the streams under test, or
    against the one in ``streams_dir`` (a baseline build: its .pxd files
    and headers, into a cache folder of its own); returns ``(module_path,
    None)`` or ``(None, why)``."""
    src = os.path.join(root or CHECKOUT, "benchmarks", "cy_bench.pyx")
    if not os.path.isfile(src):
        return None, f"{src} not found"
    for mod in ("Cython", "setuptools"):
        if importlib.util.find_spec(mod) is None:
            return None, f"{mod} is not installed (pip install 'cuda-streams[test]')"
    import Cython
    facts, why = _streams_to_build_against(streams_dir)
    if facts is None:
        return None, why
    pkg, include, version = facts
    api, why = cython_api(pkg)
    if api is None:
        return None, why
    # The module's struct offsets come from these: a changed .pxd means a rebuild.
    abi = [read(os.path.join(pkg, n), "rb") for n in sorted(os.listdir(pkg))
           if n.endswith(".pxd")]
    header = os.path.join(include, "streams", "streams.h")
    if os.path.isfile(header):
        abi.append(read(header, "rb"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    build = os.path.join(cache_dir or default_cache_dir(),
                         "cy" if streams_dir is None else "cy-baseline")
    product = os.path.join(build, CY_MODULE + suffix)
    key = _digest(read(src, "rb"), api, *abi, Cython.__version__, sys.version, suffix,
                  version, pkg)
    if not force and _stamp_ok(build, key, product):
        return product, None
    os.makedirs(build, exist_ok=True)
    pyx = os.path.join(build, CY_MODULE + ".pyx")   # the module is named after its file
    shutil.copyfile(src, pyx)
    with open(os.path.join(build, CY_API), "w") as f:
        f.write(api)
    # Only this streams' folder on Cython's include path: its .pxd files are
    # found before any on sys.path (another streams installed there).
    cmd = [sys.executable, "-c", _CY_SETUP, build, pyx, include, os.path.dirname(pkg)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=build)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"building {src} failed to run: {exc}"
    if proc.returncode != 0 or not os.path.isfile(product):
        return None, f"building {src} failed:\n{_tail(proc.stdout + proc.stderr)}"
    with open(os.path.join(build, "stamp"), "w") as f:
        f.write(key + "\n")
    return product, None
