"""Several GPUs: streams, events, launches, copies, pools, graphs,
the compat layer and IPC events on device 1 while device 0 is current, a
pool of device 0 mapped into device 1, and a consumer process on device 1
of a producer's IPC pool on device 0.

Every test starts with device 0 current and ``Stream.legacy`` the current
stream of both devices (the ``device_0_current`` fixture), and checks that
what it calls puts the current device back.  Data is computed on the GPUs
by the built-in fill / increment kernels and checked on the host.

Two CUDA rules shape the tests (CUDA C Programming Guide, "Stream and Event
Behavior"; NVIDIA bug 3446335):

* an event can only be recorded on a stream of its own device, but a
  stream may wait for an event of any device;
* stream-ordered allocations (``cudaMallocAsync``, which every
  ``DeviceBuffer`` is) are copied with ``cudaMemcpyAsync`` only while their
  own device is current, and not at all to another device's allocation
  (that takes ``cudaMemcpyPeerAsync``, which ``memcpy_async`` uses between
  two DeviceBuffers of different devices).  ``memcpy_async`` makes the
  stream's device current; the helpers here copy device-1 buffers inside
  ``with s1:`` all the same, so that only the tests of those paths rely on
  it.
"""
import textwrap

import pytest

from _support import (BLOCK, GRID, MS, N, closing, run_ipc_event_child, run_pool_consumer,
                      slow_fill, to_host)

import streams
from streams import (DeviceBuffer, Event, EventPool, MemoryPool, PinnedBuffer, Stream,
                     StreamPool)
from streams.compat import cupy as cp
from streams.compat import torch as tc
from streams.testing import spin

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(streams.device_count() < 2,
                       reason="needs two GPUs (streams.device_count() < 2)"),
]


@pytest.fixture(autouse=True)
def device_0_current():
    """Device 0 current and no stream made current on either device; the
    current device and both devices' current streams are put back after."""
    device = streams.get_device()
    before = {d: streams.current_stream(d) for d in (0, 1)}
    for d in (0, 1):
        with streams.Device(d):
            Stream.legacy.use()
    streams.set_device(0)
    yield
    streams.set_device(device)
    for d, s in before.items():
        with streams.Device(d):
            s.use()


# ---- streams of device 1 and the current device / stream -----------------------------------

def test_a_stream_of_device_1_made_while_device_0_is_current():
    least, greatest = streams.stream_priority_range(device=1)
    assert greatest <= least
    assert streams.stream_priority_range("cuda:1") == (least, greatest)
    assert streams.stream_priority_range(streams.Device(1)) == (least, greatest)
    with closing(Stream(device=1), Stream(device=1, priority=greatest)) as (s, urgent):
        assert streams.get_device() == 0, "making a stream of device 1 leaves device 0 current"
        assert s.device_id == urgent.device_id == 1
        assert s.device == urgent.device == streams.Device(1)   # cudaStreamGetDevice
        assert greatest <= s.priority <= least
        assert urgent.priority == urgent.get_attribute("priority") == greatest
        assert streams.current_stream(0) is Stream.legacy
        assert streams.current_stream(1) is Stream.legacy
    assert streams.get_device() == 0


def test_with_a_device_1_stream_switches_device_and_current_stream():
    with closing(Stream(device=1), Stream(device=0)) as (s1, s0):
        with s1 as entered:
            assert entered is s1
            assert streams.get_device() == 1
            assert streams.current_stream() is s1 and streams.current_stream(1) is s1
            assert streams.current_stream(0) is Stream.legacy
            with s0:                    # nested: device 0 again for the inner block
                assert streams.get_device() == 0
                assert streams.current_stream() is s0 and streams.current_stream(1) is s1
            assert streams.get_device() == 1 and streams.current_stream() is s1
            assert streams.current_stream(0) is Stream.legacy
        assert streams.get_device() == 0
        assert streams.current_stream(0) is Stream.legacy
        assert streams.current_stream(1) is Stream.legacy


