"""Property-based fuzzing of the public API with wrong and odd inputs.

Every call must either work or raise a documented Python exception; a crash
kills the run.  Without a GPU most calls stop at the driver check, which is
still a documented error; on the GPU the same properties run against live
objects.  Raw integer addresses are only drawn from values streams rejects
itself: a random valid-looking pointer handed to CUDA can crash any CUDA
program, which is documented, not fuzzable.
"""
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st

from _support import CudaStreamProto

import streams
from streams import CudaError, Event, Stream

DOCUMENTED = (TypeError, ValueError, CudaError, OverflowError, BufferError,
              FileNotFoundError, RuntimeError)
GPU = streams.device_count() > 0
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

safe_ints = st.one_of(st.integers(max_value=-1), st.integers(min_value=1 << 64),
                      st.sampled_from([0, 1, 2]))
junk = st.one_of(st.none(), st.booleans(), safe_ints, st.floats(allow_nan=True),
                 st.text(max_size=8), st.binary(max_size=8),
                 st.lists(st.integers(min_value=-3, max_value=3), max_size=4),
                 st.tuples(st.integers(min_value=-3, max_value=3)),
                 st.builds(object))


def call(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except DOCUMENTED:
        pass


def construct_and_close(cls, **kwargs):
    try:
        obj = cls(**kwargs)
    except DOCUMENTED:
        return
    obj.close()


@FUZZ
@given(junk, junk, junk)
def test_stream_constructor(device, priority, non_blocking):
    construct_and_close(Stream, device=device, priority=priority, non_blocking=non_blocking)


@FUZZ
@given(junk, junk, junk, junk)
def test_event_constructor(a, b, c, device):
    construct_and_close(Event, enable_timing=a, blocking=b, interprocess=c, device=device)


@FUZZ
@given(junk, junk)
def test_foreign_stream_factories(ptr, device):
    call(Stream.from_external, CudaStreamProto((ptr, device)))
    call(Stream.from_external, CudaStreamProto(ptr))
    if not isinstance(ptr, int) or ptr > 2 or ptr < 0:
        call(Stream.from_handle, ptr, device=device)


@FUZZ
@given(junk, junk)
def test_module_level_functions(a, b):
    for fn in (streams.set_device, streams.stream_priority_range, streams.current_stream,
               streams.exchange_capture_mode, streams.capture_mode):
        call(fn, a)
    call(streams.synchronize_device, a if GPU else None, timeout=0 if GPU else b)
    call(streams.Module.from_ptx, a)
    call(streams.Module.from_cubin, a)
    call(streams.DeviceBuffer, a, b)
    call(streams.PinnedBuffer, a)
    call(streams.memset_async, a, b)
    call(streams.memcpy_async, a, b)
    call(streams.memcpy_async, b, a, 1)
    call(streams.memcpy_peer_async, a, b, b, a)
    call(streams.can_access_peer, a, b)
    if GPU:   # a name or value of a mode was accepted: the thread's mode changed
        streams.exchange_capture_mode("global")


@pytest.mark.gpu
@FUZZ
@given(junk, junk)
def test_live_stream_methods(a, b):
    s = Stream()
    ev = Event()
    try:
        for name in ("wait_event", "wait_stream", "record", "get_attribute",
                     "update_capture_dependencies", "copy_attributes", "attach_mem_async"):
            call(getattr(s, name), a)
        call(s.synchronize, timeout=a if not isinstance(a, (int, float)) or
             isinstance(a, bool) else -1)
        call(s.launch_host_func, a, b)
        call(s.add_callback, a, b)
        call(s.set_attribute, a, b)
        call(s.launch, a, b, a)
        call(ev.record, a)
        call(ev.wait, a)
        call(ev.elapsed_time, a)
        call(Event.from_ipc_handle, a)
        assert not s.is_capturing()
        s.synchronize()
    finally:
        ev.close()
        s.close()


@pytest.mark.gpu
@FUZZ
@given(st.sampled_from(["query", "synchronize", "record", "priority", "flags", "id",
                        "begin_capture", "end_capture", "capture_info", "device"]))
def test_closed_objects_raise(name):
    s = Stream()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        attr = getattr(s, name)
        if callable(attr):
            attr()
