"""Event behaviour on a real GPU."""
import ctypes

import pytest

from _support import MS, closing, run_ipc_event_child

import streams
from streams import Event, PinnedBuffer, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu


def test_record_query_synchronize(stream):
    ev = Event()
    try:
        assert ev.query() is True  # never recorded: CUDA reports it complete
        spin(stream, 200 * MS)
        assert ev.record(stream) is ev
        assert ev.query() is False and ev.done is False
        assert ev.synchronize() is True
        assert ev.query() is True
        assert stream.query() is True
    finally:
        ev.close()


def test_event_synchronize_timeout(stream):
    spin(stream, 500 * MS)
    ev = stream.record()
    try:
        assert ev.synchronize(timeout=0.05) is False
        assert ev.synchronize() is True
    finally:
        ev.close()


# An upper bound: a sanitizer slows the spin kernel's launch and end, and
# other processes' kernels on the GPU delay its start (60.2 ms for this
# 50 ms spin in the debug build, beside two other suites and three fuzzers).
@pytest.mark.timing
def test_elapsed_time_matches_spin(stream):
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    try:
        start.record(stream)
        spin(stream, 50 * MS)
        end.record(stream)
        ms = start.elapsed_time(end)  # waits for both
        assert 49.0 <= ms < 75.0, ms
    finally:
        start.close()
        end.close()


def test_elapsed_time_errors(stream):
    timed, untimed, fresh = Event(enable_timing=True), Event(), Event(enable_timing=True)
    try:
        timed.record(stream)
        untimed.record(stream)
        with pytest.raises(ValueError, match="end event was created with enable_timing=False"):
            timed.elapsed_time(untimed)
        with pytest.raises(ValueError, match="start event was created with enable_timing=False"):
            untimed.elapsed_time(timed)
        with pytest.raises(ValueError, match="end event was never recorded"):
            timed.elapsed_time(fresh)
        with pytest.raises(TypeError):
            timed.elapsed_time(None)
    finally:
        for ev in (timed, untimed, fresh):
            ev.close()


def test_wait_makes_stream_wait(stream):
    with closing(Stream(), Event()) as (other, ev):
        spin(stream, 200 * MS)
        ev.record(stream)
        ev.wait(other)
        spin(other, 1)
        assert other.query() is False
        other.synchronize()
        assert stream.query() is True


def test_flags_and_close():
    ev = Event(blocking=True)
    assert ev.flags & 0x1 and ev.flags & 0x2  # blocking sync, timing disabled
    assert not ev.is_timing
    assert Event(enable_timing=True).is_timing
    h = ev.handle
    assert h != 0
    ev.close()
    ev.close()
    with pytest.raises(ValueError, match="closed"):
        ev.handle
    with pytest.raises(ValueError, match="closed"):
        ev.record(Stream.legacy)


def test_record_external_outside_capture_is_cudas_illegal_state(stream):
    # cudaEventRecordExternal only means something during stream capture
    # (tests/graph/test_graph_gpu.py records one inside a capture).
    ev = Event()
    try:
        with pytest.raises(streams.CudaError) as info:
            ev.record(stream, external=True)
        assert info.value.name == "cudaErrorIllegalState"
    finally:
        ev.close()


def test_ipc_handle_requires_interprocess():
    ev = Event()
    with pytest.raises(ValueError, match="interprocess=True"):
        ev.ipc_handle()
    ev.close()
    ipc = Event(interprocess=True)
    h = ipc.ipc_handle()
    assert isinstance(h, bytes) and len(h) == 64
    ipc.close()


def test_ipc_event_across_processes(stream):
    # The event is recorded behind a wait on a host word that is written
    # only once the child has queried it: "first False" however long the
    # child takes to start (a fixed spin of 1.5 s lost that race under the
    # three-build matrix's load).
    word = PinnedBuffer(8)
    flag = ctypes.c_uint32.from_address(word.ptr)
    flag.value = 0
    with closing(Event(interprocess=True)) as ev:
        stream.wait_value(word, 1, "geq")
        ev.record(stream)
        try:
            def release():
                flag.value = 1
            words = run_ipc_event_child(ev, release=release)
            assert words[3:] == ["first", "False", "then", "True"], words
            assert ev.query() is True
        finally:
            flag.value = 1
            stream.synchronize()
            word.close()
