# cython: language_level=3
"""Python host callbacks run in stream order on CUDA's callback thread.

Reference protocol: the enqueueing side makes a ``HostCall`` and takes one
strong reference for the CUDA work item before enqueueing; if the enqueue
fails it drops that reference and raises.  The trampoline (in the shim of
``_cudart``) drops it after the call.  Under capture the callback becomes a
graph node instead: a CUDA user object retained by the graph owns the
reference, and every replay runs the callback.
"""
import weakref as _weakref

cimport cython
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t

cimport streams._cudart as rt
from streams._args cimport as_pointer_int
from streams._stream cimport ErrorSlot, Event, Stream, Waitable, set_host_call_enqueue
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

cdef int _enqueue(Stream stream, object callback, object arg, int kind, object owner,
                  int sync_mode) except -1:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long capture_id = 0
    cdef cudaGraph_t graph = NULL
    cdef HostCall call
    cdef PyObject* payload
    cdef int r
    if kind == KIND_HOST_FUNC:
        native = native_host_func(callback, arg, owner, "callback", "arg")
        if native is not None:
            return _enqueue_native(stream, native, sync_mode)
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    if owner is not None:
        raise TypeError("owner is for native host functions; a Python callback keeps "
                        "what it references alive itself")
    rt.check_host_func_sync_mode(sync_mode)
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
            return _enqueue_captured(stream, callback, arg, graph, capture_id, sync_mode)
        if stream._errors is None:
            stream._errors = new_error_slot()
        call = new_call(callback, arg, stream, stream._errors, kind)
        payload = <PyObject*>call
        rt.payload_incref(payload)     # the reference that travels with the work item
        rt.count(rt.STREAMS_CNT_CALLBACK_ENQUEUED)
        try:
            with nogil:
                if kind == KIND_HOST_FUNC:
                    rt.launch_host_func(<cudaStream_t>stream._handle, payload, sync_mode)
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
                           unsigned long long capture_id, int sync_mode) except -1:
    slot, target = _captures.get(capture_id, (None, None))
    if slot is None:
        slot = new_error_slot()
        register_capture(capture_id, slot, None, stream)
    cdef HostCall call = new_call(callback, arg, None, slot, KIND_HOST_FUNC)
    call.persistent = True
    # The graph this capture makes (or extends) now holds a host callable:
    # its executables box what node updates bring (_graph.pyx, instantiate).
    (<ErrorSlot>slot).host_calls = True
    rt.graph_attach_payload(graph, <PyObject*>call)
    with nogil:
        rt.launch_graph_host_func(<cudaStream_t>stream._handle, <PyObject*>call, sync_mode)
    return 0


# ---- native host functions ------------------------------------------------------------
# A C function `void fn(void* data)` runs on CUDA's thread with no Python and
# no GIL: nothing of the Python-callback machinery (payload, dispatcher,
# error slot) is involved.  What must stay alive (the ctypes or cffi object
# that holds the code, a ctypes/cffi data object, the caller's `owner`)
# travels as one reference: with the one-shot record of a stream enqueue
# (given back through the deferred queue once the function ran), or in a
# CUDA user object of the graph, which lets go once no graph, executable or
# replay in flight needs it.


cdef bint _is_ctypes_function(object obj):
    for cls in type(obj).__mro__:
        if cls.__name__ == "CFuncPtr" and cls.__module__ == "_ctypes":
            return True
    return False


cdef bint _is_ctypes_instance(object obj):
    for cls in type(obj).__mro__:
        if cls.__name__ == "_CData" and cls.__module__ == "_ctypes":
            return True
    return False


cdef bint _is_cffi(object obj):
    return type(obj).__module__ == "_cffi_backend"


cdef object _ffi = None


cdef object _cffi():
    global _ffi
    if _ffi is None:
        import _cffi_backend
        _ffi = _cffi_backend.FFI()
    return _ffi


cdef object _ctypes_function(object fn, str argname):
    """(address, python): a ctypes function pointer of type void(void*)."""
    import ctypes
    restype = getattr(fn, "restype", getattr(type(fn), "_restype_", None))
    argtypes = getattr(fn, "argtypes", getattr(type(fn), "_argtypes_", None))
    if restype is not None or argtypes is None or len(argtypes) != 1 \
            or not (argtypes[0] is ctypes.c_void_p or argtypes[0] is ctypes.c_char_p
                    or issubclass(argtypes[0], ctypes._Pointer)):
        raise TypeError(f"{argname}: a ctypes function must be void(void*), e.g. "
                        "ctypes.CFUNCTYPE(None, ctypes.c_void_p); this one returns "
                        f"{getattr(restype, '__name__', restype)} and takes "
                        f"{[getattr(t, '__name__', t) for t in argtypes or ()]}")
    objects = fn._objects
    python = isinstance(objects, dict) and any(
        type(v).__name__ == "CThunkObject" for v in objects.values())
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    if address == 0:
        raise ValueError(f"{argname} is a NULL ctypes function pointer")
    return address, python