def test_each_device_keeps_its_own_current_stream():
    with closing(Stream(device=0), Stream(device=1)) as (s0, s1):
        s1.use()                        # device 1's current stream, set from device 0
        assert streams.get_device() == 0, "use() does not change the current device"
        assert streams.current_stream(1) is s1
        assert streams.current_stream() is Stream.legacy
        assert streams.current_stream(0) is Stream.legacy
        s0.use()
        assert streams.current_stream() is s0 and streams.current_stream(0) is s0
        assert streams.current_stream(1) is s1
        with streams.Device(1):
            assert streams.current_stream() is s1
        assert streams.get_device() == 0 and streams.current_stream() is s0


# ---- launches, copies and synchronization on device 1 --------------------------------------

def test_kernels_run_on_the_device_of_their_stream(kernels):
    with closing(Stream(device=1)) as s1, closing(DeviceBuffer(N * 4, stream=s1)) as buf:
        assert buf.device_id == 1
        s1.launch(kernels.fill, GRID, BLOCK, buf, 41, N)
        s1.launch(kernels.increment, GRID, BLOCK, buf, N)
        assert streams.get_device() == 0, "a launch on device 1 puts device 0 back"
        with s1:
            host = to_host(buf, s1)
        assert (host == 42).all()
    assert streams.get_device() == 0


def test_copies_and_sets_on_a_device_1_stream_while_device_0_is_current(kernels):
    """memcpy_async / memset_async on a stream of device 1, with device 0
    current, on a buffer of device 1 (CUDA refuses copies of stream-ordered
    memory while another device is current: streams must make the stream's
    device current, as Stream.launch does)."""
    np = pytest.importorskip("numpy")
    values = np.arange(N, dtype=np.uint32)
    with closing(Stream(device=1)) as s1, closing(DeviceBuffer(N * 4, stream=s1)) as buf:
        streams.memcpy_async(buf, values, stream=s1)
        s1.launch(kernels.increment, GRID, BLOCK, buf, N)
        assert (to_host(buf, s1) == values + 1).all()
        streams.memset_async(buf, 0xAB, stream=s1)
        assert (to_host(buf, s1) == 0xABABABAB).all()
        assert streams.get_device() == 0


def test_synchronize_device_1_from_device_0():
    with closing(Stream(device=1)) as s1:
        spin(s1, 200 * MS)
        assert streams.synchronize_device(1) is True
        assert s1.query() is True
        spin(s1, 200 * MS)
        assert streams.Device(1).synchronize() is True
        assert s1.query() is True
        assert streams.get_device() == 0


# ---- ordering across devices -----------------------------------------------------------------

def _order_after(how, s0, s1):
    """Make ``s0`` wait for the work now on ``s1`` (``how``: the API used);
    the event it waits on, if any, which is of device 1."""
    if how == "wait_stream":
        s0.wait_stream(s1)
        return None
    if how == "stream_record":
        ev = s1.record()                # made on the stream's device
    else:
        with streams.Device(1):
            ev = Event()
        ev.record(s1)
    assert ev.device_id == 1 and streams.get_device() == 0
    s0.wait_event(ev)
    return ev


@pytest.mark.parametrize("how", ["wait_stream", "stream_record", "event_record"])
def test_device_0_work_waits_for_device_1_work(kernels, how):
    """Device 1 fills pinned memory after a spin; device 0, ordered after
    it, increments it: 8 everywhere only if the increment came second."""
    with closing(Stream(device=1), Stream(device=0), PinnedBuffer(N * 4)) as (s1, s0, shared):
        slow_fill(s1, kernels, shared, 7)
        ev = _order_after(how, s0, s1)
        s0.launch(kernels.increment, GRID, BLOCK, shared, N)
        assert (to_host(shared, s0) == 8).all()
        if ev is not None:
            assert ev.query() is True
            ev.close()
        assert streams.get_device() == 0


