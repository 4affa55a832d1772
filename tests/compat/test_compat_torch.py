"""What only streams.compat.torch has (the shared behaviour is in
test_compat_conformance.py): its device and priority arguments,
``priority_range``, ``cuda_stream``/``device_index``, ``default_stream`` and
``set_stream``.

The reference page (torch-cuda-Stream.txt) has no code examples: the GPU
tests check each documented statement instead, quoted in the test's comment.
"""
from types import SimpleNamespace

import pytest

from _support import MS, close_all, closing, needs_no_gpu, uninitialised

import streams
from streams.compat import torch as tc
from streams.testing import launch_empty, spin

# ---- no GPU needed -----------------------------------------------------------


def test_stream_rejects_unknown_keywords():
    with pytest.raises(TypeError, match=r"^Stream\(\) got unexpected keyword argument\(s\): "
                                        r"stream_id, x$"):
        tc.Stream(x=1, stream_id=3)


@pytest.mark.parametrize("priority", ["high", 1.5, None, True])
def test_stream_priority_must_be_an_int(priority):
    with pytest.raises(TypeError, match="priority must be an int"):
        tc.Stream(priority=priority)


@pytest.mark.parametrize("device, exc", [
    ("cpu", ValueError),
    ("cuda:x", ValueError),
    (SimpleNamespace(type="cpu", index=0), ValueError),
    (True, TypeError),
    (1.0, TypeError),
])
def test_stream_rejects_non_cuda_devices(device, exc):
    with pytest.raises(exc):
        tc.Stream(device=device)


def test_set_stream_type_error_and_none():
    with pytest.raises(TypeError, match="stream must be a Stream"):
        tc.set_stream(42)
    assert tc.set_stream(None) is None      # torch: a no-op, with no CUDA call


def test_interprocess_events_cannot_time():
    with pytest.raises(ValueError, match="interprocess=True requires enable_timing=False"):
        tc.Event(enable_timing=True, interprocess=True)


@needs_no_gpu
def test_negative_device_and_out_of_range_priority_reach_cuda():
    # Accepted (the current device; the nearest priority): what fails is
    # only the missing GPU.
    for call in (lambda: tc.Stream(device=-1), lambda: tc.Stream(priority=-(10 ** 6)),
                 lambda: tc.default_stream(-1), lambda: tc.synchronize(-1),
                 tc.Stream.priority_range):
        with pytest.raises(streams.CudaError):
            call()


# ---- GPU ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("device", [None, -1, -7])
def test_none_or_negative_device_is_the_current_device(device):
    # "If device is None (default) or a negative integer, this will use the
    # current device."
    s = tc.Stream(device=device)
    try:
        assert s.device_id == s.device_index == streams.get_device()
        assert s.device == streams.Device(streams.get_device())
    finally:
        s.close()


@pytest.mark.gpu
def test_device_given_as_int_string_or_device_object():
    # "device (torch.device or int, optional)".
    cur = streams.get_device()
    made = [tc.Stream(cur), tc.Stream(f"cuda:{cur}"), tc.Stream(streams.Device(cur)),
            tc.Stream(SimpleNamespace(type="cuda", index=cur)),
            tc.Stream(SimpleNamespace(type="cuda", index=None))]
    try:
        for s in made:
            assert s.device_id == cur
    finally:
        for s in made:
            s.close()


@pytest.mark.gpu
def test_priority_outside_the_range_maps_to_the_nearest():
    # "priority ... can be positive, 0, or negative. A lower number indicates
    # a higher priority. By default, the priority is set to 0. If the value
    # falls outside of the allowed priority range, it will automatically be
    # mapped to the nearest valid priority (lowest for large positive numbers
    # or highest for large negative numbers)."
    least, greatest = tc.Stream.priority_range()
    # PyTorch's range: the device's, cut at its 4 levels (0 to -3).
    device_least, device_greatest = streams.stream_priority_range()
    assert (least, greatest) == (device_least, max(device_greatest, device_least - 3))
    assert greatest < least, "a GPU with stream priorities"
    asked_expected = [(least + 100, least), (greatest - 100, greatest), (least, least),
                      (greatest, greatest), (0, min(max(0, greatest), least))]
    made = [tc.Stream(priority=asked) for asked, _ in asked_expected] + [tc.Stream()]
    try:
        assert [s.priority for s in made] == \
            [expected for _, expected in asked_expected] + [min(max(0, greatest), least)]
    finally:
        close_all(*made)


