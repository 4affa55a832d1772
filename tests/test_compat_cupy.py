"""streams.compat.cupy reproduces cupy.cuda.Stream / cupy.cuda.Event.

The reference page (cupy-cuda-Stream.txt) has no code examples: the GPU
tests check each documented statement instead, quoted in the test's comment.
Ordering is observed with spin kernels holding a stream busy.
"""
import inspect
import time

import pytest

from _support import run_python

import streams
import streams.compat
from streams.compat import cupy as cp
from streams.testing import launch_empty, spin

MS = 1000  # spin() takes microseconds

needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def _uninitialised():
    # A compat Stream that never got a handle: its own argument checks run
    # before it touches CUDA, so they can be observed without a GPU.
    return cp.Stream.__new__(cp.Stream)


# ---- no GPU needed -----------------------------------------------------------

def test_classes_are_core_subclasses():
    assert issubclass(cp.Stream, streams.Stream)
    assert issubclass(cp.Event, streams.Event)


def test_signatures_match_cupy():
    assert str(inspect.signature(cp.Stream)) == "(null=False, non_blocking=False, ptds=False)"
    assert str(inspect.signature(cp.Event)) == \
        "(block=False, disable_timing=False, interprocess=False)"
    assert list(inspect.signature(cp.Stream.add_callback).parameters)[:3] == \
        ["self", "callback", "arg"]
    assert list(inspect.signature(cp.Stream.launch_host_func).parameters)[:3] == \
        ["self", "callback", "arg"]
    assert list(inspect.signature(cp.Stream.record).parameters) == ["self", "event"]
    assert list(inspect.signature(cp.get_elapsed_time).parameters) == \
        ["start_event", "end_event"]


def test_import_prints_nothing_and_touches_no_handle():
    code = ("import streams, streams.compat.cupy as cp; "
            "c = streams.debug_counters(); "
            "assert c['streams_created'] == c['events_created'] == 0, c")
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""


def test_singletons_wrap_handles_0_and_2_on_device_minus_1():
    # "null = <Stream 0 (device -1)>", "ptds = <Stream 2 (device -1)>", and
    # "-1 is used for the singleton stream objects".
    assert cp.Stream.null.ptr == 0 and cp.Stream.null.device_id == -1
    assert cp.Stream.ptds.ptr == 2 and cp.Stream.ptds.device_id == -1
    assert cp.Stream.null is cp.Stream.null
    assert isinstance(cp.Stream.null, streams.Stream)
    assert isinstance(cp.Stream.null, cp.Stream)
    assert isinstance(cp.Stream.ptds, cp.Stream)
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
    s = _uninitialised()
    assert (s == 1) is False and (s != 1) is True
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        assert getattr(s, op)(1) is NotImplemented
    with pytest.raises(TypeError):
        s < 1  # noqa: B015


def test_event_interprocess_needs_disable_timing():
    with pytest.raises(ValueError, match="interprocess=True requires disable_timing=True"):
        cp.Event(interprocess=True)


def test_argument_type_errors_before_cuda():
    s = _uninitialised()
    with pytest.raises(TypeError, match="callback must be callable"):
        s.add_callback(42, None)
    with pytest.raises(TypeError, match="event must be an Event or None"):
        s.record("not an event")
    with pytest.raises(TypeError, match="start_event must be an Event"):
        cp.get_elapsed_time(None, None)


def test_uninitialised_stream_refuses_work():
    s = _uninitialised()
    with pytest.raises(ValueError, match="closed"):
        s.synchronize()


@needs_no_gpu
def test_no_gpu_raises_cuda_error():
    with pytest.raises(streams.CudaError):
        cp.Stream()
    with pytest.raises(streams.CudaError):
        cp.Stream(non_blocking=True)
    with pytest.raises(streams.CudaError):
        cp.Event()
    with pytest.raises(streams.CudaError):
        cp.get_current_stream()


# ---- GPU ---------------------------------------------------------------------

@pytest.fixture
def restore_current_stream():
    before = streams.current_stream()
    yield
    before.use()


@pytest.mark.gpu
def test_new_stream_is_owned_on_the_current_device():
    # "device_id (int) - The ID of the device that the stream was created on."
    s = cp.Stream()
    try:
        assert isinstance(s, cp.Stream)
        assert s.ptr not in (0, 1, 2)
        assert s.device_id == streams.get_device()
        assert s.non_blocking is False
        assert repr(s) == f"<streams.compat.cupy.Stream {s.ptr} (device {s.device_id})>"
    finally:
        s.close()
    assert "closed" in repr(s)


@pytest.mark.gpu
def test_done_and_synchronize():
    # "done: True if all work on this stream has been done."
    # "synchronize(): Waits for the stream completing all queued work."
    s = cp.Stream()
    try:
        assert s.done is True
        spin(s, 200 * MS)
        assert s.done is False
        t0 = time.perf_counter()
        s.synchronize()
        assert time.perf_counter() - t0 > 0.1
        assert s.done is True
    finally:
        s.close()


