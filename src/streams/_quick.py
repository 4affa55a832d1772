"""The short launch-overhead measurement of ``python -m streams``.

It needs nothing outside the wheel (no compiler, no source checkout): a few
cheap operations are timed from Python, in batches of calls with
``time.perf_counter_ns``, and each row gives the median nanoseconds per call
over the batches with half the p10-p90 spread.  The full comparison, with a
C program and the other CUDA libraries, is ``python -m benchmarks.run`` in a
source checkout.

A second column, the *floor*, is the same CUDA runtime calls made by C code
in this process, through the same static cudart
(``streams._cudart.floor_batch``).  :func:`run` takes it as ``floor(op, n)``:
make ``n`` of ``op``'s calls (``op`` one of the names in :data:`OPS`) and
return the nanoseconds they took, with nothing left on the GPU.  Where this
build has none, the table has the streams column only and says so.  A row
where streams is below :data:`SUSPECT_BELOW` of the floor, which makes the
same calls without any wrapper, measured something else: it says so.
"""
import gc
import statistics
import sys
from time import perf_counter_ns

#: (operation, label, calls per batch): one of each kind of call whose
#: overhead matters, cheap enough that the whole run takes well under a second.
OPS = (
    ("stream_query", "stream query (idle)", 5000),
    ("event_record", "event record (idle stream)", 2000),
    ("kernel_launch", "empty-kernel launch", 500),
    ("host_func_round_trip", "host-func round trip", 200),
)
BATCHES = 11
WARMUP = 1
#: As benchmarks/ops.py, which the installed package cannot import.
SUSPECT_BELOW = 0.95


def extension_floor():
    """The extension's C loop over the same cudart calls, or None where this
    build has none."""
    # The one extension import of this module.
    try:
        from streams._cudart import floor_batch
    except ImportError:
        return None
    return floor_batch


def _timed(n, fn, *args):
    """Nanoseconds that ``n`` calls of ``fn(*args)`` took.

    One loop for every operation, so that the loop costs each row the same
    and a row differs from another only by the call in it.
    """
    calls = range(n)
    t0 = perf_counter_ns()
    for _ in calls:
        fn(*args)
    return perf_counter_ns() - t0


def streams_batches(stream, event):
    """``{op: batch}``, where ``batch(n)`` times ``n`` of ``op``'s calls made
    from Python on ``stream`` (idle before and after) and returns the ns."""
    from streams.testing import launch_empty

    ran = [0]

    def count(_):
        ran[0] += 1

    def round_trip():
        stream.launch_host_func(count, None)
        stream.synchronize()

    def enqueues(fn, *args):
        def batch(n):
            ns = _timed(n, fn, *args)
            # Untimed: the next batch must not wait for a full launch queue.
            stream.synchronize()
            return ns
        return batch

    def round_trips(n):
        before = ran[0]
        ns = _timed(n, round_trip)
        # A callback that had not run by the synchronize would make the
        # round trip look cheaper than it is.
        if ran[0] - before != n:
            raise RuntimeError(f"{n} host functions enqueued, but {ran[0] - before} ran "
                               "by the synchronize")
        return ns

    return {
        "stream_query": lambda n: _timed(n, stream.query),
        "event_record": enqueues(stream.record, event),
        "kernel_launch": enqueues(launch_empty, stream),
        "host_func_round_trip": round_trips,
    }


