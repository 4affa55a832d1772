"""Buffers and copies on a real GPU: pinned, managed and device buffers,
memcpy_async and memset_async, the array protocols, and frees in stream order."""
import pytest

np = pytest.importorskip("numpy", reason="the memory tests check results with numpy")

import streams
from streams import DeviceBuffer, ManagedBuffer, PinnedBuffer
from streams.testing import spin

pytestmark = pytest.mark.gpu

MS = 1000


def test_pinned_buffer_numpy_view_and_round_trip(stream):
    n = 1 << 20
    pinned = PinnedBuffer(n)
    view = np.asarray(pinned)
    assert view.shape == (n,) and view.dtype == np.uint8
    rng = np.random.default_rng()
    view[:] = rng.integers(0, 256, n, dtype=np.uint8)
    dev = DeviceBuffer(n, stream)
    back = PinnedBuffer(n)
    streams.memcpy_async(dev, pinned, stream=stream)
    streams.memcpy_async(back, dev, stream=stream)
    stream.synchronize()
    assert np.array_equal(np.asarray(back), view)
    with pytest.raises(BufferError, match="buffer view"):
        pinned.close()
    del view
    pinned.close()
    back.close()
    dev.close()


def test_memset_and_managed_buffer(stream):
    managed = ManagedBuffer(4096)
    streams.memset_async(managed, 7, stream=stream)
    stream.synchronize()
    assert (np.asarray(managed) == 7).all()
    dev = DeviceBuffer(4096, stream)
    streams.memset_async(dev, 0xAB, 100, stream=stream)
    host = np.zeros(100, np.uint8)
    streams.memcpy_async(host, dev, 100, stream=stream)
    stream.synchronize()
    assert (host == 0xAB).all()
    with pytest.raises(ValueError, match="value must be a byte"):
        streams.memset_async(dev, 256)
    with pytest.raises(ValueError, match="more than dst holds"):
        streams.memset_async(dev, 0, 5000, stream=stream)
    with pytest.raises(ValueError, match="more than src holds"):
        streams.memcpy_async(dev, np.zeros(10, np.uint8), 11, stream=stream)
    with pytest.raises(TypeError, match="dst must be a streams buffer"):
        streams.memcpy_async(object(), dev, stream=stream)
    with pytest.raises(TypeError, match="writable"):
        streams.memcpy_async(b"immutable", dev, 4, stream=stream)
    with pytest.raises(ValueError, match="nbytes is required"):
        streams.memcpy_async(dev, dev.ptr, stream=stream)
    # raw ints must be memory CUDA knows: a wrong one would crash a memcpy
    for bad in (1, 4096, host.ctypes.data):
        with pytest.raises(ValueError, match="not memory CUDA knows|cannot describe"):
            streams.memcpy_async(bad, dev, 4, stream=stream)
    with pytest.raises(ValueError, match="NULL address"):
        streams.memset_async(0, 1, 4, stream=stream)
    dev.close()
    managed.close()


def test_device_buffer_cai_and_dlpack_with_cupy_and_torch(stream):
    n = 1024
    dev = DeviceBuffer(n, stream)
    streams.memset_async(dev, 5, stream=stream)
    cai = dev.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (n,) and cai["data"][0] == dev.ptr
    assert cai["stream"] == stream.handle
    assert dev.__dlpack_device__() == (2, dev.device_id)
    cupy = pytest.importorskip("cupy")
    arr = cupy.asarray(dev)
    assert arr.data.ptr == dev.ptr
    assert int(arr.sum()) == 5 * n
    arr2 = cupy.from_dlpack(dev)
    assert arr2.data.ptr == dev.ptr and int(arr2[3]) == 5
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(dev)
    assert t.data_ptr() == dev.ptr and int(t.sum()) == 5 * n
    t2 = torch.as_tensor(dev, device="cuda")
    assert t2.data_ptr() == dev.ptr
    # a torch tensor passes its pointer to our kernel
    del arr, arr2, t, t2
    stream.synchronize()
    dev.close()


def test_device_buffer_freed_in_stream_order(stream):
    buf = DeviceBuffer(1 << 20, stream)
    spin(stream, 100 * MS)
    buf.close()  # freed after the spin, in stream order
    buf.close()
    with pytest.raises(ValueError, match="closed DeviceBuffer"):
        buf.ptr
    assert stream.query() is False
    stream.synchronize()
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        DeviceBuffer(-1)
    with pytest.raises(TypeError, match="nbytes must be an int"):
        DeviceBuffer("1")
