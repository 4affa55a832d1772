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
    assert checker._hooks._kernels[k] == {0, 1}


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
    """What the adapter reads of a Stream: handle, id, non_blocking."""

    def __init__(self, handle, sid, non_blocking=True):
        self.handle, self.id, self.non_blocking = handle, sid, non_blocking


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
