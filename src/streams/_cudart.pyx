# cython: language_level=3
"""The one owner of the CUDA runtime in streams.

This is the only extension of the package that links ``libcudart_static.a``
and the C shim (src/cudart/shim.h): one runtime per process.  Every
other module calls CUDA through the thin ``nogil`` wrappers declared in
``_cudart.pxd``, each of which refuses the call where CUDA forbids it (inside
a host callback, in a forked child) and turns a failure into ``CudaError``,
so that no call site can forget either.  Releases of handles (``release_*``)
never raise and are deferred to a safe thread when they cannot run now.

The wrappers follow the chapters of the CUDA runtime API reference (device,
stream and capture, event, execution, memory, stream-ordered allocator, peer
access, graph, library), after the package's machinery they are written in
(errors, the guard, counters, deferred releases), each chapter under a
``###`` banner; ``_cudart.pxd`` declares them in the same order.  Green
contexts, kernel nodes and adopted kernels through the driver follow, in
sections of their own, then the in-process floor of the benchmarks.
"""
cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from streams._platform cimport (STREAMS_FREE_THREADED, streams_flag_get, streams_flag_set,
                                streams_ptr_load, streams_ptr_store, streams_sleep_ns)
from streams.cudart cimport *

cdef extern from "cudart/shim.h" nogil:
    enum:
        STREAMS_GUARD_OK
        STREAMS_GUARD_IN_CALLBACK
        STREAMS_GUARD_FORKED
    int streams_guard_state()
    int streams_cuda_touched
    int streams_install_fork_handler()
    void streams_mark_shutting_down()
    void streams_clear_shutting_down()
    int streams_interpreter_alive()
    int streams_wait_trampolines_idle(long long timeout_ns)
    long long streams_now_ns()
    void streams_count(int which)
    unsigned long long streams_counter(int which)
    int streams_debug_build()
    int streams_gil_held_here()
    const char* streams_gil_c_site(int i)
    void streams_note_async_free()
    unsigned long long streams_async_frees_so_far()

    ctypedef void (*streams_release_fn)(void* arg, int kind) noexcept nogil
    int streams_defer(streams_release_fn fn, void* arg, int kind, PyObject* keep)
    int streams_defer_ex(streams_release_fn fn, void* arg, int kind, PyObject* keep, int wake)
    void streams_release_without_gil(streams_release_fn fn, void* arg, int kind)

    void streams_host_fn_trampoline(void* payload)
    void streams_producer_enter()
    void streams_producer_leave()
    int streams_producers_yield
    void streams_stream_callback_trampoline(cudaStream_t stream, cudaError_t status,
                                            void* payload)
    void streams_graph_host_fn_trampoline(void* payload)
    int streams_call_on_native_thread(void* payload, int count)
    void streams_user_object_release(void* payload)
    void streams_notify_ticket_fn(void* ticket)
    void streams_fence_enter(void* stream)
    void streams_fence_leave(void* stream)
    void streams_fence_close(void* stream)
    void streams_fence_open(void* stream)
    void streams_capture_enter()
    void streams_capture_leave()
    size_t streams_fence_streams_now()
    unsigned long long streams_ticket_new(void* payload)
    void* streams_ticket_take(unsigned long long token)
    long long streams_tickets_pending_now()
    unsigned long long streams_tickets_stale_calls()

    ctypedef void (*streams_host_fn_t)(void* data) noexcept nogil
    ctypedef struct streams_native_call:
        pass
    streams_native_call* streams_native_call_new(streams_host_fn_t fn, void* data,
                                                 PyObject* keep)
    void streams_native_host_fn_trampoline(void* ticket)
    void streams_testing_native_increment(void* data)

    cudaError_t streams_thread_marker(int dev, cudaEvent_t* out)
    unsigned long long streams_devsync_request(int dev, cudaError_t* err)
    int streams_devsync_wait(int dev, unsigned long long ticket, long long slice_ns,
                             cudaError_t* err, long long* in_flight_ns)

cdef extern from "cudart/shim.h":
    Py_ssize_t streams_drain_deferred()
    ctypedef void (*streams_cleanup_failed_fn)(int what, const void* handle, int err) noexcept nogil
    ctypedef int (*streams_injected_failure_fn)(int what) noexcept nogil
    void streams_set_cleanup_hooks(streams_cleanup_failed_fn failed,
                                   streams_injected_failure_fn injected, int marker_kind)
    ctypedef struct streams_marks_t:
        pass
    streams_marks_t* streams_marks_new() nogil
    cudaError_t streams_marks_record(streams_marks_t* m, cudaStream_t stream) nogil
    int streams_marks_done(streams_marks_t* m) nogil
    void streams_marks_free(streams_marks_t* m) nogil
    int streams_park(streams_marks_t* m, PyObject* a, PyObject* b)
    int streams_park_release(streams_marks_t* m, streams_release_fn fn, void* arg, int kind)
    int streams_marks_push(streams_marks_t* m, cudaEvent_t ev) nogil
    void streams_destroy_marker_event(cudaEvent_t ev) nogil
    size_t streams_parked_count()
    Py_ssize_t streams_poll_parked()
    void streams_payload_incref(PyObject* payload)
    void streams_payload_decref(PyObject* payload)
    ctypedef void (*streams_dispatch_fn)(PyObject* payload, int status) noexcept
    streams_dispatch_fn streams_dispatch

cdef extern from "cuda_versions.h" nogil:
    cudaError_t streams_cudaStreamGetCaptureInfo(
        cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
        unsigned long long* id_out, cudaGraph_t* graph_out,
        const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
        size_t* numDependencies_out)
    cudaError_t streams_cudaStreamUpdateCaptureDependencies(
        cudaStream_t stream, cudaGraphNode_t* dependencies,
        const cudaGraphEdgeData* dependencyData, size_t numDependencies, unsigned int flags)
    cudaError_t streams_cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t* from_,
                                          cudaGraphNode_t* to, cudaGraphEdgeData* edgeData,
                                          size_t* numEdges)
    cudaError_t streams_cudaGraphNodeGetDependencies(cudaGraphNode_t node,
                                                     cudaGraphNode_t* pDependencies,
                                                     cudaGraphEdgeData* edgeData,
                                                     size_t* pNumDependencies)
    cudaError_t streams_cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset,
                                             size_t* size)
    cudaError_t streams_cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph,
                                         const cudaGraphNode_t* deps, size_t n,
                                         cudaGraphNodeParams* params)
    bint STREAMS_HAVE_MEMCPY_BATCH
    cudaError_t streams_cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes,
                                             size_t count, cudaStream_t stream)
    cudaError_t streams_get_driver_entry(const char* symbol, void** fn)
    cudaError_t streams_get_driver_entry_at(const char* symbol, void** fn, unsigned int version)
    int STREAMS_HOST_FN_SYNC_VERSION
    ctypedef int (*streams_launch_host_func_v2_fn)(cudaStream_t stream, cudaHostFn_t fn,
                                                   void* data, unsigned int sync_mode)
    ctypedef int (*streams_stream_value32_fn)(cudaStream_t stream, unsigned long long addr,
                                              unsigned int value, unsigned int flags)
    ctypedef int (*streams_stream_value64_fn)(cudaStream_t stream, unsigned long long addr,
                                              unsigned long long value, unsigned int flags)

cdef extern from "notify.h" nogil:
    void streams_notify_host_fn(void* node)


### The package's machinery: errors, the guard, counters, deferred releases, handles #######
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


def _drain_deferred():
    """Run the releases that CUDA's threads queued, and let go of what gone
    graph executables held for replays that have ended, now (tests use this)."""
    return drain_deferred()


def _parked_count():
    """How many gone graph executables still hold objects for replays in flight."""
    return streams_parked_count()


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
    ``live_modules``/``live_buffers``/``live_mem_pools``/``live_green_contexts``
    the owned handles (less, for
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
             STREAMS_CNT_GREEN_CTX_DESTROYED)):
        a, b, live = _pair(made, gone)
        counters[f"{name}_created"] = a
        counters[f"{name}_destroyed"] = b
        counters[f"live_{name}"] = live
    # Graphs given up on, never to be destroyed (a conditional body's
    # invalidated capture corrupted them: _graph.pyx, end_capture).
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
# tests/test_memory_lifetimes_gpu.py reproduces it in a child).  So the
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


cdef void release_pool(void* pool, void* frees) noexcept nogil:
    # Skipped: both are left to the process's end.  Deferred (inside a host
    # callback) the marks cannot be queried: park, and the next safe drain
    # looks.
    cdef int decision = _release_decision()
    if decision == RELEASE_SKIP:
        streams_count(_DESTROYED[HANDLE_MEM_POOL])
        return
    if frees != NULL and (decision == RELEASE_DEFER or
                          not streams_marks_done(<streams_marks_t*>frees)):
        if _park_pool(pool, frees):
            return
        if decision == RELEASE_DEFER:
            streams_count(_DESTROYED[HANDLE_MEM_POOL])
            return      # no memory to park, no CUDA here: leak, safely
    streams_marks_free(<streams_marks_t*>frees)
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
# a later drain (tests/test_audit_misc_gpu.py).  Where the event cannot be
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


### Versions and device management #########################################################
cdef str _runtime_version_str():
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return _version_str(runtime)


def runtime_version():
    """The CUDA runtime version this package was built with, e.g. ``13000``."""
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return runtime


def driver_version():
    """The CUDA version the installed driver supports, e.g. ``13000``; 0 without a driver."""
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return driver


cdef int get_device_count() except -1 nogil:
    cdef int n = 0
    cdef cudaError_t err
    guard()
    err = cudaGetDeviceCount(&n)
    if err == cudaErrorNoDevice or err == cudaErrorInsufficientDriver:
        cudaGetLastError()
        return 0
    check(err)
    return n


cdef int no_device_error() except -1:
    """Raise the plain-words CudaError of a process that sees no usable GPU."""
    cdef int n = 0
    cdef cudaError_t err
    with nogil:
        err = cudaGetDeviceCount(&n)
    if err == cudaSuccess:
        err = cudaErrorNoDevice
    return raise_cuda_error(err)


cdef int get_device() except -1 nogil:
    cdef int dev = 0
    guard()
    check(cudaGetDevice(&dev))
    return dev


cdef int set_device(int dev) except -1 nogil:
    guard()
    return check(cudaSetDevice(dev))


cdef int device_get_attribute(int* value, cudaDeviceAttr attr, int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGetAttribute(value, attr, dev))


cdef int device_get_name(char* out, size_t size, int dev) except -1 nogil:
    cdef cudaDeviceProp prop
    cdef size_t i
    guard()
    check(cudaGetDeviceProperties(&prop, dev))
    for i in range(size - 1):
        out[i] = prop.name[i]
        if prop.name[i] == 0:
            break
    out[size - 1] = 0
    return 0


cdef int device_get_stream_priority_range(int* least, int* greatest) except -1 nogil:
    guard()
    return check(cudaDeviceGetStreamPriorityRange(least, greatest))


cdef int ctx_reset_persisting_l2_cache() except -1 nogil:
    guard()
    return check(cudaCtxResetPersistingL2Cache())


cdef unsigned long long device_synchronize_request(int dev) except 0 nogil:
    cdef cudaError_t err = cudaSuccess
    cdef unsigned long long ticket
    guard()
    ticket = streams_devsync_request(dev, &err)
    if ticket == 0:
        check(err)
        with gil:
            raise RuntimeError("could not start the device-synchronize helper thread")
    return ticket


cdef int device_synchronize_wait(int dev, unsigned long long ticket, long long slice_ns,
                                 long long* in_flight_ns) except -1 nogil:
    cdef cudaError_t err = cudaSuccess
    cdef int done = streams_devsync_wait(dev, ticket, slice_ns, &err, in_flight_ns)
    if done:
        check(err)
    return done


