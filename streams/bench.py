"""Launch-overhead benchmark: streams next to a C floor and its peers.

    python -m streams.bench [--quick] [--json PATH] [--png PATH]
                            [--ops a,b] [--contenders x,y] [--dry-run FILE]

Each operation (``--list`` shows them) is timed for each contender as
nanoseconds per call: batches of many calls after a warm-up batch, in
rounds that go round-robin over the contenders, so that clock or thermal
drift hits every column alike.  A cell is the median of the per-batch
means, with the p10-p90 spread, and its ratio to the C floor: the same CUDA
calls made from a plain C loop (benchmarks/c_floor/bench.c).

Every contender runs in a process of its own: a peer that crashes, hangs
or is not installed costs its own column only, no two libraries share an
interpreter, and each has its own CUDA context as the C floor does.

``--dry-run FILE`` renders the table (and ``--png`` chart) of a stored
result without a GPU.  benchmarks/README.md says what each column means.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import gc
import hashlib
import importlib.util
import json
import math
import os
import platform
import select
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

SCHEMA = "streams-bench/1"
CUDA_MAJOR = "13"   # as setup.py: the nvidia/cu13 wheels are searched


# ---------------------------------------------------------------------------
# What is measured, and by whom
# ---------------------------------------------------------------------------

_PY_CY = {"streams-py": 1.3, "streams-cy": 1.05}


class Op:
    __slots__ = ("name", "label", "iters", "targets", "about")

    def __init__(self, name, label, iters, targets, about):
        self.name = name
        self.label = label
        self.iters = iters          # calls per batch in a full run
        self.targets = targets      # contender -> promised ratio to C, at most
        self.about = about


OPS = (
    Op("stream_query", "stream query (idle)", 5000, _PY_CY,
       "cudaStreamQuery on a stream with no work"),
    Op("stream_synchronize", "stream synchronize (idle)", 5000, _PY_CY,
       "cudaStreamSynchronize on a stream with no work"),
    Op("event_record", "event record", 1000, _PY_CY,
       "cudaEventRecord of one event on an idle stream"),
    Op("event_query", "event query (complete)", 5000, _PY_CY,
       "cudaEventQuery of an event that has completed"),
    Op("stream_wait_event", "stream wait_event", 1000, _PY_CY,
       "cudaStreamWaitEvent on a completed event recorded on another stream"),
    Op("event_create_destroy", "event create+destroy", 1000, {"streams-py": 2.0},
       "cudaEventCreateWithFlags(DisableTiming) + cudaEventDestroy"),
    Op("stream_create_destroy", "stream create+destroy", 200, {"streams-py": 1.1},
       "cudaStreamCreateWithPriority + cudaStreamDestroy"),
    Op("kernel_launch", "empty-kernel launch", 200, {"streams-py": 1.15},
       "cudaLaunchKernel of an empty 1x1 kernel"),
    Op("kernel_launch_sync", "empty-kernel launch + sync", 100, {},
       "empty-kernel launch, then synchronize the stream"),
    Op("host_func_enqueue", "host-func enqueue (busy)", 200, {"streams-py": 1.2},
       "cudaLaunchHostFunc while a spin kernel holds the stream, so no callback "
       "runs during the timing"),
    Op("host_func_round_trip", "host-func round trip", 100, {"streams-py": 1.15},
       "enqueue a host function, synchronize: the callback has run"),
    Op("host_func_throughput", "host-func throughput", 500, {},
       "N host functions enqueued back to back while they run, then one "
       "synchronize; ns per callback"),
    Op("graph_launch", "10-kernel graph launch", 50, {"streams-py": 1.05},
       "cudaGraphLaunch of a graph captured from 10 empty-kernel launches"),
    Op("graph_launch_sync", "10-kernel graph launch + sync", 50, {},
       "graph launch, then synchronize the stream"),
)
OP_BY_NAME = {op.name: op for op in OPS}

# Operations that leave work on the stream: each batch is followed by an
# untimed synchronize, so that no batch waits for a full launch queue
# (which would time the GPU, not the call).
_ENQUEUES = {"event_record", "stream_wait_event", "kernel_launch", "graph_launch"}
_HOST_FUNC_OPS = ("host_func_enqueue", "host_func_round_trip", "host_func_throughput")
GRAPH_KERNELS = 10


class Contender:
    __slots__ = ("name", "label", "module", "hidden", "about")

    def __init__(self, name, label, module, about, hidden=False):
        self.name = name
        self.label = label
        self.module = module        # probed with importlib.util.find_spec
        self.about = about
        self.hidden = hidden


CONTENDERS = (
    Contender("c", "C floor", None,
              "benchmarks/c_floor/bench.c: the CUDA calls from a C loop (gcc, static cudart)"),
    Contender("streams-py", "streams (Py)", "streams", "streams from Python"),
    Contender("streams-cy", "streams (Cy)", "streams",
              "benchmarks/cy_bench.pyx: `from streams cimport Stream, Event`, nogil C-level "
              "calls (c_query, c_record, ..., PreparedLaunch/GraphExec.c_launch)"),
    Contender("cupy", "CuPy", "cupy", "cupy.cuda.Stream/Event, Function from the same PTX"),
    Contender("torch", "PyTorch", "torch", "torch.cuda.Stream/Event, torch.cuda._sleep(0)"),
    Contender("cuda-core", "cuda.core", "cuda.core",
              "cuda.core Device/Stream/Event, launch() of ObjectCode from the same PTX"),
    Contender("cuda-bindings", "cuda.bindings", "cuda.bindings",
              "cuda.bindings.runtime calls (driver cuLaunchKernel for kernels)"),
    Contender("numba-cuda", "numba-cuda", "numba", "numba.cuda.stream()/event(), @cuda.jit"),
    # Calls nothing: it lets the harness be tested end to end without a GPU.
    Contender("noop", "no-op (self-test)", None,
              "a pure-Python stand-in that times empty calls (no GPU needed)", hidden=True),
)
CONTENDER_BY_NAME = {c.name: c for c in CONTENDERS}
DEFAULT_CONTENDERS = tuple(c.name for c in CONTENDERS if not c.hidden)
_GPU_FREE = {"noop"}

FULL = {"rounds": 6, "batches": 15, "scale": 1.0}
QUICK = {"rounds": 2, "batches": 5, "scale": 0.2}

CELL_STATUSES = ("ok", "n/a", "missing", "unavailable", "error")
CONTENDER_STATUSES = ("ok", "missing", "unavailable", "error")


# ---------------------------------------------------------------------------
# Sources, PTX, CUDA; building the C floor and the Cython contender
# ---------------------------------------------------------------------------


def _close_quietly(closers):
    """Undo a half-built case, newest first; its own error is the one to report."""
    for fn in reversed(closers):
        try:
            fn()
        except Exception:
            pass


def source_root():
    """The source checkout this package runs from, or None.

    The C floor and the Cython contender are built from benchmarks/ and the
    PTX in streams/_kernels.pxi, which a wheel does not ship.
    """
    pkg = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(pkg)
    if (os.path.isdir(os.path.join(root, "benchmarks"))
            and os.path.isfile(os.path.join(pkg, "_kernels.pxi"))):
        return root
    return None


def builtin_ptx(root=None):
    """The PTX text of streams' built-in kernels, read from streams/_kernels.pxi.

    Read, not copied: the C floor and the peers launch exactly the kernels
    that streams launches.
    """
    root = root or source_root()
    if root is None:
        # Outside a checkout, builds that export the PTX still have it.
        try:
            from streams import testing
            return testing.BUILTIN_PTX
        except (ImportError, AttributeError):
            pass
        raise FileNotFoundError("streams/_kernels.pxi not found: the benchmark's kernels "
                                "come from a source checkout")
    path = os.path.join(root, "streams", "_kernels.pxi")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    marker = "_BUILTIN_PTX = b"
    start = text.find(marker)
    if start < 0:
        raise ValueError(f"{path}: no `{marker}\"\"\"...\"\"\"` literal")
    start += len(marker)
    end = text.find('"""', start + 3)
    if not text.startswith('"""', start) or end < 0:
        raise ValueError(f"{path}: the PTX literal is not a triple-quoted bytes literal")
    # Evaluated as the bytes literal it is, so any escape in it means what
    # Cython makes of it.
    ptx = ast.literal_eval("b" + text[start:end + 3]).decode("ascii")
    for entry in ("streams_empty", "streams_spin"):
        if f".entry {entry}(" not in ptx:
            raise ValueError(f"{path}: the PTX has no kernel {entry}")
    return ptx


def c_string_literal(text):
    """``text`` as C string literal lines (one per PTX line, for readable headers)."""
    lines = []
    for line in text.splitlines(keepends=True):
        esc = (line.replace("\\", "\\\\").replace('"', '\\"')
               .replace("\t", "\\t").replace("\n", "\\n"))
        lines.append(f'"{esc}"')
    return "\n".join(lines) if lines else '""'


