"""Where device memory is freed, and when its pool goes:

* ``DeviceBuffer.close(stream=w)`` with ``w`` closed is refused (the free
  could not be ordered after ``w``'s work) and the buffer stays open; with
  ``w`` open, ``w`` may be closed afterwards: its handle stays until the
  free is enqueued on it.
* A ``MemoryPool`` closed (or dropped) while buffers from it are out is
  destroyed only once the last of them has been freed and those frees have
  run on the GPU.  Destroying it with an allocation out, freeing that
  allocation later and then allocating again on the same stream killed the
  process with SIGSEGV (inside CUDA); those scenarios run in a child, so a
  crash is this test's failure.
"""
import gc
import textwrap
import time

import pytest

np = pytest.importorskip("numpy", reason="the memory tests check results with numpy")

from _support import BLOCK, GRID, MS, N, global_capture_in_thread, run_python, run_python_args, to_host

import streams
from streams import DeviceBuffer, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu


def _live(key):
    gc.collect()
    streams._cudart._drain_deferred()
    return streams.debug_counters()[key]


# ---- close(stream=...) ---------------------------------------------------------------------

@pytest.mark.timing     # w's 300 ms spin must still run after the host calls below
def test_close_on_a_closed_stream_is_refused_and_the_buffer_stays_open(kernels):
    s, w = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        buf = DeviceBuffer(N * 4, s)
        streams.memset_async(buf, 0, stream=s)
        s.synchronize()
        spin(w, 300 * MS)                                  # w's write is still queued ...
        w.launch(kernels.fill, GRID, BLOCK, buf, 7, N)
        written = w.record()
        w.close()                                          # allowed: pending work completes
        with pytest.raises(ValueError, match=r"^stream: .*closed"):
            buf.close(stream=w)
        assert written.query() is False                    # ... when the free was refused
        assert not buf.closed and buf.ptr != 0             # the buffer stays open and usable
        # Freed in the right order instead: after w's write.
        s.wait_event(written)
        buf.close()
        # A new buffer on s may get the same block: nothing may write it but s.
        fresh = DeviceBuffer(N * 4, s)
        s.launch(kernels.fill, GRID, BLOCK, fresh, 5, N)
        s.synchronize()
        written.synchronize()
        assert (to_host(fresh, s) == 5).all()
        fresh.close()
        s.synchronize()
        written.close()
    finally:
        s.close()


def test_close_on_an_open_stream_orders_the_free_after_its_work(kernels):
    # The control: the same write, freed on the stream that makes it.
    s, w = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        buf = DeviceBuffer(N * 4, s)
        streams.memset_async(buf, 0, stream=s)
        s.synchronize()
        w.wait_stream(s)
        spin(w, 300 * MS)
        w.launch(kernels.fill, GRID, BLOCK, buf, 7, N)
        buf.close(stream=w)                 # queued behind w's spin and fill
        assert buf.closed
        w.close()                           # the free is enqueued already: nothing left
        fresh = DeviceBuffer(N * 4, s)
        s.launch(kernels.fill, GRID, BLOCK, fresh, 5, N)
        streams.synchronize_device()
        # Had the block been freed at once, w's fill would land in `fresh`.
        assert (to_host(fresh, s) == 5).all()
        fresh.close()
        s.synchronize()
    finally:
        s.close()


def test_the_stream_of_a_pending_free_outlives_its_close(kernels):
    # A DLPack consumer keeps the buffer: close(stream=w) leaves the free to
    # the consumer's release, and w, closed meanwhile, must still be there.
    s, w = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        buf = DeviceBuffer(N * 4, s)
        before = _live("live_streams")
        capsule = buf.__dlpack__(stream=s.handle)
        w.wait_stream(s)
        spin(w, 200 * MS)
        w.launch(kernels.fill, GRID, BLOCK, buf, 7, N)
        buf.close(stream=w)
        assert buf.closed
        w.close()
        assert w.closed
        assert _live("live_streams") == before             # w's handle is held for the free
        del capsule                                        # the consumer lets go: freed on w
        assert _live("live_streams") == before - 1         # then w's handle goes
        streams.synchronize_device()
    finally:
        s.close()


