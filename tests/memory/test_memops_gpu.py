"""Stream memory operations (Stream.wait_value / write_value): a stream held
by a value the host writes later, a GPU-to-GPU doorbell between streams,
64-bit values, waits captured into a graph, and argument errors.

A wait nobody satisfies would hold its stream for ever, and anything that
synchronizes the device (a module load, freeing pinned memory, a device
synchronize) with it: every test here writes the releasing value in a
``finally`` and waits with a timeout, the kernels are loaded before any
wait, and the scenarios on device memory (which a driver may refuse) run in
a child process."""
import ctypes
import textwrap
import time

import pytest

np = pytest.importorskip("numpy", reason="the memory-operation tests check results with numpy")

from _support import BLOCK, GRID, MS, N, run_python, to_host

import streams
from streams import DeviceBuffer, ManagedBuffer, PinnedBuffer, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def kernels_loaded(kernels):
    """The kernels the tests launch, loaded before any stream waits: a first
    load may synchronize the device, which would then wait for a stream
    held by a value the host has not written yet."""
    s = Stream(non_blocking=True)
    spin(s, 0)
    assert s.synchronize(timeout=30)
    s.close()
    return kernels


class HostWord:
    """8 bytes of pinned memory that the host reads and writes through
    ctypes: no buffer view stays open, so the buffer can always be closed."""

    def __init__(self):
        self.buf = PinnedBuffer(8)
        self._u32 = (ctypes.c_uint32 * 2).from_address(self.buf.ptr)
        self._u64 = ctypes.c_uint64.from_address(self.buf.ptr)
        self.value64 = 0

    def __getitem__(self, i):
        return self._u32[i]

    def __setitem__(self, i, value):
        self._u32[i] = value

    @property
    def value64(self):
        return self._u64.value

    @value64.setter
    def value64(self, value):
        self._u64.value = value


@pytest.fixture
def pinned_word():
    word = HostWord()
    yield word
    # Each test writes its releasing value in a finally.  A stream still
    # waiting would make freeing the word hang (and the GPU would then read
    # freed memory): the word is left allocated in that case.
    assert streams.synchronize_device(timeout=30), "a stream still waits on the pinned word"
    word.buf.close()


def test_wait_holds_the_stream_until_the_host_writes(stream, kernels, device_buffer,
                                                     pinned_word):
    buf = device_buffer()
    try:
        stream.wait_value(pinned_word.buf, 1, "geq")
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
        pinned_word[0] = 1
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
    pinned_word[0] = before
    try:
        try:
            stream.wait_value(pinned_word.buf, value, op)
        except streams.CudaError as exc:
            if op == "nor" and "does not support" in str(exc):
                pytest.skip(str(exc))
            raise
        stream.launch(kernels.fill, GRID, BLOCK, buf, 1, N)
        time.sleep(0.1)
        assert not stream.query(), f"{op}: ran before the value satisfied it"
    finally:
        pinned_word[0] = after
    assert stream.synchronize(timeout=10)
    assert (to_host(buf, stream) == 1).all()


def test_gpu_to_gpu_doorbell_between_streams(kernels, device_buffer, pinned_word):
    # The bell is pinned memory that only the GPU writes: the ringer's
    # write releases the waiter with no host thread in between.
    buf = device_buffer()
    ringer, waiter = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        waiter.wait_value(pinned_word.buf, 1, "eq")
        waiter.launch(kernels.fill, GRID, BLOCK, buf, 9, N)
        spin(ringer, 200 * MS)
        ringer.write_value(pinned_word.buf, 1)
        time.sleep(0.05)
        assert not waiter.query(), "the waiter ran before the ringer wrote"
        assert waiter.synchronize(timeout=10), "the ringer's write did not release the waiter"
        assert ringer.query(), "the waiter finished before the ringer's write ran"
        assert pinned_word[0] == 1
        assert (to_host(buf, waiter) == 9).all()
    finally:
        pinned_word[0] = 1
        ringer.synchronize(timeout=10)
        waiter.synchronize(timeout=10)
        ringer.close()
        waiter.close()


def test_64_bit_values(stream, pinned_word):
    big = (1 << 40) + 12345
    try:
        stream.write_value(pinned_word.buf, big, width=64)
    except streams.CudaError as exc:
        if "does not support" in str(exc):
            pytest.skip(str(exc))
        raise
    # Satisfied by the write before it on the same stream: never blocks.
    stream.wait_value(pinned_word.buf, big, "eq", width=64)
    assert stream.synchronize(timeout=10)
    assert pinned_word.value64 == big
    stream.write_value(pinned_word.buf, 3, width=32)      # the low word only
    assert stream.synchronize(timeout=10)
    assert pinned_word.value64 == (big & ~0xFFFFFFFF) | 3