cdef object _cffi_function(object fn, str argname):
    ffi = _cffi()
    t = ffi.typeof(fn)
    if t.kind != "function" or t.result.kind != "void" or len(t.args) != 1 \
            or t.args[0].kind != "pointer":
        raise TypeError(f"{argname}: a cffi function must be void(void*), not "
                        f"{t.cname!r}")
    address = int(ffi.cast("uintptr_t", fn))
    if address == 0:
        raise ValueError(f"{argname} is a NULL cffi function pointer")
    # ffi.callback(python_function) is Python code behind a C pointer.
    return address, " calling <" in repr(fn)


cdef object _native_data(object data, str argname):
    """(address, object to keep or None) of a native function's data pointer."""
    if data is None:
        return 0, None
    if _is_ctypes_instance(data):
        import ctypes
        try:
            return ctypes.cast(data, ctypes.c_void_p).value or 0, data
        except ctypes.ArgumentError:
            raise TypeError(f"{argname}: a ctypes {type(data).__name__} is not a pointer "
                            "(pass ctypes.byref(x) or ctypes.pointer(x))") from None
    if _is_cffi(data):
        ffi = _cffi()
        if ffi.typeof(data).kind not in ("pointer", "array"):
            raise TypeError(f"{argname}: a cffi {ffi.typeof(data).cname!r} is not a pointer")
        return int(ffi.cast("uintptr_t", data)), data
    if isinstance(data, bool) or not hasattr(data, "__index__"):
        raise TypeError(f"{argname} of a native host function must be None, an int address "
                        f"or a ctypes/cffi pointer, not {type(data).__name__}")
    return as_pointer_int(data, argname), None


cdef tuple native_host_func(object callback, object data, object owner, str fn_name,
                            str data_name):
    """(fn address, data address, what to keep alive or None) when
    ``callback`` is a native function; None when it is Python code (a
    callable, or a ctypes/cffi callback of a Python function)."""
    cdef uintptr_t fn
    if isinstance(callback, bool):
        raise TypeError(f"{fn_name} must be callable or a native function, not bool")
    if _is_ctypes_function(callback):
        address, python = _ctypes_function(callback, fn_name)
        if python:
            return None
        fn = address
        keep_code = callback
    elif _is_cffi(callback):
        address, python = _cffi_function(callback, fn_name)
        if python:
            return None
        fn = address
        keep_code = callback
    elif isinstance(callback, int):
        fn = as_pointer_int(callback, fn_name)
        # An address is trusted as in C; the first pages are never code
        # (and catch a count or a flag passed by mistake).
        if fn < 0x10000:
            raise ValueError(f"{fn_name}={fn:#x} is not a function address (a native host "
                             "function is given by its address, or as a ctypes or cffi "
                             "function pointer)")
        keep_code = None
    else:
        return None
    address, keep_data = _native_data(data, data_name)
    kept = tuple(x for x in (keep_code, keep_data, owner) if x is not None)
    return (fn, address, None if not kept else kept[0] if len(kept) == 1 else kept)


cdef int _enqueue_native(Stream stream, tuple native, int sync_mode) except -1:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long capture_id = 0
    cdef cudaGraph_t graph = NULL
    cdef uintptr_t fn = native[0]
    cdef uintptr_t data = native[1]
    keep = native[2]
    rt.check_host_func_sync_mode(sync_mode)
    stream._use()
    try:
        if keep is None:
            # Nothing to let go afterwards: the function as it is, captured
            # or not (a captured node calls it on every replay).
            with nogil:
                rt.launch_native_host_func(<cudaStream_t>stream._handle, <rt.host_fn>fn,
                                           <void*>data, NULL, sync_mode)
            return 0
        with nogil:
            rt.stream_get_capture_info(<cudaStream_t>stream._handle, &status, &capture_id,
                                       &graph, NULL, NULL, NULL)
        if status == cudaStreamCaptureStatusActive:
            # A one-shot record would be freed by the first replay: the
            # graph the capture makes keeps `keep` (a CUDA user object).
            rt.graph_attach_payload(graph, <PyObject*>keep)
            with nogil:
                rt.launch_native_host_func(<cudaStream_t>stream._handle, <rt.host_fn>fn,
                                           <void*>data, NULL, sync_mode)
            return 0
        rt.payload_incref(<PyObject*>keep)    # the reference that travels with the record
        try:
            with nogil:
                rt.launch_native_host_func(<cudaStream_t>stream._handle, <rt.host_fn>fn,
                                           <void*>data, <PyObject*>keep, sync_mode)
        except BaseException:
            rt.payload_decref(<PyObject*>keep)
            raise
    finally:
        stream._unuse()
    return 0


