"""What only streams.compat.cupy has (the shared behaviour is in
test_compat_conformance.py): the null / per-thread singletons, ordering by
``ptr``, CuPy's event flags, ``add_callback``'s int status and
``get_current_stream``'s mapping of the default streams.

The reference page (cupy-cuda-Stream.txt) has no code examples: the GPU
tests check each documented statement instead, quoted in the test's comment.
"""
import gc

import pytest

from _support import MS, uninitialised

import streams
from streams.compat import cupy as cp
from streams.testing import launch_empty, spin

# ---- no GPU needed -----------------------------------------------------------


def test_singletons_wrap_handles_0_and_2_on_device_minus_1():
    # "null = <Stream 0 (device -1)>", "ptds = <Stream 2 (device -1)>", and
    # "-1 is used for the singleton stream objects".
    assert cp.Stream.null.ptr == 0 and cp.Stream.null.device_id == -1
    assert cp.Stream.ptds.ptr == 2 and cp.Stream.ptds.device_id == -1
    assert type(cp.Stream.null) is cp.Stream and type(cp.Stream.ptds) is cp.Stream
    assert repr(cp.Stream.null) == "<streams.compat.cupy.Stream 0 (device -1)>"
    assert repr(cp.Stream.ptds) == "<streams.compat.cupy.Stream 2 (device -1)>"


def test_null_and_ptds_arguments_need_no_gpu():
    # "null: If True, the stream is a null stream"; "ptds: If True and null
    # is False, the per-thread default stream is used"; non_blocking applies
    # "if True and both null and ptds are False".
    s = cp.Stream(null=True)
    assert s.ptr == 0 and s.device_id == -1 and s == cp.Stream.null
    p = cp.Stream(ptds=True)
    assert p.ptr == 2 and p.device_id == -1 and p == cp.Stream.ptds
    assert cp.Stream(null=True, ptds=True).ptr == 0
    assert cp.Stream(null=True, non_blocking=True).ptr == 0
    # Default streams are never destroyed.
    s.close()
    assert not s.closed and not cp.Stream.null.closed


def test_singletons_compare_and_order_by_ptr():
    null, ptds = cp.Stream.null, cp.Stream.ptds
    assert null == cp.Stream(null=True) and not (null != cp.Stream(null=True))
    assert null != ptds and not (null == ptds)
    assert null < ptds and null <= ptds and null <= null
    assert ptds > null and ptds >= null and ptds >= ptds
    assert not (ptds < null) and not (null > ptds)
    assert sorted([ptds, null]) == [null, ptds]
    # The core's stream wrapping the same handle is the same stream.
    assert null == streams.Stream.null and hash(null) == hash(streams.Stream.null)
    assert null < streams.Stream.legacy < ptds


def test_comparisons_with_non_streams():
    s = uninitialised(cp.Stream)
    assert (s == 1) is False and (s != 1) is True
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        assert getattr(s, op)(1) is NotImplemented
    with pytest.raises(TypeError, match="'<' not supported"):
        s < 1  # noqa: B015


def test_event_interprocess_needs_disable_timing():
    with pytest.raises(ValueError, match="interprocess=True requires disable_timing=True"):
        cp.Event(interprocess=True)


def test_argument_type_errors_before_cuda():
    with pytest.raises(TypeError, match="callback must be callable, not int"):
        uninitialised(cp.Stream).add_callback(42, None)
    with pytest.raises(TypeError, match="start_event must be an Event"):
        cp.get_elapsed_time(None, None)
    with pytest.raises(TypeError, match="end_event must be an Event"):
        cp.get_elapsed_time(uninitialised(cp.Event), "e")


# ---- GPU ---------------------------------------------------------------------

@pytest.mark.gpu
def test_new_stream_is_owned_on_the_current_device():
    # "device_id (int) - The ID of the device that the stream was created on."
    s = cp.Stream()
    try:
        assert s.ptr not in (0, 1, 2)
        assert s.device_id == streams.get_device()
        assert s.non_blocking is False
        assert repr(s) == f"<streams.compat.cupy.Stream {s.ptr} (device {s.device_id})>"
    finally:
        s.close()
    assert "closed" in repr(s)