# Device memory (a DeviceBuffer, from the stream-ordered pool) as the word:
# in a child, since a driver may refuse it (the child then says so) and a
# wait it accepted but never saw satisfied would hold the process.
DEVICE_WORD = textwrap.dedent("""
    import numpy as np
    import streams
    from streams import DeviceBuffer, Stream
    from streams.testing import builtin_module, spin

    N = 1024
    mod = builtin_module()
    fill = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    setup = Stream(non_blocking=True)
    spin(setup, 0)                       # loaded before any wait
    bell = DeviceBuffer(8, setup)
    out = DeviceBuffer(N * 4, setup)
    streams.memset_async(bell, 0, stream=setup)
    streams.memset_async(out, 0, stream=setup)
    setup.synchronize()
    ringer, waiter = Stream(non_blocking=True), Stream(non_blocking=True)
    try:
        try:
            waiter.wait_value(bell, 1, "eq")
        except streams.CudaError as exc:
            print("REFUSED", exc)
            raise SystemExit(0)
        waiter.launch(fill, 4, 256, out, 9, N)
        spin(ringer, 200 * 1000)
        ringer.write_value(bell, 1)
        assert waiter.synchronize(timeout=10), "the ringer's write did not release the waiter"
        assert ringer.query()
        host = np.zeros(N, dtype=np.uint32)
        streams.memcpy_async(host, out, stream=waiter)
        waiter.synchronize()
        assert (host == 9).all(), host[:8]
        big = (1 << 40) + 12345
        try:
            setup.write_value(bell, big, width=64)
        except streams.CudaError as exc:
            print("NO64", exc)
        else:
            setup.wait_value(bell, big, "eq", width=64)
            word = np.zeros(1, dtype=np.uint64)
            streams.memcpy_async(word, bell, stream=setup)
            assert setup.synchronize(timeout=10)
            assert int(word[0]) == big, word
        print("OK")
    finally:
        # Whatever happened, nothing waits on the bell any more.
        streams.memcpy_async(bell, np.array([1, 0], dtype=np.uint32), stream=setup)
        setup.synchronize(timeout=10)
        waiter.synchronize(timeout=10)
""")


def test_device_memory_doorbell_and_64_bit_values_in_a_child():
    result = run_python(DEVICE_WORD, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    if "REFUSED" in result.stdout:
        pytest.skip("this driver refuses stream memory operations on stream-ordered pool "
                    f"memory: {result.stdout.strip()}")
    assert "OK" in result.stdout, result.stdout


def test_waits_inside_a_captured_graph(stream, kernels, device_buffer, pinned_word):
    buf = device_buffer()
    with stream.capture() as cap:
        stream.wait_value(pinned_word.buf, 1, "geq")
        stream.launch(kernels.fill, GRID, BLOCK, buf, 4, N)
    graph = cap.graph
    try:
        with graph.instantiate() as ex:
            try:
                ex.launch(stream)
                time.sleep(0.1)
                assert not stream.query()
            finally:
                pinned_word[0] = 1
            assert stream.synchronize(timeout=10)
    finally:
        graph.close()
    assert (to_host(buf, stream) == 4).all()


def test_flush_where_the_device_can(stream, pinned_word):
    pinned_word[0] = 1          # satisfied from the start: nothing can block
    try:
        stream.wait_value(pinned_word.buf, 1, "geq", flush=True)
    except streams.CudaError as exc:
        # Devices without CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES refuse it.
        pytest.skip(f"flush refused here: {exc}")
    assert stream.synchronize(timeout=10)


def test_bad_arguments(stream):
    word = DeviceBuffer(16, stream)
    small = DeviceBuffer(4, stream)
    managed = ManagedBuffer(8)
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
            stream.write_value(small, 1, width=64)
        with pytest.raises(ValueError, match="not memory CUDA knows"):
            stream.write_value(np.zeros(2, np.uint32).ctypes.data, 1)
        with pytest.raises(ValueError, match="is managed memory"):
            stream.write_value(managed, 1)
        with pytest.raises(ValueError, match="is managed memory"):
            stream.wait_value(managed.ptr, 1)
        word.close()
        with pytest.raises(ValueError, match="closed"):
            stream.write_value(word, 1)
    finally:
        for buf in (word, small, managed):
            buf.close()
        stream.synchronize()
