"""Other libraries' streams and events wherever streams takes one.

CPU part: what ``streams.as_stream`` and the waits accept and refuse,
without a GPU (bad protocol versions, objects that are no stream, handles
that cannot be ones, closed cuda.core objects).  GPU part: PyTorch, CuPy,
cuda.core and numba-cuda objects (each skipped where not installed), with
numbers computed on the GPU while a spin holds the stream busy, and both
current-stream bridges.
"""
import gc
import weakref

import pytest

from _support import BLOCK, GRID, MS, N, CudaStreamProto, closing, to_host

import streams
from streams import Event, Stream
from streams.testing import spin

# ---- no GPU needed ---------------------------------------------------------------


def test_as_stream_returns_our_streams_as_they_are():
    assert streams.as_stream(Stream.legacy) is Stream.legacy
    from streams.compat import cupy as cp
    assert streams.as_stream(cp.Stream.null) is cp.Stream.null


@pytest.mark.parametrize("value, exc, text", [
    ((1, 2), ValueError, "unsupported __cuda_stream__ protocol version 1 from CudaStreamProto"),
    ((2, 0x7f0000001000), ValueError, "unsupported __cuda_stream__ protocol version 2"),
    ([0, 2], ValueError, r"must return a \(version, handle\) tuple"),
    (("0", 1), TypeError, "version must be an int"),
    ((0, "1"), TypeError, "handle must be an int"),
    ((0, -5), ValueError, "does not fit in a pointer"),
    ((0, 7), ValueError, "cannot be a CUDA stream handle"),
    ((0, 0x7f0000001001), ValueError, "cannot be a CUDA stream handle"),
])
def test_bad_protocol_objects_are_refused_everywhere(value, exc, text):
    bad = CudaStreamProto(value)
    ev = Event.__new__(Event)      # never reaches CUDA: the stream is checked first
    for call in (lambda: streams.as_stream(bad, "stream"),
                 lambda: ev.record(bad),
                 lambda: ev.wait(bad),
                 lambda: Stream.legacy.wait_stream(bad)):
        with pytest.raises(exc, match=text):
            call()


def test_error_names_the_argument():
    with pytest.raises(ValueError, match="^upload: unsupported __cuda_stream__ protocol"):
        streams.as_stream(CudaStreamProto((1, 0)), "upload")
    with pytest.raises(TypeError, match="^other must be a streams.Stream, a PyTorch or CuPy "
                                        "stream, or an object with __cuda_stream__, not int$"):
        streams.as_stream(5, "other")


def test_objects_that_are_no_stream_are_type_errors():
    class BufferLike:          # a .ptr that is memory, not a stream
        ptr = 0x7f0000001000

    for bad in (object(), "s", 3, 2.5, BufferLike()):
        with pytest.raises(TypeError, match=f"not {type(bad).__name__}$"):
            streams.as_stream(bad)


def test_special_handles_of_other_libraries_need_no_gpu():
    class TorchLike:
        pass

    TorchLike.__module__ = "torch.cuda.streams"
    TorchLike.cuda_stream = 0
    theirs = TorchLike()
    s = streams.as_stream(theirs)
    assert s == Stream.null and s.owner is theirs and s.device_id == -1
    assert streams.as_stream(CudaStreamProto((0, 1))) == Stream.legacy


def test_a_closed_cuda_core_stream_is_refused():
    class ClosedCoreStream:         # cuda.core reports handle 0 once closed
        def __cuda_stream__(self):
            return (0, 0)

    ClosedCoreStream.__module__ = "cuda.core._stream"
    with pytest.raises(ValueError, match="stream is a closed cuda.core Stream"):
        streams.as_stream(ClosedCoreStream())


def _event_type(module, name, field):
    # The field set on the instance, as CuPy and numba-cuda do.
    def __init__(self):
        setattr(self, field, 0)

    cls = type(name, (), {"__init__": __init__})
    cls.__module__ = module
    return cls


