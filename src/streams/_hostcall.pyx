# cython: language_level=3
"""Host functions on streams and in graphs: Python host callbacks, which run
on CUDA's callback thread with the GIL, and native host functions, C code
(``void fn(void* data)``) that runs there without Python; the two enqueue
paths (a one-shot work item, or a graph-owned node when the stream is being
captured) and the capture registry.

Reference protocol: the enqueueing side makes a ``HostCall`` and takes one
strong reference for the CUDA work item before enqueueing; if the enqueue
fails it drops that reference and raises.  The trampoline (in the shim of
``_cudart``) drops it after the call.  Under capture the callback becomes a
graph node instead: a CUDA user object retained by the graph owns the
reference, and every replay runs the callback.  A native host function with
something to keep takes the same paths, with that object as the payload.

``await stream`` and ``await event`` are ``streams._asyncio``'s.  The
private hooks of the tests are included last (``_hostcall/_testing.pxi``).
"""
import threading as _threading
import weakref as _weakref

cimport cython
from cpython.exc cimport PyErr_Restore, PyErr_WriteUnraisable
from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport uintptr_t

cimport streams._cudart as rt
from streams._args cimport as_pointer_int
from streams._stream cimport ErrorSlot, Stream, set_host_call_enqueue
from streams.cudart cimport *

from streams._cudart import CudaError


@cython.final
@cython.freelist(64)
cdef class HostCall:
    """A Python callable with its argument, enqueued as a CUDA host function."""
    # The GC may clear it: CUDA's reference (a work item's, or a graph's
    # user object) keeps it from the GC for as long as it can still run.

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "Stream.launch_host_func and Graph.add_host_node make them")

    def __cinit__(self):
        rt.count(rt.STREAMS_CNT_HOST_CALL_CREATED)

    def __dealloc__(self):
        rt.count(rt.STREAMS_CNT_HOST_CALL_FREED)

    def __repr__(self):
        where = f" on {self.stream!r}" if self.stream is not None else ""
        return f"host callback {self.fn!r}{where}"


cdef ErrorSlot new_error_slot(bint relay=False):
    cdef ErrorSlot slot = ErrorSlot.__new__(ErrorSlot)
    slot.relay = relay
    return slot


cdef HostCall new_call(object callback, object arg, Stream stream, ErrorSlot errors,
                       int kind):
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    cdef HostCall call = HostCall.__new__(HostCall)
    call.fn = callback
    call.arg = arg
    call.stream = stream
    call.errors = errors
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
    if call.errors is not None:
        call.errors.keep_first(call.fn, exc)
    Py_INCREF(exc_type)
    Py_INCREF(exc)
    if tb is None:
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, NULL)
    else:
        Py_INCREF(tb)
        PyErr_Restore(<PyObject*>exc_type, <PyObject*>exc, <PyObject*>tb)
    PyErr_WriteUnraisable(call)


# ---- the capture registry -------------------------------------------------------------

# Both tables change together, from any thread: under the critical section
# of _capture_lock (free-threaded CPython; the GIL elsewhere).  A lock object
# of their own, not one of the dicts: a dict operation inside locks its dict,
# and a critical section is only whole while nothing inside it waits for a
# lock held by the same thread.
cdef object _capture_lock = object()
cdef dict _captures = {}            # capture id -> _Capture
cdef dict _capture_of_stream = {}   # stream handle -> id of its latest registered capture
# The registry is swept (_sweep_captures) once it holds this many captures:
# a capture that streams' end_capture never ends (another library ends it,
# its stream is closed during it) is found ended and forgotten, so the
# registry stays bounded whatever ends the captures
# (tests/graph/test_graph_audit_cpu.py, tests/graph/test_graph_audit_gpu.py).
cdef Py_ssize_t _SWEEP_MIN = 32
cdef Py_ssize_t _sweep_at = 32
# Told of each capture forgotten because it ended elsewhere (with its
# target), outside the registry's critical section: _graph closes the Graph
# object of such a capture (set_capture_hook).
cdef object _capture_hook = None


