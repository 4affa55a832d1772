"""Where the native host-function round trip goes (the benchmark row
"native host-func round trip": ``launch_host_func`` of a C function's
address, then ``Stream.synchronize()``), next to the same calls made with
cuda.bindings, and the enqueue and the wait each on their own.  Run on a
GPU machine from a checkout:
``python -m benchmarks.probes.native_host_breakdown`` (needs cuda-bindings;
ctypes for the function pointer).  A probe, not part of the benchmark
table; benchmarks/probes/native_wait.c is its C half.

The host function is streams.testing.native_increment (an atomic add, no
Python, no GIL) on a ctypes counter; every row checks that each function
it enqueued had run by the end of the row.
"""
import argparse
import ctypes
import statistics

import streams
import streams.testing
from benchmarks.timing import batches_ns, calls
from streams import _cudart


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.native_host_breakdown",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    from cuda.bindings import runtime as cudart

    s = streams.Stream()
    h = s.handle
    box = (ctypes.c_uint64 * 1)()
    data = ctypes.addressof(box)
    fn = streams.testing.native_increment
    cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(fn)   # a ctypes pointer to the C function
    hfn = cudart.cudaHostFn_t(fn)
    owner = object()
    expected = [0]

    def check(name, ran_per_call, n):
        s.synchronize()
        expected[0] += ran_per_call * n
        if box[0] != expected[0]:
            raise SystemExit(f"{name}: {expected[0]} host functions enqueued, {box[0]} ran")

    def row(name, ts):
        print(f"{name:72s} {statistics.median(ts):8.0f} ns  (min {ts[0]:.0f}, max {ts[-1]:.0f})",
              flush=True)

    def bench(name, f, per_call=1, n=3000, reps=7):
        # Each batch's functions have run by its end (checked untimed).
        row(name, batches_ns(calls(f), n, reps, warmup=300,
                             after=lambda k: check(name, per_call, k)))

    def floor_row(n=3000, reps=7):
        row("C floor in this process (src/floor.h: launch + cudaStreamSynchronize)",
            batches_ns(lambda k: _cudart.floor_batch("host_func_native_round_trip", k), n, reps,
                       warmup=300))

    def enqueue_only(name, f, n=2000, reps=7):
        # Behind a spin kernel, so that nothing runs while the loop is timed:
        # the enqueue's own cost.  The warm-up is one such batch.
        row(name, batches_ns(calls(f), n, reps, warmup=n,
                             before=lambda: streams.testing.spin(s, n * 6.0 + 2000.0),
                             after=lambda k: check(name, 1, k)))

    def cb_launch():
        err, = cudart.cudaLaunchHostFunc(h, hfn, data)
        if err:
            raise RuntimeError(err)

    def cb_sync():
        err, = cudart.cudaStreamSynchronize(h)
        if err:
            raise RuntimeError(err)

    print("# round trips: enqueue, then wait until it ran", flush=True)
    for rep in range(2):
        floor_row()
        bench("cuda.bindings cudaLaunchHostFunc + cudaStreamSynchronize",
              lambda: (cb_launch(), cb_sync()))
        bench("cuda.bindings cudaLaunchHostFunc + Stream.synchronize()",
              lambda: (cb_launch(), s.synchronize()))
        bench("launch_host_func(int address, int data) + Stream.synchronize()  [the row]",
              lambda: (s.launch_host_func(fn, data), s.synchronize()))
        bench("launch_host_func(int address, int data) + cudaStreamSynchronize",
              lambda: (s.launch_host_func(fn, data), cb_sync()))
        bench("launch_host_func(int address, int data, owner=obj) + Stream.synchronize()",
              lambda: (s.launch_host_func(fn, data, owner=owner), s.synchronize()))
        bench("launch_host_func(ctypes CFUNCTYPE, int data) + Stream.synchronize()",
              lambda: (s.launch_host_func(cfn, data), s.synchronize()))
        bench("launch_host_func(ctypes CFUNCTYPE, int data) + cudaStreamSynchronize",
              lambda: (s.launch_host_func(cfn, data), cb_sync()))
        bench("launch_host_func(int address, ctypes array) + Stream.synchronize()",
              lambda: (s.launch_host_func(fn, box), s.synchronize()))

    print("# enqueue alone (behind a spin kernel)", flush=True)
    enqueue_only("cuda.bindings cudaLaunchHostFunc", cb_launch)
    enqueue_only("launch_host_func(int address, int data)", lambda: s.launch_host_func(fn, data))
    enqueue_only("launch_host_func(int address, int data, owner=obj)",
                 lambda: s.launch_host_func(fn, data, owner=owner))
    enqueue_only("launch_host_func(ctypes CFUNCTYPE, int data)",
                 lambda: s.launch_host_func(cfn, data))
    enqueue_only("launch_host_func(int address, ctypes array)",
                 lambda: s.launch_host_func(fn, box))

    print("# the rest alone", flush=True)
    bench("idle Stream.synchronize()", s.synchronize, per_call=0, n=20000)
    bench("idle cuda.bindings cudaStreamSynchronize", cb_sync, per_call=0, n=20000)
    bench("idle Stream.query()", s.query, per_call=0, n=20000)
    bench("Python call of a no-op lambda (loop overhead)", lambda: None, per_call=0, n=20000)
    bench("native_host_func classification of (int, int)",
          lambda: streams._hostcall._native_host_func(fn, data), per_call=0, n=20000)
    bench("native_host_func classification of (ctypes fn, int)",
          lambda: streams._hostcall._native_host_func(cfn, data), per_call=0, n=20000)
    print("functions run:", box[0])


if __name__ == "__main__":
    main()
