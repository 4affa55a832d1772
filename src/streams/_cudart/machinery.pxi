# The package's machinery, part of streams._cudart (_cudart.pyx includes
# it): errors, the guard, counters, deferred releases, marks, destroying
# handles.

# ---- errors ------------------------------------------------------------------

class CudaError(RuntimeError):
    """A CUDA runtime call failed.

    ``code`` is the numeric ``cudaError_t``, ``name`` its enumerator name
    (``"cudaErrorInvalidResourceHandle"``) and ``message`` the explanation.
    Instances pickle and compare by these three fields.
    """

    def __init__(self, code, name=None, message=None):
        code = int(code)
        if name is None:
            name = error_name(code)
        if message is None:
            message = error_message(code)
        super().__init__(code, name, message)
        self.code = code
        self.name = name
        self.message = message

    def __str__(self):
        return f"{self.name}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.message))

    def __eq__(self, other):
        if not isinstance(other, CudaError):
            return NotImplemented
        return (self.code, self.name, self.message) == (other.code, other.name, other.message)

    __hash__ = RuntimeError.__hash__


class HostCallbackError(RuntimeError):
    """A Python host callback enqueued on a stream raised.

    Raised by the stream's next ``synchronize()`` (and by a graph's next
    ``launch()``); ``__cause__`` is the first exception the callback raised.
    Every exception is also reported through ``sys.unraisablehook`` when it
    happens.
    """

    def __init__(self, *args):
        # Written out for inspect.signature: RuntimeError's has none.
        super().__init__(*args)


cdef str error_name(int code):
    # cudaGetErrorName needs neither a driver nor a device.
    return (<bytes>cudaGetErrorName(<cudaError_t>code)).decode("ascii", "replace")


cdef str error_message(int code):
    cdef str text = (<bytes>cudaGetErrorString(<cudaError_t>code)).decode("utf-8", "replace")
    if code == <int>cudaErrorInsufficientDriver:
        return ("no NVIDIA driver found, or the installed driver is older than the CUDA "
                f"{_runtime_version_str()} runtime this package was built with "
                f"(CUDA says: {text})")
    if code == <int>cudaErrorNoDevice:
        return f"no CUDA device: the NVIDIA driver sees no GPU (CUDA says: {text})"
    return text


cdef int raise_cuda_error(cudaError_t err) except -1:
    # Reset the runtime's per-thread last error so that it does not leak
    # into a later, unrelated cudaGetLastError().
    cudaGetLastError()
    raise CudaError(<int>err)


cdef int check(cudaError_t err) except -1 nogil:
    if err == cudaSuccess:
        return 0
    with gil:
        return raise_cuda_error(err)


cdef int _raise_guard(int state) except -1:
    if state == STREAMS_GUARD_IN_CALLBACK:
        raise RuntimeError(
            "CUDA calls are not allowed inside a host callback (CUDA forbids them there and "
            "they can deadlock); do the work after synchronize(), or enqueue it from another "
            "thread")
    raise RuntimeError(
        "this process was forked after CUDA was initialised in its parent; CUDA cannot be "
        "used in the child (use the 'spawn' or 'forkserver' start method)")


cdef int guard() except -1 nogil:
    # First thing of every nogil wrapper, right before its CUDA calls: the
    # refusal where CUDA may not be called, and, in a debug build, the check
    # of the GIL rule (the caller must have released the GIL).
    if refuse_forbidden() == 0 and streams_gil_held_here():
        _note_cuda_with_gil()
    return 0


cdef int refuse_forbidden() except -1 nogil:
    # The guard's refusal alone: for callers that hold the GIL and make no
    # CUDA call themselves (close() refusing before it marks an object
    # closed), and for the wrappers that release the GIL around their own
    # CUDA calls.
    global streams_cuda_touched
    cdef int state = streams_guard_state()
    if state == STREAMS_GUARD_OK:
        # Written once: a store on every call would keep the line of these
        # flags bouncing between the cores of threads that call CUDA.
        if not streams_cuda_touched:
            streams_cuda_touched = 1
        return 0
    with gil:
        return _raise_guard(state)


