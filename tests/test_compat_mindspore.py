"""streams.compat.mindspore reproduces mindspore.hal.Stream / Event and the stream functions.

The GPU tests port every code example of the reference page
(mindspore-hal-Stream.zh.txt), each citing the example it ports.  The
examples' tensors of ones become device buffers of uint32, their operators
become the built-in fill / increment kernels launched on the *current*
stream (where MindSpore's operators go), and a spin kernel in front makes
the producing work slow enough that a missing dependency would show.  The
printed results are checked on the host with numpy.
"""
import inspect
import time

import pytest

import streams
import streams.compat
from streams.compat import mindspore as ms
from streams.testing import spin

from _support import BLOCK, GRID, MS, N, run_python, to_host  # noqa: E402  (kernels, device_buffer: conftest)

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def _uninitialised(cls=ms.Stream):
    # Never given a handle: the argument checks, which come before any CUDA
    # call, can be observed without a GPU.
    return cls.__new__(cls)


# ---- no GPU needed -----------------------------------------------------------

def test_classes_are_core_subclasses():
    assert issubclass(ms.Stream, streams.Stream)
    assert issubclass(ms.Event, streams.Event)


def test_signatures_match_mindspore():
    assert str(inspect.signature(ms.Stream)) == "(priority=0, **kwargs)"
    assert str(inspect.signature(ms.Event)) == "(enable_timing=False, blocking=False)"
    assert str(inspect.signature(ms.StreamCtx)) == "(ctx_stream)"
    assert str(inspect.signature(ms.current_stream)) == "()"
    assert str(inspect.signature(ms.synchronize)) == "()"
    for name, params in (("record_event", ["self", "event"]), ("wait_event", ["self", "event"]),
                         ("wait_stream", ["self", "stream"])):
        assert list(inspect.signature(getattr(ms.Stream, name)).parameters)[:2] == params
    assert list(inspect.signature(ms.Event.elapsed_time).parameters) == ["self", "end_event"]


def test_import_prints_nothing_and_touches_no_handle():
    code = ("import streams, streams.compat.mindspore; "
            "c = streams.debug_counters(); "
            "assert c['streams_created'] == c['events_created'] == 0, c")
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


def test_stream_rejects_unknown_keywords_and_non_int_priority():
    with pytest.raises(TypeError, match="unexpected keyword argument.*device"):
        ms.Stream(device=0)
    with pytest.raises(TypeError, match="priority must be an int"):
        ms.Stream(priority="high")


@pytest.mark.parametrize("bad", [None, "event", 1, object()])
def test_wait_event_type_error(bad):
    # "wait_event: TypeError - event is not a mindspore.hal.Event."
    with pytest.raises(TypeError, match="event must be an Event"):
        _uninitialised().wait_event(bad)


@pytest.mark.parametrize("bad", ["event", 1, object()])
def test_record_event_type_error(bad):
    # "record_event: TypeError - event is neither a mindspore.hal.Event nor None."
    with pytest.raises(TypeError, match="event must be an Event or None"):
        _uninitialised().record_event(bad)


@pytest.mark.parametrize("bad", [None, "stream", 1, object()])
def test_wait_stream_type_error(bad):
    # "wait_stream: TypeError - stream is not a mindspore.hal.Stream."
    with pytest.raises(TypeError, match="stream must be a Stream"):
        _uninitialised().wait_stream(bad)


def test_event_argument_type_errors():
    ev = _uninitialised(ms.Event)
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        ev.record("s")
    with pytest.raises(TypeError, match="stream must be a Stream or None"):
        ev.wait(1)
    with pytest.raises(TypeError, match="end_event must be an Event"):
        ev.elapsed_time(None)


def test_stream_ctx_none_is_a_no_op_and_others_are_type_errors():
    # StreamCtx: "This manager is a no-op if it's None"; "TypeError - If
    # 'stream' is neither a mindspore.hal.Stream nor a None."
    with ms.StreamCtx(None) as entered:
        assert entered is None
    with pytest.raises(TypeError, match="ctx_stream must be a Stream or None"):
        ms.StreamCtx("s1")


