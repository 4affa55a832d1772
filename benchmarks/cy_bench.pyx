# cython: language_level=3
# The "streams from Cython" column of the benchmark: what a Cython project
# that does `from streams cimport Stream, Event` pays per call.  The loops
# run without the GIL and call the C-level methods that the package's .pxd
# files declare, so the only cost on top of the C floor is streams' own
# checks (guard, closed flags, error translation).  Kernel and graph
# launches go through PreparedLaunch.c_launch and GraphExec.c_launch.
#
# benchmarks/builders.py compiles this file on demand with only
# streams.get_include() on the include path: no CUDA headers, as for any
# downstream project.

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from streams cimport Event, GraphExec, PreparedLaunch, Stream

# The operations that have a C-level API; names as in benchmarks/ops.py.
OPS = ("stream_query", "stream_synchronize", "event_record", "event_query",
       "stream_wait_event", "kernel_launch", "kernel_launch_sync", "graph_launch",
       "graph_launch_sync")


cdef inline long long _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000LL + ts.tv_nsec


cdef long long _batch(int op, Stream stream, Event event, Event done,
                      PreparedLaunch prepared, GraphExec graph, long n) except -1 nogil:
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
    return _now() - t0


def run_batch(str op, Stream stream not None, Event event not None,
              Event done not None, long iters, PreparedLaunch prepared=None,
              GraphExec graph=None):
    """Time ``iters`` calls of ``op``; returns the elapsed nanoseconds.

    ``event`` is what ``event_record`` records; ``done`` is an event that
    has completed (queried and waited on); the kernel operations launch
    ``prepared`` and the graph operations ``graph``.
    """
    cdef int code
    cdef long long elapsed
    if op not in OPS:
        raise ValueError(f"no C-level API for {op!r}; these have one: {', '.join(OPS)}")
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    code = OPS.index(op)
    # Checked here: the nogil loop must never see None.
    if op.startswith("kernel") and prepared is None:
        raise ValueError(f"{op} needs a PreparedLaunch")
    if op.startswith("graph") and graph is None:
        raise ValueError(f"{op} needs a GraphExec")
    with nogil:
        elapsed = _batch(code, stream, event, done, prepared, graph, iters)
    return elapsed
