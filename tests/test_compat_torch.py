"""streams.compat.torch reproduces torch.cuda.Stream / Event and the stream functions.

The reference page (torch-cuda-Stream.txt) has no code examples: the GPU
tests check each documented statement instead, quoted in the test's comment.
Ordering is observed with spin kernels holding a stream busy.
"""
import inspect
import threading
import time
from types import SimpleNamespace

import pytest

from _support import run_python

import streams
import streams.compat
from streams.compat import torch as tc
from streams.testing import launch_empty, spin

MS = 1000  # spin() takes microseconds

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def _uninitialised(cls=tc.Stream):
    # Never given a handle: argument checks that run before CUDA is touched
    # can be observed without a GPU.
    return cls.__new__(cls)


# ---- no GPU needed -----------------------------------------------------------

def test_classes_are_core_subclasses():
    assert issubclass(tc.Stream, streams.Stream)
    assert issubclass(tc.Event, streams.Event)


def test_signatures_match_torch():
    assert str(inspect.signature(tc.Stream)) == "(device=None, priority=0, **kwargs)"
    assert str(inspect.signature(tc.Event)) == \
        "(enable_timing=False, blocking=False, interprocess=False)"
    assert list(inspect.signature(tc.Stream.record_event).parameters) == ["self", "event"]
    assert list(inspect.signature(tc.Event.elapsed_time).parameters) == ["self", "end_event"]
    for fn in (tc.current_stream, tc.default_stream, tc.synchronize):
        assert str(inspect.signature(fn)) == "(device=None)", fn
    assert str(inspect.signature(tc.stream)) == "(stream)"
    assert str(inspect.signature(tc.set_stream)) == "(stream)"


def test_import_prints_nothing_and_touches_no_handle():
    code = ("import streams, streams.compat.torch; "
            "c = streams.debug_counters(); "
            "assert c['streams_created'] == c['events_created'] == 0, c")
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


def test_stream_rejects_unknown_keywords():
    with pytest.raises(TypeError, match="unexpected keyword argument.*stream_id"):
        tc.Stream(stream_id=3)


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


def test_stream_context_and_set_stream_type_errors():
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        tc.stream("s")
    with pytest.raises(TypeError, match="stream must be a Stream"):
        tc.set_stream(42)


def test_none_is_a_no_op_for_stream_and_set_stream():
    # torch.cuda.stream(None) and set_stream(None) do nothing (no CUDA call).
    with tc.stream(None) as entered:
        assert entered is None
    assert tc.set_stream(None) is None


def test_argument_type_errors_before_cuda():
    with pytest.raises(TypeError, match="event must be an Event or None"):
        _uninitialised().record_event("e")
    with pytest.raises(TypeError, match="end_event must be an Event"):
        _uninitialised(tc.Event).elapsed_time(None)
    with pytest.raises(ValueError, match="interprocess=True requires enable_timing=False"):
        tc.Event(enable_timing=True, interprocess=True)


@needs_no_gpu
def test_negative_device_means_current_device():
    # Accepted as "the current device": what fails is only the missing GPU.
    with pytest.raises(streams.CudaError):
        tc.Stream(device=-1)
    with pytest.raises(streams.CudaError):
        tc.Stream(priority=-(10 ** 6))
    for fn in (tc.current_stream, tc.default_stream, tc.synchronize):
        with pytest.raises(streams.CudaError):
            fn(-1)
    with pytest.raises(streams.CudaError):
        tc.Event()


# ---- GPU ---------------------------------------------------------------------

@pytest.fixture
def restore_current():
    device = streams.get_device()
    before = streams.current_stream()
    yield
    streams.set_device(device)
    before.use()


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
    least, greatest = streams.stream_priority_range()
    asked_expected = [(least + 100, least), (greatest - 100, greatest), (least, least),
                      (greatest, greatest), (0, min(max(0, greatest), least))]
    made = [tc.Stream(priority=asked) for asked, _ in asked_expected]
    try:
        assert [s.priority for s in made] == [expected for _, expected in asked_expected]
    finally:
        for s in made:
            s.close()
    s = tc.Stream()
    try:
        assert s.priority == min(max(0, greatest), least)
    finally:
        s.close()


@pytest.mark.gpu
def test_query_reports_completion():
    # "query(): Check if all the work submitted has been completed. Returns:
    # A boolean indicating if all kernels in this stream are completed."
    s = tc.Stream()
    try:
        assert s.query() is True
        spin(s, 200 * MS)
        assert s.query() is False
        s.synchronize()
        assert s.query() is True
    finally:
        s.close()


@pytest.mark.gpu
def test_record_event_allocates_or_records_the_given_event():
    # "record_event(event=None): Record an event. event: event to record. If
    # not given, a new one will be allocated. Returns: Recorded event."
    s = tc.Stream()
    try:
        spin(s, 200 * MS)
        new = s.record_event()
        assert isinstance(new, tc.Event)
        assert new.query() is False, "recorded behind the spin"
        given = tc.Event()
        assert s.record_event(given) is given
        s.synchronize()
        assert new.query() is True and given.query() is True
        new.close()
        given.close()
    finally:
        s.close()


