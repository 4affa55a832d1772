"""Where the time of host callbacks enqueued by 8 threads on one stream goes
(the ``host_func_throughput_8threads`` row), in one process, each variant's
batches taken in turn with the others'.  A probe, not a row of the table.

    python -m benchmarks.probes.host_func_threads_breakdown [--calls N] [--rounds R] [--out FILE]

Run on a GPU machine from a checkout with streams built in place (about a
minute).  Rows, ns per callback (median over the rounds, ±half the spread):

* ``floor``: the C loops of the in-process floor (src/floor.h), one thread
  and 8 threads: what CUDA itself costs per host function.
* ``native``: 8 threads enqueueing a C function (``streams.testing``'s
  ``native_increment``) through ``launch_host_func``: the enqueue path of
  streams with no Python on CUDA's thread.
* ``python``: the same with a Python callback (the table's cell), and with
  one thread.
* ``producers not giving way``: the 8-thread row with the producers taking
  the GIL back at once after each launch (``streams._cudart._producers_yield``
  off), as before they let a callback waiting for the GIL have it first.
* ``enqueue only``: the 8 threads enqueue behind a spin kernel, so no
  callback runs while they do: the producers' side alone (the GIL taken back
  after each launch, the payload, the fence, CUDA's stream lock), per call.
* ``drain only``: then the spin ends and the queued callbacks run with no
  producer left: CUDA's thread entering Python once per callback, alone.
* gaps: the time between two consecutive Python callbacks, while the 8
  producers run and after they are done (callback timestamps): how much the
  producers slow down CUDA's thread (which needs the GIL for each callback).

If ``python`` is near ``enqueue only`` + ``drain only`` and the gaps while
producing are much wider than after, CUDA's thread waits for the GIL behind
the producers; if ``enqueue only`` alone is far above the ``native`` row's,
the producers' Python side is the cost.
"""
import argparse
import statistics
import sys
import time

from benchmarks.timing import run_producers

THREADS = 8


def _stats(xs):
    xs = sorted(xs)
    med = statistics.median(xs)
    lo, hi = xs[len(xs) // 10], xs[-1 - len(xs) // 10]
    return med, (hi - lo) / 2 / med * 100 if med else 0.0


def _producers(work, n, threads=THREADS):
    """Run ``work(k)`` in ``threads`` threads (n calls in all), started first
    and let go together; returns (start, end of the last producer) in ns."""
    t0, t1, error = run_producers(work, n, threads)
    if error is not None:
        raise error
    return t0, t1


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.probes.host_func_threads_breakdown",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=4000, help="callbacks per batch")
    p.add_argument("--rounds", type=int, default=7, help="batches per variant")
    p.add_argument("--out", help="also write the report here")
    args = p.parse_args(argv)

    import streams
    import streams.testing
    try:
        if streams.device_count() == 0:
            raise RuntimeError("device_count() == 0")
    except Exception as exc:     # noqa: BLE001 - any reason there is no GPU
        print(f"no usable CUDA device: {exc}", file=sys.stderr)
        return 1
    from streams._cudart import floor_batch

    n = args.calls
    s = streams.Stream()
    busy = s
    box = [0]
    stamps = []

    def cb(arg):
        box[0] += 1

    def cb_stamped(arg):
        stamps.append(time.perf_counter_ns())

    native = getattr(streams.testing, "native_increment", None)
    import ctypes
    cbox = (ctypes.c_uint64 * 1)()
    cbox_addr = ctypes.addressof(cbox)

    def enq_py(k):
        f = s.launch_host_func
        for _ in range(k):
            f(cb)

    def enq_stamped(k):
        f = s.launch_host_func
        for _ in range(k):
            f(cb_stamped)

    def enq_native(k):
        f = s.launch_host_func
        for _ in range(k):
            f(native, cbox_addr)

    results = {}
    gaps_during, gaps_after = [], []

    def add(name, ns):
        results.setdefault(name, []).append(ns / n)

    def v_floor1():
        add("floor, 1 thread (C)", floor_batch("host_func_throughput", n))

    def v_floor8():
        add("floor, 8 threads (C)", floor_batch("host_func_throughput_8threads", n))

    def v_native8():
        if native is None:
            return
        t0, _ = _producers(enq_native, n)
        s.synchronize()
        add("native fn, 8 threads", time.perf_counter_ns() - t0)

    def v_py1():
        before = box[0]
        t0 = time.perf_counter_ns()
        enq_py(n)
        s.synchronize()
        add("python cb, 1 thread", time.perf_counter_ns() - t0)
        assert box[0] - before == n

    def v_py8():
        before = box[0]
        t0, _ = _producers(enq_py, n)
        s.synchronize()
        add("python cb, 8 threads (the cell)", time.perf_counter_ns() - t0)
        assert box[0] - before == n

    from streams import _cudart
    yield_switch = getattr(_cudart, "_producers_yield", None)

    def v_py8_no_yield():
        # The producers take the GIL back at once after each launch, as
        # before they gave way to callbacks (src/cudart/hostfn.h).
        if yield_switch is None:
            return
        before = yield_switch(False)
        try:
            t0, _ = _producers(enq_py, n)
            s.synchronize()
            add("python cb, 8 threads, producers not giving way", time.perf_counter_ns() - t0)
        finally:
            yield_switch(before)

    def v_split8():
        # Behind a spin long enough for every enqueue: producers alone, then
        # the drain alone.
        del stamps[:]
        streams.testing.spin(busy, n * 60.0 + 2000.0)
        t0, t1 = _producers(enq_stamped, n)
        drained_early = busy.query()
        s.synchronize()
        t2 = time.perf_counter_ns()
        if drained_early or len(stamps) != n:
            add("(spin ended early: split not valid)", 0)
            return
        add("enqueue only, 8 threads", t1 - t0)
        add("drain only (after 8 threads)", t2 - stamps[0])

    def v_gaps():
        del stamps[:]
        _, t1 = _producers(enq_stamped, n)
        s.synchronize()
        d = [b - a for a, b in zip(stamps, stamps[1:])]
        gaps_during.extend(x for x, t in zip(d, stamps[1:]) if t <= t1)
        gaps_after.extend(x for x, t in zip(d, stamps[1:]) if t > t1)

    variants = [v_floor1, v_floor8, v_native8, v_py1, v_py8, v_py8_no_yield, v_split8, v_gaps]
    for v in variants:      # warm-up
        v()
    results.clear()
    del gaps_during[:], gaps_after[:]
    for r in range(args.rounds):
        k = r % len(variants)
        for v in variants[k:] + variants[:k]:
            v()

    lines = [f"streams {streams.__version__}, {n} callbacks per batch, {args.rounds} rounds; "
             "ns per callback, median ±half the p10-p90 spread"]
    for name, xs in results.items():
        med, spread = _stats(xs)
        lines.append(f"  {name:48s} {med:9.0f} ±{spread:.0f}%")
    for name, g in (("gap between callbacks while producing", gaps_during),
                    ("gap between callbacks after producers", gaps_after)):
        if g:
            g = sorted(g)
            lines.append(f"  {name:48s} median {statistics.median(g):7.0f}  p90 "
                         f"{g[len(g) * 9 // 10]:7.0f}  ({len(g)} gaps)")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