@pytest.mark.parametrize("src_dev, dst_dev", [(1, 0), (0, 1)])
def test_memcpy_async_between_device_buffers_of_two_devices(kernels, src_dev, dst_dev):
    """A peer copy (cudaMemcpyAsync refuses stream-ordered memory of two
    devices, NVIDIA bug 3446335), on a stream of either device."""
    with closing(Stream(device=src_dev), Stream(device=dst_dev)) as (s_src, s_dst):
        with closing(DeviceBuffer(N * 4, stream=s_src),
                     DeviceBuffer(N * 4, stream=s_dst)) as (src, dst):
            slow_fill(s_src, kernels, src, 0xC0FFEE)
            s_dst.wait_stream(s_src)
            streams.memcpy_async(dst, src, stream=s_dst)
            assert streams.get_device() == 0
            with s_dst:
                assert (to_host(dst, s_dst) == 0xC0FFEE).all()
            # and on the source's stream, the destination then ordered after it
            s_dst.launch(kernels.increment, GRID, BLOCK, dst, N)
            s_src.wait_stream(s_dst)
            streams.memcpy_async(src, dst, stream=s_src)
            with s_src:
                assert (to_host(src, s_src) == 0xC0FFEE + 1).all()
            assert streams.get_device() == 0


def test_memcpy_peer_async_between_two_devices(kernels):
    with closing(Stream(device=1), Stream(device=0)) as (s1, s0):
        with closing(DeviceBuffer(N * 4, stream=s1), DeviceBuffer(N * 4, stream=s0)) as (src, dst):
            slow_fill(s1, kernels, src, 77)
            s0.wait_stream(s1)
            streams.memcpy_peer_async(dst, 0, src, "cuda:1", stream=s0)
            assert (to_host(dst, s0) == 77).all()
            s0.launch(kernels.increment, GRID, BLOCK, dst, N)
            s1.wait_stream(s0)
            streams.memcpy_peer_async(src, None, dst, None, stream=s1)  # their own devices
            with s1:
                assert (to_host(src, s1) == 78).all()
            with pytest.raises(ValueError, match="dst_device=0, but dst is a DeviceBuffer of "
                                                 "device 1"):
                streams.memcpy_peer_async(src, 0, dst, 0, stream=s0)
            with pytest.raises(ValueError, match="src_device=0, but src is a DeviceBuffer of "
                                                 "device 1"):
                streams.memcpy_peer_async(dst, 0, src, 0, stream=s0)
            assert streams.get_device() == 0


def test_peer_access_switches_on_and_off():
    if not streams.can_access_peer(0, 1):
        with pytest.raises(streams.CudaError):
            streams.enable_peer_access(1, device=0)
        pytest.skip("devices 0 and 1 cannot be peers (cudaDeviceCanAccessPeer)")
    assert streams.can_access_peer(1, 0) in (True, False)
    streams.disable_peer_access(1, device=0)        # whatever an earlier test left
    assert streams.enable_peer_access(1, device=0) is True
    assert streams.enable_peer_access(1, device="cuda:0") is False, "already enabled"
    with streams.Device(0):
        assert streams.enable_peer_access(1) is False
    assert streams.disable_peer_access(1, device=0) is True
    assert streams.disable_peer_access(1, device=0) is False, "already disabled"
    assert streams.get_device() == 0
    with streams.Device(1):
        streams.disable_peer_access(0)
        assert streams.enable_peer_access(0) is True, "device 1 to device 0: its own switch"
        assert streams.disable_peer_access(0) is True
        assert streams.get_device() == 1
    assert streams.get_device() == 0


# ---- events and pools of device 1 ------------------------------------------------------------

def test_events_belong_to_a_device():
    with closing(Stream(device=1)) as s1:
        with streams.Device(1):
            mine = Event()
        with closing(mine, Event(), s1.record()) as (mine, other, made):
            assert made.device_id == 1, "Stream.record makes its event on the stream's device"
            assert mine.device_id == 1 and other.device_id == 0
            spin(s1, 200 * MS)
            assert mine.record(s1) is mine
            assert mine.synchronize() is True and s1.query() is True
            with pytest.raises(streams.CudaError):
                other.record(s1)        # CUDA: an event records on its own device only
            assert s1.record(mine) is mine and mine.synchronize() is True
        assert streams.get_device() == 0