@pytest.mark.gpu
def test_synchronize_waits_for_all_kernels():
    # "synchronize(): Wait for all the kernels in this stream to complete."
    s = tc.Stream()
    try:
        spin(s, 150 * MS)
        t0 = time.perf_counter()
        s.synchronize()
        assert time.perf_counter() - t0 > 0.1
        assert s.query() is True
    finally:
        s.close()


@pytest.mark.gpu
def test_wait_event_returns_at_once_and_orders_future_work():
    # "wait_event(event): Make all future work submitted to the stream wait
    # for an event. ... This function returns without waiting for event:
    # only future operations are affected."
    a, b = tc.Stream(), tc.Stream()
    try:
        spin(a, 300 * MS)
        ev = a.record_event()
        t0 = time.perf_counter()
        b.wait_event(ev)
        assert time.perf_counter() - t0 < 0.1, "wait_event must not block the host"
        launch_empty(b)
        assert b.query() is False, "future work on b waits for the event"
        b.synchronize()
        assert a.query() is True
        ev.close()
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_wait_stream_waits_for_work_submitted_before_the_call_only():
    # "wait_stream(stream): All future work submitted to this stream will wait
    # until all kernels submitted to a given stream at the time of call
    # complete. ... This function returns without waiting for currently
    # enqueued kernels in stream: only future operations are affected."
    a, b = tc.Stream(), tc.Stream()
    try:
        spin(a, 200 * MS)
        t0 = time.perf_counter()
        b.wait_stream(a)
        assert time.perf_counter() - t0 < 0.1, "wait_stream must not block the host"
        spin(a, 1500 * MS)            # submitted after the call: b must not wait for it
        launch_empty(b)
        assert b.query() is False, "b waits for a's first spin"
        b.synchronize()
        assert a.query() is False, "b did not wait for a's later spin"
        a.synchronize()
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_cuda_stream_is_the_handle():
    s = tc.Stream()
    try:
        assert s.cuda_stream == s.handle not in (0, 1, 2)
        assert streams.Stream.from_external(s) is s
    finally:
        s.close()


@pytest.mark.gpu
def test_default_stream_has_cuda_stream_0_and_is_current_by_default(restore_current):
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    default = tc.default_stream()
    assert default.handle == 0
    assert tc.current_stream() == default
    assert tc.current_stream(-1) == tc.default_stream(-1) == default
    assert isinstance(default, tc.Stream)
    assert default.cuda_stream == 0
    assert default.device_index == streams.get_device()
    assert tc.default_stream(streams.get_device()).device == streams.Device(
        streams.get_device())
    # The default stream synchronizes with other (blocking) streams.
    s = tc.Stream()
    try:
        spin(s, 200 * MS)
        launch_empty(default)
        assert default.query() is False
        default.synchronize()
        assert s.query() is True
    finally:
        s.close()


@pytest.mark.gpu
def test_stream_context_selects_and_restores(restore_current):
    # torch.cuda.stream(s): the operators in the block run on s.
    before = tc.current_stream()
    s = tc.Stream()
    try:
        with tc.stream(s):
            assert tc.current_stream() is s
            spin(streams.current_stream(), 200 * MS)
            with tc.stream(None):        # a no-op, even nested
                assert tc.current_stream() is s
        assert s.query() is False, "the spin went to s"
        assert tc.current_stream() == before
        s.synchronize()
    finally:
        s.close()


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
        tc.default_stream().use()
        s.close()


@pytest.mark.gpu
def test_current_stream_per_thread(restore_current):
    s = tc.Stream()
    seen = []
    try:
        with tc.stream(s):
            t = threading.Thread(target=lambda: seen.append(tc.current_stream()))
            t.start()
            t.join()
            assert tc.current_stream() is s
        assert seen[0] == tc.default_stream() != s
    finally:
        s.close()


@pytest.mark.gpu
def test_synchronize_waits_for_every_stream_of_the_device():
    a, b = tc.Stream(), tc.Stream(priority=-100)
    try:
        spin(a, 150 * MS)
        spin(b, 150 * MS)
        tc.synchronize()
        assert a.query() is True and b.query() is True
        spin(a, 100 * MS)
        tc.synchronize(-1)
        assert a.query() is True
        spin(b, 100 * MS)
        tc.synchronize(streams.get_device())
        assert b.query() is True
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_event_record_wait_and_elapsed_time(restore_current):
    a, b = tc.Stream(), tc.Stream()
    start, end = tc.Event(enable_timing=True), tc.Event(enable_timing=True)
    try:
        with tc.stream(a):
            start.record()              # stream=None: the current stream, a
            spin(a, 200 * MS)
            end.record()
        assert end.query() is False
        end.wait(b)                     # b's future work waits for the end event
        launch_empty(b)
        assert b.query() is False
        with tc.stream(b):
            ev = tc.Event()
            ev.wait()                   # stream=None: the current stream, b (nothing recorded)
            ev.close()
        end.synchronize()
        assert end.query() is True
        assert 150 < start.elapsed_time(end) < 5000
        assert 150 < start.elapsed_time(end_event=end) < 5000
        b.synchronize()
    finally:
        start.close()
        end.close()
        a.close()
        b.close()
