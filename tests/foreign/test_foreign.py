"""Other libraries' streams, events and arrays: one reader (streams._foreign)
and the ordering of foreign arrays.

CPU part: raw stream ints (DLPack's ``stream=``, the stream a
``__cuda_array_interface__`` names, ``Stream.from_external``) are checked
with from_handle's rule before CUDA sees them, with the same messages
wherever they come from.  GPU part: arrays whose producer is still running
(a spin holds its stream; no-wait controls show the tests see misordering),
inside and outside a capture; PyTorch tensors; the torch bridge on the
default streams; awaiting a wrapped event; batched copies on the default
stream.  Peer libraries are skipped where not installed.
"""
import asyncio
import textwrap

import pytest

from _support import BLOCK, GRID, MS, N, CudaStreamProto, closing, run_python, to_host

import streams
from streams import DeviceBuffer, Event, PinnedBuffer, Stream
from streams.testing import spin

np = pytest.importorskip("numpy")


class _CAI:
    """An array of N uint32 at ``ptr`` whose interface names ``stream_value``."""

    def __init__(self, ptr, stream_value, version=3):
        self.__cuda_array_interface__ = {
            "shape": (N,), "typestr": "<u4", "data": (ptr, False), "strides": None,
            "version": version, "stream": stream_value}


# ---- no GPU needed ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, exc, text", [
    (0x10, ValueError, r"dst.__cuda_array_interface__\['stream'\]=0x10 cannot be a CUDA "
                       "stream handle"),
    (0x7f0000001001, ValueError, "cannot be a CUDA stream handle"),
    (0, ValueError, r"\['stream'\]=0 is ambiguous"),
    (-1, ValueError, "does not fit in a pointer"),
    (True, TypeError, r"\['stream'\] must be None \(no synchronization\) or an int"),
    ("1", TypeError, r"\['stream'\] must be None"),
])
def test_cai_stream_ints_are_checked_before_cuda(value, exc, text):
    """Each value is refused with the same messages before any CUDA call: 0x10
    passed on to cudaEventRecord segfaults on a GPU (here, with no GPU, it
    would be CUDA's error)."""
    bad = _CAI(0x7f0000002000, value)
    with pytest.raises(exc, match=text):
        streams.memcpy_async(bad, bytearray(4 * N), stream=Stream.legacy)


def test_an_address_alone_reads_no_stream():
    """Without a consuming stream (an address for a graph node, say), the
    interface's stream is not used, so not checked either."""
    assert streams._memory._address_of(_CAI(0x7f0000002000, 0x10)) == 0x7f0000002000


def test_from_external_reads_and_checks_like_as_stream():
    """One reader: the same refusals and messages (only the argument name
    differs), before any CUDA call: from_external has no messages of its
    own, never takes a closed cuda.core stream (handle 0) as Stream.null,
    and never passes .ptr=0x10 of any object to a CUDA call."""
    for value in [(1, 2), [0, 2], ("0", 1), (0, "1"), (0, -5), (0, 7)]:
        with pytest.raises(Exception) as via_as_stream:
            streams.as_stream(CudaStreamProto(value), "obj")
        with pytest.raises(Exception) as via_from_external:
            Stream.from_external(CudaStreamProto(value))
        assert type(via_as_stream.value) is type(via_from_external.value)
        assert str(via_as_stream.value) == str(via_from_external.value), value

    class ClosedCoreStream:
        def __cuda_stream__(self):
            return (0, 0)

    ClosedCoreStream.__module__ = "cuda.core._stream"
    with pytest.raises(ValueError, match="^obj is a closed cuda.core Stream$"):
        Stream.from_external(ClosedCoreStream())

    class PtrOnly:
        def __init__(self, ptr):
            self.ptr = ptr

    with pytest.raises(ValueError, match="^obj=0x10 cannot be a CUDA stream handle"):
        Stream.from_external(PtrOnly(0x10))
    with pytest.raises(TypeError, match="not PtrOnly$"):
        streams.as_stream(PtrOnly(0x7f0000001000))     # a .ptr may be memory there
    theirs = PtrOnly(2)
    s = Stream.from_external(theirs)                   # you say it is a stream
    assert s == Stream.per_thread and s.owner is theirs