@pytest.mark.gpu
@pytest.mark.concurrent
def test_non_blocking_stream_does_not_synchronize_with_null_stream():
    # "non_blocking: If True and both null and ptds are False, the stream
    # does not synchronize with the NULL stream."
    nb = cp.Stream(non_blocking=True)
    try:
        assert nb.non_blocking is True
        spin(nb, 300 * MS)
        launch_empty(cp.Stream.null)
        cp.Stream.null.synchronize()
        assert nb.done is False, "the null stream must not have waited for nb"
    finally:
        nb.synchronize()
        nb.close()


@pytest.mark.gpu
def test_ptds_singleton_runs_work():
    # "ptds: If True and null is False, the per-thread default stream is used."
    spin(cp.Stream.ptds, 100 * MS)
    assert cp.Stream.ptds.done is False
    cp.Stream.ptds.synchronize()
    assert cp.Stream.ptds.done is True


@pytest.mark.gpu
def test_add_callback_gets_stream_int_status_and_arg():
    # "add_callback(callback, arg): Adds a callback that is called when all
    # queued work is done. ... It must take three arguments (Stream object,
    # int error status, and user data object)".
    s = cp.Stream()
    got = []

    def callback(stream, status, arg):
        got.append((stream, status, arg))

    try:
        spin(s, 100 * MS)
        s.add_callback(callback, "user data")
        assert got == [], "the callback must wait for the queued work"
        s.synchronize()
        assert len(got) == 1
        stream, status, arg = got[0]
        assert stream is s
        assert type(status) is int and status == 0
        assert arg == "user data"
    finally:
        s.close()


@pytest.mark.gpu
def test_launch_host_func_gets_arg_only():
    # "launch_host_func(callback, arg): Launch a callback on host when all
    # queued work is done. ... It must take only one argument (user data)".
    s = cp.Stream()
    got = []
    try:
        spin(s, 100 * MS)
        s.launch_host_func(got.append, "user data")
        assert got == []
        s.synchronize()
        assert got == ["user data"]
    finally:
        s.close()


@pytest.mark.gpu
def test_record_makes_timing_events():
    # "record(event=None): ... If None, then a new plain event is created and
    # used", and a plain cupy Event measures time (disable_timing=False).
    s = cp.Stream()
    try:
        start = s.record()
        spin(s, 100 * MS)
        end = s.record()
        assert start.is_timing and end.is_timing
        assert 80 < cp.get_elapsed_time(start, end) < 5000
        start.close()
        end.close()
    finally:
        s.close()


@pytest.mark.gpu
def test_use_makes_current(restore_current):
    # "use(): Makes this stream current."  As in CuPy's user guide:
    # s.use(); s == get_current_stream(); Stream.null.use();
    # Stream.null == get_current_stream().
    s = cp.Stream()
    try:
        assert s.use() is s
        assert cp.get_current_stream() is s
        spin(streams.current_stream(), 100 * MS)   # work for "the current stream"
        assert s.done is False
        s.synchronize()
        assert cp.Stream.null.use() is cp.Stream.null
        assert cp.get_current_stream() is cp.Stream.null
    finally:
        s.close()


@pytest.mark.gpu
def test_current_default_streams_are_the_singletons(restore_current):
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    assert cp.get_current_stream() is cp.Stream.null
    streams.Stream.null.use()
    assert cp.get_current_stream() is cp.Stream.null
    streams.Stream.per_thread.use()
    assert cp.get_current_stream() is cp.Stream.ptds


