# The in-process floor of the benchmarks (python -m benchmarks.run, python -m
# streams), part of streams._cudart (_cudart.pyx includes it): its loops
# (src/floor.h) must run through the static cudart that streams calls, so
# they share that module's translation unit.

# The floor of the launch-overhead measurements, in the process measured:
# each operation's raw cudart calls in C loops (src/floor.h),
# through this module's static cudart, the one streams calls.  A floor in
# another process has another context and other clocks, and can run
# slower than streams itself (benchmarks/README.md, "The floor").

from libc.limits cimport LONG_MAX

cdef extern from "floor.h" nogil:
    enum: STREAMS_FLOOR_OP_COUNT
    const char* streams_floor_op_names[]
    ctypedef struct streams_floor_error_t:
        cudaError_t err
        char what[256]
    int streams_floor_find_op(const char* name)
    int streams_floor_uses_kernels(int op)
    long long streams_floor_batch(int op, long n, const char* ptx, int* drained,
                                  streams_floor_error_t* error)

# The image stays referenced for the process: the floor's library, loaded
# from it once, is never unloaded and the driver may read it again.
cdef bytes _floor_ptx = None
cdef object _floor_lock = object()


cdef const char* _floor_image() except NULL:
    global _floor_ptx
    import os
    if _floor_ptx is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels",
                            "builtin.ptx")
        with open(path, "rb") as f:
            image = f.read() + b"\0"
        # Set once, never replaced: a thread that read the first one keeps
        # a live object (free-threaded CPython: two threads may get here).
        with cython.critical_section(_floor_lock):
            if _floor_ptx is None:
                _floor_ptx = image
    return _floor_ptx


def floor_batch(op, n):
    """Nanoseconds that ``n`` calls of operation ``op`` take in C, here.

    ``op`` is an operation of the benchmark (``benchmarks/ops.py``:
    ``"stream_query"``, ``"kernel_launch"``, ...).  The calls are the raw
    cudart calls of that operation, each checked, made with the GIL
    released on streams, events and graphs this call creates and destroys,
    and timed with ``CLOCK_MONOTONIC``; the kernels are the package's
    built-in PTX.  Raises ValueError for an unknown ``op`` or ``n < 1``
    (before any CUDA call) and CudaError when a call fails.
    """
    cdef int code
    cdef long calls
    cdef long long elapsed
    cdef int drained = 0
    cdef const char* image = NULL
    cdef streams_floor_error_t error
    if not isinstance(op, str):
        raise TypeError(f"op must be a str, not {type(op).__name__}")
    code = streams_floor_find_op(op.encode("utf-8", "replace"))
    if code < 0:
        known = ", ".join(streams_floor_op_names[i].decode("ascii")
                          for i in range(STREAMS_FLOOR_OP_COUNT))
        raise ValueError(f"floor_batch has no operation {op!r}; it has: {known}")
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    if n < 1 or n > LONG_MAX:
        raise ValueError(f"n must be >= 1 (and fit a C long), got {n}")
    calls = n
    if streams_floor_uses_kernels(code):
        image = _floor_image()
    with nogil:
        guard()     # without the GIL, as every CUDA call from Python
        elapsed = streams_floor_batch(code, calls, image, &drained, &error)
    if elapsed >= 0:
        return elapsed
    what = error.what.decode("utf-8", "replace")
    if error.err != cudaSuccess:
        raise CudaError(<int>error.err, None,
                        f"{error_message(<int>error.err)} (floor_batch {op!r}: {what})")
    raise RuntimeError(f"floor_batch {op!r}: {what}")