### Stream management, and stream capture ##################################################
cdef int stream_create(cudaStream_t* out, unsigned int flags, int priority,
                       bint default_priority) except -1 nogil:
    cdef cudaError_t err
    guard()
    # The plainest call that expresses the request (all three end in the
    # same driver call; this keeps each one reachable).
    if default_priority and flags == cudaStreamDefault:
        err = cudaStreamCreate(out)
    elif default_priority:
        err = cudaStreamCreateWithFlags(out, flags)
    else:
        err = cudaStreamCreateWithPriority(out, flags, priority)
    check(err)
    streams_count(STREAMS_CNT_STREAM_CREATED)
    return 0


cdef int stream_query(cudaStream_t h) except -1 nogil:
    cdef cudaError_t err
    _guard_fast()
    err = cudaStreamQuery(h)
    if err == cudaSuccess:
        return 1
    if err == cudaErrorNotReady:
        return 0
    return check(err)


cdef int stream_synchronize(cudaStream_t h) except -1 nogil:
    _guard_fast()
    return check(cudaStreamSynchronize(h))


cdef int stream_wait_event(cudaStream_t h, cudaEvent_t ev, unsigned int flags) except -1 nogil:
    _guard_fast()
    return check(cudaStreamWaitEvent(h, ev, flags))


cdef int stream_wait_stream(cudaStream_t waiter, cudaStream_t other,
                            int other_device) except -1 nogil:
    cdef cudaEvent_t marker = NULL
    guard()
    check(streams_thread_marker(other_device, &marker))
    check(cudaEventRecord(marker, other))
    return check(cudaStreamWaitEvent(waiter, marker, 0))


cdef int stream_get_priority(cudaStream_t h, int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetPriority(h, out))


cdef int stream_get_flags(cudaStream_t h, unsigned int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetFlags(h, out))


cdef int stream_get_id(cudaStream_t h, unsigned long long* out) except -1 nogil:
    guard()
    return check(cudaStreamGetId(h, out))


cdef int stream_get_device(cudaStream_t h, int* out) except -1 nogil:
    guard()
    return check(cudaStreamGetDevice(h, out))


cdef int stream_get_attribute(cudaStream_t h, cudaStreamAttrID attr,
                              cudaStreamAttrValue* out) except -1 nogil:
    guard()
    return check(cudaStreamGetAttribute(h, attr, out))


cdef int stream_set_attribute(cudaStream_t h, cudaStreamAttrID attr,
                              const cudaStreamAttrValue* value) except -1 nogil:
    guard()
    return check(cudaStreamSetAttribute(h, attr, value))


cdef int stream_copy_attributes(cudaStream_t dst, cudaStream_t src) except -1 nogil:
    guard()
    return check(cudaStreamCopyAttributes(dst, src))


cdef int stream_attach_mem_async(cudaStream_t h, void* p, size_t length,
                                 unsigned int flags) except -1 nogil:
    guard()
    return check(cudaStreamAttachMemAsync(h, p, length, flags))


# ---- capture ----------------------------------------------------------------------------

# Captures begin and end inside a write hold of their stream's capture
# fence and the capture lock (src/cudart/fence.h): never in the middle of an
# enqueue on that stream that checked whether it captures, nor of an
# enqueue into a capture.  Called without the GIL.

cdef int stream_begin_capture(cudaStream_t h, cudaStreamCaptureMode mode) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamBeginCapture(h, mode)
    streams_fence_open(<void*>h)
    return check(err)


cdef int stream_begin_capture_to_graph(cudaStream_t h, cudaGraph_t g,
                                       const cudaGraphNode_t* deps, size_t n,
                                       cudaStreamCaptureMode mode) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamBeginCaptureToGraph(h, g, deps, NULL, n, mode)
    streams_fence_open(<void*>h)
    return check(err)


cdef int stream_end_capture(cudaStream_t h, cudaGraph_t* out) except -1 nogil:
    cdef cudaError_t err
    guard()
    streams_fence_close(<void*>h)
    err = cudaStreamEndCapture(h, out)
    streams_fence_open(<void*>h)
    return check(err)


cdef int fence_enter(cudaStream_t h) except -1 nogil:
    guard()
    streams_fence_enter(<void*>h)
    return 0


cdef void fence_leave(cudaStream_t h) noexcept nogil:
    streams_fence_leave(<void*>h)


cdef int capture_lock_enter() except -1 nogil:
    guard()
    streams_capture_enter()
    return 0


cdef void capture_lock_leave() noexcept nogil:
    streams_capture_leave()


cdef size_t fence_streams_now() noexcept nogil:
    return streams_fence_streams_now()


cdef bint stream_in_capture(cudaStream_t h) noexcept nogil:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef cudaError_t err
    if streams_gil_held_here():
        _note_cuda_with_gil()
    err = cudaStreamIsCapturing(h, &status)
    if err != cudaSuccess:
        cudaGetLastError()
        # Only the legacy stream's "cannot say while a blocking stream is
        # captured" passes: any other error (a handle CUDA no longer knows)
        # would not, and a free retried on it at every drain would hand the
        # driver that handle again and again; the free then reports its own
        # error instead.
        return err == cudaErrorStreamCaptureImplicit
    return status != cudaStreamCaptureStatusNone


cdef int stream_is_capturing(cudaStream_t h, cudaStreamCaptureStatus* out) except -1 nogil:
    guard()
    return check(cudaStreamIsCapturing(h, out))


cdef int stream_get_capture_info(cudaStream_t h, cudaStreamCaptureStatus* status,
                                 unsigned long long* cid, cudaGraph_t* graph,
                                 const cudaGraphNode_t** deps,
                                 const cudaGraphEdgeData** edges, size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaStreamGetCaptureInfo(h, status, cid, graph, deps, edges, n))


cdef int stream_capture_state_locked(cudaStream_t h, cudaStreamCaptureStatus* status,
                                     unsigned long long* cid) except -1 nogil:
    # Under the capture lock (src/cudart/fence.h): no capture begins or
    # ends meanwhile, on this stream or on the capture it may have joined
    # (an end takes every joined stream out of it); for callers inside the
    # stream's read fence, which covers this stream's own begin and end.
    cdef cudaError_t err
    guard()
    streams_capture_enter()
    err = streams_cudaStreamGetCaptureInfo(h, status, cid, NULL, NULL, NULL, NULL)
    streams_capture_leave()
    return check(err)


cdef int stream_update_capture_dependencies(cudaStream_t h, cudaGraphNode_t* deps, size_t n,
                                            unsigned int flags) except -1 nogil:
    guard()
    return check(streams_cudaStreamUpdateCaptureDependencies(h, deps, NULL, n, flags))


cdef int thread_exchange_capture_mode(cudaStreamCaptureMode* mode) except -1 nogil:
    guard()
    return check(cudaThreadExchangeStreamCaptureMode(mode))


### Event management #######################################################################
cdef int event_create(cudaEvent_t* out, unsigned int flags) except -1 nogil:
    guard()
    check(cudaEventCreateWithFlags(out, flags))
    streams_count(STREAMS_CNT_EVENT_CREATED)
    return 0


cdef int event_record(cudaEvent_t ev, cudaStream_t s, unsigned int flags) except -1 nogil:
    _guard_fast()
    if flags == cudaEventRecordDefault:
        return check(cudaEventRecord(ev, s))
    return check(cudaEventRecordWithFlags(ev, s, flags))


cdef int event_query(cudaEvent_t h) except -1 nogil:
    cdef cudaError_t err
    _guard_fast()
    err = cudaEventQuery(h)
    if err == cudaSuccess:
        return 1
    if err == cudaErrorNotReady:
        return 0
    return check(err)


cdef int event_synchronize(cudaEvent_t h) except -1 nogil:
    _guard_fast()
    return check(cudaEventSynchronize(h))


cdef int event_elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end) except -1 nogil:
    guard()
    return check(cudaEventElapsedTime(ms, start, end))


cdef int ipc_get_event_handle(cudaIpcEventHandle_t* out, cudaEvent_t h) except -1 nogil:
    guard()
    return check(cudaIpcGetEventHandle(out, h))


cdef int ipc_open_event_handle(cudaEvent_t* out, cudaIpcEventHandle_t handle) except -1 nogil:
    guard()
    check(cudaIpcOpenEventHandle(out, handle))
    streams_count(STREAMS_CNT_EVENT_CREATED)
    return 0


### Execution control: host functions, function attributes, kernel launches ################
# ---- host functions ---------------------------------------------------------------------

cdef void set_dispatcher(dispatch_fn fn) noexcept:
    global streams_dispatch
    streams_dispatch = <streams_dispatch_fn>fn


cdef int _ticket_failed(unsigned long long ticket, cudaError_t err) except -1 nogil:
    # Not enqueued: the slot is free again, the payload still the caller's.
    streams_ticket_take(ticket)
    return check(err)


cdef unsigned long long _ticket(void* payload) except 0 nogil:
    cdef unsigned long long ticket = streams_ticket_new(payload)
    if ticket == 0:
        with gil:
            raise MemoryError("no slot left for a one-shot host function")
    return ticket


# The driver's host-function launch with a sync mode (CUDA 13.1's ABI of
# cuLaunchHostFunc), resolved at first use; NULL until then.
cdef void* _host_fn_v2 = NULL


cdef int _raise_no_sync_mode(int driver, cudaError_t err) except -1:
    cdef int runtime = 0
    cudaGetLastError()
    _versions(&driver, &runtime)
    raise NotImplementedError(
        "sync_mode='spin_wait' needs a driver for CUDA 13.1 or newer and streams built "
        "against a CUDA 12.5 or newer runtime (cudaGetDriverEntryPointByVersion; the "
        f"spin-wait host function is the driver's cuLaunchHostFunc at ABI 13010): this "
        f"driver supports CUDA {_version_str(driver)}, this build uses the CUDA "
        f"{_version_str(runtime)} runtime (CUDA said: {error_name(<int>err)})")


cdef int check_host_func_sync_mode(int sync_mode) except -1:
    global _host_fn_v2
    cdef int driver = 0, runtime = 0
    cdef void* fn = NULL
    cdef cudaError_t err = cudaSuccess
    if sync_mode == 0 or streams_ptr_load(&_host_fn_v2) != NULL:
        return 0
    if sync_mode != 1:
        raise ValueError(f"sync_mode must be 0 (blocking) or 1 (spin_wait), got {sync_mode}")
    refuse_forbidden()
    _versions(&driver, &runtime)
    with nogil:
        if driver >= STREAMS_HOST_FN_SYNC_VERSION:
            err = streams_get_driver_entry_at(b"cuLaunchHostFunc", &fn,
                                              STREAMS_HOST_FN_SYNC_VERSION)
        else:
            err = cudaErrorNotSupported
    if err != cudaSuccess or fn == NULL:
        return _raise_no_sync_mode(driver, err)
    # Published atomically: a racing second resolution writes the same.
    streams_ptr_store(&_host_fn_v2, fn)
    return 0


cdef int _launch_host_fn(cudaStream_t h, cudaHostFn_t fn, void* data,
                         int sync_mode) except -1 nogil:
    cdef int dev = 0
    cdef void* v2
    guard()
    if sync_mode == 0:
        return check(cudaLaunchHostFunc(h, fn, data))
    v2 = streams_ptr_load(&_host_fn_v2)
    if v2 == NULL:
        # Every enqueue resolves it first, with the GIL and outside the
        # capture fence; this is the backstop (a read hold of the fence may
        # take the GIL, it never waits for the fence with it).
        with gil:
            check_host_func_sync_mode(sync_mode)
        v2 = streams_ptr_load(&_host_fn_v2)
    # A driver call needs a current context, which a thread gets from the
    # runtime only at its first call that uses the device (see _value_op).
    check(cudaGetDevice(&dev))
    check(cudaSetDevice(dev))
    return check(<cudaError_t>(<streams_launch_host_func_v2_fn>v2)(
        h, fn, data, <unsigned int>sync_mode))