def test_event_made_on_device_1_while_device_0_is_current():
    with closing(Event(True, device=1), Event(device="cuda:1", enable_timing=True),
                 Stream(device=1), Stream(device=0)) as (ev, timed, s1, s0):
        assert ev.device_id == timed.device_id == 1
        assert streams.get_device() == 0
        timed.record(s1)
        spin(s1, 200 * MS)
        assert ev.record(s1) is ev
        s0.wait_event(ev)
        assert s0.synchronize() is True and s1.query() is True
        assert timed.elapsed_time(ev) >= 150
        with pytest.raises(streams.CudaError, match="the event belongs to device 1 and the "
                                                    "stream to device 0"):
            ev.record(s0)
        assert streams.get_device() == 0


def test_pools_of_device_1(kernels):
    with StreamPool(device=1) as streams_of_1, EventPool(device=1) as events_of_1:
        assert streams_of_1.device_id == events_of_1.device_id == 1
        with closing(streams_of_1.acquire(), events_of_1.acquire()) as (s, ev):
            assert streams.get_device() == 0
            assert s.device_id == ev.device_id == 1 and s.device == streams.Device(1)
            with closing(DeviceBuffer(N * 4, stream=s)) as buf:
                s.launch(kernels.fill, GRID, BLOCK, buf, 5, N)
                ev.record(s)
                assert ev.synchronize() is True
                with s:
                    host = to_host(buf, s)
            assert (host == 5).all()
        assert streams_of_1.idle == 1 and events_of_1.idle == 1
    assert streams.get_device() == 0


def test_a_device_1_kernel_increments_a_device_0_pool_buffer_once_the_pool_grants_access(
        kernels):
    """Pool memory does not follow enable_peer_access: only
    MemoryPool.set_access maps it into another device."""
    if not streams.can_access_peer(1, 0):
        pytest.skip("device 1 cannot map memory of device 0 (cudaDeviceCanAccessPeer)")
    with closing(Stream(device=0), Stream(device=1)) as (s0, s1), \
            closing(MemoryPool(device=0)) as pool:
        assert pool.device_id == 0
        assert pool.get_access(0) == "rw"
        assert pool.get_access(1) == "none", "a new pool is mapped into its own device only"
        pool.set_access(1, "rw")
        assert pool.get_access(1) == "rw" and pool.get_access("cuda:1") == "rw"
        with closing(pool.allocate(N * 4, s0)) as buf:
            assert buf.device_id == 0 and buf.pool is pool
            slow_fill(s0, kernels, buf, 0xBEEF)
            with closing(s0.record()) as filled:
                assert filled.device_id == 0
                s1.wait_event(filled)
                s1.launch(kernels.increment, GRID, BLOCK, buf, N)
                assert streams.get_device() == 0
                # Copied on its own device's stream: cudaMemcpyAsync takes
                # stream-ordered memory only with its device current.
                s0.wait_stream(s1)
                assert (to_host(buf, s0) == 0xBEEF + 1).all()
                assert filled.query() is True
        assert streams.get_device() == 0


# ---- graphs ---------------------------------------------------------------------------------------

def test_graph_captured_on_a_device_1_stream(kernels):
    with closing(Stream(device=1)) as s1, closing(DeviceBuffer(N * 4, stream=s1)) as buf:
        s1.launch(kernels.fill, GRID, BLOCK, buf, 10, N)
        s1.launch(kernels.increment, GRID, BLOCK, buf, N)   # loaded on device 1 before capture
        with s1.capture() as cap:       # device 0 current: each launch switches to device 1
            s1.launch(kernels.increment, GRID, BLOCK, buf, N)
            s1.launch(kernels.increment, GRID, BLOCK, buf, N)
        assert streams.get_device() == 0
        with closing(cap.graph) as graph, s1:
            with closing(graph.instantiate()) as exe:
                for _ in range(3):
                    exe.launch(s1)
                host = to_host(buf, s1)
        assert streams.get_device() == 0
        assert (host == 11 + 3 * 2).all()


