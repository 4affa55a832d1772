"""MemoryPool: stream-ordered allocation from owned and default pools, the
pool attributes, trimming, access, lifetimes and argument errors.  The
two-process IPC producer/consumer is in test_ipc_pool_gpu.py."""
import gc

import pytest

np = pytest.importorskip("numpy", reason="the pool tests check results with numpy")

from _support import GRID, BLOCK, MS, N, to_host

import streams
from streams import CudaError, DeviceBuffer, MemoryPool, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu

MB = 1 << 20


def test_allocate_fill_and_read_back(stream, kernels):
    with MemoryPool() as pool:
        buf = pool.allocate(N * 4, stream)
        assert isinstance(buf, DeviceBuffer) and buf.pool is pool
        assert buf.nbytes == N * 4 and buf.device_id == pool.device_id
        assert buf.stream is stream
        stream.launch(kernels.fill, GRID, BLOCK, buf, 41, N)
        stream.launch(kernels.increment, GRID, BLOCK, buf, N)
        assert (to_host(buf, stream) == 42).all()
        buf.close()
        stream.synchronize()


def test_used_and_reserved_marks_follow_allocations(stream):
    with MemoryPool(release_threshold=1 << 40) as pool:
        assert pool.release_threshold == 1 << 40
        assert pool.used_current == 0
        bufs = [pool.allocate(4 * MB, stream) for _ in range(4)]
        stream.synchronize()
        assert pool.used_current >= 16 * MB
        assert pool.reserved_current >= pool.used_current
        assert pool.used_high >= 16 * MB
        for b in bufs:
            b.close()
        stream.synchronize()
        assert pool.used_current == 0
        # The threshold keeps the freed memory reserved for reuse ...
        assert pool.reserved_current >= 16 * MB
        assert pool.used_high >= 16 * MB
        pool.reset_high()
        assert pool.used_high == pool.used_current == 0
        # ... until a trim gives it back.
        pool.trim(0)
        assert pool.reserved_current == 0
        pool.reset_high()
        assert pool.reserved_high == 0


def test_without_a_threshold_synchronization_releases_the_memory(stream):
    with MemoryPool() as pool:
        assert pool.release_threshold == 0
        buf = pool.allocate(8 * MB, stream)
        buf.close()
        stream.synchronize()       # gives back what is above the threshold
        assert pool.reserved_current < 8 * MB


def test_reuse_policies_and_threshold_round_trip():
    with MemoryPool() as pool:
        for name in ("follow_event_dependencies", "allow_opportunistic",
                     "allow_internal_dependencies"):
            setattr(pool, name, False)
            assert getattr(pool, name) is False
            setattr(pool, name, True)
            assert getattr(pool, name) is True
        pool.release_threshold = 3 * MB
        assert pool.release_threshold == 3 * MB
        with pytest.raises(TypeError, match="allow_opportunistic must be a bool"):
            pool.allow_opportunistic = "yes"
        with pytest.raises(ValueError, match="release_threshold must be >= 0"):
            pool.release_threshold = -1


def test_access_of_the_own_device():
    with MemoryPool() as pool:
        assert pool.get_access(pool.device_id) == "rw"
        pool.set_access(pool.device_id, "rw")
        with pytest.raises(ValueError, match="access must be 'rw', 'r' or 'none'"):
            pool.set_access(pool.device_id, "write")


def test_default_pool_is_shared_never_destroyed_and_backs_device_buffer(stream):
    pool = MemoryPool.default()
    assert pool is MemoryPool.default(streams.get_device())
    assert pool.is_default and not pool.ipc
    before = streams.debug_counters()["live_mem_pools"]
    handle = pool.handle
    used = pool.used_current
    buf = pool.allocate(MB, stream)
    plain = DeviceBuffer(MB, stream)
    stream.synchronize()
    assert pool.used_current >= used + 2 * MB     # DeviceBuffer allocates from it too
    buf.close()
    plain.close()
    stream.synchronize()
    pool.close()                           # this object only: the pool lives on
    assert streams.debug_counters()["live_mem_pools"] == before
    again = MemoryPool.default()
    assert again is not pool and again.handle == handle
    DeviceBuffer(MB, stream).close()
    stream.synchronize()


def test_a_buffer_keeps_its_pool_alive(stream, kernels):
    before = streams.debug_counters()["live_mem_pools"]
    pool = MemoryPool()
    buf = pool.allocate(N * 4, stream)
    del pool
    gc.collect()
    assert streams.debug_counters()["live_mem_pools"] == before + 1
    stream.launch(kernels.fill, GRID, BLOCK, buf, 5, N)
    assert (to_host(buf, stream) == 5).all()
    buf.close()
    stream.synchronize()
    del buf
    gc.collect()
    assert streams.debug_counters()["live_mem_pools"] == before


