"""StreamPool and EventPool: reuse, bounds, closing, threads, work still queued."""
import textwrap

import pytest

from _support import MS, N, closing, run_python, run_threads, to_host

import streams
from streams import Event, EventPool, Stream, StreamPool
from streams.testing import spin

pytestmark = pytest.mark.gpu


def _live(key):
    return streams.debug_counters()[key]


def test_a_closed_stream_gives_its_handle_to_the_next(kernels, device_buffer):
    buf = device_buffer()
    with StreamPool(maxsize=4) as pool:
        first = pool.acquire()
        handle = first.handle
        first.close()
        assert pool.idle == 1
        again = pool.acquire()
        assert again.handle == handle and pool.idle == 0
        # The reused handle is a working stream: data computed on it.
        again.launch(kernels.fill, 4, 256, buf, 41, N)
        again.launch(kernels.increment, 4, 256, buf, N)
        assert (to_host(buf, again) == 42).all()
        again.close()


def test_work_queued_on_a_returned_handle_still_orders_the_next_user():
    with StreamPool() as pool:
        s = pool.acquire()
        spin(s, 300 * MS)
        s.close()
        t = pool.acquire()
        assert t.query() is False, "the spin queued before the handle went back still runs"
        assert t.synchronize() is True
        t.close()


def test_pool_parameters_reach_the_streams():
    least, greatest = streams.stream_priority_range()
    with StreamPool(priority=greatest, non_blocking=True) as pool:
        with closing(pool.acquire()) as s:
            assert s.priority == greatest and s.non_blocking is True
        assert pool.priority == greatest and pool.non_blocking is True


def test_bounded_and_closing_destroys_every_handle():
    base = _live("live_streams")
    pool = StreamPool(maxsize=2)
    made = [pool.acquire() for _ in range(5)]
    assert _live("live_streams") == base + 5
    for s in made:
        s.close()
    assert pool.idle == 2, "only maxsize handles are kept"
    assert _live("live_streams") == base + 2
    lent = pool.acquire()
    pool.close()
    assert pool.closed and pool.idle == 0
    assert _live("live_streams") == base + 1, "the idle handle is destroyed, the lent one not"
    assert lent.query() is True, "a stream lent out keeps working after its pool closed"
    lent.close()
    assert _live("live_streams") == base
    with pytest.raises(ValueError, match="closed StreamPool"):
        pool.acquire()
    pool.close()


def test_dropped_streams_go_back_too():
    with StreamPool() as pool:
        s = pool.acquire()
        handle = s.handle
        del s
        assert pool.idle == 1
        with closing(pool.acquire()) as t:
            assert t.handle == handle


def test_a_pool_dropped_with_streams_lent_out():
    base = _live("live_streams")
    pool = StreamPool()
    s = pool.acquire()
    pool.acquire().close()
    del pool                       # the lent stream keeps what it needs alive
    assert s.synchronize() is True
    s.close()
    assert _live("live_streams") == base


def test_eight_threads_share_a_pool():
    base = _live("live_streams")
    held = set()
    errors = []
    pool = StreamPool(maxsize=4)

    def work(_):
        try:
            for _ in range(500):
                a, b = pool.acquire(), pool.acquire()
                for s in (a, b):
                    assert s.handle not in held, "one handle lent twice at once"
                    held.add(s.handle)
                a.wait_stream(b)
                for s in (a, b):
                    held.discard(s.handle)
                    s.close()
        except BaseException as exc:   # reported below, with the assertion
            errors.append(exc)

    run_threads(work, 8)
    assert not errors, errors[:3]
    assert pool.idle <= 4
    pool.close()
    assert _live("live_streams") == base


def test_closing_a_pool_while_other_threads_acquire():
    """acquire() makes a handle with the GIL released when the pool is
    empty; a close() from another thread meanwhile leaves that stream a
    plain owned one (closing it destroys the handle), never one that points
    at a freed pool.  In a child process: the failure is a crash."""
    code = textwrap.dedent("""
        import threading, streams
        errors = []
        for _ in range(20):
            pool = streams.StreamPool(maxsize=0)    # every acquire makes a handle
            def grab():
                try:
                    for _ in range(50):
                        pool.acquire().close()
                except ValueError as exc:           # closed meanwhile: documented
                    if "closed StreamPool" not in str(exc):
                        errors.append(repr(exc))
            threads = [threading.Thread(target=grab) for _ in range(3)]
            threads.append(threading.Thread(target=pool.close))
            for t in threads: t.start()
            for t in threads: t.join()
        assert not errors, errors[:3]
        print("OK", streams.debug_counters()["live_streams"])
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "OK 0"


def test_event_pool_reuses_handles_with_its_flags(stream):
    with EventPool(enable_timing=True, maxsize=8) as pool:
        start, end = pool.acquire(), pool.acquire()
        assert start.is_timing and pool.is_timing
        start.record(stream)
        spin(stream, 20 * MS)
        end.record(stream)
        assert end.synchronize() is True
        assert start.elapsed_time(end) >= 15.0
        handles = {start.handle, end.handle}
        start.close()
        end.close()
        assert pool.idle == 2
        again = pool.acquire()
        assert again.handle in handles
        assert again.record(stream).synchronize() is True
        again.close()


def test_event_pool_counts_balance():
    base = _live("live_events")
    pool = EventPool(maxsize=1)
    a, b = pool.acquire(), pool.acquire()
    a.close()
    b.close()
    assert _live("live_events") == base + 1
    pool.close()
    assert _live("live_events") == base


def test_pools_and_handle_owners_initialise_once():
    pool = StreamPool()
    with pytest.raises(RuntimeError, match="already initialised"):
        pool.__init__()
    pool.close()
    s = Stream()
    s.close()
    with pytest.raises(RuntimeError, match="already initialised"):
        s.__init__()
    e = Event()
    with pytest.raises(RuntimeError, match="already initialised"):
        e.__init__()
    e.close()


def test_a_refused_second_init_changes_nothing_and_a_closed_pool_stays_closed():
    """A second __init__ is refused before it writes anything (the pool's
    parameters were overwritten by the refused call before), and after
    close() too (it made the pool anew)."""
    pool = StreamPool(priority=0, maxsize=4)
    with pytest.raises(RuntimeError, match="already initialised"):
        pool.__init__(priority=-1, maxsize=8)
    assert pool.priority == 0 and pool.maxsize == 4
    s = pool.acquire()
    assert s.priority == 0
    s.close()
    pool.close()
    with pytest.raises(RuntimeError, match="already initialised"):
        pool.__init__()
    assert pool.closed
    with pytest.raises(ValueError, match="closed"):
        pool.acquire()
    events = EventPool(enable_timing=True)
    with pytest.raises(RuntimeError, match="already initialised"):
        events.__init__(enable_timing=False)
    assert events.is_timing
    events.close()
    with pytest.raises(RuntimeError, match="already initialised"):
        events.__init__()
    assert events.closed


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_maxsize_is_refused(bad, exc):
    with pytest.raises(exc, match="maxsize"):
        StreamPool(maxsize=bad)
    with pytest.raises(exc, match="maxsize"):
        EventPool(maxsize=bad)