cdef int _launch_one_shot(cudaStream_t h, cudaHostFn_t trampoline, void* payload,
                          int sync_mode) except -1 nogil:
    # `payload` travels as a ticket (shim.h): a capture that took the work
    # item in behind the fence's back calls it at its first replay only.
    cdef unsigned long long ticket = _ticket(payload)
    cdef bint enqueued = False
    try:
        _launch_host_fn(h, trampoline, <void*><uintptr_t>ticket, sync_mode)
        enqueued = True
    finally:
        if not enqueued:
            # The slot is free again, the payload still the caller's.
            streams_ticket_take(ticket)
    return 0


cdef int launch_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil:
    return _launch_one_shot(h, streams_host_fn_trampoline, <void*>payload, sync_mode)


cdef int launch_graph_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil:
    return _launch_host_fn(h, streams_graph_host_fn_trampoline, <void*>payload, sync_mode)


cdef int launch_native_host_func(cudaStream_t h, host_fn fn, void* data, PyObject* keep,
                                 int sync_mode) except -1 nogil:
    cdef streams_native_call* record
    cdef bint enqueued = False
    if keep == NULL:
        # Nothing to keep: exactly the C call (the floor of the benchmark).
        return _launch_host_fn(h, <cudaHostFn_t>fn, data, sync_mode)
    record = streams_native_call_new(<streams_host_fn_t>fn, data, keep)
    if record == NULL:
        with gil:
            raise MemoryError()
    # Counted before the launch: the trampoline may count it done at once.
    streams_count(STREAMS_CNT_NATIVE_CALL_ENQUEUED)
    try:
        _launch_one_shot(h, streams_native_host_fn_trampoline, <void*>record, sync_mode)
        enqueued = True
    finally:
        if not enqueued:
            free(record)     # the reference stays the caller's
            streams_count(STREAMS_CNT_NATIVE_CALL_DONE)
    return 0


cdef host_fn testing_native_increment() noexcept nogil:
    return <host_fn>streams_testing_native_increment


cdef void producer_enter() noexcept nogil:
    streams_producer_enter()


cdef void producer_leave() noexcept nogil:
    streams_producer_leave()


cdef int call_on_native_thread(PyObject* payload, int count) except -1 nogil:
    if streams_call_on_native_thread(<void*>payload, count) != 0:
        with gil:
            raise OSError("could not start a thread")
    return 0


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


cdef int stream_add_callback(cudaStream_t h, PyObject* payload) except -1 nogil:
    cdef unsigned long long ticket
    cdef cudaError_t err
    guard()
    ticket = _ticket(<void*>payload)
    err = cudaStreamAddCallback(h, streams_stream_callback_trampoline,
                                <void*><uintptr_t>ticket, 0)
    if err != cudaSuccess:
        return _ticket_failed(ticket, err)
    return 0


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


def _shutdown():
    """atexit hook: stop callbacks from entering Python, then let those
    already on their way finish (bounded), so that no CUDA thread is left
    waiting for the GIL while the interpreter finalizes."""
    # Release failures still queued (from threads without the GIL) are
    # reported while warnings can still be shown; later releases are
    # skipped at shutdown, so nothing more can fail.
    flush_cleanup_warnings()
    streams_mark_shutting_down()
    with nogil:
        streams_wait_trampolines_idle(2000000000)


# ---- kernels -----------------------------------------------------------------------------

cdef int func_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil:
    guard()
    return check(cudaFuncGetAttributes(out, func))


cdef int func_set_attribute(const void* func, cudaFuncAttribute attr,
                            int value) except -1 nogil:
    guard()
    return check(cudaFuncSetAttribute(func, attr, value))


cdef int func_get_param_info(const void* func, size_t index, size_t* offset,
                             size_t* size) except -1 nogil:
    """0 with the parameter's offset and size; 1 past the last parameter;
    2 when this runtime cannot tell (older than CUDA 12.6)."""
    cdef cudaError_t err
    guard()
    err = streams_cudaFuncGetParamInfo(func, index, offset, size)
    if err == cudaSuccess:
        return 0
    cudaGetLastError()
    if err == cudaErrorInvalidValue:
        return 1
    if err == cudaErrorNotSupported:
        return 2
    return check(err)


cdef int launch_kernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                       cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaLaunchKernel(func, grid, block, args, shared, s))


cdef int launch_kernel_ex(const cudaLaunchConfig_t* config, const void* func,
                          void** args) except -1 nogil:
    guard()
    return check(cudaLaunchKernelExC(config, func, args))


cdef int launch_notify(cudaStream_t s, void* node) except -1 nogil:
    cdef unsigned long long ticket
    cdef cudaError_t err
    guard()
    ticket = _ticket(node)
    err = cudaLaunchHostFunc(s, streams_notify_ticket_fn, <void*><uintptr_t>ticket)
    if err != cudaSuccess:
        return _ticket_failed(ticket, err)
    return 0


### Memory management, and stream memory operations ########################################
cdef int host_alloc(void** out, size_t n) except -1 nogil:
    guard()
    check(cudaHostAlloc(out, n, cudaHostAllocDefault))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int malloc_managed(void** out, size_t n, unsigned int flags) except -1 nogil:
    guard()
    check(cudaMallocManaged(out, n, flags))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int pointer_get_attributes(cudaPointerAttributes* out, const void* p) except -1 nogil:
    """The cudaError_t of cudaPointerGetAttributes (0: ``out`` is filled)."""
    cdef cudaError_t err
    guard()
    err = cudaPointerGetAttributes(out, p)
    if err != cudaSuccess:
        cudaGetLastError()
    return <int>err


cdef int memset_async(void* p, int value, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemsetAsync(p, value, n, s))


cdef int memcpy_async(void* dst, const void* src, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s))


cdef int memcpy_batch_async(void** dsts, void** srcs, size_t* sizes, size_t count,
                            cudaStream_t s) except -1 nogil:
    guard()
    if not STREAMS_HAVE_MEMCPY_BATCH:
        return -2
    return check(streams_cudaMemcpyBatchAsync(dsts, srcs, sizes, count, s))


# ---- stream memory operations (the driver's, through its entry points) -------------------

# The driver functions reached through the entry-point table, in the order
# of _DRIVER_NAMES; each 32-bit value operation is followed by its 64-bit
# form.  Resolved at first use and published with one atomic store each (a
# racing second resolution writes the same), so a thread without the GIL
# reads either NULL or the whole pointer.
cdef enum _DriverFn:
    DRIVER_WAIT_VALUE32
    DRIVER_WAIT_VALUE64
    DRIVER_WRITE_VALUE32
    DRIVER_WRITE_VALUE64
    DRIVER_NODE_GET_TYPE
    DRIVER_FN_COUNT


cdef void* _driver_fns[DRIVER_FN_COUNT]


cdef const char* _DRIVER_NAMES[DRIVER_FN_COUNT]
_DRIVER_NAMES[:] = [b"cuStreamWaitValue32", b"cuStreamWaitValue64", b"cuStreamWriteValue32",
                    b"cuStreamWriteValue64", b"cuGraphNodeGetType"]


ctypedef int (*_node_type_fn)(cudaGraphNode_t node, int* out) noexcept nogil


cdef void* _entry_once(void** slot, const char* name) except NULL nogil:
    # The driver's `name`, resolved at its first use and published in `slot`
    # with one atomic store (a racing second resolution writes the same).
    cdef void* fn = streams_ptr_load(slot)
    if fn == NULL:
        check(streams_get_driver_entry(name, &fn))
        streams_ptr_store(slot, fn)
    return fn


cdef void* _driver_fn(int which) except NULL nogil:
    return _entry_once(&_driver_fns[which], _DRIVER_NAMES[which])


cdef int _value_op(int which, cudaStream_t s, unsigned long long addr,
                   unsigned long long value, unsigned int flags, bint wide) except -1 nogil:
    cdef void* fn
    cdef int dev = 0
    guard()
    fn = _driver_fn(which + (1 if wide else 0))
    # The driver call needs a current context, which a thread gets from
    # the runtime only at its first call that uses the device: bind the
    # current device's primary context now (a no-op when it is bound).
    check(cudaGetDevice(&dev))
    check(cudaSetDevice(dev))
    if wide:
        return check(<cudaError_t>(<streams_stream_value64_fn>fn)(s, addr, value, flags))
    return check(<cudaError_t>(<streams_stream_value32_fn>fn)(s, addr, <unsigned int>value,
                                                             flags))


cdef int stream_wait_value(cudaStream_t s, unsigned long long addr, unsigned long long value,
                           unsigned int flags, bint wide) except -1 nogil:
    return _value_op(DRIVER_WAIT_VALUE32, s, addr, value, flags, wide)


cdef int stream_write_value(cudaStream_t s, unsigned long long addr, unsigned long long value,
                            unsigned int flags, bint wide) except -1 nogil:
    return _value_op(DRIVER_WRITE_VALUE32, s, addr, value, flags, wide)


### Stream-ordered memory allocator: asynchronous allocations and memory pools #############
cdef int malloc_async(void** out, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    check(cudaMallocAsync(out, n, s))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int free_async(void* p, cudaStream_t s) except -1 nogil:
    guard()
    check(cudaFreeAsync(p, s))
    streams_count(STREAMS_CNT_MEMORY_FREE)
    streams_note_async_free()
    return 0


cdef unsigned long long async_frees() noexcept nogil:
    return streams_async_frees_so_far()


# ---- memory pools ------------------------------------------------------------------------

# Stream-ordered pools and their IPC, batched copies, the driver's stream
# memory operations (reached through cudart's entry points: no libcuda link)
# and the asyncio doorbell host function.

cdef int mem_pool_create(cudaMemPool_t* out, int dev, bint ipc, size_t max_size) except -1 nogil:
    cdef cudaMemPoolProps props
    guard()
    memset(&props, 0, sizeof(props))
    props.allocType = cudaMemAllocationTypePinned
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor if ipc else cudaMemHandleTypeNone
    props.location.type = cudaMemLocationTypeDevice
    props.location.id = dev
    props.maxSize = max_size
    check(cudaMemPoolCreate(out, &props))
    streams_count(STREAMS_CNT_MEMPOOL_CREATED)
    return 0


cdef int device_get_default_mem_pool(cudaMemPool_t* out, int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGetDefaultMemPool(out, dev))


cdef int malloc_from_pool_async(void** out, size_t n, cudaMemPool_t pool,
                                cudaStream_t s) except -1 nogil:
    guard()
    check(cudaMallocFromPoolAsync(out, n, pool, s))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int mem_pool_trim_to(cudaMemPool_t pool, size_t keep) except -1 nogil:
    guard()
    return check(cudaMemPoolTrimTo(pool, keep))


cdef int mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                void* value) except -1 nogil:
    guard()
    return check(cudaMemPoolGetAttribute(pool, attr, value))


cdef int mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                void* value) except -1 nogil:
    guard()
    return check(cudaMemPoolSetAttribute(pool, attr, value))


cdef int mem_pool_set_access(cudaMemPool_t pool, int dev,
                             cudaMemAccessFlags flags) except -1 nogil:
    cdef cudaMemAccessDesc desc
    guard()
    memset(&desc, 0, sizeof(desc))
    desc.location.type = cudaMemLocationTypeDevice
    desc.location.id = dev
    desc.flags = flags
    return check(cudaMemPoolSetAccess(pool, &desc, 1))


