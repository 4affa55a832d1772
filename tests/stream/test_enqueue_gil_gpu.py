"""The GIL rule (streams/_stream.pyx): every CUDA call made from Python that
can block or take a driver lock releases the GIL, whatever the path.

Two ways each path is shown:
* behind a host-written word: a stream held by a ``wait_value`` that a
  Python thread releases later, with far more enqueues of one kind queued
  behind it than the driver's queue holds.  An enqueue that blocked on the
  full queue holding the GIL would keep the writer from ever running: a
  deadlock, reported here as a child that ran past its time limit.  The
  child checks the work on the GPU (a counter every queued kernel adds to).
* in a debug build (STREAMS_DEBUG_REFCOUNTS=1) the guard of every CUDA call
  counts the calls made holding the GIL (``debug_counters()
  ["cuda_calls_with_gil"]``): each child asserts none, and every GPU test's
  teardown does the same (tests/conftest.py).

And captures: no rule may ask a capturing stream anything CUDA refuses
there, however many operations the capture or the process holds.
"""
import subprocess
import textwrap

import pytest

from _support import run_python_args

pytestmark = pytest.mark.gpu

COMMON = textwrap.dedent("""
    import ctypes, sys, threading, time
    import numpy as np
    import streams
    from streams import DeviceBuffer, Event, PinnedBuffer, Stream
    from streams.testing import builtin_module, fill_u32, increment_u32, native_increment

    def gil_report():
        c = streams.debug_counters()
        if c["debug_build"]:
            print("cuda_calls_with_gil", c["cuda_calls_with_gil"],
                  streams._cudart._cuda_calls_with_gil())
""")