def test_wait_producers_must_be_a_bool():
    with pytest.raises(TypeError, match="wait_producers must be a bool, not str"):
        streams.memcpy_async(bytearray(4), bytearray(4), stream=Stream.legacy,
                             wait_producers="no")
    with pytest.raises(TypeError, match="wait_producers must be a bool, not NoneType"):
        streams.memset_async(bytearray(4), 0, stream=Stream.legacy, wait_producers=None)


def test_current_in_torch_refuses_the_per_thread_stream_first():
    """PyTorch has no stream object for handle 2: refused before torch's
    current stream or device changes."""
    torch = pytest.importorskip("torch")
    before = torch.cuda.current_stream() if torch.cuda.is_available() else None
    with pytest.raises(ValueError, match="no stream object for the per-thread default stream"):
        with streams.current_in("torch", Stream.per_thread):
            pass
    if before is not None:
        assert torch.cuda.current_stream() == before


# ---- raw stream ints on a GPU ----------------------------------------------------------------

@pytest.mark.gpu
def test_dlpack_stream_ints_are_checked_before_cuda():
    """DeviceBuffer.__dlpack__(stream=0x10) is refused before CUDA: passed on
    to cudaStreamWaitEvent, the value crashes the child (SIGSEGV)."""
    code = textwrap.dedent("""
        import streams
        buf = streams.DeviceBuffer(64, stream=streams.Stream.legacy)
        streams.Stream.legacy.synchronize()
        for bad, exc in ((0x10, ValueError), (0x7f0000001001, ValueError), (0, ValueError),
                         (True, TypeError), ("1", TypeError), (-2, ValueError)):
            try:
                buf.__dlpack__(stream=bad)
            except exc as e:
                print("refused", hex(bad) if type(bad) is int else repr(bad), "-", e)
            else:
                print("ACCEPTED", bad)
        s = streams.Stream()
        for good in (None, -1, 1, 2, s.handle, s):
            buf.__dlpack__(stream=good)
        streams.synchronize_device()
        print("done")
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "ACCEPTED" not in result.stdout and "done" in result.stdout, result.stdout
    assert "refused 0x10 - stream=0x10 cannot be a CUDA stream handle" in result.stdout
    assert "stream=0 is ambiguous" in result.stdout


# ---- foreign arrays inside a capture -----------------------------------------------------------

def _pinned_u32(n=N):
    p = PinnedBuffer(4 * n)
    return p, np.frombuffer(memoryview(p), dtype=np.uint32)


@pytest.mark.gpu
def test_array_of_an_uncaptured_stream_is_refused_before_the_capture_breaks(kernels,
                                                                          device_buffer):
    """A copy from an array whose interface names a stream outside the
    capture (the legacy stream, another stream) raises RuntimeError and
    leaves the capture intact; wait_producers=False captures the copy.
    The failure it catches: CudaError cudaErrorStreamCaptureIsolation or
    Implicit and an invalidated capture."""
    buf = device_buffer()
    Stream.legacy.launch(kernels.fill, GRID, BLOCK, buf, 42, N)
    Stream.legacy.synchronize()
    pinned, view = _pinned_u32()
    with closing(Stream(non_blocking=True), Stream(non_blocking=True)) as (s, other):
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match=r"^src: the stream its __cuda_array_interface"
                                                   r"__ names is stream 0x1 \(the legacy "
                                                   "default stream\\), which is not part of "
                                                   "the capture.*wait_producers=False"):
                streams.memcpy_async(pinned, _CAI(buf.ptr, 1), stream=s)
            with pytest.raises(RuntimeError, match="not part of the capture"):
                streams.memcpy_async(pinned, _CAI(buf.ptr, other.handle), stream=s)
            with pytest.raises(RuntimeError, match="^argument 0: .*not part of the capture"):
                s.launch(kernels.increment, GRID, BLOCK, _CAI(buf.ptr, 1), N)
            assert s.capture_status == "active", "the capture was damaged"
            s.launch(kernels.increment, GRID, BLOCK, _CAI(buf.ptr, 1), N, wait_producers=False)
            streams.memcpy_async(pinned, _CAI(buf.ptr, 1), stream=s, wait_producers=False)
        finally:
            graph = s.end_capture()
        with closing(graph, graph.instantiate()) as (graph, exe):
            exe.launch(s)
            s.synchronize()
            assert (view == 43).all(), view[:8]
    del view
    pinned.close()


@pytest.mark.gpu
def test_array_of_the_capture_is_ordered_inside_it(kernels, device_buffer):
    """Its producer is the capturing stream (nothing to do) or another
    stream of the same capture (a captured dependency): replays see the
    producer's data."""
    buf = device_buffer()
    pinned, view = _pinned_u32()
    with closing(Stream(non_blocking=True), Stream(non_blocking=True)) as (s, s2):
        with s.capture() as cap:
            s2.wait_stream(s)                              # s2 joins the capture
            spin(s2, 50 * MS)
            s2.launch(kernels.fill, GRID, BLOCK, buf, 5, N)
            s.launch(kernels.increment, GRID, BLOCK, _CAI(buf.ptr, s2.handle), N)   # joins s2
            streams.memcpy_async(pinned, _CAI(buf.ptr, s.handle), stream=s)
        with closing(cap.graph, cap.graph.instantiate()) as (graph, exe):
            for _ in range(2):
                view[:] = 0
                exe.launch(s)
                s.synchronize()
                assert (view == 6).all(), view[:8]
    del view
    pinned.close()


@pytest.mark.gpu
def test_cupy_array_inside_a_capture(kernels):
    """The reported case: x[:1] of a CuPy array made on CuPy's default
    stream, copied inside a capture.  The failure it catches:
    cudaErrorStreamCaptureIsolation and an invalidated capture."""
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(N, dtype=cupy.uint32)
    cupy.cuda.Device().synchronize()
    pinned, view = _pinned_u32(1)
    with closing(Stream(non_blocking=True)) as s:
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="not part of the capture"):
                streams.memcpy_async(pinned, x[:1], stream=s)
            assert s.capture_status == "active"
            with cupy.cuda.ExternalStream(s.handle):       # now CuPy names the capture's stream
                streams.memcpy_async(pinned, x[7:8], stream=s)
        finally:
            graph = s.end_capture()
        with closing(graph, graph.instantiate()) as (graph, exe):
            exe.launch(s)
            s.synchronize()
    assert view[0] == 7
    del view
    pinned.close()


