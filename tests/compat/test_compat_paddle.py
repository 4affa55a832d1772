"""What only streams.compat.paddle has (the shared behaviour is in
test_compat_conformance.py): Paddle's device forms, its priorities 1 and 2,
and the ``blocking`` flag.

The examples of the reference page (paddle-device-Stream.zh.txt) run on
Paddle's ``custom_cpu`` device: here they run on the GPU (``"gpu"`` for
``'custom_cpu'``, ``"gpu:N"`` for ``'custom_cpu:0'``, a place object for
``paddle.CustomPlace``).  The constructor example is ported here; the
others (record_event, wait_event, wait_stream, query, synchronize) are the
conformance tests' shapes.
"""
import pytest

from _support import MS, needs_no_gpu

import streams
from streams.compat import paddle as pd
from streams.testing import launch_empty, spin


class CUDAPlace:
    """Stands in for paddle.CUDAPlace(n)."""

    def __init__(self, index):
        self.index_ = index

    def get_device_id(self):
        return self.index_


class CustomPlace(CUDAPlace):
    """Stands in for paddle.CustomPlace(kind, n)."""

    def __init__(self, kind, index):
        super().__init__(index)
        self.kind = kind

    def get_device_type(self):
        return self.kind


# ---- no GPU needed -----------------------------------------------------------

@pytest.mark.parametrize("priority", [3, -2, 5, True, False, "1", 1.0, 2.5, [1]])
def test_priority_other_than_1_2_or_none_is_a_value_error(priority):
    # "priority (int|None) - 1 (high) or 2 (normal); None means 2", and
    # Paddle's Stream._priority_map: -1 high, 0 normal.
    with pytest.raises(ValueError, match=r"priority must be 1 or -1 \(high\), 2 or 0 \(normal\) "
                                         r"or None"):
        pd.Stream(priority=priority)


@pytest.mark.parametrize("device", ["custom_cpu", "custom_cpu:0", "xpu:0", "cpu",
                                    CustomPlace("custom_cpu", 0), CustomPlace("npu", 1)])
def test_non_gpu_devices_are_value_errors(device):
    for call in (pd.Stream, pd.Event, pd.current_stream, pd.synchronize):
        with pytest.raises(ValueError):
            call(device)


def test_place_of_another_kind_is_named_in_the_error():
    with pytest.raises(ValueError, match="is a 'npu' place, not a CUDA GPU"):
        pd.Stream(CustomPlace("npu", 1))


@needs_no_gpu
@pytest.mark.parametrize("kwargs", [
    {}, {"priority": 1}, {"priority": 2}, {"priority": -1}, {"priority": 0},
    {"priority": None, "blocking": True},
    {"device": "gpu"}, {"device": "gpu:0"}, {"device": 0}, {"device": -1},
    {"device": CUDAPlace(0)}, {"device": CustomPlace("gpu", 0)},
])
def test_valid_arguments_get_as_far_as_needing_a_gpu(kwargs):
    with pytest.raises(streams.CudaError):
        pd.Stream(**kwargs)


# ---- GPU ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.concurrent
def test_example_constructor_forms():
    # Ports the example of Stream():
    #   s1 = paddle.device.Stream()
    #   s2 = paddle.device.Stream('custom_cpu')        -> 'gpu'
    #   s3 = paddle.device.Stream('custom_cpu:0')      -> 'gpu:N'
    #   s4 = paddle.device.Stream(paddle.CustomPlace('custom_cpu', 0))  -> a place
    cur = streams.get_device()
    least, _ = streams.stream_priority_range(cur)
    s1 = pd.Stream()
    s2 = pd.Stream("gpu")
    s3 = pd.Stream(f"gpu:{cur}")
    s4 = pd.Stream(CustomPlace("gpu", cur))
    made = [s1, s2, s3, s4, pd.Stream(CUDAPlace(cur)), pd.Stream(cur), pd.Stream(-1)]
    try:
        for s in made:
            assert s.device_id == cur
            assert s.priority == least, "priority None is 2 (normal)"
            assert s.non_blocking is True, "blocking=False"
        # Independent streams: each one's work is its own.
        spin(s1, 200 * MS)
        for s in (s2, s3, s4):
            launch_empty(s)
            s.synchronize()
        assert s1.query() is False
        s1.synchronize()
    finally:
        for s in made:
            s.close()


@pytest.mark.gpu
def test_priority_1_is_the_greatest_and_2_the_least():
    least, greatest = streams.stream_priority_range()
    high, normal, default = pd.Stream(priority=1), pd.Stream(priority=2), pd.Stream()
    try:
        assert high.priority == greatest
        assert normal.priority == least
        assert default.priority == least
    finally:
        for s in (high, normal, default):
            s.close()


@pytest.mark.gpu
@pytest.mark.concurrent
def test_blocking_false_does_not_synchronize_with_the_legacy_stream():
    nb = pd.Stream()
    try:
        assert nb.flags == 1          # cudaStreamNonBlocking
        spin(nb, 300 * MS)
        launch_empty(streams.Stream.legacy)
        streams.Stream.legacy.synchronize()
        assert nb.query() is False, "the legacy stream did not wait for it"
    finally:
        nb.synchronize()
        nb.close()