cdef inline int _guard_fast() except -1 nogil:
    # The guard of the status calls and enqueues, inlined: one relaxed load
    # and two flags in the common case, guard() for the rest (and for every
    # call of a debug build, which checks the GIL rule).
    if (streams_guard_state() == STREAMS_GUARD_OK and streams_cuda_touched
            and not streams_debug_build()):
        return 0
    return guard()


# Debug builds: where CUDA was called with the GIL held (the GIL rule,
# streams/_stream.pyx), as the Python frames that made the call; the GPU
# suite's teardown (tests/conftest.py) fails on any.  At most 64 kept.
cdef list _gil_sites = []


cdef void _note_cuda_with_gil() noexcept nogil:
    streams_count(STREAMS_CNT_CUDA_WITH_GIL)
    with gil:
        try:
            _keep_gil_site()
        except BaseException:
            pass


cdef int _keep_gil_site() except -1:
    import sys
    f = sys._getframe(0)
    frames = []
    while f is not None and len(frames) < 4:
        frames.append(f"{f.f_code.co_filename.rpartition('/')[2]}:{f.f_lineno} "
                      f"{f.f_code.co_name}")
        f = f.f_back
    site = " <- ".join(frames) or "(no Python frame)"
    if site not in _gil_sites and len(_gil_sites) < 64:
        _gil_sites.append(site)
    return 0


cdef inline int _release_decision() noexcept nogil:
    # The one answer every release path asks.  Forked child or interpreter
    # teardown: skip (leave it to the process's end: CUDA or Python cannot
    # be touched).  Inside a host callback: defer (later, on a safe thread).
    # Otherwise: now.
    cdef int state = streams_guard_state()
    if state == STREAMS_GUARD_FORKED or not streams_interpreter_alive():
        return RELEASE_SKIP
    if state == STREAMS_GUARD_IN_CALLBACK:
        return RELEASE_DEFER
    return RELEASE_NOW


cdef int release_decision() noexcept nogil:
    return _release_decision()


cdef bint may_release_any_thread() noexcept nogil:
    # For C callbacks from other libraries (DLPack deleters): Python may be
    # entered, whatever CUDA would allow on this thread.
    return streams_interpreter_alive() != 0


cdef int raise_closed(object obj) except -1:
    # Named by the streams class it is (a subclass of a user or of the
    # compat layer still says "Stream"): a public class reports "streams"
    # as its module, a private one its extension's.
    name = type(obj).__name__
    for cls in type(obj).__mro__:
        module = getattr(cls, "__module__", "")
        if module == "streams" or module.startswith("streams._"):
            name = cls.__name__.lstrip("_")
            break
    raise ValueError(f"operation on a closed {name} (or one never initialised)")


cdef int refuse_construction(object obj, str how) except -1:
    raise TypeError(f"{type(obj).__module__}.{type(obj).__qualname__} cannot be instantiated "
                    f"directly; {how}")


# ---- counters and deferred releases ---------------------------------------------

cdef void count(int which) noexcept nogil:
    streams_count(which)


cdef void payload_incref(PyObject* payload) noexcept:
    streams_payload_incref(payload)


cdef void payload_decref(PyObject* payload) noexcept:
    streams_payload_decref(payload)


cdef int defer_release(release_fn fn, void* arg, object keep, bint wake=True) except -1:
    """Queue a release for a safe thread; ``keep`` (if any) is held until then.
    Without ``wake`` it waits for the next drain by a streams call instead of
    asking the interpreter for one (a release retried until a state ends)."""
    cdef PyObject* kept = NULL
    if keep is not None:
        kept = <PyObject*>keep
        streams_payload_incref(kept)
    # Out of memory, the shim drops the item: it and `keep` leak, safely.
    streams_defer_ex(<streams_release_fn>fn, arg, 0, kept, wake)
    return 0


cdef Py_ssize_t drain_deferred() noexcept:
    cdef Py_ssize_t n = streams_drain_deferred() + streams_poll_parked()
    flush_cleanup_warnings()
    return n


