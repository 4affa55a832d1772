"""streams.compat.paddle reproduces paddle.device.Stream / Event and the stream functions.

The GPU tests port every code example of the reference page
(paddle-device-Stream.zh.txt), each citing the example it ports.  The
examples run on Paddle's ``custom_cpu`` device: here they run on the GPU
(``"gpu"`` for ``'custom_cpu'``, ``"gpu:N"`` for ``'custom_cpu:0'``, a place
object for ``paddle.CustomPlace``), and the work they imply is done by
spin kernels (to hold a stream busy) and the built-in fill / increment
kernels, whose results are checked on the host.
"""
import inspect
import time

import pytest

import streams
import streams.compat
from streams.compat import paddle as pd
from streams.testing import launch_empty, spin

from _support import BLOCK, GRID, MS, N, run_python, to_host  # noqa: E402  (kernels, device_buffer: conftest)

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


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


def _uninitialised(cls=pd.Stream):
    # Never given a handle: argument checks that run before CUDA is touched
    # can be observed without a GPU.
    return cls.__new__(cls)


# ---- no GPU needed -----------------------------------------------------------

def test_classes_are_core_subclasses():
    assert issubclass(pd.Stream, streams.Stream)
    assert issubclass(pd.Event, streams.Event)


def test_signatures_match_paddle():
    assert str(inspect.signature(pd.Stream)) == "(device=None, priority=None, blocking=False)"
    assert str(inspect.signature(pd.Event)) == \
        "(enable_timing=False, blocking=False, interprocess=False)"
    assert list(inspect.signature(pd.Stream.record_event).parameters) == ["self", "event"]
    assert list(inspect.signature(pd.Event.elapsed_time).parameters) == ["self", "end_event"]
    assert str(inspect.signature(pd.stream_guard)) == "(stream=None)"
    assert str(inspect.signature(pd.current_stream)) == "(device=None)"
    assert str(inspect.signature(pd.synchronize)) == "(device=None)"


def test_import_prints_nothing_and_touches_no_handle():
    code = ("import streams, streams.compat.paddle; "
            "c = streams.debug_counters(); "
            "assert c['streams_created'] == c['events_created'] == 0, c")
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


@pytest.mark.parametrize("priority", [0, 3, -1, 5, True, False, "1", 1.0, 2.5, [1]])
def test_priority_other_than_1_2_or_none_is_a_value_error(priority):
    # "priority (int|None) - 1 (high) or 2 (normal); None means 2."
    with pytest.raises(ValueError, match=r"priority must be 1 \(high\), 2 \(normal\) or None"):
        pd.Stream(priority=priority)


@pytest.mark.parametrize("device", ["custom_cpu", "custom_cpu:0", "xpu:0", "cpu",
                                    CustomPlace("custom_cpu", 0), CustomPlace("npu", 1)])
def test_non_gpu_devices_are_value_errors(device):
    with pytest.raises(ValueError):
        pd.Stream(device)
    with pytest.raises(ValueError):
        pd.current_stream(device)
    with pytest.raises(ValueError):
        pd.synchronize(device)


def test_stream_guard_none_is_a_no_op_and_others_are_type_errors():
    # stream_guard(None) "just yields" (does not switch streams).
    with pd.stream_guard() as entered:
        assert entered is None
    with pd.stream_guard(None):
        pass
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        pd.stream_guard("gpu:0")


def test_argument_type_errors_before_cuda():
    with pytest.raises(TypeError, match="event must be an Event or None"):
        _uninitialised().record_event(object())
    with pytest.raises(TypeError, match="end_event must be an Event"):
        _uninitialised(pd.Event).elapsed_time("e")


@needs_no_gpu
@pytest.mark.parametrize("kwargs", [
    {}, {"priority": 1}, {"priority": 2}, {"priority": None, "blocking": True},
    {"device": "gpu"}, {"device": "gpu:0"}, {"device": 0}, {"device": -1},
    {"device": CUDAPlace(0)}, {"device": CustomPlace("gpu", 0)},
])
def test_valid_arguments_get_as_far_as_needing_a_gpu(kwargs):
    with pytest.raises(streams.CudaError):
        pd.Stream(**kwargs)


@needs_no_gpu
def test_no_gpu_functions_raise_cuda_error():
    for call in (pd.Event, pd.current_stream, pd.synchronize, lambda: pd.current_stream("gpu")):
        with pytest.raises(streams.CudaError):
            call()


# ---- GPU ---------------------------------------------------------------------

@pytest.fixture
def restore_current():
    before = streams.current_stream()
    yield
    before.use()


@pytest.mark.gpu
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
            assert isinstance(s, pd.Stream)
            assert s.device_id == cur
            assert s.priority == least, "priority None is 2 (normal)"
            assert s.non_blocking is True, "blocking=False"
        # Four independent streams: each one's work is its own.
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
def test_example_record_event():
    # Ports the example of record_event(event=None) (the page shows it in
    # both record_event sections):
    #   s = paddle.device.Stream()
    #   e1 = s.record_event()
    #   e2 = paddle.device.Event()
    #   s.record_event(e2)
    s = pd.Stream()
    try:
        spin(s, 200 * MS)
        e1 = s.record_event()
        assert isinstance(e1, pd.Event)
        e2 = pd.Event()
        assert s.record_event(e2) is e2, "returns the event it recorded"
        assert e1.query() is False and e2.query() is False, "both marked behind the spin"
        e2.synchronize()
        assert e1.query() is True and s.query() is True
        e1.close()
        e2.close()
    finally:
        s.close()