@cython.final
cdef class _Capture:
    cdef unsigned long long cid
    cdef ErrorSlot slot
    # The Graph of begin_capture_to_graph (held: the capture holds it in
    # use), a weak reference to the Graph capture_info made, or None.
    cdef object target
    cdef object stream_ref           # a weak reference to the stream that registered it
    cdef unsigned long thread        # for a special stream (per-thread): its thread
    cdef bint ending                 # end_capture is ending it: never swept


cdef _Capture _new_entry(unsigned long long capture_id, ErrorSlot slot, object target,
                         Stream stream):
    cdef _Capture e = _Capture.__new__(_Capture)
    e.cid = capture_id
    e.slot = slot
    e.target = target
    e.stream_ref = _weakref.ref(stream)
    # The per-thread stream's handle names each thread's own stream: only
    # the thread that captured can ask it about this capture.
    e.thread = _threading.get_ident() if stream._special else 0
    return e


cdef bint _dead(object target):
    return isinstance(target, _weakref.ref) and target() is None


cdef int set_capture_hook(object hook) except -1:
    global _capture_hook
    _capture_hook = hook
    return 0


cdef int register_capture(unsigned long long capture_id, ErrorSlot slot, object target,
                          Stream stream) except -1:
    cdef _Capture e = _new_entry(capture_id, slot, target, stream)
    with cython.critical_section(_capture_lock):
        _captures[capture_id] = e
        _capture_of_stream[<uintptr_t>stream._handle] = capture_id
        grown = len(_captures) >= _sweep_at
    if grown:
        _sweep_captures(None)
    return 0


cdef tuple capture_entry(unsigned long long capture_id, Stream stream, object target):
    cdef bint registered = False
    cdef _Capture e
    cdef Py_ssize_t n
    cdef object earlier = None
    fresh = _new_entry(capture_id, None, None, stream)
    # Looked up and, for the first user of this capture, registered in one
    # step: two threads using one capture share its slot.
    with cython.critical_section(_capture_lock):
        e = _captures.get(capture_id)
        if e is None:
            e = fresh
            e.slot = new_error_slot(True)
            _captures[capture_id] = e
            registered = True
        if target is not None and (e.target is None or _dead(e.target)):
            e.target = target
        if registered:
            before = _capture_of_stream.get(<uintptr_t>stream._handle)
            if before is not None and before != capture_id:
                earlier = _captures.get(before)
            _capture_of_stream[<uintptr_t>stream._handle] = capture_id
        slot, found = e.slot, e.target
        n = len(_captures)
    if n >= _sweep_at:
        _sweep_captures(None)
    elif earlier is not None:
        # The stream's capture before this one: ended, unless another
        # stream of it still captures (asked, not assumed).
        _sweep_captures([earlier])
    return slot, found, registered


cdef int claim_capture(unsigned long long capture_id, Stream stream) except -1:
    cdef _Capture e
    with cython.critical_section(_capture_lock):
        if capture_id == 0:
            capture_id = _capture_of_stream.get(<uintptr_t>stream._handle, 0)
        e = _captures.get(capture_id)
        if e is not None:
            e.ending = True
    return 0


cdef tuple take_capture(unsigned long long capture_id, Stream stream):
    """The (error slot, target) of a capture, forgotten; (None, None)."""
    cdef _Capture e
    with cython.critical_section(_capture_lock):
        latest = _capture_of_stream.pop(<uintptr_t>stream._handle, 0)
        if capture_id == 0:
            capture_id = latest
        e = _captures.pop(capture_id, None)
    if e is None:
        return None, None
    return e.slot, e.target