@pytest.mark.gpu
def test_null_stream_synchronizes_with_all_streams():
    # "null: ... the default stream that synchronizes with all streams".
    blocking = cp.Stream()
    try:
        spin(blocking, 200 * MS)
        launch_empty(cp.Stream.null)
        assert cp.Stream.null.done is False, "null-stream work waits for the other stream"
        cp.Stream.null.synchronize()
        assert blocking.done is True
    finally:
        blocking.synchronize()
        blocking.close()


@pytest.mark.gpu
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
def test_record_returns_new_or_given_event():
    # "record(event=None): Records an event on the stream. event: If None,
    # then a new plain event is created and used. Returns: The recorded event."
    s = cp.Stream()
    try:
        start = s.record()
        spin(s, 100 * MS)
        end = s.record()
        assert isinstance(start, cp.Event) and isinstance(end, cp.Event)
        assert start.is_timing, "a plain cupy Event measures time"
        assert end.done is False, "recorded behind the spin"
        assert 80 < cp.get_elapsed_time(start, end) < 5000
        given = cp.Event(disable_timing=True)
        assert s.record(given) is given
        s.synchronize()
        assert given.done is True
        for ev in (start, end, given):
            ev.close()
    finally:
        s.close()


@pytest.mark.gpu
def test_wait_event_orders_future_work():
    # "wait_event(event): Makes the stream wait for an event. The future work
    # on this stream will be done after the event."
    a, b = cp.Stream(), cp.Stream()
    try:
        spin(a, 200 * MS)
        ev = a.record()
        b.wait_event(ev)
        launch_empty(b)
        assert b.done is False, "b's work waits for the event"
        b.synchronize()
        assert a.done is True and ev.done is True
        ev.close()
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
def test_use_makes_current(restore_current_stream):
    # "use(): Makes this stream current."  As in CuPy's user guide:
    # s.use(); s == get_current_stream(); Stream.null.use();
    # Stream.null == get_current_stream().
    s = cp.Stream()
    try:
        assert s.use() is s
        assert cp.get_current_stream() is s
        assert cp.get_current_stream(streams.get_device()) is s
        assert cp.get_current_stream(-1) is s
        spin(streams.current_stream(), 100 * MS)   # work for "the current stream"
        assert s.done is False
        s.synchronize()
        assert cp.Stream.null.use() is cp.Stream.null
        assert cp.get_current_stream() == cp.Stream.null
    finally:
        s.close()


@pytest.mark.gpu
def test_current_stream_defaults_to_null(restore_current_stream):
    streams.Stream.legacy.use()  # what the core reports when nothing was made current
    assert cp.get_current_stream() == cp.Stream.null
    assert cp.get_current_stream().ptr == 0
    streams.Stream.per_thread.use()
    assert cp.get_current_stream() == cp.Stream.ptds


@pytest.mark.gpu
def test_with_statement_switches_temporarily(restore_current_stream):
    # "If you want to switch a stream temporarily, use the with statement."
    before = cp.get_current_stream()
    s = cp.Stream()
    try:
        with s as entered:
            assert entered is s
            assert cp.get_current_stream() is s
            spin(streams.current_stream(), 100 * MS)
        assert s.done is False, "the spin went to s"
        assert cp.get_current_stream() == before
        s.synchronize()
    finally:
        s.close()


@pytest.mark.gpu
def test_current_core_stream_is_adopted(restore_current_stream):
    core = streams.Stream()
    try:
        with core:
            got = cp.get_current_stream()
            assert got == core and got.ptr == core.handle
            assert isinstance(got, cp.Stream) and got.owner is core
            spin(got, 100 * MS)
            assert core.done is False
        core.synchronize()
    finally:
        core.close()


@pytest.mark.gpu
def test_streams_compare_and_order_by_ptr():
    # __eq__/__ne__/__lt__/__le__/__gt__/__ge__, ordered by ptr.
    a, b = cp.Stream(), cp.Stream()
    try:
        lo, hi = (a, b) if a.ptr < b.ptr else (b, a)
        assert lo < hi and lo <= hi and hi > lo and hi >= lo
        assert lo != hi and not (lo == hi)
        assert lo == lo and lo <= lo and lo >= lo
        assert sorted([hi, cp.Stream.null, lo]) == [cp.Stream.null, lo, hi]
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


@pytest.mark.gpu
def test_event_record_defaults_to_current_stream(restore_current_stream):
    s = cp.Stream()
    ev = cp.Event()
    try:
        with s:
            spin(s, 200 * MS)
            ev.record()
        assert ev.done is False, "recorded on s, behind the spin"
        ev.synchronize()
        assert ev.done is True and s.done is True
    finally:
        ev.close()
        s.close()


@pytest.mark.gpu
def test_compat_stream_works_with_core_apis():
    np = pytest.importorskip("numpy")
    s = cp.Stream()
    buf = streams.DeviceBuffer(4096, stream=s)
    host = np.zeros(1024, dtype=np.uint32)
    try:
        streams.memset_async(buf, 7, stream=s)
        streams.memcpy_async(host, buf, stream=s)
        s.synchronize()
        assert (host == 0x07070707).all()
        other = streams.Stream()
        other.wait_stream(s)
        other.synchronize()
        other.close()
    finally:
        buf.close()
        s.synchronize()
        s.close()
