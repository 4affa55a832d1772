"""Deadlines on the GPU: a stream held by a spin kernel misses a 50 ms
deadline and its next wait (synchronize, an event's synchronize, await)
raises DeadlineExceeded naming it while the kernel still runs, against a
control stream that meets its deadline; a graph replay's deadline; a
handler called once; deadlines refused while capturing; many streams; a
stream closed with a deadline pending (the leak check of tests/conftest.py
counts its handles; the debug build also fails on a CUDA call made holding
the GIL)."""
import asyncio
import time

import pytest

from _support import MS

import streams
from streams import Deadline, DeadlineExceeded, Stream
from streams.testing import launch_empty, spin

pytestmark = pytest.mark.gpu


def _until(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


@pytest.fixture(autouse=True)
def watchdog_defaults():
    streams.watchdog.handler = None
    streams.watchdog.tick = 0.005
    yield
    streams.watchdog.handler = None


@pytest.fixture
def streams_made(closer):
    """new() makes a non-blocking stream that is closed after the test (after
    closer's synchronize_device: every spin has ended)."""
    def new():
        return closer(Stream(non_blocking=True))
    return new


def _warm(s):
    # The spin kernel's module and the first marker page, before any test
    # holds a stream: a first load or registration never waits for a spin.
    spin(s, 1)
    with streams.deadline(s, 30.0):
        launch_empty(s)
    assert s.synchronize(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def first_marker_page():
    """The marker pages live as long as the process (a marker queued on a
    closed stream still lands): the first is made here, before any test's
    leak check counts the debug build's allocations."""
    s = Stream(non_blocking=True)
    try:
        _warm(s)
    finally:
        s.close()
    yield


def test_a_met_deadline_is_forgotten(streams_made):
    s = streams_made()
    _warm(s)
    with streams.deadline(s, 5.0, what="quick") as d:
        launch_empty(s)
    assert isinstance(d, Deadline) and d.state in ("pending", "met")
    assert s.synchronize(timeout=30) is True
    assert d.reached and d.last_seen >= d.marker
    assert _until(lambda: d.state == "met" and d not in streams.watchdog.pending())
    assert s.synchronize() is True


def test_a_missed_deadline_raises_in_synchronize(streams_made):
    s, control = streams_made(), streams_made()
    _warm(s)
    _warm(control)
    with streams.deadline(control, 10.0, what="control"):
        launch_empty(control)
    with streams.deadline(s, 0.05, what="held by spin") as d:
        spin(s, 1000 * MS)
    start = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info:
        s.synchronize()
    # Raised in the waiter while the kernel still runs.
    assert time.monotonic() - start < 0.9
    e = info.value
    assert e.stream is s and e.what == "held by spin" and e.graph is None
    assert e.expected == d.marker and e.last_seen < d.marker and e.age >= 0.05
    assert "held by spin" in str(e) and repr(s) in str(e)
    assert d.state == "expired" and d in streams.watchdog.pending()
    assert control.synchronize(timeout=30) is True      # met: nothing to raise
    assert s.synchronize(timeout=30) is True            # raised once; the work ends
    assert _until(lambda: d.reached and d not in streams.watchdog.pending())
    assert d.state == "expired"


def test_pending_lists_the_stream_marker_and_age(streams_made):
    s = streams_made()
    _warm(s)
    with streams.deadline(s, 10.0, what="listed") as d:
        spin(s, 300 * MS)
    [found] = [p for p in streams.watchdog.pending() if p.stream is s]
    assert found is d and found.what == "listed" and found.marker == d.marker
    assert found.last_seen == d.marker - 1 and found.age >= 0 and found.state == "pending"
    assert s.synchronize(timeout=30)
    assert _until(lambda: d not in streams.watchdog.pending())


def test_an_event_of_a_watched_stream_raises(streams_made):
    s = streams_made()
    _warm(s)
    with streams.deadline(s, 0.05):
        spin(s, 1000 * MS)
    ev = s.record()
    try:
        with pytest.raises(DeadlineExceeded) as info:
            ev.synchronize()
        assert info.value.stream is s
        assert s.synchronize(timeout=30) is True         # the event's wait took it
    finally:
        ev.close()


def test_a_missed_deadline_raises_in_await(streams_made):
    s = streams_made()
    _warm(s)
    with streams.deadline(s, 0.05, what="awaited"):
        spin(s, 1000 * MS)

    async def wait():
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="awaited"):
            await s
        return time.monotonic() - start

    assert asyncio.run(wait()) < 0.9
    assert s.synchronize(timeout=30)


def test_a_handler_is_called_once_and_the_wait_does_not_raise(streams_made):
    s = streams_made()
    _warm(s)
    seen = []
    with streams.deadline(s, 0.02, handler=seen.append) as d:
        spin(s, 300 * MS)
    assert _until(lambda: seen)
    assert s.synchronize(timeout=30) is True
    time.sleep(0.05)
    assert len(seen) == 1 and seen[0].expected == d.marker and seen[0].stream is s


def test_the_watchdog_handler(streams_made):
    s = streams_made()
    _warm(s)
    seen = []
    streams.watchdog.handler = seen.append
    with streams.deadline(s, 0.02):
        spin(s, 300 * MS)
    assert _until(lambda: seen)
    assert s.synchronize(timeout=30) is True
    assert len(seen) == 1


def _spin_graph(capture_stream, us):
    capture_stream.begin_capture()
    spin(capture_stream, us)
    graph = capture_stream.end_capture()
    return graph


def test_a_replay_deadline(streams_made, closer):
    s, cap = streams_made(), streams_made()
    _warm(s)
    slow = closer(_spin_graph(cap, 1000 * MS))
    quick = closer(_spin_graph(cap, 1))
    slow_exe = closer(slow.instantiate())
    quick_exe = closer(quick.instantiate())
    d = quick_exe.launch(s, deadline=10.0)
    assert isinstance(d, Deadline) and d.graph is quick_exe
    assert s.synchronize(timeout=30) is True
    assert quick_exe.launch(s) is None                  # no deadline: as before
    d = slow_exe.launch(s, deadline=0.05)
    with pytest.raises(DeadlineExceeded) as info:
        s.synchronize()
    e = info.value
    assert e.graph is slow_exe and e.node is None and e.expected == d.marker
    assert "graph replay" in str(e)
    assert s.synchronize(timeout=30) is True


def test_a_replay_deadline_names_its_executable_after_it_closed(streams_made, closer):
    """A replay's deadline names the executable as it was at the launch,
    also when the report comes after the executable was closed."""
    s, cap = streams_made(), streams_made()
    _warm(s)
    seen = []
    slow = closer(_spin_graph(cap, 1000 * MS))
    exe = slow.instantiate()
    name = repr(exe)
    streams.watchdog.handler = seen.append       # the fixture puts it back
    d = exe.launch(s, deadline=0.05)
    exe.close()                         # the replay runs on; its report comes later
    assert repr(exe) != name
    assert _until(lambda: seen)
    assert d.what == name and seen[0].what == name
    assert f"graph replay {name}" in str(seen[0])
    assert s.synchronize(timeout=30) is True


def test_deadlines_are_refused_while_capturing(streams_made, closer):
    s = streams_made()
    _warm(s)
    exe = closer(closer(_spin_graph(s, 1)).instantiate())
    s.begin_capture()
    try:
        with pytest.raises(ValueError, match="capturing"):
            with streams.deadline(s, 1.0):
                pass
        with pytest.raises(ValueError, match="capturing"):
            exe.launch(s, deadline=1.0)
        launch_empty(s)
    finally:
        closer(s.end_capture())             # the capture was not invalidated
    # A scope whose stream began capturing inside it refuses at its end,
    # and its marker number is not used up.
    d = streams.deadline(s, 1.0)
    d.__enter__()
    s.begin_capture()
    try:
        with pytest.raises(ValueError, match="capturing"):
            d.__exit__(None, None, None)
    finally:
        closer(s.end_capture())
    with streams.deadline(s, 10.0) as e:
        launch_empty(s)
    assert s.synchronize(timeout=30)
    assert _until(lambda: e.state == "met")


def test_many_streams(streams_made):
    slow = [streams_made() for _ in range(8)]
    quick = [streams_made() for _ in range(8)]
    for s in slow + quick:
        _warm(s)
    for s in slow:
        with streams.deadline(s, 0.05, what=f"slow {id(s)}"):
            spin(s, 500 * MS)
    for s in quick:
        with streams.deadline(s, 10.0):
            launch_empty(s)
    for s in slow:
        with pytest.raises(DeadlineExceeded) as info:
            s.synchronize()
        assert info.value.stream is s and info.value.what == f"slow {id(s)}"
    for s in quick + slow:
        assert s.synchronize(timeout=30) is True
    assert _until(lambda: not [d for d in streams.watchdog.pending()
                               if d.stream in slow or d.stream in quick])


@pytest.mark.concurrent   # closed while the first spin still runs
def test_a_stream_closed_with_a_deadline_pending():
    s = Stream(non_blocking=True)
    _warm(s)
    with streams.deadline(s, 10.0) as met:
        spin(s, 200 * MS)
    with streams.deadline(s, 0.02) as missed:
        spin(s, 200 * MS)
    s.close()                       # CUDA finishes the work; the markers still land
    assert met in streams.watchdog.pending()
    assert _until(lambda: met.state == "met" and missed.reached
                  and missed not in streams.watchdog.pending())
    assert missed.state == "expired"
    streams.synchronize_device()


def test_markers_from_threads_stay_in_order(streams_made):
    import threading
    s = streams_made()
    _warm(s)
    made = []

    def arm():
        for _ in range(50):
            with streams.deadline(s, 30.0) as d:
                launch_empty(s)
            made.append(d)

    threads = [threading.Thread(target=arm) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.synchronize(timeout=30) is True
    assert _until(lambda: all(d.state == "met" for d in made))
    markers = sorted(d.marker for d in made)
    assert markers == list(range(markers[0], markers[0] + 200))
