"""What streams.checker costs per operation: each row timed with the
checker off, on without stack frames (``stack_depth=0``) and on with the
default 8, in one process, each the median of 5 batches; the excess over
off is the checker's price.  Off, it must not show (one load and a branch).

    python -m benchmarks.probes.checker_cost
"""
import argparse

from benchmarks.timing import median_ns


def per_call(fn, n):
    return median_ns(fn, n, 5, warmup=200)


def time_rows(n):
    import numpy as np

    import streams
    from streams import DeviceBuffer, Event, Stream, checker
    from streams.testing import builtin_module

    s = Stream(non_blocking=True)
    ev = Event()
    a, b = DeviceBuffer(4096, stream=s), DeviceBuffer(4096, stream=s)
    host = np.zeros(1024, dtype=np.uint32)
    fill = builtin_module().get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    streams.synchronize_device()
    rows = {
        "event.record": lambda: s.record(ev),
        "stream.wait_event": lambda: s.wait_event(ev),
        "memcpy_async d2d": lambda: streams.memcpy_async(b, a, stream=s),
        "memset_async": lambda: streams.memset_async(a, 0, stream=s),
        "launch (1 buffer)": lambda: s.launch(fill, 1, 32, a, 1, 32),
        "stream.query": s.query,
    }
    settings = [("off", None), ("on, 0 frames", 0), ("on, 8 frames", 8)]
    print(f"{'operation':22s} " + " ".join(f"{name:>14s}" for name, _ in settings)
          + "   (ns per call)")
    for row, fn in rows.items():
        cells = []
        for _, depth in settings:
            if depth is None:
                checker.disable()
            else:
                checker.enable("collect", stack_depth=depth)
            cells.append(per_call(fn, n))
            s.synchronize()     # the host saw it all: the checker forgets it
        checker.disable()
        print(f"{row:22s} " + " ".join(f"{c:14.0f}" for c in cells))
    s.synchronize()
    a.close(), b.close(), ev.close(), s.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes.checker_cost",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000, help="calls per batch (default 20000)")
    args = ap.parse_args(argv)
    time_rows(args.n)


if __name__ == "__main__":
    main()