cdef int _sweep_captures(list entries) except -1:
    # Forget the captures (all, or `entries`) whose stream no longer takes
    # part in them: ended elsewhere, or their stream closed or gone.  Each is
    # looked at after it was registered (so a capture that began since is
    # never taken for the one before), and only forgotten if it is still the
    # same entry and end_capture is not ending it (take_capture does).
    global _sweep_at
    cdef _Capture e
    cdef Stream stream
    cdef cudaStreamCaptureStatus status
    cdef unsigned long long now
    cdef bint looked
    cdef unsigned long me = _threading.get_ident()
    cdef list ended = []
    if entries is None:
        with cython.critical_section(_capture_lock):
            entries = list(_captures.values())
    for e in entries:
        if e.ending or (e.thread and e.thread != me):
            continue
        stream = e.stream_ref()
        if stream is None or stream.closed:
            ended.append(e)
            continue
        try:
            stream._use()
        except ValueError:
            ended.append(e)     # closed meanwhile
            continue
        try:
            status = cudaStreamCaptureStatusNone
            now = 0
            with nogil:
                looked = _capture_state_now(<cudaStream_t>stream._handle, &status, &now)
            if looked and (status == cudaStreamCaptureStatusNone or now != e.cid):
                ended.append(e)
        except Exception:
            pass                # not known: kept
        finally:
            stream._unuse()
    gone = []
    with cython.critical_section(_capture_lock):
        for e in ended:
            if not e.ending and _captures.get(e.cid) is e:
                del _captures[e.cid]
                gone.append(e.target)
                stale = [h for h, cid in _capture_of_stream.items() if cid == e.cid]
                for h in stale:
                    del _capture_of_stream[h]
        if entries is None or len(_captures) >= _sweep_at:
            _sweep_at = max(_SWEEP_MIN, 2 * len(_captures))
    hook = _capture_hook
    if hook is not None:
        for target in gone:
            if target is not None:
                hook(target)
    return 0


# ---- enqueueing ---------------------------------------------------------------------------
# Whether the stream is being captured decides who owns the payload: a
# one-shot work item (called once, by ticket: shim.h) or the capture's graph
# (a user object; every replay calls it).  The decision is read twice: first
# with the GIL, to build the payload, then again inside the capture fence
# (shim.h), where no capture that streams begins or ends can change it until
# the launch is made.  If the two readings differ, a capture began or ended
# in between: the payload is dropped and the enqueue starts over.  So the
# payload's owner is the right one whatever another thread does meanwhile
# (docs/host-callbacks.rst, "Callbacks and captures on other threads").

cdef int _ATTEMPTS = 1000    # only a capture begun or ended at every attempt exhausts them

# A native host function with something to keep takes the same paths: the
# one-shot record is carried by a ticket (whose reference the trampoline
# hands to the deferred queue once the function ran), and a stream
# capturing gets the plain function as a node, the capture's graph a user
# object owning the reference (every replay calls the function, so
# whatever it needs lives as long as the graph and its executables).  A
# capture the fence cannot see that takes a one-shot record in calls the
# function at its first replay only (stale ticket after that), never with a
# freed record.


cdef struct _HostWork:
    int kind            # a Python callable: KIND_HOST_FUNC or KIND_STREAM_CB
    bint native         # a native function instead: fn(data), its keep-alive the payload
    uintptr_t fn
    uintptr_t data


cdef int _enqueue(Stream stream, object callback, object arg, int kind, object owner,
                  int sync_mode) except -1:
    cdef _HostWork work
    work.kind = kind
    work.native = False
    work.fn = work.data = 0
    keep = None
    if kind == KIND_HOST_FUNC:
        native = native_host_func(callback, arg, owner, "callback", "arg")
        if native is not None:
            work.native = True
            work.fn, work.data, keep = native
    if not work.native:
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")
        if owner is not None:
            raise TypeError("owner is for native host functions; a Python callback keeps "
                            "what it references alive itself")
    # Resolved here, with the GIL, not inside the fence.
    rt.check_host_func_sync_mode(sync_mode)
    stream._use()
    try:
        if work.native and keep is None:
            # Nothing to let go afterwards: the function as it is, captured
            # or not (a captured node calls it on every replay), no fence.
            with nogil:
                rt.launch_native_host_func(<cudaStream_t>stream._handle, <rt.host_fn>work.fn,
                                           <void*>work.data, NULL, sync_mode)
            return 0
        return _enqueue_until_placed(stream, &work, callback, arg, keep, sync_mode)
    finally:
        stream._unuse()