# ---- marks: where the replays of a graph executable end (src/cudart/marks.h) --------

cdef void* marks_new() except NULL:
    cdef streams_marks_t* m = streams_marks_new()
    if m == NULL:
        raise MemoryError()
    return <void*>m


cdef void marks_free(void* marks) noexcept nogil:
    streams_marks_free(<streams_marks_t*>marks)


cdef int marks_record(void* marks, cudaStream_t s) except -1 nogil:
    # A launch that cannot be marked (no memory for an event) is waited for
    # instead: what it uses must not be let go before it ends.
    cdef cudaError_t err
    guard()
    err = streams_marks_record(<streams_marks_t*>marks, s)
    if err == cudaSuccess:
        return 0
    cudaGetLastError()
    return check(cudaStreamSynchronize(s))


cdef void park(void* marks, object a, object b) noexcept:
    # With the GIL held.  Without memory to park, wait for the marks here
    # (the replays they mark are already queued: this cannot wait for us).
    cdef streams_marks_t* m = <streams_marks_t*>marks
    if marks == NULL:
        return
    if streams_park(m, <PyObject*>a if a is not None else NULL,
                    <PyObject*>b if b is not None else NULL) == 0:
        return
    if streams_guard_state() == STREAMS_GUARD_OK:
        with nogil:
            while not streams_marks_done(m):
                streams_sleep_ns(20000)
            streams_marks_free(m)


def debug_build():
    """Whether this extension was built with ``STREAMS_DEBUG_REFCOUNTS=1``,
    which adds reference and allocation counts to :func:`debug_counters`."""
    return bool(streams_debug_build())


cdef object _pair(int made, int gone):
    cdef unsigned long long a = streams_counter(made), b = streams_counter(gone)
    return a, b, <long long>(a - b)


