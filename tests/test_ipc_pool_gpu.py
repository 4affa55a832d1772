"""A producer and a consumer in two processes on one GPU, through an IPC
memory pool and an interprocess event: this process allocates from an
ipc=True pool, fills the buffer behind a long spin on its stream and
records an interprocess event; the child imports the pool (its file
descriptor handed over with pass_fds, as a Unix socket's send_fds would for
an unrelated process) and the buffer, waits for the event on its own
stream, checks the data and increments it; this process then sees the
increment.  The child is a separate interpreter, so a crash there is a
failed test, not a dead test run."""
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="the IPC test checks results with numpy")

from _support import BLOCK, GRID, MS, N, env_importing_this_streams, to_host

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
    fd = -1
    try:
        assert pool.ipc
        buf = pool.allocate(N * 4, s)
        streams.memset_async(buf, 0, stream=s)
        spin(s, 500 * MS)                 # the consumer must really wait for the event
        s.launch(kernels.fill, GRID, BLOCK, buf, 7, N)
        ready.record(s)
        descriptor = buf.export()
        assert pickle.loads(pickle.dumps(descriptor)) == descriptor
        fd = pool.export_handle()
        assert fd >= 0
        message = pickle.dumps((fd, descriptor, ready.ipc_handle(), N)).hex() + "\n"
        child = subprocess.run(
            [sys.executable, "-c", CONSUMER], input=message, pass_fds=(fd,),
            cwd=str(Path(streams.__file__).resolve().parent.parent),
            env=env_importing_this_streams(), capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        assert "CONSUMED" in child.stdout
        # The child's increment landed in this process's memory.
        assert (to_host(buf, s) == 8).all()
        buf.close()
        s.synchronize()
    finally:
        if fd >= 0:
            os.close(fd)
        s.synchronize()
        ready.close()
        s.close()
        pool.close()


def test_export_needs_an_ipc_pool_and_import_a_descriptor(stream):
    with MemoryPool(ipc=True) as pool:
        buf = pool.allocate(64, stream)
        d = buf.export()
        assert d.nbytes == 64 and d.device_id == pool.device_id and len(d.data) == 64
        empty = pool.allocate(0, stream)
        with pytest.raises(ValueError, match="zero-byte buffer"):
            empty.export()
        buf.close()
        empty.close()
        stream.synchronize()
