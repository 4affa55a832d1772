"""Python host callbacks: order, exactly-once, refcounts, errors, shutdown, deadlocks."""
import sys
import textwrap
import threading
import time

import pytest

from _support import refcount_back, run_python

import streams
from streams import HostCallbackError, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu

MS = 1000


def test_launch_host_func_runs_in_stream_order(stream):
    seen = []
    spin(stream, 100 * MS)
    stream.launch_host_func(seen.append, "after spin")
    assert seen == [], "the callback must wait for the spin"
    stream.synchronize()
    assert seen == ["after spin"]


def test_host_func_blocks_later_work(stream):
    release = threading.Event()
    stream.launch_host_func(lambda _: release.wait(5), None)
    spin(stream, 1)
    time.sleep(0.1)
    assert stream.query() is False, "work after the callback waits for it"
    release.set()
    stream.synchronize()


def test_add_callback_gets_stream_status_arg(stream):
    got = []
    stream.add_callback(lambda s, status, arg: got.append((s, status, arg)), 42)
    stream.synchronize()
    assert got == [(stream, None, 42)]


def test_100k_callbacks_exactly_once_in_order(stream):
    n = 100_000
    seen = []
    append = seen.append
    spin(stream, 50 * MS)
    for i in range(n):
        stream.launch_host_func(append, i)
    stream.synchronize()
    assert len(seen) == n
    assert seen == list(range(n))


def test_refcounts_return_to_start(stream):
    def fn(arg):
        pass

    arg = object()
    rc_fn, rc_arg = sys.getrefcount(fn), sys.getrefcount(arg)
    spin(stream, 50 * MS)
    for _ in range(100):
        stream.launch_host_func(fn, arg)
    assert sys.getrefcount(fn) == rc_fn + 100
    assert sys.getrefcount(arg) == rc_arg + 100
    stream.synchronize()
    assert refcount_back(fn, rc_fn), (sys.getrefcount(fn), rc_fn)
    assert refcount_back(arg, rc_arg), (sys.getrefcount(arg), rc_arg)


def test_exception_reported_and_delivered(stream, monkeypatch):
    reports = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)

    def broken(arg):
        raise ValueError(f"boom {arg}")

    ran = []
    stream.launch_host_func(broken, 1)
    stream.launch_host_func(broken, 2)
    stream.launch_host_func(ran.append, "still runs")
    with pytest.raises(HostCallbackError, match="boom 1") as info:
        stream.synchronize()
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "boom 1"
    assert ran == ["still runs"], "a raising callback must not stop later ones"
    assert len(reports) == 2
    assert all(r.exc_type is ValueError for r in reports)
    assert "broken" in repr(reports[0].object), "the report names the callback"
    # Delivered once; the next synchronize is clean.
    assert stream.synchronize() is True


def test_1000_raising_callbacks_leak_nothing(stream, monkeypatch):
    monkeypatch.setattr(sys, "unraisablehook", lambda r: None)

    def broken(arg):
        raise RuntimeError("x" * 100)

    rc = sys.getrefcount(broken)
    before = streams.debug_counters()
    for _ in range(1000):
        stream.launch_host_func(broken, None)
    with pytest.raises(HostCallbackError):
        stream.synchronize()
    after = streams.debug_counters()
    assert after["callbacks_completed"] - before["callbacks_completed"] == 1000
    assert after["live_callbacks"] == before["live_callbacks"]
    assert refcount_back(broken, rc), (sys.getrefcount(broken), rc)


def test_cuda_call_inside_callback_raises_not_deadlocks(stream, monkeypatch):
    reports = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)

    def touches_cuda(s):
        s.query()

    stream.launch_host_func(touches_cuda, stream)
    with pytest.raises(HostCallbackError, match="not allowed inside a host callback"):
        stream.synchronize()
    assert isinstance(reports[0].exc_value, RuntimeError)
    # Outside callbacks, CUDA calls work again on every thread.
    assert stream.query() is True


def test_enqueue_on_closed_stream_drops_reference():
    s = Stream()
    s.close()

    def fn(arg):
        pass

    rc = sys.getrefcount(fn)
    with pytest.raises(ValueError, match="closed"):
        s.launch_host_func(fn, None)
    assert sys.getrefcount(fn) == rc