def test_graph_of_device_1_launched_while_device_0_is_current(kernels):
    """GraphExec.upload / launch make the stream's device current, as a
    kernel launch does."""
    with closing(Stream(device=1)) as s1, closing(DeviceBuffer(N * 4, stream=s1)) as buf:
        s1.launch(kernels.fill, GRID, BLOCK, buf, 100, N)
        s1.launch(kernels.increment, GRID, BLOCK, buf, N)   # loaded on device 1 before capture
        with s1.capture() as cap:
            s1.launch(kernels.increment, GRID, BLOCK, buf, N)
        with closing(cap.graph) as graph:
            with streams.Device(1):
                exe = graph.instantiate()
            with closing(exe):
                assert streams.get_device() == 0
                exe.upload(s1)
                assert streams.get_device() == 0
                for _ in range(5):
                    exe.launch(s1)
                assert streams.get_device() == 0
                with s1:
                    host = to_host(buf, s1)
        assert (host == 106).all()


# ---- the compat layer ---------------------------------------------------------------------------

def test_torch_compat_streams_of_two_devices():
    d0, d1 = tc.default_stream(0), tc.default_stream(1)
    assert d0 != d1 and not (d0 == d1)
    assert tc.default_stream(1) is d1
    assert (d0.device_index, d1.device_index) == (0, 1)
    assert d0.cuda_stream == d1.cuda_stream == 0
    with closing(tc.Stream(device=1)) as s:
        assert s.device_index == 1 and streams.get_device() == 0
        with tc.stream(s):
            assert streams.get_device() == 1
            assert tc.current_stream() is s and tc.current_stream(1) is s
            assert tc.current_stream(0) is d0
        assert streams.get_device() == 0
        assert tc.current_stream() is d0 and tc.current_stream(1) is d1


def test_cupy_compat_current_stream_per_device():
    with streams.Device(1):
        s = cp.Stream()                 # CuPy makes a stream on the current device
    with closing(s):
        assert s.device_id == 1
        with s:
            assert streams.get_device() == 1
            assert cp.get_current_stream() is s and cp.get_current_stream(1) is s
            assert cp.get_current_stream(0) is cp.Stream.null
        assert streams.get_device() == 0
        assert cp.get_current_stream(1) is cp.Stream.null
        assert cp.get_current_stream() is cp.Stream.null


# ---- IPC ------------------------------------------------------------------------------------------

@pytest.mark.timing
@pytest.mark.parametrize("open_on", [None, 0, 1])
def test_ipc_event_of_device_1_waited_on_in_a_child_on_device_0(open_on):
    """The child opens the event on ``open_on`` (None: its current device,
    0) and waits for it on a stream of device 0."""
    with streams.Device(1):
        ev = Event(interprocess=True)
    with closing(ev, Stream(device=1)) as (ev, s1):
        assert ev.device_id == 1
        spin(s1, 3000 * MS)
        ev.record(s1)
        words = run_ipc_event_child(ev, open_kwargs={"device": open_on}, wait_device=0)
        opened_on = "1" if open_on == 1 else "0"
        assert words == ["device", "0", opened_on, "first", "False", "then", "True"]
        assert ev.query() is True
        assert s1.synchronize() is True
        assert streams.get_device() == 0