def test_core_and_other_compat_objects_pass_the_type_checks():
    # Validation accepts every streams Stream/Event; the failure that
    # follows comes from the uninitialised objects, not from a TypeError.
    from streams.compat import torch as tc
    s = _uninitialised()
    for ev in (_uninitialised(streams.Event), _uninitialised(tc.Event)):
        with pytest.raises(ValueError, match="closed"):
            s.wait_event(ev)
    for other in (_uninitialised(streams.Stream), _uninitialised(tc.Stream)):
        with pytest.raises(ValueError, match="closed"):
            s.wait_stream(other)
    ms.StreamCtx(streams.Stream.legacy)


@needs_no_gpu
def test_no_gpu_raises_cuda_error():
    for call in (ms.Stream, lambda: ms.Stream(priority=-1), ms.Event, ms.current_stream,
                 ms.synchronize):
        with pytest.raises(streams.CudaError):
            call()


# ---- GPU ---------------------------------------------------------------------

def on_current_stream():
    """Where MindSpore would enqueue an operator: the current stream."""
    return streams.current_stream()


@pytest.fixture
def main_stream():
    # The examples' "current stream" outside StreamCtx.  A non-blocking one,
    # so that the legacy stream's implicit synchronization with the
    # examples' (blocking) streams cannot stand in for the dependency under
    # test: only record_event/wait_event or wait_stream order it.
    main = streams.Stream(non_blocking=True)
    with main:
        yield main
    main.synchronize()
    main.close()


@pytest.mark.gpu
def test_example_query_and_synchronize(kernels, device_buffer):
    # Ports the example of query() and synchronize() (the same in both sections):
    #   a = Tensor(np.ones([1024, 2048])); b = Tensor(np.ones([2048, 4096]))
    #   s1 = ms.hal.Stream()
    #   with ms.hal.StreamCtx(s1):
    #       c = ops.matmul(a, b)
    #   s1.synchronize()
    #   assert s1.query()
    # The matmul is long work (a spin) and its result, 2048 in every entry.
    c = device_buffer()
    s1 = ms.Stream()
    try:
        with ms.StreamCtx(s1):
            stream = on_current_stream()
            assert stream is s1
            spin(stream, 200 * MS)
            stream.launch(kernels.fill, GRID, BLOCK, c, 2048, N)
        assert s1.query() is False, "the matmul was queued on s1"
        s1.synchronize()
        assert s1.query()
        assert (to_host(c, s1) == 2048).all()
    finally:
        s1.close()


@pytest.mark.gpu
def test_example_record_event_and_wait_event(kernels, device_buffer, main_stream):
    # Ports the example of record_event() and wait_event() (the same in both sections):
    #   a = Tensor(np.ones([3, 3])); b = Tensor(np.ones([3, 3]))
    #   s1 = ms.hal.Stream()
    #   with ms.hal.StreamCtx(s1):
    #       c = a + b
    #       event = s1.record_event()
    #       d = a * b
    #   cur_stream = ms.hal.current_stream()
    #   cur_stream.wait_event(event)
    #   e = c + 3
    #   print(e)           -> [[5. 5. 5.] [5. 5. 5.] [5. 5. 5.]]
    # c = a + b is a spin (slow work), c = 1 (a), c += 1 (+ b); d = a * b is
    # d = 1; e = c + 3 is e = c, then three increments.  Without the wait,
    # e would be computed from c before c exists (0 + 3).
    c, d, e = device_buffer(), device_buffer(), device_buffer()
    s1 = ms.Stream()
    try:
        with ms.StreamCtx(s1):
            stream = on_current_stream()
            assert stream is s1
            spin(stream, 200 * MS)
            stream.launch(kernels.fill, GRID, BLOCK, c, 1, N)
            stream.launch(kernels.increment, GRID, BLOCK, c, N)
            event = s1.record_event()
            stream.launch(kernels.fill, GRID, BLOCK, d, 1, N)
        assert isinstance(event, ms.Event)
        cur_stream = ms.current_stream()
        assert cur_stream == main_stream and cur_stream != s1
        cur_stream.wait_event(event)
        assert event.query() is False, "c is still being computed"
        stream = on_current_stream()
        streams.memcpy_async(e, c, stream=stream)
        for _ in range(3):
            stream.launch(kernels.increment, GRID, BLOCK, e, N)
        assert cur_stream.query() is False, "e waits for c"
        assert (to_host(e, cur_stream) == 5).all()
        assert event.query() is True
        assert (to_host(d, s1) == 1).all()
        event.close()
    finally:
        s1.synchronize()
        s1.close()