def debug_counters():
    """Counts of handles, callback payloads and releases, for leak checks.

    ``live_*`` are the differences of what was made and given back:
    ``live_streams``/``live_events``/``live_graphs``/``live_graph_execs``/
    ``live_modules``/``live_buffers``/``live_mem_pools``/``live_green_contexts``/
    ``live_semaphores`` the owned handles (less, for
    graphs, ``graphs_abandoned``: never destroyed, because the CUDA driver
    corrupted them; see Graph in docs/graphs.rst), ``live_callbacks``
    the one-shot callbacks enqueued that have not run, ``live_host_calls``
    every callback payload still alive (graph-owned ones included),
    ``pending_one_shots`` the one-shot host functions (callbacks, native
    calls with something to keep, asyncio waits) enqueued that have not been
    called, ``native_calls_enqueued`` and ``live_native_calls`` the native
    host functions enqueued with something to keep and those not yet run
    (docs/host-callbacks.rst, Native host functions), and
    ``stale_one_shot_calls``
    the calls CUDA made of a one-shot already called: replays of one that a
    capture the capture fence did not see took into a graph
    (docs/host-callbacks.rst).

    In a debug build (:func:`debug_build`) there are more: every reference
    the C code took (``*_increfs``) and dropped (``*_decrefs``) on callback
    payloads and DLPack exports, allocations and modules made and given
    back, and ``payloads_leaked``: payloads let go on purpose (a callback
    arriving during interpreter shutdown).
    """
    counters = {}
    for name, made, gone in (
            ("streams", STREAMS_CNT_STREAM_CREATED, STREAMS_CNT_STREAM_DESTROYED),
            ("events", STREAMS_CNT_EVENT_CREATED, STREAMS_CNT_EVENT_DESTROYED),
            ("graphs", STREAMS_CNT_GRAPH_CREATED, STREAMS_CNT_GRAPH_DESTROYED),
            ("graph_execs", STREAMS_CNT_EXEC_CREATED, STREAMS_CNT_EXEC_DESTROYED),
            ("modules", STREAMS_CNT_MODULE_CREATED, STREAMS_CNT_MODULE_DESTROYED),
            ("buffers", STREAMS_CNT_BUFFER_CREATED, STREAMS_CNT_BUFFER_FREED),
            ("mem_pools", STREAMS_CNT_MEMPOOL_CREATED, STREAMS_CNT_MEMPOOL_DESTROYED),
            ("green_contexts", STREAMS_CNT_GREEN_CTX_CREATED,
             STREAMS_CNT_GREEN_CTX_DESTROYED),
            ("semaphores", STREAMS_CNT_SEMAPHORE_CREATED, STREAMS_CNT_SEMAPHORE_DESTROYED)):
        a, b, live = _pair(made, gone)
        counters[f"{name}_created"] = a
        counters[f"{name}_destroyed"] = b
        counters[f"live_{name}"] = live
    # Graphs given up on, never to be destroyed (a conditional body's
    # invalidated capture corrupted them: _graph/capture.pxi, end_capture).
    counters["graphs_abandoned"] = streams_counter(STREAMS_CNT_GRAPH_ABANDONED)
    counters["live_graphs"] -= counters["graphs_abandoned"]
    enq = streams_counter(STREAMS_CNT_CALLBACK_ENQUEUED)
    done = streams_counter(STREAMS_CNT_CALLBACK_COMPLETED)
    dropped = streams_counter(STREAMS_CNT_CALLBACK_DROPPED)
    counters.update({
        "callbacks_enqueued": enq,
        "callbacks_completed": done,
        "callbacks_dropped": dropped,
        "live_callbacks": <long long>(enq - done - dropped),
        "live_host_calls": _pair(STREAMS_CNT_HOST_CALL_CREATED, STREAMS_CNT_HOST_CALL_FREED)[2],
        "graph_callback_runs": streams_counter(STREAMS_CNT_GRAPH_CALLBACK_RUNS),
        "pending_one_shots": streams_tickets_pending_now(),
        "stale_one_shot_calls": streams_tickets_stale_calls(),
        "native_calls_enqueued": streams_counter(STREAMS_CNT_NATIVE_CALL_ENQUEUED),
        "live_native_calls": _pair(STREAMS_CNT_NATIVE_CALL_ENQUEUED,
                                   STREAMS_CNT_NATIVE_CALL_DONE)[2],
        "deferred_releases": streams_counter(STREAMS_CNT_DEFERRED_RELEASES),
        "marker_events": streams_counter(STREAMS_CNT_MARKER_CREATED),
        "debug_build": bool(streams_debug_build()),
    })
    if streams_debug_build():
        for name, made, gone, live in (
                ("payload", STREAMS_CNT_PAYLOAD_INCREF, STREAMS_CNT_PAYLOAD_DECREF,
                 "live_payload_refs"),
                ("dlpack", STREAMS_CNT_DLPACK_INCREF, STREAMS_CNT_DLPACK_DECREF,
                 "live_dlpack_refs")):
            a, b, diff = _pair(made, gone)
            counters.update({f"{name}_increfs": a, f"{name}_decrefs": b, live: diff})
        for name, made, gone in (
                ("memory", STREAMS_CNT_MEMORY_ALLOC, STREAMS_CNT_MEMORY_FREE),
                ("module", STREAMS_CNT_MODULE_LOAD, STREAMS_CNT_MODULE_UNLOAD)):
            a, b, diff = _pair(made, gone)
            key = "allocs" if name == "memory" else "loads"
            back = "frees" if name == "memory" else "unloads"
            counters.update({f"{name}_{key}": a, f"{name}_{back}": b})
        counters["live_allocations"] = _pair(STREAMS_CNT_MEMORY_ALLOC, STREAMS_CNT_MEMORY_FREE)[2]
        counters["live_module_loads"] = _pair(STREAMS_CNT_MODULE_LOAD,
                                              STREAMS_CNT_MODULE_UNLOAD)[2]
        counters["payloads_leaked"] = streams_counter(STREAMS_CNT_PAYLOAD_LEAKED)
        counters["cuda_calls_with_gil"] = streams_counter(STREAMS_CNT_CUDA_WITH_GIL)
    return counters