def find_cuda():
    """``(include_dirs, libcudart_static.a)`` in setup.py's order, or ``(None, why)``.

    Order: $CUDA_HOME / $CUDA_PATH (only it, when set), then the nvidia/cu13
    wheels on sys.path, then /usr/local/cuda.
    """
    cands = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            cands.append((f"${var}", os.path.join(root, "include"), [
                os.path.join(root, "lib64"), os.path.join(root, "lib"),
                os.path.join(root, "targets", "x86_64-linux", "lib"),
                os.path.join(root, "targets", "sbsa-linux", "lib")]))
            break
    else:
        for entry in sys.path:
            root = os.path.join(entry or ".", "nvidia", f"cu{CUDA_MAJOR}")
            if os.path.isdir(root):
                cands.append((root, os.path.join(root, "include"), [os.path.join(root, "lib")]))
        cands.append(("/usr/local/cuda", "/usr/local/cuda/include",
                      ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]))
    tried = []
    for label, inc, libdirs in cands:
        has_api = os.path.isfile(os.path.join(inc, "cuda_runtime_api.h"))
        lib = next((os.path.join(d, "libcudart_static.a") for d in libdirs
                    if os.path.isfile(os.path.join(d, "libcudart_static.a"))), None)
        tried.append(f"{label} (cuda_runtime_api.h {'found' if has_api else 'missing'}, "
                     f"libcudart_static.a {'found' if lib else 'missing'})")
        if not (has_api and lib):
            continue
        incs = [inc]
        if not os.path.isfile(os.path.join(inc, "crt", "host_defines.h")):
            # The nvidia-cuda-crt wheel may sit under another sys.path entry.
            for entry in sys.path:
                alt = os.path.join(entry or ".", "nvidia", f"cu{CUDA_MAJOR}", "include")
                if os.path.isfile(os.path.join(alt, "crt", "host_defines.h")):
                    incs.append(alt)
                    break
            else:
                tried[-1] += ", crt/host_defines.h missing"
                continue
        return incs, lib
    return None, "no CUDA headers and libcudart_static.a: tried " + "; ".join(tried)


def default_cache_dir():
    """Where built helpers go: $STREAMS_BENCH_CACHE, the checkout's
    benchmarks/build (git ignores build/), or ~/.cache/streams-bench."""
    env = os.environ.get("STREAMS_BENCH_CACHE")
    if env:
        return env
    root = source_root()
    if root and os.access(os.path.join(root, "benchmarks"), os.W_OK):
        return os.path.join(root, "benchmarks", "build")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "streams-bench")


def _digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def _stamp_ok(build_dir, key, product):
    stamp = os.path.join(build_dir, "stamp")
    return (os.path.isfile(product) and os.path.isfile(stamp)
            and _read(stamp).strip() == key)


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


C_FLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra"]
C_LIBS = ["-lrt", "-ldl", "-lpthread"]