cdef int _enqueue_until_placed(Stream stream, _HostWork* work, object callback, object arg,
                               object keep, int sync_mode) except -1:
    cdef cudaStreamCaptureStatus status
    cdef unsigned long long capture_id
    cdef int attempt
    # The first attempt assumes the common case, no capture, which the
    # one-shot path checks inside the fence anyway; a stream found capturing
    # there is looked at again.
    status = cudaStreamCaptureStatusNone
    capture_id = 0
    for attempt in range(_ATTEMPTS):
        if attempt:
            with nogil:
                _capture_state(<cudaStream_t>stream._handle, &status, &capture_id)
        if status == cudaStreamCaptureStatusActive:
            if not work.native and work.kind != KIND_HOST_FUNC:
                raise RuntimeError(
                    "add_callback cannot be captured into a graph (CUDA would invalidate "
                    "the capture); use launch_host_func, which is captured as a host node")
            if _enqueue_captured(stream, work, callback, arg, keep, capture_id, sync_mode):
                return 0
        elif _enqueue_once(stream, work, callback, arg, keep, sync_mode):
            return 0
    raise RuntimeError("launch_host_func: captures kept beginning or ending on the stream "
                       f"while the {'native function' if work.native else 'callback'} was "
                       f"enqueued ({_ATTEMPTS} attempts)")


cdef int _capture_state(cudaStream_t h, cudaStreamCaptureStatus* status,
                        unsigned long long* capture_id) except -1 nogil:
    # Asked inside the fence and under the capture lock: the driver crashes
    # when a call on a stream races a capture beginning or ending on it in
    # another thread (benchmarks/capture_race.c: the unfenced variants die
    # of SIGSEGV), and the end of a capture on another stream also ends
    # this one's if it joined that capture.
    rt.fence_enter(h)
    try:
        return rt.stream_capture_state_locked(h, status, capture_id)
    finally:
        rt.fence_leave(h)


cdef bint _capture_state_now(cudaStream_t h, cudaStreamCaptureStatus* status,
                             unsigned long long* capture_id) except -1 nogil:
    # _capture_state without waiting for the stream's fence: 0 (nothing
    # asked) while a capture begins or ends on it.  The sweep looks at other
    # threads' streams and must not wait on their fences (fence.h: holds on
    # different streams never wait for one another); an entry it cannot
    # look at now is kept for a later sweep.  Test: test_fence_cpu.py.
    if not rt.fence_try_enter(h):
        return False
    try:
        rt.stream_capture_state_locked(h, status, capture_id)
        return True
    finally:
        rt.fence_leave(h)


cdef int _launch_once(cudaStream_t h, _HostWork* work, PyObject* payload,
                      int sync_mode) except -1 nogil:
    # 1: launched as a one-shot (which now owns the reference to `payload`);
    # 0: the stream is being captured now (nothing enqueued).
    cdef cudaStreamCaptureStatus now = cudaStreamCaptureStatusNone
    rt.fence_enter(h)
    try:
        rt.stream_capture_state_locked(h, &now, NULL)
        if now == cudaStreamCaptureStatusActive:
            return 0
        # Not capturing (or a capture invalidated, which refuses the launch).
        if work.native:
            rt.launch_native_host_func(h, <rt.host_fn>work.fn, <void*>work.data, payload,
                                       sync_mode)
        elif work.kind == KIND_HOST_FUNC:
            rt.launch_host_func(h, payload, sync_mode)
        else:
            rt.stream_add_callback(h, payload)
        return 1
    finally:
        rt.fence_leave(h)


