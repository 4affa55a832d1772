"""Rough per-call timings of the hot paths, each the median of 5 batches (a
probe; the real numbers come from `python -m benchmarks.run`, which also
runs the C floor).

    python -m benchmarks.probes.quick_timing                  time the rows here
    python -m benchmarks.probes.quick_timing --summarize LOG  medians of the rounds
                                                  in LOG (tools/gpu_bench.sh ft:
                                                  rounds headed "== round N:
                                                  VERSION GIL|no GIL"), per
                                                  interpreter, and the
                                                  free-threaded one's excess
                                                  per call
"""
import argparse
import re
import statistics

from benchmarks.timing import median_ns


def per_call(fn, n=200_000):
    return median_ns(fn, n, 5, warmup=1000)


def summarize(path):
    rows = {}       # interpreter -> row -> [ns per round]
    who = None
    for line in open(path):
        head = re.match(r"== round \d+: (.*)", line)
        if head:
            who = head.group(1).strip()
            continue
        cell = re.match(r"(\S.*?)\s+(\d+) ns$", line.rstrip())
        if cell and who:
            rows.setdefault(who, {}).setdefault(cell.group(1), []).append(int(cell.group(2)))
    names = sorted(rows, key=lambda w: "no GIL" in w)
    print("median ns per call over the rounds: " + " | ".join(names))
    for row in rows[names[0]]:
        meds = [statistics.median(rows[w].get(row, [0])) for w in names]
        extra = f"  no GIL {meds[1] - meds[0]:+.0f} ns" if len(meds) == 2 else ""
        print(f"{row:24s} " + " ".join(f"{m:8.0f}" for m in meds) + extra)


def time_rows():
    from streams import Event, Stream
    from streams.testing import launch_empty

    import streams

    s = Stream()
    ev = Event()
    s.synchronize()
    # The status calls of some processes are several times slower until the
    # first device-wide synchronize (docs/benchmarks.rst): every round is
    # timed after one.
    streams.synchronize_device()
    rows = {
        # The parts of a call that are not CUDA's: a Python call into the
        # package (a property), and a `with nogil` block with nothing in it
        # (what an enqueue that lets go of the interpreter pays for that).
        "python call (closed)": per_call(lambda: s.closed),
        "nogil round trip": streams._cudart._nogil_round_trip(200_000),
        "stream.query": per_call(s.query),
        "stream.synchronize": per_call(s.synchronize),
        "event.record": per_call(lambda: s.record(ev)),
        "event.query": per_call(ev.query),
        "stream.wait_event": per_call(lambda: s.wait_event(ev)),
        "event create+close": per_call(lambda: Event().close(), 50_000),
        "stream create+close": per_call(lambda: Stream().close(), 20_000),
        "launch_empty": per_call(lambda: launch_empty(s), 50_000),
    }
    s.synchronize()
    for k, v in rows.items():
        print(f"{k:24s} {v:8.0f} ns")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes.quick_timing",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--summarize", metavar="LOG", help="summarize the rounds in LOG instead")
    args = ap.parse_args(argv)
    if args.summarize:
        summarize(args.summarize)
    else:
        time_rows()


if __name__ == "__main__":
    main()