# ---- destroying handles -----------------------------------------------------------
# One path for every kind of handle the package destroys: checked, for
# close(), or quiet and never raising, for the last user and __dealloc__.

cdef int _DESTROYED[HANDLE_KINDS]     # the counter each kind's destroy moves
_DESTROYED[HANDLE_STREAM] = STREAMS_CNT_STREAM_DESTROYED
_DESTROYED[HANDLE_EVENT] = STREAMS_CNT_EVENT_DESTROYED
_DESTROYED[HANDLE_GRAPH] = STREAMS_CNT_GRAPH_DESTROYED
_DESTROYED[HANDLE_GRAPH_EXEC] = STREAMS_CNT_EXEC_DESTROYED
_DESTROYED[HANDLE_HOST_MEMORY] = STREAMS_CNT_MEMORY_FREE
_DESTROYED[HANDLE_MANAGED_MEMORY] = STREAMS_CNT_MEMORY_FREE
_DESTROYED[HANDLE_MEM_POOL] = STREAMS_CNT_MEMPOOL_DESTROYED
_DESTROYED[HANDLE_GREEN_CTX] = STREAMS_CNT_GREEN_CTX_DESTROYED


cdef cudaError_t _destroy_now(void* h, int kind) noexcept nogil:
    if kind == HANDLE_STREAM:
        return cudaStreamDestroy(<cudaStream_t>h)
    if kind == HANDLE_EVENT:
        return cudaEventDestroy(<cudaEvent_t>h)
    if kind == HANDLE_GRAPH:
        return cudaGraphDestroy(<cudaGraph_t>h)
    if kind == HANDLE_GRAPH_EXEC:
        return cudaGraphExecDestroy(<cudaGraphExec_t>h)
    if kind == HANDLE_HOST_MEMORY or kind == HANDLE_MANAGED_MEMORY or kind == HANDLE_MEM_POOL:
        # (A pool's allocations still out keep its memory: CUDA releases it
        # once the last of them is freed.)
        return _release_memory_relaxed(h, kind)
    if kind == HANDLE_GREEN_CTX:
        # Only a context made here gets here: the API that made it is chosen.
        if _green_runtime:
            return streams_rt_green_destroy(h)
        return <cudaError_t>(<streams_green_destroy_fn>_green_fns[_G_DESTROY])(h)
    return cudaFree(h)


cdef inline cudaError_t _release_memory_now(void* h, int kind) noexcept nogil:
    # Pinned or managed memory freed, or a memory pool destroyed.
    if kind == HANDLE_HOST_MEMORY:
        return cudaFreeHost(h)
    if kind == HANDLE_MEM_POOL:
        return cudaMemPoolDestroy(<cudaMemPool_t>h)
    return cudaFree(h)


cdef cudaError_t _release_memory_relaxed(void* h, int kind) noexcept nogil:
    # cudaFreeHost, cudaFree and cudaMemPoolDestroy are calls CUDA refuses
    # while another thread captures in global mode, and the refusal
    # invalidates that capture (tools/capture_rules_probe.py): a release
    # must not break a capture it has nothing to do with.  Relaxed mode
    # allows them; they still wait for the device's work.
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef cudaError_t err
    if cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess:
        cudaGetLastError()
        return _release_memory_now(h, kind)
    err = _release_memory_now(h, kind)
    cudaThreadExchangeStreamCaptureMode(&mode)
    return err


cdef void _destroy_quietly(void* h, int kind) noexcept nogil:
    # Nothing can be raised here: a failure is queued and reported as a
    # CudaWarning by the next flush (cleanup_failed).
    cdef int injected = injected_failure(kind)
    cdef cudaError_t err = _destroy_now(h, kind)
    if err != cudaSuccess:
        cudaGetLastError()
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(kind, h, <int>err)


cdef int destroy_handle(int kind, void* h) except -1 nogil:
    guard()
    check(_destroy_now(h, kind))
    streams_count(_DESTROYED[kind])
    return 0