@pytest.mark.gpu
def test_streams_compare_and_order_by_ptr():
    # __eq__/__ne__/__lt__/__le__/__gt__/__ge__, ordered by ptr.
    a, b = cp.Stream(), cp.Stream()
    try:
        lo, hi = (a, b) if a.ptr < b.ptr else (b, a)
        assert lo < hi and lo <= hi and hi > lo and hi >= lo
        assert lo != hi and not (lo == hi)
        assert lo == lo and lo <= lo and lo >= lo
        assert sorted([hi, cp.Stream.ptds, lo, cp.Stream.null]) == \
            [cp.Stream.null, cp.Stream.ptds, lo, hi]
        foreign = streams.Stream.from_handle(lo.ptr)
        assert foreign == lo and hash(foreign) == hash(lo)
        assert len({lo, foreign, hi}) == 2
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_event_flags_and_ptr():
    plain = cp.Event()
    blocking = cp.Event(block=True)
    untimed = cp.Event(disable_timing=True)
    shared = cp.Event(disable_timing=True, interprocess=True)
    try:
        assert plain.is_timing and plain.flags == 0
        assert blocking.flags & 0x1          # cudaEventBlockingSync
        assert not untimed.is_timing and untimed.flags & 0x2   # cudaEventDisableTiming
        assert shared.flags & 0x4            # cudaEventInterprocess
        assert plain.ptr == plain.handle != 0
    finally:
        for ev in (plain, blocking, untimed, shared):
            ev.close()



# ---- ported from CuPy 14.2's tests/cupy_tests/cuda_tests/test_stream.py -------
# Each test names the CuPy test it ports.  Adapted: CuPy arrays become the
# spin / host-function work of streams.testing, and where streams differs
# from CuPy on purpose the comment says so.

def test_ported_create_with_priority_checks_type_before_cuda():
    # (no CuPy counterpart: the argument check of TestStream.test_create_with_priority)
    for bad in ("1", 1.5, True):
        with pytest.raises(TypeError, match="priority must be an int"):
            cp.Stream(priority=bad)
    # null / ptds ignore priority, as CuPy does.
    assert cp.Stream(null=True, priority=-3) is not None
    assert cp.Stream(ptds=True, priority="ignored").ptr == 2


class _MockStream:
    # TestCUDAStreamProtocol's MockStream.
    def __init__(self, ptr):
        self._ptr = ptr

    def __cuda_stream__(self):
        return (0, self._ptr)


def test_ported_from_external_is_a_cupy_stream_on_cpu():
    # TestCUDAStreamProtocol.test_from_external_with_mock_stream, with the
    # per-thread default stream's handle (2) so that no GPU is needed.
    s = cp.Stream.from_external(_MockStream(2))
    assert type(s) is cp.Stream and s.ptr == 2 and s == cp.Stream.ptds
    assert cp.Stream.from_external(s) is s


def test_ported_from_external_rejects_non_streams():
    # TestCUDAStreamProtocol.test_from_external_without_protocol (CuPy:
    # AttributeError), test_from_external_invalid_return_type /
    # _invalid_tuple_length / _invalid_element_types (CuPy: TypeError) and
    # _invalid_version (CuPy: ValueError).  streams reports a missing
    # protocol as TypeError, and a malformed answer as TypeError or
    # ValueError; never a wrapper of a garbage handle.
    class Bad:
        def __init__(self, answer):
            self.answer = answer

        def __cuda_stream__(self):
            return self.answer

    with pytest.raises(TypeError):
        cp.Stream.from_external(object())
    for answer in (123, (0,), ("not_an_int", 0), (0, "not_an_int")):
        with pytest.raises((TypeError, ValueError)):
            cp.Stream.from_external(Bad(answer))
    with pytest.raises(ValueError):
        cp.Stream.from_external(Bad((1, 12345)))


@pytest.mark.gpu
@pytest.mark.parametrize("stream_name", ["null", "ptds"])
def test_ported_eq(stream_name, restore_current):
    # TestStream.test_eq
    stream = getattr(cp.Stream, stream_name)
    stream.use()
    null0 = stream
    if stream == cp.Stream.null:
        null1, null2, null3 = cp.Stream(True), cp.Stream(True), cp.Stream(ptds=True)
    else:
        null1, null2, null3 = cp.Stream(ptds=True), cp.Stream(ptds=True), cp.Stream(True)
    null4 = cp.Stream()
    try:
        assert null0 == null1
        assert null1 == null2
        assert null2 != null3
        assert null2 != null4
    finally:
        null4.close()


