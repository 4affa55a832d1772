# Cleanup warnings: release failures reported as CudaWarning where no
# exception can be raised; part of streams._cudart (_cudart.pyx includes
# it).

cdef extern from "Python.h":
    # Declared here without Cython's `except -1`: a failing warning is
    # handled below, never propagated out of a release path.
    int _warn_ex "PyErr_WarnEx"(PyObject* category, const char* message, Py_ssize_t level)
    void _fetch_error "PyErr_Fetch"(PyObject** t, PyObject** v, PyObject** tb)
    void _restore_error "PyErr_Restore"(PyObject* t, PyObject* v, PyObject* tb)
    void _write_unraisable "PyErr_WriteUnraisable"(PyObject* obj)


class CudaWarning(RuntimeWarning):
    """A CUDA call that releases something (a destroy, a free, an unload)
    failed where no exception can be raised: in ``__dealloc__``, in a
    deferred release, when the last user of a closed object left.  The
    message names the object and the CUDA error.  Turned into an error by a
    warnings filter, it is reported through ``sys.unraisablehook`` instead."""

    def __init__(self, *args):
        # Written out for inspect.signature: RuntimeWarning's has none.
        super().__init__(*args)


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
# Keyed by kind (not a tuple in enum order): a kind added to the enum must
# get its words here, and tests/launch/test_kernels_adopt_cpu.py checks every one has.
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
    CLEANUP_HOST_REGISTRATION: ("registered host memory", "cudaHostUnregister"),
}
_CLEANUP_KIND_NAMES = {"stream": HANDLE_STREAM, "event": HANDLE_EVENT, "graph": HANDLE_GRAPH,
                       "graph_exec": HANDLE_GRAPH_EXEC, "host_memory": HANDLE_HOST_MEMORY,
                       "managed_memory": HANDLE_MANAGED_MEMORY, "mem_pool": HANDLE_MEM_POOL,
                       "green_context": HANDLE_GREEN_CTX,
                       "module": CLEANUP_LIBRARY, "device_memory": CLEANUP_DEVICE_MEMORY,
                       "device_sync": CLEANUP_DEVICE_SYNC, "marker_event": CLEANUP_MARKER_EVENT,
                       "host_registration": CLEANUP_HOST_REGISTRATION}


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
