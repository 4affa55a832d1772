"""streams.checker without a GPU: the switch, its arguments, what enable,
disable and ``checking`` give, the environment switch in a child Python,
and the hooks' adapter driven with stand-in streams and buffers (the GPU
half, tests/racecheck/test_checker_gpu.py, drives it through streams'
own operations)."""
import textwrap

import pytest

import streams
from streams import _nvtx, checker
from streams._racecheck import RaceError, RaceWarning

from _support import run_python, uninitialised


@pytest.fixture(autouse=True)
def _off_after():
    yield
    checker.disable()
    assert not checker.enabled()


def test_the_public_face():
    assert streams.checker is checker
    assert checker.RaceError is RaceError and checker.RaceWarning is RaceWarning
    assert set(checker.__all__) == {"Race", "RaceError", "RaceWarning", "checking", "declare",
                                    "disable", "enable", "enabled", "races"}


def test_enable_and_disable_give_the_races_and_turn_the_switch():
    assert not checker.enabled() and checker.races() == []
    assert checker.enable("collect") == []
    assert checker.enabled()
    m = checker._hooks.model
    m.write("b", "s1")
    m.read("b", "s2")
    assert len(checker.races()) == 1
    # A second enable starts afresh and gives what the first found.
    assert len(checker.enable("collect")) == 1
    assert checker.races() == []
    assert checker.disable() == []
    assert checker.races() == [] and not checker.enabled()


@pytest.mark.parametrize("mode, stack_depth, error", [
    ("loud", 8, ValueError), (None, 8, ValueError), ("warn", -1, ValueError),
    ("warn", 1.5, ValueError), ("warn", True, ValueError)])
def test_bad_arguments_are_refused(mode, stack_depth, error):
    with pytest.raises(error):
        checker.enable(mode, stack_depth=stack_depth)
    assert not checker.enabled()


def test_declare_checks_its_arguments():
    with pytest.raises(TypeError, match="kernel must be a streams.Kernel"):
        checker.declare("fill", writes=(0,))
    k = uninitialised(streams.Kernel)
    with pytest.raises(TypeError, match="writes must be argument indices"):
        checker.declare(k, writes=3)
    for bad in ((-1,), (True,), ("0",)):
        with pytest.raises(ValueError, match="writes: .* is not an argument index"):
            checker.declare(k, writes=bad)
    checker.declare(k, writes=[1, 0])
    assert checker._hooks._kernels[("kernel", k.handle)] == {0, 1}
    checker.declare(k, writes=None)
    assert ("kernel", k.handle) not in checker._hooks._kernels


def test_the_hooks_object_is_set_once():
    checker.enable("collect")
    with pytest.raises(RuntimeError, match="set already"):
        _nvtx._set_checking(object(), True)
    assert checker.enabled()


def test_checking_restores_what_was_on():
    checker.enable("collect")
    outer = checker._hooks.model
    with checker.checking("raise") as found:
        assert checker._hooks.model is not outer
        m = checker._hooks.model
        m.write("b", "s1")
        with pytest.raises(RaceError):
            m.read("b", "s2")
    assert checker._hooks.model is outer and len(found) == 1
    checker.disable()
    with checker.checking("collect"):
        assert checker.enabled()
    assert not checker.enabled()


# ---- the adapter, with stand-ins -------------------------------------------------------------

class FakeStream:
    """What the adapter reads of a Stream: handle, id, non_blocking,
    is_capturing()."""

    def __init__(self, handle, sid, non_blocking=True, capturing=False):
        self.handle, self.id, self.non_blocking = handle, sid, non_blocking
        self.capturing = capturing

    def is_capturing(self):
        return self.capturing


class FakeEvent:
    def __init__(self, handle):
        self.handle = handle