rt.set_dispatcher(_dispatch)
set_host_call_enqueue(_enqueue)


# ---- asyncio -----------------------------------------------------------------------------------
# ``await stream`` / ``await event``: a host function (include/streams/
# notify.h) rings an eventfd that the running loop watches.  It runs on
# CUDA's callback thread without the GIL and without CUDA calls, so it can
# neither deadlock with Python nor stall other callbacks.  One doorbell per
# loop, found through a weak mapping: when the loop goes, so does its
# doorbell, and the C notifier lives on only until the last host function
# still queued has run.


cdef extern from "streams/notify.h" nogil:
    ctypedef struct streams_notifier:
        pass
    ctypedef struct streams_wait_node:
        streams_wait_node* next
        unsigned long long token
    int STREAMS_HAVE_EVENTFD
    streams_notifier* streams_notifier_new()
    int streams_notifier_fd(streams_notifier* n)
    long streams_notifier_live_nodes(streams_notifier* n)
    void streams_notifier_unref(streams_notifier* n)
    streams_wait_node* streams_wait_node_new(streams_notifier* n, unsigned long long token)
    void streams_wait_node_abandon(streams_wait_node* node)
    void streams_wait_node_free(streams_wait_node* node)
    streams_wait_node* streams_notifier_take(streams_notifier* n)
    void streams_notify_host_fn(void* node)


@cython.final
cdef class _Doorbell:
    """One event loop's eventfd, and the futures of the waits it resolves."""
    cdef streams_notifier* _n
    cdef dict _waiting            # token -> future
    cdef unsigned long long _next
    cdef object __weakref__

    def __cinit__(self):
        self._n = NULL
        self._waiting = {}

    def __dealloc__(self):
        # The loop is gone: host functions still queued free the notifier.
        if self._n != NULL:
            streams_notifier_unref(self._n)
            self._n = NULL

    cdef unsigned long long _register(self, object loop):
        self._next += 1
        self._waiting[self._next] = loop.create_future()
        return self._next

    def _ring(self):
        """The loop's reader: resolve every wait whose host function ran,
        in the order they ran."""
        cdef streams_wait_node* node
        cdef streams_wait_node* after
        if self._n == NULL:
            return
        node = streams_notifier_take(self._n)
        while node != NULL:
            after = node.next
            fut = self._waiting.pop(node.token, None)
            streams_wait_node_free(node)
            node = after
            if fut is not None and not fut.done():
                fut.set_result(None)


cdef object _bells = _weakref.WeakKeyDictionary()    # loop -> _Doorbell, or False: poll


cdef int _sweep() except -1:
    # The futures a doorbell holds hold their loop: a loop closed with waits
    # pending would keep its doorbell (and eventfd) for ever.  Dropped here,
    # whenever a new loop gets one; host functions still queued free the
    # notifier when they run.
    cdef _Doorbell bell
    for loop, found in list(_bells.items()):
        if found is not False and loop.is_closed():
            bell = <_Doorbell>found
            bell._waiting.clear()
            if bell._n != NULL:
                streams_notifier_unref(bell._n)
                bell._n = NULL
            del _bells[loop]
    return 0


cdef object _doorbell(object loop):
    cdef _Doorbell bell
    cdef streams_notifier* n
    found = _bells.get(loop)
    if found is not None:
        return found if found is not False else None
    _sweep()
    n = streams_notifier_new() if STREAMS_HAVE_EVENTFD else NULL
    if n == NULL:
        _bells[loop] = False
        return None
    bell = _Doorbell.__new__(_Doorbell)
    bell._n = n
    try:
        loop.add_reader(streams_notifier_fd(n), bell._ring)
    except NotImplementedError:
        _bells[loop] = False       # e.g. the Windows proactor loop
        return None
    _bells[loop] = bell
    return bell