def build_c_floor(cache_dir=None, force=False, root=None):
    """Compile benchmarks/c_floor/bench.c; returns ``(executable, None)`` or
    ``(None, why)``.  Rebuilt only when an input changes.  ``root``: the
    source checkout (default: the one this package runs from)."""
    root = root or source_root()
    if root is None:
        return None, "needs a source checkout (benchmarks/c_floor/bench.c)"
    src = os.path.join(root, "benchmarks", "c_floor", "bench.c")
    if not os.path.isfile(src):
        return None, f"{src} not found"
    cc = compiler()
    if cc is None:
        return None, "no C compiler (set CC, or install gcc)"
    incs, lib = find_cuda()
    if incs is None:
        return None, lib
    try:
        ptx = builtin_ptx(root)
    except (OSError, ValueError) as exc:
        return None, f"no PTX: {exc}"
    build = os.path.join(cache_dir or default_cache_dir(), "c_floor")
    exe = os.path.join(build, "bench_c")
    st = os.stat(lib)
    key = _digest(_read(src, "rb"), ptx, incs, lib, st.st_size, st.st_mtime_ns, cc, C_FLAGS)
    if not force and _stamp_ok(build, key, exe):
        return exe, None
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, "streams_ptx.h"), "w") as f:
        f.write("/* Written by streams/bench.py from streams/_kernels.pxi; do not edit. */\n"
                "static const char streams_builtin_ptx[] =\n" + c_string_literal(ptx) + ";\n")
    cmd = (cc + C_FLAGS + ["-I", build] + [a for i in incs for a in ("-I", i)]
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


_CY_MODULE = "streams_cy_bench"

# Run in a child interpreter: setuptools' state and output stay out of ours.
_CY_SETUP = """\
import sys
from setuptools import Extension, setup
from Cython.Build import cythonize
build, pyx, include, pxd_root = sys.argv[1:5]
ext = Extension(%r, [pyx], include_dirs=[include], extra_compile_args=["-O2"])
setup(name="streams-cy-bench",
      ext_modules=cythonize([ext], include_path=[pxd_root], build_dir=build,
                            compiler_directives={"language_level": 3}, quiet=True),
      script_args=["build_ext", "--build-lib", build, "--build-temp", build + "/tmp"])
""" % _CY_MODULE


def build_cython_bench(cache_dir=None, force=False, root=None):
    """Compile benchmarks/cy_bench.pyx against the installed streams; returns
    ``(module_path, None)`` or ``(None, why)``."""
    root = root or source_root()
    if root is None:
        return None, "needs a source checkout (benchmarks/cy_bench.pyx)"
    src = os.path.join(root, "benchmarks", "cy_bench.pyx")
    if not os.path.isfile(src):
        return None, f"{src} not found"
    for mod in ("Cython", "setuptools"):
        if importlib.util.find_spec(mod) is None:
            return None, f"{mod} is not installed (pip install 'cuda-streams[test]')"
    import Cython
    import streams
    pkg = os.path.dirname(os.path.abspath(streams.__file__))
    include = streams.get_include()
    # The module's struct offsets come from these: a changed .pxd means a rebuild.
    abi = [_read(os.path.join(pkg, n), "rb") for n in ("__init__.pxd", "_core.pxd")
           if os.path.isfile(os.path.join(pkg, n))]
    header = os.path.join(include, "streams", "streams.h")
    if os.path.isfile(header):
        abi.append(_read(header, "rb"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    build = os.path.join(cache_dir or default_cache_dir(), "cy")
    product = os.path.join(build, _CY_MODULE + suffix)
    key = _digest(_read(src, "rb"), *abi, Cython.__version__, sys.version, suffix,
                  getattr(streams, "__version__", ""))
    if not force and _stamp_ok(build, key, product):
        return product, None
    os.makedirs(build, exist_ok=True)
    pyx = os.path.join(build, _CY_MODULE + ".pyx")   # the module is named after its file
    shutil.copyfile(src, pyx)
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


def streams_info():
    """Version, build and device facts of the streams package (never raises)."""
    try:
        import streams
        from streams._info import streams_info as facts
    except Exception as exc:
        return {"device_count": 0, "devices": [],
                "error": f"cannot import streams: {type(exc).__name__}: {exc}"}
    return facts(streams.__version__)


def _version_string(v):
    return "unknown" if not v else f"{v // 1000}.{(v % 1000) // 10}"


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------

def _quantile(xs, q):
    """Linear-interpolation quantile of sorted ``xs``."""
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(ns):
    """Median, p10, p90, min, mean of per-batch ns/call values."""
    xs = sorted(float(x) for x in ns)
    if not xs:
        return None
    return {"n": len(xs), "median": _quantile(xs, 0.5), "p10": _quantile(xs, 0.1),
            "p90": _quantile(xs, 0.9), "min": xs[0], "mean": sum(xs) / len(xs)}


# ---------------------------------------------------------------------------
# Worker side: each contender's operations, run inside its own process
# ---------------------------------------------------------------------------

class NotAvailable(Exception):
    """The contender has no such operation (the cell says n/a, with why)."""


_LOOP = """\
def timed(n, *, {params}):
    r = range(n)
    t0 = _clock()
    for _ in r:
{body}
{tail}    return _clock() - t0
"""


def _indent(src, spaces):
    return "\n".join(" " * spaces + line for line in src.strip().splitlines())


def make_loop(body, tail=None, **env):
    """A ``timed(n) -> ns`` function running ``body`` n times.

    Every contender gets the same generated loop, its names bound as
    keyword defaults (fast locals), so the loop costs each column the same
    and a cell differs from another only by the library call in it.
    ``tail`` runs once after the loop, inside the timing.
    """
    env = dict(env, _clock=time.perf_counter_ns)
    src = _LOOP.format(params=", ".join(f"{k}={k}" for k in env),
                       body=_indent(body, 8),
                       tail=_indent(tail, 4) + "\n" if tail else "")
    ns = dict(env)
    exec(compile(src, f"<{body.strip().splitlines()[0]}>", "exec"), ns)
    return ns["timed"]


def make_stmt(body, **env):
    """A zero-argument function running ``body`` once (untimed helpers)."""
    src = "def run(*, {}):\n{}\n".format(", ".join(f"{k}={k}" for k in env), _indent(body, 4))
    ns = dict(env)
    exec(compile(src, f"<{body.strip().splitlines()[0]}>", "exec"), ns)
    return ns["run"]


class Case:
    """One contender's set-up for one operation.

    ``timed(n)`` returns the ns that n calls took; ``before(n)`` and
    ``after(n, ns)`` run untimed around each batch (``after`` returns True
    when the batch was disturbed: host_func_enqueue's stream drained);
    ``close()`` frees what the set-up made.
    """

    def __init__(self, timed, before=None, after=None, closers=(), note=None):
        self.timed = timed
        self.before = before
        self.after = after
        self.closers = list(closers)
        self.note = note

    def close(self):
        for fn in reversed(self.closers):
            try:
                fn()
            except Exception:
                pass
        self.closers = []


def run_batches(case, iters, batches, warmup):
    """``(per-batch ns/call, batches disturbed)`` for one request."""
    out = []
    drained = 0
    # A collection in the middle of a batch would be charged to the call.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for b in range(warmup + batches):
            if case.before is not None:
                case.before(iters)
            ns = case.timed(iters)
            disturbed = case.after(iters, ns) if case.after is not None else False
            if b >= warmup:
                out.append(ns / iters)
                drained += bool(disturbed)
    finally:
        if was_enabled:
            gc.enable()
    return out, drained


def _int_handle(h):
    """An int out of a handle object of any of the libraries."""
    if isinstance(h, int):
        return h
    value = getattr(h, "value", None)      # ctypes.c_void_p
    if isinstance(value, int):
        return value
    try:
        return int(h)
    except TypeError:
        return int(h.getPtr())


def _spin_wrapper(handle):
    """A streams.Stream on another library's stream, only to hold it busy
    with streams' spin kernel (same context: the device's primary one)."""
    import streams
    return streams.Stream.from_handle(_int_handle(handle))


class Adapter:
    """A contender inside its worker: statements for each operation.

    ``stmts`` maps an operation to the Python statement that does it once,
    over names that ``env(op)`` makes; ``sync`` is the statement that
    synchronizes ``s``.  The "+ sync" operations and the three host-function
    operations are derived from these, the same way for every library.
    """

    stmts = {}
    sync = "s.synchronize()"
    notes = {}
    na = {}

    def __init__(self, ptx_path=None, cy_module=None):
        self.ptx_path = ptx_path
        self.cy_module = cy_module

    def setup(self):
        pass

    def info(self):
        return {}

    def env(self, op):
        raise NotImplementedError

    def busy_stream(self, env):
        """A streams.Stream on ``env['s']``, for the spin kernel."""
        raise NotAvailable("no way to hold this library's stream busy")

    def ptx(self):
        if not self.ptx_path:
            raise NotAvailable("the built-in PTX was not found (needs a source checkout)")
        return _read(self.ptx_path, "rb")

    def make_case(self, op):
        if op in self.na:
            raise NotAvailable(self.na[op])
        base = {"kernel_launch_sync": "kernel_launch",
                "graph_launch_sync": "graph_launch"}.get(op, op)
        if base in _HOST_FUNC_OPS:
            base = "host_func_enqueue"
        if base not in self.stmts:
            raise NotAvailable(f"no {OP_BY_NAME[op].label} in this library")
        env = self.env(op)
        closers = env.pop("_closers", [])
        stmt = self.stmts[base]     # after env(): set-up may pick the statement
        note = self.notes.get(op) or self.notes.get(base)
        try:
            if op in _HOST_FUNC_OPS:
                case = _host_func_case(op, stmt, self.sync, env, self.busy_stream(env))
            elif base != op:
                case = Case(make_loop(stmt + "\n" + self.sync, **env))
            else:
                sync = make_stmt(self.sync, **env)
                after = (lambda n, ns: sync()) if op in _ENQUEUES else None
                case = Case(make_loop(stmt, **env), after=after)
        except BaseException:
            _close_quietly(closers)
            raise
        case.closers = closers
        case.note = note
        return case


def _callbacks(env):
    """Callbacks that count their runs into env['box'][0] (1-arg and 3-arg)."""
    box = [0]

    def cb(arg):
        box[0] += 1

    def cb3(stream, status, arg):
        box[0] += 1

    env.update(box=box, cb=cb, cb3=cb3)
    return env


def _host_func_case(op, enqueue, sync_src, env, busy):
    box = env["box"]
    sync = make_stmt(sync_src, **env)
    expected = [0]

    def check(n):
        # A callback that did not run by the synchronize would make a
        # round trip look cheaper than it is.
        expected[0] += n
        if box[0] != expected[0]:
            raise RuntimeError(f"{expected[0]} host functions enqueued but {box[0]} ran "
                               "by the synchronize")

    if op == "host_func_enqueue":
        spin_us = [None]

        def before(n):
            import streams.testing
            streams.testing.spin(busy, spin_us[0] or n * 50.0 + 1000.0)

        def after(n, ns):
            drained = busy.query()
            sync()
            check(n)
            # Three times this batch: outlasts the next one without making
            # every batch wait long for the spin to end.
            spin_us[0] = max(1000.0, 3.0 * ns / 1000.0 + 500.0)
            return drained

        return Case(make_loop(enqueue, **env), before=before, after=after)

    if op == "host_func_round_trip":
        timed = make_loop(enqueue + "\n" + sync_src, **env)
    else:
        timed = make_loop(enqueue, tail=sync_src, **env)

    def after(n, ns):
        sync()
        check(n)

    return Case(timed, after=after)


class StreamsPy(Adapter):
    stmts = {
        "stream_query": "s.query()",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record(ev)",
        "event_query": "done.query()",
        "stream_wait_event": "s.wait_event(done)",
        "event_create_destroy": "Event().close()",
        "stream_create_destroy": "Stream().close()",
        "kernel_launch": "launch(s)",
        "host_func_enqueue": "s.launch_host_func(cb, None)",
        "graph_launch": "ex.launch(s)",
    }

    def setup(self):
        import streams
        import streams.testing
        self.streams = streams
        streams.synchronize_device()    # creates the context now, and fails if it can't
        # The kernel and graph APIs are newer than the rest: use them where
        # this build has them, and say so in the cell's note.
        self.has_launch = hasattr(streams.Stream, "launch") and hasattr(streams, "Module")
        self.has_graphs = (hasattr(streams.Stream, "begin_capture")
                           and hasattr(streams.Stream, "end_capture")
                           and hasattr(streams, "Graph"))
        if not self.has_graphs:
            why = "not available yet: streams has no Graph API"
            self.na = {"graph_launch": why, "graph_launch_sync": why}

    def info(self):
        return {"versions": {"streams": streams_info()},
                "apis": {"Stream.launch": self.has_launch, "graphs": self.has_graphs}}

    def _launcher(self, s, env):
        """Set ``env`` up for an empty-kernel launch on ``s``; returns the
        statement, a set-up-only launch function, and the cell's note."""
        st = self.streams
        fallback = ""
        if self.has_launch:
            try:
                mod = st.Module.from_ptx(self.ptx().decode("ascii"))
                env["_closers"].append(mod.close)
                k = env["k"] = mod.get_kernel("streams_empty")
                s.launch(k, 1, 1)
                s.synchronize()
                return ("s.launch(k, 1, 1)", lambda stream: stream.launch(k, 1, 1),
                        "Stream.launch(k, 1, 1) of Module.from_ptx (the shared PTX)")
            except Exception as exc:
                env.pop("k", None)
                fallback = f"Stream.launch failed ({_describe(exc)}), so: "
        launch = env["launch"] = st.testing.launch_empty
        launch(s)           # loads the kernels now: never inside a capture
        s.synchronize()
        return "launch(s)", launch, fallback + "streams.testing.launch_empty(s)"

    def env(self, op):
        st = self.streams
        s, other, ev, done = st.Stream(), st.Stream(), st.Event(), st.Event()
        other.record(done)
        other.synchronize()
        env = {"s": s, "ev": ev, "done": done, "Event": st.Event, "Stream": st.Stream,
               "_closers": [s.close, other.close, ev.close, done.close]}
        if op.startswith(("kernel", "graph")):
            stmt, launch, note = self._launcher(s, env)
            self.stmts = dict(self.stmts, kernel_launch=stmt)
            self.notes = {"kernel_launch": note}
            if op.startswith("graph"):
                s.begin_capture()
                try:
                    for _ in range(GRAPH_KERNELS):
                        launch(s)
                finally:
                    g = s.end_capture()
                env["_closers"].append(getattr(g, "close", lambda: None))
                ex = env["ex"] = g.instantiate()
                env["_closers"].append(getattr(ex, "close", lambda: None))
                if hasattr(ex, "upload"):
                    ex.upload(s)
                s.synchronize()
                self.notes["graph_launch"] = ("GraphExec.launch(s) of Stream.begin_capture/"
                                              f"end_capture + Graph.instantiate; kernels: {note}")
        return _callbacks(env)

    def busy_stream(self, env):
        return env["s"]


class StreamsCy(Adapter):
    """The nogil C-level methods, timed by benchmarks/cy_bench.pyx itself."""

    def setup(self):
        import streams
        if not self.cy_module:
            raise RuntimeError("no compiled Cython benchmark module was given")
        spec = importlib.util.spec_from_file_location(_CY_MODULE, self.cy_module)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)
        self.streams = streams
        streams.synchronize_device()

    def info(self):
        import Cython
        return {"versions": {"streams": streams_info(), "cython_bench_module": self.cy_module,
                             "cython_installed": Cython.__version__}}

    def make_case(self, op):
        if op not in self.mod.OPS:
            raise NotAvailable("no C-level (cimport) API for this operation")
        st = self.streams
        s, other, ev, done = st.Stream(), st.Stream(), st.Event(), st.Event()
        other.record(done)
        other.synchronize()
        closers = [s.close, other.close, ev.close, done.close]
        prepared = graph = None
        note = None
        try:
            if op.startswith(("kernel", "graph")):
                mod = st.Module.from_ptx(self.ptx().decode("ascii"))
                closers.append(mod.close)
                prepared = mod.get_kernel("streams_empty").prepare(1, 1)
                prepared.launch(s)
                s.synchronize()
                note = "PreparedLaunch.c_launch of Kernel.prepare(1, 1)"
            if op.startswith("graph"):
                s.begin_capture()
                try:
                    for _ in range(GRAPH_KERNELS):
                        prepared.launch(s)
                finally:
                    g = s.end_capture()
                closers.append(g.close)
                graph = g.instantiate()
                closers.append(graph.close)
                graph.upload(s)
                s.synchronize()
                note = "GraphExec.c_launch; 10 captured PreparedLaunch kernels"
        except BaseException:
            _close_quietly(closers)
            raise
        run, mod_op = self.mod.run_batch, op

        def timed(n):
            return run(mod_op, s, ev, done, n, prepared, graph)

        after = (lambda n, ns: s.synchronize()) if op in _ENQUEUES else None
        return Case(timed, after=after, closers=closers, note=note)


class Cupy(Adapter):
    stmts = {
        "stream_query": "s.done",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record(ev)",
        "event_query": "done.done",
        "stream_wait_event": "s.wait_event(done)",
        "event_create_destroy": "E(disable_timing=True)",
        "stream_create_destroy": "S()",
        "kernel_launch": "k(g1, g1, (), 0, s)",
        "host_func_enqueue": "s.launch_host_func(cb, None)",
        "graph_launch": "g.launch(s)",
    }
    notes = {
        "stream_query": "Stream.done",
        "event_create_destroy": "destroyed when the Event is dropped (no close())",
        "stream_create_destroy": "destroyed when the Stream is dropped (no close())",
        "kernel_launch": "cupy.cuda.function.Function of the shared PTX",
        "graph_launch": "begin_capture/end_capture, Graph.launch(s)",
    }

    def setup(self):
        import cupy
        self.cp = cupy
        cupy.cuda.Device(0).use()
        cupy.cuda.Stream().synchronize()

    def info(self):
        cp = self.cp
        rt = cp.cuda.runtime
        return {"versions": {"cupy": cp.__version__,
                             "cuda_runtime": rt.runtimeGetVersion(),
                             "driver": rt.driverGetVersion()},
                "device": _decode(rt.getDeviceProperties(0).get("name"))}

    def env(self, op):
        cp = self.cp
        s, other = cp.cuda.Stream(), cp.cuda.Stream()
        ev, done = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": cp.cuda.Event,
               "S": cp.cuda.Stream, "g1": (1,)}
        if op.startswith(("kernel", "graph")):
            mod = cp.cuda.function.Module()
            mod.load(self.ptx())
            k = env["k"] = mod.get_function("streams_empty")
            env["mod"] = mod
            if op.startswith("graph"):
                s.begin_capture()
                try:
                    for _ in range(GRAPH_KERNELS):
                        k((1,), (1,), (), 0, s)
                finally:
                    g = s.end_capture()
                g.upload(s)
                s.synchronize()
                env["g"] = g
        return _callbacks(env)

    def busy_stream(self, env):
        return _spin_wrapper(env["s"].ptr)


def _decode(x):
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


class Torch(Adapter):
    stmts = {
        "stream_query": "s.query()",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record_event(ev)",
        "event_query": "done.query()",
        "stream_wait_event": "s.wait_event(done)",
        "event_create_destroy": "E().record(s)",
        "stream_create_destroy": "S()",
        "kernel_launch": "k(a)",
        "graph_launch": "g.replay()",
    }
    na = {op: "PyTorch has no host-function API" for op in _HOST_FUNC_OPS}
    notes = {
        "event_create_destroy": "Event() + record(s) + drop: torch creates the CUDA "
                                "event lazily, at the first record",
        "stream_create_destroy": "torch.cuda.Stream() takes a stream from torch's pool: "
                                 "no cudaStreamCreate/Destroy",
    }

    def setup(self):
        import torch
        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch.cuda.set_device(0)
        torch.cuda.synchronize()

    def info(self):
        t = self.torch
        return {"versions": {"torch": t.__version__, "cuda": t.version.cuda},
                "device": t.cuda.get_device_name(0)}

    def env(self, op):
        t = self.torch
        s, other = t.cuda.Stream(), t.cuda.Stream()
        t.cuda.set_stream(s)    # kernels and graph replays go to the current stream
        ev, done = t.cuda.Event(), t.cuda.Event()
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": t.cuda.Event,
               "S": t.cuda.Stream}
        if op.startswith(("kernel", "graph")):
            sleep = getattr(t.cuda, "_sleep", None)
            if sleep is not None:
                env["k"], env["a"] = sleep, 0
                label = "torch.cuda._sleep(0), a 1-thread kernel (private API)"
            else:
                env["k"], env["a"] = t.Tensor.zero_, t.zeros(1, device="cuda")
                label = "x.zero_() on a 1-element tensor (not an empty kernel)"
            env["k"](env["a"])
            s.synchronize()
            if op.startswith("graph"):
                g = t.cuda.CUDAGraph()
                with t.cuda.graph(g):
                    for _ in range(GRAPH_KERNELS):
                        env["k"](env["a"])
                t.cuda.set_stream(s)
                env["g"] = g
                label = f"CUDAGraph.replay() of 10 captured {label}"
            self.notes = dict(self.notes, **{op: label})
        return env