def test_close_on_a_stream_of_the_wrong_kind_names_the_argument(stream):
    buf = DeviceBuffer(64, stream)
    with pytest.raises(TypeError, match="stream"):
        buf.close(stream="w")
    assert not buf.closed
    buf.close()
    stream.synchronize()


CLOSE_RACE = textwrap.dedent("""
    import threading
    import numpy as np
    import streams
    from streams import DeviceBuffer, Stream
    from streams.testing import builtin_module, spin

    fill = builtin_module().get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    s = Stream(non_blocking=True)
    refused = freed = 0
    for r in range(1, 301):
        w = Stream(non_blocking=True)
        buf = DeviceBuffer(4096, s)
        s.synchronize()
        spin(w, 2000)                  # w's write of r is still queued during the race
        w.launch(fill, 4, 256, buf, r, 1024)
        written = w.record()
        start = threading.Barrier(2)
        def closer():
            start.wait()
            w.close()
        t = threading.Thread(target=closer)
        t.start()
        start.wait()
        try:
            buf.close(stream=w)
            freed += 1
        except ValueError as exc:
            assert str(exc).startswith("stream:"), exc
            assert not buf.closed
            s.wait_event(written)
            buf.close()
            refused += 1
        t.join()
        # A new buffer may get the block: w's write must not land in it.
        fresh = DeviceBuffer(4096, s)
        streams.memset_async(fresh, 0, stream=s)
        s.synchronize()
        written.synchronize()
        host = np.empty(1024, np.uint32)
        streams.memcpy_async(host, fresh, stream=s)
        s.synchronize()
        assert (host == 0).all(), (r, host[:4])
        fresh.close()
        written.close()
    s.synchronize()
    s.close()
    streams.synchronize_device()
    streams._cudart._drain_deferred()
    c = streams.debug_counters()
    assert c["live_streams"] == 0 and c["live_buffers"] == 0, c
    print("OK", freed + refused == 300)
""")


def test_close_on_a_stream_another_thread_closes_in_a_child():
    result = run_python(CLOSE_RACE, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stderr[-4000:])
    assert result.stdout.split()[-2:] == ["OK", "True"], result.stdout


# ---- a pool closed while its buffers are out ----------------------------------------------

# The reproduction of a pool destroyed with one of its buffers out, and its
# variants.  Each variant runs `scenario()` in a fresh child, on the main
# thread or another one, and checks that the pool and both buffers are gone
# afterwards.
POOL_TEARDOWN = textwrap.dedent("""
    import gc
    import sys
    import threading
    import numpy as np
    import streams
    from streams import DeviceBuffer, MemoryPool, PinnedBuffer, Stream
    from streams.testing import builtin_module

    variant, where = sys.argv[1], sys.argv[2]
    fill = builtin_module().get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    s = Stream()
    base = streams.debug_counters()

    def scenario():
        pool = MemoryPool()
        buf = pool.allocate(4096, s)
        if variant in ("exact", "other-stream"):
            pool.close()
            pool.close()
        elif variant == "dropped":
            del pool
            gc.collect()
        s.launch(fill, 4, 256, buf, 3, 1024)
        h1 = PinnedBuffer(4096)
        streams.memcpy_async(h1, buf, stream=s)
        if variant == "other-stream":
            other = Stream(non_blocking=True)
            other.wait_stream(s)
            buf.close(stream=other)
            other.close()
        else:
            buf.close()
        if variant == "pool-after":
            pool.close()
        s.synchronize()
        b2 = DeviceBuffer(4096, s)
        s.launch(fill, 4, 256, b2, 4, 1024)
        h2 = PinnedBuffer(4096)
        streams.memcpy_async(h2, b2, stream=s)
        s.synchronize()
        assert (np.asarray(h1).view(np.uint32) == 3).all()
        assert (np.asarray(h2).view(np.uint32) == 4).all()
        # returning releases pool, buf, h1, b2, h2 (what crashed)

    if where == "thread":
        errors = []
        def run():
            try:
                scenario()
            except BaseException as exc:
                errors.append(exc)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        assert not errors, errors
    else:
        scenario()
    # And again on the same stream: the next allocations and frees too.
    for _ in range(3):
        b3 = DeviceBuffer(1 << 20, s)
        streams.memset_async(b3, 1, stream=s)
        b3.close()
    s.synchronize()
    streams.synchronize_device()
    gc.collect()
    streams._cudart._drain_deferred()
    c = streams.debug_counters()
    for key in ("live_mem_pools", "live_buffers", "live_streams"):
        assert c[key] == base[key], (key, base[key], c[key])
    assert streams._cudart._parked_count() == 0, streams._cudart._parked_count()
    s.close()
    print("SURVIVED")
""")


