# Private hooks for tests and probes, part of streams._cudart (_cudart.pyx
# includes it last); streams.testing is their public face where one exists.

def _cuda_calls_with_gil():
    """Debug builds: the sites (Python frames) where CUDA was called with
    the GIL held, at most 64, then the C shim's sites (by name); the count
    is debug_counters()'s ``cuda_calls_with_gil``.  For tests."""
    cdef int i
    cdef const char* site
    out = list(_gil_sites)
    for i in range(16):
        site = streams_gil_c_site(i)
        if site == NULL:
            break
        out.append("C: " + site.decode())
    return out


def _drain_deferred():
    """Run the releases that CUDA's threads queued, and let go of what gone
    graph executables held for replays that have ended, now (tests use this)."""
    return drain_deferred()


def _parked_count():
    """How many gone graph executables still hold objects for replays in flight."""
    return streams_parked_count()


def _nogil_round_trip(long n=100000):
    """ns per ``with nogil`` block with nothing in it, the mean over ``n``:
    what a call that lets go of the interpreter around CUDA pays for that
    alone (with a GIL: releasing and taking back an uncontended GIL; on a
    free-threaded build: detaching and attaching the thread state, which
    every enqueue there does).  For tools/quick_timing.py."""
    if n <= 0:
        raise ValueError(f"n must be > 0, not {n}")
    cdef long i
    cdef long long t0 = streams_now_ns()
    for i in range(n):
        with nogil:
            pass
    return (streams_now_ns() - t0) / n


def _producers_yield(on=None):
    """Whether enqueues of host functions from several threads, back from
    their launch, let a Python callback that waits for the GIL take it first
    (src/cudart/hostfn.h);
    ``on`` sets it.  Returns the setting before.  For probes
    (benchmarks/host_func_threads_breakdown.py)."""
    global streams_producers_yield
    cdef int before = streams_producers_yield
    if on is not None:
        streams_producers_yield = 1 if on else 0
    return bool(before)


def _testing_native_increment_address():
    """The address of a C host function that adds 1 to the unsigned 64-bit
    counter its data points to (streams.testing.native_increment)."""
    return <uintptr_t>streams_testing_native_increment


def _ticket_issue():
    """Private, for tests: a one-shot ticket (shim.h) for a dummy payload."""
    cdef unsigned long long ticket = streams_ticket_new(<void*>1)
    if ticket == 0:
        raise MemoryError()
    return ticket


def _ticket_claim(unsigned long long ticket):
    """Private, for tests: call ``ticket`` as CUDA would; True when this call
    claimed it (the first), False for a stale one (a replay)."""
    cdef void* payload
    with nogil:
        payload = streams_ticket_take(ticket)
    return payload != NULL


def _flush_cleanup_warnings():
    """Issue the CudaWarnings of the release failures queued so far (tests)."""
    flush_cleanup_warnings()


def _cleanup_kind_names():
    """The kinds of release that inject_cleanup_failure knows."""
    return tuple(_CLEANUP_KIND_NAMES)


def _queue_cleanup_failure(kind, handle, int error):
    """Queue a failure as a release of ``kind`` on ``handle`` would (tests of
    the reporting, with no CUDA involved); the next flush warns."""
    cdef uintptr_t h = handle
    if kind not in _CLEANUP_KIND_NAMES:
        raise ValueError(f"kind must be one of {sorted(_CLEANUP_KIND_NAMES)}, got {kind!r}")
    cleanup_failed(_CLEANUP_KIND_NAMES[kind], <const void*>h, error)


def _inject_cleanup_failure(kind, int error, int count):
    """Make the next ``count`` releases of ``kind`` report ``error``."""
    cdef int what
    if kind not in _CLEANUP_KIND_NAMES:
        raise ValueError(f"kind must be one of {sorted(_CLEANUP_KIND_NAMES)}, got {kind!r}")
    if error <= 0:
        raise ValueError(f"error must be a positive cudaError_t value, got {error}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    what = _CLEANUP_KIND_NAMES[kind]
    with nogil:
        streams_cleanup_inject(what, error, count)


def _hold_cleanup_lock(double seconds):
    """Hold the lock of the queue of failed releases for ``seconds``, the
    GIL released (tests: a fork while another thread holds it)."""
    with nogil:
        streams_cleanup_hold_for(<long long>(seconds * 1e9))


def _cleanup_lock_holds():
    """How many _hold_cleanup_lock calls hold the lock now (tests)."""
    return streams_cleanup_holds_now()
