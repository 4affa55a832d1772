"""Failed releases are reported as streams.CudaWarning, on a real GPU.

streams.testing.inject_cleanup_failure makes the next release of a kind
report a chosen CUDA error (the real release still runs, so nothing leaks):
each kind of release is provoked where no exception can be raised (the
object's __dealloc__, a deferred release, an adopted kernel's owner let go)
and the warning checked; close() raises instead, and is not affected.
"""
import gc
import threading
import time
import warnings

import pytest

import streams
import streams.testing
from _support import FREE_THREADED
from streams import CudaWarning

pytestmark = pytest.mark.gpu

INVALID_HANDLE = 400      # cudaErrorInvalidResourceHandle


@pytest.fixture(autouse=True)
def no_injection_left():
    yield
    for kind in streams.testing.CLEANUP_KINDS:
        streams.testing.inject_cleanup_failure(kind, INVALID_HANDLE, 0)
    streams._cudart._flush_cleanup_warnings()


def dropped_with_failure(kind, make, what):
    """Make an object, inject one failure of ``kind``, drop the object and
    return the CudaWarnings that named ``what``."""
    obj = make()
    streams.testing.inject_cleanup_failure(kind, INVALID_HANDLE)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        del obj
        gc.collect()
        streams._cudart._drain_deferred()
    named = [w for w in got if w.category is CudaWarning and what in str(w.message)]
    assert named, f"no CudaWarning naming {what!r}: {[str(w.message) for w in got]}"
    assert "cudaErrorInvalidResourceHandle" in str(named[0].message)
    return named


def _ptx_module():
    return streams.testing.builtin_module()


@pytest.mark.parametrize("kind, make, what", [
    ("stream", lambda: streams.Stream(), "stream 0x"),
    ("event", lambda: streams.Event(), "event 0x"),
    ("graph", lambda: streams.Graph(), "graph 0x"),
    ("host_memory", lambda: streams.PinnedBuffer(4096), "pinned host memory 0x"),
    ("managed_memory", lambda: streams.ManagedBuffer(4096), "managed memory 0x"),
    ("mem_pool", lambda: streams.MemoryPool(), "memory pool 0x"),
    ("module", _ptx_module, "module 0x"),
    ("device_memory", lambda: streams.DeviceBuffer(4096), "device memory 0x"),
])
def test_a_failed_release_in_dealloc_warns(kind, make, what):
    dropped_with_failure(kind, make, what)


def test_a_failed_executable_release_warns(stream):
    g = streams.Graph()
    g.add_empty_node()
    dropped_with_failure("graph_exec", g.instantiate, "graph executable 0x")
    g.close()


def test_a_failed_marker_event_release_at_thread_exit_warns():
    # A thread's marker event (made by its first wait_stream) is destroyed
    # by the shim when the thread ends, where nothing can be raised: the
    # failure is queued, and the next flush warns naming the event and the
    # CUDA error.  The destroy runs as the thread's TLS goes, which may be
    # just after join() returns: the flush is polled.
    a, b = streams.Stream(), streams.Stream()
    made = streams.debug_counters()["marker_events"]
    t = threading.Thread(target=a.wait_stream, args=(b,))
    streams.testing.inject_cleanup_failure("marker_event", INVALID_HANDLE)
    try:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            t.start()
            t.join(30)
            assert not t.is_alive()
            assert streams.debug_counters()["marker_events"] == made + 1, \
                "the thread made a marker event of its own"
            deadline = time.monotonic() + 10
            named = []
            while not named and time.monotonic() < deadline:
                streams._cudart._flush_cleanup_warnings()
                named = [w for w in got
                         if w.category is CudaWarning and "marker event 0x" in str(w.message)]
                time.sleep(0.01)
        assert named, f"no CudaWarning naming the marker event: {[str(w.message) for w in got]}"
        message = str(named[0].message)
        assert "(cudaEventDestroy)" in message and "cudaErrorInvalidResourceHandle" in message, \
            message
    finally:
        a.close()
        b.close()


def test_close_raises_nothing_and_is_not_affected():
    # close() destroys through the raising path: the injection waits for a
    # release that cannot raise.
    streams.testing.inject_cleanup_failure("event", INVALID_HANDLE)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ev = streams.Event()
        ev.close()
    assert not [w for w in got if w.category is CudaWarning]


def test_a_release_deferred_from_a_host_callback_warns_at_the_drain(stream):
    held = [streams.Event()]
    streams.testing.inject_cleanup_failure("event", INVALID_HANDLE)

    def event_warnings():
        return [w for w in got if w.category is CudaWarning and "event 0x" in str(w.message)]

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        # The callback drops the last reference: CUDA cannot be called on
        # its thread, so the destroy is deferred to a safe thread.
        stream.launch_host_func(lambda _: held.clear())
        stream.synchronize()
        if not FREE_THREADED:
            assert not event_warnings()     # not before the drain
        # On a free-threaded build the Event belongs to this thread (biased
        # reference counting): CUDA's thread hands it back and this thread
        # frees it at its next check for pending work, a moment the test
        # does not choose, so the drain is retried for up to 2 s.
        deadline = time.monotonic() + (2.0 if FREE_THREADED else 0.0)
        while True:
            streams._cudart._drain_deferred()
            streams.Event().close()       # the next library call flushes too
            if event_warnings() or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert event_warnings()


def test_an_adopted_kernels_owner_let_go_after_a_failed_synchronize_warns(stream):
    mod = streams.testing.builtin_module()
    try:
        k = streams.Kernel.from_handle(mod.get_kernel("streams_empty").handle, kind="kernel",
                                       owner=object())
        stream.launch(k, 1, 1)
        stream.synchronize()
        dropped = [k]
        del k
        named = dropped_with_failure("device_sync", dropped.pop, "adopted kernel's owner")
        assert "cudaDeviceSynchronize" in str(named[0].message)
    finally:
        mod.close()


def test_a_warning_made_an_error_goes_to_unraisablehook(monkeypatch):
    seen = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)
    ev = streams.Event()
    streams.testing.inject_cleanup_failure("event", INVALID_HANDLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaWarning)
        del ev
        gc.collect()
    assert [u for u in seen if isinstance(u.exc_value, CudaWarning)]
