"""Host callbacks and asyncio waits enqueued while other threads begin and
end captures, and an invalidated capture into a conditional node's body.
Every scenario that crashed the process runs in a child, with a hard
timeout, so that the suite reports it.

Host callbacks racing captures: whether a stream is being captured decides who owns a callback's
payload (a one-shot work item, or the capture's graph).  A capture begun
between the check and cudaLaunchHostFunc put a one-shot payload into a
graph: its second replay used it after free.  A capture ended there left the
enqueue attaching the payload to a graph that may be gone.  The capture
fence (src/cudart/fence.h) keeps captures streams begins or ends out of
that window; one-shot tickets keep a capture streams cannot see (here one
begun through the driver API) from calling a freed payload.
"""
import textwrap

import pytest

from _support import CAPTURE_RACE_HARNESS, run_python

pytestmark = pytest.mark.gpu


# After the harness (tests/_support.py): 4 threads enqueue callbacks, each
# with its own id, on stream ``s`` while CAPTURE begins and ends captures on
# it; one thread awaits ``s`` (and an event on it) in an asyncio loop.
# Afterwards every id must have run exactly once (enqueued outside a
# capture) or never yet (captured); each kept graph is replayed 3 times,
# after which a captured id has run 3 times (REPLAYED_OK) or, for a graph
# closed at once, never.
_RACE = """
import asyncio
base = streams.debug_counters()

counts = {}
def cb(ident):
    counts[ident] = counts.get(ident, 0) + 1

def enqueuer(k):
    i = 0
    while not stop.is_set():
        ident = (k, i)
        i += 1
        try:
            s.launch_host_func(cb, ident)
        except streams.CudaError as exc:     # e.g. a capture invalidated meanwhile
            problems.append(("enqueue", repr(exc)))
            continue
        issued.append(ident)

awaited = [0]
def awaiter():
    ev = streams.Event()
    async def main():
        while not stop.is_set():
            try:
                await asyncio.wait_for(s.wait_async(), 10)
                awaited[0] += 1
            except streams.CudaError as exc:
                # (before RuntimeError: CudaError is one.)  The wait's query
                # runs in relaxed capture mode, so another thread's global
                # capture (style other_stream_global) cannot refuse it.
                problems.append(("await", repr(exc)))
            except RuntimeError as exc:
                # s itself being captured: the documented refusal.
                if "being captured" not in str(exc):
                    problems.append(("await", repr(exc)))
            await asyncio.sleep(0)
    try:
        asyncio.run(main())
    except BaseException as exc:       # a wait that never finished: TimeoutError
        # With the backlog at that moment: callbacks issued, ids run so far
        # (on a free-threaded build, is the wait behind a queue the
        # enqueuers outran?).
        problems.append(("AWAIT FAILED", repr(exc),
                         f"issued {len(issued)}, ran {len(counts)}, "
                         f"awaited {awaited[0]}"))
        stop.set()
    finally:
        ev.close()

captures = race(enqueuer, 4, extra=[awaiter], join_s=30)
assert not [p for p in problems if p[0] in ("AWAIT FAILED", "await")], problems
print("PROBLEMS", sorted({(p[0], p[1][:80]) for p in problems})[:10])

before = dict(counts)
assert all(before.get(i, 0) in (0, 1) for i in issued), "a one-shot ran twice"
assert set(counts) <= set(issued), "a callback ran that was never enqueued"
execs = replay_kept(3)
captured = [i for i in issued if before.get(i, 0) == 0]
once = [i for i in issued if before.get(i, 0) == 1]
assert all(counts.get(i, 0) == 1 for i in once), "an uncaptured callback ran again"
after = [counts.get(i, 0) for i in captured]
assert all(n in REPLAYED_OK for n in after), sorted(set(after))
close_kept(execs)
del execs
gc.collect()
deadline = time.monotonic() + 5
while True:
    streams._cudart._drain_deferred()
    c = streams.debug_counters()
    if c["live_host_calls"] == base["live_host_calls"] or time.monotonic() > deadline:
        break
    time.sleep(0.01)
assert c["live_host_calls"] == base["live_host_calls"], (c, base)
assert c["live_callbacks"] == base["live_callbacks"], (c, base)
assert c.get("pending_one_shots", 0) == 0, c
if c["debug_build"]:
    assert c["live_payload_refs"] == base["live_payload_refs"], (c, base)
print("RESULT", len(issued), len(once), len(captured), sum(n == 3 for n in after),
      sum(n == 1 for n in after), captures, awaited[0],
      c.get("stale_one_shot_calls", 0) - base.get("stale_one_shot_calls", 0), len(problems))
"""