cdef void release_handle(int kind, void* h) noexcept nogil:
    cdef int decision = _release_decision()
    streams_count(_DESTROYED[kind])
    if decision == RELEASE_NOW:
        streams_release_without_gil(_destroy_quietly, h, kind)
        _flush_if_gil()
    elif decision == RELEASE_DEFER:
        streams_defer(_destroy_quietly, h, kind, NULL)


cdef void _flush_if_gil() noexcept nogil:
    # A release on a thread that holds the GIL reports its failure now;
    # one without it leaves it to the next flush.
    if PyGILState_Check():
        with gil:
            flush_cleanup_warnings()


# ---- memory pools: destroyed once the frees of their memory have run ----------------
# cudaMemPoolDestroy is documented to wait by itself for allocations still
# out and frees still queued, but a pool destroyed with one of its
# allocations out, that allocation freed later, then more stream-ordered
# work on that stream kills the process (SIGSEGV inside CUDA on an H100;
# tests/memory/test_memory_lifetimes_gpu.py reproduces it in a child).  So the
# package never takes that path: each buffer holds its pool in
# use until its free is enqueued, every free is marked on its stream, and
# the pool is destroyed once those marks are done.

cdef void _destroy_pool_counted(void* h, int kind) noexcept nogil:
    _destroy_quietly(h, HANDLE_MEM_POOL)
    streams_count(_DESTROYED[HANDLE_MEM_POOL])


cdef bint _park_pool(void* pool, void* frees) noexcept nogil:
    # The parked list is kept with the GIL held.
    cdef int failed
    with gil:
        failed = streams_park_release(<streams_marks_t*>frees, _destroy_pool_counted,
                                      pool, HANDLE_MEM_POOL)
    return failed == 0


cdef int destroy_pool(void* pool, void* frees) except -1 nogil:
    guard()
    if frees != NULL and not streams_marks_done(<streams_marks_t*>frees):
        if _park_pool(pool, frees):
            return 0
        # No memory to park: CUDA's own deferral is all that is left.
    streams_marks_free(<streams_marks_t*>frees)
    return destroy_handle(HANDLE_MEM_POOL, pool)


cdef struct _MarksCall:
    streams_marks_t* m
    int done


cdef void _marks_call(void* arg, int free_them) noexcept nogil:
    cdef _MarksCall* c = <_MarksCall*>arg
    if free_them:
        streams_marks_free(c.m)
    else:
        c.done = streams_marks_done(c.m)


cdef bint marks_done_released(void* marks) noexcept nogil:
    # streams_marks_done (event queries) with the GIL released where this
    # thread holds it: a release from __dealloc__.  Test: the debug build's
    # teardown check, tests/cudart/test_cleanup_warnings_gpu.py (mem_pool).
    cdef _MarksCall c
    c.m = <streams_marks_t*>marks
    c.done = 0
    streams_release_without_gil(_marks_call, &c, 0)
    return c.done != 0


cdef void marks_free_released(void* marks) noexcept nogil:
    # streams_marks_free (event destroys) likewise.
    cdef _MarksCall c
    if marks == NULL:
        return
    c.m = <streams_marks_t*>marks
    streams_release_without_gil(_marks_call, &c, 1)


cdef void release_pool(void* pool, void* frees) noexcept nogil:
    # Skipped: both are left to the process's end.  Deferred (inside a host
    # callback) the marks cannot be queried: park, and the next safe drain
    # looks.
    cdef int decision = _release_decision()
    if decision == RELEASE_SKIP:
        streams_count(_DESTROYED[HANDLE_MEM_POOL])
        return
    if frees != NULL and (decision == RELEASE_DEFER or not marks_done_released(frees)):
        if _park_pool(pool, frees):
            return
        if decision == RELEASE_DEFER:
            streams_count(_DESTROYED[HANDLE_MEM_POOL])
            return      # no memory to park, no CUDA here: leak, safely
    marks_free_released(frees)
    release_handle(HANDLE_MEM_POOL, pool)