cdef int mem_pool_get_access(cudaMemPool_t pool, int dev,
                             cudaMemAccessFlags* out) except -1 nogil:
    cdef cudaMemLocation loc
    guard()
    memset(&loc, 0, sizeof(loc))
    loc.type = cudaMemLocationTypeDevice
    loc.id = dev
    return check(cudaMemPoolGetAccess(out, pool, &loc))


cdef int mem_pool_export_fd(cudaMemPool_t pool, int* fd) except -1 nogil:
    guard()
    return check(cudaMemPoolExportToShareableHandle(<void*>fd, pool,
                                                    cudaMemHandleTypePosixFileDescriptor, 0))


cdef int mem_pool_import_fd(cudaMemPool_t* out, int fd) except -1 nogil:
    guard()
    # The POSIX handle type passes the descriptor itself, as the pointer.
    check(cudaMemPoolImportFromShareableHandle(out, <void*><uintptr_t>fd,
                                               cudaMemHandleTypePosixFileDescriptor, 0))
    streams_count(STREAMS_CNT_MEMPOOL_CREATED)
    return 0


cdef int mem_pool_export_pointer(cudaMemPoolPtrExportData* out, void* p) except -1 nogil:
    guard()
    return check(cudaMemPoolExportPointer(out, p))


cdef int mem_pool_import_pointer(void** out, cudaMemPool_t pool,
                                 cudaMemPoolPtrExportData* data) except -1 nogil:
    guard()
    check(cudaMemPoolImportPointer(out, pool, data))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


### Peer device memory access ##############################################################
cdef int device_can_access_peer(int dev, int peer) except -1 nogil:
    cdef int can = 0
    guard()
    check(cudaDeviceCanAccessPeer(&can, dev, peer))
    return 1 if can else 0


cdef int device_set_peer_access(int peer, bint enable) except -1 nogil:
    # The state asked for being already there is not an error here.
    cdef cudaError_t err, unchanged
    guard()
    if enable:
        err = cudaDeviceEnablePeerAccess(peer, 0)
        unchanged = cudaErrorPeerAccessAlreadyEnabled
    else:
        err = cudaDeviceDisablePeerAccess(peer)
        unchanged = cudaErrorPeerAccessNotEnabled
    if err == unchanged:
        cudaGetLastError()
        return 0
    check(err)
    return 1


cdef int memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t n,
                           cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, n, s))


### Graph management #######################################################################
cdef int graph_create(cudaGraph_t* out) except -1 nogil:
    guard()
    check(cudaGraphCreate(out, 0))
    streams_count(STREAMS_CNT_GRAPH_CREATED)
    return 0


cdef void count_graph_adopted() noexcept nogil:
    # A graph CUDA made (end of a capture) and streams now owns.
    streams_count(STREAMS_CNT_GRAPH_CREATED)


cdef int graph_clone(cudaGraph_t* out, cudaGraph_t g) except -1 nogil:
    guard()
    check(cudaGraphClone(out, g))
    streams_count(STREAMS_CNT_GRAPH_CREATED)
    return 0


cdef int graph_get_nodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) except -1 nogil:
    guard()
    return check(cudaGraphGetNodes(g, nodes, n))


cdef int graph_get_edges(cudaGraph_t g, cudaGraphNode_t* src, cudaGraphNode_t* dst,
                         cudaGraphEdgeData* data, size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaGraphGetEdges(g, src, dst, data, n))


cdef int graph_node_get_type(cudaGraphNode_t node, cudaGraphNodeType* out) except -1 nogil:
    cdef cudaError_t err
    cdef int t = 0
    guard()
    err = cudaGraphNodeGetType(node, out)
    if err == cudaErrorUnknown:
        # A static cudart 12 under a CUDA 13 driver fails to translate the
        # type of a conditional node (seen: 12.9 on driver 580, an H100).
        # The driver's own answer uses the numbering cudart's enum shares.
        cudaGetLastError()
        err = <cudaError_t>(<_node_type_fn>_driver_fn(DRIVER_NODE_GET_TYPE))(node, &t)
        if err == cudaSuccess:
            out[0] = <cudaGraphNodeType>t
    return check(err)


cdef int graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                     size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaGraphNodeGetDependencies(node, deps, NULL, n))


cdef int graph_add_empty_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                              size_t n) except -1 nogil:
    guard()
    return check(cudaGraphAddEmptyNode(out, g, deps, n))


cdef int graph_add_kernel_node(cudaGraphNode_t* out, cudaGraph_t g,
                               const cudaGraphNode_t* deps, size_t n,
                               const cudaKernelNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddKernelNode(out, g, deps, n, params))


cdef int graph_add_memset_node(cudaGraphNode_t* out, cudaGraph_t g,
                               const cudaGraphNode_t* deps, size_t n,
                               const cudaMemsetParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddMemsetNode(out, g, deps, n, params))


cdef int graph_add_memcpy_node_1d(cudaGraphNode_t* out, cudaGraph_t g,
                                  const cudaGraphNode_t* deps, size_t n, void* dst,
                                  const void* src, size_t count) except -1 nogil:
    guard()
    return check(cudaGraphAddMemcpyNode1D(out, g, deps, n, dst, src, count, cudaMemcpyDefault))


cdef int graph_add_child_graph_node(cudaGraphNode_t* out, cudaGraph_t g,
                                    const cudaGraphNode_t* deps, size_t n,
                                    cudaGraph_t child) except -1 nogil:
    guard()
    return check(cudaGraphAddChildGraphNode(out, g, deps, n, child))


cdef int graph_add_event_record_node(cudaGraphNode_t* out, cudaGraph_t g,
                                     const cudaGraphNode_t* deps, size_t n,
                                     cudaEvent_t ev) except -1 nogil:
    guard()
    return check(cudaGraphAddEventRecordNode(out, g, deps, n, ev))


cdef int graph_add_event_wait_node(cudaGraphNode_t* out, cudaGraph_t g,
                                   const cudaGraphNode_t* deps, size_t n,
                                   cudaEvent_t ev) except -1 nogil:
    guard()
    return check(cudaGraphAddEventWaitNode(out, g, deps, n, ev))


cdef int graph_debug_dot_print(cudaGraph_t g, const char* path,
                               unsigned int flags) except -1 nogil:
    guard()
    return check(cudaGraphDebugDotPrint(g, path, flags))


cdef int graph_instantiate(cudaGraphExec_t* out, cudaGraph_t g,
                           unsigned long long flags) except -1 nogil:
    guard()
    check(cudaGraphInstantiateWithFlags(out, g, flags))
    streams_count(STREAMS_CNT_EXEC_CREATED)
    return 0


cdef int graph_launch(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaGraphLaunch(ex, s))


cdef int graph_upload(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaGraphUpload(ex, s))


cdef int graph_exec_update(cudaGraphExec_t ex, cudaGraph_t g,
                           cudaGraphExecUpdateResultInfo* info) except -1 nogil:
    """0 when updated, 1 when CUDA refused the update (``info`` says why)."""
    cdef cudaError_t err
    guard()
    err = cudaGraphExecUpdate(ex, g, info)
    if err == cudaSuccess:
        return 0
    if err == cudaErrorGraphExecUpdateFailure:
        cudaGetLastError()
        return 1
    return check(err)


# ---- host nodes (their payloads: see host functions above) -------------------------------

cdef int graph_add_native_host_node(cudaGraphNode_t* out, cudaGraph_t g,
                                    const cudaGraphNode_t* deps, size_t n, host_fn fn,
                                    void* data) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = <cudaHostFn_t>fn
    params.userData = data
    return check(cudaGraphAddHostNode(out, g, deps, n, &params))


cdef int graph_exec_native_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                                host_fn fn, void* data) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = <cudaHostFn_t>fn
    params.userData = data
    return check(cudaGraphExecHostNodeSetParams(ex, node, &params))


cdef int graph_attach_reference(cudaGraph_t g, PyObject* obj, bint* moved) except -1 nogil:
    """Give graph ``g`` a CUDA user object owning a reference to ``obj`` that
    the caller took.  ``moved`` tells whether the reference went to a user
    object (which then drops it, even when this raises); if not, it is still
    the caller's to drop."""
    cdef cudaUserObject_t uo = NULL
    cdef cudaError_t err
    moved[0] = False
    guard()
    err = cudaUserObjectCreate(&uo, <void*>obj, streams_user_object_release, 1,
                               cudaUserObjectNoDestructorSync)
    if err != cudaSuccess:
        return check(err)
    moved[0] = True
    err = cudaGraphRetainUserObject(g, uo, 1, cudaGraphUserObjectMove)
    if err != cudaSuccess:
        cudaUserObjectRelease(uo, 1)
        return check(err)
    return 0


cdef int graph_attach_payload(cudaGraph_t g, PyObject* payload) except -1:
    """Give graph ``g`` a CUDA user object owning one reference to ``payload``."""
    return graph_attach_owned(g, payload, NULL)


cdef int graph_add_host_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                             size_t n, PyObject* payload) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = streams_graph_host_fn_trampoline
    params.userData = <void*>payload
    return check(cudaGraphAddHostNode(out, g, deps, n, &params))


# ---- user objects, conditional and memory nodes, executable updates ----------------------

# Conditional and memory nodes, node-by-node updates of executables, and
# the user objects that keep what an executable needs alive.

cdef int graph_attach_owned(cudaGraph_t g, PyObject* obj, cudaUserObject_t* out) except -1:
    """Give graph ``g`` a CUDA user object owning one reference to ``obj``;
    ``out`` (if not NULL) gets the user object, to release from ``g`` later.
    CUDA drops the reference once no graph or executable (nor a replay
    still in flight) holds the user object."""
    cdef cudaUserObject_t uo = NULL
    cdef cudaError_t err
    refuse_forbidden()
    streams_payload_incref(obj)
    with nogil:
        err = cudaUserObjectCreate(&uo, <void*>obj, streams_user_object_release, 1,
                                   cudaUserObjectNoDestructorSync)
    if err != cudaSuccess:
        streams_payload_decref(obj)
        return check(err)
    with nogil:
        err = cudaGraphRetainUserObject(g, uo, 1, cudaGraphUserObjectMove)
        if err != cudaSuccess:
            # Our reference dies with the user object (via the deferred queue).
            cudaUserObjectRelease(uo, 1)
    check(err)
    if out != NULL:
        out[0] = uo
    return 0


cdef int graph_release_user_object(cudaGraph_t g, cudaUserObject_t uo) except -1 nogil:
    guard()
    return check(cudaGraphReleaseUserObject(g, uo, 1))


cdef int graph_destroy_node(cudaGraphNode_t node) except -1 nogil:
    guard()
    return check(cudaGraphDestroyNode(node))


cdef int graph_conditional_handle_create(cudaGraphConditionalHandle* out, cudaGraph_t g,
                                         unsigned int default_value,
                                         unsigned int flags) except -1 nogil:
    guard()
    return check(cudaGraphConditionalHandleCreate(out, g, default_value, flags))


cdef int graph_add_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                        size_t n, cudaGraphNodeParams* params) except -1 nogil:
    guard()
    return check(streams_cudaGraphAddNode(out, g, deps, n, params))


cdef int graph_add_mem_alloc_node(cudaGraphNode_t* out, cudaGraph_t g,
                                  const cudaGraphNode_t* deps, size_t n,
                                  cudaMemAllocNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddMemAllocNode(out, g, deps, n, params))


cdef int graph_add_mem_free_node(cudaGraphNode_t* out, cudaGraph_t g,
                                 const cudaGraphNode_t* deps, size_t n,
                                 void* dptr) except -1 nogil:
    guard()
    return check(cudaGraphAddMemFreeNode(out, g, deps, n, dptr))