CHILD = COMMON + textwrap.dedent("""
    kind, n = sys.argv[1], int(sys.argv[2])
    s = Stream(non_blocking=True)
    other = Stream(non_blocking=True)
    counter = DeviceBuffer(4, s)
    fill_u32(s, counter.ptr, 0, 1)          # loads the kernels before any wait
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    done_ev = Event()
    done_ev.record(other)
    scratch = DeviceBuffer(64, s)
    scratch2 = DeviceBuffer(64, s)
    host_count = ctypes.c_uint64(0)
    graph_exec = None
    if kind in ("graph", "upload"):
        with s.capture() as cap:
            increment_u32(s, counter.ptr, 1)
        assert cap.graph is not None
        graph_exec = cap.graph.instantiate()
    prepared = inc.prepare(1, 1, counter.ptr, 1)
    config = streams.LaunchConfig(1, 1)
    managed = None
    if kind == "attach":
        managed = streams.ManagedBuffer(4096)
    s.synchronize()

    class ForeignStream:
        # another library's stream: only the protocol, no streams.Stream
        def __cuda_stream__(self):
            return (0, s.handle)

    class ForeignEvent:
        # another library's event (PyTorch's protocol: .cuda_event)
        def __init__(self, ev):
            self.ev = ev
        @property
        def cuda_event(self):
            return self.ev.handle

    word = PinnedBuffer(8)
    flag = ctypes.c_uint32.from_address(word.ptr)
    flag.value = 0
    s.wait_value(word, 1, "geq")

    def writer():
        time.sleep(0.5)
        flag.value = 1              # Python code: needs the GIL

    t = threading.Thread(target=writer)
    t.start()
    start = time.monotonic()
    expected = 1
    try:
        if kind == "launch":
            for _ in range(n):
                increment_u32(s, counter.ptr, 1)
            expected = n
        elif kind == "kernel_launch":
            for _ in range(n):
                s.launch(inc, 1, 1, counter.ptr, 1)
            expected = n
        elif kind == "launch_ex":
            for _ in range(n):
                s.launch_ex(inc, config, counter.ptr, 1)
            expected = n
        elif kind == "prepared":
            for _ in range(n):
                prepared.launch(s)
            expected = n
        elif kind == "graph":
            for _ in range(n):
                graph_exec.launch(s)
            expected = n
        elif kind == "upload":
            for _ in range(n):
                graph_exec.upload(s)
            graph_exec.launch(s)
        elif kind == "record_wait":
            ev = Event()
            for _ in range(n // 2):
                ev.record(s)
                s.wait_event(done_ev)
            increment_u32(s, counter.ptr, 1)
        elif kind == "foreign_record":
            ev = Event()
            foreign = ForeignStream()
            for _ in range(n):
                ev.record(foreign)
            increment_u32(s, counter.ptr, 1)
        elif kind == "foreign_wait":
            foreign = ForeignEvent(done_ev)
            for _ in range(n):
                s.wait_event(foreign)
            increment_u32(s, counter.ptr, 1)
        elif kind == "wait_stream":
            for i in range(n):
                s.wait_stream(other if i % 2 else ForeignStream())
            increment_u32(s, counter.ptr, 1)
        elif kind == "memset":
            for _ in range(n):
                streams.memset_async(scratch, 0, 4, stream=s)
            increment_u32(s, counter.ptr, 1)
        elif kind == "memcpy":
            for _ in range(n):
                streams.memcpy_async(scratch2, scratch, 4, stream=s)
            increment_u32(s, counter.ptr, 1)
        elif kind == "memcpy_batch":
            for _ in range(n):
                streams.memcpy_batch_async([(scratch2, scratch, 4)], stream=s)
            increment_u32(s, counter.ptr, 1)
        elif kind == "write_value":
            target = PinnedBuffer(64)   # the driver refuses pool memory here
            for _ in range(n):
                s.write_value(target, 7)
            increment_u32(s, counter.ptr, 1)
        elif kind == "alloc_free":
            for _ in range(n):
                DeviceBuffer(256, s).close()
            increment_u32(s, counter.ptr, 1)
        elif kind == "native_host_func":
            for _ in range(n):
                s.launch_host_func(native_increment, ctypes.addressof(host_count))
            increment_u32(s, counter.ptr, 1)
        elif kind == "python_host_func":
            ran = []
            for _ in range(n):
                s.launch_host_func(ran.append, 1)
            increment_u32(s, counter.ptr, 1)
        elif kind == "attach":
            for _ in range(n):
                s.attach_mem_async(managed, 0, "single")
            increment_u32(s, counter.ptr, 1)
        elif kind == "status":
            # Queries, synchronize(timeout=0), new events and closes while
            # another thread is blocked in an enqueue on the full queue.
            def filler():
                for _ in range(20000):
                    increment_u32(s, counter.ptr, 1)
            f = threading.Thread(target=filler)
            f.start()
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                s.query(); done_ev.query(); other.query()
                s.synchronize(timeout=0)
                Event().close()
                Stream(non_blocking=True).close()
            f.join()
            expected = 20000
        else:
            raise SystemExit("unknown kind " + kind)
    finally:
        flag.value = 1
    t.join()
    assert s.synchronize(timeout=60)
    host = np.zeros(1, dtype=np.uint32)
    streams.memcpy_async(host, counter, stream=s)
    s.synchronize()
    if kind == "native_host_func":
        assert host_count.value == n, host_count.value
    if kind == "python_host_func":
        assert len(ran) == n, len(ran)
    print("counter", int(host[0]), "expected", expected,
          "seconds", round(time.monotonic() - start, 2))
    gil_report()
""")

KINDS = [("launch", 20_000), ("kernel_launch", 20_000), ("launch_ex", 20_000),
         ("prepared", 20_000), ("graph", 10_000), ("upload", 10_000),
         ("record_wait", 20_000), ("foreign_record", 20_000), ("foreign_wait", 20_000),
         ("wait_stream", 10_000), ("memset", 20_000), ("memcpy", 20_000),
         ("memcpy_batch", 10_000), ("write_value", 20_000), ("alloc_free", 10_000),
         ("native_host_func", 20_000), ("python_host_func", 5_000), ("attach", 10_000),
         ("status", 0)]


def _check_child(r, what):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("counter ")]
    assert line, out
    words = line[-1].split()
    assert words[1] == words[3], f"{what}: the GPU counted {words[1]}, not {words[3]}: {out}"
    for ln in r.stdout.splitlines():
        if ln.startswith("cuda_calls_with_gil"):
            assert ln.split()[1] == "0", f"{what}: CUDA called with the GIL held: {ln}"


@pytest.mark.parametrize("kind, n", KINDS, ids=[k for k, _ in KINDS])
def test_enqueues_behind_a_host_written_word_do_not_deadlock(kind, n):
    try:
        r = run_python_args(["-c", CHILD, kind, str(n)], timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"deadlock: {n} {kind} enqueues behind a wait_value that a Python thread "
                    "releases did not finish in 90 s")
    _check_child(r, kind)