class CudaCore(Adapter):
    stmts = {
        "stream_synchronize": "s.sync()",
        "event_record": "s.record(ev)",
        "event_query": "done.is_done",
        "stream_wait_event": "s.wait(done)",
        "event_create_destroy": "d.create_event().close()",
        "stream_create_destroy": "d.create_stream().close()",
        "kernel_launch": "L(s, cfg, k)",
        "graph_launch": "g.launch(s)",
    }
    sync = "s.sync()"
    na = {op: "cuda.core has no host-function API on streams" for op in _HOST_FUNC_OPS}
    notes = {
        "stream_create_destroy": "Device.create_stream() with its default options",
        "kernel_launch": "launch() of ObjectCode.from_ptx (the shared PTX)",
        "graph_launch": "GraphBuilder capture, Graph.launch(s)",
    }

    def setup(self):
        try:
            import cuda.core as cc
            if not hasattr(cc, "Device"):      # older versions: only .experimental
                raise ImportError
        except ImportError:
            import cuda.core.experimental as cc
        self.cc = cc
        self.dev = cc.Device(0)
        self.dev.set_current()
        # Newer versions may grow a query; older ones have none.
        if hasattr(cc.Stream, "is_done"):
            self.stmts = dict(self.stmts, stream_query="s.is_done")
        else:
            self.na = dict(self.na, stream_query="cuda.core.Stream has no query")

    def info(self):
        ver = getattr(self.cc, "__version__", None) or _dist_version("cuda-core")
        return {"versions": {"cuda.core": ver}, "device": getattr(self.dev, "name", None)}

    def env(self, op):
        d = self.dev
        s, other = d.create_stream(), d.create_stream()
        ev = d.create_event()
        done = other.record()
        other.sync()
        closers = [s.close, other.close, ev.close, done.close]
        env = {"s": s, "ev": ev, "done": done, "d": d, "_closers": closers}
        if op.startswith(("kernel", "graph")):
            oc_cls = self.cc.ObjectCode
            ptx = self.ptx()
            oc = oc_cls.from_ptx(ptx) if hasattr(oc_cls, "from_ptx") else oc_cls(ptx, "ptx")
            k = oc.get_kernel("streams_empty")
            cfg = self.cc.LaunchConfig(grid=1, block=1)
            env.update(L=self.cc.launch, cfg=cfg, k=k, oc=oc)
            if op.startswith("graph"):
                gb = s.create_graph_builder()
                gb.begin_building()
                for _ in range(GRAPH_KERNELS):
                    self.cc.launch(gb, cfg, k)
                gb.end_building()
                g = gb.complete()
                g.upload(s)
                s.sync()
                env["g"] = g
                closers += [gb.close, g.close]
        return env


