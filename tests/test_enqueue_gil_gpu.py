"""Enqueues that keep the GIL must never block with it (streams/_stream.pyx,
keep_gil_for): a stream held by a value that a Python thread writes later,
with tens of thousands of enqueues queued behind it, must not deadlock.

Each scenario runs in a child process with a time limit, so that a deadlock
is reported as a failure instead of hanging the suite.  The child checks the
result on the GPU: a counter every queued kernel (or graph replay) adds one
to.  The accounting the rule rests on is checked in this process."""
import subprocess
import textwrap
import time

import pytest

from _support import FREE_THREADED, run_python_args

import streams
from streams import Event, Stream
from streams.testing import increment_u32, spin

pytestmark = pytest.mark.gpu

CHILD = textwrap.dedent("""
    import ctypes, sys, threading, time
    import numpy as np
    import streams
    from streams import DeviceBuffer, Event, PinnedBuffer, Stream
    from streams.testing import fill_u32, increment_u32

    kind, n = sys.argv[1], int(sys.argv[2])
    s = Stream(non_blocking=True)
    other = Stream(non_blocking=True)
    counter = DeviceBuffer(4, s)
    fill_u32(s, counter.ptr, 0, 1)          # loads the kernels before any wait
    done_ev = Event()
    done_ev.record(other)
    graph_exec = None
    if kind == "graph":
        with s.capture() as cap:
            increment_u32(s, counter.ptr, 1)
        graph_exec = cap.graph.instantiate()
    s.synchronize()

    class Foreign:
        # another library's stream: only the protocol, no streams.Stream
        def __cuda_stream__(self):
            return (0, s.handle)

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
    try:
        if kind == "launch":
            for _ in range(n):
                increment_u32(s, counter.ptr, 1)
        elif kind == "graph":
            for _ in range(n):
                graph_exec.launch(s)
        elif kind == "record_wait":
            ev = Event()
            for _ in range(n // 2):
                ev.record(s)
                s.wait_event(done_ev)
            increment_u32(s, counter.ptr, 1)
        elif kind == "foreign_record":
            ev = Event()
            foreign = Foreign()
            for _ in range(n):
                ev.record(foreign)
            increment_u32(s, counter.ptr, 1)
        else:
            raise SystemExit("unknown kind " + kind)
    finally:
        flag.value = 1
    t.join()
    assert s.synchronize(timeout=60)
    host = np.zeros(1, dtype=np.uint32)
    streams.memcpy_async(host, counter, stream=s)
    s.synchronize()
    print("counter", int(host[0]), "seconds", round(time.monotonic() - start, 2))
""")


@pytest.mark.parametrize("kind, n, expected", [
    ("launch", 50_000, 50_000),
    ("graph", 20_000, 20_000),
    ("record_wait", 50_000, 1),
    ("foreign_record", 50_000, 1),
])
def test_enqueues_behind_a_host_written_word_do_not_deadlock(kind, n, expected):
    try:
        r = run_python_args(["-c", CHILD, kind, str(n)], timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"deadlock: {n} {kind} enqueues behind a wait_value that a Python thread "
                    "releases did not finish in 90 s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"counter {expected} " in r.stdout, r.stdout + r.stderr


# Without a GIL (free-threaded CPython) every enqueue runs detached and the
# rule counts nothing; test_free_threading_gpu.py checks that instead.
NO_RULE_WITHOUT_GIL = pytest.mark.skipif(
    FREE_THREADED, reason="free-threaded CPython: no GIL to keep, so the keep-the-GIL rule "
    "counts no enqueue (streams/_stream.pyx, keep_gil_for)")


@NO_RULE_WITHOUT_GIL
def test_the_rule_counts_what_it_has_not_seen_done(kernels):
    s = Stream(non_blocking=True)
    ptr_buf = streams.DeviceBuffer(4, s)
    base = streams._stream._queue_state()[0]
    for _ in range(10):
        increment_u32(s, ptr_buf.ptr, 1)
    assert streams._stream._queue_state()[0] == base + 10
    assert s.synchronize(timeout=30)
    assert streams._stream._queue_state()[0] == base
    # Past the budget behind a busy stream: counted until seen done.
    spin(s, 200_000)
    for _ in range(300):
        Event().record(s)
    assert streams._stream._queue_state()[0] >= base + 256
    assert not s.query()
    assert s.synchronize(timeout=30)
    assert streams._stream._queue_state()[0] == base
    # A query that answers True forgets too.
    for _ in range(5):
        increment_u32(s, ptr_buf.ptr, 1)
    deadline = time.monotonic() + 30
    while not s.query():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert streams._stream._queue_state()[0] == base
    ptr_buf.close()
    s.close()


@NO_RULE_WITHOUT_GIL
def test_a_stream_closed_busy_stays_counted_until_a_device_synchronize(kernels):
    if streams.device_count() != 1:
        pytest.skip("a device synchronize forgets the counts only with one device")
    s = Stream(non_blocking=True)
    spin(s, 200_000)
    base = streams._stream._queue_state()[0]
    for _ in range(20):
        Event().record(s)
    s.close()
    assert streams._stream._queue_state()[0] == base + 20
    assert streams.synchronize_device(timeout=30)
    assert streams._stream._queue_state()[0] == 0


@NO_RULE_WITHOUT_GIL
def test_queries_release_the_gil_while_a_python_callback_is_alive(kernels):
    """A query never waits for the GPU, but it can wait for a driver lock
    that a thread blocked in an enqueue holds (under compute-sanitizer
    memcheck, every launch blocks so).  So while a Python callback of the
    package is alive, which the GPU may be waiting on, queries release the
    GIL, and they still answer right and forget only the work they answered
    for; with none alive they keep it (streams/_stream.pyx,
    _status_keeps_gil)."""
    keeps = streams._stream._status_keeps_gil_now
    s = Stream(non_blocking=True)
    buf = streams.DeviceBuffer(4, s)
    s.synchronize()
    streams._cudart._drain_deferred()
    assert keeps(), "no Python callback alive: a query keeps the GIL"
    base = streams._stream._queue_state()[0]
    spin(s, 100_000)
    ran = []
    s.launch_host_func(ran.append, 1)
    assert not keeps(), "a Python callback is alive: a query releases the GIL"
    for _ in range(5):
        increment_u32(s, buf.ptr, 1)
    ev = s.record()
    counted = streams._stream._queue_state()[0]
    assert counted > base
    assert not s.query() and not ev.query() and ran == []
    deadline = time.monotonic() + 30
    while not s.query():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert ran == [1] and ev.query()
    assert streams._stream._queue_state()[0] == base, "the query that answered True forgot it"
    deadline = time.monotonic() + 5
    while not keeps():
        streams._cudart._drain_deferred()
        assert time.monotonic() < deadline, "the callback's record was never released"
        time.sleep(0.001)
    assert s.query() and ev.query()
    ev.close()
    buf.close()
    s.close()

