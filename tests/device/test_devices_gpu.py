"""Device arguments and the peer APIs, on any number of GPUs:
device 0 on both sides, and out-of-range indices (``device_count()``)
refused with an error naming the argument.  tests/device/test_multi_gpu.py
checks the same APIs across two devices."""

import pytest

from _support import BLOCK, GRID, MS, N, closing, run_ipc_event_child, slow_fill, to_host

import streams
from streams import DeviceBuffer, Event, PinnedBuffer, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu


@pytest.fixture
def beyond():
    """The first device index this process does not have."""
    return streams.device_count()


@pytest.mark.parametrize("form", ["int", "str", "Device"])
def test_event_made_on_a_named_device(form):
    device = {"int": 0, "str": "cuda:0", "Device": streams.Device(0)}[form]
    current = streams.get_device()
    with closing(Event(device=device), Stream(device=0)) as (ev, s):
        assert ev.device_id == 0
        assert streams.get_device() == current
        spin(s, 100 * MS)
        assert ev.record(s) is ev
        assert ev.query() is False
        assert ev.synchronize() is True and s.query() is True


def test_event_device_out_of_range(beyond):
    before = streams.debug_counters()["live_events"]
    with pytest.raises(ValueError, match=rf"device={beyond} is out of range"):
        Event(device=beyond)
    with pytest.raises(ValueError, match="device=-1 is out of range"):
        Event(device=-1)
    with pytest.raises(TypeError, match="device must be an int, 'cuda:N' or a device "
                                        "object, not bool"):
        Event(device=True)
    assert streams.debug_counters()["live_events"] == before


@pytest.mark.timing   # the child must start and query within the 1.5 s spin
def test_ipc_event_opened_on_a_named_device(stream, beyond):
    with closing(Event(interprocess=True)) as ev:
        # Long enough that the child (a fresh interpreter and CUDA context,
        # perhaps beside other suites) queries it before it is done.
        spin(stream, 5000 * MS)
        ev.record(stream)
        refused = f"""
            try:
                streams.Event.from_ipc_handle(handle, device={beyond})
            except ValueError as exc:
                print("refused", "device={beyond} is out of range" in str(exc), flush=True)
        """
        words = run_ipc_event_child(ev, before=refused, open_kwargs={"device": "cuda:0"},
                                    wait_device=0)
        assert words == ["refused", "True", "device", "0", "0",
                         "first", "False", "then", "True"]
        assert ev.query() is True


def test_peer_access_of_a_device_to_itself(beyond):
    assert streams.can_access_peer(0, 0) is False      # CUDA: a device is not its own peer
    assert streams.can_access_peer("cuda:0", streams.Device(0)) is False
    for call in (streams.enable_peer_access, streams.disable_peer_access):
        with pytest.raises(ValueError, match="peer=0 is the device itself"):
            call(0, device=0)
        with streams.Device(0):
            with pytest.raises(ValueError, match="peer=0 is the device itself"):
                call(0)
        with pytest.raises(ValueError, match=rf"peer={beyond} is out of range"):
            call(beyond)
        with pytest.raises(ValueError, match=rf"device={beyond} is out of range"):
            call(0, device=beyond)
    with pytest.raises(ValueError, match=rf"peer={beyond} is out of range"):
        streams.can_access_peer(0, beyond)
    with pytest.raises(ValueError, match=rf"device={beyond} is out of range"):
        streams.can_access_peer(beyond, 0)
    with pytest.raises(TypeError, match="peer must be None, an int"):
        streams.can_access_peer(0, 1.0)


def test_memcpy_peer_async_within_device_0(kernels):
    with closing(Stream(device=0)) as s:
        with closing(DeviceBuffer(N * 4, stream=s), DeviceBuffer(N * 4, stream=s)) as (src, dst):
            streams.memset_async(dst, 0, stream=s)
            slow_fill(s, kernels, src, 0xBEEF)
            streams.memcpy_peer_async(dst, 0, src, "cuda:0", stream=s)
            assert (to_host(dst, s) == 0xBEEF).all()
            # None: a DeviceBuffer's own device; nbytes: a part only
            streams.memset_async(dst, 0, stream=s)
            streams.memcpy_peer_async(dst, None, src, None, 8, stream=s)
            host = to_host(dst, s)
            assert (host[:2] == 0xBEEF).all() and (host[2:] == 0).all()
            # A raw address of device memory, with its device named.
            streams.memcpy_peer_async(dst.ptr, 0, src, 0, N * 4, stream=s)
            assert (to_host(dst, s) == 0xBEEF).all()


def test_memcpy_peer_async_rejects(beyond):
    np = pytest.importorskip("numpy")
    with closing(Stream(device=0)) as s:
        with closing(DeviceBuffer(64, stream=s), DeviceBuffer(32, stream=s)) as (a, small):
            with pytest.raises(ValueError, match=rf"dst_device={beyond} is out of range"):
                streams.memcpy_peer_async(a, beyond, small, 0, stream=s)
            with pytest.raises(ValueError, match=rf"src_device={beyond} is out of range"):
                streams.memcpy_peer_async(a, 0, small, beyond, stream=s)
            with pytest.raises(ValueError, match="dst_device is required: dst is not a "
                                                 "DeviceBuffer"):
                streams.memcpy_peer_async(a.ptr, None, small, 0, 32, stream=s)
            with pytest.raises(ValueError, match=r"nbytes=64 is more than dst holds \(32\)"):
                streams.memcpy_peer_async(small, 0, a, 0, stream=s)
            with pytest.raises(TypeError, match=r"src is CPU memory \(DLPack\); this needs "
                                                "device, managed or pinned memory"):
                streams.memcpy_peer_async(a, 0, np.zeros(8, np.uint8), 0, stream=s)
            with pytest.raises(TypeError, match="src must be a pointer to device memory"):
                streams.memcpy_peer_async(a, 0, bytearray(8), 0, stream=s)
            s.synchronize()


def test_copies_on_a_stream_of_the_current_device_keep_it(kernels):
    """memcpy_async / memset_async / GraphExec.launch and upload make the
    stream's device current for the call: with it already current, nothing
    changes (the path every single-GPU program takes)."""
    np = pytest.importorskip("numpy")
    values = np.arange(N, dtype=np.uint32)
    current = streams.get_device()
    with closing(Stream(device=current)) as s, closing(DeviceBuffer(N * 4, stream=s)) as buf, \
            closing(PinnedBuffer(N * 4)) as pinned:
        streams.memcpy_async(buf, values, stream=s)
        s.launch(kernels.increment, GRID, BLOCK, buf, N)    # loaded before the capture
        with s.capture() as cap:
            s.launch(kernels.increment, GRID, BLOCK, buf, N)
        with closing(cap.graph) as graph, closing(graph.instantiate()) as exe:
            exe.upload(s)
            exe.launch(s)
            exe.launch(s)
            streams.memcpy_async(pinned, buf, stream=s)
            s.synchronize()
        assert (np.frombuffer(pinned, dtype=np.uint32) == values + 3).all()
        streams.memset_async(buf, 1, stream=s)
        assert (to_host(buf, s) == 0x01010101).all()
        assert streams.get_device() == current