class CudaBindings(Adapter):
    # Every call's error code is checked, as streams and the C floor check theirs.
    stmts = {
        "stream_query": "e, = q(s)\nif e: fail(e)",
        "stream_synchronize": "e, = sy(s)\nif e: fail(e)",
        "event_record": "e, = rec(ev, s)\nif e: fail(e)",
        "event_query": "e, = eq(done)\nif e: fail(e)",
        "stream_wait_event": "e, = w(s, done, 0)\nif e: fail(e)",
        "event_create_destroy": "e, x = ec(fl)\nif e: fail(e)\ne, = ed(x)\nif e: fail(e)",
        "stream_create_destroy": "e, x = sc(sf)\nif e: fail(e)\ne, = sd(x)\nif e: fail(e)",
        "kernel_launch": "e, = L(k, 1, 1, 1, 1, 1, 1, 0, s, None, 0)\nif e: fail(e)",
        "host_func_enqueue": "e, = LH(s, h, None)\nif e: fail(e)",
        "graph_launch": "e, = GL(ex, s)\nif e: fail(e)",
    }
    sync = "e, = sy(s)\nif e: fail(e)"
    notes = {
        "kernel_launch": "driver cuLaunchKernel of cuLibraryGetKernel (the runtime "
                         "bindings have no cudaLaunchKernel)",
        "host_func_enqueue": "cudaLaunchHostFunc of a ctypes CFUNCTYPE callback",
        "graph_launch": "cudaGraphLaunch of cudaStreamBeginCapture + 10 cuLaunchKernel",
    }

    def setup(self):
        try:
            from cuda.bindings import driver, runtime
        except ImportError:
            from cuda import cuda as driver, cudart as runtime
        self.rt, self.drv = runtime, driver
        self.ck(runtime.cudaSetDevice(0))
        self.ck(runtime.cudaFree(0))

    @staticmethod
    def ck(result):
        err = result[0]
        if err:
            raise RuntimeError(f"CUDA error {err!r}")
        return result[1] if len(result) == 2 else result[1:]

    def info(self):
        import cuda.bindings
        rt = self.rt
        return {"versions": {"cuda.bindings": getattr(cuda.bindings, "__version__", None)
                             or _dist_version("cuda-bindings"),
                             "cuda_runtime": self.ck(rt.cudaRuntimeGetVersion()),
                             "driver": self.ck(rt.cudaDriverGetVersion())}}

    def env(self, op):
        rt, drv, ck = self.rt, self.drv, self.ck
        s = ck(rt.cudaStreamCreateWithFlags(rt.cudaStreamDefault))
        other = ck(rt.cudaStreamCreateWithFlags(rt.cudaStreamDefault))
        ev = ck(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming))
        done = ck(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming))
        ck(rt.cudaEventRecord(done, other))
        ck(rt.cudaStreamSynchronize(other))

        def fail(e):
            raise RuntimeError(f"CUDA error {e!r}")

        closers = [lambda: rt.cudaStreamDestroy(s), lambda: rt.cudaStreamDestroy(other),
                   lambda: rt.cudaEventDestroy(ev), lambda: rt.cudaEventDestroy(done)]
        env = {"s": s, "ev": ev, "done": done, "fail": fail, "_closers": closers,
               "q": rt.cudaStreamQuery, "sy": rt.cudaStreamSynchronize,
               "rec": rt.cudaEventRecord, "eq": rt.cudaEventQuery, "w": rt.cudaStreamWaitEvent,
               "ec": rt.cudaEventCreateWithFlags, "ed": rt.cudaEventDestroy,
               "fl": rt.cudaEventDisableTiming, "sc": rt.cudaStreamCreateWithFlags,
               "sd": rt.cudaStreamDestroy, "sf": rt.cudaStreamDefault,
               "GL": rt.cudaGraphLaunch, "LH": rt.cudaLaunchHostFunc,
               "L": drv.cuLaunchKernel}
        if op.startswith(("kernel", "graph")):
            lib = ck(drv.cuLibraryLoadData(self.ptx(), None, None, 0, None, None, 0))
            closers.append(lambda: drv.cuLibraryUnload(lib))
            # As a CUfunction, which cuLaunchKernel accepts for a CUkernel: the
            # binding then takes its fast path instead of converting per call.
            k = env["k"] = drv.CUfunction(int(ck(drv.cuLibraryGetKernel(lib, b"streams_empty"))))
            if op.startswith("graph"):
                mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
                ck(rt.cudaStreamBeginCapture(s, mode))
                try:
                    for _ in range(GRAPH_KERNELS):
                        ck(drv.cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s, None, 0))
                finally:
                    graph = ck(rt.cudaStreamEndCapture(s))
                ex = env["ex"] = ck(rt.cudaGraphInstantiate(graph, 0))
                closers += [lambda: rt.cudaGraphDestroy(graph),
                            lambda: rt.cudaGraphExecDestroy(ex)]
                ck(rt.cudaGraphUpload(ex, s))
                ck(rt.cudaStreamSynchronize(s))
        if op in _HOST_FUNC_OPS:
            import ctypes
            _callbacks(env)
            box = env["box"]

            def count(_):
                box[0] += 1

            cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(count)
            env["cfn"] = cfn    # the C thunk must outlive every enqueued call
            env["h"] = rt.cudaHostFn_t(ctypes.cast(cfn, ctypes.c_void_p).value)
        return env

    def busy_stream(self, env):
        return _spin_wrapper(env["s"])


class NumbaCuda(Adapter):
    stmts = {
        "stream_synchronize": "s.synchronize()",
        "event_record": "ev.record(s)",
        "event_query": "done.query()",
        "stream_wait_event": "done.wait(s)",
        "event_create_destroy": "E(timing=False)",
        "stream_create_destroy": "S()",
        "kernel_launch": "k[1, 1, s]()",
        "host_func_enqueue": "s.add_callback(cb3, None)",
    }
    na = {"stream_query": "numba.cuda streams have no query",
          "graph_launch": "numba.cuda has no graph API",
          "graph_launch_sync": "numba.cuda has no graph API"}
    notes = {
        "event_create_destroy": "numba defers the destroy to its deallocation queue",
        "stream_create_destroy": "numba defers the destroy to its deallocation queue",
        "kernel_launch": "@cuda.jit empty kernel (numba's own compile, not the shared PTX)",
        "host_func_enqueue": "Stream.add_callback (cuStreamAddCallback)",
    }

    def setup(self):
        from numba import cuda
        self.cuda = cuda
        if not cuda.is_available():
            raise RuntimeError("numba.cuda.is_available() is False")
        cuda.select_device(0)
        self.kernel = None

    def info(self):
        import numba
        cuda = self.cuda
        rt = None
        try:
            rt = cuda.runtime.get_version()
        except Exception:
            pass
        return {"versions": {"numba": numba.__version__,
                             "numba-cuda": _dist_version("numba-cuda"),
                             "cuda_runtime": list(rt) if rt else None},
                "device": _decode(getattr(cuda.get_current_device(), "name", None))}

    def env(self, op):
        cuda = self.cuda
        s, other = cuda.stream(), cuda.stream()
        ev, done = cuda.event(timing=False), cuda.event(timing=False)
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": cuda.event,
               "S": cuda.stream}
        if op.startswith("kernel"):
            if self.kernel is None:
                @cuda.jit
                def streams_empty():
                    pass
                self.kernel = streams_empty
            env["k"] = self.kernel
            self.kernel[1, 1, s]()      # compiles now, not in the first batch
            s.synchronize()
        return _callbacks(env)

    def busy_stream(self, env):
        return _spin_wrapper(env["s"].handle)


class Noop(Adapter):
    """Times empty Python calls; STREAMS_BENCH_NOOP_FAIL / _CRASH name an
    operation that raises / kills the worker, to test those paths."""

    na = {"graph_launch": "no graphs here (self-test of the n/a path)",
          "graph_launch_sync": "no graphs here (self-test of the n/a path)"}

    def info(self):
        return {"versions": {"python": platform.python_version()}, "device": None}

    def make_case(self, op):
        if op in self.na:
            raise NotAvailable(self.na[op])
        if op == os.environ.get("STREAMS_BENCH_NOOP_CRASH"):
            os._exit(3)
        if op == os.environ.get("STREAMS_BENCH_NOOP_FAIL"):
            raise RuntimeError(f"asked to fail {op}")

        def f():
            pass

        return Case(make_loop("f()", f=f), note="self-test" if op == "stream_query" else None)


ADAPTERS = {"streams-py": StreamsPy, "streams-cy": StreamsCy, "cupy": Cupy, "torch": Torch,
            "cuda-core": CudaCore, "cuda-bindings": CudaBindings, "numba-cuda": NumbaCuda,
            "noop": Noop}


def _dist_version(name):
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None


def _describe(exc):
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def worker_main(name, ptx_path=None, cy_module=None):
    """Serve requests for one contender on stdin/stdout (see _Worker)."""
    # The protocol gets a private copy of stdout; fd 1 becomes stderr, so
    # whatever a library prints cannot corrupt an answer.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    adapter = ADAPTERS[name](ptx_path, cy_module)
    ready, setup_error = False, None
    case_op, case, case_na = None, None, None
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        if not ready and setup_error is None:
            try:
                adapter.setup()
                ready = True
            except Exception as exc:
                setup_error = "setup failed: " + _describe(exc)
        if parts[0] == "info":
            if setup_error:
                reply({"ok": False, "error": setup_error})
                continue
            try:
                reply(dict({"ok": True}, **adapter.info()))
            except Exception as exc:
                reply({"ok": True, "info_error": _describe(exc)})
            continue
        if parts[0] != "run" or len(parts) != 5:
            reply({"ok": False, "error": f"bad request {line.strip()!r}"})
            continue
        if setup_error:
            reply({"ok": False, "error": setup_error})
            continue
        op = parts[1]
        try:
            iters, batches, warmup = int(parts[2]), int(parts[3]), int(parts[4])
        except ValueError:
            reply({"ok": False, "error": f"bad request {line.strip()!r}"})
            continue
        if op not in OP_BY_NAME:
            reply({"ok": False, "na": f"unknown operation {op}"})
            continue
        if op != case_op:
            if case is not None:
                case.close()
            case_op, case, case_na = op, None, None
            gc.collect()
            try:
                case = adapter.make_case(op)
            except NotAvailable as exc:
                case_na = str(exc)
            except Exception as exc:
                case_op = None      # a later request for it tries again
                reply({"ok": False, "error": "set-up failed: " + _describe(exc)})
                continue
        if case_na is not None:
            reply({"ok": False, "na": case_na})
            continue
        try:
            ns, drained = run_batches(case, iters, batches, warmup)
        except Exception as exc:
            case.close()
            case_op, case = None, None
            reply({"ok": False, "error": _describe(exc)})
            continue
        answer = {"ok": True, "op": op, "iters": iters, "drained": drained, "ns": ns}
        if case.note:
            answer["note"] = case.note
        reply(answer)
    if case is not None:
        case.close()
    proto.flush()
    # Skip interpreter teardown: some libraries are slow, or hang, at exit,
    # and the process is done.
    os._exit(0)


# ---------------------------------------------------------------------------
# Harness side: worker processes, rounds, results
# ---------------------------------------------------------------------------

class WorkerDied(Exception):
    pass