@pytest.mark.gpu
def test_ported_hash():
    # TestStream.test_hash
    a, b = cp.Stream(False), cp.Stream()
    try:
        hash(cp.Stream.null)
        hash(cp.Stream(True))
        mapping = {a: 1, b: 2}
        assert mapping[a] == 1 and mapping[b] == 2
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("null, ptds", [(False, False), (True, False), (False, True)])
def test_ported_del(null, ptds, restore_current):
    # TestStream.test_del_default / test_del (check_del): a current stream
    # whose last user reference is dropped stays current and usable.
    stream = cp.Stream(null=null, ptds=ptds).use()
    assert stream is cp.get_current_stream()
    stream_ptr = stream.ptr
    del stream
    gc.collect()
    current = cp.get_current_stream()
    assert current.ptr == stream_ptr
    launch_empty(current)           # the handle is still alive
    current.synchronize()
    cp.Stream.null.use()
    assert cp.Stream.null is cp.get_current_stream()


@pytest.mark.gpu
def test_ported_get_and_add_callback():
    # TestStream.test_get_and_add_callback: 100 callbacks run in order, each
    # handed the stream.
    n = 100
    stream = cp.Stream()
    out, stream_list = [], []

    def _callback(s, _, t):
        out.append(t[0])
        stream_list.append(s.ptr)

    try:
        for i in range(n):
            launch_empty(stream)
            stream.add_callback(_callback, (i, None))
        stream.synchronize()
        assert out == list(range(n))
        assert all(s == stream.ptr for s in stream_list)
    finally:
        stream.close()


@pytest.mark.gpu
def test_ported_launch_host_func():
    # TestStream.test_launch_host_func, on the null stream.
    n = 100
    stream = cp.Stream.null
    out = []
    for i in range(n):
        launch_empty(stream)
        stream.launch_host_func(lambda t: out.append(t[0]), (i, None))
    stream.synchronize()
    assert out == list(range(n))


@pytest.mark.gpu
@pytest.mark.parametrize("stream_name", ["null", "ptds"])
def test_ported_with_statement(stream_name, restore_current):
    # TestStream.test_with_statement.  CuPy then reports the null stream
    # ("self.stream is 'forgotten'!"): streams gives back the stream that was
    # current before the block, whichever it was.
    stream = getattr(cp.Stream, stream_name)
    stream.use()
    stream1, stream2 = cp.Stream(), cp.Stream()
    try:
        assert stream == cp.get_current_stream()
        with stream1:
            assert stream1 == cp.get_current_stream()
            with stream2:
                assert stream2 == cp.get_current_stream()
            assert stream1 == cp.get_current_stream()
        assert stream == cp.get_current_stream()
    finally:
        stream1.close()
        stream2.close()


@pytest.mark.gpu
@pytest.mark.parametrize("stream_name", ["null", "ptds"])
def test_ported_use(stream_name, restore_current):
    # TestStream.test_use
    stream = getattr(cp.Stream, stream_name)
    stream1 = cp.Stream().use()
    try:
        assert stream1 == cp.get_current_stream()
        stream.use()
        assert stream == cp.get_current_stream()
    finally:
        stream1.close()


@pytest.mark.gpu
def test_ported_mix_use_context(restore_current):
    # TestStream.test_mix_use_context (cupy/cupy#5143).  Leaving ``with s3``
    # gives back the stream current when the block began, s2, which
    # s2.use() made current (CuPy gives back s1, the enclosing block's
    # stream); leaving ``with s1`` gives back the null stream, current
    # before.  Dropping s2 while it is current does not free it.
    cp.Stream.null.use()
    s1, s2, s3 = cp.Stream(), cp.Stream(), cp.Stream()
    s2_ptr = s2.ptr
    assert cp.get_current_stream() == cp.Stream.null
    with s1:
        assert cp.get_current_stream() == s1
        s2.use()
        assert cp.get_current_stream() == s2
        with s3:
            assert cp.get_current_stream() == s3
            del s2
            gc.collect()
        current = cp.get_current_stream()
        assert current.ptr == s2_ptr
        launch_empty(current)
        current.synchronize()
        del current
    assert cp.get_current_stream() == cp.Stream.null
    s1.close()
    s3.close()


