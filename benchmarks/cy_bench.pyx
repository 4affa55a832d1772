# cython: language_level=3
# The "streams from Cython" column of the benchmark: what a Cython project
# that does `from streams cimport Stream, Event` pays per call.  The loops
# run without the GIL and call the C-level methods that the package's .pxd
# files declare, so the only cost on top of the floor is streams' own
# checks (guard, closed flags, error translation).  Kernel and graph
# launches go through PreparedLaunch.c_launch and GraphExec.c_launch, and
# launches with arguments through Kernel.c_launch with the arguments packed
# by the caller, as a Cython project packs them.
#
# benchmarks/builders.py compiles this file on demand with only
# streams.get_include() on the include path: no CUDA headers, as for any
# downstream project.  What differs between builds of streams (where the
# classes are cimported from, whether Kernel has c_launch) is in an include
# that the builder writes for the streams it compiles against
# (builders.cython_api): the baseline contender compiles this same file
# against an older build's .pxd files.

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

include "cy_bench_api.pxi"

# The operations that have a C-level API (names as in benchmarks/ops.py), and
# their loops in _batch.
_CODES = {"stream_query": 0, "stream_synchronize": 1, "event_record": 2, "event_query": 3,
          "stream_wait_event": 4, "kernel_launch": 5, "prepared_launch": 5,
          "kernel_launch_sync": 6, "graph_launch": 7, "graph_launch_sync": 8,
          "event_record_query": 9, "stream_wait_stream": 10, "kernel_launch_args4": 11,
          "kernel_launch_args16": 11, "graph_launch_1": 7, "graph_launch_100": 7,
          "graph_launch_1000": 7}
#: Operations whose C-level API this build of streams lacks, with why.
NA = {} if KERNEL_C_LAUNCH else dict.fromkeys(
    ("kernel_launch_args4", "kernel_launch_args16"), "this build of streams has no Kernel.c_launch")
OPS = tuple(op for op in _CODES if op not in NA)


cdef inline long long _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000LL + ts.tv_nsec


cdef long long _batch(int op, Stream stream, Event event, Event done,
                      PreparedLaunch prepared, GraphExec graph, Stream other, Kernel kernel,
                      void** args, long n) except -1 nogil:
    cdef long i
    cdef long long t0 = _now()
    # One loop per operation, so nothing but the call itself is in the loop.
    if op == 0:
        for i in range(n):
            stream.c_query()
    elif op == 1:
        for i in range(n):
            stream.c_synchronize()
    elif op == 2:
        for i in range(n):
            stream.c_record(event)
    elif op == 3:
        for i in range(n):
            done.c_query()
    elif op == 4:
        for i in range(n):
            stream.c_wait_event(done)
    elif op == 5:
        for i in range(n):
            prepared.c_launch(stream)
    elif op == 6:
        for i in range(n):
            prepared.c_launch(stream)
            stream.c_synchronize()
    elif op == 7:
        for i in range(n):
            graph.c_launch(stream)
    elif op == 8:
        for i in range(n):
            graph.c_launch(stream)
            stream.c_synchronize()
    elif op == 9:
        for i in range(n):
            stream.c_record(event)
            event.c_query()
    elif op == 10:
        for i in range(n):
            stream.c_wait_stream(other)
    elif op == 11:
        for i in range(n):
            kernel_launch(kernel, stream, args)
    return _now() - t0


def run_batch(str op, Stream stream not None, Event event not None,
              Event done not None, long iters, PreparedLaunch prepared=None,
              GraphExec graph=None, Stream other=None, Kernel kernel=None):
    """Time ``iters`` calls of ``op``; returns the elapsed nanoseconds.

    ``event`` is what ``event_record`` records; ``done`` is an event that
    has completed (queried and waited on); ``other`` is what wait_stream
    waits for; the kernel operations launch ``prepared``, the argument ones
    ``kernel`` (with zeros for its parameters, which an empty kernel never
    reads), and the graph operations ``graph``.
    """
    cdef int code, i
    cdef long long elapsed
    cdef unsigned long long slots[16]
    cdef void* args[16]
    if op not in OPS:
        raise ValueError(NA.get(op, f"no C-level API for {op!r}") + "; these have one: "
                         + ", ".join(OPS))
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    code = _CODES[op]
    # Checked here: the nogil loop must never see None.
    if code in (5, 6) and prepared is None:
        raise ValueError(f"{op} needs a PreparedLaunch")
    if code == 11 and kernel is None:
        raise ValueError(f"{op} needs a Kernel")
    if code in (7, 8) and graph is None:
        raise ValueError(f"{op} needs a GraphExec")
    if code == 10 and other is None:
        raise ValueError(f"{op} needs the other Stream")
    for i in range(16):
        slots[i] = 0
        args[i] = &slots[i]
    with nogil:
        elapsed = _batch(code, stream, event, done, prepared, graph, other, kernel, args,
                         iters)
    return elapsed
