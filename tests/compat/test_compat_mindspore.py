"""What only streams.compat.mindspore has (the shared behaviour is in
test_compat_conformance.py): the TypeErrors its reference documents, its
keyword arguments, and the reference page's examples.

The GPU tests port the code examples of the reference page
(mindspore-hal-Stream.zh.txt), each citing the example it ports.  The
examples' tensors of ones become device buffers of uint32, their operators
become the built-in fill / increment kernels launched on the *current*
stream (where MindSpore's operators go), and a spin kernel in front makes
the producing work slow enough that a missing dependency would show.  The
printed results are checked on the host with numpy.
"""
import time

import pytest

import streams
from streams.compat import mindspore as ms
from streams.compat import torch as tc

from _support import (BLOCK, GRID, N, close_all, closing, slow_fill, to_host,  # noqa: E402
                      uninitialised)  # (kernels, device_buffer: conftest)

# ---- no GPU needed -----------------------------------------------------------


@pytest.mark.parametrize("kwargs, named", [
    ({"device": 0}, "device"),
    ({"stream_id": 1, "device": 0}, "device"),
    ({"stream": None, "queue": 3}, "queue"),
])
def test_stream_rejects_undocumented_keywords_by_name(kwargs, named):
    # "kwargs (dict) - 关键字参数字典" names none; MindSpore reads stream and stream_id.
    with pytest.raises(TypeError, match=rf"^Stream\(\) got unexpected keyword argument\(s\): {named}$"):
        ms.Stream(**kwargs)


def test_stream_id_is_checked_then_refused_clearly():
    with pytest.raises(TypeError, match="stream_id must be an int, not str"):
        ms.Stream(stream_id="1")
    with pytest.raises(NotImplementedError, match="stream_id indexes MindSpore's own runtime "
                                                  "stream table"):
        ms.Stream(stream_id=1)


def test_stream_keyword_wraps_an_existing_stream_without_gpu():
    # The special streams need no device: the wrapper owns nothing and
    # keeps what it wraps alive.
    class Foreign:
        def __cuda_stream__(self):
            return (0, 2)

    theirs = Foreign()
    s = ms.Stream(stream=theirs)
    assert type(s) is ms.Stream and s.handle == 2 and s.device_id == -1
    assert s.owner.owner is theirs
    s.close()
    with pytest.raises(TypeError, match="priority must be an int, not float"):
        ms.Stream(1.0, stream=theirs)
    with pytest.raises(TypeError, match="stream must be a streams.Stream"):
        ms.Stream(stream="not a stream")


def test_priority_must_be_an_int():
    with pytest.raises(TypeError, match="priority must be an int, not str"):
        ms.Stream(priority="high")


@pytest.mark.parametrize("bad", [None, "event", 1, object()])
def test_wait_event_type_error(bad):
    # "wait_event: TypeError - event is not a mindspore.hal.Event."
    with pytest.raises(TypeError, match="event must be an Event"):
        uninitialised(ms.Stream).wait_event(bad)


@pytest.mark.parametrize("bad", ["event", 1, object()])
def test_record_event_type_error(bad):
    # "record_event: TypeError - event is neither a mindspore.hal.Event nor None."
    with pytest.raises(TypeError, match="event must be an Event or None"):
        uninitialised(ms.Stream).record_event(bad)


@pytest.mark.parametrize("bad", [None, "stream", 1, object()])
def test_wait_stream_type_error(bad):
    # "wait_stream: TypeError - stream is not a mindspore.hal.Stream."
    with pytest.raises(TypeError, match="stream must be a Stream"):
        uninitialised(ms.Stream).wait_stream(bad)


def test_core_and_other_compat_objects_pass_the_type_checks():
    # Validation accepts every streams Stream/Event; the failure that
    # follows comes from the uninitialised objects, not from a TypeError.
    s = uninitialised(ms.Stream)
    for ev in (uninitialised(streams.Event), uninitialised(tc.Event)):
        with pytest.raises(ValueError, match="closed"):
            s.wait_event(ev)
    for other in (uninitialised(streams.Stream), uninitialised(tc.Stream)):
        with pytest.raises(ValueError, match="closed"):
            s.wait_stream(other)
    assert ms.StreamCtx(streams.Stream.legacy).stream is streams.Stream.legacy


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
    with closing(ms.Stream()) as s1:
        with ms.StreamCtx(s1):
            stream = on_current_stream()
            assert stream is s1
            slow_fill(stream, kernels, c, 2048)
        assert s1.query() is False, "the matmul was queued on s1"
        s1.synchronize()
        assert s1.query()
        assert (to_host(c, s1) == 2048).all()


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
            slow_fill(stream, kernels, c, 1)
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
            slow_fill(stream, kernels, c, 2)
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
def test_priority_is_cuda_numbering_clamped():
    least, greatest = streams.stream_priority_range()
    made = [ms.Stream(), ms.Stream(priority=greatest - 10), ms.Stream(priority=least + 10)]
    try:
        assert [s.priority for s in made] == [min(max(0, greatest), least), greatest, least]
        assert all(s.device_id == streams.get_device() for s in made)
    finally:
        close_all(*made)


@pytest.mark.gpu
def test_type_errors_with_real_objects():
    s = ms.Stream()
    ev = ms.Event()
    try:
        for call, arg, message in (
                (s.wait_event, s, "event must be an Event .*, not Stream"),
                (s.wait_stream, ev, "stream must be a Stream .*, not Event"),
                (s.record_event, s, "event must be an Event or None .*, not Stream"),
                (ev.record, ev, "stream must be a Stream or None .*, not Event"),
                (ev.wait, ev, "stream must be a Stream or None .*, not Event"),
                (ev.elapsed_time, s, "end_event must be an Event .*, not Stream")):
            with pytest.raises(TypeError, match=message):
                call(arg)
    finally:
        ev.close()
        s.close()
