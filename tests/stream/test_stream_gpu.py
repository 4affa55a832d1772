"""Stream behaviour on a real GPU: ordering is observed with spin kernels."""
import gc
import signal
import threading
import time
import weakref

import pytest

from _support import MS, closing

import streams
from streams import Event, Stream
from streams.testing import launch_empty, spin

pytestmark = pytest.mark.gpu


def test_query_false_while_busy_true_after_synchronize(stream):
    assert stream.query() is True
    spin(stream, 200 * MS)
    assert stream.query() is False
    assert stream.done is False
    assert stream.synchronize() is True
    assert stream.query() is True
    assert stream.done is True


def test_synchronize_waits_for_the_spin(stream):
    spin(stream, 100 * MS)
    t0 = time.perf_counter()
    stream.synchronize()
    waited = time.perf_counter() - t0
    assert 0.05 < waited < 2.0


@pytest.mark.timing
def test_synchronize_timeout(stream):
    spin(stream, 500 * MS)
    t0 = time.perf_counter()
    assert stream.synchronize(timeout=0.05) is False
    assert time.perf_counter() - t0 < 0.3
    assert stream.query() is False
    assert stream.synchronize() is True
    with pytest.raises(ValueError, match="timeout must be None or a number >= 0"):
        stream.synchronize(timeout=-1)


@pytest.mark.timing
def test_synchronize_releases_the_gil(stream):
    ticks = []
    stop = threading.Event()

    def worker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=worker)
    spin(stream, 300 * MS)
    t.start()
    try:
        time.sleep(0.01)
        n0 = len(ticks)
        stream.synchronize()
        progressed = len(ticks) - n0
    finally:
        stop.set()
        t.join()
    assert progressed > 50, f"other thread ran only {progressed} times during a 300 ms sync"


@pytest.mark.timing
def test_ctrl_c_interrupts_synchronize(stream):
    spin(stream, 3000 * MS)
    timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        stream.synchronize()
    latency = time.perf_counter() - t0 - 0.2
    timer.join()
    assert latency < 0.1, f"KeyboardInterrupt came {latency * 1e3:.1f} ms after SIGINT"
    assert stream.query() is False, "the spin is still running"
    # The stream stays usable.
    assert stream.synchronize() is True


def test_wait_event_orders_two_streams():
    with closing(Stream(), Stream()) as (a, b):
        spin(a, 200 * MS)
        ev = a.record()
        b.wait_event(ev)
        spin(b, 1)
        assert b.query() is False, "b must wait for a's spin"
        b.synchronize()
        assert a.query() is True, "b finished, so a's spin must have finished first"
        ev.close()


@pytest.mark.concurrent
def test_without_wait_streams_run_independently():
    with closing(Stream(), Stream()) as (a, b):
        spin(a, 300 * MS)
        spin(b, 1)
        b.synchronize()
        assert a.query() is False, "b must not wait for a without wait_event"
        a.synchronize()


def test_wait_stream_orders_and_reuses_one_event():
    with closing(Stream(), Stream()) as (a, b):
        before = streams.debug_counters()
        for _ in range(3):
            spin(a, 50 * MS)
            b.wait_stream(a)
            spin(b, 1)
            assert b.query() is False
            b.synchronize()
            assert a.query() is True
        after = streams.debug_counters()
        created = after["events_created"] - before["events_created"]
        markers = after["marker_events"] - before["marker_events"]
        assert created == 0, f"wait_stream created {created} events for 3 calls"
        # One marker per thread and device, made by the first wait of this
        # thread (none if an earlier test of this thread made it).
        assert markers <= 1, f"wait_stream made {markers} marker events for 3 calls"


def test_priority_clamped_into_device_range():
    least, greatest = streams.stream_priority_range()
    assert greatest <= least
    s_hi = Stream(priority=greatest - 100)
    s_lo = Stream(priority=least + 100)
    s_mid = Stream(priority=least)
    try:
        assert s_hi.priority == greatest
        assert s_lo.priority == least
        assert s_mid.priority == least
    finally:
        s_hi.close()
        s_lo.close()
        s_mid.close()


def test_legacy_stream_synchronizes_with_blocking_streams():
    blocking = Stream()
    try:
        spin(blocking, 200 * MS)
        launch_empty(Stream.legacy)
        assert Stream.legacy.query() is False, "legacy work waits for blocking streams"
        Stream.legacy.synchronize()
        assert blocking.query() is True
    finally:
        blocking.synchronize()
        blocking.close()


@pytest.mark.concurrent
def test_non_blocking_stream_does_not_synchronize_with_legacy():
    nb = Stream(non_blocking=True)
    try:
        assert nb.non_blocking is True and nb.flags == 1
        spin(nb, 300 * MS)
        launch_empty(Stream.legacy)
        Stream.legacy.synchronize()
        assert nb.query() is False, "legacy stream must not wait for a non-blocking stream"
    finally:
        nb.synchronize()
        nb.close()
    s = Stream()
    assert s.non_blocking is False and s.flags == 0
    s.close()