def test_the_adapter_orders_through_events_waits_and_syncs():
    h = checker._hooks
    checker.enable("collect")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    # A second wrapper of the CUDA stream s1 (the same id) is the same stream.
    s1_again = FakeStream(0x100, 1)
    ev = FakeEvent(0x300)
    buf = 0x7000
    h.alloc(buf, s1)
    h.record(ev, s1)
    h.wait(s2, ev)
    h.free(buf, s2)                     # ordered after the allocation: silent
    h.alloc(buf, s1_again)
    h.free(buf, s2)                     # no wait since: a race
    (race,) = checker.races()
    assert race.first.op == "allocation" and race.second.op == "free"
    h.alloc(buf, s1)
    h.wait_stream(s2, s1)
    h.free(buf, s2)
    h.alloc(buf, s1)
    h.sync_stream(s1)
    h.free(buf, s2)
    h.alloc(buf, s1)
    h.sync_device()
    h.free(buf, s2)
    h.alloc(buf, s1)
    h.record(ev, s1)
    h.sync_event(ev)
    h.free(buf, None)                   # on the host, after the event's wait
    assert len(checker.races()) == 1


def test_the_adapter_keys_the_special_streams():
    h = checker._hooks
    checker.enable("collect")
    legacy, per_thread = FakeStream(0, 0), FakeStream(2, 0)
    blocking = FakeStream(0x100, 1, non_blocking=False)
    h.alloc(0x7000, blocking)
    h.free(0x7000, legacy)              # the legacy stream waits for blocking streams
    assert checker.races() == []
    h.alloc(0x8000, per_thread)
    from _support import in_thread
    in_thread(lambda: h.free(0x8000, per_thread))   # another thread's per-thread stream
    assert [r.second.op for r in checker.races()] == ["free"]


def test_hooks_do_nothing_while_off():
    h = checker._hooks
    assert h.model is None
    h.alloc(0x7000, FakeStream(0x100, 1))
    h.free(0x7000, FakeStream(0x200, 2))
    h.record(FakeEvent(1), FakeStream(0x100, 1))
    assert checker.races() == []