cdef int device_get_graph_mem_attribute(int dev, cudaGraphMemAttributeType attr,
                                        unsigned long long* value) except -1 nogil:
    guard()
    return check(cudaDeviceGetGraphMemAttribute(dev, attr, <void*>value))


cdef int device_reset_graph_mem_high(int dev) except -1 nogil:
    # CUDA accepts only zero: the high watermarks restart from what is used now.
    cdef unsigned long long zero = 0
    guard()
    check(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, <void*>&zero))
    return check(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh,
                                                <void*>&zero))


cdef int device_graph_mem_trim(int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGraphMemTrim(dev))


cdef int graph_kernel_node_set_attribute(cudaGraphNode_t node, cudaLaunchAttributeID attr,
                                         const cudaLaunchAttributeValue* value) except -1 nogil:
    guard()
    return check(cudaGraphKernelNodeSetAttribute(node, attr, value))


cdef int graph_exec_kernel_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                           const cudaKernelNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphExecKernelNodeSetParams(ex, node, params))


cdef int graph_exec_memset_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                           const cudaMemsetParams* params) except -1 nogil:
    guard()
    return check(cudaGraphExecMemsetNodeSetParams(ex, node, params))


cdef int graph_exec_memcpy_node_set_params_1d(cudaGraphExec_t ex, cudaGraphNode_t node,
                                              void* dst, const void* src,
                                              size_t count) except -1 nogil:
    guard()
    return check(cudaGraphExecMemcpyNodeSetParams1D(ex, node, dst, src, count,
                                                    cudaMemcpyDefault))


cdef int graph_exec_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                         PyObject* payload) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = streams_graph_host_fn_trampoline
    params.userData = <void*>payload
    return check(cudaGraphExecHostNodeSetParams(ex, node, &params))


cdef int graph_exec_child_graph_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                                cudaGraph_t child) except -1 nogil:
    guard()
    return check(cudaGraphExecChildGraphNodeSetParams(ex, node, child))


cdef int graph_exec_event_node_set_event(cudaGraphExec_t ex, cudaGraphNode_t node,
                                         cudaEvent_t ev, bint record) except -1 nogil:
    guard()
    if record:
        return check(cudaGraphExecEventRecordNodeSetEvent(ex, node, ev))
    return check(cudaGraphExecEventWaitNodeSetEvent(ex, node, ev))


cdef int graph_node_set_enabled(cudaGraphExec_t ex, cudaGraphNode_t node,
                                bint enabled) except -1 nogil:
    guard()
    return check(cudaGraphNodeSetEnabled(ex, node, 1 if enabled else 0))


cdef int graph_node_get_enabled(cudaGraphExec_t ex, cudaGraphNode_t node,
                                unsigned int* enabled) except -1 nogil:
    guard()
    return check(cudaGraphNodeGetEnabled(ex, node, enabled))


### Library management #####################################################################
cdef int library_load_data(cudaLibrary_t* out, const void* image, bint resident) except -1 nogil:
    guard()
    check(cudaLibraryLoadData(out, image, NULL, NULL, 0, NULL, NULL, 0))
    if not resident:   # the package's built-in kernels stay for the process
        streams_count(STREAMS_CNT_MODULE_CREATED)
        streams_count(STREAMS_CNT_MODULE_LOAD)
    return 0


cdef int library_load_from_file(cudaLibrary_t* out, const char* path) except -1 nogil:
    guard()
    check(cudaLibraryLoadFromFile(out, path, NULL, NULL, 0, NULL, NULL, 0))
    streams_count(STREAMS_CNT_MODULE_CREATED)
    streams_count(STREAMS_CNT_MODULE_LOAD)
    return 0


cdef cudaError_t _sync_devices(unsigned long long devices) noexcept nogil:
    # A library must not go while kernels of it are queued or running: wait
    # for every device one of its kernels was launched on.
    cdef int cur = -1, dev
    cdef cudaError_t err = cudaSuccess, e
    if devices == 0:
        return cudaSuccess
    if cudaGetDevice(&cur) != cudaSuccess:
        return cudaGetLastError()
    for dev in range(64):
        if devices & ((<unsigned long long>1) << dev):
            e = cudaSetDevice(dev)
            if e == cudaSuccess:
                e = cudaDeviceSynchronize()
            if e != cudaSuccess and err == cudaSuccess:
                err = e
    cudaSetDevice(cur)
    return err


cdef int library_unload(cudaLibrary_t lib, unsigned long long devices) except -1 nogil:
    guard()
    check(_sync_devices(devices))
    check(cudaLibraryUnload(lib))
    streams_count(STREAMS_CNT_MODULE_DESTROYED)
    streams_count(STREAMS_CNT_MODULE_UNLOAD)
    return 0


cdef struct _LibraryRelease:
    cudaLibrary_t lib
    unsigned long long devices


cdef void _unload_library_later(void* arg, int kind) noexcept nogil:
    cdef _LibraryRelease* rel = <_LibraryRelease*>arg
    cdef int injected = injected_failure(CLEANUP_LIBRARY)
    cdef cudaError_t err = _sync_devices(rel.devices)
    cdef cudaError_t unload = cudaLibraryUnload(rel.lib)
    if unload != cudaSuccess:
        cudaGetLastError()
        err = unload
    elif err != cudaSuccess:
        cudaGetLastError()
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(CLEANUP_LIBRARY, <const void*>rel.lib, <int>err)
    free(rel)


cdef void release_library(cudaLibrary_t lib, unsigned long long devices) noexcept nogil:
    cdef _LibraryRelease* rel
    cdef int decision = _release_decision()
    streams_count(STREAMS_CNT_MODULE_DESTROYED)
    streams_count(STREAMS_CNT_MODULE_UNLOAD)
    if decision == RELEASE_SKIP:
        return
    rel = <_LibraryRelease*>malloc(sizeof(_LibraryRelease))
    if rel == NULL:
        return   # out of memory: the library stays loaded, which is safe
    rel.lib = lib
    rel.devices = devices
    if decision == RELEASE_NOW:
        streams_release_without_gil(_unload_library_later, <void*>rel, 0)
        _flush_if_gil()
    else:
        streams_defer(_unload_library_later, <void*>rel, 0, NULL)


cdef int library_get_kernel(cudaKernel_t* out, cudaLibrary_t lib,
                            const char* name) except -1 nogil:
    guard()
    return check(cudaLibraryGetKernel(out, lib, name))


# ---- module state -------------------------------------------------------------------------

# A module object can outlive one interpreter (an embedding application that
# finalizes Python and initializes it again): start each life open.
streams_clear_shutting_down()
if streams_install_fork_handler() != 0:
    raise ImportError("streams: pthread_atfork failed")


# ---- green contexts: begin ----
# The runtime's own green-context API (cudaGreenCtxCreate and the
# execution-context calls, CUDA 13.1) where this build's runtime and the
# driver both have it; otherwise the driver's green-context calls (CUDA
# 12.4/12.5), reached through the runtime's entry points at the ABI of
# STREAMS_GREEN_VERSION, so that the CUDA 12 build and a CUDA 13 build on a
# 13.0 driver have them too.  The choice is made once per process, before
# the first context: a context is always destroyed by the API that made it.
cdef extern from "green.h" nogil:
    ctypedef int (*streams_device_get_dev_resource_fn)(int dev, streams_dev_resource* out,
                                                       int type)
    ctypedef int (*streams_sm_split_fn)(streams_dev_resource* result, unsigned int* groups,
                                        const streams_dev_resource* input,
                                        streams_dev_resource* remaining, unsigned int flags,
                                        unsigned int min_count)
    ctypedef int (*streams_generate_desc_fn)(streams_resource_desc* out,
                                             streams_dev_resource* resources, unsigned int n)
    ctypedef int (*streams_green_create_fn)(streams_green_ctx* out, streams_resource_desc desc,
                                            int dev, unsigned int flags)
    ctypedef int (*streams_green_destroy_fn)(streams_green_ctx ctx)
    ctypedef int (*streams_green_stream_create_fn)(void** stream, streams_green_ctx ctx,
                                                   unsigned int flags, int priority)
    ctypedef int (*streams_green_get_resource_fn)(streams_green_ctx ctx,
                                                  streams_dev_resource* out, int type)
    ctypedef int (*streams_stream_get_green_fn)(void* stream, streams_green_ctx* out)
    ctypedef int (*streams_stream_get_resource_fn)(void* stream, streams_dev_resource* out,
                                                   int type)
    ctypedef int (*streams_green_record_event_fn)(streams_green_ctx ctx, void* event)
    enum:
        STREAMS_GREEN_CTX_DEFAULT_STREAM
        STREAMS_STREAM_NON_BLOCKING
        STREAMS_GREEN_VERSION
        STREAMS_STREAM_RESOURCE_VERSION

cdef extern from "green_rt.h" nogil:
    cudaError_t streams_rt_device_sm_resource(int dev, streams_dev_resource* out)
    cudaError_t streams_rt_sm_split(streams_dev_resource* result, unsigned int* groups,
                                    const streams_dev_resource* input,
                                    streams_dev_resource* remaining, unsigned int min_count)
    cudaError_t streams_rt_green_create(streams_green_ctx* out, streams_dev_resource* resource,
                                        int dev)
    cudaError_t streams_rt_green_destroy(streams_green_ctx ctx)
    cudaError_t streams_rt_green_stream_create(cudaStream_t* out, streams_green_ctx ctx,
                                               int priority)
    cudaError_t streams_rt_green_sm_resource(streams_green_ctx ctx, streams_dev_resource* out)
    cudaError_t streams_rt_green_record_event(streams_green_ctx ctx, cudaEvent_t ev)
    enum:
        STREAMS_HAVE_RUNTIME_GREEN
        STREAMS_RUNTIME_GREEN_VERSION

cdef enum:
    _G_GET_RESOURCE
    _G_SPLIT
    _G_DESC
    _G_CREATE
    _G_DESTROY
    _G_STREAM_CREATE
    _G_CTX_RESOURCE
    _G_STREAM_GREEN
    _G_N
cdef const char* _GREEN_NAMES[_G_N]
_GREEN_NAMES[:] = [b"cuDeviceGetDevResource", b"cuDevSmResourceSplitByCount",
                   b"cuDevResourceGenerateDesc", b"cuGreenCtxCreate", b"cuGreenCtxDestroy",
                   b"cuGreenCtxStreamCreate", b"cuGreenCtxGetDevResource",
                   b"cuStreamGetGreenCtx"]
# All resolved, or all NULL; set once, under the GIL (green_require).
cdef void* _green_fns[_G_N]
# The flag is read without the lock (streams_flag_get, acquiring the table
# and _green_runtime, both written before its releasing store).
cdef int _green_resolved = False
cdef bint _green_runtime = False      # the runtime's API serves (decided with _green_resolved)
# cuStreamGetDevResource (CUDA 13.1), tried once: NULL where it is missing;
# the flag is published after the pointer, as _green_resolved.
cdef void* _stream_resource_fn = NULL
cdef int _stream_resource_tried = False


cdef str _version_str(int v):
    return f"{v // 1000}.{(v % 1000) // 10}"


cdef object _green_lock = object()


cdef int green_require() except -1:
    # Resolved once, under the lock on free-threaded builds (the flag is set
    # after the functions it publishes).
    if streams_flag_get(&_green_resolved):
        return 0
    with cython.critical_section(_green_lock):
        return _green_resolve()


