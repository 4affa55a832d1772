# cython: language_level=3
# Where the time of a status or enqueue call goes, layer by layer, in one
# process (benchmarks/probes/status_breakdown.py runs it).  Unlike
# benchmarks/cy_bench.pyx, which times what a downstream project can
# cimport, this probe reaches into the package's internal call layer
# (streams._cudart), so it is compiled with the CUDA headers, against the
# checkout it times.  It links no cudart of its own: every CUDA call goes
# through streams._cudart, as in the package.
#
# Each loop repeats one layer of the path a Python call takes:
#   layer "call"   rt.<op>(handles): the guard and the error check around
#                  the raw cudart call (their cost is over the in-process
#                  floor, which makes the raw call from C);
#   layer "c_api"  the C-level method a Cython project calls without the
#                  GIL: "call" plus the counted use of each object;
# and the pieces on their own: the guard, a counted use (the two locked
# read-modify-writes), and the release and retake of the GIL that every
# status and enqueue call from Python makes (the GIL rule).  Two plain
# functions split the Python layer: `noop(s)` is a Python call of a
# compiled function that does nothing, `query(s)` the same call making the
# call layer's query, with no check of its own: the first is the price of
# any call from Python, the second minus the first what the call layer's
# query costs when Python runs between the queries.

from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cimport streams._cudart as rt
from streams._handle cimport HandleOwner
from streams._stream cimport Event, Stream
from streams.cudart cimport cudaEvent_t, cudaStream_t

OPS = ("stream_query", "event_record", "event_query", "stream_wait_event")
LAYERS = ("call", "c_api")
PIECES = ("guard", "counted_use", "gil_release")


cdef inline long long _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <long long>ts.tv_sec * 1000000000LL + ts.tv_nsec


cdef long long _layer(int op, int layer, Stream s, Event ev, Event done, long n) except -1 nogil:
    cdef long i
    cdef cudaStream_t sh = <cudaStream_t>s.c_handle()
    cdef cudaEvent_t eh = <cudaEvent_t>ev.c_handle()
    cdef cudaEvent_t dh = <cudaEvent_t>done.c_handle()
    cdef long long t0 = _now()
    if layer == 0:
        if op == 0:
            for i in range(n):
                rt.stream_query(sh)
        elif op == 1:
            for i in range(n):
                rt.event_record(eh, sh, 0)
        elif op == 2:
            for i in range(n):
                rt.event_query(dh)
        else:
            for i in range(n):
                rt.stream_wait_event(sh, dh, 0)
    else:
        if op == 0:
            for i in range(n):
                s.c_query()
        elif op == 1:
            for i in range(n):
                s.c_record(ev)
        elif op == 2:
            for i in range(n):
                done.c_query()
        else:
            for i in range(n):
                s.c_wait_event(done)
    return _now() - t0


cdef long long _piece(int which, HandleOwner obj, long n) except -1 nogil:
    cdef long i
    cdef long long t0 = _now()
    if which == 0:
        for i in range(n):
            rt.guard()
    elif which == 1:
        for i in range(n):
            obj._use()
            obj._unuse()
    else:
        for i in range(n):
            with gil:
                with nogil:
                    pass
    return _now() - t0


def layer_batch(str op, str layer, Stream s not None, Event ev not None,
                Event done not None, long n):
    """Nanoseconds of ``n`` calls of ``op`` through ``layer`` (GIL released)."""
    cdef int code = OPS.index(op)
    cdef int lay = LAYERS.index(layer)
    cdef long long elapsed
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    with nogil:
        elapsed = _layer(code, lay, s, ev, done, n)
    return elapsed


def piece_batch(str piece, HandleOwner obj not None, long n):
    """Nanoseconds of ``n`` repetitions of one piece of a call, timed
    without the GIL (the GIL's release and retake: a take and a release
    around an empty nogil block, the same pair of operations)."""
    cdef int which = PIECES.index(piece)
    cdef long long elapsed
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    with nogil:
        elapsed = _piece(which, obj, n)
    return elapsed


def noop(Stream s):
    """Nothing: the price of a Python call of a compiled function."""
    return None


def query(Stream s):
    """The call layer's stream query, with the GIL held and no other check."""
    return rt.stream_query(<cudaStream_t>s.c_handle()) == 1