def test_the_environment_switch():
    code = textwrap.dedent("""
        import streams
        print(streams.checker.enabled(), streams.checker._hooks.model.mode)
    """)
    for value, want in (("raise", "True raise"), ("1", "True warn"), ("collect", "True collect")):
        out = run_python(code, extra_env={"STREAMS_RACECHECK": value}, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want.split()
    out = run_python("import streams; print(streams.checker.enabled())",
                     extra_env={"STREAMS_RACECHECK": "0"}, timeout=60)
    assert out.stdout.split() == ["False"]


def test_a_free_heard_inside_a_hook_is_queued_not_a_deadlock():
    # The garbage collector may free a DeviceBuffer (its __dealloc__ calls
    # the free hook) while this thread is inside a hook holding the
    # model's lock: the free waits in a queue for the next hook.
    code = textwrap.dedent("""
        import faulthandler, gc
        from streams import checker

        faulthandler.dump_traceback_later(60, exit=True)

        class S:
            def __init__(self, h, i):
                self.handle, self.id, self.non_blocking = h, i, True
            def is_capturing(self):
                return False

        class InCycle:
            def __init__(self, ptr, s):
                self.ptr, self.s, self.me = ptr, s, self
            def __del__(self):
                checker._hooks.free(self.ptr, self.s)

        checker.enable("collect", stack_depth=0)
        s1, s2 = S(0x100, 1), S(0x200, 2)
        gc.set_threshold(50)
        for i in range(20000):
            InCycle(0x10000 + i, s1)
            checker._hooks.alloc(0x900000 + (i % 7), s2)
        gc.collect()
        print("done", len(checker.races()), len(checker._hooks._pending))
    """)
    out = run_python(code, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["done", "0", "0"]


def test_a_queued_free_is_applied_in_order_by_the_next_hook():
    h = checker._hooks
    checker.enable("collect")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    h.alloc(0x7000, s1)
    h._tls.depth = 1                    # as inside a hook
    try:
        h.free(0x7000, s2)
    finally:
        h._tls.depth = 0
    assert len(h._pending) == 1 and checker._hooks.model.races == []
    assert [r.second.op for r in checker.races()] == ["free"]     # races() applies it
    assert not h._pending


def test_a_second_run_keeps_what_it_knows_of_blocking_streams():
    h = checker._hooks
    blocking = FakeStream(0x100, 1, non_blocking=False)
    legacy = FakeStream(0, 0)
    for _ in range(2):
        with checker.checking("collect") as found:
            h.alloc(0x7000, blocking)
            h.free(0x7000, legacy)      # the legacy stream waits for blocking streams
        assert found == []


def test_captured_work_is_not_heard():
    h = checker._hooks
    checker.enable("collect")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2, capturing=True)
    h.alloc(0x7000, s1)
    h.accesses(s2, [(0x7000, None, True, "memset_async")])
    h.record(FakeEvent(1), s2)
    assert checker.races() == []


def test_a_free_on_a_closed_stream_is_on_the_legacy_stream_after_its_work():
    h = checker._hooks
    checker.enable("collect")
    s1 = FakeStream(0x100, 1)
    s2 = FakeStream(0x200, 2, non_blocking=False)
    h.alloc(0x7000, s1)
    h.wait_stream(s2, s1)
    h.accesses(s2, [(0x7000, None, True, "memset_async")])
    h.free(0x7000, s1, closed=True)     # CUDA: legacy after s1's tail, and after blocking s2
    assert checker.races() == []


def test_in_raise_mode_every_access_of_the_operation_is_recorded_first():
    h = checker._hooks
    checker.enable("raise")
    s1, s2, s3 = FakeStream(0x100, 1), FakeStream(0x200, 2), FakeStream(0x300, 3)
    h.accesses(s1, [(0xA000, None, True, "fill a")])
    with pytest.raises(RaceError):
        h.accesses(s2, [(0xA000, None, False, "memcpy (src)"),
                        (0xB000, None, True, "memcpy (dst)")])
    # The destination was recorded although the source raised.
    with pytest.raises(RaceError) as info:
        h.accesses(s3, [(0xB000, None, False, "memcpy (src)")])
    assert info.value.race.first.op == "memcpy (dst)"


def test_overlapping_blocks_of_two_threads_leave_the_checker_as_found():
    from _support import in_thread
    outer = checker.checking("collect")
    outer.__enter__()
    inner = checker.checking("collect")
    in_thread(inner.__enter__)
    outer.__exit__(None, None, None)    # replaced by the other thread's block: restores nothing
    assert checker._hooks.model is inner._model
    in_thread(lambda: inner.__exit__(None, None, None))
    assert not checker.enabled()


def test_a_bad_environment_value_names_the_variable():
    out = run_python("import streams", extra_env={"STREAMS_RACECHECK": "yes"}, timeout=60)
    assert out.returncode != 0
    assert "STREAMS_RACECHECK='yes'" in out.stderr
    out = run_python("import streams; print(streams.checker._hooks.model.mode)",
                     extra_env={"STREAMS_RACECHECK": "RAISE"}, timeout=60)
    assert out.stdout.split() == ["raise"]


def test_the_switch_refuses_no_hooks():
    with pytest.raises(TypeError, match="not None"):
        _nvtx._set_checking(None, True)
    assert not checker.enabled()


def test_a_queued_free_that_races_never_raises_from_another_hook():
    h = checker._hooks
    checker.enable("raise")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    ev = FakeEvent(0x300)
    h.accesses(s1, [(0xA000, None, True, "kernel")])
    h._tls.depth = 1                    # as inside a hook: the free is queued
    try:
        h.free(0xA000, s2)              # races with the kernel on s1
    finally:
        h._tls.depth = 0
    with pytest.warns(RaceWarning, match="free"):      # warned, in mode "raise" too
        h.accesses(s1, [(0xB000, None, True, "kernel writes B")])   # applies the free
    h.record(ev, s1)
    h.wait(s2, ev)
    h.accesses(s2, [(0xB000, None, False, "memcpy reads B")])   # ordered by the event
    assert [(r.first.op, r.second.op) for r in checker.races()] == [("kernel", "free")]


def test_a_host_free_waits_for_the_device():
    h = checker._hooks
    checker.enable("collect")
    s = FakeStream(0x100, 1)
    h.alloc(0xC000, None)               # a ManagedBuffer
    h.accesses(s, [(0xC000, None, True, "memset_async")])
    h.free(0xC000, None)                # cudaFree waits for the device first
    assert checker.races() == []


def test_off_leaves_no_queued_free_and_keeps_no_run():
    import gc
    import weakref
    h = checker._hooks
    checker.enable("collect")
    run = weakref.ref(h.model)
    h._tls.depth = 1
    try:
        h.free(0xD000, FakeStream(0x100, 1))
    finally:
        h._tls.depth = 0
    assert len(h._pending) == 1
    checker.disable()
    assert not h._pending
    gc.collect()
    assert run() is None


def test_a_queued_race_is_never_raised_even_as_a_warning_made_an_error():
    import warnings
    h = checker._hooks
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceWarning)
        block = checker.checking("warn")
        block.__enter__()
        h.accesses(s1, [(0xE000, None, True, "kernel")])
        h._tls.depth = 1
        try:
            h.free(0xE000, s2)
        finally:
            h._tls.depth = 0
        block.__exit__(None, None, None)
    assert not checker.enabled()
    assert [(r.first.op, r.second.op) for r in block.races] == [("kernel", "free")]


