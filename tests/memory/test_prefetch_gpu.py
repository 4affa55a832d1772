"""Managed memory moved and advised: prefetch (one range and a batch),
discard, discard_and_prefetch and advice, read back with
managed_range_info and checked with data written on the GPU."""
import pytest

import streams
from streams import DeviceBuffer, ManagedBuffer, Stream
from streams.testing import fill_u32

from _support import N, to_host

pytestmark = pytest.mark.gpu
np = pytest.importorskip("numpy", reason="the prefetch tests check data with numpy")

NBYTES = 4 * N


def _cuda13():
    return streams.runtime_version() >= 13000


def test_a_prefetch_moves_the_range_where_it_says(stream):
    buf = ManagedBuffer(NBYTES)
    try:
        streams.prefetch(buf, 0, stream=stream)
        stream.synchronize()
        assert streams.managed_range_info(buf)["last_prefetch_location"] == 0
        streams.prefetch(buf, "host", stream=stream)
        stream.synchronize()
        assert streams.managed_range_info(buf)["last_prefetch_location"] == "host"
    finally:
        buf.close()


def test_a_part_prefetched_elsewhere_makes_the_whole_range_mixed(stream):
    half = 2 << 20                      # whole large pages either side
    buf = ManagedBuffer(2 * half)
    try:
        streams.prefetch(buf, "host", stream=stream)
        streams.prefetch((buf, half), streams.Device(0), stream=stream)
        stream.synchronize()
        assert streams.managed_range_info((buf, half))["last_prefetch_location"] == 0
        assert streams.managed_range_info(buf)["last_prefetch_location"] is None   # mixed
    finally:
        buf.close()


def test_a_batch_prefetch_moves_every_range(stream):
    bufs = [ManagedBuffer(NBYTES) for _ in range(3)]
    try:
        streams.prefetch(bufs, 0, stream=stream)
        stream.synchronize()
        assert [streams.managed_range_info(b)["last_prefetch_location"] for b in bufs] == [0] * 3
        streams.prefetch([(b, NBYTES) for b in bufs], "host", stream=stream)
        stream.synchronize()
        assert [streams.managed_range_info(b)["last_prefetch_location"]
                for b in bufs] == ["host"] * 3
    finally:
        for b in bufs:
            b.close()


def test_advice_is_kept_and_undone():
    buf = ManagedBuffer(NBYTES)
    try:
        info = streams.managed_range_info(buf)
        assert info["read_mostly"] is False and info["preferred_location"] is None
        assert info["accessed_by"] == []
        streams.advise(buf, "read_mostly")
        streams.advise(buf, "preferred_location", 0)
        streams.advise(buf, "accessed_by", 0)
        info = streams.managed_range_info(buf)
        assert info["read_mostly"] is True and info["preferred_location"] == 0
        assert info["accessed_by"] == [0]
        streams.advise(buf, "preferred_location", "host")
        assert streams.managed_range_info(buf)["preferred_location"] == "host"
        streams.advise(buf, "unset_read_mostly")
        streams.advise(buf, "unset_preferred_location")
        streams.advise(buf, "unset_accessed_by", 0)
        info = streams.managed_range_info(buf)
        assert info["read_mostly"] is False and info["preferred_location"] is None
        assert info["accessed_by"] == []
    finally:
        buf.close()


def test_batches_on_the_legacy_stream_keep_its_order():
    # CUDA refuses the legacy stream for a batch: it runs on the per-thread
    # stream between two waits.  Data written after it on the legacy stream.
    bufs = [ManagedBuffer(NBYTES) for _ in range(2)]
    legacy = Stream.legacy
    try:
        streams.prefetch(bufs, 0)                   # the default stream: legacy
        if _cuda13():
            streams.discard_and_prefetch(bufs, 0)
            streams.discard(bufs)
        for b in bufs:
            fill_u32(legacy, b, 6, N)
        assert all((to_host(b, legacy) == 6).all() for b in bufs)
    finally:
        legacy.synchronize()
        for b in bufs:
            b.close()


def test_discard_and_prefetch_then_write_gives_the_written_values(stream):
    buf = ManagedBuffer(NBYTES)
    try:
        fill_u32(stream, buf, 5, N)
        if not _cuda13():
            with pytest.raises(NotImplementedError, match="CUDA 13.0"):
                streams.discard(buf, stream=stream)
            with pytest.raises(NotImplementedError, match="CUDA 13.0"):
                streams.discard_and_prefetch(buf, 0, stream=stream)
            return
        streams.discard_and_prefetch(buf, 0, stream=stream)
        fill_u32(stream, buf, 9, N)
        assert (to_host(buf, stream) == 9).all()
        streams.discard([buf], stream=stream)
        fill_u32(stream, buf, 11, N)
        assert (to_host(buf, stream) == 11).all()
    finally:
        stream.synchronize()
        buf.close()


def test_memory_that_is_not_managed_is_refused_by_cuda(stream):
    buf = DeviceBuffer(NBYTES, stream=stream)
    try:
        with pytest.raises(streams.CudaError):
            streams.advise(buf, "read_mostly")
    finally:
        buf.close()
