"""Launch cost of a graph executable that marks its launches (explicit
kernel nodes, which keep their module: an event is recorded after each
launch) against one that does not (the same 10 kernels captured from a
stream: nothing held, nothing marked).  Run on a GPU machine from a
checkout with streams built in place:
``python -m benchmarks.probes.graph_marks``.  A probe, not a row of the
table.
"""
import argparse

import streams
from benchmarks.timing import median_ns
from streams.testing import builtin_module


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.graph_marks", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    k = builtin_module().get_kernel("streams_empty")
    s = streams.Stream()
    s.begin_capture("thread_local")
    for _ in range(10):
        s.launch(k, 1, 1)
    captured = s.end_capture()
    explicit = streams.Graph()
    prev = []
    for _ in range(10):
        prev = [explicit.add_kernel_node(k, 1, 1, dependencies=prev)]
    ex_c, ex_e = captured.instantiate(), explicit.instantiate()

    def timeit(fn, n=2000, reps=9):
        # The queue is drained after each batch, untimed.
        return median_ns(fn, n, reps, warmup=200, after=lambda k: s.synchronize())

    for _ in range(2):
        a = timeit(lambda: ex_c.launch(s))
        b = timeit(lambda: ex_e.launch(s))
        # launch + synchronize: no queue build-up, the host cost of one launch
        c = timeit(lambda: (ex_c.launch(s), s.synchronize()), n=500)
        d = timeit(lambda: (ex_e.launch(s), s.synchronize()), n=500)
        print(f"back to back: captured {a:.0f} ns, explicit (marked) {b:.0f} ns; "
              f"launch+sync: captured {c:.0f} ns, explicit (marked) {d:.0f} ns")
    for o in (ex_c, ex_e, captured, explicit, s):
        o.close()
    print("parked after close:", streams._cudart._parked_count())
    streams.synchronize_device()
    print("parked after synchronize_device:", streams._cudart._parked_count())


if __name__ == "__main__":
    main()