@pytest.mark.gpu
def test_synchronize_takes_a_device():
    # torch.cuda.synchronize(device=None): "device for which to synchronize.
    # It uses the current device, given by current_device(), if device is None."
    with closing(tc.Stream()) as s:
        for device in (-1, streams.get_device(), f"cuda:{streams.get_device()}"):
            spin(s, 100 * MS)
            tc.synchronize(device)
            assert s.query() is True, device


@pytest.mark.gpu
def test_cuda_stream_is_the_handle():
    with closing(tc.Stream()) as s:
        assert s.cuda_stream == s.handle not in (0, 1, 2)
        assert streams.Stream.from_external(s) is s


@pytest.mark.gpu
def test_default_stream_is_cuda_stream_0_of_its_device(restore_current):
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    cur = streams.get_device()
    default = tc.default_stream()
    assert default.cuda_stream == 0
    assert default.device_index == cur and default.device == streams.Device(cur)
    assert tc.default_stream(cur) is default and tc.default_stream(-1) is default
    assert tc.current_stream() is default
    assert repr(default) == f"<streams.compat.torch.Stream device={cur} cuda_stream=0x0>"


@pytest.mark.gpu
def test_set_stream_makes_current(restore_current):
    s = tc.Stream()
    try:
        tc.set_stream(s)
        assert tc.current_stream() is s
        tc.set_stream(None)
        assert tc.current_stream() is s
        ev = tc.Event()
        spin(s, 200 * MS)
        ev.record()                     # "the current stream" is now s
        assert ev.query() is False
        ev.synchronize()
        ev.close()
    finally:
        s.close()


@pytest.mark.gpu
@pytest.mark.skipif(streams.device_count() < 2, reason="needs two GPUs")
def test_default_streams_of_two_devices_and_set_stream(restore_current):
    d0, d1 = tc.default_stream(0), tc.default_stream(1)
    assert d0 != d1 and not (d0 == d1)
    assert (d0.device_index, d1.device_index) == (0, 1)
    streams.set_device(0)
    tc.set_stream(d1)                   # makes its device current too
    assert streams.get_device() == 1
    assert tc.current_stream() is d1
    streams.Stream.legacy.use()         # device 1 as it was (the fixture restores device 0)


# ---- PyTorch 2.11's Event(external=...) --------------------------------------

def test_event_external_argument_and_checks_before_cuda():
    # torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False,
    # external=False); an Event made by __new__ alone is not external.
    assert tc.Event.__new__(tc.Event).external is False
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        uninitialised(tc.Event).record("not a stream")
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        uninitialised(tc.Event).wait(42)


# ---- ported from PyTorch 2.11's test/test_cuda.py (TestCuda) -----------------
# Each test names the PyTorch test it ports.  torch.cuda._sleep becomes
# streams.testing.spin, and tensors become the fill kernels.

@pytest.mark.gpu
def test_ported_streams(restore_current):
    # TestCuda.test_streams
    default_stream = tc.current_stream()
    user_stream = tc.Stream()
    try:
        assert tc.current_stream() == default_stream
        assert default_stream != user_stream
        assert default_stream.cuda_stream == 0
        assert user_stream.cuda_stream != 0
        with tc.stream(user_stream):
            assert tc.current_stream() == user_stream
        assert user_stream.query()
        spin(default_stream, 20 * MS)
        default_stream.synchronize()
        assert default_stream.query()
    finally:
        user_stream.close()


