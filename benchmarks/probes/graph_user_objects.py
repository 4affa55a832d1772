"""What a CUDA user object on an executable costs its launches: the same
10-kernel graph (captured through streams) instantiated plainly and with one
user object, both launched through cuda.bindings so that only the
executable differs, next to streams' own instantiate and launch and the C
floor.  Back to back, 5000 launches a repetition, median of 9: the GPU runs
each replay's 10 kernels meanwhile, so this is the cost of sustained
replays, not of one call.  Run on a GPU machine from a checkout:
``python -m benchmarks.probes.graph_user_objects`` (needs cuda-bindings).
A probe, not a row of the table; it is why ``Graph.instantiate`` gives an
executable a user object only when its graph has host callables
(docs/graphs.rst).
"""
import argparse
import ctypes
import statistics

import streams
from benchmarks.timing import batches_ns, calls
from streams.testing import builtin_module


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.graph_user_objects",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    from cuda.bindings import runtime as rt

    kernel = builtin_module().get_kernel("streams_empty")
    s = streams.Stream()
    h = s.handle

    def capture():
        s.begin_capture("thread_local")
        for _ in range(10):
            s.launch(kernel, 1, 1)
        return s.end_capture()

    def timeit(fn, n=5000, reps=9):
        # The queue is drained after each batch, untimed.
        xs = batches_ns(calls(fn), n, reps, warmup=500, after=lambda k: s.synchronize())
        return f"{statistics.median(xs):7.0f} ns (min {xs[0]:.0f})"

    def ok(res):
        assert res[0] == rt.cudaError_t.cudaSuccess, res
        return res[1] if len(res) > 1 else None

    # A destructor that does nothing with the NULL it is given: libc's free.
    free = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value
    g_plain, g_uo, g_ours = capture(), capture(), capture()
    ex_plain = ok(rt.cudaGraphInstantiate(g_plain.handle, 0))
    uo = ok(rt.cudaUserObjectCreate(0, free, 1,
                                    rt.cudaUserObjectFlags.cudaUserObjectNoDestructorSync))
    ok(rt.cudaGraphRetainUserObject(g_uo.handle, uo, 1,
                                    rt.cudaUserObjectRetainFlags.cudaGraphUserObjectMove))
    ex_uo = ok(rt.cudaGraphInstantiate(g_uo.handle, 0))
    exe = g_ours.instantiate()
    for _ in range(2):
        print("cudaGraphLaunch, executable without user object:",
              timeit(lambda: rt.cudaGraphLaunch(ex_plain, h)))
        print("cudaGraphLaunch, executable with one user object:",
              timeit(lambda: rt.cudaGraphLaunch(ex_uo, h)))
        print("cudaGraphLaunch of streams' instantiate:         ",
              timeit(lambda: rt.cudaGraphLaunch(int(exe.handle), h)))
        print("GraphExec.launch (streams):                      ", timeit(lambda: exe.launch(s)))
        print("floor_batch graph_launch (C):                    ", round(statistics.median(
            batches_ns(lambda n: streams._cudart.floor_batch("graph_launch", n), 5000, 5))))
    s.synchronize()
    for ex in (ex_plain, ex_uo):
        ok(rt.cudaGraphExecDestroy(ex))
    for obj in (exe, g_plain, g_uo, g_ours, s):
        obj.close()


if __name__ == "__main__":
    main()