# ---- PyTorch tensors ---------------------------------------------------------------------------

def _torch_tensor():
    torch = pytest.importorskip("torch")
    t = torch.zeros(N, dtype=torch.int32, device="cuda")
    t += 1                         # load torch's kernels before any spin
    t.fill_(0)
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    return torch, t


_SLEEP_CYCLES = 400_000_000       # >= 0.2 s on any current GPU (<= 2 GHz)


@pytest.mark.gpu
@pytest.mark.parametrize("wait", [True, False], ids=["ordered", "no-wait-control"])
def test_torch_tensor_is_read_after_torch_wrote_it(wait, kernels):
    """torch.cuda._sleep holds torch's current stream, then fill_(5): a
    copy and a kernel on our non-blocking stream see 5 only when ordered
    after torch's current stream.  The failure it catches: both run at once
    (the copy reads 0; the kernel's +1 is overwritten: 5, not 6).  The no-wait control
    shows that the test sees misordering."""
    torch, t = _torch_tensor()
    pinned, view = _pinned_u32()
    with closing(Stream(non_blocking=True)) as consumer:
        torch.cuda._sleep(_SLEEP_CYCLES)
        t.fill_(5)
        streams.memcpy_async(pinned, t, stream=consumer, wait_producers=wait)
        consumer.launch(kernels.increment, GRID, BLOCK, t, N, wait_producers=wait)
        consumer.synchronize()
        copied = view.copy()
        torch.cuda.synchronize()
        after = t.cpu().numpy()
    del view
    pinned.close()
    if wait:
        assert (copied == 5).all(), copied[:8]
        assert (after == 6).all(), after[:8]
    else:
        assert (copied == 0).all(), "the control should read before torch's fill"
        assert (after == 5).all(), "the control's increment should run before torch's fill"


