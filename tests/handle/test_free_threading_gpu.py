"""Eight threads on shared and own streams, with results computed on the GPU.

These run on any build; on a free-threaded CPython (tools/free_threaded.sh
gpu) the threads enqueue, record, wait, call back, synchronize and close
truly at once, so a structure that relied on the GIL shows here.  The
scenarios that race close() with users run in a child Python: a missing
lock there could crash the process."""
import sys
import textwrap
import threading

import pytest

from _support import FREE_THREADED, N, in_threads, run_python, stress_rounds, to_host

import streams
from streams import Event, HostCallbackError, Stream
from streams.testing import increment_u32, spin

np = pytest.importorskip("numpy", reason="the results are checked with numpy")

pytestmark = pytest.mark.gpu

THREADS = 8


def _child(code, timeout=240):
    result = run_python(textwrap.dedent(code), timeout=timeout)
    assert result.returncode == 0, (
        f"child exited with {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def test_eight_threads_enqueue_on_own_and_shared_streams(closer):
    """Each thread increments its own buffer on its own stream and a shared
    buffer on a shared stream, records an event on its stream that the
    shared stream waits for, and counts its host callbacks: every increment
    lands (the GPU's sums), every callback runs once."""
    rounds = stress_rounds(200)
    shared = closer(Stream(non_blocking=True))
    shared_buf = closer(streams.DeviceBuffer(N * 4, shared))
    streams.memset_async(shared_buf, 0, stream=shared)
    shared.synchronize()
    own_streams = [closer(Stream(non_blocking=True)) for _ in range(THREADS)]
    own_bufs = [closer(streams.DeviceBuffer(N * 4, s)) for s in own_streams]
    for s, b in zip(own_streams, own_bufs):
        streams.memset_async(b, 0, stream=s)
        s.synchronize()
    calls = [0] * THREADS

    def work(i):
        s, buf = own_streams[i], own_bufs[i]
        ev = Event()
        try:
            for k in range(rounds):
                increment_u32(s, buf.ptr, N)
                if k % 10 == 0:
                    ev.record(s)
                    shared.wait_event(ev)
                increment_u32(shared, shared_buf.ptr, N)
                s.launch_host_func(lambda _, i=i: calls.__setitem__(i, calls[i] + 1), None)
            s.synchronize()
        finally:
            ev.close()

    errors = in_threads(work, THREADS)
    assert not errors, errors
    shared.synchronize()
    assert calls == [rounds] * THREADS
    assert (to_host(shared_buf, shared) == THREADS * rounds).all()
    for s, b in zip(own_streams, own_bufs):
        assert (to_host(b, s) == rounds).all()


def test_one_stream_shared_by_eight_threads_with_a_synchronizer(closer):
    """Eight threads enqueue increments and host callbacks on one stream
    while a ninth synchronizes and queries it in a loop: the sum on the GPU
    is every increment, the callbacks all ran, and every synchronize that
    returned saw no error."""
    rounds = stress_rounds(300)
    s = closer(Stream(non_blocking=True))
    buf = closer(streams.DeviceBuffer(N * 4, s))
    streams.memset_async(buf, 0, stream=s)
    ran = []
    lock = threading.Lock()
    stop = threading.Event()
    syncs = [0]
    sync_errors = []

    def synchronizer():
        # At least once, and until the enqueuers are done.
        while True:
            try:
                if s.synchronize() is not True:
                    sync_errors.append("synchronize() did not answer True")
                s.query()
            except BaseException as exc:
                sync_errors.append(exc)
            syncs[0] += 1
            if stop.is_set():
                break

    def cb(arg):
        with lock:
            ran.append(arg)

    def work(i):
        for k in range(rounds):
            increment_u32(s, buf.ptr, N)
            if k % 3 == 0:
                s.launch_host_func(cb, (i, k))

    sync_thread = threading.Thread(target=synchronizer)
    sync_thread.start()
    try:
        errors = in_threads(work, THREADS)
    finally:
        stop.set()
        sync_thread.join()
    assert not errors and not sync_errors, (errors, sync_errors)
    assert syncs[0] > 0
    assert (to_host(buf, s) == THREADS * rounds).all()
    per_thread = len(range(0, rounds, 3))
    assert sorted(ran) == sorted((i, k) for i in range(THREADS) for k in range(0, rounds, 3))
    assert len(ran) == THREADS * per_thread


def test_callback_errors_from_eight_threads_are_delivered_once(monkeypatch):
    """Raising callbacks enqueued by eight threads on one stream: each is
    reported to sys.unraisablehook, and exactly one synchronize raises
    HostCallbackError (the first error), the next is clean."""
    reports = []
    lock = threading.Lock()

    def hook(r):
        with lock:
            reports.append(r.exc_type)

    monkeypatch.setattr(sys, "unraisablehook", hook)
    s = Stream(non_blocking=True)
    try:
        spin(s, 20_000)

        def broken(arg):
            raise ValueError(arg)

        errors = in_threads(lambda i: [s.launch_host_func(broken, (i, k)) for k in range(50)],
                            THREADS)
        assert not errors, errors
        with pytest.raises(HostCallbackError) as info:
            s.synchronize()
        assert isinstance(info.value.__cause__, ValueError)
        assert s.synchronize() is True
        assert reports == [ValueError] * (THREADS * 50)
    finally:
        s.close()


def test_enqueues_race_close_in_a_child():
    """Eight threads record, wait, launch and enqueue host callbacks on a
    stream that another thread closes and synchronizes meanwhile: only
    "closed" errors, every callback that was enqueued runs exactly once,
    and every handle and payload is given back."""
    out = _child("""
        import threading
        import streams
        from streams import Event, Stream
        from streams.testing import increment_u32, spin

        THREADS, ROUNDS, CALLS = 8, 60, 40
        ran = [0]
        enqueued = [0]
        bad = []
        lock = threading.Lock()

        def cb(_):
            with lock:
                ran[0] += 1

        counter = streams.DeviceBuffer(4, Stream.legacy)
        Stream.legacy.synchronize()     # allocated before other streams use it
        for r in range(ROUNDS):
            s = Stream(non_blocking=True)
            other = Stream(non_blocking=True)
            ev = Event()
            start = threading.Barrier(THREADS + 1)

            def use(i):
                start.wait()
                for k in range(CALLS):
                    try:
                        op = (i + k) % 5
                        if op == 0:
                            ev.record(s)
                        elif op == 1:
                            other.wait_stream(s)
                        elif op == 2:
                            increment_u32(s, counter.ptr, 1)
                        elif op == 3:
                            s.launch_host_func(cb, None)
                            with lock:
                                enqueued[0] += 1
                        else:
                            s.query()
                    except ValueError as exc:
                        if "closed" not in str(exc):
                            bad.append(repr(exc))
                    except Exception as exc:
                        bad.append(repr(exc))

            workers = [threading.Thread(target=use, args=(i,)) for i in range(THREADS)]
            for t in workers:
                t.start()
            # Busy once the workers are waiting: the synchronize below lets
            # them run while the stream is open (a spin enqueued before the
            # threads started had ended by the time they did, on an H200,
            # and the close won every round).
            spin(s, 5000)
            start.wait()
            try:
                s.synchronize()
            except ValueError:
                pass
            s.close()
            for t in workers:
                t.join()
            other.synchronize()
            other.close()
            ev.close()
        streams.synchronize_device()
        counter.close()
        streams.synchronize_device()
        import gc, time
        gc.collect()
        deadline = time.monotonic() + 5
        while True:
            streams._cudart._drain_deferred()
            c = streams.debug_counters()
            if c["live_host_calls"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert not bad, bad[:5]
        assert ran[0] == enqueued[0], (ran[0], enqueued[0])
        leaks = {k: v for k, v in c.items() if k in (
            "live_streams", "live_events", "live_callbacks", "live_host_calls",
            "live_buffers", "pending_one_shots") and v}
        assert not leaks, leaks
        print("OK", enqueued[0] > 0)
    """)
    assert out.split() == ["OK", "True"], out


def test_allocations_race_close_of_their_stream_in_a_child():
    """Eight threads each allocate a buffer on a stream that is still open
    (which must work, whoever runs first), then, let go by the barrier that
    lets another thread close the stream, race more allocations against the
    close: each is refused as closed or gives a buffer.  Every buffer's
    free, later, is ordered after the stream's work (the tail the close or
    the allocation recorded); every buffer and event is given back."""
    out = _child("""
        import threading
        import numpy as np
        import streams
        from streams import DeviceBuffer, Stream
        from streams.testing import fill_u32, spin

        THREADS, ROUNDS = 8, 80
        bad = []
        made = [0]
        lock = threading.Lock()
        for r in range(ROUNDS):
            s = Stream(non_blocking=True)
            spin(s, 200)
            start = threading.Barrier(THREADS + 1)
            bufs = []

            def alloc(i):
                # One allocation before the barrier that lets the close go:
                # the stream is open, so it must work (and each round has
                # buffers whose frees must wait for the closed stream's
                # work, whoever wins the race below).
                try:
                    b = DeviceBuffer(4096, s)
                except Exception as exc:
                    bad.append("before the close: " + repr(exc))
                else:
                    with lock:
                        bufs.append(b)
                        made[0] += 1
                start.wait()
                # These race the close: refused as closed, or a buffer.
                for k in range(4):
                    try:
                        b = DeviceBuffer(4096, s)
                    except ValueError as exc:
                        if "closed" not in str(exc):
                            bad.append(repr(exc))
                        continue
                    except Exception as exc:
                        bad.append(repr(exc))
                        continue
                    with lock:
                        bufs.append(b)

            workers = [threading.Thread(target=alloc, args=(i,)) for i in range(THREADS)]
            for t in workers:
                t.start()
            start.wait()
            s.close()
            for t in workers:
                t.join()
            # Each buffer given out is usable once its allocation is done.
            streams.synchronize_device()
            other = Stream()
            host = np.empty(1024, dtype=np.uint32)
            # The first made and the last (one that raced the close, when any won).
            for b in bufs[:2] + bufs[-2:]:
                fill_u32(other, b.ptr, 7, 1024)
                streams.memcpy_async(host, b, stream=other)
                other.synchronize()
                assert (host == 7).all()
            other.close()
            for b in bufs:
                b.close()
        streams.synchronize_device()
        import gc
        gc.collect()
        c = streams.debug_counters()
        assert not bad, bad[:5]
        leaks = {k: c[k] for k in ("live_streams", "live_events", "live_buffers") if c[k]}
        assert not leaks, leaks
        print("OK", made[0], THREADS * ROUNDS)
    """)
    parts = out.split()
    assert len(parts) == 3 and parts[0] == "OK" and parts[1] == parts[2], out


def test_pools_shared_by_eight_threads_while_one_closes(closer):
    """A StreamPool and an EventPool lent from eight threads, one of which
    closes them midway: acquisitions before the close work, later ones
    raise "closed", and every handle is given back."""
    before = streams.debug_counters()
    spool, epool = streams.StreamPool(maxsize=4), streams.EventPool(maxsize=4)
    bad = []

    def work(i):
        for k in range(100):
            if i == 0 and k == 50:
                spool.close()
                epool.close()
            try:
                s = spool.acquire()
                e = epool.acquire()
                e.record(s)
                e.synchronize()
                e.close()
                s.close()
            except ValueError as exc:
                if "closed" not in str(exc):
                    bad.append(exc)
            except Exception as exc:
                bad.append(exc)

    errors = in_threads(work, THREADS)
    assert not errors and not bad, (errors, bad)
    assert spool.closed and epool.closed
    after = streams.debug_counters()
    assert after["live_streams"] == before["live_streams"]
    assert after["live_events"] == before["live_events"]


def test_default_pool_lookup_from_eight_threads_gives_one_object():
    """MemoryPool.default() asked from eight threads at once: one wrapper."""
    got = [None] * THREADS

    def work(i):
        got[i] = streams.MemoryPool.default()

    errors = in_threads(work, THREADS)
    assert not errors, errors
    assert all(p is got[0] for p in got)


def test_host_buffer_views_race_close_in_a_child():
    """Eight threads take numpy views of one pinned buffer and write through
    them while another thread tries to close it: close() refuses
    (BufferError) while a view is alive, a view is refused ("closed") once
    it succeeded, and no write ever lands in freed memory (no crash)."""
    out = _child("""
        import threading
        import numpy as np
        import streams

        THREADS, ROUNDS = 8, 200
        bad = []
        closed_at = []
        for r in range(ROUNDS):
            buf = streams.PinnedBuffer(4096)
            start = threading.Barrier(THREADS + 1)

            def viewer(i):
                start.wait()
                for k in range(20):
                    try:
                        a = np.asarray(buf)
                    except ValueError as exc:
                        if "closed" not in str(exc):
                            bad.append(repr(exc))
                        return
                    except Exception as exc:
                        bad.append(repr(exc))
                        return
                    a[i] = k            # the memory is alive while `a` is
                    del a

            workers = [threading.Thread(target=viewer, args=(i,)) for i in range(THREADS)]
            for t in workers:
                t.start()
            start.wait()
            while True:
                try:
                    buf.close()
                    break
                except BufferError:
                    pass
            for t in workers:
                t.join()
            assert buf.closed
        assert not bad, bad[:5]
        assert streams.debug_counters()["live_buffers"] == 0, streams.debug_counters()
        print("OK")
    """)
    assert out.split() == ["OK"], out


# ---- re-initialisation and lazily published state -------------------------------------------

# What every child below ends with: the counts of what it made are back.
_LEAK_CHECK = """
        import gc, time
        def leaks(first):
            streams.synchronize_device()
            gc.collect()
            deadline = time.monotonic() + 5
            while True:
                streams._cudart._drain_deferred()
                c = streams.debug_counters()
                diff = {k: c[k] - first[k] for k in first if k.startswith("live_")
                        and c[k] != first[k]}
                if not diff or time.monotonic() > deadline:
                    return diff
                time.sleep(0.01)
"""


def test_init_from_eight_threads_on_one_object_makes_one_handle_in_a_child():
    """Eight threads run __init__ at once on one Stream, Event, Graph,
    PinnedBuffer and DeviceBuffer made with __new__: exactly one call makes
    a handle, the seven others raise RuntimeError; the object works (a
    stream runs a kernel whose result is read back), and once each is
    closed every live count is where it started."""
    out = _child(_LEAK_CHECK + """
        import threading
        import numpy as np
        import streams
        from streams import Event, Stream
        from streams.testing import increment_u32

        THREADS, ROUNDS = 8, 30
        first = streams.debug_counters()
        makers = {
            Stream: lambda o: o.__init__(non_blocking=True),
            Event: lambda o: o.__init__(),
            streams.Graph: lambda o: o.__init__(),
            streams.PinnedBuffer: lambda o: o.__init__(64),
            streams.DeviceBuffer: lambda o: o.__init__(64, Stream.legacy),
        }
        bad = []
        for r in range(ROUNDS):
            for cls, make in makers.items():
                obj = cls.__new__(cls)
                won, refused = [], []
                start = threading.Barrier(THREADS)

                def run(i):
                    start.wait()
                    try:
                        make(obj)
                        won.append(i)
                    except RuntimeError as exc:
                        refused.append(str(exc))
                    except Exception as exc:
                        bad.append(repr(exc))

                ts = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
                for t in ts: t.start()
                for t in ts: t.join()
                if len(won) != 1 or len(refused) != THREADS - 1:
                    bad.append((cls.__name__, len(won), refused[:2]))
                if cls is Stream and r == 0:
                    buf = streams.DeviceBuffer(4, obj)
                    streams.memset_async(buf, 0, stream=obj)
                    increment_u32(obj, buf.ptr, 1)
                    host = np.zeros(1, dtype=np.uint32)
                    streams.memcpy_async(host, buf, stream=obj)
                    obj.synchronize()
                    if host[0] != 1:
                        bad.append(("kernel result", int(host[0])))
                    buf.close()
                    obj.synchronize()
                obj.close()
        assert not bad, bad[:5]
        diff = leaks(first)
        assert not diff, diff
        print("OK")
    """)
    assert out.split()[-1] == "OK", out


def test_green_context_closed_while_eight_threads_make_streams_in_a_child():
    """Eight threads make streams from one green context, run a kernel on
    each and close it, while the main thread closes the context: a
    create_stream either makes a working stream (its kernel's result is
    read back) or raises ValueError "closed"; nothing else, and every
    stream and context is given back."""
    out = _child(_LEAK_CHECK + """
        import threading
        import numpy as np
        import streams
        from streams import GreenContext, Stream
        from streams.testing import increment_u32

        THREADS, ROUNDS, EACH = 8, 20, 10
        dev = streams.Device(0)
        try:
            r = dev.sm_resource()
            (part,), _ = dev.split_sm(r.min_partition_size, groups=1)
        except NotImplementedError as exc:
            print("SKIP", exc)
            raise SystemExit(0)
        first = streams.debug_counters()
        buf = streams.DeviceBuffer(4 * THREADS, Stream.legacy)
        streams.memset_async(buf, 0, stream=Stream.legacy)
        Stream.legacy.synchronize()
        made = [0] * THREADS
        bad = []
        for rnd in range(ROUNDS):
            ctx = GreenContext(part)
            start = threading.Barrier(THREADS + 1)

            def run(i):
                start.wait()
                for k in range(EACH):
                    try:
                        s = ctx.create_stream()
                    except ValueError as exc:
                        if "closed" not in str(exc):
                            bad.append(repr(exc))
                        return
                    except Exception as exc:
                        bad.append(repr(exc))
                        return
                    try:
                        increment_u32(s, buf.ptr + 4 * i, 1)
                        s.synchronize()
                        made[i] += 1
                    except Exception as exc:
                        bad.append(repr(exc))
                    finally:
                        s.close()

            ts = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
            for t in ts: t.start()
            start.wait()
            if rnd % 2:
                ctx.close()
            for t in ts: t.join()
            ctx.close()
            ctx.close()             # idempotent
        host = np.zeros(THREADS, dtype=np.uint32)
        streams.memcpy_async(host, buf, stream=Stream.legacy)
        Stream.legacy.synchronize()
        buf.close()
        assert not bad, bad[:5]
        assert host.tolist() == made, (host.tolist(), made)
        assert sum(made) >= ROUNDS // 2 * THREADS * EACH, made   # the rounds left open
        diff = leaks(first)
        assert not diff, diff
        print("OK")
    """)
    if out.split()[0] == "SKIP":
        pytest.skip(out)
    assert out.split()[-1] == "OK", out


def test_builtin_kernels_first_used_by_eight_threads_at_once_in_a_child():
    """In a fresh process, eight threads launch the built-in increment
    kernel at once, the first use of the built-in module, and ask for it by
    name: every thread gets the same kernel object, and every increment
    lands."""
    out = _child("""
        import threading
        import numpy as np
        import streams
        from streams import Stream
        from streams._launch import builtin_kernel
        from streams.testing import increment_u32

        THREADS, EACH = 8, 50
        buf = streams.DeviceBuffer(4 * THREADS, Stream.legacy)
        streams.memset_async(buf, 0, stream=Stream.legacy)
        Stream.legacy.synchronize()
        got = [None] * THREADS
        bad = []
        start = threading.Barrier(THREADS)

        def run(i):
            s = Stream(non_blocking=True)
            start.wait()
            try:
                for k in range(EACH):
                    increment_u32(s, buf.ptr + 4 * i, 1)
                    if k == 0:
                        got[i] = builtin_kernel("increment_u32")
                s.synchronize()
            except Exception as exc:
                bad.append(repr(exc))
            finally:
                s.close()

        ts = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for t in ts: t.start()
        for t in ts: t.join()
        host = np.zeros(THREADS, dtype=np.uint32)
        streams.memcpy_async(host, buf, stream=Stream.legacy)
        Stream.legacy.synchronize()
        buf.close()
        assert not bad, bad[:5]
        assert all(k is got[0] for k in got) and got[0] is not None, got
        assert host.tolist() == [EACH] * THREADS, host.tolist()
        print("OK")
    """)
    assert out.split()[0] == "OK", out


def test_adopted_function_first_launched_by_eight_threads_in_a_child():
    """A CUfunction adopted with Kernel.from_handle (the built-in increment
    kernel's, from cuKernelGetFunction) is launched for the first time by
    eight threads at once, the first use of the driver's launch entry
    point, plainly and through one shared PreparedLaunch on a shared
    stream: every increment lands."""
    out = _child("""
        import ctypes, threading
        import numpy as np
        import streams
        from streams import Kernel, Stream
        from streams._launch import builtin_kernel

        THREADS, EACH = 8, 50
        base = builtin_kernel("increment_u32")
        Stream.legacy.synchronize()     # this thread has the primary context current
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            print("SKIP", exc)
            raise SystemExit(0)
        get_function = getattr(cuda, "cuKernelGetFunction", None)    # CUDA 12.0
        if get_function is None:
            print("SKIP no cuKernelGetFunction in this driver")
            raise SystemExit(0)
        func = ctypes.c_void_p()
        err = get_function(ctypes.byref(func), ctypes.c_void_p(base.handle))
        if err != 0:
            print("SKIP cuKernelGetFunction", err)
            raise SystemExit(0)
        k = Kernel.from_handle(func.value, kind="function", signature=("pointer", "uint64"))
        buf = streams.DeviceBuffer(4 * (THREADS + 1), Stream.legacy)
        streams.memset_async(buf, 0, stream=Stream.legacy)
        Stream.legacy.synchronize()
        shared = Stream(non_blocking=True)
        prepared = k.prepare(1, 1, buf.ptr + 4 * THREADS, 1)
        bad = []
        start = threading.Barrier(THREADS)

        def run(i):
            s = Stream(non_blocking=True)
            start.wait()
            try:
                for _ in range(EACH):
                    s.launch(k, 1, 1, buf.ptr + 4 * i, 1)
                    prepared.launch(shared)     # ordered on one stream: no GPU race
                s.synchronize()
            except Exception as exc:
                bad.append(repr(exc))
            finally:
                s.close()

        ts = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for t in ts: t.start()
        for t in ts: t.join()
        shared.synchronize()
        host = np.zeros(THREADS + 1, dtype=np.uint32)
        streams.memcpy_async(host, buf, stream=Stream.legacy)
        Stream.legacy.synchronize()
        del prepared
        buf.close()
        shared.close()
        assert not bad, bad[:5]
        assert host.tolist() == [EACH] * THREADS + [EACH * THREADS], host.tolist()
        print("OK")
    """)
    if out.split()[0] == "SKIP":
        pytest.skip(out)
    assert out.split()[-1] == "OK", out


def test_events_recorded_and_synchronized_from_eight_threads_while_frees_run(closer):
    """Eight threads record one shared event on their own streams and
    synchronize it and their streams (each synchronize looks at, and
    replaces, the count of frees it last saw), and time a pair of events of
    their own, while another thread allocates and frees stream-ordered
    memory: no error, each elapsed time is a float >= 0, and the shared
    event counts as recorded."""
    shared = closer(Event())
    own = [closer(Stream(non_blocking=True)) for _ in range(THREADS)]
    pairs = [(closer(Event(enable_timing=True)), closer(Event(enable_timing=True)))
             for _ in range(THREADS)]
    stop = threading.Event()

    def churn():
        s = Stream(non_blocking=True)
        try:
            while not stop.is_set():
                streams.DeviceBuffer(1 << 16, s).close()
                s.synchronize()
        finally:
            s.synchronize()
            s.close()

    freer = threading.Thread(target=churn)
    freer.start()
    times = []

    def work(i):
        s = own[i]
        a, b = pairs[i]
        for _ in range(100):
            a.record(s)
            shared.record(s)
            spin(s, 5)
            b.record(s)
            shared.synchronize()
            s.synchronize()
            times.append(a.elapsed_time(b))

    try:
        errors = in_threads(work, THREADS)
    finally:
        stop.set()
        freer.join()
    assert not errors, errors[:3]
    assert len(times) == THREADS * 100
    assert all(isinstance(t, float) and t >= 0 for t in times), times[:5]
    assert shared.query()