class Worker:
    """A contender's process: one request line in, one JSON line out.

    Requests: ``info``, ``run OP ITERS BATCHES WARMUP``, ``quit``.  The C
    floor (bench_c --serve) and the Python workers speak the same lines.
    """

    def __init__(self, name, argv, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.proc = None
        self.errlog = None
        self.starts = 0
        self._buf = b""

    def start(self):
        if self.proc is not None:      # a restart: let go of the dead one's files
            self.kill()
            self._close_files()
        self.errlog = tempfile.TemporaryFile()
        self._buf = b""
        self.starts += 1
        # Its own session: Ctrl-C reaches the harness only, which then
        # stops the workers in order.
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errlog, env=self.env, cwd=self.cwd,
                                     bufsize=0, start_new_session=True)

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, limit=800):
        if self.errlog is None:
            return ""
        try:
            self.errlog.seek(0)
            text = self.errlog.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text[-limit:]

    def _died(self, why):
        rc = self.proc.poll() if self.proc else None
        if rc is None and self.proc is not None:
            self.kill()
            rc = self.proc.poll()
        if rc is not None and rc < 0:
            import signal
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = str(-rc)
            why = f"{why} (killed by {sig})"
        elif rc is not None:
            why = f"{why} (exit status {rc})"
        tail = self.stderr_tail()
        return WorkerDied(why + (f"; its stderr ends: {tail}" if tail else ""))

    def ask(self, line, timeout):
        if not self.alive:
            raise self._died("worker is not running")
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise self._died("worker exited") from None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise self._died(f"no answer within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._died("worker exited")
                self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\n")
        try:
            answer = json.loads(raw)
        except ValueError:
            self.kill()
            raise self._died(f"garbled answer {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            self.kill()
            raise self._died(f"garbled answer {raw[:200]!r}")
        return answer

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_files()

    def _close_files(self):
        for f in (self.proc.stdin, self.proc.stdout, self.errlog):
            try:
                f.close()
            except (OSError, AttributeError):
                pass


class Progress:
    """One status line on stderr (rewritten on a terminal, appended otherwise)."""

    def __init__(self, total, stream=None, enabled=True):
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_key = None
        self._width = 0

    def step(self, op, rnd, rounds, contender):
        self.done += 1
        if not self.enabled:
            return
        text = f"[{self.done:>4}/{self.total}] {op} round {rnd + 1}/{rounds}: {contender}"
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
        elif (op, rnd) != self._last_key:
            self._last_key = (op, rnd)
            self.stream.write(f"[{self.done:>4}/{self.total}] {op} round {rnd + 1}/{rounds}\n")
            self.stream.flush()

    def skip(self, n=1):
        self.done += n

    def message(self, text):
        if not self.enabled:
            return
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


class Config:
    def __init__(self, ops=None, contenders=None, quick=False, rounds=None, batches=None,
                 warmup=1, scale=None, cache_dir=None, timeout=180.0, progress=True,
                 source_dir=None):
        base = QUICK if quick else FULL
        self.ops = list(ops or [op.name for op in OPS])
        self.contenders = list(contenders or DEFAULT_CONTENDERS)
        self.quick = quick
        self.rounds = rounds or base["rounds"]
        self.batches = batches or base["batches"]
        self.warmup = warmup
        self.scale = scale if scale is not None else base["scale"]
        self.cache_dir = os.path.abspath(cache_dir or default_cache_dir())
        self.timeout = timeout
        self.progress = progress
        self.source_dir = source_dir or source_root()

    def iters(self, op):
        return max(1, int(round(OP_BY_NAME[op].iters * self.scale)))

    def as_dict(self):
        return {"quick": self.quick, "rounds": self.rounds, "batches": self.batches,
                "warmup": self.warmup, "scale": self.scale, "ops": self.ops,
                "contenders": self.contenders,
                "iters": {op: self.iters(op) for op in self.ops}}


def new_doc(config):
    return {
        "schema": SCHEMA,
        "synthetic": False,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), "-m", "streams.bench"]
                            + sys.argv[1:]),
        "config": config.as_dict(),
        "machine": {},
        "contenders": {c: {"label": CONTENDER_BY_NAME[c].label,
                           "about": CONTENDER_BY_NAME[c].about, "status": "ok"}
                       for c in config.contenders},
        "ops": {op: {"label": OP_BY_NAME[op].label, "about": OP_BY_NAME[op].about,
                     "targets": dict(OP_BY_NAME[op].targets)} for op in config.ops},
        "results": {op: {} for op in config.ops},
    }


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    fields = "name,driver_version,memory.total,clocks.max.sm,pstate,persistence_mode"
    try:
        proc = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(","))))
            for line in proc.stdout.strip().splitlines()]