@pytest.mark.gpu
def test_example_wait_stream(kernels, device_buffer, main_stream):
    # Ports the example of wait_stream():
    #   s1 = ms.hal.Stream(); s2 = ms.hal.Stream()
    #   a = Tensor(np.ones([1, 2])); b = Tensor(np.ones([2, 2]))
    #   with ms.hal.StreamCtx(s1):
    #       c = ops.matmul(a, b)         -> [[2, 2]]
    #   with ms.hal.StreamCtx(s2):
    #       s2.wait_stream(s1)
    #       d = ops.matmul(c, b)         -> [[c0 + c1, c0 + c1]] = [[4, 4]]
    #   ms.hal.synchronize()
    #   print(d)                         -> [[4. 4.]]
    # c is a spin (slow work) then c = 2; d = c + c is d = c, then two
    # increments (c is 2).  Without the wait, d would be 0 + 2.
    c, d = device_buffer(), device_buffer()
    s1, s2 = ms.Stream(), ms.Stream()
    try:
        with ms.StreamCtx(s1):
            stream = on_current_stream()
            spin(stream, 200 * MS)
            stream.launch(kernels.fill, GRID, BLOCK, c, 2, N)
        with ms.StreamCtx(s2):
            s2.wait_stream(s1)
            stream = on_current_stream()
            assert stream is s2
            streams.memcpy_async(d, c, stream=stream)
            for _ in range(2):
                stream.launch(kernels.increment, GRID, BLOCK, d, N)
        assert s2.query() is False, "s2 waits for s1's matmul"
        t0 = time.perf_counter()
        ms.synchronize()
        assert time.perf_counter() - t0 > 0.05
        assert s1.query() is True and s2.query() is True
        assert (to_host(d, s2) == 4).all()
    finally:
        s1.close()
        s2.close()


@pytest.mark.gpu
def test_stream_ctx_restores_the_previous_stream(main_stream):
    s1 = ms.Stream()
    try:
        with ms.StreamCtx(s1) as entered:
            assert entered is s1
            assert ms.current_stream() is s1
            with ms.StreamCtx(None):
                assert ms.current_stream() is s1
        assert ms.current_stream() == main_stream
    finally:
        s1.close()


@pytest.mark.gpu
def test_current_stream_wraps_the_default_stream():
    seen = []

    def in_fresh_thread():
        # No stream was made current in a new thread.
        seen.append(ms.current_stream())

    import threading
    t = threading.Thread(target=in_fresh_thread)
    t.start()
    t.join()
    assert seen[0] == streams.Stream.legacy
    assert isinstance(seen[0], ms.Stream)


@pytest.mark.gpu
def test_priority_is_cuda_numbering_clamped():
    least, greatest = streams.stream_priority_range()
    made = [ms.Stream(), ms.Stream(priority=greatest - 10), ms.Stream(priority=least + 10)]
    try:
        assert [s.priority for s in made] == [min(max(0, greatest), least), greatest, least]
        assert all(s.device_id == streams.get_device() for s in made)
    finally:
        for s in made:
            s.close()


@pytest.mark.gpu
def test_type_errors_with_real_objects():
    s = ms.Stream()
    ev = ms.Event()
    try:
        with pytest.raises(TypeError):
            s.wait_event(s)
        with pytest.raises(TypeError):
            s.wait_stream(ev)
        with pytest.raises(TypeError):
            s.record_event(s)
        with pytest.raises(TypeError):
            ev.record(ev)
        with pytest.raises(TypeError):
            ev.elapsed_time(s)
    finally:
        ev.close()
        s.close()


@pytest.mark.gpu
def test_event_timing_record_wait(main_stream):
    s1, s2 = ms.Stream(), ms.Stream()
    start, end = ms.Event(enable_timing=True), ms.Event(enable_timing=True)
    try:
        with ms.StreamCtx(s1):
            start.record()          # stream=None: the current stream, s1
            spin(on_current_stream(), 200 * MS)
            end.record()
        end.wait(s2)
        spin(s2, 1)
        assert s2.query() is False, "s2 waits for end"
        end.synchronize()
        assert 150 < start.elapsed_time(end) < 5000
        s2.synchronize()
    finally:
        start.close()
        end.close()
        s1.close()
        s2.close()