def test_properties(stream):
    assert stream.device_id == streams.get_device()
    assert isinstance(stream.id, int)
    other = Stream()
    assert other.id != stream.id
    assert other != stream
    other.close()
    assert stream.handle == stream.ptr != 0
    assert stream.__cuda_stream__() == (0, stream.handle)
    assert f"device={stream.device_id}" in repr(stream)


def test_use_after_close():
    s = Stream()
    h = s.handle
    s.close()
    s.close()  # idempotent
    assert s.closed
    for call in (s.query, s.synchronize, lambda: s.record(), lambda: s.priority,
                 lambda: s.launch_host_func(print), lambda: spin(s, 1)):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert h != 0
    ev = Event()
    ev.close()
    with pytest.raises(ValueError, match="closed"):
        Stream.legacy.wait_event(ev)
    with pytest.raises(ValueError, match="closed"):
        ev.query()


def test_from_handle_shares_the_stream_and_keeps_owner_alive():
    owner = Stream()
    alias = Stream.from_handle(owner.handle, owner=owner)
    assert alias == owner and hash(alias) == hash(owner)
    assert alias.device_id == owner.device_id
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is not None, "from_handle must keep its owner alive"
    spin(alias, 100 * MS)
    assert ref().query() is False
    alias.synchronize()
    assert ref().query() is True
    handle = ref().handle
    alias.close()  # drops the owner; a foreign handle is never destroyed by us
    gc.collect()
    assert ref() is None, "close() must release the owner"
    assert alias.closed and handle != 0


def test_current_stream_with_and_use():
    dev = streams.get_device()
    assert streams.current_stream() is Stream.legacy
    a, b = Stream(), Stream()
    try:
        with a:
            assert streams.current_stream() is a
            with b:
                assert streams.current_stream() is b
                assert streams.current_stream(dev) is b
            assert streams.current_stream() is a
        assert streams.current_stream() is Stream.legacy
        a.use()
        assert streams.current_stream() is a
        # The current stream is per thread.
        seen = []
        t = threading.Thread(target=lambda: seen.append(streams.current_stream()))
        t.start()
        t.join()
        assert seen == [Stream.legacy]
        Stream.legacy.use()
        # Event.record() with no stream records on the current stream.
        with a:
            spin(a, 100 * MS)
            ev = Event().record()
            assert ev.query() is False
            a.synchronize()
            assert ev.query() is True
            ev.close()
    finally:
        Stream.legacy.use()
        a.close()
        b.close()


def test_device_context_restores():
    dev = streams.get_device()
    with streams.Device(dev) as d:
        assert streams.get_device() == dev == d.device_id
        with streams.Device(dev):
            pass
        assert streams.get_device() == dev
    assert streams.get_device() == dev
    assert isinstance(streams.Device(dev).name, str)
    assert streams.Device(dev).compute_capability >= (7, 5)
    with pytest.raises(ValueError, match="out of range"):
        Stream(device=streams.device_count())
    with pytest.raises(ValueError, match="out of range"):
        streams.Device(-1)
    s = Stream(device=f"cuda:{dev}")
    assert s.device_id == dev
    s.close()


def test_many_streams_are_destroyed():
    before = streams.debug_counters()["live_streams"]
    for _ in range(1000):
        Stream()
    gc.collect()
    assert streams.debug_counters()["live_streams"] == before


def test_synchronize_device(stream):
    spin(stream, 100 * MS)
    streams.synchronize_device()
    assert stream.query() is True


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_interop_both_ways(lib):
    mod = pytest.importorskip(lib)
    ours = Stream()
    try:
        if lib == "cupy":
            theirs = mod.cuda.Stream(non_blocking=True)
            their_handle = theirs.ptr
            external = mod.cuda.ExternalStream(ours.handle)
            assert external.ptr == ours.handle
        else:
            theirs = mod.cuda.Stream()
            their_handle = theirs.cuda_stream
            external = mod.cuda.ExternalStream(ours.handle)
            assert external.cuda_stream == ours.handle
        # CuPy reports completion as .done, PyTorch as .query()
        def finished(x):
            return x.done if lib == "cupy" else x.query()

        wrapped = Stream.from_external(theirs)
        assert wrapped.handle == their_handle and wrapped.owner is theirs
        # Work ordered across the libraries: their stream waits on ours.
        spin(ours, 200 * MS)
        wrapped.wait_stream(ours)
        assert finished(theirs) is False
        theirs.synchronize()
        assert ours.query() is True
        # And our stream seen from them.
        spin(ours, 100 * MS)
        assert finished(external) is False
        ours.synchronize()
        assert finished(external) is True
        wrapped.close()
    finally:
        ours.synchronize()
        ours.close()
