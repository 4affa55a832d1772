"""Stream memory operations (Stream.wait_value / write_value): a stream held
by a value the host writes later, a GPU-to-GPU doorbell between streams,
64-bit values, waits captured into a graph, and argument errors."""
import time

import pytest

np = pytest.importorskip("numpy", reason="the memory-operation tests check results with numpy")

from _support import BLOCK, GRID, MS, N, to_host

import streams
from streams import DeviceBuffer, PinnedBuffer, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu


@pytest.fixture
def pinned_word():
    buf = PinnedBuffer(8)
    view = np.frombuffer(buf, dtype=np.uint32)
    view[:] = 0
    yield buf, view
    # Each test writes its releasing value in a finally: nothing waits now.
    streams.synchronize_device()
    del view
    buf.close()


def test_wait_holds_the_stream_until_the_host_writes(stream, kernels, device_buffer,
                                                     pinned_word):
    buf = device_buffer()
    flag, host = pinned_word
    try:
        stream.wait_value(flag, 1, "geq")
        stream.launch(kernels.fill, GRID, BLOCK, buf, 5, N)
        time.sleep(0.2)
        assert not stream.query(), "the stream ran past an unsatisfied wait_value"
        # A stream not ordered after the blocked one still sees the old data.
        other = Stream(non_blocking=True)
        try:
            assert (to_host(buf, other) == 0).all()
        finally:
            other.close()
    finally:
        host[0] = 1
    assert stream.synchronize(timeout=10)
    assert (to_host(buf, stream) == 5).all()


# (op, value, what the word holds first: not satisfying, then: satisfying).
# "geq" compares (int32)(*word - value) >= 0; "and" *word & value != 0;
# "nor" ~(*word | value) != 0.
@pytest.mark.parametrize("op, value, before, after", [
    ("eq", 7, 6, 7), ("geq", 5, 3, 9), ("and", 0b010, 0b100, 0b110),
    ("nor", 0, 0xFFFFFFFF, 0xFFFFFFF0)])
def test_each_comparison(stream, kernels, device_buffer, pinned_word, op, value, before,
                         after):
    buf = device_buffer()
    flag, host = pinned_word
    host[0] = before
    try:
        try:
            stream.wait_value(flag, value, op)
        except streams.CudaError as exc:
            if op == "nor" and "does not support" in str(exc):
                pytest.skip(str(exc))
            raise
        stream.launch(kernels.fill, GRID, BLOCK, buf, 1, N)
        time.sleep(0.1)
        assert not stream.query(), f"{op}: ran before the value satisfied it"
    finally:
        host[0] = after
    assert stream.synchronize(timeout=10)
    assert (to_host(buf, stream) == 1).all()


def test_gpu_to_gpu_doorbell_between_streams(kernels, device_buffer):
    buf = device_buffer()
    bell = DeviceBuffer(8, stream=Stream.legacy)
    streams.memset_async(bell, 0, stream=Stream.legacy)
    Stream.legacy.synchronize()
    ringer, waiter = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        waiter.wait_value(bell, 1, "eq")
        waiter.launch(kernels.fill, GRID, BLOCK, buf, 9, N)
        spin(ringer, 200 * MS)
        ringer.write_value(bell, 1)
        time.sleep(0.05)
        assert not waiter.query(), "the waiter ran before the ringer wrote"
        assert waiter.synchronize(timeout=10)
        assert ringer.query(), "the waiter finished before the ringer's write ran"
        assert (to_host(buf, waiter) == 9).all()
    finally:
        ringer.synchronize()
        for obj in (ringer, waiter, bell):
            obj.close()
        streams.synchronize_device()


def test_64_bit_values(stream):
    word = DeviceBuffer(8, stream)
    big = (1 << 40) + 12345
    stream.write_value(word, big, width=64)
    stream.wait_value(word, big, "eq", width=64)
    host = np.zeros(1, dtype=np.uint64)
    streams.memcpy_async(host, word, stream=stream)
    assert stream.synchronize(timeout=10)
    assert int(host[0]) == big
    stream.write_value(word, 3, width=32, barrier=False)
    streams.memcpy_async(host, word, stream=stream)
    stream.synchronize()
    assert int(host[0]) == (big & ~0xFFFFFFFF) | 3
    word.close()
    stream.synchronize()


def test_waits_inside_a_captured_graph(stream, kernels, device_buffer, pinned_word):
    buf = device_buffer()
    flag, host = pinned_word
    with stream.capture() as cap:
        stream.wait_value(flag, 1, "geq")
        stream.launch(kernels.fill, GRID, BLOCK, buf, 4, N)
    graph = cap.graph
    with graph.instantiate() as ex:
        try:
            ex.launch(stream)
            time.sleep(0.1)
            assert not stream.query()
        finally:
            host[0] = 1
        assert stream.synchronize(timeout=10)
    graph.close()
    assert (to_host(buf, stream) == 4).all()


def test_flush_where_the_device_can(stream, pinned_word):
    flag, host = pinned_word
    host[0] = 1
    try:
        stream.wait_value(flag, 1, "geq", flush=True)
    except streams.CudaError as exc:
        # Devices without CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES refuse it.
        pytest.skip(f"flush refused here: {exc}")
    assert stream.synchronize(timeout=10)


def test_bad_arguments(stream):
    word = DeviceBuffer(16, stream)
    try:
        with pytest.raises(ValueError, match="not aligned to 8 bytes"):
            stream.wait_value(word.ptr + 4, 1, width=64)
        with pytest.raises(ValueError, match="not aligned to 4 bytes"):
            stream.write_value(word.ptr + 2, 1)
        with pytest.raises(ValueError, match="does not fit 32 unsigned bits"):
            stream.write_value(word, 1 << 32)
        with pytest.raises(ValueError, match="does not fit 64 unsigned bits"):
            stream.write_value(word, -1, width=64)
        with pytest.raises(ValueError, match="width must be 32 or 64"):
            stream.write_value(word, 1, width=16)
        with pytest.raises(ValueError, match="op must be 'geq', 'eq', 'and' or 'nor'"):
            stream.wait_value(word, 1, "lt")
        with pytest.raises(TypeError, match="value must be an int"):
            stream.write_value(word, 1.0)
        with pytest.raises(ValueError, match="less than one 64-bit value"):
            stream.write_value(DeviceBuffer(4, stream), 1, width=64)
        with pytest.raises(ValueError, match="not memory CUDA knows"):
            stream.write_value(np.zeros(2, np.uint32).ctypes.data, 1)
        word.close()
        with pytest.raises(ValueError, match="closed"):
            stream.write_value(word, 1)
    finally:
        word.close()
        stream.synchronize()