@pytest.mark.parametrize("where", ["main", "thread"])
@pytest.mark.parametrize("variant", ["exact", "dropped", "other-stream", "pool-after"])
def test_a_pool_closed_with_a_buffer_out_in_a_child(variant, where):
    # "exact": the reproduction (SIGSEGV, returncode -11, before the
    # fix); "dropped": the pool's last reference goes instead of close();
    # "other-stream": the buffer freed on another stream, closed at once;
    # "pool-after": the order that did not crash, as a control.
    result = run_python_args(["-c", POOL_TEARDOWN, variant, where], timeout=120)
    assert result.returncode == 0, (variant, where, result.returncode, result.stderr[-4000:])
    assert "SURVIVED" in result.stdout


# The pool's destroy, step by step, in a child too: a pool destroyed with
# buffers out can crash what runs next.
POOL_STEPS = textwrap.dedent("""
    import gc
    import sys
    import threading
    import numpy as np
    import streams
    from streams import DeviceBuffer, MemoryPool, Stream
    from streams.testing import builtin_module, spin

    MS = 1000
    fill = builtin_module().get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")

    def live():
        gc.collect()
        streams._cudart._drain_deferred()
        return streams.debug_counters()["live_mem_pools"]

    def parked():
        return streams._cudart._parked_count()

    def to_host(buf, s):
        host = np.empty(1024, np.uint32)
        streams.memcpy_async(host, buf, stream=s)
        s.synchronize()
        return host

    def closed_with_two_out(s):
        before, parked_before = live(), parked()
        pool = MemoryPool()
        a = pool.allocate(4096, s)
        b = pool.allocate(4096, s)
        pool.close()                                   # two buffers out
        assert pool.closed
        for use in (lambda: pool.allocate(16, s), lambda: pool.used_current):
            try:
                use()
                raise AssertionError("a closed pool was used")
            except ValueError as exc:
                assert "closed" in str(exc), exc
        assert live() == before + 1                    # not destroyed under them
        s.launch(fill, 4, 256, a, 1, 1024)
        assert (to_host(a, s) == 1).all()              # still usable
        a.close()
        s.synchronize()
        assert live() == before + 1                    # b is still out
        spin(s, 300 * MS)
        s.launch(fill, 4, 256, b, 2, 1024)
        b.close()                                      # queued behind the spin
        assert live() == before + 1                    # that free has not run yet
        assert parked() == parked_before + 1
        s.synchronize()
        assert live() == before                        # destroyed once it has
        assert parked() == parked_before

    def frees_still_queued(s):
        # Closed after its buffer was freed, before that free ran.
        before = live()
        pool = MemoryPool()
        buf = pool.allocate(4096, s)
        spin(s, 300 * MS)
        s.launch(fill, 4, 256, buf, 1, 1024)
        buf.close()
        pool.close()
        assert live() == before + 1
        s.synchronize()
        assert live() == before

    def dropped_in_a_thread(s):
        before = live()
        box = {}
        def make():
            box["pool"] = MemoryPool()
            box["buf"] = box["pool"].allocate(4096, s)
            box["pool"].close()
            del box["pool"]
        t = threading.Thread(target=make)
        t.start()
        t.join()
        buf = box.pop("buf")
        s.launch(fill, 4, 256, buf, 6, 1024)
        assert (to_host(buf, s) == 6).all()
        del buf                                        # freed by garbage collection
        s.synchronize()
        assert live() == before
        again = DeviceBuffer(4096, s)
        s.launch(fill, 4, 256, again, 8, 1024)
        assert (to_host(again, s) == 8).all()
        again.close()
        s.synchronize()

    s = Stream(non_blocking=True)
    globals()[sys.argv[1]](s)
    s.synchronize()
    s.close()
    streams.synchronize_device()
    print("SURVIVED", live())
""")