@pytest.mark.gpu
def test_ported_stream_thread():
    # TestStream.test_stream_thread: two threads use one stream, both drop
    # their references and collect; each thread's current stream still works.
    import threading
    shared = {}
    barrier = threading.Barrier(2, timeout=10)
    errors = [True, True]

    def worker(tid):
        try:
            if tid == 0:
                shared["s"] = cp.Stream()
            barrier.wait()          # until the stream exists
            shared["s"].use()
            barrier.wait()          # until both use it
            if tid == 0:
                del shared["s"]
            gc.collect()
            barrier.wait()          # until both dropped it
            current = cp.get_current_stream()
            assert current is not None
            launch_empty(current)
            current.synchronize()
            errors[tid] = False
        except Exception as exc:    # reported through errors
            print(f"error in {tid}: {exc!r}")
        finally:
            streams.Stream.legacy.use()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [False, False]


@pytest.mark.gpu
def test_ported_create_with_flags():
    # TestStream.test_create_with_flags
    s1, s2 = cp.Stream(), cp.Stream(non_blocking=True)
    try:
        assert s1.is_non_blocking is False
        assert s2.is_non_blocking is True
    finally:
        s1.close()
        s2.close()


@pytest.mark.gpu
def test_ported_create_with_priority():
    # TestStream.test_create_with_priority.  CuPy asserts -3 on CUDA: CUDA
    # clamps into the device's range, so the expectation is clamped too.
    least, greatest = streams.stream_priority_range()
    assert greatest < 0, "this GPU has no priorities above the default"
    made = [cp.Stream(priority=0), cp.Stream(priority=-1), cp.Stream(priority=-3),
            cp.Stream()]
    try:
        assert made[0].priority == 0
        assert made[1].priority == max(-1, greatest)
        assert made[2].priority == max(-3, greatest)
        assert made[3].priority == min(0, least)    # priority=None: CuPy's default, 0
    finally:
        for s in made:
            s.close()


@pytest.mark.gpu
@pytest.mark.skipif(streams.device_count() < 2, reason="needs two GPUs")
def test_ported_per_device(restore_current):
    # TestStream.test_per_device
    with streams.Device(0):
        stream0 = cp.Stream()
        with stream0:
            assert stream0 == cp.get_current_stream()
            with streams.Device(1):
                assert stream0 != cp.get_current_stream()
                assert cp.Stream.null == cp.get_current_stream()
                assert stream0 == cp.get_current_stream(0)
            assert stream0 == cp.get_current_stream()
    stream0.close()


@pytest.mark.gpu
def test_ported_cuda_stream_method():
    # TestCUDAStreamProtocol.test_cuda_stream_method / _null_stream
    s = cp.Stream()
    try:
        assert s.__cuda_stream__() == (0, s.ptr)
        assert cp.Stream.null.__cuda_stream__() == (0, cp.Stream.null.ptr)
    finally:
        s.close()


@pytest.mark.gpu
def test_ported_from_external_with_mock_and_cupy_stream(restore_current):
    # TestCUDAStreamProtocol.test_from_external_with_mock_stream,
    # _with_cupy_stream and _stream_usage.  (CuPy's private
    # _foreign_stream_ref is not reproduced: keeping alive is checked with
    # a weak reference instead.)
    import weakref
    real = cp.Stream()
    mock = _MockStream(real.ptr)
    ref = weakref.ref(mock)
    s = cp.Stream.from_external(mock)
    assert type(s) is cp.Stream and s.ptr == real.ptr and s.device_id >= 0
    del mock
    gc.collect()
    assert ref() is not None, "the wrapper must keep the foreign stream alive"
    again = cp.Stream.from_external(real)
    assert again.ptr == real.ptr
    with s:
        assert cp.get_current_stream() == s
        spin(s, 50 * MS)
        assert real.done is False     # the same CUDA stream
    s.synchronize()
    assert s.done and real.done
    del s, again
    gc.collect()
    assert ref() is None
    real.close()