def test_no_deadlock_callbacks_with_busy_threads():
    """Callbacks on several streams while other threads create, record, wait and sync.

    Runs in a subprocess with a hard timeout: a deadlock fails the test
    instead of hanging the suite.
    """
    code = textwrap.dedent("""
        import threading, streams
        from streams.testing import spin
        N_STREAMS, PER_STREAM, WORKERS, ROUNDS = 4, 2000, 4, 300
        counts = [0] * N_STREAMS
        lock = threading.Lock()
        def make_cb(i):
            def cb(_):
                with lock:
                    counts[i] += 1
            return cb
        def callbacks(i):
            s = streams.Stream()
            cb = make_cb(i)
            for j in range(PER_STREAM):
                if j % 200 == 0:
                    spin(s, 200)
                s.launch_host_func(cb, None)
            s.synchronize()
            s.close()
        def worker():
            for _ in range(ROUNDS):
                a, b = streams.Stream(), streams.Stream()
                e = a.record()
                b.wait_event(e)
                b.wait_stream(a)
                a.query(); b.synchronize(); e.synchronize()
                e.close(); a.close(); b.close()
        threads = [threading.Thread(target=callbacks, args=(i,)) for i in range(N_STREAMS)]
        threads += [threading.Thread(target=worker) for _ in range(WORKERS)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert counts == [PER_STREAM] * N_STREAMS, counts
        print("OK", sum(counts))
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"OK {4 * 2000}"


@pytest.mark.slow   # a stress test: minutes under compute-sanitizer
@pytest.mark.parametrize("enqueue", ["record", "wait_event", "launch", "graph_launch"])
def test_full_queue_behind_a_python_callback_does_not_deadlock(enqueue):
    """Enqueues keep the GIL only while no Python callback of the package is
    alive.  Here one waits behind a 300 ms spin and the main thread enqueues
    far more than a stream's queue holds: the enqueue that finds the queue
    full blocks in the driver until the GPU drains it, which needs the
    callback to run, which needs the GIL.  Holding it there would hang.
    Then, with no callback alive, the same flood (on the GIL-held path)
    completes too.  In a child process with a hard timeout."""
    code = textwrap.dedent(f"""
        import streams
        from streams.testing import launch_empty, spin
        s, ev, other = streams.Stream(), streams.Event(), streams.Stream()
        ev.record(other)
        g = None
        if {enqueue!r} == "graph_launch":
            s.begin_capture()
            launch_empty(s)
            g = s.end_capture().instantiate()
        ops = {{"record": lambda: s.record(ev), "wait_event": lambda: s.wait_event(ev),
                "launch": lambda: launch_empty(s), "graph_launch": lambda: g.launch(s)}}
        op = ops[{enqueue!r}]
        ran = []
        for with_callback in (True, False):
            spin(s, 300_000)
            if with_callback:
                s.launch_host_func(ran.append, "callback ran")
            for _ in range(60_000):
                op()
            s.synchronize()
        print(ran)
    """)
    result = run_python(code, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "['callback ran']"


@pytest.mark.timing
def test_exit_with_pending_callbacks_is_clean():
    code = textwrap.dedent("""
        import streams
        from streams.testing import spin
        s = streams.Stream()
        spin(s, 2_000_000)
        for i in range(10_000):
            s.launch_host_func(print, i)
        # exit now, with every callback still pending behind the spin
    """)
    t0 = time.perf_counter()
    result = run_python(code, timeout=60)
    elapsed = time.perf_counter() - t0
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert elapsed < 10, f"exit took {elapsed:.1f} s"


def test_stream_dropped_with_callbacks_pending_is_destroyed_later():
    """The payload holds the last reference: its Stream is freed on CUDA's
    callback thread, where cudaStreamDestroy is forbidden; it is deferred."""
    import gc
    seen = []
    s = Stream()
    spin(s, 50 * MS)
    s.launch_host_func(seen.append, 1)
    del s
    gc.collect()
    deadline = time.monotonic() + 5
    while (not seen or streams.debug_counters()["live_callbacks"]) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [1]
    streams.synchronize_device()
    time.sleep(0.05)  # let the pending call run the deferred destroy


@pytest.mark.parametrize("give_way", [True, False])
def test_callbacks_from_8_producers_run_once_in_order_whether_producers_give_way(give_way):
    """Eight threads enqueue Python callbacks on one stream while a ninth
    keeps taking the GIL for long stretches of pure Python.  Producers back
    from a launch give a callback waiting for the GIL the first turn
    (src/cudart/hostfn.h), for at most 100 us: whatever the setting, each
    callback runs exactly once, each thread's in the order it enqueued them
    (one stream), and nothing hangs or leaks.  In a child process with a
    hard timeout."""
    code = textwrap.dedent(f"""
        import threading, streams
        from streams import _cudart
        _cudart._producers_yield({give_way!r})
        THREADS, PER = 8, 5000
        s = streams.Stream()
        seen = []
        go, stop = threading.Event(), threading.Event()
        def produce(t):
            go.wait()
            f, cb = s.launch_host_func, seen.append
            for i in range(PER):
                f(cb, (t, i))
        def hog():
            go.wait()
            while not stop.is_set():
                sum(range(20000))      # holds the GIL for a while, releases it at intervals
        pool = [threading.Thread(target=produce, args=(t,)) for t in range(THREADS)]
        h = threading.Thread(target=hog)
        for t in pool + [h]:
            t.start()
        go.set()
        for t in pool:
            t.join()
        s.synchronize()
        stop.set(); h.join()
        assert len(seen) == THREADS * PER, len(seen)
        assert sorted(seen) == [(t, i) for t in range(THREADS) for i in range(PER)]
        for t in range(THREADS):
            mine = [i for (u, i) in seen if u == t]
            assert mine == list(range(PER)), t
        c = streams.debug_counters()
        assert c["callbacks_enqueued"] == c["callbacks_completed"], c
        print("OK", len(seen), _cudart._producers_yield())
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"OK {8 * 5000} {give_way}"