def _run_race(prelude, replayed_ok):
    code = prelude + CAPTURE_RACE_HARNESS + _RACE.replace("REPLAYED_OK", repr(replayed_ok))
    return run_python(code, timeout=120)


def _result(proc):
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stdout
    (issued, once, captured, thrice, single, captures, awaited, stale,
     problems) = map(int, line[-1].split()[1:])
    return dict(issued=issued, once=once, captured=captured, thrice=thrice, single=single,
                captures=captures, awaited=awaited, stale=stale, problems=problems)


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
@pytest.mark.parametrize("style", ["context", "begin_end", "other_stream_global"])
def test_host_funcs_and_awaits_racing_captures_on_other_threads(mode, style):
    """Captures through streams: each callback runs once if enqueued outside
    a capture, and on each replay (3 times) if captured; none is ever taken
    into a graph as a one-shot (no stale ticket calls).  Without the capture
    fence, a one-shot captured between the check and the launch runs at the
    first replay and the second uses it after free: a crash, or another
    callback's payload run in its place (a count of 2 or more for an id
    that already ran, or of 1 after the replays)."""
    prelude = f"MODE, STYLE = {mode!r}, {style!r}\n"
    r = _result(_run_race(prelude, (0, 3)))
    assert r["captures"] > 0 and r["issued"] > 0, r
    assert r["once"] > 0, r
    assert r["stale"] == 0, r     # the fence kept every streams capture out of the window
    assert r["single"] == 0, r



@pytest.mark.parametrize("mode", ["global", "relaxed"])
def test_invalidated_capture_into_a_conditional_body_then_closing_the_parent(mode):
    """The driver frees a conditional body whose capture was invalidated,
    although the node still holds it; destroying the graph holding the node
    then crashes in the driver (NVIDIA/cuda-python#2918).  So the failed
    end_capture closes that graph for good without destroying it (counted
    in graphs_abandoned), and closing it and collecting everything is safe.
    In a child: a destroy would kill it at g.close() (or at exit)."""
    code = textwrap.dedent(f"""
        import gc
        import streams
        from streams.testing import launch_empty
        s = streams.Stream()
        launch_empty(s)
        s.synchronize()
        base = streams.debug_counters()
        g = streams.Graph()
        cond = g.create_condition()
        node, body = g.add_if(cond)
        s.begin_capture_to_graph(body, mode={mode!r})
        launch_empty(s)
        try:
            s.query()          # illegal while capturing: invalidates the capture
        except streams.CudaError:
            pass
        assert s.capture_status == "invalidated", s.capture_status
        try:
            s.end_capture()
        except streams.CudaError as exc:
            print("end_capture:", exc)
        else:
            raise AssertionError("an invalidated capture ended without error")
        assert body.closed and g.closed
        try:
            g.instantiate()
        except ValueError as exc:
            assert "closed" in str(exc), exc
        else:
            raise AssertionError("a corrupt graph was instantiated")
        g.close()
        del g, node, body, cond
        gc.collect()
        c = streams.debug_counters()
        assert c["graphs_abandoned"] == base["graphs_abandoned"] + 1, c
        assert c["live_graphs"] == base["live_graphs"], c
        # The stream is usable again.
        launch_empty(s)
        s.synchronize()
        s.close()
        print("ok")
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:],
                                    result.stderr[-3000:])
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_capture_into_a_body_of_a_graph_being_captured_is_refused():
    """streams cannot keep such a graph from being destroyed (its capture
    from ending) after the driver fault, so it refuses the capture up front,
    before CUDA is touched."""
    code = textwrap.dedent("""
        import streams
        from streams.testing import launch_empty
        s, other = streams.Stream(), streams.Stream()
        launch_empty(s)
        s.synchronize()
        s.begin_capture("relaxed")
        try:
            building = s.capture_info().graph
            cond = building.create_condition()
            node, body = building.add_if(cond)
            try:
                other.begin_capture_to_graph(body)
            except ValueError as exc:
                assert "NVIDIA/cuda-python#2918" in str(exc), exc
            else:
                raise AssertionError("capture into a capture's body was allowed")
            assert other.capture_status == "none"
            body.close()
        finally:
            s.end_capture().close()
        print("ok")
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:],
                                    result.stderr[-3000:])
    assert result.stdout.strip().endswith("ok"), result.stdout
