"""streams.checker on the GPU, through streams' own operations: each
program written twice, with the ordering CUDA needs (silent, and the data
it copies checked) and without it (reported, naming both operations)."""
import gc

import pytest

import streams
from streams import DeviceBuffer, Event, Stream, checker
from streams.testing import spin

from _support import BLOCK, GRID, MS, N, slow_fill, to_host

np = pytest.importorskip("numpy", reason="the checker's GPU tests check data with numpy")

pytestmark = pytest.mark.gpu

NBYTES = 4 * N


@pytest.fixture(autouse=True)
def _checker_off_after():
    yield
    checker.disable()


@pytest.fixture
def two():
    s1, s2 = Stream(non_blocking=True), Stream(non_blocking=True)
    yield s1, s2
    s1.synchronize(), s2.synchronize()
    s1.close(), s2.close()


@pytest.mark.races   # on purpose: what the checker must report
def test_a_missing_wait_event_is_raised_naming_both_operations(kernels, two):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    host = np.zeros(N, dtype=np.uint32)
    with checker.checking("raise") as found:
        slow_fill(s1, kernels, buf, 7)
        with pytest.raises(checker.RaceError) as info:
            streams.memcpy_async(host, buf, stream=s2)
    race = info.value.race
    assert found == [race]
    assert race.kind == "read after write"
    assert race.first.op == "launch of streams_fill_u32 (argument 0)"
    assert race.second.op == "memcpy_async (src)"
    assert race.first.stack[-1].filename.endswith("_support.py")     # slow_fill
    assert race.second.stack[-1].filename == __file__
    # The copy was enqueued (the error comes after it) and read too early.
    s2.synchronize()
    assert (host != 7).any()
    s1.synchronize()
    buf.close()


def test_the_same_copy_after_a_wait_event_is_silent_and_right(kernels, two):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    with checker.checking("raise") as found:
        slow_fill(s1, kernels, buf, 7)
        s2.wait_event(s1.record())
        assert (to_host(buf, s2) == 7).all()
        buf.close(stream=s2)
    assert found == []


@pytest.mark.parametrize("order", ["Event.wait", "wait_stream", "Event.synchronize",
                                   "Stream.synchronize", "synchronize_device"])
def test_every_way_of_ordering_is_heard(kernels, two, order):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    with checker.checking("raise") as found:
        slow_fill(s1, kernels, buf, 5, 20 * MS)
        if order == "Event.wait":
            Event().record(s1).wait(s2)
        elif order == "wait_stream":
            s2.wait_stream(s1)
        elif order == "Event.synchronize":
            s1.record().synchronize()
        elif order == "Stream.synchronize":
            s1.synchronize()
        else:
            streams.synchronize_device()
        assert (to_host(buf, s2) == 5).all()
        buf.close(stream=s2)
    assert found == []


@pytest.mark.races   # on purpose: what the checker must report
def test_a_free_while_another_stream_still_reads_is_reported(kernels, two):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    other = DeviceBuffer(NBYTES, stream=s2)
    streams.memset_async(buf, 0, stream=s1)
    s1.synchronize()
    with checker.checking("collect") as found:
        spin(s2, 20 * MS)
        streams.memcpy_async(other, buf, stream=s2)    # s2 reads buf
        buf.close()                                     # freed on s1, which never waited
    (race,) = found
    assert race.kind == "write after read"
    assert (race.first.op, race.second.op) == ("memcpy_async (src)", "free")
    s2.synchronize()
    other.close()


def test_the_same_free_after_a_wait_is_silent(kernels, two):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    other = DeviceBuffer(NBYTES, stream=s2)
    streams.memset_async(buf, 0, stream=s1)
    s1.synchronize()
    with checker.checking("collect") as found:
        spin(s2, 20 * MS)
        streams.memcpy_async(other, buf, stream=s2)
        s1.wait_stream(s2)
        buf.close()
        other.close()
        del buf, other
        gc.collect()
    assert found == []


@pytest.mark.races   # on purpose: what the checker must report
def test_a_buffer_collected_by_the_gc_is_a_free_on_its_stream(two):
    s1, s2 = two
    buf = DeviceBuffer(NBYTES, stream=s1)
    other = DeviceBuffer(NBYTES, stream=s2)
    s1.synchronize()
    with checker.checking("collect") as found:
        spin(s2, 20 * MS)
        streams.memcpy_async(other, buf, stream=s2)
        del buf
        gc.collect()
    assert [(r.first.op, r.second.op) for r in found] == [("memcpy_async (src)", "free")]
    s2.synchronize()
    other.close()


@pytest.mark.races   # on purpose: what the checker must report
def test_kernel_arguments_are_written_unless_declared(kernels, two):
    s1, s2 = two
    src = DeviceBuffer(NBYTES, stream=s1)
    s3 = Stream(non_blocking=True)
    mod = streams.testing.builtin_module()
    try:
        copy = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
        s1.synchronize()
        # Two streams at once, each given `src`: written unless declared, so
        # the second is reported.  (The fill kernel does write it; the
        # checker goes by what it is told.)
        with checker.checking("collect") as found:
            s1.launch(copy, GRID, BLOCK, src, 1, N)
            s2.launch(copy, GRID, BLOCK, src, 1, N)
        assert [r.kind for r in found] == ["write after write"]
        s1.synchronize(), s2.synchronize()
        # Declared for the function: every Kernel object of it (`twin`, got
        # again from the same module), until forgotten.
        twin = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
        checker.declare(copy, writes=())
        try:
            with checker.checking("collect") as found:
                s1.launch(copy, GRID, BLOCK, src, 1, N)
                s2.launch(twin, GRID, BLOCK, src, 1, N)
                copy.prepare(GRID, BLOCK, src, 1, N).launch(s1)
                # A write of it on a stream that waited for neither: reported twice.
                streams.memset_async(src, 0, stream=s3)
            assert sorted(r.kind for r in found) == ["write after read"] * 2
            streams.synchronize_device()
            # The same function loaded by another module is another kernel:
            # undeclared, it writes.
            with checker.checking("collect") as found:
                s1.launch(copy, GRID, BLOCK, src, 1, N)
                s2.launch(kernels.fill, GRID, BLOCK, src, 1, N)
            assert [r.kind for r in found] == ["write after read"]
        finally:
            checker.declare(copy, writes=None)
    finally:
        streams.synchronize_device()
        mod.close()
        src.close()
        s3.close()


@pytest.mark.races   # on purpose: what the checker must report
def test_memset_and_batches_are_seen(two):
    s1, s2 = two
    a, b = DeviceBuffer(NBYTES, stream=s1), DeviceBuffer(NBYTES, stream=s1)
    s1.synchronize()
    try:
        with checker.checking("collect") as found:
            streams.memset_async(a, 3, stream=s1)
            try:
                streams.memcpy_batch_async([(b, a, NBYTES)], stream=s2)
            except NotImplementedError:
                pytest.skip("memcpy_batch_async needs CUDA 12.8")
        assert [(r.first.op, r.second.op) for r in found] == [
            ("memset_async", "memcpy_batch_async (copies[0] src)")]
    finally:
        streams.synchronize_device()
        a.close()
        b.close()