cdef int _green_resolve() except -1:
    global _green_resolved
    cdef int driver = 0, runtime = 0
    if streams_flag_get(&_green_resolved):
        return 0
    refuse_forbidden()
    _versions(&driver, &runtime)
    if (STREAMS_HAVE_RUNTIME_GREEN and runtime >= STREAMS_RUNTIME_GREEN_VERSION
            and driver >= STREAMS_RUNTIME_GREEN_VERSION):
        _green_runtime_chosen()
        return 0
    _resolve_driver_table(_GREEN_NAMES, _green_fns, _G_N, STREAMS_GREEN_VERSION,
                          "green contexts need a driver for CUDA 12.5 or newer and streams "
                          "built against a CUDA 12.5 or newer runtime (the driver's "
                          "cuGreenCtxCreate and cuGreenCtxStreamCreate, reached with "
                          "cudaGetDriverEntryPointByVersion)")
    streams_flag_set(&_green_resolved, True)     # last: it publishes the table
    return 0


# Asked once: neither changes while the process lives.  Threads that race
# the first ask store the same values (an int each: no torn read; one
# seen unset is asked again).
cdef int _driver_version = -1
cdef int _runtime_version = -1


cdef int _versions(int* driver, int* runtime) except -1:
    global _driver_version, _runtime_version
    cdef int d = 0, r = 0
    # Atomic loads and stores (streams_flag_*): plain ones racing are a
    # data race to the C compiler, even where no value can tear.
    d = streams_flag_get(&_driver_version)
    r = streams_flag_get(&_runtime_version)
    if r < 0 or d < 0:
        with nogil:
            if cudaDriverGetVersion(&d) != cudaSuccess:
                cudaGetLastError()
                d = 0
            cudaRuntimeGetVersion(&r)
        streams_flag_set(&_driver_version, d)
        streams_flag_set(&_runtime_version, r)
    driver[0] = d
    runtime[0] = r
    return 0


cdef int _resolve_driver_table(const char** names, void** table, int n, int version,
                               str needs) except -1:
    """Fill ``table`` with the driver's ``names`` at the ABI of CUDA
    ``version``: all of them, or none and NotImplementedError saying what
    ``needs`` and what this driver and build have.  The caller publishes
    the table (its resolved flag) after this returns."""
    cdef void* fns[32]
    cdef int driver = 0, runtime = 0, i
    cdef cudaError_t err = cudaSuccess
    if n > 32:
        raise ValueError("at most 32 driver functions per table")
    _versions(&driver, &runtime)
    with nogil:
        for i in range(n):
            fns[i] = NULL
            if err == cudaSuccess:
                if driver >= version:
                    err = streams_get_driver_entry_at(names[i], &fns[i], version)
                else:
                    err = cudaErrorNotSupported
        if err != cudaSuccess:
            cudaGetLastError()
    if err != cudaSuccess:
        raise NotImplementedError(
            f"{needs}: this driver supports CUDA {_version_str(driver)}, this build uses the "
            f"CUDA {_version_str(runtime)} runtime (CUDA said: {error_name(<int>err)})")
    for i in range(n):
        table[i] = fns[i]
    return 0


cdef void _green_runtime_chosen() noexcept:
    global _green_runtime, _green_resolved
    _green_runtime = True
    streams_flag_set(&_green_resolved, True)     # after the choice it publishes


cdef inline int _green_check(int result) except -1 nogil:
    # CUresult and cudaError_t share the codes these calls return.
    return check(<cudaError_t>result)


cdef int _green_ready() except -1 nogil:
    guard()
    if not streams_flag_get(&_green_resolved):
        with gil:
            green_require()
    return 0


cdef int device_sm_resource(int dev, streams_dev_resource* out) except -1 nogil:
    _green_ready()
    memset(out, 0, sizeof(streams_dev_resource))
    # The driver call needs the driver initialised, which the runtime does
    # with the device's primary context; a green context made later shares it.
    check(cudaInitDevice(dev, 0, 0))
    if _green_runtime:
        return check(streams_rt_device_sm_resource(dev, out))
    return _green_check((<streams_device_get_dev_resource_fn>_green_fns[_G_GET_RESOURCE])(
        dev, out, STREAMS_DEV_RESOURCE_TYPE_SM))


cdef int sm_resource_split(streams_dev_resource* result, unsigned int* groups,
                           const streams_dev_resource* input, streams_dev_resource* remaining,
                           unsigned int min_count) except -1 nogil:
    _green_ready()
    if remaining != NULL:
        memset(remaining, 0, sizeof(streams_dev_resource))
    if result != NULL:
        memset(result, 0, sizeof(streams_dev_resource) * groups[0])
    if _green_runtime:
        return check(streams_rt_sm_split(result, groups, input, remaining, min_count))
    return _green_check((<streams_sm_split_fn>_green_fns[_G_SPLIT])(
        result, groups, input, remaining, 0, min_count))


cdef int green_ctx_create(streams_green_ctx* out, streams_dev_resource* resource,
                          int dev) except -1 nogil:
    cdef streams_resource_desc desc = NULL
    _green_ready()
    check(cudaInitDevice(dev, 0, 0))
    if _green_runtime:
        check(streams_rt_green_create(out, resource, dev))
        streams_count(STREAMS_CNT_GREEN_CTX_CREATED)
        return 0
    # A descriptor is the driver's: nothing to destroy.
    _green_check((<streams_generate_desc_fn>_green_fns[_G_DESC])(&desc, resource, 1))
    # CU_GREEN_CTX_DEFAULT_STREAM is required (CUDA 12.4 to 13).
    _green_check((<streams_green_create_fn>_green_fns[_G_CREATE])(
        out, desc, dev, STREAMS_GREEN_CTX_DEFAULT_STREAM))
    streams_count(STREAMS_CNT_GREEN_CTX_CREATED)
    return 0


cdef int green_ctx_stream_create(cudaStream_t* out, streams_green_ctx ctx,
                                 int priority) except -1 nogil:
    _green_ready()
    if _green_runtime:
        check(streams_rt_green_stream_create(out, ctx, priority))
        streams_count(STREAMS_CNT_STREAM_CREATED)
        return 0
    # CU_STREAM_NON_BLOCKING is the only flag the driver takes.
    _green_check((<streams_green_stream_create_fn>_green_fns[_G_STREAM_CREATE])(
        <void**>out, ctx, STREAMS_STREAM_NON_BLOCKING, priority))
    streams_count(STREAMS_CNT_STREAM_CREATED)
    return 0