def machine_info():
    return {"hostname": platform.node(), "os": platform.platform(), "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
            "python_implementation": platform.python_implementation(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "nvidia_smi": _nvidia_smi()}


def _module_present(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _compiler_version(cc):
    try:
        proc = subprocess.run(cc + ["--version"], capture_output=True, text=True, timeout=30)
        return proc.stdout.splitlines()[0] if proc.stdout else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def _package_parent():
    """The folder that holds the ``streams`` this harness runs from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_worker_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_parent(), env.get("PYTHONPATH")) if p)
    return env


def _prepare(config, doc, progress):
    """Build what is needed and start one worker per usable contender."""
    ptx_path, ptx_error = None, None
    try:
        ptx = builtin_ptx(config.source_dir)
        d = os.path.join(config.cache_dir, "ptx")
        os.makedirs(d, exist_ok=True)
        ptx_path = os.path.join(d, "streams_builtin.ptx")
        with open(ptx_path, "w") as f:
            f.write(ptx)
    except (OSError, ValueError) as exc:
        ptx_error = str(exc)
    workers = {}
    for name in config.contenders:
        entry = doc["contenders"][name]
        spec = CONTENDER_BY_NAME[name]
        if name == "c":
            progress.message("building the C floor ...")
            exe, why = build_c_floor(config.cache_dir, root=config.source_dir)
            if exe is None:
                entry.update(status="unavailable", reason=why)
                progress.message(f"C floor: unavailable ({why})")
                continue
            cc = compiler()
            entry["versions"] = {"compiler": _compiler_version(cc) if cc else None,
                                 "cuda": find_cuda()[0]}
            argv = [exe, "--serve"]
            env = cwd = None
        else:
            if spec.module and not _module_present(spec.module):
                entry.update(status="missing", reason=f"{spec.module} is not importable")
                continue
            argv = [sys.executable, "-m", "streams.bench", "--worker", name]
            if ptx_path:
                argv += ["--ptx", ptx_path]
            if name == "streams-cy":
                progress.message("building the Cython contender ...")
                mod, why = build_cython_bench(config.cache_dir, root=config.source_dir)
                if mod is None:
                    entry.update(status="unavailable", reason=why)
                    progress.message(f"streams (Cython): unavailable ({why})")
                    continue
                argv += ["--cy-module", mod]
            env = _python_worker_env()
            # `-m` puts the cwd first on sys.path: a source checkout there
            # (no compiled module) would shadow an installed streams.
            cwd = _package_parent()
        if ptx_error and name != "c":
            entry["ptx_error"] = ptx_error
        progress.message(f"starting {spec.label} ...")
        w = Worker(name, argv, env, cwd)
        try:
            w.start()
            info = w.ask("info", max(config.timeout, 300.0))
        except (OSError, WorkerDied) as exc:
            w.kill()
            entry.update(status="error", reason=str(exc))
            progress.message(f"{spec.label}: {exc}")
            continue
        if not info.get("ok"):
            w.stop()
            entry.update(status="error", reason=info.get("error", "no reason given"))
            progress.message(f"{spec.label}: {entry['reason']}")
            continue
        info.pop("ok", None)
        entry.setdefault("versions", {}).update(info.pop("versions", {}) or {})
        entry["info"] = info
        workers[name] = w
    return workers


def _gpu_facts(doc):
    """GPU name, capability, driver and runtime, from the streams or C worker."""
    sp = doc["contenders"].get("streams-py", {}).get("versions", {}).get("streams")
    if sp and sp.get("devices"):
        dev = sp["devices"][0]
        return {"name": dev["name"], "compute_capability": dev["compute_capability"],
                "driver_cuda_version": sp.get("driver_version"),
                "streams_cuda_runtime": sp.get("runtime_version"), "source": "streams"}
    c = doc["contenders"].get("c", {}).get("info")
    if c and c.get("device"):
        return {"name": c["device"], "compute_capability": c.get("compute_capability"),
                "driver_cuda_version": c.get("driver_version"),
                "streams_cuda_runtime": c.get("runtime_version"), "source": "C floor"}
    info = streams_info()
    if info["devices"]:
        dev = info["devices"][0]
        return {"name": dev["name"], "compute_capability": dev["compute_capability"],
                "driver_cuda_version": info["driver_version"],
                "streams_cuda_runtime": info["runtime_version"], "source": "streams (harness)"}
    return None


def run_benchmark(config, progress=None):
    """Measure; returns the result document (see validate_result)."""
    doc = new_doc(config)
    doc["machine"] = machine_info()
    progress = progress or Progress(0, enabled=config.progress)
    workers = _prepare(config, doc, progress)
    active = [c for c in config.contenders if c in workers]
    progress.total = max(1, len(config.ops) * config.rounds * len(active))
    try:
        for op in config.ops:
            _measure_op(op, config, doc, workers, active, progress)
    except KeyboardInterrupt:
        # What was measured is still worth a table and a file.
        doc["interrupted"] = True
    finally:
        progress.close()
        for w in workers.values():
            w.stop()
        doc["machine"]["gpu"] = _gpu_facts(doc)
        finalize(doc)
    return doc


def _measure_op(op, config, doc, workers, active, progress):
    iters = config.iters(op)
    cells = {c: {"status": "ok", "ns": [], "iters": iters, "drained": 0} for c in active}
    # A worker that died on an earlier operation gets a fresh process (a
    # few times): one bad operation does not blank the rest of its column.
    for c in active:
        w = workers[c]
        if not w.alive:
            if w.starts >= 4:
                cells[c] = {"status": "error", "reason": "worker died too often; gave up"}
                continue
            try:
                w.start()
                ans = w.ask("info", max(config.timeout, 300.0))
                if not ans.get("ok"):
                    raise WorkerDied(ans.get("error", "restart failed"))
            except (OSError, WorkerDied) as exc:
                cells[c] = {"status": "error", "reason": f"restart failed: {exc}"}
    request = f"run {op} {iters} {config.batches} {config.warmup}"
    for rnd in range(config.rounds):
        # Each round starts with a different contender, so none is always
        # the one that runs right after another's burst of work.
        k = rnd % len(active) if active else 0
        for c in active[k:] + active[:k]:
            cell = cells[c]
            if cell["status"] != "ok":
                progress.skip()
                continue
            progress.step(op, rnd, config.rounds, CONTENDER_BY_NAME[c].label)
            try:
                ans = workers[c].ask(request, config.timeout)
            except WorkerDied as exc:
                cells[c] = {"status": "error", "reason": str(exc)}
                progress.message(f"{CONTENDER_BY_NAME[c].label}, {op}: {exc}")
                continue
            if ans.get("ok"):
                ns = ans.get("ns") or []
                if not all(isinstance(x, (int, float)) and x > 0 for x in ns):
                    cells[c] = {"status": "error", "reason": f"bad numbers {ns[:5]!r}"}
                    continue
                cell["ns"].extend(float(x) for x in ns)
                cell["drained"] += int(ans.get("drained", 0))
                if ans.get("note"):
                    cell["note"] = ans["note"]
            elif "na" in ans:
                cells[c] = {"status": "n/a", "reason": ans["na"]}
            else:
                cells[c] = {"status": "error", "reason": ans.get("error", "no reason given")}
    for c in active:
        cell = cells[c]
        if cell["status"] == "ok":
            if not cell["ns"]:
                cell.update(status="error", reason="no numbers came back")
            elif cell["drained"]:
                extra = (f"{cell['drained']} of {len(cell['ns'])} batches outlasted the spin "
                         "kernel: callbacks may have run during their timing")
                cell["note"] = f"{cell['note']}; {extra}" if cell.get("note") else extra
    for c in config.contenders:
        entry = doc["contenders"][c]
        if c in cells:
            doc["results"][op][c] = cells[c]
        else:
            doc["results"][op][c] = {"status": entry["status"] if entry["status"] != "ok"
                                     else "error",
                                     "reason": entry.get("reason", "not run")}


def finalize(doc):
    """Recompute every derived number from the raw per-batch values.

    Stored results are re-derived on load too: the table and chart never
    trust numbers that the raw data does not support.
    """
    summary = {"pass": 0, "miss": 0, "not_measured": 0, "misses": []}
    for op, row in doc["results"].items():
        targets = doc["ops"].get(op, {}).get("targets", {})
        base = row.get("c")
        base_med = None
        if base and base.get("status") == "ok" and base.get("ns"):
            base["stats"] = summarize(base["ns"])
            base_med = base["stats"]["median"]
        for c, cell in row.items():
            if cell.get("status") == "ok" and cell.get("ns"):
                cell["stats"] = summarize(cell["ns"])
                cell["ratio_to_c"] = (cell["stats"]["median"] / base_med
                                      if base_med and c != "c" else None)
            else:
                cell.pop("stats", None)
                cell["ratio_to_c"] = None
            target = targets.get(c)
            cell["target"] = target
            if target is None:
                cell["verdict"] = None
            elif cell["ratio_to_c"] is None:
                cell["verdict"] = "not measured"
                summary["not_measured"] += 1
            elif cell["ratio_to_c"] <= target:
                cell["verdict"] = "pass"
                summary["pass"] += 1
            else:
                cell["verdict"] = "miss"
                summary["miss"] += 1
                summary["misses"].append(
                    {"op": op, "contender": c, "ratio": round(cell["ratio_to_c"], 3),
                     "target": target})
        for c in targets:
            if c not in row and c in doc.get("contenders", {}):
                summary["not_measured"] += 1
    doc["summary"] = summary
    return doc


# ---------------------------------------------------------------------------
# Stored results: schema, table, chart
# ---------------------------------------------------------------------------

class ResultError(ValueError):
    """A stored result does not follow the schema; ``problems`` lists why."""

    def __init__(self, problems):
        self.problems = problems
        super().__init__("not a streams benchmark result:\n  " + "\n  ".join(problems))


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_result(doc):
    """Raise ResultError unless ``doc`` is a result document of this schema."""
    p = []
    if not isinstance(doc, dict):
        raise ResultError(["the top level is not an object"])
    if doc.get("schema") != SCHEMA:
        p.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    if not isinstance(doc.get("synthetic"), bool):
        p.append("synthetic must be true or false")
    for key in ("created",):
        if not isinstance(doc.get(key), str):
            p.append(f"{key} must be a string")
    for key in ("machine", "config", "contenders", "ops", "results"):
        if not isinstance(doc.get(key), dict):
            p.append(f"{key} must be an object")
    if p:
        raise ResultError(p)
    cfg = doc["config"]
    for key in ("rounds", "batches"):
        if not (isinstance(cfg.get(key), int) and cfg[key] >= 1):
            p.append(f"config.{key} must be an integer >= 1")
    for key in ("ops", "contenders"):
        if not (isinstance(cfg.get(key), list) and all(isinstance(x, str) for x in cfg[key])):
            p.append(f"config.{key} must be a list of names")
    for name, entry in doc["contenders"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            p.append(f"contenders.{name} needs a label")
        elif entry.get("status") not in CONTENDER_STATUSES:
            p.append(f"contenders.{name}.status must be one of {CONTENDER_STATUSES}")
    for op, entry in doc["ops"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            p.append(f"ops.{op} needs a label")
        elif not isinstance(entry.get("targets"), dict) or not all(
                _is_num(v) and v > 0 for v in entry["targets"].values()):
            p.append(f"ops.{op}.targets must map contenders to ratios > 0")
    for op, row in doc["results"].items():
        if op not in doc["ops"]:
            p.append(f"results.{op}: not in ops")
        if not isinstance(row, dict):
            p.append(f"results.{op} must be an object")
            continue
        for c, cell in row.items():
            where = f"results.{op}.{c}"
            if c not in doc["contenders"]:
                p.append(f"{where}: not in contenders")
            if not isinstance(cell, dict) or cell.get("status") not in CELL_STATUSES:
                p.append(f"{where}.status must be one of {CELL_STATUSES}")
                continue
            if cell["status"] == "ok":
                ns = cell.get("ns")
                if not (isinstance(ns, list) and ns and all(_is_num(x) and x > 0 for x in ns)):
                    p.append(f"{where}.ns must be a non-empty list of positive numbers")
                if not (isinstance(cell.get("iters"), int) and cell["iters"] >= 1):
                    p.append(f"{where}.iters must be an integer >= 1")
            elif not isinstance(cell.get("reason"), str):
                p.append(f"{where}.reason must say why there are no numbers")
    if p:
        raise ResultError(p)


def load_result(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    validate_result(doc)
    return finalize(doc)


def _fmt_ns(x):
    return f"{x:.0f}" if x < 1e6 else f"{x / 1e3:.0f}k"


def _columns(doc, contenders=None):
    names = [c for c in doc["config"]["contenders"] if c in doc["contenders"]]
    names += [c for c in doc["contenders"] if c not in names]
    if contenders:
        names = [c for c in names if c in contenders]
    return names


def _rows(doc, ops=None):
    names = [op for op in doc["config"]["ops"] if op in doc["results"]]
    names += [op for op in doc["results"] if op not in names]
    if ops:
        names = [op for op in names if op in ops]
    return names


def _short(c):
    return {"streams-py": "Py", "streams-cy": "Cy"}.get(c, c)


def render_table(doc, ops=None, contenders=None):
    """The terminal table: rows are operations, columns contenders; a cell
    is the median ns per call, ±half the p10-p90 spread, the ratio to the C
    floor, and ok/MISS against the promised ratio."""
    cols = _columns(doc, contenders)
    rows = _rows(doc, ops)
    notes = []

    def footnote(text):
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    header = ["operation", "target"] + [doc["contenders"][c]["label"] for c in cols]
    table = []
    for op in rows:
        meta = doc["ops"].get(op, {})
        targets = meta.get("targets", {})
        line = [meta.get("label", op),
                " ".join(f"{_short(c)}<={t:g}" for c, t in targets.items()) or "-"]
        for c in cols:
            cell = doc["results"][op].get(c)
            if cell is None:
                line.append("-")
                continue
            st = cell["status"]
            if st == "ok":
                s = cell["stats"]
                spread = (s["p90"] - s["p10"]) / 2 / s["median"] * 100 if s["median"] else 0
                text = f"{_fmt_ns(s['median'])}±{spread:.0f}%"
                if cell.get("ratio_to_c") is not None:
                    text += f" {cell['ratio_to_c']:.2f}x"
                if cell.get("verdict") == "pass":
                    text += " ok"
                elif cell.get("verdict") == "miss":
                    text += " MISS"
                if cell.get("note"):
                    text += footnote(f"{doc['contenders'][c]['label']}: {cell['note']}")
            else:
                text = {"n/a": "n/a", "missing": "missing", "unavailable": "unavail.",
                        "error": "ERROR"}[st]
                # The row names the operation: footnotes without it let one
                # reason shared by many cells (a failed set-up) print once.
                if st in ("n/a", "error"):
                    text += footnote(f"{doc['contenders'][c]['label']}: {cell.get('reason')}")
            line.append(text)
        table.append(line)
    widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]

    def fmt(r):
        return "  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()

    out = []
    m = doc.get("machine", {})
    gpu = m.get("gpu") or {}
    title = "streams launch overhead"
    if doc.get("synthetic"):
        title += " -- SYNTHETIC FIXTURE, NOT A MEASUREMENT"
    if doc.get("interrupted"):
        title += " -- INTERRUPTED, PARTIAL"
    out.append(title)
    facts = [f"GPU: {gpu.get('name', 'unknown')}"]
    if gpu.get("driver_cuda_version"):
        facts.append(f"driver CUDA {_version_string(gpu['driver_cuda_version'])}")
    smi = m.get("nvidia_smi") or []
    if smi and smi[0].get("driver_version"):
        facts.append(f"driver {smi[0]['driver_version']}")
    if m.get("cpu"):
        facts.append(f"CPU: {m['cpu']}")
    if m.get("python"):
        facts.append(f"Python {m['python']}")
    facts.append(doc.get("created", ""))
    out.append(", ".join(f for f in facts if f))
    cfg = doc["config"]
    out.append(f"{cfg.get('rounds')} rounds x {cfg.get('batches')} batches per cell"
               + (" (quick)" if cfg.get("quick") else "")
               + "; cells: median ns/call ±half the p10-p90 spread of per-batch means, "
               "ratio to the C floor, ok/MISS against the target")
    out.append("")
    out.append(fmt(header))
    out.append(fmt(["-" * w for w in widths]))
    out.extend(fmt(r) for r in table)
    out.append("")
    for c in cols:
        entry = doc["contenders"][c]
        if entry.get("status") in ("missing", "unavailable"):
            out.append(f"{entry['label']}: {entry['status']} ({entry.get('reason', '')})")
    summ = doc.get("summary") or {}
    if summ:
        out.append(f"targets: {summ.get('pass', 0)} pass, {summ.get('miss', 0)} miss, "
                   f"{summ.get('not_measured', 0)} not measured")
    for i, text in enumerate(notes, 1):
        out.append(f"[{i}] {text}")
    return "\n".join(out) + "\n"


def render_chart(doc, path, ops=None, contenders=None):
    """A PNG bar chart of every contender's ratio to the C floor (log scale).

    Needs matplotlib (``pip install 'cuda-streams[bench]'``); raises
    ImportError without it, ValueError when there is nothing to compare.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = _rows(doc, ops)
    cols = [c for c in _columns(doc, contenders) if c != "c"]
    data = {c: [doc["results"][op].get(c, {}).get("ratio_to_c") for op in rows] for c in cols}
    cols = [c for c in cols if any(v is not None for v in data[c])]
    if not rows or not cols:
        raise ValueError("no ratios to the C floor to draw (is the C column missing?)")
    n = len(cols)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, 1.6 + len(rows) * (0.2 + 0.1 * n)))
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", [None])
    ys = list(range(len(rows)))
    drawn = []
    for j, c in enumerate(cols):
        pos = [y - 0.4 + height * (j + 0.5) for y in ys]
        pairs = [(p, v) for p, v in zip(pos, data[c]) if v is not None]
        drawn += [v for _, v in pairs]
        ax.barh([p for p, _ in pairs], [v for _, v in pairs], height=height * 0.9,
                label=doc["contenders"][c]["label"], color=colors[j % len(colors)])
        for y, op in zip(pos, rows):
            target = doc["ops"].get(op, {}).get("targets", {}).get(c)
            if target:
                ax.plot([target, target], [y - height / 2, y + height / 2], color="black",
                        linewidth=2)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    lo, hi = min(0.8, min(drawn) * 0.8), max(2.5, max(drawn) * 1.25)
    ax.set_xlim(lo, hi)
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50, 100) if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks(ys)
    ax.set_yticklabels([doc["ops"].get(op, {}).get("label", op) for op in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("median time per call / C floor (log scale; black ticks: streams' targets)")
    gpu = (doc.get("machine", {}).get("gpu") or {}).get("name", "unknown GPU")
    title = f"Launch overhead relative to the C floor\n{gpu}"
    if doc.get("synthetic"):
        title = "SYNTHETIC FIXTURE, NOT A MEASUREMENT\n" + title
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def _names(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad) or '(none given)'}; choose from: "
            + ", ".join(k for k in known if not (what == "contender"
                                                and CONTENDER_BY_NAME[k].hidden)))
    return names


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m streams.bench",
        description="Launch-overhead benchmark of streams against a C floor and its peers "
                    "(CuPy, PyTorch, cuda.core, cuda.bindings, numba-cuda).",
        epilog="See benchmarks/README.md for what each column means.")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['rounds']} rounds x {QUICK['batches']} batches, "
                        f"{QUICK['scale']:g}x the calls per batch")
    p.add_argument("--json", metavar="PATH", help="write the full result (raw numbers) here")
    p.add_argument("--png", metavar="PATH", help="write a bar chart of ratios to C (matplotlib)")
    p.add_argument("--ops", type=lambda s: _names(s, OP_BY_NAME, "operation"),
                   metavar="a,b", help="operations to run (default: all; --list shows them)")
    p.add_argument("--contenders", type=lambda s: _names(s, CONTENDER_BY_NAME, "contender"),
                   metavar="x,y", help="contenders to run (default: all)")
    p.add_argument("--dry-run", metavar="FILE",
                   help="render the table (and --png) from a stored JSON result; no GPU needed")
    p.add_argument("--rounds", type=int, metavar="N", help="rounds over the contenders")
    p.add_argument("--batches", type=int, metavar="N", help="timed batches per request")
    p.add_argument("--scale", type=float, metavar="F", help="multiply the calls per batch")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="seconds to wait for one request before giving up on a worker")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where the C floor and Cython module are built (default: "
                        "benchmarks/build in a checkout, else ~/.cache/streams-bench)")
    p.add_argument("--source-dir", metavar="DIR",
                   help="source checkout holding benchmarks/ (default: the one streams runs "
                        "from); needed for the C floor and Cython columns of an installed package")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("--list", action="store_true", help="list operations and contenders")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--ptx", help=argparse.SUPPRESS)
    p.add_argument("--cy-module", help=argparse.SUPPRESS)
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    for key in ("rounds", "batches"):
        v = getattr(args, key)
        if v is not None and v < 1:
            p.error(f"--{key} must be >= 1")
    if args.scale is not None and not args.scale > 0:
        p.error("--scale must be > 0")
    if args.worker is not None and args.worker not in ADAPTERS:
        p.error(f"unknown worker {args.worker}")
    return args