# The consumer of test_producer_on_device_0_and_consumer_process_on_device_1_share_pool_memory.
# The imported pool and its buffer belong to device 0, where the memory is:
# a DeviceBuffer is freed on a stream of its own device, hence s0 here.
# All the reading and writing is on device 1's stream s1: peer copies
# (cudaMemcpyPeerAsync, which needs no access to the pool), and with
# through == "access" a device-1 kernel on the buffer itself, once this
# process's import of the pool is mapped into device 1 (mappings are per
# process, as in CUDA's streamOrderedAllocationIPC sample).
CONSUMER_ON_DEVICE_1 = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    import streams
    from streams import DeviceBuffer, Event, MemoryPool, Stream
    from streams.testing import builtin_module

    fd, descriptor, event_handle, n, value, through = pickle.loads(
        bytes.fromhex(sys.stdin.readline()))
    assert descriptor.device_id == 0, descriptor
    pool = MemoryPool.import_handle(fd, device=0)
    assert pool.device_id == 0 and pool.ipc
    if through == "access":
        pool.set_access(1, "rw")
        assert pool.get_access(1) == "rw"
    s0 = Stream(device=0, non_blocking=True)
    s1 = Stream(device=1, non_blocking=True)
    buf = pool.import_buffer(descriptor, stream=s0)
    assert buf.nbytes == n * 4 and buf.device_id == 0
    ready = Event.from_ipc_handle(event_handle, device=1)
    assert ready.device_id == 1
    s1.wait_event(ready)                 # the producer's fill, on device 0 of the producer
    mine = DeviceBuffer(n * 4, stream=s1)
    host = np.empty(n, dtype=np.uint32)

    def seen_from_device_1():
        streams.memcpy_async(mine, buf, stream=s1)       # a peer copy, device 0 to 1
        streams.memcpy_async(host, mine, stream=s1)
        s1.synchronize()
        return host

    assert (seen_from_device_1() == value).all(), host[:8]
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    if through == "access":
        s1.launch(inc, 4, 256, buf, n)
    else:
        s1.launch(inc, 4, 256, mine, n)
        streams.memcpy_async(buf, mine, stream=s1)       # a peer copy, device 1 to 0
    assert (seen_from_device_1() == value + 1).all(), host[:8]
    buf.close()                          # s1 is done with it; before the exporter frees it
    s0.synchronize()
    mine.close()
    s1.synchronize()
    mod.close()
    ready.close()
    pool.close()
    s0.close()
    s1.close()
    print("CONSUMED")
""")


@pytest.mark.parametrize("through", ["access", "copies"])
def test_producer_on_device_0_and_consumer_process_on_device_1_share_pool_memory(kernels,
                                                                                through):
    """The child reads and increments on device 1 what this process filled
    on device 0 behind a long spin, ordered by an interprocess event;
    ``through``: a kernel on the pool's memory ("access", set_access in the
    child) or peer copies to and from device-1 memory ("copies")."""
    pytest.importorskip("numpy", reason="the child checks what it reads with numpy")
    if through == "access" and not streams.can_access_peer(1, 0):
        pytest.skip("device 1 cannot map memory of device 0 (cudaDeviceCanAccessPeer)")
    value = 0x5EED
    pool = MemoryPool(device=0, ipc=True)
    s0 = Stream(device=0, non_blocking=True)
    ready = Event(interprocess=True, device=0)
    buf = None
    try:
        assert pool.ipc and pool.device_id == 0 and ready.device_id == 0
        buf = pool.allocate(N * 4, s0)
        streams.memset_async(buf, 0, stream=s0)
        spin(s0, 500 * MS)              # the consumer must really wait for the event
        s0.launch(kernels.fill, GRID, BLOCK, buf, value, N)
        ready.record(s0)
        # First: export() also shares a pool that was never exported itself.
        descriptor = buf.export()
        assert descriptor.device_id == 0
        child = run_pool_consumer(CONSUMER_ON_DEVICE_1, pool,
                                  (descriptor, ready.ipc_handle(), N, value, through))
        assert child.returncode == 0, (child.returncode, child.stderr[-4000:])
        assert "CONSUMED" in child.stdout
        assert streams.get_device() == 0
        assert (to_host(buf, s0) == value + 1).all()
    finally:
        s0.synchronize()
        if buf is not None:
            buf.close()
            s0.synchronize()
        ready.close()
        s0.close()
        pool.close()
    assert streams.get_device() == 0