FENCE_CHILD = COMMON + textwrap.dedent("""
    # A thread blocked enqueuing host functions on a full queue (behind a
    # word this thread writes) holds that stream's capture fence; a capture
    # this thread begins and ends on another stream meanwhile must not wait
    # for it (CUDA would not).
    kind = sys.argv[1]
    s = Stream(non_blocking=True)
    u = Stream(non_blocking=True)
    counter = DeviceBuffer(4, u)
    fill_u32(u, counter.ptr, 0, 1)
    u.synchronize()
    word = PinnedBuffer(8)
    flag = ctypes.c_uint32.from_address(word.ptr)
    flag.value = 0
    host_count = ctypes.c_uint64(0)
    s.wait_value(word, 1, "geq")
    keep = []

    def filler():
        for _ in range(20000):
            if kind == "python":
                s.launch_host_func(keep.append, 1)
            else:
                # a native function with an owner: a one-shot, in the fence
                s.launch_host_func(native_increment, ctypes.addressof(host_count),
                                   owner=host_count)

    f = threading.Thread(target=filler)
    f.start()
    time.sleep(0.5)                 # the filler is blocked on the full queue by now
    t0 = time.monotonic()
    with u.capture() as cap:
        increment_u32(u, counter.ptr, 1)
    took = time.monotonic() - t0
    flag.value = 1
    f.join()
    assert cap.graph is not None
    with cap.graph.instantiate() as exe:
        exe.launch(u)
        exe.launch(u)
    assert s.synchronize(timeout=60) and u.synchronize(timeout=60)
    host = np.zeros(1, dtype=np.uint32)
    streams.memcpy_async(host, counter, stream=u)
    u.synchronize()
    if kind == "python":
        assert len(keep) == 20000, len(keep)
    else:
        assert host_count.value == 20000, host_count.value
    print("capture took", round(took, 3))
    print("counter", int(host[0]), "expected", 2)
    gil_report()
""")


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_capture_elsewhere_never_waits_for_a_blocked_host_function_enqueue(kind):
    try:
        r = run_python_args(["-c", FENCE_CHILD, kind], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: a capture on another stream waited for a host-function "
                    "enqueue blocked on a full queue behind a word this thread writes")
    _check_child(r, f"capture beside a blocked {kind} host-function enqueue")


CAPTURE_CHILD = COMMON + textwrap.dedent("""
    # Long captures, with work not yet done elsewhere in the process and
    # through another library's handle of the capturing stream: nothing may
    # ask the capturing stream what CUDA refuses during a capture.
    mode, n = sys.argv[1], int(sys.argv[2])
    from streams.testing import launch_empty, spin
    busy = Stream(non_blocking=True)
    s = Stream(non_blocking=True)
    counter = DeviceBuffer(4, s)
    fill_u32(s, counter.ptr, 0, 1)
    s.synchronize()
    if mode == "busy_elsewhere":
        spin(busy, 1_000_000)
        for _ in range(2000):
            launch_empty(busy)                      # queued, not yet done
    class ForeignStream:
        def __cuda_stream__(self):
            return (0, s.handle)
    foreign = ForeignStream()
    ev = Event()
    fork = Stream(non_blocking=True)
    s.begin_capture()
    for i in range(n):
        increment_u32(s, counter.ptr, 1)
        if i % 10 == 0:
            ev.record(s)
            ev.record(foreign)
            s.wait_event(ev)
        if i % 100 == 0:
            fork.wait_event(ev)                     # a second stream joins...
            increment_u32(fork, counter.ptr, 1)
            ev.record(fork)
            s.wait_event(ev)                        # ...and is joined back
    g = s.end_capture()
    with g.instantiate() as exe:
        exe.launch(s)
    assert s.synchronize(timeout=60)
    host = np.zeros(1, dtype=np.uint32)
    streams.memcpy_async(host, counter, stream=s)
    s.synchronize()
    busy.synchronize()
    print("counter", int(host[0]), "expected", n + (n + 99) // 100)
    gil_report()
""")


@pytest.mark.parametrize("mode, n", [("fresh", 1200), ("busy_elsewhere", 1200),
                                     ("busy_elsewhere", 3)])
def test_long_captures_are_never_queried(mode, n):
    r = run_python_args(["-c", CAPTURE_CHILD, mode, str(n)], timeout=120)
    _check_child(r, f"a capture of {n} launches ({mode})")
