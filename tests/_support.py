"""Helpers shared by the tests: sizes, slow work and host copies for GPU
tests that compute on device buffers, closing what a test made, threads,
objects that never reached CUDA, the environment of child processes, and a
recording NVTX tool attached to a child."""
import contextlib
import gc
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

import streams
from streams.testing import spin

MS = 1000   # spin() takes microseconds
N = 1024    # uint32 elements per device buffer
GRID, BLOCK = 4, 256


def slow_fill(stream, kernels, buf, value, spin_us=200 * MS):
    """Queue on ``stream`` slow work (a spin of ``spin_us``), then ``buf``
    filled with ``value`` (``kernels``: the conftest fixture): work ordered
    after it sees ``value``, work that is not sees what was there before."""
    spin(stream, spin_us)
    stream.launch(kernels.fill, GRID, BLOCK, buf, value, N)


def to_host(buf, stream):
    """The N uint32 of ``buf`` on the host, once ``stream`` has written them."""
    np = pytest.importorskip("numpy")
    host = np.empty(N, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=stream)
    stream.synchronize()
    return host


# A free-threaded CPython (3.13t): no GIL.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# Set by ci/run-gpu-tests when the suite runs under compute-sanitizer,
# which makes every CUDA call and kernel several times slower.
UNDER_SANITIZER = os.environ.get("STREAMS_TEST_UNDER_SANITIZER") == "1"