def summary(per_call):
    """Median ns per call and half the p10-p90 spread, in percent of it."""
    xs = sorted(per_call)
    median = statistics.median(xs)
    if len(xs) > 1:
        deciles = statistics.quantiles(xs, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[-1]
    else:
        p10 = p90 = median
    return {"median": median, "spread": (p90 - p10) / 2 / median * 100 if median else 0.0}


def measure(batches, floor=None, rounds=BATCHES, warmup=WARMUP, ops=OPS):
    """One row per operation: ``{"op", "label", "calls", "streams", "floor"}``,
    where ``streams`` is a :func:`summary` and ``floor`` is one too, or the
    reason the floor has no number (None without a floor).

    ``batches`` is what :func:`streams_batches` returns.  The streams batch
    and the floor's alternate, each going first every other time, so that
    clock drift falls on both columns alike.
    """
    rows = []
    # A collection in the middle of a batch would be charged to the call.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for op, label, n in ops:
            per_call = {"streams": [], "floor": []}
            why = None
            for b in range(warmup + rounds):
                for column in ("streams", "floor") if b % 2 == 0 else ("floor", "streams"):
                    if column == "streams":
                        ns = batches[op](n)
                    elif floor is None or why is not None:
                        continue
                    else:
                        try:
                            ns = floor(op, n)
                        except Exception as exc:
                            why = f"{type(exc).__name__}: {exc}"
                            continue
                    if b >= warmup:
                        per_call[column].append(ns / n)
            if floor is None:
                floor_cell = None
            else:
                floor_cell = why if why is not None else summary(per_call["floor"])
            rows.append({"op": op, "label": label, "calls": n,
                         "streams": summary(per_call["streams"]), "floor": floor_cell})
    finally:
        if was_enabled:
            gc.enable()
    return rows


def _cell(stats):
    return f"{stats['median']:.0f} ±{stats['spread']:.0f}%"


def table(rows, rounds=BATCHES):
    """The rows as text: with floor and ratio columns when any row has a floor."""
    with_floor = any(row["floor"] is not None for row in rows)
    header = ["operation", "streams"] + (["C floor", "streams / floor"] if with_floor else [])
    lines = []
    notes = []
    suspect = False
    for row in rows:
        line = [row["label"], _cell(row["streams"])]
        floor = row["floor"]
        if isinstance(floor, dict):
            ratio = row["streams"]["median"] / floor["median"] if floor["median"] else 0.0
            line += [_cell(floor), f"{ratio:.2f}x"]
            if ratio < SUSPECT_BELOW:
                line[-1] += " SUSPECT"
                suspect = True
        elif with_floor:
            notes.append(f"C floor, {row['label']}: {floor or 'not measured'}")
            line += ["n/a", "-"]
        lines.append(line)
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]

    def fmt(r):
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()

    out = [f"median ns per call ±half the p10-p90 spread, over {rounds} batches", "",
           fmt(header), fmt(["-" * w for w in widths])]
    out += [fmt(r) for r in lines]
    out += notes
    if with_floor:
        out.append("C floor: the same CUDA runtime calls from C, in this process, in batches "
                   "next to the streams ones")
    if suspect:
        out.append(f"SUSPECT: streams below {SUSPECT_BELOW:g}x of the floor, which makes the "
                   "same calls without a wrapper: a measurement problem, not a result")
    return "\n".join(out) + "\n"


def status_state(stream, n=2000, rounds=7):
    """Median ns of ``stream.query()`` (idle) as the process is, then after
    a device-wide synchronize: ``(before, after)``.

    Some drivers keep a process's status calls on a slower path until its
    first device-wide synchronize or ``cudaFree`` (measured ~7x on one
    host); the table is measured after one, so this says which state it
    describes and what the first state cost.
    """
    import streams

    def median_query():
        stream.synchronize()
        return statistics.median(_timed(n, stream.query) / n for _ in range(rounds))

    before = median_query()
    streams.synchronize_device()
    return before, median_query()


def state_line(state):
    before, after = state
    return (f"stream query (idle): {before:.0f} ns as this process started, "
            f"{after:.0f} ns after a device-wide synchronize; the table below is measured "
            "after it\n\n")


def run(out=None, floor=None, rounds=BATCHES):
    """Measure on the current device and print the table; returns the exit
    status (1, with the reason on stderr, when CUDA refuses)."""
    from streams import Event, Stream

    out = out or sys.stdout
    try:
        stream, event = Stream(), Event()
    except Exception as exc:
        print(f"cannot run the measurement: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        state = status_state(stream)
        rows = measure(streams_batches(stream, event), floor=floor, rounds=rounds)
    except Exception as exc:
        print(f"the measurement failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        # close() lets pending work complete; a failed run's own error is
        # the one to report.
        for close in (stream.close, event.close):
            try:
                close()
            except Exception:
                pass
    out.write(state_line(state))
    out.write(table(rows, rounds))
    if floor is None:
        out.write("\nC floor: not available in this build (the extension has no floor_batch), "
                  "so there is no ratio to C here.\n")
    out.write("The full comparison, with a C program and the other CUDA libraries: "
              "python -m benchmarks.run in a source checkout.\n")
    return 0