def test_a_hook_called_by_a_finalizer_inside_a_hook_is_queued_in_order():
    # A finalizer (or a warning's handler) calling streams while this
    # thread is inside a hook: its operation is queued behind the hook's.
    h = checker._hooks
    checker.enable("collect")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    ev = FakeEvent(0x300)
    h.accesses(s1, [(0xF000, None, True, "kernel")])
    h._tls.depth = 1
    try:
        h.record(ev, s1)                # queued
        h.wait(s2, ev)                  # queued after it
        assert len(h._pending) == 2
    finally:
        h._tls.depth = 0
    h.accesses(s2, [(0xF000, None, False, "memcpy")])   # applies both first: ordered
    assert checker.races() == [] and not h._pending


def test_a_queued_operation_is_applied_with_what_its_objects_were_when_heard():
    # A finalizer inside a hook records an event, waits for it, closes it:
    # applied later, the event is read as it was (a closed event's handle
    # raises), and the wait still orders the read after the write.
    class ClosingEvent(FakeEvent):
        closed = False

        @property
        def handle(self):
            if self.closed:
                raise ValueError("operation on a closed Event")
            return self._h

        def __init__(self, h):
            self._h = h

    h = checker._hooks
    checker.enable("raise")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2)
    ev = ClosingEvent(0x300)
    h._tls.depth = 1
    try:
        h.accesses(s1, [(0xA000, None, True, "kernel")])
        h.record(ev, s1)
        h.wait(s2, ev)
        ev.closed = True
    finally:
        h._tls.depth = 0
    h.accesses(s2, [(0xA000, None, False, "memcpy")])   # applies the three first: ordered
    assert checker.races() == []


def test_a_queued_operation_keeps_its_capture_state():
    h = checker._hooks
    checker.enable("collect")
    s1, s2 = FakeStream(0x100, 1), FakeStream(0x200, 2, capturing=True)
    h._tls.depth = 1
    try:
        h.accesses(s2, [(0xA000, None, True, "captured memset")])
    finally:
        h._tls.depth = 0
    s2.capturing = False                # the capture ended before the queue is applied
    h.accesses(s1, [(0xA000, None, False, "read")])
    assert checker.races() == []


def test_a_queued_per_thread_operation_stays_its_threads():
    from _support import in_thread
    h = checker._hooks
    checker.enable("collect")
    per_thread = FakeStream(2, 0)

    def other_thread():
        h.alloc(0xA000, per_thread)
        h.accesses(per_thread, [(0xA000, None, True, "kernel")])
        h._tls.depth = 1
        try:
            h.free(0xA000, per_thread)  # queued, applied by this thread's next hook
        finally:
            h._tls.depth = 0

    in_thread(other_thread)
    h.sync_device()                     # applies it here: still the other thread's stream
    assert checker.races() == []


def test_a_hook_run_while_the_stream_cache_is_locked_is_queued():
    # The cache lookup hashes the stream under the hooks' lock, and the
    # garbage collector may run a finalizer there: here the hash itself
    # calls a free hook, as such a finalizer would.
    code = textwrap.dedent("""
        import faulthandler
        from streams import checker

        faulthandler.dump_traceback_later(30, exit=True)
        h = checker._hooks

        class S:
            reenter = False
            def __init__(self, handle, sid):
                self.handle, self.id, self.non_blocking = handle, sid, True
            def is_capturing(self):
                return False
            def __hash__(self):
                if S.reenter:
                    S.reenter = False
                    h.free(0x9000, S(0x500, 5))
                return self.id

        checker.enable("collect")
        s = S(0x100, 1)
        h.alloc(0x7000, s)
        S.reenter = True
        h.alloc(0x8000, s)
        print("done", len(h._pending), len(checker.races()))
    """)
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["done", "0", "0"]     # applied by the alloc's own hook