@pytest.mark.gpu
def test_example_wait_event(kernels, device_buffer):
    # Ports the example of wait_event(event):
    #   s1 = paddle.device.Stream(); s2 = paddle.device.Stream()
    #   e = paddle.device.Event()
    #   e.record(s1)
    #   s2.wait_event(e)
    # with work before the record on s1 (a spin, then x = 7) and after the
    # wait on s2 (y = x + 1), whose result shows s2 waited for s1.
    x, y = device_buffer(), device_buffer()
    s1, s2 = pd.Stream(), pd.Stream()
    try:
        spin(s1, 200 * MS)
        s1.launch(kernels.fill, GRID, BLOCK, x, 7, N)
        e = pd.Event()
        e.record(s1)
        s2.wait_event(e)
        streams.memcpy_async(y, x, stream=s2)
        s2.launch(kernels.increment, GRID, BLOCK, y, N)
        assert s2.query() is False, "s2 waits for the event"
        assert (to_host(y, s2) == 8).all()
        assert e.query() is True
        e.close()
    finally:
        s1.synchronize()
        s1.close()
        s2.close()


@pytest.mark.gpu
def test_example_wait_stream(kernels, device_buffer):
    # Ports the example of wait_stream(stream):
    #   s1 = paddle.device.Stream(); s2 = paddle.device.Stream()
    #   s1.wait_stream(s2)
    # with work on s2 before the call (a spin, then x = 41) and on s1 after
    # it (y = x + 1).
    x, y = device_buffer(), device_buffer()
    s1, s2 = pd.Stream(), pd.Stream()
    try:
        spin(s2, 200 * MS)
        s2.launch(kernels.fill, GRID, BLOCK, x, 41, N)
        s1.wait_stream(s2)
        streams.memcpy_async(y, x, stream=s1)
        s1.launch(kernels.increment, GRID, BLOCK, y, N)
        assert s1.query() is False, "s1 waits for what s2 had queued"
        assert (to_host(y, s1) == 42).all()
        assert s2.query() is True
    finally:
        s2.synchronize()
        s1.close()
        s2.close()


@pytest.mark.gpu
def test_example_query():
    # Ports the example of query():
    #   s = paddle.device.Stream()
    #   s.query()          (True: nothing was queued)
    s = pd.Stream()
    try:
        assert s.query() is True
        spin(s, 200 * MS)
        assert s.query() is False
        s.synchronize()
        assert s.query() is True
    finally:
        s.close()


@pytest.mark.gpu
def test_example_synchronize(kernels, device_buffer):
    # Ports the example of synchronize():
    #   s = paddle.device.Stream()
    #   s.synchronize()
    # with a spin and a fill queued first: synchronize returns after both.
    x = device_buffer()
    s = pd.Stream()
    try:
        spin(s, 150 * MS)
        s.launch(kernels.fill, GRID, BLOCK, x, 3, N)
        t0 = time.perf_counter()
        s.synchronize()
        assert time.perf_counter() - t0 > 0.1
        assert s.query() is True
        assert (to_host(x, s) == 3).all()
    finally:
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
def test_stream_guard_selects_and_restores(restore_current):
    before = pd.current_stream()
    s = pd.Stream()
    try:
        with pd.stream_guard(s) as entered:
            assert entered is s
            assert pd.current_stream() is s
            spin(streams.current_stream(), 200 * MS)
            with pd.stream_guard(None):
                assert pd.current_stream() is s
        assert s.query() is False, "the spin went to s"
        assert pd.current_stream() == before
        s.synchronize()
    finally:
        s.close()


@pytest.mark.gpu
def test_current_stream_and_device_wide_synchronize(restore_current):
    cur = streams.get_device()
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    for device in (None, cur, -1, "gpu", f"gpu:{cur}", CUDAPlace(cur)):
        got = pd.current_stream(device)
        assert got == streams.Stream.legacy
        assert isinstance(got, pd.Stream)
    a, b = pd.Stream(), pd.Stream(priority=1)
    try:
        spin(a, 150 * MS)
        spin(b, 150 * MS)
        pd.synchronize()
        assert a.query() is True and b.query() is True
        for device in (cur, "gpu", f"gpu:{cur}", CUDAPlace(cur)):
            spin(a, 50 * MS)
            pd.synchronize(device)
            assert a.query() is True
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_event_record_on_current_stream_and_elapsed_time(restore_current):
    s = pd.Stream()
    start, end = pd.Event(enable_timing=True), pd.Event(enable_timing=True)
    try:
        with pd.stream_guard(s):
            start.record()            # stream=None: the current stream, s
            spin(s, 200 * MS)
            end.record()
        assert end.query() is False
        end.synchronize()
        assert 150 < start.elapsed_time(end) < 5000
    finally:
        start.close()
        end.close()
        s.close()