cdef int green_ctx_sm_count(streams_green_ctx ctx, unsigned int* out) except -1 nogil:
    cdef streams_dev_resource res
    _green_ready()
    memset(&res, 0, sizeof(res))
    if _green_runtime:
        check(streams_rt_green_sm_resource(ctx, &res))
    else:
        _green_check((<streams_green_get_resource_fn>_green_fns[_G_CTX_RESOURCE])(
            ctx, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
    out[0] = res.sm_count
    return 0


cdef int stream_sm_count(cudaStream_t s, long long* out) except -1 nogil:
    global _stream_resource_fn, _stream_resource_tried
    cdef streams_dev_resource res
    cdef streams_green_ctx g = NULL
    cdef void* fn = NULL
    cdef int driver = 0
    guard()
    out[0] = -1
    if not streams_flag_get(&_stream_resource_tried):
        if cudaDriverGetVersion(&driver) != cudaSuccess:
            cudaGetLastError()
        elif driver >= STREAMS_STREAM_RESOURCE_VERSION:
            if streams_get_driver_entry_at(b"cuStreamGetDevResource", &fn,
                                           STREAMS_STREAM_RESOURCE_VERSION) != cudaSuccess:
                cudaGetLastError()
                fn = NULL
        # Racing resolutions write the same; the flag last, releasing it.
        streams_ptr_store(&_stream_resource_fn, fn)
        streams_flag_set(&_stream_resource_tried, True)
    fn = streams_ptr_load(&_stream_resource_fn)
    memset(&res, 0, sizeof(res))
    if fn != NULL:
        # Any stream's share, green or not.
        _green_check((<streams_stream_get_resource_fn>fn)(
            <void*>s, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
        out[0] = res.sm_count
        return 0
    with gil:
        try:
            green_require()
        except NotImplementedError:
            return 0    # no green contexts at all: an ordinary stream
    if _green_runtime:
        return 0        # (the runtime's choice implies a driver with the call above)
    _green_check((<streams_stream_get_green_fn>_green_fns[_G_STREAM_GREEN])(<void*>s, &g))
    if g != NULL:
        _green_check((<streams_green_get_resource_fn>_green_fns[_G_CTX_RESOURCE])(
            g, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
        out[0] = res.sm_count
    return 0
# ---- green contexts: end ----


# ---- kernel nodes through the driver: begin ----
# The driver's kernel-node calls, at the ABI of CUDA 12.4 (the parameter
# layout of a kernel came then), resolved together at first use.
cdef extern from "kernel_node.h" nogil:
    ctypedef int (*streams_kernel_node_get_fn)(void* node, streams_kernel_node_params* out)
    ctypedef int (*streams_exec_kernel_node_set_fn)(void* ex, void* node,
                                                    const streams_kernel_node_params* params)
    ctypedef int (*streams_kernel_node_set_fn)(void* node,
                                               const streams_kernel_node_params* params)
    ctypedef int (*streams_param_info_fn)(void* func, size_t index, size_t* offset,
                                          size_t* size)
    ctypedef int (*streams_get_name_fn)(const char** name, void* func)
    ctypedef int (*streams_func_attribute_fn)(int* value, int attribute, void* func)
    ctypedef int (*streams_kernel_attribute_fn)(int* value, int attribute, void* kernel, int dev)
    ctypedef int (*streams_kernel_function_fn)(void** func, void* kernel)
    enum:
        STREAMS_KERNEL_NODE_VERSION

cdef enum:
    _K_GET
    _K_EXEC_SET
    _K_SET
    _K_FUNC_PARAM
    _K_KERNEL_PARAM
    _K_FUNC_NAME
    _K_KERNEL_NAME
    _K_FUNC_ATTR
    _K_KERNEL_ATTR
    _K_KERNEL_FUNC
    _K_CTX_CURRENT
    _K_PRIMARY_STATE
    _K_PRIMARY_RETAIN
    _K_PRIMARY_RELEASE
    _K_N
cdef const char* _KERNEL_NODE_NAMES[_K_N]
_KERNEL_NODE_NAMES[:] = [b"cuGraphKernelNodeGetParams", b"cuGraphExecKernelNodeSetParams",
                         b"cuGraphKernelNodeSetParams", b"cuFuncGetParamInfo",
                         b"cuKernelGetParamInfo", b"cuFuncGetName", b"cuKernelGetName",
                         b"cuFuncGetAttribute", b"cuKernelGetAttribute",
                         b"cuKernelGetFunction", b"cuCtxGetCurrent",
                         b"cuDevicePrimaryCtxGetState", b"cuDevicePrimaryCtxRetain",
                         b"cuDevicePrimaryCtxRelease"]
ctypedef int (*_ctx_get_current_fn)(void** ctx) noexcept nogil
ctypedef int (*_primary_ctx_state_fn)(int dev, unsigned int* flags, int* active) noexcept nogil
ctypedef int (*_primary_ctx_retain_fn)(void** ctx, int dev) noexcept nogil
ctypedef int (*_primary_ctx_release_fn)(int dev) noexcept nogil
cdef void* _kernel_node_fns[_K_N]
# Read without the lock: streams_flag_get acquires the table written before.
cdef int _kernel_node_resolved = False


cdef object _kernel_node_lock = object()


cdef int kernel_node_require() except -1:
    if streams_flag_get(&_kernel_node_resolved):
        return 0
    with cython.critical_section(_kernel_node_lock):
        return _kernel_node_resolve()


cdef int _kernel_node_resolve() except -1:
    global _kernel_node_resolved
    if streams_flag_get(&_kernel_node_resolved):
        return 0
    refuse_forbidden()
    _resolve_driver_table(_KERNEL_NODE_NAMES, _kernel_node_fns, _K_N,
                          STREAMS_KERNEL_NODE_VERSION,
                          "reading and changing the kernel nodes of any graph needs a driver "
                          "for CUDA 12.4 or newer and streams built against a CUDA 12.5 or "
                          "newer runtime (the driver's cuGraphKernelNodeGetParams and "
                          "cuFuncGetParamInfo, reached with cudaGetDriverEntryPointByVersion)")
    streams_flag_set(&_kernel_node_resolved, True)   # last: it publishes the table
    return 0


cdef int _bind_primary_context() except -1 nogil:
    # A driver call runs in the thread's current context, which a thread
    # gets from the runtime only at its first call that uses the device:
    # bind the current device's primary context (a no-op when it is bound).
    cdef int dev = 0
    check(cudaGetDevice(&dev))
    return check(cudaSetDevice(dev))


cdef int _kernel_node_ready() except -1 nogil:
    guard()
    if not streams_flag_get(&_kernel_node_resolved):
        with gil:
            kernel_node_require()
    return _bind_primary_context()


cdef int kernel_node_get(cudaGraphNode_t node, streams_kernel_node_params* out) except -1 nogil:
    _kernel_node_ready()
    memset(out, 0, sizeof(streams_kernel_node_params))
    return check(<cudaError_t>(<streams_kernel_node_get_fn>_kernel_node_fns[_K_GET])(
        <void*>node, out))


cdef int kernel_param_info(void* func, void* kern, size_t index, size_t* offset,
                           size_t* size) except -1 nogil:
    cdef int err
    _kernel_node_ready()
    if func != NULL:
        err = (<streams_param_info_fn>_kernel_node_fns[_K_FUNC_PARAM])(func, index, offset, size)
    else:
        err = (<streams_param_info_fn>_kernel_node_fns[_K_KERNEL_PARAM])(kern, index, offset,
                                                                         size)
    if err == <int>cudaErrorInvalidValue:
        cudaGetLastError()
        return 0        # past the last parameter
    check(<cudaError_t>err)
    return 1


cdef const char* kernel_name(void* func, void* kern) noexcept nogil:
    cdef const char* name = NULL
    cdef int err
    if not streams_flag_get(&_kernel_node_resolved) or streams_guard_state() != STREAMS_GUARD_OK:
        return NULL
    if func != NULL:
        err = (<streams_get_name_fn>_kernel_node_fns[_K_FUNC_NAME])(&name, func)
    else:
        err = (<streams_get_name_fn>_kernel_node_fns[_K_KERNEL_NAME])(&name, kern)
    if err != 0:
        cudaGetLastError()
        return NULL
    return name


cdef int kernel_attribute(void* func, void* kern, int attribute, int* out) noexcept nogil:
    cdef int err, dev = 0
    if not streams_flag_get(&_kernel_node_resolved) or streams_guard_state() != STREAMS_GUARD_OK:
        return 0
    if func != NULL:
        err = (<streams_func_attribute_fn>_kernel_node_fns[_K_FUNC_ATTR])(out, attribute, func)
    else:
        if cudaGetDevice(&dev) != cudaSuccess:
            cudaGetLastError()
            return 0
        err = (<streams_kernel_attribute_fn>_kernel_node_fns[_K_KERNEL_ATTR])(out, attribute,
                                                                              kern, dev)
    if err != 0:
        cudaGetLastError()
        return 0
    return 1


cdef int kernel_function(void* kern, void** out) except -1 nogil:
    cdef int err
    out[0] = NULL
    _kernel_node_ready()
    err = (<streams_kernel_function_fn>_kernel_node_fns[_K_KERNEL_FUNC])(out, kern)
    if err != 0:
        cudaGetLastError()
        out[0] = NULL
        return 0
    return 1


cdef int kernel_node_context_ok(void* ctx) except -1 nogil:
    # 1 when a kernel node that CUDA recorded with context `ctx` may be
    # changed in place: none recorded, or a device's primary context (the
    # current device's, else another device's that is active: a retain of
    # an active one only counts, never creates).  0 for any other context,
    # a green context's above all: for a node captured on a green context's
    # stream the 580 driver (CUDA 13.0) answers every change with
    # cudaErrorInvalidValue or cudaErrorInvalidContext, and crashes inside
    # cuGraphExecKernelNodeSetParams when the parameters carry the function
    # without the context, which is what the runtime's setters and the
    # adopted-function path pass (tools/probe_green_kernel_args.py shows
    # it on an H200).
    cdef void* cur = NULL
    cdef void* prim = NULL
    cdef int n = 0, dev, active = 0
    cdef unsigned int flags = 0
    if ctx == NULL:
        return 1
    _kernel_node_ready()
    if (<_ctx_get_current_fn>_kernel_node_fns[_K_CTX_CURRENT])(&cur) == 0 and cur == ctx:
        return 1
    if cudaGetDeviceCount(&n) != cudaSuccess:
        cudaGetLastError()
        return 0
    for dev in range(n):
        if (<_primary_ctx_state_fn>_kernel_node_fns[_K_PRIMARY_STATE])(dev, &flags,
                                                                         &active) != 0 \
                or not active:
            continue
        if (<_primary_ctx_retain_fn>_kernel_node_fns[_K_PRIMARY_RETAIN])(&prim, dev) != 0:
            continue
        (<_primary_ctx_release_fn>_kernel_node_fns[_K_PRIMARY_RELEASE])(dev)
        if prim == ctx:
            return 1
    return 0


cdef int graph_exec_kernel_node_set(cudaGraphExec_t ex, cudaGraphNode_t node,
                                    const streams_kernel_node_params* params) except -1 nogil:
    _kernel_node_ready()
    return check(<cudaError_t>(<streams_exec_kernel_node_set_fn>_kernel_node_fns[_K_EXEC_SET])(
        <void*>ex, <void*>node, params))


cdef int graph_kernel_node_set(cudaGraphNode_t node,
                               const streams_kernel_node_params* params) except -1 nogil:
    _kernel_node_ready()
    return check(<cudaError_t>(<streams_kernel_node_set_fn>_kernel_node_fns[_K_SET])(
        <void*>node, params))
# ---- kernel nodes through the driver: end ----

# ==== adopted kernels and cleanup warnings (begin) ==========================================
import warnings as _warnings

cdef extern from "Python.h":
    # Declared here without Cython's `except -1`: a failing warning is
    # handled below, never propagated out of a release path.
    int _warn_ex "PyErr_WarnEx"(PyObject* category, const char* message, Py_ssize_t level)
    void _fetch_error "PyErr_Fetch"(PyObject** t, PyObject** v, PyObject** tb)
    void _restore_error "PyErr_Restore"(PyObject* t, PyObject* v, PyObject* tb)
    void _write_unraisable "PyErr_WriteUnraisable"(PyObject* obj)

cdef extern from "Python.h" nogil:
    int PyGILState_Check()


class CudaWarning(RuntimeWarning):
    """A CUDA call that releases something (a destroy, a free, an unload)
    failed where no exception can be raised: in ``__dealloc__``, in a
    deferred release, when the last user of a closed object left.  The
    message names the object and the CUDA error.  Turned into an error by a
    warnings filter, it is reported through ``sys.unraisablehook`` instead."""

    def __init__(self, *args):
        # Written out for inspect.signature: RuntimeWarning's has none.
        super().__init__(*args)


ctypedef int (*_func_get_name_fn)(const char** name, const void* func) noexcept nogil
# Looked up at first use, from any thread: the pointer is stored first and
# the state after it, both atomically (release), and read state first, then
# pointer (acquire), so a reader that sees "found" sees the pointer too.
# Racing lookups store the same values.
cdef void* _get_name_ptr[2]
cdef int _get_name_state[2]        # 0 not looked up, 1 found, 2 missing
_get_name_ptr[0] = NULL
_get_name_ptr[1] = NULL
_get_name_state[0] = 0
_get_name_state[1] = 0


cdef void* _driver_entry_since(const char* symbol, unsigned int version) noexcept nogil:
    # A driver function newer than CUDA 12.0: asked for at the ABI of the
    # version that introduced it (at 12.0's, cudaGetDriverEntryPointByVersion
    # answers that it is not there yet); a runtime older than 12.5 has no
    # versioned lookup, and its cudaGetDriverEntryPoint gives the newest.
    # NULL where the driver lacks it.
    cdef void* fn = NULL
    if streams_get_driver_entry_at(symbol, &fn, version) == cudaSuccess and fn != NULL:
        return fn
    cudaGetLastError()
    fn = NULL
    if streams_get_driver_entry(symbol, &fn) == cudaSuccess and fn != NULL:
        return fn
    cudaGetLastError()
    return NULL


cdef int func_get_name(const void* func, bint is_kernel, const char** out) except -1 nogil:
    cdef void* fn = NULL
    cdef int which = 1 if is_kernel else 0
    cdef int r
    guard()
    if streams_flag_get(&_get_name_state[which]) == 0:
        fn = _driver_entry_since(b"cuKernelGetName" if is_kernel else b"cuFuncGetName", 12030)
        if fn != NULL:
            streams_ptr_store(&_get_name_ptr[which], fn)
            streams_flag_set(&_get_name_state[which], 1)
        else:
            streams_flag_set(&_get_name_state[which], 2)
    if streams_flag_get(&_get_name_state[which]) != 1:
        return 1
    fn = streams_ptr_load(&_get_name_ptr[which])
    out[0] = NULL
    r = (<_func_get_name_fn>fn)(out, func)
    if r != 0 or out[0] == NULL:
        return 1
    return 0


cdef void sync_devices_quietly(unsigned long long devices) noexcept nogil:
    cdef cudaError_t err
    cdef int injected
    if devices == 0 or _release_decision() != RELEASE_NOW:
        return
    injected = injected_failure(CLEANUP_DEVICE_SYNC)
    err = _sync_devices(devices)
    if err != cudaSuccess:
        cudaGetLastError()
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(CLEANUP_DEVICE_SYNC, <const void*><uintptr_t>devices, <int>err)


# The queue of failures and the fault injection are the shim's
# (src/cudart/cleanup.h): one lock, which a fork re-makes in the child.
cdef extern from "cudart/shim.h":
    ctypedef struct streams_cleanup_error:
        int what
        uintptr_t handle
        int err
    enum:
        STREAMS_CLEANUP_QUEUE
        STREAMS_CLEANUP_INJECT_KINDS
    void streams_cleanup_push(int what, const void* handle, int err) nogil
    int streams_cleanup_queued() nogil
    int streams_cleanup_take(streams_cleanup_error* out, unsigned long long* lost) nogil
    int streams_cleanup_inject(int what, int err, int count) nogil
    int streams_cleanup_injected(int what) nogil
    void streams_cleanup_hold_for(long long ns) nogil
    int streams_cleanup_holds_now() nogil

# What each kind of release is called in a warning: the object, the call.
# What each kind of release is called in a warning: the object, the call.
# Keyed by kind (not a tuple in enum order): a kind added to the enum must
# get its words here, and tests/test_kernels_adopt_cpu.py checks every one has.
_CLEANUP_WHAT = {
    HANDLE_STREAM: ("stream", "cudaStreamDestroy"),
    HANDLE_EVENT: ("event", "cudaEventDestroy"),
    HANDLE_GRAPH: ("graph", "cudaGraphDestroy"),
    HANDLE_GRAPH_EXEC: ("graph executable", "cudaGraphExecDestroy"),
    HANDLE_HOST_MEMORY: ("pinned host memory", "cudaFreeHost"),
    HANDLE_MANAGED_MEMORY: ("managed memory", "cudaFree"),
    HANDLE_MEM_POOL: ("memory pool", "cudaMemPoolDestroy"),
    HANDLE_GREEN_CTX: ("green context", "cuGreenCtxDestroy"),
    CLEANUP_LIBRARY: ("module", "cudaLibraryUnload"),
    CLEANUP_DEVICE_MEMORY: ("device memory", "cudaFreeAsync"),
    CLEANUP_DEVICE_SYNC: ("adopted kernel's owner (devices 0x{h:x})", "cudaDeviceSynchronize"),
    CLEANUP_MARKER_EVENT: ("marker event", "cudaEventDestroy"),
}
_CLEANUP_KIND_NAMES = {"stream": HANDLE_STREAM, "event": HANDLE_EVENT, "graph": HANDLE_GRAPH,
                       "graph_exec": HANDLE_GRAPH_EXEC, "host_memory": HANDLE_HOST_MEMORY,
                       "managed_memory": HANDLE_MANAGED_MEMORY, "mem_pool": HANDLE_MEM_POOL,
                       "green_context": HANDLE_GREEN_CTX,
                       "module": CLEANUP_LIBRARY, "device_memory": CLEANUP_DEVICE_MEMORY,
                       "device_sync": CLEANUP_DEVICE_SYNC, "marker_event": CLEANUP_MARKER_EVENT}


if CLEANUP_KINDS > STREAMS_CLEANUP_INJECT_KINDS:
    raise ImportError("streams: src/cudart/cleanup.h has room for fewer kinds of release "
                      "than streams/_cudart.pxd names (STREAMS_CLEANUP_INJECT_KINDS)")


cdef void cleanup_failed(int what, const void* h, int err) noexcept nogil:
    streams_cleanup_push(what, h, err)


cdef int injected_failure(int what) noexcept nogil:
    if what < 0 or what >= CLEANUP_KINDS:
        return 0
    return streams_cleanup_injected(what)


cdef void _warn_cleanup(str text) noexcept:
    cdef PyObject* t
    cdef PyObject* v
    cdef PyObject* tb
    cdef bytes msg = text.encode("utf-8", "replace")
    # An exception in flight (a __dealloc__ during unwinding) is kept.
    _fetch_error(&t, &v, &tb)
    if _warn_ex(<PyObject*>CudaWarning, msg, 1) < 0:
        _write_unraisable(<PyObject*>text)
    _restore_error(t, v, tb)


cdef void flush_cleanup_warnings() noexcept:
    cdef streams_cleanup_error items[STREAMS_CLEANUP_QUEUE]
    cdef int n, i
    cdef unsigned long long lost = 0
    if not streams_interpreter_alive():
        return
    if streams_cleanup_queued() == 0:
        return
    with nogil:
        n = streams_cleanup_take(items, &lost)
    for i in range(n):
        what, call = _CLEANUP_WHAT.get(items[i].what, (f"handle of kind {items[i].what}",
                                                       "its release"))
        what = what.format(h=items[i].handle)
        if items[i].what != CLEANUP_DEVICE_SYNC:
            what = f"{what} 0x{items[i].handle:x}"
        _warn_cleanup(f"streams: releasing {what} failed ({call}): "
                      f"{error_name(items[i].err)}: {error_message(items[i].err)}")
    if lost:
        _warn_cleanup(f"streams: {lost} more release failure(s) were not recorded (too "
                      "many at once)")


# The shim's own releases (per-thread marker events, the marks of graph
# launches: src/cudart/cleanup.h) report through the same queue.
streams_set_cleanup_hooks(<streams_cleanup_failed_fn>cleanup_failed,
                          <streams_injected_failure_fn>injected_failure, CLEANUP_MARKER_EVENT)


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
# ---- CUfunction handles, through the driver ----
# The driver's structs, as cuda.h lays them out (CUlaunchConfig;
# CUDA_KERNEL_NODE_PARAMS_v2, the ABI of the 12.0 entry points).
cdef struct _CULaunchConfig:
    unsigned int gridDimX, gridDimY, gridDimZ
    unsigned int blockDimX, blockDimY, blockDimZ
    unsigned int sharedMemBytes
    void* hStream
    void* attrs
    unsigned int numAttrs

cdef struct _CUKernelNodeParams:
    void* func
    unsigned int gridDimX, gridDimY, gridDimZ
    unsigned int blockDimX, blockDimY, blockDimZ
    unsigned int sharedMemBytes
    void** kernelParams
    void** extra
    void* kern
    void* ctx

ctypedef int (*_cu_launch_ex_fn)(const _CULaunchConfig* config, const void* f, void** params,
                                 void** extra) noexcept nogil
ctypedef int (*_cu_func_get_attribute_fn)(int* out, int attrib, const void* f) noexcept nogil
ctypedef int (*_cu_func_set_attribute_fn)(const void* f, int attrib, int value) noexcept nogil
ctypedef int (*_cu_func_get_param_info_fn)(const void* f, size_t index, size_t* offset,
                                           size_t* size) noexcept nogil
ctypedef int (*_cu_graph_add_kernel_fn)(cudaGraphNode_t* out, cudaGraph_t g,
                                        const cudaGraphNode_t* deps, size_t n,
                                        const _CUKernelNodeParams* params) noexcept nogil
ctypedef int (*_cu_exec_kernel_set_fn)(cudaGraphExec_t ex, cudaGraphNode_t node,
                                       const _CUKernelNodeParams* params) noexcept nogil

cdef enum:
    _FN_LAUNCH_EX
    _FN_GET_ATTRIBUTE
    _FN_SET_ATTRIBUTE
    _FN_GET_PARAM_INFO
    _FN_GRAPH_ADD_KERNEL
    _FN_EXEC_KERNEL_SET
    _FN_COUNT
# Resolved at first use, each published with one atomic store (a racing
# second resolution writes the same pointer): two threads launching an
# adopted CUfunction for the first time read NULL or the whole pointer.
cdef void* _function_fns[_FN_COUNT]
memset(_function_fns, 0, sizeof(_function_fns))
cdef const char* _FUNCTION_FN_NAMES[_FN_COUNT]
_FUNCTION_FN_NAMES[:] = [b"cuLaunchKernelEx", b"cuFuncGetAttribute", b"cuFuncSetAttribute",
                         b"cuFuncGetParamInfo", b"cuGraphAddKernelNode",
                         b"cuGraphExecKernelNodeSetParams"]
# CUfunction_attribute (cuda.h)
cdef enum:
    _CU_FUNC_MAX_THREADS = 0
    _CU_FUNC_SHARED_SIZE = 1
    _CU_FUNC_CONST_SIZE = 2
    _CU_FUNC_LOCAL_SIZE = 3
    _CU_FUNC_NUM_REGS = 4
    _CU_FUNC_PTX_VERSION = 5
    _CU_FUNC_BINARY_VERSION = 6
    _CU_FUNC_MAX_DYNAMIC_SHARED = 8


cdef void* _function_fn(int which) except NULL nogil:
    return _entry_once(&_function_fns[which], _FUNCTION_FN_NAMES[which])


cdef int launch_function(const cudaLaunchConfig_t* config, const void* func,
                         void** args) except -1 nogil:
    cdef _CULaunchConfig cfg
    cdef void* fn
    guard()
    if config.dynamicSmemBytes >> 32:
        with gil:
            raise ValueError(f"shared_mem={config.dynamicSmemBytes} does not fit a C unsigned "
                             "int")
    fn = _function_fn(_FN_LAUNCH_EX)
    _bind_primary_context()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (config.gridDim.x, config.gridDim.y,
                                                config.gridDim.z)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (config.blockDim.x, config.blockDim.y,
                                                   config.blockDim.z)
    cfg.sharedMemBytes = <unsigned int>config.dynamicSmemBytes
    cfg.hStream = <void*>config.stream
    cfg.attrs = <void*>config.attrs
    cfg.numAttrs = config.numAttrs
    return check(<cudaError_t>(<_cu_launch_ex_fn>fn)(&cfg, func, args, NULL))


cdef int _function_attribute(int* out, int attrib, const void* func) except -1 nogil:
    return check(<cudaError_t>(<_cu_func_get_attribute_fn>_function_fn(_FN_GET_ATTRIBUTE))(
        out, attrib, func))


cdef int function_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil:
    cdef int v = 0
    guard()
    _bind_primary_context()
    memset(out, 0, sizeof(cudaFuncAttributes))
    _function_attribute(&v, _CU_FUNC_SHARED_SIZE, func)
    out.sharedSizeBytes = <size_t>v
    _function_attribute(&v, _CU_FUNC_CONST_SIZE, func)
    out.constSizeBytes = <size_t>v
    _function_attribute(&v, _CU_FUNC_LOCAL_SIZE, func)
    out.localSizeBytes = <size_t>v
    _function_attribute(&out.maxThreadsPerBlock, _CU_FUNC_MAX_THREADS, func)
    _function_attribute(&out.numRegs, _CU_FUNC_NUM_REGS, func)
    _function_attribute(&out.ptxVersion, _CU_FUNC_PTX_VERSION, func)
    _function_attribute(&out.binaryVersion, _CU_FUNC_BINARY_VERSION, func)
    _function_attribute(&out.maxDynamicSharedSizeBytes, _CU_FUNC_MAX_DYNAMIC_SHARED, func)
    return 0


cdef int function_set_max_dynamic_shared(const void* func, int value) except -1 nogil:
    guard()
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_func_set_attribute_fn>_function_fn(_FN_SET_ATTRIBUTE))(
        func, _CU_FUNC_MAX_DYNAMIC_SHARED, value))


cdef int function_get_param_info(const void* func, size_t index, size_t* offset,
                                 size_t* size) except -1 nogil:
    cdef void* fn = streams_ptr_load(&_function_fns[_FN_GET_PARAM_INFO])
    cdef int r
    guard()
    if fn == NULL:
        fn = _driver_entry_since(_FUNCTION_FN_NAMES[_FN_GET_PARAM_INFO], 12040)
        if fn == NULL:
            return 2     # a driver older than CUDA 12.4
        streams_ptr_store(&_function_fns[_FN_GET_PARAM_INFO], fn)
    _bind_primary_context()
    r = (<_cu_func_get_param_info_fn>fn)(func, index, offset, size)
    if r == 0:
        return 0
    if r == 1:          # CUDA_ERROR_INVALID_VALUE: past the last parameter
        return 1
    return check(<cudaError_t>r)


cdef void _function_node_params(_CUKernelNodeParams* out,
                                const cudaKernelNodeParams* p) noexcept nogil:
    out.func = p.func
    out.gridDimX, out.gridDimY, out.gridDimZ = p.gridDim.x, p.gridDim.y, p.gridDim.z
    out.blockDimX, out.blockDimY, out.blockDimZ = p.blockDim.x, p.blockDim.y, p.blockDim.z
    out.sharedMemBytes = p.sharedMemBytes
    out.kernelParams = p.kernelParams
    out.extra = NULL
    out.kern = NULL
    out.ctx = NULL


cdef int graph_add_function_node(cudaGraphNode_t* out, cudaGraph_t g,
                                 const cudaGraphNode_t* deps, size_t n,
                                 const cudaKernelNodeParams* params) except -1 nogil:
    cdef _CUKernelNodeParams p
    guard()
    _function_node_params(&p, params)
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_graph_add_kernel_fn>_function_fn(_FN_GRAPH_ADD_KERNEL))(
        out, g, deps, n, &p))


cdef int graph_exec_function_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                             const cudaKernelNodeParams* params) except -1 nogil:
    cdef _CUKernelNodeParams p
    guard()
    _function_node_params(&p, params)
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_exec_kernel_set_fn>_function_fn(_FN_EXEC_KERNEL_SET))(
        ex, node, &p))
# ==== adopted kernels and cleanup warnings (end) ============================================

# ---- in-process floor (benchmarks, python -m streams) ----
# In this translation unit, which links the static cudart that streams calls:
# a floor in another extension would have a cudart of its own.
include "_floor.pxi"
