"""Helpers shared by GPU tests that compute on device buffers (the ported
framework examples): sizes, and copying a result back to the host."""
import pytest

import streams

MS = 1000   # spin() takes microseconds
N = 1024    # uint32 elements per device buffer
GRID, BLOCK = 4, 256


def to_host(buf, stream):
    """The N uint32 of ``buf`` on the host, once ``stream`` has written them."""
    np = pytest.importorskip("numpy")
    host = np.empty(N, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=stream)
    stream.synchronize()
    return host