def stress_rounds(n):
    """``n`` rounds of a stress test, an eighth of them under
    compute-sanitizer: enough for the tool to see every path, and the
    test's time bound still holds."""
    return max(2, n // 8) if UNDER_SANITIZER else n


def refcount_back(obj, expected):
    """Whether the references to ``obj`` are ``expected`` again (as
    ``sys.getrefcount`` counted them in the caller) after host callbacks that
    held it ran and ``synchronize()`` returned.

    With a GIL, CUDA's callback thread drops the payloads before the
    synchronize returns: exact at once.  On a free-threaded CPython an
    object belongs to the thread that made it (biased reference counting):
    a payload this thread made and CUDA's thread let go last is handed back
    and freed by this thread at its next check for pending work, moments
    later; what CUDA's thread made (the frames of a callback's exception,
    which hold the callable) and this thread let go goes back to CUDA's
    thread, and only a collection frees it while no callback comes.  There
    the count is polled (up to 2 s), collecting, until it settles."""
    if not FREE_THREADED:
        # `obj` here holds one reference more than in the caller.
        return sys.getrefcount(obj) - 1 == expected
    # `obj` here is one reference more than in the caller, and
    # wait_for_refcount's own parameter adds the one it subtracts.
    return wait_for_refcount(obj, expected + 1)


def wait_for_refcount(obj, expected, timeout=2.0):
    """Whether the references to ``obj`` settle at ``expected`` within
    ``timeout``: graph-owned references are released on CUDA's thread and
    dropped shortly after by a pending call."""
    # `obj` itself adds one reference while this function runs.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        streams._cudart._drain_deferred()
        if FREE_THREADED:
            gc.collect()        # what CUDA's thread made goes back to it (above)
        if sys.getrefcount(obj) - 1 == expected:
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def graphs_released():
    """After the test: no graph or executable left alive (import it as an
    autouse fixture: ``pytestmark = pytest.mark.usefixtures(...)``)."""
    yield
    gc.collect()
    streams.synchronize_device()
    c = streams.debug_counters()
    assert c["live_graphs"] == 0 and c["live_graph_execs"] == 0, c


def close_all(*objs):
    """Close ``objs`` in order."""
    for obj in objs:
        obj.close()


@contextlib.contextmanager
def closing(*objs):
    """``with closing(a, b) as (a, b):`` is ``try: ... finally: a.close();
    b.close()``; with one object, ``with closing(a) as a:``."""
    try:
        yield objs[0] if len(objs) == 1 else objs
    finally:
        close_all(*objs)


def run_threads(target, n):
    """Run ``target(i)`` in ``n`` threads, i = 0..n-1, and wait for them all."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def in_threads(work, n):
    """``work(i)`` in ``n`` threads, i = 0..n-1, all started at once (a
    barrier), then waited for; the exceptions they raised, each reported
    here instead of lost in its thread."""
    start = threading.Barrier(n)
    errors = []

    def run(i):
        start.wait()
        try:
            work(i)
        except BaseException as exc:     # noqa: BLE001 - returned to the caller
            errors.append(exc)

    run_threads(run, n)
    return errors


def in_thread(fn):
    """``fn()`` run on another thread, which has exited when this returns;
    its result, or its exception raised here."""
    out, errors = [], []

    def run():
        try:
            out.append(fn())
        except BaseException as exc:     # noqa: BLE001 - re-raised below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return out[0]


@contextlib.contextmanager
def global_capture_in_thread(stream):
    """Another thread captures ``stream`` (one spin kernel) in CUDA's global
    mode for the body of the ``with``; then it ends the capture.  Yields a
    list that holds, after the ``with``, what ``end_capture`` gave: the
    Graph, or the CudaError when the capture was broken."""
    begun, done, ended = threading.Event(), threading.Event(), []

    def capturer():
        stream.begin_capture("global")
        try:
            spin(stream, 0)
            begun.set()
            done.wait(10)
        finally:
            try:
                ended.append(stream.end_capture())
            except streams.CudaError as exc:
                ended.append(exc)

    t = threading.Thread(target=capturer)
    t.start()
    try:
        assert begun.wait(10), "the capturing thread did not begin"
        yield ended
    finally:
        done.set()
        t.join(10)


# For the checks of what happens without a GPU (CUDA errors, not argument errors).
needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def uninitialised(cls):
    """A ``cls`` (a Stream or Event class) that never got a CUDA handle:
    argument checks that come before any CUDA call can be observed on it
    without a GPU."""
    return cls.__new__(cls)


class CudaStreamProto:
    """Another library's stream as far as the ``__cuda_stream__`` protocol
    goes: the method returns ``value`` as given, well formed or not."""

    def __init__(self, value):
        self.value = value

    def __cuda_stream__(self):
        return self.value


def run_in_loop_without_readers(coro_fn):
    """Run ``coro_fn()`` in an event loop whose ``add_reader`` is not
    implemented (as on Windows' proactor loop): awaits must poll there."""
    import asyncio

    class NoReaders(asyncio.SelectorEventLoop):
        def add_reader(self, *args):
            raise NotImplementedError

    loop = NoReaders()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


# The checkout: the tests live in tests/<concept>/, this file in tests/.
ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "src" / "streams"
_INCLUDE = re.compile(r'^include "([^"]+)"\s*$', re.M)


def module_source(name):
    """The text of extension module ``name`` (``"_cudart"``) as Cython
    compiles it: its .pyx with each ``include`` replaced by the part it
    names (docs/architecture.rst, "Parts of a module")."""
    path = SOURCES / f"{name}.pyx"
    return _INCLUDE.sub(lambda m: (path.parent / m.group(1)).read_text(), path.read_text())


def env_importing_this_streams(extra=None):
    """``os.environ`` (plus ``extra``; a value None removes the variable)
    for a child Python that imports the same ``streams`` as this process: an
    in-place build's folder goes first on PYTHONPATH; an installed package
    needs nothing."""
    parent = Path(streams.__file__).resolve().parent.parent
    site_dirs = {Path(p).resolve() for p in
                 (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    env = dict(os.environ)
    # A child that dies of a signal says where, in every thread.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    if parent not in site_dirs:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def child_python(args, cwd=None, extra_env=None):
    """The command, working directory and environment of a child ``python
    ARGS`` that imports the same ``streams`` as this process, as keyword
    arguments of :mod:`subprocess`.  By default its working directory is
    the folder that holds that package: ``-c`` and ``-m`` put the cwd first
    on sys.path, and a source checkout there (no compiled module) would
    otherwise shadow an installed wheel."""
    where = cwd if cwd is not None else Path(streams.__file__).resolve().parent.parent
    return {"args": [sys.executable] + list(args), "cwd": str(where),
            "env": env_importing_this_streams(extra_env)}


def run_python_args(args, *, timeout, cwd=None, input=None, extra_env=None):
    """Run ``python ARGS`` in a child (:func:`child_python`) to its end."""
    return subprocess.run(**child_python(args, cwd, extra_env), input=input,
                          capture_output=True, text=True, timeout=timeout)


def run_python(code, **kwargs):
    """``python -c code`` in a child, as :func:`run_python_args` runs it."""
    return run_python_args(["-c", code], **kwargs)


def child_result(result):
    """The JSON that a child (a finished :func:`run_python`) printed last on a
    line ``RESULT <json>``; a child that printed none fails the test with
    its output."""
    import json
    lines = [line[7:] for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"rc={result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return json.loads(lines[-1])


def run_pool_consumer(code, pool, fields, *, timeout=120):
    """Run ``code`` (``python -c``, :func:`child_python`) in a child that is
    handed the file descriptor of ``pool`` (an ``ipc=True`` MemoryPool) and,
    on its stdin, the hex of the pickled tuple ``(fd, *fields)``; the
    finished process.  The descriptor is exported for the child and closed
    here once it has ended."""
    import pickle
    fd = pool.export_handle()
    assert fd >= 0
    try:
        message = pickle.dumps((fd, *fields)).hex() + "\n"
        return subprocess.run(**child_python(["-c", code]), input=message, pass_fds=(fd,),
                              capture_output=True, text=True, timeout=timeout)
    finally:
        os.close(fd)


def run_ipc_event_child(event, *, open_kwargs=None, wait_device=None, before="", timeout=60,
                        release=None):
    """Open ``event`` in a child Python from its IPC handle (sent on the
    child's stdin) and return the words the child printed, once it exited 0.

    The child runs ``before`` (code that sees ``handle``, the raw IPC
    handle, and prints what it checks), opens the event with
    ``Event.from_ipc_handle(handle, **open_kwargs)``, prints ``device
    <its current device> <the event's device>`` and ``first <query()>``,
    waits for the event (``wait_device`` None: ``Event.synchronize()``;
    otherwise a new stream of that device waits for it and is synchronized)
    and prints ``then <query()>``.  Record ``event`` behind a long spin
    first, so that ``first`` is False; or behind a wait on a host word, with
    ``release`` a function that writes it: it is called once the child has
    printed ``first``, so that ``first`` is False however slowly the child
    starts (a loaded machine)."""
    if wait_device is None:
        wait = "ev.synchronize()"
    else:
        wait = (f"s = streams.Stream(device={wait_device!r}); s.wait_event(ev); "
                "s.synchronize(); s.close()")
    code = "\n".join([
        "import sys, streams",
        "handle = bytes.fromhex(sys.stdin.readline().strip())",
        textwrap.dedent(before),
        f"ev = streams.Event.from_ipc_handle(handle, **{dict(open_kwargs or {})!r})",
        'print("device", streams.get_device(), ev.device_id, flush=True)',
        'print("first", ev.query(), flush=True)',
        wait,
        'print("then", ev.query(), flush=True)',
        "ev.close()",
    ])
    handle = event.ipc_handle().hex() + "\n"
    if release is None:
        result = run_python(code, timeout=timeout, input=handle)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout.split()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(**child_python(["-c", code]), text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        lines = []
        try:
            child.stdin.write(handle)
            child.stdin.flush()          # communicate() closes it
            # The child prints "first ..." before it waits: read up to it
            # (or to its end, if it failed first), then let the work go.
            # Nothing follows "first" until then, so no output stays behind
            # in this reader's buffer for communicate() to miss.
            while line := child.stdout.readline():
                lines.append(line)
                if line.startswith("first"):
                    break
        finally:
            release()
        try:
            rest, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise
        err.seek(0)
        assert child.returncode == 0, err.read()[-2000:]
    return ("".join(lines) + rest).split()


# The close-race harness, for the child Python of a test that races close()
# with users of the same objects: put it before the child's code (the race
# can crash the process, so it never runs in the suite's own).
CLOSE_RACE_HARNESS = textwrap.dedent("""
    import random, threading

    def race_close(ops, owners, threads, calls):
        \"\"\"Call ``ops`` round robin, ``calls`` of them in each of ``threads``
        threads, while this thread closes every one of ``owners``, in random
        order, as soon as all have started.  A ValueError must name a closed
        object; any other exception is printed.  Returns (the ValueErrors,
        the other exceptions).\"\"\"
        counts = [0, 0]
        lock = threading.Lock()
        start = threading.Barrier(threads + 1)

        def use(i):
            start.wait()
            for k in range(calls):
                try:
                    ops[(i + k) % len(ops)]()
                except ValueError as exc:
                    assert "closed" in str(exc), exc
                    with lock: counts[0] += 1
                except Exception as exc:
                    with lock: counts[1] += 1
                    print("unexpected", type(exc).__name__, exc)

        workers = [threading.Thread(target=use, args=(i,)) for i in range(threads)]
        for t in workers: t.start()
        start.wait()
        for obj in random.sample(owners, len(owners)):
            obj.close()
        for t in workers: t.join()
        return counts[0], counts[1]
""")


# The capture-race harness, for the child Python of a test that enqueues
# host functions on stream ``s`` while this thread begins and ends captures
# on it (the race can crash the process).  The child sets MODE and STYLE
# ("context", "begin_end", or "other_stream_global": a global capture on
# another stream, then a relaxed one on s) first, then, after the harness,
# calls race(), replay_kept() and close_kept().
CAPTURE_RACE_HARNESS = textwrap.dedent("""
    import gc, sys, threading, time
    import streams
    from streams.testing import launch_empty

    s, replay = streams.Stream(), streams.Stream()
    launch_empty(s)          # the kernel is loaded before any capture
    s.synchronize()
    issued, problems, kept = [], [], []
    stop = threading.Event()
    RACE_S = 2.5

    def CAPTURE(seconds):
        # Captures through streams (fenced), in MODE, by STYLE; every other
        # graph is closed at once (an enqueue attaching to it must not find
        # it gone); up to 150 are kept for the replays.
        other = streams.Stream()
        # Nothing else is enqueued on s inside the capture: CUDA's driver
        # itself crashes when a call on a stream races a capture beginning or
        # ending on it in another thread (benchmarks/probes/capture_race.c), and
        # streams orders only its host-function and asyncio enqueues against
        # captures it begins (the capture fence; docs/host-callbacks.rst).
        end = time.monotonic() + seconds
        n = ok = 0
        while time.monotonic() < end and not stop.is_set():
            n += 1
            try:
                if STYLE == "context":
                    with s.capture(mode=MODE) as cap:
                        pass
                    g = cap.graph
                elif STYLE == "begin_end":
                    s.begin_capture(MODE)
                    g = s.end_capture()
                else:   # a global capture on another stream, then one on s
                    other.begin_capture("global")
                    try:
                        launch_empty(other)
                    finally:
                        other.end_capture().close()
                    with s.capture(mode="relaxed") as cap:
                        pass
                    g = cap.graph
            except streams.CudaError as exc:
                problems.append(("capture", repr(exc)))
                continue
            ok += 1
            if n % 2 == 0 and len(kept) < 150:
                kept.append(g)
            else:
                g.close()
        other.close()
        return ok

    def race(enqueuer, threads, extra=(), join_s=30):
        \"\"\"``enqueuer(k)`` in ``threads`` threads, and each function of
        ``extra`` in one more, while this thread captures for RACE_S seconds;
        then ``stop`` is set and ``s`` synchronized.  Returns the number of
        captures made.\"\"\"
        workers = [threading.Thread(target=enqueuer, args=(k,)) for k in range(threads)]
        workers += [threading.Thread(target=fn) for fn in extra]
        for t in workers:
            t.start()
        captures = CAPTURE(RACE_S)
        stop.set()
        for t in workers:
            t.join(join_s)
            assert not t.is_alive(), "a thread hangs"
        s.synchronize()
        return captures

    def replay_kept(times=3):
        \"\"\"Instantiate the kept graphs and launch each ``times`` times on
        ``replay``; returns the executables.\"\"\"
        execs = [g.instantiate() for g in kept]
        for _ in range(times):
            for ex in execs:
                ex.launch(replay)
        replay.synchronize()
        return execs

    def close_kept(execs):
        \"\"\"Close the executables and the kept graphs, and drop both.\"\"\"
        for ex in execs:
            ex.close()
        for g in kept:
            g.close()
        del execs[:], kept[:]
""")


# ---- a recording NVTX tool (tests/nvtx/, tests/package/test_cimport.py) ----------------------
# A recording NVTX tool for the tests: a small injection library, built
# with the C compiler, that NVTX3 loads from ``NVTX_INJECTION64_PATH`` and
# that writes one line per call it receives, the way NVTX tests itself.
#
# NVTX3's first call (nvtx3/nvtxDetail/nvtxInit.h) loads the library, calls
# its ``InitializeInjectionNvtx2(getExportTable)`` export, and the library
# fills the entries of the callback tables it wants
# (``GetModuleFunctionTable`` of the ``NVTX_ETID_CALLBACKS`` export table,
# one table per module: core, core2, CUDA runtime); entries it leaves empty
# become no-ops.
#
# The lines, tab-separated (``-`` for the default domain, for no color and
# for no category):
#
# * ``domain NAME``, ``register DOMAIN TEXT``;
# * ``push DOMAIN MESSAGE COLOR CATEGORY``, ``pop DOMAIN``,
#   ``mark DOMAIN MESSAGE COLOR CATEGORY``; MESSAGE is ``reg:TEXT`` when the
#   caller passed a registered string;
# * ``category DOMAIN ID NAME``;
# * ``name_stream HANDLE NAME``, ``name_event HANDLE NAME``,
#   ``name_device ORDINAL NAME``.

C_COMPILER = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

NVTX_TOOL_SOURCE = textwrap.dedent(r"""
    #define NVTX_NO_IMPL
    #include <nvtx3/nvToolsExt.h>
    #include <pthread.h>
    #include <stdarg.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>

    static FILE *out;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static __thread int depth;

    typedef struct { char *name; } domain_t;

    static const char *dname(nvtxDomainHandle_t d) {
        return d ? ((domain_t *)d)->name : "-";
    }

    static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
    static void line(const char *fmt, ...) {
        va_list ap;
        pthread_mutex_lock(&lock);
        va_start(ap, fmt);
        vfprintf(out, fmt, ap);
        va_end(ap);
        fputc('\n', out);
        fflush(out);
        pthread_mutex_unlock(&lock);
    }

    static void attrs(const char *what, nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        char color[16] = "-", cat[16] = "-";
        if (a->colorType == NVTX_COLOR_ARGB) snprintf(color, sizeof color, "%08x", a->color);
        if (a->category) snprintf(cat, sizeof cat, "%u", a->category);
        if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
            line("%s\t%s\treg:%s\t%s\t%s", what, dname(d),
                 a->message.registered ? (const char *)a->message.registered : "(null)",
                 color, cat);
        else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
            line("%s\t%s\t%s\t%s\t%s", what, dname(d), a->message.ascii, color, cat);
        else
            line("%s\t%s\t(type %d)\t%s\t%s", what, dname(d), a->messageType, color, cat);
    }

    static void mark_ex(const nvtxEventAttributes_t *a) { attrs("mark", NULL, a); }
    static int push_ex(const nvtxEventAttributes_t *a) { attrs("push", NULL, a); return depth++; }
    static int pop(void) { line("pop\t-"); return depth > 0 ? --depth : -1; }
    static void name_category(uint32_t c, const char *n) { line("category\t-\t%u\t%s", c, n); }

    static void d_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        attrs("mark", d, a);
    }
    static int d_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        attrs("push", d, a);
        return depth++;
    }
    static int d_pop(nvtxDomainHandle_t d) {
        line("pop\t%s", dname(d));
        return depth > 0 ? --depth : -1;
    }
    static void d_name_category(nvtxDomainHandle_t d, uint32_t c, const char *n) {
        line("category\t%s\t%u\t%s", dname(d), c, n);
    }
    static nvtxStringHandle_t d_register(nvtxDomainHandle_t d, const char *s) {
        line("register\t%s\t%s", dname(d), s);
        return (nvtxStringHandle_t)strdup(s);
    }
    static nvtxDomainHandle_t d_create(const char *name) {
        domain_t *d = malloc(sizeof *d);
        d->name = strdup(name);
        line("domain\t%s", name);
        return (nvtxDomainHandle_t)d;
    }

    static void name_device(int dev, const char *n) { line("name_device\t%d\t%s", dev, n); }
    static void name_stream(void *s, const char *n) { line("name_stream\t%p\t%s", s, n); }
    static void name_event(void *e, const char *n) { line("name_event\t%p\t%s", e, n); }

    static int set(NvtxGetExportTableFunc_t get, NvtxCallbackModule module,
                   unsigned int id, NvtxFunctionPointer fn) {
        const NvtxExportTableCallbacks *cb =
            (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
        NvtxFunctionTable table = 0;
        unsigned int size = 0;
        if (!cb || !cb->GetModuleFunctionTable(module, &table, &size) || !table || id >= size)
            return 0;
        *table[id] = fn;
        return 1;
    }

    #define SET(m, id, fn) ok &= set(get, m, id, (NvtxFunctionPointer)(fn))

    __attribute__((visibility("default")))
    int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
        int ok = 1;
        const char *path = getenv("STREAMS_NVTX_TOOL_LOG");
        out = path ? fopen(path, "a") : stderr;
        if (!out) return 0;
        line("init");
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_MarkEx, mark_ex);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, push_ex);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, pop);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_NameCategoryA, name_category);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainMarkEx, d_mark_ex);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, d_push_ex);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, d_pop);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainNameCategoryA, d_name_category);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA, d_register);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, d_create);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaDeviceA, name_device);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaStreamA, name_stream);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaEventA, name_event);
        return ok;
    }
""")


def nvtx_include():
    """A folder holding nvtx3/nvToolsExt.h, or None."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    dirs = [os.path.join(r, "include") for r in roots if r]
    for entry in sys.path:
        nv = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(nv):
            dirs += [os.path.join(nv, sub, "include") for sub in sorted(os.listdir(nv))]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "nvtx3", "nvToolsExt.h"))),
                None)


def build_nvtx_tool(folder):
    """Build the recording tool in ``folder``; its path.  Skips the test
    where this build of streams makes no NVTX calls or nothing can build it."""
    if not streams.nvtx.available:
        pytest.skip("this build of streams has NVTX compiled out (no NVTX headers at build time)")
    include = nvtx_include()
    if C_COMPILER is None or include is None:
        pytest.skip("needs a C compiler and the nvtx3 headers")
    src = os.path.join(folder, "nvtx_tool.c")
    lib = os.path.join(folder, "libnvtx_tool.so")
    with open(src, "w") as f:
        f.write(NVTX_TOOL_SOURCE)
    result = subprocess.run([C_COMPILER, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                             "-I", include, src, "-o", lib, "-lpthread"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return lib


def run_with_nvtx_tool(tool, code, folder, *, extra_env=None, timeout=120):
    """Run ``code`` in a child Python with ``tool`` attached; the lines it
    recorded, each split on tabs, and the finished process."""
    log = os.path.join(folder, f"calls-{os.getpid()}-{len(os.listdir(folder))}.log")
    env = {"NVTX_INJECTION64_PATH": tool, "STREAMS_NVTX_TOOL_LOG": log}
    env.update(extra_env or {})
    result = subprocess.run(**child_python(["-c", textwrap.dedent(code)], extra_env=env),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = []
    if os.path.exists(log):
        with open(log) as f:
            calls = [line.rstrip("\n").split("\t") for line in f]
    return calls, result
