"""Memory without a GPU: argument checks of MemoryPool, memcpy_batch_async
and the stream memory operations, and the picklable IPC descriptor."""
import pickle

import pytest

import streams
from streams import IpcBufferDescriptor, MemoryPool, Stream


# ---- MemoryPool and IpcBufferDescriptor ----------------------------------------------------

def test_pool_arguments_are_checked_before_cuda():
    with pytest.raises(ValueError, match="max_size must be >= 0"):
        MemoryPool(max_size=-1)
    with pytest.raises(ValueError, match="release_threshold must be >= 0"):
        MemoryPool(release_threshold=-5)
    with pytest.raises(TypeError, match="ipc must be a bool"):
        MemoryPool(ipc="yes")
    with pytest.raises(TypeError, match="max_size must be an int"):
        MemoryPool(max_size=1.5)
    with pytest.raises(ValueError, match="fd must be a file descriptor"):
        MemoryPool.import_handle(-1)
    with pytest.raises(TypeError, match="fd must be an int"):
        MemoryPool.import_handle("3")


def test_an_uninitialised_pool_is_closed():
    pool = MemoryPool.__new__(MemoryPool)
    assert pool.closed
    for call in (lambda: pool.allocate(16), lambda: pool.trim(), lambda: pool.export_handle(),
                 lambda: pool.used_current, lambda: pool.handle):
        with pytest.raises(ValueError, match="closed MemoryPool"):
            call()
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        pool.allocate(-1)
    pool.close()
    assert repr(pool) == "<streams.MemoryPool (closed)>"


def test_descriptor_pickles_and_checks():
    d = IpcBufferDescriptor(bytes(range(64)), 4096, 0)
    again = pickle.loads(pickle.dumps(d))
    assert again == d and again.data == bytes(range(64)) and again.nbytes == 4096
    assert d != IpcBufferDescriptor(bytes(64), 4096, 0)
    with pytest.raises(ValueError, match="64 bytes"):
        IpcBufferDescriptor(b"short", 1, 0)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        IpcBufferDescriptor(bytes(64), -1, 0)


# ---- memcpy_batch_async and stream memory operations ---------------------------------------

def test_memcpy_batch_arguments():
    streams.memcpy_batch_async([])
    with pytest.raises(TypeError, match="copies must be a sequence"):
        streams.memcpy_batch_async(3)
    with pytest.raises(TypeError, match="copies must be a sequence"):
        streams.memcpy_batch_async(b"xy")
    with pytest.raises(TypeError, match=r"copies\[0\] must be a \(dst, src, nbytes\) tuple"):
        streams.memcpy_batch_async([[1, 2, 3]])
    with pytest.raises(TypeError, match=r"copies\[1\] must be"):
        streams.memcpy_batch_async([(1, 2, 3), (1,)])


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s.wait_value(0x1000, 1, "lt"), ValueError, "op must be 'geq', 'eq', 'and' or"),
    (lambda s: s.wait_value(0x1000, 1, 7), ValueError, "op must be"),
    (lambda s: s.wait_value(0x1000, -1), ValueError, "does not fit 32 unsigned bits"),
    (lambda s: s.wait_value(0x1000, 1 << 32), ValueError, "does not fit 32 unsigned bits"),
    (lambda s: s.wait_value(0x1000, 1 << 64, width=64), ValueError, "does not fit 64"),
    (lambda s: s.write_value(0x1000, 1, width=8), ValueError, "width must be 32 or 64"),
    (lambda s: s.write_value(0x1000, 1.5), TypeError, "value must be an int"),
    (lambda s: s.write_value(0x1000, True), TypeError, "value must be an int"),
])
def test_memory_operation_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(Stream.legacy)
