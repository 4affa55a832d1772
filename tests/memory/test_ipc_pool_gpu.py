"""A producer and a consumer in two processes on one GPU, through an IPC
memory pool and an interprocess event: this process allocates from an
ipc=True pool, fills the buffer behind a long spin on its stream and
records an interprocess event; the child imports the pool (its file
descriptor handed over with pass_fds, as a Unix socket's send_fds would for
an unrelated process) and the buffer, waits for the event on its own
stream, checks the data and increments it; this process then sees the
increment.  The child is a separate interpreter, so a crash there is a
failed test, not a dead test run."""
import pickle
import textwrap

import pytest

np = pytest.importorskip("numpy", reason="the IPC test checks results with numpy")

from _support import BLOCK, GRID, MS, N, run_pool_consumer, run_python_args, to_host

import streams
from streams import Event, MemoryPool, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu

CONSUMER = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    import streams
    from streams import Event, MemoryPool, Stream
    from streams.testing import builtin_module

    fd, descriptor, event_handle, n = pickle.loads(bytes.fromhex(sys.stdin.readline()))
    pool = MemoryPool.import_handle(fd)
    s = Stream(non_blocking=True)
    buf = pool.import_buffer(descriptor, stream=s)
    assert buf.nbytes == n * 4
    ready = Event.from_ipc_handle(event_handle)
    s.wait_event(ready)                  # the producer's fill, in the producer's process
    host = np.empty(n, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=s)
    s.synchronize()
    assert (host == 7).all(), host[:8]
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    s.launch(inc, 4, 256, buf, n)
    s.synchronize()
    buf.close()                          # before the exporter frees its buffer
    s.synchronize()
    mod.close()
    ready.close()
    pool.close()
    s.close()
    print("CONSUMED")
""")


def test_producer_and_consumer_processes_share_pool_memory(kernels):
    pool = MemoryPool(ipc=True)
    s = Stream(non_blocking=True)
    ready = Event(interprocess=True)
    buf = None
    try:
        assert pool.ipc
        buf = pool.allocate(N * 4, s)
        streams.memset_async(buf, 0, stream=s)
        spin(s, 500 * MS)                 # the consumer must really wait for the event
        s.launch(kernels.fill, GRID, BLOCK, buf, 7, N)
        ready.record(s)
        # Before the pool's own export_handle(): export() shares the pool
        # itself when it has to.
        descriptor = buf.export()
        assert pickle.loads(pickle.dumps(descriptor)) == descriptor
        child = run_pool_consumer(CONSUMER, pool, (descriptor, ready.ipc_handle(), N))
        assert child.returncode == 0, child.stderr
        assert "CONSUMED" in child.stdout
        # The child's increment landed in this process's memory.
        assert (to_host(buf, s) == 8).all()
    finally:
        s.synchronize()
        if buf is not None:
            buf.close()
            s.synchronize()
        ready.close()
        s.close()
        pool.close()


def test_export_needs_an_ipc_pool_and_import_a_descriptor(stream):
    with MemoryPool(ipc=True) as pool:
        buf = pool.allocate(64, stream)
        empty = pool.allocate(0, stream)
        try:
            d = buf.export()          # the pool was never exported by the caller
            assert d.nbytes == 64 and d.device_id == pool.device_id and len(d.data) == 64
            with pytest.raises(ValueError, match="zero-byte buffer"):
                empty.export()
        finally:
            buf.close()
            empty.close()
            stream.synchronize()


# What a failed IPC test left behind in the serial run that later
# segfaulted in a stream.synchronize(): an ipc=True pool closed while one of
# its buffers was still out, that buffer freed later, then other work and a
# synchronize.  In a child, so that a crash there is this test's failure.
CLOSED_IPC_POOL = textwrap.dedent("""
    import gc
    import numpy as np
    import streams
    from streams import DeviceBuffer, MemoryPool, Stream

    for exported in (False, True):
        s = Stream(non_blocking=True)
        pool = MemoryPool(ipc=True)
        buf = pool.allocate(1 << 20, s)
        if exported:
            buf.export()
        streams.memset_async(buf, 3, stream=s)
        pool.close()                      # a buffer is still out
        s.synchronize()
        buf.close()                       # the pool's last allocation goes
        del buf
        gc.collect()
        other = DeviceBuffer(4 << 20, s)
        streams.memset_async(other, 5, stream=s)
        host = np.empty(16, dtype=np.uint8)
        streams.memcpy_async(host, other, 16, stream=s)
        assert s.synchronize(timeout=30)
        assert (host == 5).all(), host
        other.close()
        s.synchronize()
        s.close()
        streams.synchronize_device()
    print("SURVIVED")
""")


def test_an_ipc_pool_closed_with_a_buffer_out_in_a_child():
    result = run_python_args(["-c", CLOSED_IPC_POOL], timeout=120)
    assert result.returncode == 0, (result.returncode, result.stderr[-4000:])
    assert "SURVIVED" in result.stdout