def test_foreign_events_are_checked_before_cuda():
    closed_core = _event_type("cuda.core._event", "Event", "handle")()     # handle 0: closed
    with pytest.raises(ValueError, match="event is a closed cuda.core._event.Event"):
        Stream.legacy.wait_event(closed_core)
    bad_cupy = _event_type("cupy.cuda.stream", "Event", "ptr")()
    bad_cupy.ptr = 12
    with pytest.raises(ValueError, match="event=0xc cannot be a CUDA event handle"):
        Stream.legacy.wait_event(bad_cupy)
    neg = _event_type("cupy.cuda.stream", "Event", "ptr")()
    neg.ptr = -8
    with pytest.raises(ValueError, match="does not fit in a pointer"):
        Stream.legacy.wait_event(neg)
    not_an_event = _event_type("mylib", "Event", "handle")()   # .handle of an unknown library
    with pytest.raises(TypeError, match="event must be a streams.Event or a PyTorch"):
        Stream.legacy.wait_event(not_an_event)


def test_event_from_handle_wraps_without_owning():
    owner = object()
    ev = Event.from_handle(0x7f0000001000, owner=owner)
    assert ev.handle == 0x7f0000001000 and ev.owner is owner and ev.device_id == -1
    assert "foreign" in repr(ev)
    ev.close()                      # never destroys the handle: no CUDA call
    assert ev.closed and ev.owner is None
    for bad, exc in ((0, ValueError), (8, ValueError), (-1, ValueError), ("x", TypeError),
                     (0x7f0000001001, ValueError)):
        with pytest.raises(exc):
            Event.from_handle(bad)


def test_event_from_handle_keeps_its_owner_alive():
    class Owner:
        pass

    owner = Owner()
    ref = weakref.ref(owner)
    ev = Event.from_handle(0x7f0000002000, owner=owner)
    del owner
    gc.collect()
    assert ref() is not None
    del ev
    gc.collect()
    assert ref() is None


def test_follow_current_stream_checks_the_framework():
    with pytest.raises(ValueError, match="framework must be one of 'torch', 'cupy'"):
        streams.follow_current_stream("tensorflow")
    with streams.follow_current_stream(None) as following:
        assert following.framework is None
    with pytest.raises(ValueError, match="framework must be one of"):
        with streams.current_in("jax", Stream.legacy):
            pass


@pytest.mark.parametrize("value, exc, text", [
    ((1, 2), ValueError, "unsupported __cuda_stream__ protocol version 1"),
    ([0, 2], ValueError, r"must return a \(version, handle\) tuple"),
    ((0,), ValueError, r"must return a \(version, handle\) tuple"),
    ((0, 1, 2), ValueError, r"must return a \(version, handle\) tuple"),
    (("0", 1), TypeError, "version must be an int"),
    ((0, "1"), TypeError, "handle must be an int"),
    ((0, 1.0), TypeError, "handle must be an int"),
    ((0, -5), ValueError, "does not fit in a pointer"),
])
def test_from_external_rejects_malformed_protocol(value, exc, text):
    with pytest.raises(exc, match=text):
        Stream.from_external(CudaStreamProto(value))


def test_from_external_protocol_and_fallbacks():
    p = CudaStreamProto((0, 2))
    s = Stream.from_external(p)
    assert s == Stream.per_thread and s.owner is p

    class TorchLike:
        cuda_stream = 1

    class CupyLike:
        ptr = 0

    assert Stream.from_external(TorchLike()) == Stream.legacy
    assert Stream.from_external(CupyLike()) == Stream.null
    assert Stream.from_external(Stream.legacy) is Stream.legacy
    with pytest.raises(TypeError, match="^obj must be a streams.Stream or an object with "
                                        r"__cuda_stream__, .cuda_stream or .ptr, not object$"):
        Stream.from_external(object())

    class BadPtr:
        ptr = "x"

    with pytest.raises(TypeError, match="BadPtr.ptr must be an int handle"):
        Stream.from_external(BadPtr())


# ---- GPU ------------------------------------------------------------------------------

def _fill_after_spin(stream_like, kernels, buf, value):
    """A spin, then ``buf`` filled with ``value``, enqueued on ``stream_like``
    (anything as_stream takes) through streams."""
    s = streams.as_stream(stream_like)
    spin(s, 200 * MS)
    s.launch(kernels.fill, GRID, BLOCK, buf, value, N)


def _torch_stream():
    torch = pytest.importorskip("torch")
    return torch, torch.cuda.Stream()