def _list_text():
    lines = ["operations:"]
    for op in OPS:
        t = " ".join(f"{_short(c)}<={v:g}" for c, v in op.targets.items())
        lines.append(f"  {op.name:<22} {op.about}" + (f" [target {t}]" if t else ""))
    lines.append("contenders:")
    for c in CONTENDERS:
        if not c.hidden:
            lines.append(f"  {c.name:<22} {c.about}")
    return "\n".join(lines) + "\n"


def _write_outputs(doc, args, out):
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.png:
        try:
            render_chart(doc, args.png, args.ops, args.contenders)
            print(f"wrote {args.png}", file=sys.stderr)
        except ImportError:
            print("no chart: matplotlib is not installed (pip install 'cuda-streams[bench]')",
                  file=sys.stderr)
        except ValueError as exc:
            print(f"no chart: {exc}", file=sys.stderr)


def main(argv=None, out=None):
    out = out or sys.stdout
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.ptx, args.cy_module)
        return 0
    if args.list:
        out.write(_list_text())
        return 0
    if args.dry_run:
        try:
            doc = load_result(args.dry_run)
        except (OSError, ValueError) as exc:
            print(f"cannot read {args.dry_run}: {exc}", file=sys.stderr)
            return 2
        out.write(render_table(doc, args.ops, args.contenders))
        _write_outputs(doc, args, out)
        return 0
    config = Config(ops=args.ops, contenders=args.contenders, quick=args.quick,
                    rounds=args.rounds, batches=args.batches, scale=args.scale,
                    cache_dir=args.cache_dir, timeout=args.timeout,
                    progress=not args.no_progress, source_dir=args.source_dir)
    if not set(config.contenders) <= _GPU_FREE:
        info = streams_info()
        if info["device_count"] == 0:
            print("cannot run the benchmark: no usable CUDA device ("
                  + (info["error"] or "device_count() == 0") + ")", file=sys.stderr)
            return 1
    doc = run_benchmark(config)
    out.write(render_table(doc, args.ops, args.contenders))
    _write_outputs(doc, args, out)
    if doc.get("interrupted"):
        print("interrupted: the results above are partial", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
