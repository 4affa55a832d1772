"""What only streams.compat.cupy has (the shared behaviour is in
test_compat_conformance.py): the null / per-thread singletons, ordering by
``ptr``, CuPy's event flags, ``add_callback``'s int status and
``get_current_stream``'s mapping of the default streams.

The reference page (cupy-cuda-Stream.txt) has no code examples: the GPU
tests check each documented statement instead, quoted in the test's comment.
"""
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