@pytest.mark.gpu
def test_blocking_true_synchronizes_with_the_legacy_stream():
    b = pd.Stream(blocking=True)
    try:
        assert b.flags == 0
        spin(b, 200 * MS)
        launch_empty(streams.Stream.legacy)
        assert streams.Stream.legacy.query() is False, "legacy work waits for it"
        streams.Stream.legacy.synchronize()
        assert b.query() is True
    finally:
        b.close()


@pytest.mark.gpu
def test_device_forms_of_current_stream_and_synchronize(restore_current):
    cur = streams.get_device()
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    default = pd.current_stream()
    for device in (cur, -1, "gpu", f"gpu:{cur}", CUDAPlace(cur)):
        assert pd.current_stream(device) is default, device
    s = pd.Stream()
    try:
        for device in (cur, "gpu", f"gpu:{cur}", CUDAPlace(cur)):
            spin(s, 50 * MS)
            pd.synchronize(device)
            assert s.query() is True, device
    finally:
        s.close()


# ---- Paddle 3.x's Event(device=...) ------------------------------------------

def test_event_device_is_checked_before_cuda():
    # Event(device=None, enable_timing=False, blocking=False, interprocess=False):
    # Paddle's test_event_stream_error_handling: "invalid_device:0" is a
    # ValueError for Event as for Stream.
    with pytest.raises(ValueError):
        pd.Event(device="invalid_device:0")
    with pytest.raises(ValueError):
        pd.Stream(device="invalid_device:0")
    # Event(True) meant enable_timing=True where Paddle has no device argument.
    with pytest.raises(TypeError, match="pass enable_timing= by keyword"):
        pd.Event(True)


@needs_no_gpu
@pytest.mark.parametrize("kwargs", [
    {}, {"device": "gpu:0", "enable_timing": True}, {"device": 0, "blocking": True},
    {"device": CUDAPlace(0)}, {"device": None, "interprocess": True},
])
def test_event_valid_arguments_get_as_far_as_needing_a_gpu(kwargs):
    with pytest.raises(streams.CudaError):
        pd.Event(**kwargs)


# ---- ported from Paddle 3.x's own unit tests of paddle.device.Event/Stream ---
# (classes TestEventStreamAPIs and TestEventStreamTimingFunctionality, their
# CUDA case, 'gpu:0').  Paddle tensors become spin kernels.

@pytest.mark.gpu
def test_ported_event_stream_apis_cuda(restore_current):
    # TestEventStreamAPIs.test_event_stream_apis_cuda (_test_event_stream_apis_impl)
    device_str = "gpu:0"
    streams.set_device(0)
    event1 = pd.Event()
    event2 = pd.Event(device=device_str, enable_timing=True)
    event3 = pd.Event(device=device_str, enable_timing=True, blocking=True)
    assert isinstance(event1, pd.Event) and isinstance(event2, pd.Event)
    assert event2.is_timing and event3.is_timing and event3.flags & 0x1
    assert event2.device_id == 0
    stream1 = pd.Stream()
    stream2 = pd.Stream(device=device_str)
    stream3 = pd.Stream(device=device_str, priority=1)
    made = [event1, event2, event3, stream1, stream2, stream3]
    try:
        assert isinstance(pd.current_stream(), pd.Stream)
        event1.record()
        assert event2.query()               # never recorded: complete
        event1.synchronize()
        assert event1.query()
        assert stream1.query()              # no work submitted
        stream1.synchronize()
        stream2.wait_event(event1)
        stream2.wait_stream(stream1)
        event4 = stream1.record_event()
        made.append(event4)
        assert isinstance(event4, pd.Event)
        stream1.record_event(event3)
        start_event = pd.Event(device=device_str, enable_timing=True)
        end_event = pd.Event(device=device_str, enable_timing=True)
        made += [start_event, end_event]
        start_event.record()
        with pd.stream_guard(stream1):
            spin(pd.current_stream(), 5 * MS)
        end_event.record()
        end_event.synchronize()
        assert start_event.elapsed_time(end_event) >= 0
        prev_stream = pd.current_stream()
        with pd.stream_guard(stream1):
            assert pd.current_stream() == stream1
        assert pd.current_stream() == prev_stream
        stream_copy = pd.Stream(device=device_str)
        made.append(stream_copy)
        assert stream1 != stream_copy
        assert hash(stream1) == hash(stream1)
    finally:
        streams.synchronize_device()
        for obj in made:
            obj.close()


@pytest.mark.gpu
def test_ported_event_stream_timing_functionality():
    # TestEventStreamTimingFunctionality.test_event_stream_timing_functionality
    device_str = "gpu:0"
    start_event = pd.Event(device=device_str, enable_timing=True)
    end_event = pd.Event(device=device_str, enable_timing=True)
    stream = pd.Stream(device=device_str)
    try:
        start_event.record(stream)
        with pd.stream_guard(stream):
            spin(stream, 20 * MS)
        end_event.record(stream)
        end_event.synchronize()
        elapsed = start_event.elapsed_time(end_event)
        assert isinstance(elapsed, float) and elapsed > 0
    finally:
        for obj in (start_event, end_event, stream):
            obj.close()


@pytest.mark.gpu
@pytest.mark.skipif(streams.device_count() < 2, reason="needs two GPUs")
def test_event_is_created_on_the_device_given(restore_current):
    # "device ... 希望分配 event 的设备": the event belongs to that device,
    # whichever is current.
    streams.set_device(0)
    ev = pd.Event(device="gpu:1")
    try:
        assert ev.device_id == 1
        ev.record(pd.Stream(device=1))
        ev.synchronize()
    finally:
        ev.close()