@pytest.mark.parametrize("check", ["closed_with_two_out", "frees_still_queued",
                                   "dropped_in_a_thread"])
def test_a_pool_is_destroyed_once_its_last_free_has_run_in_a_child(check):
    # A pool destroyed at close() fails the first live() check of
    # closed_with_two_out and dropped_in_a_thread, or crashes; one destroyed
    # before its queued frees ran fails frees_still_queued's first check.
    result = run_python_args(["-c", POOL_STEPS, check], timeout=120)
    assert result.returncode == 0, (check, result.returncode, result.stderr[-4000:])
    assert "SURVIVED" in result.stdout


# ---- a buffer released while its stream is captured ----------------------------------------------

@pytest.mark.parametrize("how", ["dropped", "closed"])
def test_a_buffer_released_during_a_capture_of_its_stream_is_freed_after_it(how):
    """A buffer released while its stream is being captured waits for the
    capture's end to free its memory: the capture stays valid and the pool's
    memory comes back.  A cudaFreeAsync into the capture is refused (H200,
    driver 580): a CudaWarning, the user's capture invalidated, and the
    memory kept."""
    import warnings
    s = Stream(non_blocking=True)
    pool = streams.MemoryPool.default()
    s.synchronize()
    before = pool.used_current
    buf = DeviceBuffer(N * 4, s)
    streams.memset_async(buf, 0, stream=s)
    s.synchronize()
    spin(s, 0)      # loaded before the capture
    s.synchronize()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        s.begin_capture()
        spin(s, 0)
        if how == "closed":
            buf.close()
        del buf
        gc.collect()
        streams._cudart._drain_deferred()      # a drain inside the capture retries: still waits
        assert s.capture_status == "active"
        # Waiting, it is not retried by the interpreter between bytecodes
        # (a pending call that queues itself again would be).
        retries = streams.debug_counters()["deferred_releases"]
        total = 0
        for i in range(200_000):
            total += i
        time.sleep(0.02)
        assert streams.debug_counters()["deferred_releases"] - retries <= 2
        g = s.end_capture()
        g.close()
        streams._cudart._drain_deferred()      # now it is freed
        s.synchronize()
        streams._cudart._flush_cleanup_warnings()
    assert not [w for w in got if issubclass(w.category, streams.CudaWarning)], \
        [str(w.message) for w in got]
    assert pool.used_current == before
    s.close()


def _released_during_a_global_capture_of(other, release):
    """``release()`` while another thread captures ``other`` in global mode:
    the capture survives it, and no release failure is reported."""
    import warnings
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with global_capture_in_thread(other) as ended:
            release()
        streams._cudart._drain_deferred()
        streams._cudart._flush_cleanup_warnings()
    assert len(ended) == 1 and isinstance(ended[0], streams.Graph), ended
    ended[0].close()
    assert not [w for w in got if issubclass(w.category, streams.CudaWarning)], \
        [str(w.message) for w in got]