@pytest.mark.gpu
def test_torch_tensor_inside_a_capture():
    """Inside a capture: torch's default stream is not captured (refused,
    capture intact); with our stream as torch's current one the tensor's
    producer is the capturing stream."""
    torch, t = _torch_tensor()
    t.fill_(3)
    torch.cuda.synchronize()
    pinned, view = _pinned_u32()
    with closing(Stream(non_blocking=True)) as s:
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="PyTorch's current stream"):
                streams.memcpy_async(pinned, t, stream=s)
            assert s.capture_status == "active"
            with streams.current_in("torch", s):
                streams.memcpy_async(pinned, t, stream=s)
        finally:
            graph = s.end_capture()
        with closing(graph, graph.instantiate()) as (graph, exe):
            exe.launch(s)
            s.synchronize()
    assert (view == 3).all()
    del view
    pinned.close()


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["legacy", "null"])
def test_current_in_torch_on_a_default_stream(which):
    """torch's default stream stands for Stream.legacy and Stream.null.
    Before (legacy): ExternalStream(1), and the first torch op raised
    RuntimeError: invalid StreamId1."""
    torch = pytest.importorskip("torch")
    ours = getattr(Stream, which)
    with streams.current_in("torch", ours) as theirs:
        assert theirs == torch.cuda.default_stream()
        t = torch.full((N,), 2, dtype=torch.int32, device="cuda") * 3
    torch.cuda.synchronize()
    assert int(t.sum()) == 6 * N


# ---- awaiting an event of unknown device ---------------------------------------------------

@pytest.mark.gpu
def test_await_a_pending_event_from_handle(stream):
    """The private stream the wait needs is made on a real device, never on
    the event's device -1 (ValueError: device=-1 is out of range)."""
    owner = Event()
    spin(stream, 200 * MS)
    owner.record(stream)
    wrapped = Event.from_handle(owner.handle, owner=owner)
    assert wrapped.device_id == -1 and wrapped.query() is False

    async def main():
        await wrapped
        return owner.query()

    assert asyncio.run(main()) is True
    wrapped.close()
    owner.close()


# ---- batched copies on the default stream -----------------------------------------------------

@pytest.mark.gpu
def test_memcpy_batch_async_on_the_default_stream(kernels, device_buffer):
    """The default stream (legacy) keeps its meaning: the batch runs after
    the work of every blocking stream so far (a spin, then a fill, on a
    blocking stream of ours) and before the legacy stream's later work.
    The failure it catches: cudaErrorInvalidValue (CUDA refuses the legacy
    stream here)."""
    if streams.runtime_version() < 12080:
        pytest.skip("cudaMemcpyBatchAsync needs CUDA 12.8")
    src, dst = device_buffer(), device_buffer()
    pinned, view = _pinned_u32()
    with closing(Stream()) as blocking:                # synchronizes with the legacy stream
        spin(blocking, 200 * MS)
        blocking.launch(kernels.fill, GRID, BLOCK, src, 9, N)
        streams.memcpy_batch_async([(dst, src), (pinned, src)])       # stream=None: legacy
        Stream.legacy.launch(kernels.increment, GRID, BLOCK, dst, N)  # after the batch
        Stream.legacy.synchronize()
        blocking.synchronize()
    assert (view == 9).all(), view[:8]
    assert (to_host(dst, Stream.legacy) == 10).all()
    streams.memcpy_batch_async([(pinned, dst)], Stream.null)        # handle 0: the same
    Stream.legacy.synchronize()
    assert (view == 10).all()
    del view
    pinned.close()