# ---- green contexts: destroyed once the work queued in them is done ---------------
# A green context's last holder can go while work is still queued in it: a
# stream made there closed right after a launch (cudaStreamDestroy lets its
# queued work run), then the context closed.  cuGreenCtxDestroy is not
# documented to wait for that work, nor to let it run, and the close must
# not wait for it either (a close never waits for the GPU: docs/safety.rst).
# So the release records an event of the whole context (cuGreenCtxRecordEvent:
# every activity of the context at that moment, its closed streams' included)
# and parks the context on it; the destroy runs once the event is done, at
# a later drain (tests/green/test_green_release_gpu.py).  Where the event cannot be
# made, the context is destroyed at once, as before.  Counted destroyed at
# the release, as every handle release_handle lets go.

cdef void _destroy_green_parked(void* ctx, int kind) noexcept nogil:
    _destroy_quietly(ctx, HANDLE_GREEN_CTX)


# cuGreenCtxRecordEvent (CUDA 12.4), looked up at the first release, apart
# from the table green contexts need (a driver without it still makes
# them: its contexts are then destroyed at once).  Published as
# _stream_resource_fn is: the pointer, then the flag.
cdef void* _green_record_fn = NULL
cdef int _green_record_tried = False


cdef cudaError_t _green_record_event(void* ctx, cudaEvent_t ev) noexcept nogil:
    cdef void* fn
    if _green_runtime:
        return streams_rt_green_record_event(ctx, ev)
    if not streams_flag_get(&_green_record_tried):
        fn = _driver_entry_since(b"cuGreenCtxRecordEvent", 12040)
        streams_ptr_store(&_green_record_fn, fn)
        streams_flag_set(&_green_record_tried, True)
    fn = streams_ptr_load(&_green_record_fn)
    if fn == NULL:
        return cudaErrorNotSupported
    return <cudaError_t>(<streams_green_record_event_fn>fn)(ctx, <void*>ev)


cdef bint _park_green(void* ctx, streams_marks_t* m) noexcept nogil:
    # The parked list is kept with the GIL held (as _park_pool).
    cdef int failed
    with gil:
        failed = streams_park_release(m, _destroy_green_parked, ctx, HANDLE_GREEN_CTX)
    return failed == 0


cdef void _release_green_now(void* ctx, int device) noexcept nogil:
    # On a thread that may call CUDA (RELEASE_NOW, or a drain of the
    # deferred queue), GIL or not.  The event is made on the context's
    # device, in relaxed capture mode: a release must not break a capture
    # of another thread that it has nothing to do with.
    cdef streams_marks_t* m = streams_marks_new()
    cdef cudaEvent_t ev = NULL
    cdef cudaError_t err = cudaErrorMemoryAllocation
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef bint exchanged
    cdef int cur = -1
    if m != NULL:
        exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess
        err = cudaGetDevice(&cur)
        if err == cudaSuccess and cur != device:
            err = cudaSetDevice(device)
        if err == cudaSuccess:
            err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)
        if err == cudaSuccess:
            err = _green_record_event(ctx, ev)
            if err == cudaSuccess and streams_marks_push(m, ev) != 0:
                err = cudaErrorMemoryAllocation
            if err != cudaSuccess:
                streams_destroy_marker_event(ev)
        if cur >= 0 and cur != device:
            cudaSetDevice(cur)
        if exchanged:
            cudaThreadExchangeStreamCaptureMode(&mode)
        if err != cudaSuccess:
            cudaGetLastError()      # must not leak into this thread's next call
        elif not streams_marks_done(m) and _park_green(ctx, m):
            return
        streams_marks_free(m)
    _destroy_quietly(ctx, HANDLE_GREEN_CTX)


cdef void release_green_ctx(void* ctx, int device) noexcept nogil:
    # The last holder's release: never raises, never waits for the GPU.
    cdef int decision = _release_decision()
    streams_count(_DESTROYED[HANDLE_GREEN_CTX])
    if decision == RELEASE_NOW:
        streams_release_without_gil(_release_green_now, ctx, device)
        _flush_if_gil()
    elif decision == RELEASE_DEFER:
        streams_defer(_release_green_now, ctx, device, NULL)