def test_closing_the_pool_leaves_buffers_usable_until_freed(stream, kernels):
    pool = MemoryPool()
    buf = pool.allocate(N * 4, stream)
    pool.close()
    assert pool.closed
    with pytest.raises(ValueError, match="closed"):
        pool.allocate(16, stream)
    # CUDA keeps a destroyed pool's memory while allocations are out.
    stream.launch(kernels.fill, GRID, BLOCK, buf, 9, N)
    assert (to_host(buf, stream) == 9).all()
    buf.close()
    stream.synchronize()


def test_free_on_another_stream_is_ordered_after_its_work(kernels):
    a, b = Stream(), Stream()
    try:
        with MemoryPool() as pool:
            buf = pool.allocate(N * 4, a)
            streams.memset_async(buf, 0, stream=a)
            b.wait_stream(a)
            spin(b, 100 * MS)
            b.launch(kernels.fill, GRID, BLOCK, buf, 3, N)
            host = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(host, buf, stream=b)
            buf.close(stream=b)           # freed after b's spin, fill and copy
            b.synchronize()
            assert (host == 3).all()
    finally:
        a.close()
        b.close()


def test_max_size_caps_the_pool(stream):
    with MemoryPool(max_size=64 * MB) as pool:
        small = pool.allocate(16 * MB, stream)
        with pytest.raises(CudaError) as info:
            pool.allocate(256 * MB, stream)
        assert info.value.name == "cudaErrorMemoryAllocation"
        small.close()
        stream.synchronize()


def test_zero_bytes_and_bad_arguments(stream):
    with MemoryPool() as pool:
        empty = pool.allocate(0, stream)
        assert empty.nbytes == 0
        empty.close()
        with pytest.raises(ValueError, match="nbytes must be >= 0"):
            pool.allocate(-1, stream)
        with pytest.raises(ValueError, match="larger than memory can be"):
            pool.allocate(1 << 70, stream)
        with pytest.raises(TypeError, match="nbytes must be an int"):
            pool.allocate(1.5, stream)
        with pytest.raises(TypeError, match="stream"):
            pool.allocate(16, stream="s")
        with pytest.raises(ValueError, match="needs a MemoryPool made with ipc=True"):
            pool.export_handle()
        buf = pool.allocate(16, stream)
        with pytest.raises(ValueError, match="ipc=True"):
            buf.export()
        with pytest.raises(ValueError, match="import_handle"):
            pool.import_buffer(streams.IpcBufferDescriptor(b"\0" * 64, 16, 0))
        with pytest.raises(TypeError, match="IpcBufferDescriptor"):
            pool.import_buffer(b"\0" * 64)
        buf.close()
        stream.synchronize()
    with pytest.raises(ValueError, match="closed"):
        pool.used_current


@pytest.mark.skipif(streams.device_count() < 2, reason="needs two GPUs")
def test_a_stream_of_another_device_is_refused():
    with MemoryPool(device=0) as pool:
        other = Stream(device=1)
        try:
            with pytest.raises(ValueError, match="stream is on device 1, but the pool "
                                                 "allocates on device 0"):
                pool.allocate(16, other)
        finally:
            other.close()
        pool.set_access(1, "rw")
        assert pool.get_access(1) == "rw"
        pool.set_access(1, "none")
        assert pool.get_access(1) == "none"


def test_memcpy_batch_async_copies_every_pair(stream, kernels):
    if streams.runtime_version() < 12080:
        with pytest.raises(NotImplementedError, match="CUDA 12.8"):
            streams.memcpy_batch_async([(np.zeros(4, np.uint8), np.ones(4, np.uint8), 4)],
                                       stream)
        return
    srcs = [DeviceBuffer(N * 4, stream) for _ in range(3)]
    dsts = [DeviceBuffer(N * 4, stream) for _ in range(3)]
    for i, src in enumerate(srcs):
        stream.launch(kernels.fill, GRID, BLOCK, src, 10 + i, N)
    hosts = [np.zeros(N, np.uint32) for _ in range(3)]
    streams.memcpy_batch_async(list(zip(dsts, srcs)), stream)           # device to device
    streams.memcpy_batch_async([(h, d, N * 4) for h, d in zip(hosts, dsts)], stream)
    stream.synchronize()
    for i, h in enumerate(hosts):
        assert (h == 10 + i).all()
    with pytest.raises(ValueError, match=r"nbytes=.* is more than copies\[0\] src holds"):
        streams.memcpy_batch_async([(dsts[0], srcs[0], N * 8)], stream)
    with pytest.raises(TypeError, match=r"copies\[1\] must be a \(dst, src, nbytes\) tuple"):
        streams.memcpy_batch_async([(dsts[0], srcs[0]), dsts[1]], stream)
    for b in srcs + dsts:
        b.close()
    stream.synchronize()