cdef int _enqueue_once(Stream stream, _HostWork* work, object callback, object arg,
                       object keep, int sync_mode) except -1:
    # 1: enqueued; 0: a capture began meanwhile (nothing enqueued).  The
    # payload: a Python callable's HostCall, or a native function's `keep`.
    cdef PyObject* payload
    cdef int launched = 0
    cdef ErrorSlot errors
    if not work.native:
        # One slot per stream, made by the first callback: two threads making
        # the first at once must share it, or one's errors would be lost.
        with cython.critical_section(stream):
            if stream._errors is None:
                stream._errors = new_error_slot()
            errors = stream._errors
        keep = new_call(callback, arg, stream, errors, work.kind)
    payload = <PyObject*>keep
    rt.payload_incref(payload)     # the reference that travels with the work item
    try:
        with nogil:
            if work.native:
                launched = _launch_once(<cudaStream_t>stream._handle, work, payload, sync_mode)
            else:
                # A callback queued before this one may be waiting for the
                # GIL that this thread is about to take back.
                rt.producer_enter()
                try:
                    launched = _launch_once(<cudaStream_t>stream._handle, work, payload,
                                            sync_mode)
                finally:
                    rt.producer_leave()
    except BaseException:
        if not work.native:
            rt.count(rt.STREAMS_CNT_CALLBACK_ENQUEUED)
            rt.count(rt.STREAMS_CNT_CALLBACK_DROPPED)
        rt.payload_decref(payload)
        raise
    if not launched:
        rt.payload_decref(payload)
        return 0
    if not work.native:
        rt.count(rt.STREAMS_CNT_CALLBACK_ENQUEUED)
    return 1


cdef int _launch_captured(cudaStream_t h, _HostWork* work, PyObject* payload,
                          unsigned long long capture_id, int sync_mode,
                          bint* moved) except -1 nogil:
    # 1: `payload` attached to the capture's graph and the host function
    # launched into it; 0: the stream's capture is no longer ``capture_id``.
    cdef cudaStreamCaptureStatus now = cudaStreamCaptureStatusNone
    cdef unsigned long long id_now = 0
    cdef cudaGraph_t graph = NULL
    # Under the capture lock: cudaGraphRetainUserObject works on the
    # capture's graph, and CUDA graph objects are not internally
    # synchronized ("API calls accessing the same graph object must be
    # serialized externally", CUDA's graph thread-safety notes).  Without it,
    # several threads enqueuing into one capture attached user objects to
    # the same graph at once, beside each other's host nodes being captured
    # into it: the GPU race tests died of SIGSEGV (test_capture_races_gpu.py).
    # Captured enqueues are rare and short (nothing here waits for the GPU:
    # a captured launch queues nothing), so serializing them costs little.
    rt.capture_lock_enter()
    try:
        rt.stream_get_capture_info(h, &now, &id_now, &graph, NULL, NULL, NULL)
        if now != cudaStreamCaptureStatusActive or id_now != capture_id:
            return 0
        # Inside the fence the capture cannot end through streams, so its
        # graph is alive here.
        rt.graph_attach_reference(graph, payload, moved)
        if work.native:
            rt.launch_native_host_func(h, <rt.host_fn>work.fn, <void*>work.data, NULL,
                                       sync_mode)
        else:
            rt.launch_graph_host_func(h, payload, sync_mode)
        return 1
    finally:
        rt.capture_lock_leave()


cdef int _enqueue_captured(Stream stream, _HostWork* work, object callback, object arg,
                           object keep, unsigned long long capture_id,
                           int sync_mode) except -1:
    # 1: captured; 0: the capture ended or changed meanwhile (nothing enqueued).
    cdef bint registered = False
    cdef bint moved = False
    cdef int launched = 0
    cdef HostCall call
    slot = None
    if not work.native:
        # Two threads enqueueing into one capture share its slot.
        slot, _, registered = capture_entry(capture_id, stream, None)
        call = new_call(callback, arg, None, slot, KIND_HOST_FUNC)
        call.persistent = True
        # The graph this capture makes (or extends) now holds a host callable:
        # its executables box what node updates bring (_graph.pyx, instantiate).
        (<ErrorSlot>slot).host_calls = True
        keep = call
    rt.payload_incref(<PyObject*>keep)     # the user object's, once it is made
    try:
        with nogil:
            launched = _launch_captured(<cudaStream_t>stream._handle, work, <PyObject*>keep,
                                        capture_id, sync_mode, &moved)
    except BaseException:
        # Attached (moved): the graph owns the payload, as it would the node.
        if not moved:
            rt.payload_decref(<PyObject*>keep)
        raise
    if not launched:
        rt.payload_decref(<PyObject*>keep)
        if registered:
            forget_capture(capture_id, slot, stream)
        return 0
    return 1