def _cupy_stream():
    cupy = pytest.importorskip("cupy")
    return cupy, cupy.cuda.Stream(non_blocking=True)


def _core_stream():
    core = pytest.importorskip("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    return dev, dev.create_stream()


def _numba_stream():
    cuda = pytest.importorskip("numba.cuda")
    return cuda, cuda.stream()


_MAKERS = {"torch": _torch_stream, "cupy": _cupy_stream, "cuda.core": _core_stream,
           "numba": _numba_stream}


@pytest.mark.gpu
@pytest.mark.parametrize("lib", sorted(_MAKERS))
def test_foreign_streams_everywhere(lib, kernels, device_buffer, stream):
    """Their stream in Event.record, Event.wait, Stream.wait_stream,
    memcpy_async and as_stream: ordered after a spin, data right."""
    _, theirs = _MAKERS[lib]()
    buf = device_buffer()
    wrapped = streams.as_stream(theirs)
    assert wrapped.owner is theirs and wrapped.device_id == 0
    assert streams.as_stream(theirs).device_id == 0      # cached device, same answer
    # their stream waits for ours through wait_stream
    _fill_after_spin(stream, kernels, buf, 7)
    wrapped.wait_stream(stream)
    wrapped.launch(kernels.increment, GRID, BLOCK, buf, N)
    # ours waits for theirs through an event recorded on their stream
    done = Event().record(theirs)
    assert done.query() is False, "the spin still holds the work"
    ev2 = Event()
    stream.wait_event(done)
    stream.launch(kernels.increment, GRID, BLOCK, buf, N)
    ev2.record(stream)
    ev2.wait(theirs)                                 # their stream waits for ours
    host = pytest.importorskip("numpy").empty(N, dtype="uint32")
    streams.memcpy_async(host, buf, stream=theirs)
    streams.as_stream(theirs).synchronize()
    assert (host == 9).all(), host[:8]
    # Stream.wait_stream with their stream as ``other``
    _fill_after_spin(theirs, kernels, buf, 3)
    stream.wait_stream(theirs)
    stream.launch(kernels.increment, GRID, BLOCK, buf, N)
    assert (to_host(buf, stream) == 4).all()


@pytest.mark.gpu
def test_torch_events_are_waited_for(kernels, device_buffer, stream):
    torch = pytest.importorskip("torch")
    buf = device_buffer()
    never = torch.cuda.Event()
    assert never.cuda_event == 0
    stream.wait_event(never)            # never recorded: no wait, as in PyTorch
    ts = torch.cuda.Stream()
    _fill_after_spin(ts, kernels, buf, 5)
    tev = torch.cuda.Event()
    tev.record(ts)
    stream.wait_event(tev)
    stream.launch(kernels.increment, GRID, BLOCK, buf, N)
    assert (to_host(buf, stream) == 6).all()


def _cupy_event_on_stream():
    cupy = pytest.importorskip("cupy")
    return cupy.cuda.Stream(non_blocking=True), lambda s: s.record()


def _core_event_on_stream():
    core = pytest.importorskip("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    return dev.create_stream(), lambda s: s.record(dev.create_event())


def _numba_event_on_stream():
    cuda = pytest.importorskip("numba.cuda")

    def record(s):
        ev = cuda.event()
        ev.record(s)
        return ev

    return cuda.stream(), record


@pytest.mark.gpu
@pytest.mark.parametrize("make", [_cupy_event_on_stream, _core_event_on_stream,
                                  _numba_event_on_stream], ids=["cupy", "cuda.core", "numba"])
def test_foreign_events_are_waited_for(make, kernels, device_buffer, stream):
    theirs, record = make()
    buf = device_buffer()
    _fill_after_spin(theirs, kernels, buf, 10)
    ev = record(theirs)                 # their event, on their stream, behind the spin
    stream.wait_event(ev)
    stream.launch(kernels.increment, GRID, BLOCK, buf, N)
    assert stream.query() is False
    assert (to_host(buf, stream) == 11).all()


@pytest.mark.gpu
def test_a_closed_cuda_core_event_is_refused(stream):
    core = pytest.importorskip("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    ev = dev.create_event()
    ev.close()
    with pytest.raises(ValueError, match="closed"):
        stream.wait_event(ev)
    cs = dev.create_stream()
    cs.close()
    with pytest.raises(ValueError, match="closed cuda.core Stream"):
        Event().record(cs)


@pytest.mark.gpu
def test_event_of_another_device_is_a_clear_error():
    if streams.device_count() < 2:
        pytest.skip("needs two GPUs")
    with closing(Stream(device=1), Event()) as (s1, ev0):
        with pytest.raises(streams.CudaError, match="the event belongs to device 0 and the "
                                                    "stream to device 1"):
            ev0.record(s1)
        with pytest.raises(streams.CudaError, match="belongs to device 0"):
            s1.record(ev0)


@pytest.mark.gpu
def test_foreign_event_from_handle_keeps_the_owner(stream):
    torch = pytest.importorskip("torch")
    tev = torch.cuda.Event()
    tev.record(torch.cuda.current_stream())
    ev = Event.from_handle(tev.cuda_event, owner=tev)
    del tev
    gc.collect()
    assert ev.owner.cuda_event == ev.handle
    stream.wait_event(ev)
    assert ev.synchronize() is True
    ev.close()


def _framework_array(framework):
    """N zeroed 32-bit ints owned by the framework, made and finished on its
    current stream.  Memory of the framework, not ours: a framework that
    consumes our buffer's __cuda_array_interface__ synchronizes with its
    stream (CuPy does), which would end the spin these tests hold."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        a = torch.zeros(N, dtype=torch.int32, device="cuda")
    else:
        cupy = pytest.importorskip("cupy")
        a = cupy.zeros(N, dtype=cupy.uint32)
    # The tests' operations once before any spin: a framework's first use of
    # a kernel compiles it (CuPy) or loads it (lazy module loading), which
    # can take longer than the spin or wait for the device's work.
    a += 1
    a *= 2
    if framework == "torch":
        a.fill_(0)
        torch.cuda.synchronize()
    else:
        a.fill(0)
        cupy.cuda.Device().synchronize()
    return a


def _on_host(framework, a):
    return a.cpu().numpy() if framework == "torch" else a.get()


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_work_without_a_stream_follows_the_framework(framework, kernels, restore_current):
    """Under follow_current_stream, streams' work given no stream lands on
    the framework's current stream: ordered after the framework's work
    there, while a spin holds that stream busy."""
    a = _framework_array(framework)
    if framework == "torch":
        import torch
        theirs = torch.cuda.Stream()
        selects = torch.cuda.stream(theirs)
        handle = theirs.cuda_stream
    else:
        import cupy
        theirs = cupy.cuda.Stream(non_blocking=True)
        selects = theirs
        handle = theirs.ptr
    with selects, streams.follow_current_stream(framework):
        cur = streams.current_stream()
        assert cur.handle == handle
        spin(cur, 200 * MS)                                # on their stream
        cur.launch(kernels.fill, GRID, BLOCK, a, 20, N)
        a += 1                                             # theirs, on their stream
        done = Event().record()                            # no stream: theirs
        assert done.query() is False, "the record did not land behind the spin"
        host = pytest.importorskip("numpy").empty(N, dtype="uint32")
        streams.memcpy_async(host, a)                      # no stream: theirs
        assert done.synchronize() is True
        streams.current_stream().synchronize()
    assert (host == 21).all(), host[:8]
    assert streams.current_stream() == Stream.legacy      # following ended with the block


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["torch", "cupy"])
def test_current_in_makes_our_stream_theirs(framework, kernels, stream):
    """Inside current_in, the framework's work lands on our stream, after
    the spin our stream holds."""
    mod = pytest.importorskip(framework)
    a = _framework_array(framework)
    spin(stream, 200 * MS)
    stream.launch(kernels.fill, GRID, BLOCK, a, 30, N)
    with streams.current_in(framework, stream) as theirs:
        if framework == "torch":
            assert mod.cuda.current_stream().cuda_stream == stream.handle == theirs.cuda_stream
        else:
            assert mod.cuda.get_current_stream().ptr == stream.handle == theirs.ptr
        a *= 2
    assert stream.query() is False, "their work queued behind the spin on our stream"
    stream.synchronize()
    assert (_on_host(framework, a) == 60).all()