def test_a_buffer_released_during_another_threads_global_capture():
    """Another thread captures another stream in CUDA's global mode while
    this one frees a buffer on a stream that is not captured: the free is
    made in relaxed mode, so that capture is neither refused nor broken."""
    s, other = Stream(non_blocking=True), Stream(non_blocking=True)
    spin(other, 0)
    other.synchronize()
    buf = DeviceBuffer(N * 4, s)
    s.synchronize()
    _released_during_a_global_capture_of(other, buf.close)
    s.synchronize()
    s.close()
    other.close()


@pytest.mark.parametrize("kind", ["pinned", "managed"])
def test_host_memory_freed_during_another_threads_global_capture(kind):
    """cudaFreeHost and cudaFree are refused while another thread captures
    in global mode, and the refusal invalidates that capture: the buffer's
    release switches its thread to relaxed mode around the free."""
    other = Stream(non_blocking=True)
    spin(other, 0)
    other.synchronize()
    buf = streams.PinnedBuffer(1 << 16) if kind == "pinned" else streams.ManagedBuffer(1 << 16)
    freed_before = streams.debug_counters()["live_buffers"]
    _released_during_a_global_capture_of(other, buf.close)
    assert streams.debug_counters()["live_buffers"] == freed_before - 1
    other.close()


def test_a_pool_destroyed_during_another_threads_global_capture():
    """cudaMemPoolDestroy is refused while another thread captures in global
    mode, and the refusal invalidates that capture (H200, driver 580): the
    pool's release switches its thread to relaxed mode around it."""
    other = Stream(non_blocking=True)
    spin(other, 0)
    other.synchronize()
    pool = streams.MemoryPool()
    made = streams.debug_counters()["live_mem_pools"]
    _released_during_a_global_capture_of(other, pool.close)
    assert streams.debug_counters()["live_mem_pools"] == made - 1
    other.close()


# ---- a free racing the close of its buffer's stream -------------------------------------------

FREE_DURING_CLOSE = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import streams
    from streams import DeviceBuffer, Stream
    from streams.testing import fill_u32, spin
    N = 1024
    legacy = Stream.legacy
    pause = float(sys.argv[1])
    streams._stream._pause_close_before_tail(pause)
    late = 0
    reused = 0
    for t in range(3):
        S = Stream(non_blocking=True)
        X = DeviceBuffer(4 * N, S)
        xptr = X.ptr
        fill_u32(S, X.ptr, 0, N)
        S.synchronize()
        spin(S, 300000)                 # 0.3 s, then X is written
        fill_u32(S, X.ptr, 5, N)
        go = threading.Event()
        def freer():
            go.wait()
            while not S.closed:         # inside close's pause, when there is one
                pass
            X.close()
        th = threading.Thread(target=freer)
        th.start()
        go.set()
        S.close()
        th.join()
        # Y reuses X's memory only once X's free has run: if that free was
        # not ordered after S's work, S's late fill lands in Y.
        Y = DeviceBuffer(4 * N, legacy)
        fill_u32(legacy, Y.ptr, 9, N)
        streams.synchronize_device()
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, Y, stream=legacy)
        legacy.synchronize()
        reused += Y.ptr == xptr
        late += int((host != 9).any())
        Y.close()
    streams._stream._pause_close_before_tail(0)
    print("late", late, "reused", reused)
""")


@pytest.mark.parametrize("pause", [0.05, 0.0])
def test_a_buffer_freed_while_its_stream_closes_waits_for_the_stream_work(pause):
    """A buffer closed in another thread while its stream's close() is
    between marking the stream closed and recording its tail (held open by
    a test pause, and without one) is freed after the stream's work: the
    memory reused right after it never receives the stream's late fill
    (streams/_stream/tail.pxi, stream_tail waits for the tail being marked)."""
    r = run_python_args(["-c", FREE_DURING_CLOSE, str(pause)], timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "late 0 " in r.stdout, r.stdout + r.stderr