@pytest.mark.gpu
def test_ported_stream_event_repr():
    # TestCuda.test_stream_event_repr ("torch.cuda.Stream" in repr: here
    # the compat module's names)
    s = tc.current_stream()
    assert "streams.compat.torch.Stream" in repr(s)
    e = tc.Event()
    assert "streams.compat.torch.Event" in repr(e)
    s.record_event(e)
    assert "streams.compat.torch.Event" in repr(e)
    e.synchronize()
    e.close()


@pytest.mark.gpu
def test_ported_events():
    # TestCuda.test_events
    stream = tc.current_stream()
    event = tc.Event(enable_timing=True)
    start_event = tc.Event(enable_timing=True)
    try:
        assert event.query()
        stream.record_event(start_event)
        spin(stream, 50 * MS)
        stream.record_event(event)
        assert not event.query()
        event.synchronize()
        assert event.query()
        assert start_event.elapsed_time(event) > 0
    finally:
        event.close()
        start_event.close()


@pytest.mark.gpu
def test_ported_streams_priority():
    # TestCuda.test_streams_priority (PyTorch's uses devices 0 and 1; the
    # second device is checked where there is one)
    low, high = tc.Stream.priority_range()
    made = []
    for device in range(min(2, streams.device_count())):
        s0 = tc.Stream(device=device, priority=low)
        s1 = tc.Stream(device=device, priority=high)
        made += [s0, s1]
        assert low == s0.priority and high == s1.priority
        assert s0.device == streams.Device(device) == s1.device
    for s in made:
        s.close()


@pytest.mark.gpu
def test_ported_events_wait(restore_current):
    # TestCuda.test_events_wait, on one device (PyTorch's spans two): s1
    # waits for an event recorded behind a spin on s0.
    s0, s1 = tc.Stream(), tc.Stream()
    e0 = tc.Event()
    try:
        spin(s0, 100 * MS)
        s0.record_event(e0)
        assert not s0.query()
        assert s1.query()
        s1.wait_event(e0)
        launch_empty(s1)
        assert not s1.query(), "s1 must wait for e0"
        s1.synchronize()
        assert e0.query() and s0.query() and s1.query()
    finally:
        for obj in (s0, s1, e0):
            obj.close()


@pytest.mark.gpu
def test_external_event_outside_a_capture_is_a_plain_event():
    # "external ... when captured in a cuda graph": outside a capture the
    # event records and is waited for as any other (CUDA itself would
    # refuse cudaEventRecordExternal there).
    s0, s1 = tc.Stream(), tc.Stream()
    ev = tc.Event(external=True)
    try:
        assert ev.external is True
        spin(s0, 100 * MS)
        s0.record_event(ev)
        s1.wait_event(ev)
        launch_empty(s1)
        assert not s1.query(), "s1 must wait for the external event"
        s1.synchronize()
        ev.record()         # on the current stream
        ev.wait(s1)
        s1.synchronize()
    finally:
        for obj in (s0, s1, ev):
            obj.close()


@pytest.mark.gpu
@pytest.mark.parametrize("external", [False, True])
def test_external_event_makes_event_nodes_in_a_capture(external):
    # "external (bool) - indicates whether this event should create event
    # record and event wait nodes, or create an internal cross-stream
    # dependency, when captured in a cuda graph".  A plain event recorded in
    # a capture is an internal dependency (no node).  Only the external
    # event is waited for: waiting inside a capture for an event recorded
    # outside it is what cudaEventWaitExternal is for.
    s = tc.Stream()
    ev = tc.Event(external=external)
    waited = tc.Event(external=True)
    try:
        waited.record(s)
        s.synchronize()
        with s.capture() as cap:
            launch_empty(s)
            if external:
                s.wait_event(waited)
            s.record_event(ev)
            launch_empty(s)
        types = sorted(n.type.name for n in cap.graph.nodes)
        expected = ["EVENT_RECORD", "EVENT_WAIT", "KERNEL", "KERNEL"] if external \
            else ["KERNEL", "KERNEL"]
        assert types == expected
        cap.graph.close()
    finally:
        for obj in (s, ev, waited):
            obj.close()