cdef int forget_capture(unsigned long long capture_id, object slot, Stream stream) except -1:
    cdef _Capture found
    with cython.critical_section(_capture_lock):
        found = _captures.get(capture_id)
        if found is not None and found.slot is slot and not found.ending:
            del _captures[capture_id]
            if _capture_of_stream.get(<uintptr_t>stream._handle) == capture_id:
                del _capture_of_stream[<uintptr_t>stream._handle]
        else:
            found = None
    if found is not None and found.target is not None and _capture_hook is not None:
        _capture_hook(found.target)
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
cdef object _ffi_lock = object()


cdef object _cffi():
    global _ffi
    if _ffi is None:
        import _cffi_backend
        made = _cffi_backend.FFI()
        # Set once, never replaced (see _capture_lock for the lock object).
        with cython.critical_section(_ffi_lock):
            if _ffi is None:
                _ffi = made
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
    # Read where the pointer is stored: ctypes.cast would put fn into its own
    # _objects (a reference cycle that keeps it alive until a collection).
    address = ctypes.c_void_p.from_address(ctypes.addressof(fn)).value or 0
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


cdef object _carg_type = None


cdef bint _is_ctypes_byref(object obj):
    # ctypes.byref(x[, offset]) makes a CArgObject (not a _CData): so do the
    # from_param conversions of ctypes' simple types, with another tag.  The
    # type is ctypes' own, asked once (its module reads "builtins" before
    # CPython 3.12, "_ctypes" since).  Only where ctypes was imported: an
    # object of it cannot exist otherwise.
    global _carg_type
    import sys
    if _carg_type is None:
        ctypes = sys.modules.get("ctypes")
        if ctypes is None:
            return False
        _carg_type = type(ctypes.byref(ctypes.c_int()))
    return type(obj) is _carg_type and hasattr(obj, "_obj")


cdef object _byref_address(object ref, str argname):
    # CPython exposes the referenced object (`_obj`) but not the offset: the
    # address is what ctypes passes to C for it, read through a C call that
    # returns its pointer argument (memmove of 0 bytes to the same place,
    # which touches nothing).  c_void_p accepts only byref's tag ('P').
    # The CArgObject is what the caller keeps: it holds `_obj`.
    import ctypes
    try:
        return ctypes.memmove(ref, ref, 0) or 0
    except ctypes.ArgumentError:
        raise TypeError(f"{argname}: this ctypes parameter ({ref!r}) is not a pointer (pass "
                        "ctypes.byref(x) or ctypes.pointer(x))") from None


cdef object _native_data(object data, str argname):
    """(address, object to keep or None) of a native function's data pointer."""
    if data is None:
        return 0, None
    if _is_ctypes_byref(data):
        return _byref_address(data, argname), data
    if _is_ctypes_instance(data):
        import ctypes
        # As for the function: read the address, never ctypes.cast (which
        # makes data refer to itself).  An array is its own address.
        if isinstance(data, ctypes.Array):
            return ctypes.addressof(data), data
        if isinstance(data, (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.c_wchar_p)):
            return ctypes.c_void_p.from_address(ctypes.addressof(data)).value or 0, data
        raise TypeError(f"{argname}: a ctypes {type(data).__name__} is not a pointer "
                        "(pass ctypes.byref(x) or ctypes.pointer(x))")
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


rt.set_dispatcher(_dispatch)
set_host_call_enqueue(_enqueue)


include "_hostcall/_testing.pxi"
