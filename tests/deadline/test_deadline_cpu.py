"""Deadlines and the watchdog without a GPU: the argument checks that come
before any CUDA call, and the watchdog's bookkeeping run on deadlines whose
marker the host writes (streams._deadline's _testing hooks): pending
listing, met deadlines forgotten, expiry raised in the next wait or given
once to a handler, a handler's exception reaching sys.unraisablehook, slots
given back, and the thread's life (lazy start, stop, a forked child,
interpreter exit)."""
import math
import sys
import textwrap
import time

import pytest

from _support import child_result, run_python

import streams
from streams import Deadline, DeadlineExceeded, GraphExec, Stream, Watchdog
from streams import _deadline

LEGACY = Stream.legacy


def _until(predicate, timeout=10.0):
    """True once predicate() is, polling (the watchdog ticks on its thread)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


@pytest.fixture(autouse=True)
def fresh_watchdog():
    """Each test sees the default handler and tick, and leaves no fake
    deadline pending for the next."""
    streams.watchdog.handler = None
    streams.watchdog.tick = 0.005
    yield
    streams.watchdog.handler = None
    streams.watchdog.tick = 0.005
    for d in streams.watchdog.pending():
        if d.stream is None:
            _deadline._fake_reach(d)
    assert _until(lambda: not [d for d in streams.watchdog.pending() if d.stream is None])


# ---- arguments -------------------------------------------------------------------------

@pytest.mark.parametrize("seconds, exc", [
    (True, TypeError), ("1", TypeError), (None, TypeError), (0, ValueError), (-1, ValueError),
    (float("nan"), ValueError), (math.inf, ValueError), (1e10, ValueError),
])
def test_seconds_must_be_a_positive_finite_number(seconds, exc):
    with pytest.raises(exc, match="seconds"):
        streams.deadline(LEGACY, seconds)


def test_the_stream_what_and_handler_are_checked():
    with pytest.raises(TypeError, match="stream"):
        streams.deadline("not a stream", 1.0)
    with pytest.raises(TypeError, match="what must be a str"):
        streams.deadline(LEGACY, 1.0, what=3)
    with pytest.raises(TypeError, match="handler must be callable"):
        streams.deadline(LEGACY, 1.0, handler=3)


def test_a_deadline_before_its_scope_is_open_and_names_its_work():
    d = streams.deadline(LEGACY, 0.25, what="step 1")
    assert isinstance(d, Deadline)
    assert (d.state, d.marker, d.last_seen, d.age, d.reached, d.expired, d.node) == \
        ("open", None, None, None, False, False, None)
    assert d.stream is LEGACY and d.seconds == 0.25 and d.what == "step 1" and d.graph is None
    assert "0.25 s open on step 1" in repr(d)
    assert streams.deadline(LEGACY, 1).what == repr(LEGACY)


def test_a_scope_is_left_once_after_it_was_entered():
    d = streams.deadline(LEGACY, 1.0)
    with pytest.raises(ValueError, match="left once"):
        d.__exit__(None, None, None)


def test_replay_deadlines_are_checked_before_the_replay():
    exe = GraphExec.__new__(GraphExec)
    for bad, exc in ((True, TypeError), ("1", TypeError), (0, ValueError), (-2.0, ValueError)):
        with pytest.raises(exc, match="deadline"):
            exe.launch(LEGACY, deadline=bad)


@pytest.mark.parametrize("cls, hint", [(Deadline, "streams.deadline"),
                                       (Watchdog, "streams.watchdog")])
def test_library_made_classes_refuse_direct_construction(cls, hint):
    with pytest.raises(TypeError, match=f"cannot be instantiated directly; .*{hint}"):
        cls()


def test_watchdog_settings_are_checked():
    wd = streams.watchdog
    for bad, exc in ((0, ValueError), (-1, ValueError), ("x", TypeError), (11, ValueError)):
        with pytest.raises(exc, match="tick"):
            wd.tick = bad
    wd.tick = 0.02
    assert wd.tick == 0.02
    with pytest.raises(TypeError, match="handler must be callable"):
        wd.handler = "print"
    with pytest.raises(TypeError, match="timeout"):
        wd.stop(timeout="soon")
    assert wd is streams.watchdog and "streams.watchdog" in repr(wd)


def test_deadline_exceeded_is_a_timeout_error_that_pickles():
    import pickle
    e = DeadlineExceeded("late", what="w", expected=3, last_seen=2, age=0.1, seconds=0.05)
    assert isinstance(e, TimeoutError)
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.what, back.expected, back.last_seen, back.age, back.seconds,
            back.stream) == ("late", "w", 3, 2, 0.1, 0.05, None)


# ---- the watchdog's bookkeeping (markers the host writes) -----------------------------

def test_a_pending_deadline_is_listed_until_its_marker_arrives():
    d = _deadline._fake_deadline(30.0, what="listed")
    assert streams.watchdog.running
    assert d.state == "pending" and d.marker == 1 and d.last_seen == 0 and not d.reached
    assert d in streams.watchdog.pending()
    assert d.age >= 0
    _deadline._fake_reach(d)
    assert d.reached and d.last_seen == 1
    assert d not in streams.watchdog.pending()      # reached: listed no more
    assert _until(lambda: d.state == "met")         # the watchdog's next tick


def test_markers_of_one_stream_are_numbered_and_listed_in_order():
    a = _deadline._fake_deadline(30.0, what="a")
    b = _deadline._fake_deadline(30.0, after=a, what="b")
    c = _deadline._fake_deadline(30.0, after=b, what="c")
    assert (a.marker, b.marker, c.marker) == (1, 2, 3)
    pending = streams.watchdog.pending()
    assert pending.index(a) < pending.index(b) < pending.index(c)
    _deadline._fake_reach(b)        # the slot passed 2: a and b are done
    assert _until(lambda: a.state == "met" and b.state == "met")
    assert c.state == "pending" and c in streams.watchdog.pending()
    _deadline._fake_reach(c)
    assert _until(lambda: c.state == "met")


def test_a_drained_watch_stays_watched_for_a_while():
    """A watch whose deadlines are all reached stays in the watchdog's
    active set for a while (so a loop arming one deadline per step does not
    wake the thread per step), then is dropped; a stop drops it at once,
    and its slot can go back."""
    d = _deadline._fake_deadline(30.0, what="step 0")
    for i in range(1, 10):
        _deadline._fake_reach(d)
        assert _until(lambda: d.state == "met")
        time.sleep(0.02)                # a few ticks, well inside the 0.1 s
        assert _deadline._is_watched(d), f"step {i}: dropped as soon as it drained"
        d = _deadline._fake_deadline(30.0, after=d, what=f"step {i}")
    _deadline._fake_reach(d)
    assert _until(lambda: d.state == "met")
    assert _deadline._is_watched(d)
    assert _until(lambda: not _deadline._is_watched(d))     # about 0.1 s later
    # Armed again after it was dropped: watched again.
    e = _deadline._fake_deadline(30.0, after=d, what="after the pause")
    assert _deadline._is_watched(e)
    _deadline._fake_reach(e)
    assert _until(lambda: e.state == "met")
    # A stop drops a drained watch at once: no pass would drop it later.
    streams.watchdog.stop()
    assert not _deadline._is_watched(e)
    import gc
    slot = _deadline._slot_of(e)
    del d, e
    gc.collect()
    assert _until(lambda: _deadline._is_free(slot))


def test_a_stop_forgets_what_arrived_and_lets_its_watch_go():
    """Markers that landed since the last pass: a stop marks their
    deadlines met and lets the drained watch (and its slot) go, although
    no pass will run."""
    import gc
    streams.watchdog.tick = 5.0         # no pass between the reach and the stop
    d = _deadline._fake_deadline(30.0, what="stopped")
    time.sleep(0.05)                    # the thread, started by the arm, is asleep for the tick
    _deadline._fake_reach(d)
    streams.watchdog.stop()
    assert d.state == "met" and not _deadline._is_watched(d)
    slot = _deadline._slot_of(d)
    del d
    gc.collect()
    assert _until(lambda: _deadline._is_free(slot))


def test_what_defaults_to_the_watchs_name_when_asked_for():
    d = _deadline._fake_deadline(0.02, what=None)
    assert d.what == "<no stream>"
    assert "on <no stream>" in repr(d)
    assert _until(lambda: d.expired)
    with pytest.raises(DeadlineExceeded) as info:
        _deadline._fake_wait(d)
    assert info.value.what == "<no stream>"
    # Named once: the default name is not repeated after the stream's.
    assert str(info.value).count("<no stream>") == 1, str(info.value)
    _deadline._fake_reach(d)


def test_a_missed_deadline_raises_in_the_next_wait_once():
    d = _deadline._fake_deadline(0.02, what="slow step")
    assert _until(lambda: d.expired)
    with pytest.raises(DeadlineExceeded) as info:
        _deadline._fake_wait(d)
    e = info.value
    assert isinstance(e, TimeoutError)
    assert (e.what, e.expected, e.last_seen, e.seconds, e.node, e.graph, e.also) == \
        ("slow step", 1, 0, 0.02, None, None, [])
    assert e.age >= 0.02
    assert "deadline of 0.02 s missed" in str(e) and "slow step" in str(e)
    assert "marker 1 expected, last seen 0" in str(e)
    _deadline._fake_wait(d)         # raised once: the next wait passes
    # Expired, still listed until its marker arrives; then forgotten.
    assert d.state == "expired" and d in streams.watchdog.pending()
    _deadline._fake_reach(d)
    assert _until(lambda: d not in streams.watchdog.pending())
    assert d.state == "expired" and d.reached


def test_several_expiries_raise_as_one_with_the_others_attached():
    a = _deadline._fake_deadline(0.01, what="a")
    b = _deadline._fake_deadline(0.01, after=a, what="b")
    assert _until(lambda: a.expired and b.expired)
    time.sleep(0.05)
    with pytest.raises(DeadlineExceeded) as info:
        _deadline._fake_wait(a)
    assert info.value.what == "a" and [x.what for x in info.value.also] == ["b"]
    _deadline._fake_reach(b)


def test_a_handler_is_called_once_from_the_watchdog_thread():
    import threading
    seen = []
    d = _deadline._fake_deadline(0.01, handler=lambda e: seen.append(
        (e, threading.current_thread().name)))
    assert _until(lambda: seen)
    time.sleep(0.05)                # more ticks: still once
    assert len(seen) == 1
    e, thread = seen[0]
    assert isinstance(e, DeadlineExceeded) and e.expected == d.marker
    assert thread == "streams-watchdog"
    _deadline._fake_wait(d)         # the handler took it: nothing for the waiter


def test_the_watchdog_handler_takes_deadlines_without_their_own():
    seen, own = [], []
    streams.watchdog.handler = seen.append
    a = _deadline._fake_deadline(0.01)
    b = _deadline._fake_deadline(0.01, handler=own.append)
    assert _until(lambda: len(seen) == 1 and len(own) == 1)
    assert seen[0].expected == a.marker and own[0].expected == b.marker
    assert streams.watchdog.handler == seen.append


def test_a_handler_that_raises_reaches_unraisablehook(monkeypatch):
    hooked = []
    monkeypatch.setattr(sys, "unraisablehook", hooked.append)

    def handler(e):
        raise KeyError("from the handler")

    d = _deadline._fake_deadline(0.01, handler=handler)
    assert _until(lambda: hooked)
    assert isinstance(hooked[0].exc_value, KeyError) and hooked[0].object is handler
    assert d.expired
    # The watchdog goes on.
    e = _deadline._fake_deadline(30.0)
    _deadline._fake_reach(e)
    assert _until(lambda: e.state == "met")


def test_slots_go_back_once_their_deadlines_are_done():
    import gc
    gc.collect()
    d = _deadline._fake_deadline(30.0)
    slot = _deadline._slot_of(d)
    assert not _deadline._is_free(slot)
    _deadline._fake_reach(d)
    assert _until(lambda: d.state == "met")
    assert not _deadline._is_free(slot)         # d still holds it
    del d
    gc.collect()
    # Its own slot, not a count: another test's watch may go back meanwhile
    # (the watchdog drops a watch on its next pass).
    assert _until(lambda: _deadline._is_free(slot))


def test_many_watches_across_pages():
    ds = [_deadline._fake_deadline(30.0) for _ in range(600)]     # more than one page
    assert len({(d.marker) for d in ds}) == 1
    assert len(streams.watchdog.pending()) >= 600
    for d in ds:
        _deadline._fake_reach(d)
    assert _until(lambda: all(d.state == "met" for d in ds))


def test_stop_and_lazy_restart():
    wd = streams.watchdog
    d = _deadline._fake_deadline(30.0)
    assert wd.running
    wd.stop()
    assert not wd.running
    assert d in wd.pending()        # still queued, unchecked while stopped
    wd.stop()                       # idempotent
    e = _deadline._fake_deadline(30.0, after=d)
    assert wd.running
    _deadline._fake_reach(e)
    assert _until(lambda: d.state == "met" and e.state == "met")


# ---- the thread's life in a fresh process ----------------------------------------------

_LIFE = textwrap.dedent("""
    import json, os, threading, time
    import streams
    from streams import _deadline

    def until(p, t=10.0):
        end = time.monotonic() + t
        while time.monotonic() < end and not p():
            time.sleep(0.002)
        return p()

    out = {"before": streams.watchdog.running,
           "threads_before": [t.name for t in threading.enumerate()]}
    d = _deadline._fake_deadline(60.0)
    out["after"] = streams.watchdog.running
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = {"running": streams.watchdog.running, "pending": len(streams.watchdog.pending())}
        e = _deadline._fake_deadline(0.01)
        child["restarted"] = streams.watchdog.running
        child["expired"] = until(lambda: e.expired)
        os.write(w, json.dumps(child).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    out["child"] = json.loads(os.read(r, 4096))
    out["child_status"] = status
    out["parent_pending"] = d in streams.watchdog.pending()
    print("RESULT " + json.dumps(out), flush=True)
    # Exit with a deadline pending and the thread running: atexit stops it.
""")


def test_the_thread_starts_lazily_is_not_in_a_forked_child_and_stops_at_exit():
    start = time.monotonic()
    result = run_python(_LIFE, timeout=120)
    out = child_result(result)
    assert result.returncode == 0, result.stderr
    assert out["before"] is False and "streams-watchdog" not in out["threads_before"]
    assert out["after"] is True
    assert out["child"] == {"running": False, "pending": 0, "restarted": True, "expired": True}
    assert out["child_status"] == 0 and out["parent_pending"] is True
    assert time.monotonic() - start < 60
