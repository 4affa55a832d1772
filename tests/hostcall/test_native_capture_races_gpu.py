"""Native host functions with something to keep (``owner=``), enqueued while
another thread begins and ends captures on the same stream (the native
counterpart of tests/hostcall/test_capture_races_gpu.py).  Each scenario runs in a
child, with a hard timeout, so that a crash is reported, not suffered.

A native call with an owner is a one-shot record (the function, its data,
one reference to what it keeps) when its stream is not being captured, and
the plain function in a graph that owns the reference when it is.  Decided
outside the capture fence, a capture begun between the check and the launch
would take the record into a graph: the first replay frees it, the second
calls the freed record.  The fence keeps captures streams begins or ends
out of that window; the ticket the record travels by keeps a capture
streams cannot see (one begun through the driver API) from calling a freed
record: such a call runs at the first replay only.

Every enqueue gets its own 64-bit counter (streams.testing.native_increment
adds 1 to it), so the child can tell, per enqueue, how often it ran.
"""

import pytest

from _support import CAPTURE_RACE_HARNESS, run_python

pytestmark = pytest.mark.gpu


# After the harness (tests/_support.py): THREADS threads enqueue
# native_increment, each call on its own counter and with its own owner, on
# stream `s` while CAPTURE begins and ends captures on it.  Then: every
# enqueue ran once (outside a capture) or not yet (captured); the kept graphs
# are replayed 3 times, after which a captured call ran a count in
# REPLAYED_OK; the owner of a call in a replayed graph is alive until the
# graph and its executables are closed, and every owner is let go in the end.
_RACE = """
import ctypes, weakref
from streams.testing import native_increment

try:
    s.launch_host_func(native_increment, None, owner=object(), sync_mode=SYNC_MODE)
    s.synchronize()
except NotImplementedError:
    print("NO_SYNC_MODE")
    sys.exit(0)
streams._cudart._drain_deferred()
base = streams.debug_counters()

THREADS, PER_THREAD = 4, 60_000
N = THREADS * PER_THREAD
buf = streams.PinnedBuffer(8 * N)
ctypes.memset(buf.ptr, 0, 8 * N)
runs = (ctypes.c_uint64 * N).from_address(buf.ptr)

class Owner:
    __slots__ = ("__weakref__",)

owners = {}

def enqueuer(k):
    for i in range(k * PER_THREAD, (k + 1) * PER_THREAD):
        if stop.is_set():
            return
        owner = Owner()
        ref = weakref.ref(owner)
        try:
            s.launch_host_func(native_increment, buf.ptr + 8 * i, owner=owner,
                               sync_mode=SYNC_MODE)
        except streams.CudaError as exc:     # e.g. a capture invalidated meanwhile
            problems.append(("enqueue", repr(exc)))
            continue
        del owner
        owners[i] = ref
        issued.append(i)

captures = race(enqueuer, THREADS, join_s=60)

before = runs[:]
issued_set = set(issued)
assert len(issued_set) == len(issued)
assert all(before[i] in (0, 1) for i in issued), "a one-shot ran twice"
assert not any(before[i] for i in range(N) if i not in issued_set), \\
    "a function ran that was never enqueued"
execs = replay_kept(3)
after = runs[:]
once = [i for i in issued if before[i] == 1]
captured = [i for i in issued if before[i] == 0]
assert all(after[i] == 1 for i in once), "an uncaptured call ran again"
counts = [after[i] for i in captured]
assert all(n in REPLAYED_OK for n in counts), sorted(set(counts))
# What a graph calls on every replay is kept by the graph.
streams._cudart._drain_deferred()
gc.collect()
assert all(owners[i]() is not None for i in captured if after[i] == 3), \\
    "an owner let go while its graph can still call the function"
close_kept(execs)
del execs
replay.synchronize()
deadline = time.monotonic() + 10
while True:
    streams._cudart._drain_deferred()
    gc.collect()
    c = streams.debug_counters()
    alive = sum(ref() is not None for ref in owners.values())
    if (alive == 0 and c["live_native_calls"] == base["live_native_calls"]) \\
            or time.monotonic() > deadline:
        break
    time.sleep(0.01)
assert alive == 0, f"{alive} owners never let go"
assert c["live_native_calls"] == base["live_native_calls"], (c, base)
assert c["pending_one_shots"] == base["pending_one_shots"], (c, base)
if c["debug_build"]:
    assert c["live_payload_refs"] == base["live_payload_refs"], (c, base)
print("RESULT", len(issued), len(once), len(captured), sum(n == 3 for n in counts),
      sum(n == 1 for n in counts), captures,
      c["stale_one_shot_calls"] - base["stale_one_shot_calls"],
      c["native_calls_enqueued"] - base["native_calls_enqueued"], len(problems))
"""


def _result(proc):
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-4000:])
    if "NO_SYNC_MODE" in proc.stdout:
        pytest.skip("sync_mode='spin_wait' needs a CUDA 13.1 driver")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, proc.stdout
    (issued, once, captured, thrice, single, captures, stale, enqueued,
     problems) = map(int, line[-1].split()[1:])
    return dict(issued=issued, once=once, captured=captured, thrice=thrice, single=single,
                captures=captures, stale=stale, enqueued=enqueued, problems=problems)


@pytest.mark.parametrize("sync_mode", ["blocking", "spin_wait"])
@pytest.mark.parametrize("mode, style", [("global", "context"), ("relaxed", "context"),
                                         ("thread_local", "begin_end")])
def test_native_calls_with_owners_racing_captures_on_other_threads(mode, style, sync_mode):
    """Captures through streams: a native call with an owner runs once if
    enqueued outside a capture, on every replay (3 times) if captured, its
    owner kept by the graph meanwhile and let go afterwards; no record is
    ever taken into a graph (no stale ticket calls).  With the one-shot
    decided outside the fence, or the record passed by raw pointer, a record
    captured between the check and the launch would run at the first replay
    and the second would call it freed: a crash, or another record's
    function and data (a count of 1 or 2 after the replays, or a one-shot
    run twice)."""
    prelude = f"MODE, STYLE, SYNC_MODE = {mode!r}, {style!r}, {sync_mode!r}\n"
    code = prelude + CAPTURE_RACE_HARNESS + _RACE.replace("REPLAYED_OK", "(0, 3)")
    r = _result(run_python(code, timeout=120))
    assert r["captures"] > 0 and r["issued"] > 0, r
    assert r["once"] > 0, r
    # Only the one-shots count as native calls enqueued (a captured call's
    # reference goes to the graph); a launch CUDA refused counts too.
    assert r["once"] <= r["enqueued"] <= r["once"] + r["problems"], r
    assert r["stale"] == 0, r     # the fence kept every streams capture out of the window
    assert r["single"] == 0, r
