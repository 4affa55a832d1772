# cython: language_level=3
"""Python host callbacks run in stream order on CUDA's callback thread.

Reference protocol: the enqueueing side makes a ``HostCall`` and takes one
strong reference for the CUDA work item before enqueueing; if the enqueue
fails it drops that reference and raises.  The trampoline (in the shim of
``_cudart``) drops it after the call.  Under capture the callback becomes a
graph node instead: a CUDA user object retained by the graph owns the
reference, and every replay runs the callback.
"""
cimport cython
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t

cimport streams._cudart as rt
from streams._stream cimport ErrorSlot, Stream, set_host_call_enqueue
from streams.cudart cimport *

from streams._cudart import CudaError

cdef extern from "Python.h":
    void PyErr_Restore(PyObject* type, PyObject* value, PyObject* traceback)
    void PyErr_WriteUnraisable(object obj)
    void Py_INCREF(object o)


@cython.final
@cython.freelist(64)
cdef class HostCall:
    """A Python callable with its argument, enqueued as a CUDA host function."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "Stream.launch_host_func and Graph.add_host_node make them")

    def __cinit__(self):
        rt.count(rt.STREAMS_CNT_HOST_CALL_CREATED)

    def __dealloc__(self):
        rt.count(rt.STREAMS_CNT_HOST_CALL_FREED)

    def __repr__(self):
        where = f" on {self.stream!r}" if self.stream is not None else ""
        return f"host callback {self.fn!r}{where}"


cdef ErrorSlot new_error_slot():
    return ErrorSlot.__new__(ErrorSlot)


cdef HostCall new_call(object callback, object arg, Stream stream, ErrorSlot sink, int kind):
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    cdef HostCall call = HostCall.__new__(HostCall)
    call.fn = callback
    call.arg = arg
    call.stream = stream
    call.sink = sink
    call.kind = kind
    return call


cdef void _dispatch(PyObject* payload, int status) noexcept:
    # Runs on the thread CUDA called the trampoline on, with the GIL held.
    cdef HostCall call = <HostCall>payload
    rt.count(rt.STREAMS_CNT_GRAPH_CALLBACK_RUNS if call.persistent
             else rt.STREAMS_CNT_CALLBACK_COMPLETED)
    try:
        if call.kind == KIND_HOST_FUNC:
            call.fn(call.arg)
        else:
            call.fn(call.stream, None if status == 0 else CudaError(status), call.arg)
    except BaseException as exc:
        _report(call, exc)


cdef void _report(HostCall call, BaseException exc) noexcept:
    # Never lose an exception: report it now through sys.unraisablehook
    # (whose `object` is the HostCall, whose repr names the callback), and
    # keep the first one for the owner's next synchronize() or launch().
    cdef object exc_type = type(exc)
    cdef object tb = exc.__traceback__
    if call.sink is not None:
        call.sink.keep_first(call.fn, exc)
    Py_INCREF(exc_type)
    Py_INCREF(exc)
    if tb is None:
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, NULL)
    else:
        Py_INCREF(tb)
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, <PyObject*>tb)
    PyErr_WriteUnraisable(call)


# ---- the capture registry -------------------------------------------------------------

cdef dict _captures = {}
cdef dict _capture_of_stream = {}   # stream handle -> id of its latest registered capture


cdef int register_capture(unsigned long long capture_id, ErrorSlot slot, object target,
                          Stream stream) except -1:
    _captures[capture_id] = (slot, target)
    _capture_of_stream[<uintptr_t>stream._handle] = capture_id
    return 0


cdef tuple take_capture(unsigned long long capture_id, Stream stream):
    """The (error slot, target graph) of a capture, forgotten; (None, None)."""
    latest = _capture_of_stream.pop(<uintptr_t>stream._handle, 0)
    if capture_id == 0:
        capture_id = latest
    return _captures.pop(capture_id, (None, None))


# ---- enqueueing ---------------------------------------------------------------------------

cdef int _enqueue(Stream stream, object callback, object arg, int kind) except -1:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long capture_id = 0
    cdef cudaGraph_t graph = NULL
    cdef HostCall call
    cdef PyObject* payload
    cdef int r
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    stream._use()
    try:
        # A one-shot payload captured into a graph would be freed by the
        # first replay and used after free by the second: under capture the
        # graph owns the payload instead, and every replay runs it.
        with nogil:
            rt.stream_get_capture_info(<cudaStream_t>stream._handle, &status, &capture_id,
                                       &graph, NULL, NULL, NULL)
        if status == cudaStreamCaptureStatusActive:
            if kind != KIND_HOST_FUNC:
                raise RuntimeError(
                    "add_callback cannot be captured into a graph (CUDA would invalidate "
                    "the capture); use launch_host_func, which is captured as a host node")
            return _enqueue_captured(stream, callback, arg, graph, capture_id)
        if stream._errors is None:
            stream._errors = new_error_slot()
        call = new_call(callback, arg, stream, stream._errors, kind)
        payload = <PyObject*>call
        rt.payload_incref(payload)     # the reference that travels with the work item
        rt.count(rt.STREAMS_CNT_CALLBACK_ENQUEUED)
        try:
            with nogil:
                if kind == KIND_HOST_FUNC:
                    rt.launch_host_func(<cudaStream_t>stream._handle, payload)
                else:
                    rt.stream_add_callback(<cudaStream_t>stream._handle, payload)
        except BaseException:
            rt.count(rt.STREAMS_CNT_CALLBACK_DROPPED)
            rt.payload_decref(payload)
            raise
    finally:
        stream._unuse()
    return 0


cdef int _enqueue_captured(Stream stream, object callback, object arg, cudaGraph_t graph,
                           unsigned long long capture_id) except -1:
    slot, target = _captures.get(capture_id, (None, None))
    if slot is None:
        slot = new_error_slot()
        register_capture(capture_id, slot, None, stream)
    cdef HostCall call = new_call(callback, arg, None, slot, KIND_HOST_FUNC)
    call.persistent = True
    rt.graph_attach_payload(graph, <PyObject*>call)
    with nogil:
        rt.launch_graph_host_func(<cudaStream_t>stream._handle, <PyObject*>call)
    return 0


rt.set_dispatcher(_dispatch)
set_host_call_enqueue(_enqueue)
