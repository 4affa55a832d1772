# Host callbacks: Python callables run in stream order on CUDA's callback
# thread, through the C trampolines of include/streams/shim.h.
#
# Reference protocol: the enqueueing side creates a _HostCall and takes one
# strong reference for the CUDA work item before enqueueing; if the enqueue
# fails it drops that reference and raises.  The trampoline drops it after
# the call (one-shot work) -- or, for graph nodes, a CUDA user object owns
# it (see _graph.pxi).

cdef extern from "Python.h":
    void PyErr_Restore(PyObject* type, PyObject* value, PyObject* traceback)
    void PyErr_WriteUnraisable(object obj)

cdef enum:
    _KIND_HOST_FUNC = 0      # callback(arg)
    _KIND_STREAM_CB = 1      # callback(stream, status, arg)


@cython.final
@cython.freelist(64)
cdef class _HostCall:
    cdef object fn
    cdef object arg
    cdef Stream stream       # where a raised exception is delivered (or None)
    cdef object sink         # or: an object with a _callback_error slot (graphs)
    cdef int kind
    cdef bint persistent     # owned by a graph: may run many times

    def __cinit__(self):
        global _host_calls_live
        _host_calls_live += 1

    def __dealloc__(self):
        global _host_calls_live
        _host_calls_live -= 1

    def __repr__(self):
        where = f" on {self.stream!r}" if self.stream is not None else ""
        return f"host callback {self.fn!r}{where}"


cdef long long _host_calls_live = 0
cdef unsigned long long _graph_callback_runs = 0
cdef unsigned long long _callbacks_enqueued = 0
cdef unsigned long long _callbacks_completed = 0
cdef unsigned long long _callbacks_dropped = 0


cdef void _dispatch(PyObject* payload, int status) noexcept:
    # Runs on the thread CUDA called the trampoline on, with the GIL held.
    global _callbacks_completed, _graph_callback_runs
    cdef _HostCall call = <_HostCall>payload
    if call.persistent:
        _graph_callback_runs += 1
    else:
        _callbacks_completed += 1
    try:
        if call.kind == _KIND_HOST_FUNC:
            call.fn(call.arg)
        else:
            call.fn(call.stream, None if status == 0 else CudaError(status), call.arg)
    except BaseException as exc:
        _report_callback_error(call, exc)


cdef void _report_callback_error(_HostCall call, BaseException exc) noexcept:
    # Never lose an exception: report it now through sys.unraisablehook
    # (whose `object` is the _HostCall, whose repr names the callback), and
    # keep the first one for the owner's next synchronize().
    cdef object exc_type = type(exc)
    cdef object tb = exc.__traceback__
    try:
        if call.stream is not None:
            if call.stream._callback_error is None:
                call.stream._callback_error = (call.fn, exc)
        elif call.sink is not None:
            if getattr(call.sink, "_callback_error", 0) is None:
                call.sink._callback_error = (call.fn, exc)
    except BaseException:
        pass
    Py_INCREF(exc_type)
    Py_INCREF(exc)
    if tb is None:
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, NULL)
    else:
        Py_INCREF(tb)
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, <PyObject*>tb)
    PyErr_WriteUnraisable(call)


cdef int _raise_host_callback_error(tuple first, str what) except -1:
    """Raise HostCallbackError for the (callback, exception) an owner kept."""
    fn, exc = first
    raise HostCallbackError(f"{what} {fn!r} raised {type(exc).__name__}: {exc}") from exc


cdef int _raise_callback_error(Stream stream) except -1:
    first = stream._callback_error
    stream._callback_error = None
    return _raise_host_callback_error(first, "host callback")


cdef _HostCall _new_call(object callback, object arg, Stream stream, int kind):
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    cdef _HostCall call = _HostCall.__new__(_HostCall)
    call.fn = callback
    call.arg = arg
    call.stream = stream
    call.kind = kind
    return call


cdef int _enqueue_call(Stream stream, _HostCall call) except -1:
    global _callbacks_enqueued, _callbacks_dropped
    cdef cudaError_t err
    cdef PyObject* payload = <PyObject*>call
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef cudaGraph_t graph = NULL
    guard()
    stream._check_open()
    if call.kind == _KIND_HOST_FUNC:
        # A one-shot payload captured into a graph would be freed by the
        # first replay and used after free by the second: under capture the
        # graph owns the payload instead, and every replay runs it.
        with nogil:
            err = streams_cudaStreamGetCaptureInfo(<cudaStream_t>stream._handle, &status, NULL,
                                                   &graph, NULL, NULL, NULL)
        check(err)
        if status == cudaStreamCaptureStatusActive:
            return _enqueue_captured_call(stream, call, graph)
    streams_payload_incref(payload)     # the reference that travels with the work item
    _callbacks_enqueued += 1
    with nogil:
        if call.kind == _KIND_HOST_FUNC:
            err = cudaLaunchHostFunc(<cudaStream_t>stream._handle,
                                     streams_host_fn_trampoline, <void*>payload)
        else:
            err = cudaStreamAddCallback(<cudaStream_t>stream._handle,
                                        streams_stream_callback_trampoline,
                                        <void*>payload, 0)
    if err != cudaSuccess:
        _callbacks_dropped += 1
        streams_payload_decref(payload)
        check(err)
    return 0


def _shutdown():
    """atexit hook: stop callbacks from entering Python, then let those
    already on their way finish (bounded), so that no CUDA thread is left
    waiting for the GIL while the interpreter finalizes."""
    streams_mark_shutting_down()
    with nogil:
        streams_wait_trampolines_idle(2000000000)


streams_dispatch = <streams_dispatch_fn>_dispatch