cdef int _enqueue_doorbell(Waitable obj, _Doorbell bell, unsigned long long token) except -1:
    cdef streams_wait_node* node = streams_wait_node_new(bell._n, token)
    cdef bint enqueued = False
    cdef Stream s
    if node == NULL:
        raise MemoryError()
    try:
        if isinstance(obj, Stream):
            s = <Stream>obj
            s._use()
            try:
                with nogil:
                    rt.launch_notify(<cudaStream_t>s._handle, <void*>node)
                enqueued = True
            finally:
                s._unuse()
        else:
            # The host function needs a stream: a private one that waits for
            # the event, so that waits on different events finish
            # independently, in the order the GPU reaches them.
            s = Stream((<Event>obj)._device, 0, True)
            try:
                s.wait_event(obj)
                with nogil:
                    rt.launch_notify(<cudaStream_t>s._handle, <void*>node)
                enqueued = True
            finally:
                s.close()
    except BaseException:
        if not enqueued:
            streams_wait_node_abandon(node)
        raise
    return 0


async def _poll(obj):
    import asyncio
    delay = 50e-6
    while not obj.query():
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2e-3)


async def _wait(Waitable obj):
    cdef _Doorbell bell
    cdef unsigned long long token
    import asyncio      # not at import: most programs never await
    loop = asyncio.get_running_loop()
    # Before any query: querying a capturing stream is an error that also
    # invalidates the capture (the user's end_capture would then fail).
    if isinstance(obj, Stream) and (<Stream>obj).capture_status != 0:
        raise RuntimeError("cannot await a stream that is being captured (the wait would "
                           "become a graph node, and a query would invalidate the capture)")
    if obj.query():
        return None
    found = _doorbell(loop)
    if found is None:
        await _poll(obj)
        return None
    bell = <_Doorbell>found
    token = bell._register(loop)
    try:
        _enqueue_doorbell(obj, bell, token)
    except BaseException:
        bell._waiting.pop(token, None)
        raise
    await _resolved(bell, token)
    return None


async def _resolved(_Doorbell bell, unsigned long long token):
    try:
        await bell._waiting[token]
    finally:
        # Cancelled: the host function still runs once the GPU gets there,
        # and its node is freed then, resolving nothing.
        bell._waiting.pop(token, None)


@cython.final
cdef class _DoorbellProbe:
    """A wait whose host function the test calls (``ring``, from any thread)
    instead of CUDA: the doorbell, its ordering and its cleanup, checked
    without a GPU."""
    cdef streams_wait_node* _node

    def ring(self):
        cdef streams_wait_node* node = self._node
        if node == NULL:
            raise RuntimeError("already rung")
        self._node = NULL
        with nogil:
            streams_notify_host_fn(<void*>node)


def _probe_wait():
    """(awaitable, probe) in the running loop: the awaitable completes once
    ``probe.ring()`` ran, as if CUDA had run the host function.  Private."""
    cdef _DoorbellProbe probe = _DoorbellProbe.__new__(_DoorbellProbe)
    cdef _Doorbell bell
    cdef unsigned long long token
    import asyncio
    loop = asyncio.get_running_loop()
    found = _doorbell(loop)
    if found is None:
        raise NotImplementedError("this loop has no doorbell (it polls)")
    bell = <_Doorbell>found
    token = bell._register(loop)
    probe._node = streams_wait_node_new(bell._n, token)
    if probe._node == NULL:
        bell._waiting.pop(token, None)
        raise MemoryError()
    return _resolved(bell, token), probe


def wait_async(obj):
    """The coroutine behind ``Stream.wait_async`` and ``Event.wait_async``."""
    if not isinstance(obj, Waitable):
        raise TypeError(f"wait_async needs a streams.Stream or Event, not {type(obj).__name__}")
    return _wait(obj)


def _async_waits():
    """Waits the doorbells of live loops still track: futures not resolved,
    and host functions queued or run but not yet read by their loop.  Both
    are 0 once every awaited piece of work has finished and each loop has
    run its reader (tests use it to see that cancellation leaves nothing).
    Loops closed meanwhile are forgotten first."""
    waiting = in_flight = 0
    _sweep()
    for bell in list(_bells.values()):
        if bell is not False:
            waiting += len((<_Doorbell>bell)._waiting)
            in_flight += streams_notifier_live_nodes((<_Doorbell>bell)._n)
    return {"waiting": waiting, "in_flight": in_flight}


def _native_host_func(callback, arg=None, owner=None):
    """What ``launch_host_func`` makes of ``callback``: (fn address, data
    address, kept object or None) for a native function, None for Python
    code.  Private: tests check the classification without a GPU."""
    return native_host_func(callback, arg, owner, "callback", "arg")
