"""Where the host-function round trip goes: streams' interruptible wait
against CUDA's own synchronize (through cuda.bindings) and an event wait,
on the same Python callback; and the idle costs beside them.  Run on a GPU
machine from a checkout: ``python -m benchmarks.probes.host_func_breakdown``
(needs cuda-bindings).  A probe, not part of the benchmark table.
"""
import argparse
import statistics

import streams
from benchmarks.timing import batches_ns, calls


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.host_func_breakdown",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    from cuda.bindings import runtime as cudart

    s = streams.Stream()
    h = s.handle
    cnt = [0]
    def f(arg):
        cnt[0] += 1

    def bench(fn, n=3000, reps=7):
        ts = batches_ns(calls(fn), n, reps, warmup=300)
        return f"{statistics.median(ts):8.0f} ns  (min {ts[0]:.0f}, max {ts[-1]:.0f})"

    def ours():
        s.launch_host_func(f)
        s.synchronize()

    def ours_plain_sync():
        s.launch_host_func(f)
        cudart.cudaStreamSynchronize(h)

    ev = streams.Event()
    def ours_event():
        s.launch_host_func(f)
        s.record(ev)
        ev.synchronize()

    def enqueue_only_then_sync():
        s.launch_host_func(f)

    def query_spin():
        s.launch_host_func(f)
        while not s.query():
            pass

    rows = [("launch_host_func + Stream.synchronize()", ours),
            ("launch_host_func + cudaStreamSynchronize (cuda.bindings, GIL released)", ours_plain_sync),
            ("launch_host_func + record + Event.synchronize()", ours_event),
            ("launch_host_func + Python loop of query() (GIL held between)", query_spin)]
    for name, fn in rows:
        print(f"{name:75s} {bench(fn)}", flush=True)
    print("idle Stream.synchronize()", bench(s.synchronize, n=20000))
    print("idle cudaStreamSynchronize", bench(lambda: cudart.cudaStreamSynchronize(h), n=20000))
    print("idle query()", bench(s.query, n=20000))
    print("closed property", bench(lambda: s.closed, n=20000))
    print("callbacks run:", cnt[0])


if __name__ == "__main__":
    main()
