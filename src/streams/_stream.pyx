# cython: language_level=3
"""Streams and events: ``Stream``, ``Event``, the per-thread current stream,
waits between them, and stream attributes.

The later modules build on this one: host callbacks (``_hostcall``),
awaiting (``_asyncio``), capture and graphs (``_graph``), kernels
(``_launch``) and memory (``_memory``).  Where a Stream method belongs to one of them, it reaches it
through a late import on a cold path, a registered function, or a base
class declared here (``LaunchTarget``).

Where a closed stream's work ends (``_stream/tail.pxi``) and the pools of
handles (``_stream/pools.pxi``) are parts of their own, included where they
stand in this module; its private hooks for the tests are included last
(``_stream/_testing.pxi``).
"""
import threading as _threading
import weakref as _weakref

cimport cython
from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.object cimport PyTypeObject
from cpython.type cimport PyType_Modified
from libc.stdint cimport uintptr_t
from libc.string cimport memset

cimport streams._cudart as rt
cimport streams._nvtx as nvtx
from streams._args cimport as_bool, as_enum, as_int, as_nbytes, as_pointer_int, as_timeout_ns
from streams._device cimport (WAIT_SLICE_NS, DeviceScope, current_device, enter_device,
                              exit_device, priority_range, require_device, resolve_device)
from streams._foreign cimport (STREAM_LEGACY, STREAM_NULL, STREAM_PER_THREAD,
                               check_event_handle, check_stream_handle, foreign_event,
                               foreign_stream, foreign_stream_device)
from streams._handle cimport HandleOwner
from streams._platform cimport (STREAMS_FREE_THREADED, streams_close_begin, streams_closed_now,
                                streams_flag_get, streams_flag_set, streams_u64_get, streams_u64_set,
                                streams_count_add, streams_count_get, streams_cpu_relax,
                                streams_cpu_yield, streams_is_closed, streams_now_ns, streams_pool, streams_pool_close,
                                streams_pool_idle, streams_pool_new, streams_pool_put,
                                streams_pool_ref, streams_pool_take, streams_pool_unref,
                                streams_sleep_ns, streams_use_begin, streams_use_end)
from streams.cudart cimport *

from streams._args import StreamsEnum
from streams._cudart import CudaError, HostCallbackError
from streams._device import Device

cdef object _tls = _threading.local()   # .current: {device: Stream}, .stack: [...]

# streams.nvtx.trace_calls: the switch of the ranges around this module's
# traced operations (one load and one branch while off;
# tests/nvtx/test_nvtx_cpu.py, the per-call ranges).
cdef const int* _tracing = nvtx.trace_switch()
# streams.checker: the race checker's switch (one load and one branch while
# off); its hooks run after the operation was enqueued.
cdef const int* _checking = nvtx.check_switch()


# ---- enums -------------------------------------------------------------------------

class CaptureStatus(StreamsEnum):
    """A stream's capture status (``cudaStreamCaptureStatus``)."""
    NONE = cudaStreamCaptureStatusNone
    ACTIVE = cudaStreamCaptureStatusActive
    INVALIDATED = cudaStreamCaptureStatusInvalidated


class HostFuncSyncMode(StreamsEnum):
    """How CUDA's host-function thread waits for the next host function
    (``Stream.launch_host_func(..., sync_mode=)``): BLOCKING sleeps,
    SPIN_WAIT spins (CUDA 13.1 driver)."""
    BLOCKING = 0
    SPIN_WAIT = 1


class CaptureMode(StreamsEnum):
    """How a capture interacts with other threads (``cudaStreamCaptureMode``)."""
    GLOBAL = cudaStreamCaptureModeGlobal
    THREAD_LOCAL = cudaStreamCaptureModeThreadLocal
    RELAXED = cudaStreamCaptureModeRelaxed


class StreamAttribute(StreamsEnum):
    """Names for ``Stream.get_attribute``/``set_attribute`` (``cudaStreamAttrID``)."""
    ACCESS_POLICY_WINDOW = cudaStreamAttributeAccessPolicyWindow
    SYNCHRONIZATION_POLICY = cudaStreamAttributeSynchronizationPolicy
    PRIORITY = cudaStreamAttributePriority


class SyncPolicy(StreamsEnum):
    """How a host thread waits for this stream (``cudaSynchronizationPolicy``)."""
    AUTO = cudaSyncPolicyAuto
    SPIN = cudaSyncPolicySpin
    YIELD = cudaSyncPolicyYield
    BLOCKING_SYNC = cudaSyncPolicyBlockingSync


class AccessProperty(StreamsEnum):
    """L2 access property of a window's hits or misses (``cudaAccessProperty``)."""
    NORMAL = cudaAccessPropertyNormal
    STREAMING = cudaAccessPropertyStreaming
    PERSISTING = cudaAccessPropertyPersisting


class MemAttach(StreamsEnum):
    """Who may touch managed memory attached to a stream (``cudaMemAttach*``)."""
    GLOBAL = cudaMemAttachGlobal
    HOST = cudaMemAttachHost
    SINGLE = cudaMemAttachSingle


# ---- helpers shared with the later modules ---------------------------------------------

cdef host_call_enqueue_fn _enqueue_host_call = NULL


cdef void set_host_call_enqueue(host_call_enqueue_fn fn) noexcept:
    global _enqueue_host_call
    _enqueue_host_call = fn


cdef deadline_check_fn _deadline_check = NULL


cdef void set_deadline_check(deadline_check_fn fn) noexcept:
    global _deadline_check
    _deadline_check = fn


cdef int check_deadline(Waitable obj) except -1:
    # Reached only through a watch, which streams._deadline made after it
    # registered the check.
    if _deadline_check != NULL:
        _deadline_check(obj)
    return 0


cpdef Stream as_stream(object stream, str argname="stream"):
    """A :class:`Stream` for ``stream``, as every ``stream=`` argument takes it.

    * None: the current stream (:func:`current_stream`);
    * a :class:`Stream` (a compat one included): itself, no new object;
    * another library's stream: a Stream that wraps its handle without
      owning it and keeps the object alive (``owner``).  Recognized are
      objects with ``__cuda_stream__`` (a method or attribute returning
      ``(0, handle)``; another version is refused: cuda.core, CuPy,
      numba-cuda, RMM implement it), PyTorch streams (``.cuda_stream``),
      CuPy streams (``.ptr``) and older numba-cuda streams (``.handle``).
      A ``.ptr`` or ``.handle`` of any other object is not read (it may be
      memory).  A closed cuda.core stream is refused.

    Anything else raises TypeError naming ``argname``; a value that cannot
    be a handle, ValueError.  The device of a foreign stream is looked up
    once per object (kept while the object lives).
    """
    cdef uintptr_t h
    if stream is None:
        return current_stream()
    if isinstance(stream, Stream):
        return <Stream>stream
    foreign_stream(stream, argname, &h, False)
    if h <= STREAM_PER_THREAD:
        return _make_special(h, stream)
    return _wrap_foreign(h, foreign_stream_device(stream, h), stream)


cdef Event as_event(object event, str argname):
    if isinstance(event, Event):
        return <Event>event
    raise TypeError(f"{argname} must be a streams.Event, not {type(event).__name__}")


cdef Stream _wrap_foreign(uintptr_t h, int device, object owner):
    cdef Stream s = Stream.__new__(Stream)
    s._handle = <streams_stream_t>h
    s._device = device
    s._owner = owner
    s._opened(False)
    return s


# ---- other libraries' streams and events ---------------------------------------------------
#
# streams._foreign reads them (and checks raw handles); here they are used:
# without a wrapper where a call uses the handle only while it runs
# (Event.record, Event.wait, Stream.wait_event, Stream.wait_stream).

cdef int _check_same_device(int event_device, int stream_device) except -1:
    # An event records only on a stream of its own device; CUDA's own
    # error (an invalid resource handle) does not say so.
    if event_device >= 0 and stream_device >= 0 and event_device != stream_device:
        raise CudaError(cudaErrorInvalidResourceHandle, None,
                           f"the event belongs to device {event_device} and the stream to "
                           f"device {stream_device}: an event records only on a stream of "
                           "its own device")
    return 0


cdef enum _RawOp:
    RAW_RECORD
    RAW_WAIT


cdef int _enqueue_raw(_RawOp what, Waitable ours, void* foreign, unsigned int flags) except -1:
    # A record or a wait between one of ours, a stream or an event, and
    # another library's raw handle (its object stays alive in the caller),
    # with the GIL released (the enqueue rule below).
    cdef void* stream
    cdef void* event
    ours._use()
    try:
        stream = ours._handle if ours._kind == rt.HANDLE_STREAM else foreign
        event = foreign if ours._kind == rt.HANDLE_STREAM else ours._handle
        with nogil:
            if what == RAW_RECORD:
                rt.event_record(<cudaEvent_t>event, <cudaStream_t>stream, flags)
            else:
                rt.stream_wait_event(<cudaStream_t>stream, <cudaEvent_t>event, flags)
    finally:
        ours._unuse()
    return 0


cdef int _event_create_on(cudaEvent_t* out, unsigned int flags, int device) except -1 nogil:
    # Events belong to the device current at their creation (-1: leave it).
    cdef DeviceScope scope
    enter_device(&scope, device)
    try:
        return rt.event_create(out, flags)
    finally:
        exit_device(&scope)


cdef Event new_event(int device, unsigned int flags):
    """A new owned event on ``device`` (-1: the current device)."""
    cdef Event ev = Event.__new__(Event)
    cdef cudaEvent_t h = NULL
    if device < 0:
        device = current_device()
    with nogil:
        _event_create_on(&h, flags, device)
    ev._handle = <streams_event_t>h
    ev._device = device
    ev._flags = flags
    ev._opened(True)
    return ev


# Pause-spinning before yielding: most short waits end within it.
cdef long long _SPIN_NS = 100000


cdef int _poll(bint is_stream, void* handle, long long slice_end, bint sleepy,
               long long* nap_ns, long long spin_until) except -1 nogil:
    cdef int done
    while True:
        if is_stream:
            done = rt.stream_query(<cudaStream_t>handle)
        else:
            done = rt.event_query(<cudaEvent_t>handle)
        if done or streams_now_ns() >= slice_end:
            return done
        if sleepy:
            streams_sleep_ns(nap_ns[0])
            if nap_ns[0] < 1000000:
                nap_ns[0] = nap_ns[0] * 2
        elif streams_now_ns() < spin_until:
            streams_cpu_relax()
        else:
            streams_cpu_yield()


cdef int wait_until_done(Waitable obj, long long timeout_ns) except -1:
    """Wait for a Stream or Event, GIL released, Ctrl-C within milliseconds.

    Completion is noticed by polling with a pause and then a yield between
    polls: the spin-then-yield the driver does for a synchronize under its
    default scheduling, so it adds no wake-up latency.  Blocking-sync
    events sleep between polls instead (20 us growing to 1 ms).  A wait
    that saw the work done ends with the plain synchronize call, which
    returns at once then, and lets CUDA do what it does at a synchronize
    (the stream-ordered memory pool gives freed memory back to the system
    there), when this package made a stream-ordered free since the object's
    last one: an idle wait then costs one query, as cudaStreamSynchronize
    costs one call.  Memory that another library frees in stream order goes
    back at its own synchronize, or at a device synchronize.
    """
    cdef bint is_stream = obj._kind == rt.HANDLE_STREAM
    cdef void* handle = obj._handle
    cdef unsigned long long frees
    cdef bint sleepy = not is_stream and ((<Event>obj)._flags & cudaEventBlockingSync) != 0
    cdef long long now = streams_now_ns()
    cdef long long deadline = -1 if timeout_ns < 0 else now + timeout_ns
    cdef long long nap_ns = 20000
    cdef long long spin_until = now + _SPIN_NS
    cdef long long slice_end
    cdef int done = 0
    obj._use()
    try:
        while True:
            with nogil:
                slice_end = streams_now_ns() + WAIT_SLICE_NS
                if deadline >= 0 and deadline < slice_end:
                    slice_end = deadline
                done = _poll(is_stream, handle, slice_end, sleepy, &nap_ns, spin_until)
                frees = rt.async_frees()
                if done and frees != streams_u64_get(&obj._frees_seen):
                    _raw_status(is_stream, handle, True)
                    streams_u64_set(&obj._frees_seen, frees)
            if done:
                return 1
            PyErr_CheckSignals()
            # A deadline of this work that the watchdog saw expire raises
            # here, in the waiter, though the work is not done
            # (tests/deadline/test_deadline_gpu.py, test_a_missed_deadline_
            # raises_in_synchronize).
            if obj._watch is not None:
                check_deadline(obj)
            if deadline >= 0 and streams_now_ns() >= deadline:
                return 0
    finally:
        obj._unuse()


# ---- calls shared by Stream and Event ------------------------------------------------------

cdef inline int _raw_status(bint is_stream, void* handle, bint wait) except -1 nogil:
    # A query (1 done, 0 not) or a plain synchronize of a stream or event.
    if is_stream and wait:
        return rt.stream_synchronize(<cudaStream_t>handle)
    if is_stream:
        return rt.stream_query(<cudaStream_t>handle)
    if wait:
        return rt.event_synchronize(<cudaEvent_t>handle)
    return rt.event_query(<cudaEvent_t>handle)


ctypedef int (*_stream_status_call)(cudaStream_t s) noexcept nogil
ctypedef int (*_event_status_call)(cudaEvent_t ev) noexcept nogil


cdef inline int _query_call(bint is_stream, void* handle) noexcept nogil:
    # The call layer's query through a pointer that does not propagate its
    # error: 1 done, 0 not, -1 with the exception set, for the caller to
    # let go of its use first and pass the -1 on (no finally: its saved
    # exception state costs more than the rest of a query's path).
    if is_stream:
        return (<_stream_status_call>rt.stream_query)(<cudaStream_t>handle)
    return (<_event_status_call>rt.event_query)(<cudaEvent_t>handle)


cdef inline int _pass_on(int rc) except -1 nogil:
    # A -1 that a call through such a pointer returned becomes the caller's
    # error here: its exception is already set.
    return rc


# ---- Waitable: what Stream and Event share ---------------------------------------------------

# no_gc_clear (and Stream's too): `_owner` keeps a foreign handle alive, and a
# buffer's free, an executable's parked replays or a graph's event node may
# still use the handle after the GC found the wrapper in a cycle; Stream's
# `_tail` orders the frees of buffers of a closed stream ("Reference
# cycles" in docs/architecture.rst).
@cython.no_gc_clear
cdef class Waitable(HandleOwner):
    """Base of Stream and Event: work that can be queried and waited for."""

    def __cinit__(self, *args, **kwargs):
        self._device = -1

    def __dealloc__(self):
        # HandleOwner.__dealloc__ would release the handle only after
        # Cython has cleared this class's fields, and `_owner` may be what
        # keeps the handle valid (a green context's stream: its context,
        # which must outlive cudaStreamDestroy).  So the handle goes first.
        if self._owns_handle and streams_close_begin(&self._state) == 1:
            self._release()

    cdef int c_query(self) except -1 nogil:
        cdef int done
        self._use()
        done = _query_call(self._kind == rt.HANDLE_STREAM, self._handle)
        self._unuse()
        return done     # -1 with the call layer's exception set

    cdef int c_synchronize(self) except -1 nogil:
        self._use()
        try:
            return _raw_status(self._kind == rt.HANDLE_STREAM, self._handle, True)
        finally:
            self._unuse()

    cdef int _done_now(self) except -1:
        # The idle fast path of synchronize(): one query, then, only if the
        # package made a stream-ordered free since this object's last full
        # synchronize, that synchronize, so that the memory pool can give
        # freed memory back.  Both with the GIL released (the rule below).
        cdef bint is_stream = self._kind == rt.HANDLE_STREAM
        cdef unsigned long long frees
        cdef int done
        self._use()
        try:
            with nogil:
                done = _raw_status(is_stream, self._handle, False)
        finally:
            self._unuse()
        if done == 0:
            return 0
        frees = rt.async_frees()
        # Read and replaced by any thread that synchronizes (atomically:
        # every value some thread stored was true when it was stored).
        if frees != streams_u64_get(&self._frees_seen):
            self._use()
            try:
                with nogil:
                    _raw_status(is_stream, self._handle, True)
            finally:
                self._unuse()
            streams_u64_set(&self._frees_seen, frees)
        return 1

    cdef int _destroy(self) except -1 nogil:
        if self._pool != NULL:
            return _give_back(self._pool, self._kind, self._handle)
        return rt.destroy_handle(self._kind, self._handle)

    cdef void _release(self) noexcept nogil:
        _give_back(self._pool, self._kind, self._handle)

    def query(self):
        """True when the work (a stream's so far, an event's last record)
        has completed.  Never blocks for the GPU (it may wait for a driver
        lock, with the GIL released)."""
        cdef int done
        self._use()
        with nogil:
            done = _query_call(self._kind == rt.HANDLE_STREAM, self._handle)
        self._unuse()
        _pass_on(done)
        if done == 1 and streams_flag_get(_checking) != 0:
            # Seen complete: as a synchronize for the race checker.
            if self._kind == rt.HANDLE_STREAM:
                nvtx.check_hooks().sync_stream(self)
            else:
                nvtx.check_hooks().sync_event(self)
        return done == 1

    @property
    def done(self):
        return self.query()

    def wait_async(self):
        """An awaitable that completes when the work is done (a stream's so
        far, an event's last record), without blocking the event loop.

        CUDA's host-function thread rings an eventfd the running loop
        watches (no GIL taken there, no polling); where that is not possible
        (no eventfd, a loop without ``add_reader``) it polls.  Cancelling the
        awaiting task leaves nothing behind.
        """
        return _later("_asyncio", "wait_async")(self)

    def __await__(self):
        return self.wait_async().__await__()

    def close(self):
        """Release the handle now; further use raises ValueError.  Idempotent.

        A call still using it in another thread finishes first: the handle
        is released when it leaves.  A pooled one goes back to its pool.
        """
        # When a user in another thread releases the handle on its way out,
        # the owner stays until this object goes.  cudaStreamDestroy and
        # cudaEventDestroy return at once (CUDA frees the handle when its
        # work is done) but take a driver lock: the GIL is released.
        if self._close_handle() == 1:
            # A reader of .owner in another thread takes its reference under
            # the same critical section, never one this drop is freeing.
            with cython.critical_section(self):
                self._owner = None

    @property
    def name(self):
        """The name NVTX tools (Nsight Systems) show for this stream or
        event: None until one is given, with ``name=`` when it is made or by
        setting this attribute (docs/nvtx.rst).  The tool keeps the name it
        was last given for the CUDA handle, which a pooled one keeps."""
        with cython.critical_section(self):
            return self._name

    @name.setter
    def name(self, value):
        self._set_name(value)

    cdef int _set_name(self, object name) except -1:
        cdef bytes text
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        text = (<str>name).encode("utf-8", "surrogatepass")
        if b"\0" in text:
            raise ValueError("name must not contain NUL characters")
        self._use()
        try:
            # An NVTX call, not a CUDA one: no driver lock, the GIL may stay.
            if self._kind == rt.HANDLE_STREAM:
                nvtx.name_stream(self._handle, text)
            else:
                nvtx.name_event(self._handle, text)
            with cython.critical_section(self):
                self._name = name
        finally:
            self._unuse()
        return 0

    def __eq__(self, other):
        if not isinstance(other, Waitable) or (<Waitable>other)._kind != self._kind:
            return NotImplemented
        if self.closed or (<Waitable>other).closed:
            return self is other
        return (self._handle == (<Waitable>other)._handle
                and self._device == (<Waitable>other)._device)

    def __hash__(self):
        return hash((self._kind, <uintptr_t>self._handle, self._device))


# ---- the GIL rule: every CUDA call made from Python releases it -------------------------
# An enqueue (record, wait, launch, copy, graph launch, host function)
# blocks in the driver while the queue it goes to is full, until the GPU
# drains it; a status call (query), a create or a destroy can wait for a
# driver lock that such a blocked thread holds.  What the GPU is waiting
# for may need the GIL: a Python host callback of any library, a Python
# thread about to write the word a wait_value waits for, a kernel polling
# memory a Python thread fills.  A thread that waited in the driver
# holding the GIL would then wait for ever.  So the rule has no
# exception: every call into CUDA that can block or take a driver lock is
# made inside `with nogil:` (on free-threaded CPython: detached from the
# interpreter, which also keeps a stop-the-world pause from waiting on a
# thread blocked in the driver).  Nothing is counted or guessed, so no
# path (captures, other libraries' streams and events, failed enqueues,
# the C-level API) can break it.  What it costs per call is measured in
# benchmarks/ (the release and retake of an uncontended GIL).
# Tests: tests/stream/test_enqueue_gil_gpu.py, one per kind of enqueue and status
# call, each behind a wait_value that a Python thread releases.

ctypedef int (*_record_call)(cudaEvent_t ev, cudaStream_t s, unsigned int flags) noexcept nogil
ctypedef int (*_wait_call)(cudaStream_t s, cudaEvent_t ev, unsigned int flags) noexcept nogil


cdef inline int _record_or_wait(Stream stream, Event event, bint wait) noexcept nogil:
    # The call of both paths below, made with the uses already taken: 0, or
    # -1 with the call layer's exception set.
    cdef int rc
    if wait:
        return (<_wait_call>rt.stream_wait_event)(<cudaStream_t>stream._handle,
                                                   <cudaEvent_t>event._handle, 0)
    rc = (<_record_call>rt.event_record)(<cudaEvent_t>event._handle,
                                          <cudaStream_t>stream._handle, 0)
    if rc == 0:
        streams_flag_set(<int*>&event._recorded, True)
    return rc


# The counted uses (HandleOwner._use): with the GIL released, close() in
# another thread may come in between.  No finally: the call layer's
# function is called through a pointer that does not propagate its error,
# so that both objects are let go before the error is (its saved exception
# state costs more than the rest of the path).
cdef inline int _enqueue_counted(Stream stream, Event event, bint wait) except -1 nogil:
    cdef int rc
    stream._use()       # closed: let go, raised
    if streams_use_begin(&event._state) != 0:
        event._unuse()
        stream._unuse()
        with gil:
            return event._raise_closed()
    rc = _record_or_wait(stream, event, wait)
    event._unuse()
    stream._unuse()
    return rc       # -1 with the call layer's exception set


cdef inline int _record(Stream stream, Event event) except -1:
    # Stream.record and Event.record (not external); the race checker hears it.
    with nogil:
        _enqueue_counted(stream, event, False)
    if stream._watch is not None or event._watch is not None:
        # The event's waits raise what its stream's deadlines leave
        # (test_deadline_gpu.py, test_an_event_of_a_watched_stream_raises).
        with cython.critical_section(event):
            event._watch = stream._watch
    if streams_flag_get(_checking) != 0:
        nvtx.check_hooks().record(event, stream)
    return 0


cdef inline int _wait_event(Stream stream, Event event) except -1:
    # Stream.wait_event and Event.wait (not external); the checker hears it.
    with nogil:
        _enqueue_counted(stream, event, True)
    if streams_flag_get(_checking) != 0:
        nvtx.check_hooks().wait(stream, event)
    return 0


# ---- the current stream -------------------------------------------------------------------

cdef dict _current_map():
    try:
        return _tls.current
    except AttributeError:
        _tls.current = {}
        _tls.stack = []
        return _tls.current


def current_stream(device=None):
    """The calling thread's current stream for ``device`` (default: current device).

    Set by ``with stream:`` and ``stream.use()``.  When none was set:
    ``Stream.legacy``, or, while :func:`follow_current_stream` follows a
    framework, that framework's current stream.
    """
    cdef int dev
    if device is None:
        dev = current_device()
    else:
        dev = resolve_device(device)
    cdef object s = _current_map().get(dev)
    if s is not None:
        return s
    if _current_source is not None:
        # Replaced by follow_current_stream in another thread perhaps: the
        # reference is taken under the lock the replacement takes.
        with cython.critical_section(_current_source_lock):
            source = _current_source
        if source is not None:
            return source(dev)
    return Stream.legacy


# What current_stream() returns where this thread set none: None for
# Stream.legacy, else a function of the device index (a framework's current
# stream, streams._interop.follow_current_stream).  One global read when
# unset, so the usual path costs nothing more.
cdef object _current_source = None
cdef object _current_source_lock = object()


def _set_current_source(source):
    """Install ``source`` (None: none) for ``current_stream``; return the one before."""
    global _current_source
    if source is not None and not callable(source):
        raise TypeError(f"source must be callable or None, not {type(source).__name__}")
    with cython.critical_section(_current_source_lock):
        previous = _current_source
        _current_source = source
    return previous


cdef Stream _make_special(uintptr_t handle, object owner=None, type cls=None):
    cdef Stream s = Stream.__new__(Stream if cls is None else cls)
    s._handle = <streams_stream_t>handle
    s._device = -1
    s._special = True
    s._owner = owner
    s._opened(False)
    return s


# ---- Stream -------------------------------------------------------------------------------

cdef struct _StreamParams:
    int device
    int priority
    bint default_priority
    unsigned int flags


cdef int _stream_params(object device, object priority, object non_blocking,
                        _StreamParams* p) except -1:
    cdef int least, greatest
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    cdef bint nb = as_bool(non_blocking, "non_blocking")
    # Argument errors come before "no GPU": resolve_device checks types
    # and formats first, and the range only against a real device count.
    p.device = resolve_device(device)
    priority_range(p.device, &least, &greatest)
    # Clamp like PyTorch does: CUDA would clamp too, but then the stream's
    # priority would differ silently from what `priority` reports.
    p.priority = greatest if priority < greatest else (least if priority > least else priority)
    p.default_priority = p.priority == least
    p.flags = cudaStreamNonBlocking if nb else cudaStreamDefault
    return 0


cdef void* _create_stream(const _StreamParams* p) except NULL:
    cdef cudaStream_t handle = NULL
    cdef DeviceScope scope
    rt.drain_deferred()
    with nogil:
        enter_device(&scope, p.device)
        try:
            rt.stream_create(&handle, p.flags, p.priority, p.default_priority)
        finally:
            exit_device(&scope)
    return <void*>handle


cdef int _give_back(void* pool, int kind, void* handle) noexcept nogil:
    # A pooled handle goes back to its pool, unless that is full or closed;
    # any other handle is released.  Never raises.
    if pool == NULL:
        rt.release_handle(kind, handle)
        return 0
    if not streams_pool_put(<streams_pool*>pool, handle):
        rt.release_handle(kind, handle)
    streams_pool_unref(<streams_pool*>pool)
    return 0


@cython.no_gc_clear
cdef class Stream(Waitable):
    """Stream(device=None, priority=0, non_blocking=False, *, name=None)

    A CUDA stream.

    Owns its ``cudaStream_t`` (destroyed by ``close()`` or garbage collection)
    unless it wraps a foreign handle (``from_handle``/``from_external``).
    ``priority`` follows CUDA: lower numbers run first, and values outside
    the device's range are clamped into it.  ``non_blocking`` streams do not
    synchronize with the legacy default stream.  ``name`` names the stream
    in NVTX tools (:attr:`name`).

    The default streams are singletons that are never destroyed:
    ``Stream.legacy`` (``cudaStreamLegacy``), ``Stream.per_thread``
    (``cudaStreamPerThread``) and ``Stream.null`` (handle 0, which this
    package, built without per-thread default streams, treats as the legacy
    stream; it exists because CuPy and PyTorch report their default stream
    as 0).
    """

    def __cinit__(self, *args, **kwargs):
        self._kind = rt.HANDLE_STREAM
        self._special = False

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, device=None, priority=0, non_blocking=False, *, name=None):
        cdef _StreamParams p
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be None or a str, not {type(name).__name__}")
        self._init_once()
        try:
            _stream_params(device, priority, non_blocking, &p)
            self._handle = <streams_stream_t>_create_stream(&p)
            self._device = p.device
            self._opened(True)
        except BaseException:
            self._init_abandoned()
            raise
        if name is not None:
            self._set_name(name)

    # ---- factories for handles we do not own -------------------------------
    @classmethod
    def from_handle(cls, ptr, owner=None, device=None):
        """Wrap a foreign ``cudaStream_t`` (an int) without taking ownership.

        ``owner`` is kept alive as long as the returned Stream; ``device`` is
        looked up with ``cudaStreamGetDevice`` when not given.  Values that
        cannot be a handle are refused, but CUDA cannot validate a plausible
        pointer: passing one that is not a live stream is undefined behaviour,
        as with any raw handle.
        """
        cdef uintptr_t h = as_pointer_int(ptr, "ptr")
        cdef Stream s
        cdef int dev = -1
        if h <= STREAM_PER_THREAD:
            return _make_special(h, owner, cls)
        check_stream_handle(h, "ptr")
        if device is not None:
            dev = resolve_device(device)
        else:
            require_device()
            with nogil:
                rt.stream_get_device(<cudaStream_t>h, &dev)
        s = Stream.__new__(cls)
        s._handle = <streams_stream_t>h
        s._device = dev
        s._owner = owner
        s._opened(False)
        return s

    @staticmethod
    def from_external(obj):
        """Wrap another library's stream.

        Reads what :func:`as_stream` reads (the ``__cuda_stream__``
        protocol, PyTorch's ``.cuda_stream``, CuPy's ``.ptr``, numba-cuda's
        ``.handle``), with the same checks and messages, and also a
        ``.cuda_stream`` or ``.ptr`` of any other object: calling this says
        that ``obj`` is a stream.  The returned Stream keeps ``obj`` alive.
        """
        cdef uintptr_t h
        if isinstance(obj, Stream):
            return obj
        foreign_stream(obj, "obj", &h, True)
        if h <= STREAM_PER_THREAD:
            return _make_special(h, obj)
        return _wrap_foreign(h, foreign_stream_device(obj, h), obj)

    def __cuda_stream__(self):
        """``(0, handle)``: the CUDA stream protocol (cuda.core, CuPy, ...)."""
        self._check_open()
        return (0, <uintptr_t>self._handle)

    # ---- C-level API (nogil, for cimporters) -------------------------------
    cdef streams_stream_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_device(self) except -1 nogil:
        if self._device >= 0:
            return self._device
        return rt.get_device()

    cdef int c_record(self, Event event) except -1 nogil:
        return _enqueue_counted(self, event, False)

    cdef int c_wait_event(self, Event event) except -1 nogil:
        return _enqueue_counted(self, event, True)

    cdef int c_wait_stream(self, Stream other) except -1 nogil:
        self._use()
        try:
            other._use()
            try:
                return rt.stream_wait_stream(<cudaStream_t>self._handle,
                                             <cudaStream_t>other._handle, other.c_device())
            finally:
                other._unuse()
        finally:
            self._unuse()

    # ---- Python API -------------------------------------------------------
    def synchronize(self, timeout=None):
        """Wait for all enqueued work.  The GIL is released and Ctrl-C works.

        Returns True once the work is done; with ``timeout`` in seconds,
        returns False if it expired first.  Raises HostCallbackError if a
        host callback enqueued on this stream raised since the last check.
        In threads other than the main one Python cannot deliver Ctrl-C:
        give those waits a ``timeout``.
        """
        cdef long long timeout_ns = as_timeout_ns(timeout)
        cdef int done
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_STREAM_SYNCHRONIZE)
        try:
            done = self._done_now()
            if not done:
                done = wait_until_done(self, timeout_ns)
            if done == 1 and streams_flag_get(_checking) != 0:
                nvtx.check_hooks().sync_stream(self)
            if self._errors is not None:
                self._errors.raise_pending("host callback")
            if self._watch is not None:
                check_deadline(self)
            return done == 1
        finally:
            if traced:
                nvtx.trace_pop()

    def record(self, event=None):
        """Record ``event`` (a new one, on this stream's device, if None) and return it."""
        cdef Event ev
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_RECORD)
        try:
            # The common call first: an Event, no function call to find it is one.
            if isinstance(event, Event):
                ev = <Event>event
                if ev._device != self._device:
                    _check_same_device(ev._device, self._device)
            elif event is None:
                self._check_open()
                ev = new_event(self._device, cudaEventDisableTiming)
            else:
                ev = as_event(event, "event")
            _record(self, ev)
            return ev
        finally:
            if traced:
                nvtx.trace_pop()

    def record_event(self, event=None):
        """Alias of ``record`` (PyTorch's name)."""
        return self.record(event)

    def wait_event(self, event, *, external=False):
        """Make future work on this stream wait for ``event`` (returns at once).

        ``event`` is a :class:`Event`, or another library's event: PyTorch
        (``.cuda_event``; one never recorded is waited for as PyTorch does,
        not at all), CuPy (``.ptr``), cuda.core or numba-cuda (``.handle``).
        The event may belong to another device.
        """
        cdef Event ev
        cdef uintptr_t h
        cdef unsigned int flags = (cudaEventWaitExternal if as_bool(external, "external")
                                   else 0)
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_WAIT_EVENT)
        try:
            if not isinstance(event, Event):
                h = foreign_event(event, "event")
                if h == 0:
                    self._check_open()
                    return
                _enqueue_raw(RAW_WAIT, self, <void*>h, flags)
                return
            ev = <Event>event
            if not external:
                _wait_event(self, ev)
                return
            self._use()
            try:
                ev._use()
                try:
                    with nogil:
                        rt.stream_wait_event(<cudaStream_t>self._handle, <cudaEvent_t>ev._handle,
                                             flags)
                finally:
                    ev._unuse()
            finally:
                self._unuse()
            if streams_flag_get(_checking) != 0:
                nvtx.check_hooks().wait(self, ev)
        finally:
            if traced:
                nvtx.trace_pop()

    def wait_stream(self, other):
        """Make future work on this stream wait for the work now enqueued on ``other``."""
        cdef Stream o
        cdef uintptr_t h
        cdef int dev
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_WAIT_STREAM)
        try:
            if other is None:
                raise TypeError("other must be a streams.Stream, a PyTorch or CuPy stream, or an "
                                "object with __cuda_stream__, not NoneType")
            if not isinstance(other, Stream):
                foreign_stream(other, "other", &h, False)
                dev = foreign_stream_device(other, h)
                self._use()
                try:
                    if dev < 0:
                        dev = current_device()
                    with nogil:
                        rt.stream_wait_stream(<cudaStream_t>self._handle, <cudaStream_t>h, dev)
                finally:
                    self._unuse()
                return
            o = <Stream>other
            with nogil:
                self.c_wait_stream(o)
            if streams_flag_get(_checking) != 0:
                nvtx.check_hooks().wait_stream(self, o)
        finally:
            if traced:
                nvtx.trace_pop()

    def launch_host_func(self, callback, arg=None, *, owner=None, sync_mode="blocking"):
        """Run ``callback(arg)`` on the host once all work enqueued so far is done.

        Later work on the stream waits until the callback has returned.  The
        callback must not call CUDA (streams raises RuntimeError if it
        tries).  If it raises, the exception goes to ``sys.unraisablehook``
        and the stream's next ``synchronize()`` raises HostCallbackError.

        ``callback`` may also be a native function, ``void fn(void* data)``:
        a ctypes function pointer, a cffi function pointer, or its address
        as an int.  It then runs on CUDA's thread with no Python and no GIL,
        and ``arg`` is its ``data`` pointer (None, an int address, or a
        ctypes/cffi pointer, kept alive until the call has run).  ``owner``
        (native functions only) is any object to keep alive until the call
        has run.  A ctypes or cffi callback made from a Python function is
        Python code: it runs as a Python callback, called with ``arg``.

        ``sync_mode``: "blocking" (CUDA's default) or "spin_wait" (CUDA's
        thread spins between host functions instead of sleeping: lower
        latency, one CPU core busy); "spin_wait" needs a CUDA 13.1 driver
        and raises NotImplementedError naming the versions otherwise.
        """
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_HOST_FUNC)
        try:
            if _enqueue_host_call == NULL:
                raise ImportError("streams._hostcall is not imported; import streams first")
            _enqueue_host_call(self, callback, arg, 0, owner,
                               0 if sync_mode == "blocking" else
                               int(as_enum(HostFuncSyncMode, sync_mode, "sync_mode")))
        finally:
            if traced:
                nvtx.trace_pop()

    cdef int c_launch_host_func(self, streams_host_fn_t fn, void* data) except -1 nogil:
        if fn == NULL:
            with gil:
                raise ValueError("fn must not be NULL")
        self._use()
        try:
            rt.launch_native_host_func(<cudaStream_t>self._handle, <rt.host_fn>fn, data, NULL, 0)
        finally:
            self._unuse()
        return 0

    def add_callback(self, callback, arg=None):
        """Run ``callback(stream, status, arg)`` after the enqueued work.

        ``status`` is None, or the CudaError CUDA reported for the stream.
        Prefer ``launch_host_func``; CUDA may deprecate stream callbacks,
        and cannot capture them into a graph (refused during a capture).
        """
        if _enqueue_host_call == NULL:
            raise ImportError("streams._hostcall is not imported; import streams first")
        _enqueue_host_call(self, callback, arg, 1, None, 0)

    # ---- stream memory operations (streams._memory does them) -------------------
    def wait_value(self, address, value, op="geq", flush=False, *, width=32):
        """Make later work on this stream wait until the ``width``-bit (32 or
        64) unsigned value at ``address`` satisfies ``op`` against ``value``:
        "geq" (``(int)(*address - value) >= 0``, wrap-around safe), "eq",
        "and" (``*address & value != 0``) or "nor" (``~(*address | value) != 0``).

        ``address`` is device or pinned memory (a buffer or an int address
        CUDA knows; not managed memory, which CUDA refuses here), aligned to
        the value's size.  ``flush`` flushes the device's remote writes
        before the wait returns.  The driver's ``cuStreamWaitValue32/64``;
        captured into a graph as a node.

        CUDA does not see this dependency: while a stream waits for a value
        the host writes, a call that may synchronize the device implicitly
        (loading a module, or a kernel's first launch under lazy loading;
        freeing pinned memory, as closing a PinnedBuffer does; a device
        synchronize) may wait for that stream, and the host never gets to
        write: a deadlock.  Load kernels before the wait, and write the
        value (in a ``finally``) before anything that may synchronize.
        """
        _later("_memory", "_stream_wait_value")(self, address, value, op, flush, width)
        return self

    def write_value(self, address, value, *, width=32):
        """Write the ``width``-bit (32 or 64) ``value`` to ``address`` in stream
        order (the driver's ``cuStreamWriteValue32/64``), after a memory fence
        scoped to the stream: the stream's earlier writes are visible first.
        (The driver's option to skip that fence exists only in its first
        version of these calls, which CUDA 12 and later no longer use.)"""
        _later("_memory", "_stream_write_value")(self, address, value, width)
        return self

    # ---- attributes -----------------------------------------------------------
    def get_attribute(self, name):
        """``cudaStreamGetAttribute``: "access_policy_window" (an AccessPolicyWindow),
        "synchronization_policy" (a SyncPolicy, or None while never set: the
        device's scheduling flags apply) or "priority" (an int)."""
        return _stream_get_attribute(self, name)

    def set_attribute(self, name, value):
        """``cudaStreamSetAttribute``; see ``get_attribute`` for names and value types."""
        _stream_set_attribute(self, name, value)

    def copy_attributes(self, src):
        """Copy ``src``'s attributes onto this stream (``cudaStreamCopyAttributes``)."""
        cdef Stream s
        if not isinstance(src, Stream):
            raise TypeError(f"src must be a streams.Stream, not {type(src).__name__}")
        s = <Stream>src
        self._use()
        try:
            s._use()
            try:
                with nogil:
                    rt.stream_copy_attributes(<cudaStream_t>self._handle,
                                              <cudaStream_t>s._handle)
            finally:
                s._unuse()
        finally:
            self._unuse()

    def attach_mem_async(self, buffer, length=0, flags="single"):
        """Attach managed memory to this stream (``cudaStreamAttachMemAsync``).

        ``flags``: a MemAttach or "single" (only this stream touches it),
        "global" or "host".  ``length`` 0 means the whole allocation.
        """
        cdef unsigned int f = <unsigned int><int>as_enum(MemAttach, flags, "flags")
        cdef size_t n = as_nbytes(length, "length")
        cdef void* p
        p = <void*><uintptr_t>_later("_memory", "_address_of")(buffer, "buffer")
        self._use()
        try:
            with nogil:
                rt.stream_attach_mem_async(<cudaStream_t>self._handle, p, n, f)
        finally:
            self._unuse()

    @property
    def device(self):
        """The stream's Device (``cudaStreamGetDevice``)."""
        cdef int dev = -1
        self._use()
        try:
            with nogil:
                rt.stream_get_device(<cudaStream_t>self._handle, &dev)
        finally:
            self._unuse()
        return Device(dev)

    # ---- kernels --------------------------------------------------------------
    def launch(self, kernel, grid, block, *args, shared_mem=0, wait_producers=True):
        """Launch ``kernel`` with ``grid`` x ``block`` threads (ints or up to 3-tuples).

        Arguments follow the kernel's parameters (see ``Module.get_kernel``);
        buffers and objects with ``__cuda_array_interface__``/``__dlpack__``
        pass their address, and this stream waits for their producers as
        :func:`memcpy_async` does (``wait_producers=False``: you order them
        yourself).  Runs on the stream's device.
        """
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_LAUNCH)
        try:
            if not isinstance(kernel, LaunchTarget):
                raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
            (<LaunchTarget>kernel)._launch_on(self, grid, block, args, shared_mem, None,
                                              as_bool(wait_producers, "wait_producers"))
        finally:
            if traced:
                nvtx.trace_pop()

    def launch_ex(self, kernel, config, *args, shared_mem=None, cluster=None,
                  cooperative=None, wait_producers=True):
        """``cudaLaunchKernelExC``: launch ``kernel`` as ``config`` (a
        ``LaunchConfig``: grid, block, shared memory, clusters, cooperative
        launch, programmatic dependent launch, launch events, priority, memory
        sync domain) with ``args``.

        The short form ``launch_ex(kernel, grid, block, *args, shared_mem=0,
        cluster=None, cooperative=False)`` makes that config.  ``wait_producers``
        as for ``launch``.
        """
        cdef type config_type = _later("_launch", "LaunchConfig")
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_LAUNCH)
        try:
            if not isinstance(kernel, LaunchTarget):
                raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
            if type(config) is not config_type:
                if not args:
                    raise TypeError("launch_ex() takes a LaunchConfig, or grid and block")
                config = config_type(config, args[0], 0 if shared_mem is None else shared_mem,
                                     cluster=cluster,
                                     cooperative=(False if cooperative is None
                                                  else as_bool(cooperative, "cooperative")))
                args = args[1:]
            elif shared_mem is not None or cluster is not None or cooperative is not None:
                raise TypeError("with a LaunchConfig, shared_mem, cluster and cooperative belong "
                                "in the config")
            (<LaunchTarget>kernel)._launch_on(self, None, None, args, None, config,
                                              as_bool(wait_producers, "wait_producers"))
        finally:
            if traced:
                nvtx.trace_pop()

    # ---- capture (streams._graph builds the graphs) --------------------------------
    def begin_capture(self, mode="global"):
        """Start capturing this stream's work into a graph (``cudaStreamBeginCapture``).

        ``mode`` is a CaptureMode or "global", "thread_local" or "relaxed"
        (CUDA's capture interaction modes).  Work is recorded, not run,
        until ``end_capture``.
        """
        cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode><int>as_enum(CaptureMode, mode,
                                                                              "mode")
        self._use()
        try:
            with nogil:
                rt.stream_begin_capture(<cudaStream_t>self._handle, m)
        finally:
            self._unuse()

    def begin_capture_to_graph(self, graph, dependencies=(), mode="global"):
        """Capture into an existing ``graph``, after ``dependencies`` (GraphNodes)."""
        _later("_graph", "begin_capture_to_graph")(self, graph, dependencies, mode)

    def end_capture(self):
        """Stop capturing and return the captured Graph.

        CUDA's error names tell what went wrong (``cudaErrorStreamCaptureInvalidated``,
        ``...Unjoined``, ...); the stream has left capture mode either way.
        """
        return _later("_graph", "end_capture")(self)

    def is_capturing(self):
        """True while a capture is active on this stream."""
        return self.capture_status == CaptureStatus.ACTIVE

    @property
    def capture_status(self):
        """A CaptureStatus, equal to "none", "active" or "invalidated"."""
        cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
        self._use()
        try:
            with nogil:
                rt.stream_is_capturing(<cudaStream_t>self._handle, &status)
        finally:
            self._unuse()
        return CaptureStatus(<int>status)

    def capture_info(self):
        """``CaptureInfo(status, id, graph, dependencies, edge_data)`` of the capture."""
        return _later("_graph", "capture_info")(self)

    def update_capture_dependencies(self, nodes, mode="add"):
        """Add to ("add") or replace ("set") the nodes the next captured work depends on."""
        _later("_graph", "update_capture_dependencies")(self, nodes, mode)

    def capture(self, mode="global"):
        """``with stream.capture() as cap: ...`` then ``cap.graph``."""
        return _later("_graph", "CaptureContext")(self, mode)

    # ---- the current stream ----------------------------------------------------
    def use(self):
        """Make this stream the thread's current stream for its device (no restore)."""
        self._check_open()
        cdef int dev = self._device if self._device >= 0 else current_device()
        _current_map()[dev] = self
        return self

    def __enter__(self):
        cdef int prev_dev, dev
        cdef dict cur
        self._check_open()
        prev_dev = current_device()
        dev = self._device if self._device >= 0 else prev_dev
        if dev != prev_dev:
            with nogil:
                rt.set_device(dev)
        # Saved only once the switch worked: a failed __enter__ has no __exit__.
        cur = _current_map()
        _tls.stack.append((prev_dev, dev, cur.get(dev)))
        cur[dev] = self
        return self

    def __exit__(self, *exc):
        cdef int prev_dev, dev
        prev_dev, dev, prev_stream = _tls.stack.pop()
        cdef dict cur = _current_map()
        if prev_stream is None:
            cur.pop(dev, None)
        else:
            cur[dev] = prev_stream
        if dev != prev_dev:
            with nogil:
                rt.set_device(prev_dev)
        return False

    # ---- properties ---------------------------------------------------------
    @property
    def handle(self):
        """The ``cudaStream_t`` as an int."""
        # One made with Stream.__new__ has none: its 0 would pass for the
        # legacy stream (tests/handle/test_new_objects.py calls every method of
        # such objects).  A closed one still tells
        # the handle it had (reprs and the compat layers read it).
        if not self._is_initialised():
            self._check_open()
        return <uintptr_t>self._handle

    @property
    def ptr(self):
        """Alias of ``handle`` (CuPy's name)."""
        return <uintptr_t>self._handle

    @property
    def device_id(self):
        """The stream's device; -1 for the special default streams, which
        act on whichever device is current."""
        return self._device

    @property
    def priority(self):
        cdef int prio = 0
        self._use()
        try:
            with nogil:
                rt.stream_get_priority(<cudaStream_t>self._handle, &prio)
        finally:
            self._unuse()
        return prio

    @property
    def flags(self):
        """``cudaStreamGetFlags``: 0 (default) or 1 (``cudaStreamNonBlocking``)."""
        cdef unsigned int flags = 0
        self._use()
        try:
            with nogil:
                rt.stream_get_flags(<cudaStream_t>self._handle, &flags)
        finally:
            self._unuse()
        return flags

    @property
    def non_blocking(self):
        return bool(self.flags & cudaStreamNonBlocking)

    @property
    def id(self):
        """``cudaStreamGetId``: unique for the life of the process."""
        cdef unsigned long long sid = 0
        self._use()
        try:
            with nogil:
                rt.stream_get_id(<cudaStream_t>self._handle, &sid)
        finally:
            self._unuse()
        return sid

    @property
    def owner(self):
        # close() drops _owner, perhaps in another thread: read it whole.
        cdef object owner
        with cython.critical_section(self):
            owner = self._owner
        return owner

    @property
    def sm_count(self):
        """The SMs this stream's work may run on: its green context's
        (:doc:`partitions`), else the whole device's."""
        cdef long long n = -1
        cdef int dev, count = 0
        # Decided by what the stream is, which CUDA answers for any stream
        # (rt.stream_sm_count: the stream's own share, or its green
        # context's), never by what its owner object is: an owner can be
        # anything a wrapper was given (tests/stream/test_sm_count_cpu.py,
        # tests/green/test_green_release_gpu.py).
        self._use()
        try:
            if not self._special:
                with nogil:
                    rt.stream_sm_count(<cudaStream_t>self._handle, &n)
            dev = self._device if self._device >= 0 else current_device()
        finally:
            self._unuse()
        if n >= 0:
            return n
        with nogil:
            rt.device_get_attribute(&count, cudaDevAttrMultiProcessorCount, dev)
        return count

    # ---- lifetime ---------------------------------------------------------
    def close(self):
        """Destroy an owned stream now (pending work still completes).

        Idempotent; further use raises ValueError.  A no-op for the special
        default streams; for a foreign stream it drops the reference to its
        owner.  A call still running on the stream in another thread
        finishes first: the handle is released when it leaves.
        """
        cdef bint last
        if self._special or streams_is_closed(&self._state):
            return
        rt.refuse_forbidden()
        # Buffers allocated on this stream and not yet freed (_dependents)
        # will be freed after its work: the tail marks where that work ends.
        # An allocation in another thread counts itself, enqueues, and then
        # looks whether the stream was closed meanwhile (settle_dependent);
        # this close marks the stream closed and then reads the count.  Both
        # sequentially consistent, so at least one of the two sees the
        # other and marks the tail after the allocation.  This close holds a
        # use of its own across that, so the handle is still alive to record
        # on; the handle is then released when that use ends (here, unless a
        # call in another thread is still inside).
        # A buffer freed in another thread between this close marking the
        # stream closed and the tail being published would find no tail: it
        # waits for the tail (stream_tail, while _tail_marking is set).  The
        # tail's event is made before the stream is marked closed, so that
        # no allocation (a collection freeing a buffer of this stream on
        # this thread) comes in between.
        cdef Event ev = None
        if streams_use_begin(&self._state) != 0:
            self._unuse()       # closed meanwhile by another thread
            return
        try:
            if streams_count_get(&self._dependents) > 0:
                ev = new_event(self._device, cudaEventDisableTiming)
            self._tail_marker = PyThread_get_thread_ident()
            streams_count_add(&self._tail_marking, 1)
            try:
                Waitable.close(self)
                if _close_pause_ns:
                    with nogil:
                        streams_sleep_ns(_close_pause_ns)
                if streams_count_get(&self._dependents) > 0:
                    mark_tail(self, ev)
            finally:
                streams_count_add(&self._tail_marking, -1)
        finally:
            last = streams_use_end(&self._state)
            if last and self._owns_handle:
                # The release close() makes, checked (CudaError) as it is for
                # every handle: this close was the last user.
                with nogil:
                    self._destroy()
        if last:
            with cython.critical_section(self):
                self._owner = None

    def __repr__(self):
        cdef uintptr_t h = <uintptr_t>self._handle
        if self._special:
            name = {0: "null", 1: "legacy", 2: "per_thread"}[h]
            return f"<streams.Stream {name} (handle {h})>"
        if self.closed:
            return "<streams.Stream (closed)>"
        kind = "owned" if self._owns_handle else "foreign"
        return f"<streams.Stream handle=0x{h:x} device={self._device} {kind}>"


include "_stream/tail.pxi"


cdef class ErrorSlot:
    """The first exception of the host callbacks of one stream or executable
    (a graph's slot only passes its errors on: ``relay``)."""
    # The GC may clear it (no teardown), and must be able to: `first` holds
    # an exception, whose traceback may refer back to its stream or graph.
    # Callbacks of one stream run on CUDA's thread while a synchronize in
    # another thread takes the error: both under the slot's critical section
    # (free-threaded CPython; the GIL elsewhere, where it compiles away).

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "streams and graphs make their own")

    cdef void keep_first(self, object callback, object exc) noexcept:
        cdef ErrorSlot slot
        cdef object forward
        with cython.critical_section(self):
            if self.first is None and not self.relay:
                self.first = (callback, exc)
            forward = self.forward
        if forward is None:
            return
        # Every slot reachable through the forward links, each once (links
        # may form a cycle: two graphs each updated from the other); `done`
        # holds them meanwhile, so that no id in `seen` is reused.
        seen = {id(self)}
        done = []
        todo = [ref() for ref in <tuple>forward]
        while todo:
            found = todo.pop()
            if found is None or id(found) in seen:
                continue
            slot = <ErrorSlot>found
            seen.add(id(slot))
            done.append(slot)
            with cython.critical_section(slot):
                if slot.first is None and not slot.relay:
                    slot.first = (callback, exc)
                forward = slot.forward
            if forward is not None:
                todo.extend([ref() for ref in <tuple>forward])

    cdef int forward_to(self, ErrorSlot other) except -1:
        if other is None or other is self:
            return 0
        new = _weakref.ref(other)
        with cython.critical_section(self):
            alive = [ref for ref in self.forward if ref() is not None] if self.forward else []
            if not any(ref() is other for ref in alive):
                alive.append(new)
            self.forward = tuple(alive) if alive else None
        return 0

    cdef int unforward(self, ErrorSlot other) except -1:
        if other is None:
            return 0
        with cython.critical_section(self):
            alive = ([ref for ref in self.forward
                      if ref() is not None and ref() is not other] if self.forward else [])
            self.forward = tuple(alive) if alive else None
        return 0

    cdef int raise_pending(self, str what) except -1:
        cdef object first
        if self.first is None:
            return 0    # a look at the pointer, no reference taken: the common case
        with cython.critical_section(self):
            first = self.first
            self.first = None
        if first is None:
            return 0
        fn, exc = first
        raise HostCallbackError(f"{what} {fn!r} raised {type(exc).__name__}: {exc}") from exc


cdef _install_special_streams():
    # Cython classes have no settable class attributes: put the singletons
    # in the type's dict directly (as if written in the class body).
    cdef dict d = <dict>(<PyTypeObject*>Stream).tp_dict
    d["null"] = _make_special(STREAM_NULL)
    d["legacy"] = _make_special(STREAM_LEGACY)
    d["per_thread"] = _make_special(STREAM_PER_THREAD)
    PyType_Modified(Stream)

_install_special_streams()


# ---- Event ----------------------------------------------------------------------------------

cdef unsigned int _event_flags(object enable_timing, object blocking,
                               object interprocess) except? 0:
    cdef unsigned int flags = cudaEventDefault
    enable_timing = as_bool(enable_timing, "enable_timing")
    blocking = as_bool(blocking, "blocking")
    interprocess = as_bool(interprocess, "interprocess")
    if interprocess and enable_timing:
        raise ValueError("interprocess=True requires enable_timing=False (CUDA does "
                         "not support timing on interprocess events)")
    if not enable_timing:
        flags |= cudaEventDisableTiming
    if blocking:
        flags |= cudaEventBlockingSync
    if interprocess:
        flags |= cudaEventInterprocess
    return flags


cdef class Event(Waitable):
    """Event(enable_timing=False, blocking=False, interprocess=False, device=None, *, name=None)

    A CUDA event (``cudaEventCreateWithFlags``), destroyed by ``close()`` or GC.

    ``enable_timing`` allows ``elapsed_time``; ``blocking``
    (``cudaEventBlockingSync``) makes ``synchronize`` sleep between checks
    instead of spinning; ``interprocess`` allows sharing with another
    process (timing must then be off, as CUDA requires).  Created on
    ``device`` (default: the current device), the only device whose streams
    can record it; streams of any device can wait for it.  ``name`` names
    the event in NVTX tools (:attr:`name`).
    """

    def __cinit__(self, *args, **kwargs):
        self._kind = rt.HANDLE_EVENT

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, enable_timing=False, blocking=False, interprocess=False, device=None, *,
                 name=None):
        cdef unsigned int flags
        cdef cudaEvent_t handle = NULL
        cdef int dev, switch_to = -1
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be None or a str, not {type(name).__name__}")
        self._init_once()
        try:
            flags = _event_flags(enable_timing, blocking, interprocess)
            if device is None:
                dev = current_device()
            else:
                dev = switch_to = resolve_device(device, "device")
            rt.drain_deferred()
            # Creating an event (and switching devices) takes a driver lock:
            # the GIL is released (the GIL rule, above).
            with nogil:
                _event_create_on(&handle, flags, switch_to)
            self._handle = <streams_event_t>handle
            self._device = dev
            self._flags = flags
            self._opened(True)
        except BaseException:
            self._init_abandoned()
            raise
        if name is not None:
            self._set_name(name)


    # ---- C-level API (nogil, for cimporters) ------------------------------
    cdef streams_event_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_record(self, Stream stream) except -1 nogil:
        return stream.c_record(self)

    cdef int c_wait(self, Stream stream) except -1 nogil:
        return stream.c_wait_event(self)

    # ---- Python API ------------------------------------------------------
    def record(self, stream=None, *, external=False):
        """Record this event on ``stream`` (default: the current stream).

        ``external=True`` (``cudaEventRecordExternal``) is for stream capture:
        it becomes an event-record node that other work outside the graph
        can wait on.  Outside a capture CUDA rejects it
        (``cudaErrorIllegalState``).
        """
        cdef Stream s
        cdef uintptr_t h
        cdef unsigned int flags = (cudaEventRecordExternal if as_bool(external, "external")
                                   else 0)
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_RECORD)
        try:
            if stream is not None and not isinstance(stream, Stream):
                # Another library's stream: its handle, no wrapper (the caller
                # keeps the object alive for this call).
                foreign_stream(stream, "stream", &h, False)
                _enqueue_raw(RAW_RECORD, self, <void*>h, flags)
                streams_flag_set(<int*>&self._recorded, True)
                return self
            s = as_stream(stream, "stream")
            if self._device != s._device:
                _check_same_device(self._device, s._device)
            if not external:
                _record(s, self)
                return self
            s._use()
            try:
                self._use()
                try:
                    with nogil:
                        rt.event_record(<cudaEvent_t>self._handle, <cudaStream_t>s._handle,
                                        cudaEventRecordExternal)
                    streams_flag_set(<int*>&self._recorded, True)
                finally:
                    self._unuse()
            finally:
                s._unuse()
            if streams_flag_get(_checking) != 0:
                nvtx.check_hooks().record(self, s)
            return self
        finally:
            if traced:
                nvtx.trace_pop()

    def synchronize(self, timeout=None):
        """Wait for the recorded work (GIL released, Ctrl-C works).

        Returns True when done; with ``timeout`` (seconds), False if it expired.
        """
        cdef long long timeout_ns = as_timeout_ns(timeout)
        cdef bint traced = streams_flag_get(_tracing) != 0
        cdef bint done
        if traced:
            nvtx.trace_push(nvtx.CALL_EVENT_SYNCHRONIZE)
        try:
            done = self._done_now() == 1 or wait_until_done(self, timeout_ns) == 1
            if done and streams_flag_get(_checking) != 0:
                nvtx.check_hooks().sync_event(self)
            if self._watch is not None:
                check_deadline(self)
            return done
        finally:
            if traced:
                nvtx.trace_pop()

    def wait(self, stream=None):
        """Make ``stream`` (default: the current stream; any stream
        :func:`as_stream` takes) wait for this event."""
        cdef uintptr_t h
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_WAIT_EVENT)
        try:
            if stream is not None and not isinstance(stream, Stream):
                foreign_stream(stream, "stream", &h, False)
                _enqueue_raw(RAW_WAIT, self, <void*>h, 0)
                return self
            _wait_event(as_stream(stream, "stream"), self)
            return self
        finally:
            if traced:
                nvtx.trace_pop()

    def elapsed_time(self, Event end not None):
        """Milliseconds from this event to ``end`` (both must be recorded, with timing).

        Waits for both events to complete first (GIL released, Ctrl-C works).
        """
        cdef float ms = 0
        self._check_open()
        end._check_open()
        for ev, role in ((self, "start"), (end, "end")):
            if (<Event>ev)._flags & cudaEventDisableTiming:
                raise ValueError(f"elapsed_time: the {role} event was created with "
                                 "enable_timing=False")
            if not streams_flag_get(<int*>&(<Event>ev)._recorded):
                raise ValueError(f"elapsed_time: the {role} event was never recorded")
        rt.refuse_forbidden()   # inside a callback the waits below would wait for themselves
        wait_until_done(self, -1)
        wait_until_done(end, -1)
        self._use()
        try:
            end._use()
            try:
                with nogil:
                    rt.event_elapsed_time(&ms, <cudaEvent_t>self._handle,
                                          <cudaEvent_t>end._handle)
            finally:
                end._unuse()
        finally:
            self._unuse()
        return ms

    def ipc_handle(self):
        """The 64-byte ``cudaIpcEventHandle_t`` for another process's ``from_ipc_handle``."""
        cdef cudaIpcEventHandle_t h
        if not self._flags & cudaEventInterprocess:
            self._check_open()
            raise ValueError("ipc_handle() needs an Event created with interprocess=True")
        self._use()
        try:
            with nogil:
                rt.ipc_get_event_handle(&h, <cudaEvent_t>self._handle)
        finally:
            self._unuse()
        return (<char*>h.reserved)[:64]

    @classmethod
    def from_handle(cls, ptr, owner=None, device=None):
        """Wrap a foreign ``cudaEvent_t`` (an int) without taking ownership.

        ``owner`` is kept alive as long as the returned Event (or until its
        ``close()``), which never destroys the handle.  CUDA cannot tell an
        event's device or flags: ``device`` (default: unknown, ``device_id``
        -1) lets ``record`` check the stream's device, and the event is
        taken as recorded and timing-capable (``elapsed_time`` reports
        CUDA's error otherwise).  Values that cannot be a handle are
        refused; a plausible pointer that is not a live event is undefined
        behaviour, as with any raw handle.
        """
        cdef uintptr_t h = as_pointer_int(ptr, "ptr")
        cdef Event ev
        check_event_handle(h, "ptr")
        ev = Event.__new__(cls)
        ev._handle = <streams_event_t>h
        ev._device = -1 if device is None else resolve_device(device)
        ev._flags = 0
        streams_flag_set(<int*>&ev._recorded, True)
        ev._owner = owner
        ev._opened(False)
        return ev

    @property
    def owner(self):
        """What ``from_handle`` keeps alive (None for an owned event)."""
        cdef object owner
        with cython.critical_section(self):
            owner = self._owner
        return owner

    @staticmethod
    def from_ipc_handle(handle, device=None):
        """Open an event another process exported with ``ipc_handle()``.

        CUDA opens it on the device current in this process, here
        ``device`` (default: the current device), which becomes its
        ``device_id``: only streams of that device can record it, streams of
        any device can wait for it.  The handle does not say which device the
        exporter made it on (an index that could name another GPU here
        anyway, under another ``CUDA_VISIBLE_DEVICES``).
        """
        cdef cudaIpcEventHandle_t h
        cdef cudaEvent_t ev = NULL
        cdef Event opened
        cdef DeviceScope scope
        cdef int dev, switch_to = -1
        if not isinstance(handle, (bytes, bytearray, memoryview)):
            raise TypeError(f"handle must be bytes from Event.ipc_handle(), not "
                            f"{type(handle).__name__}")
        data = bytes(handle)
        if len(data) != 64:
            raise ValueError(f"handle must be 64 bytes, got {len(data)}")
        for i in range(64):
            h.reserved[i] = <char>data[i]
        if device is None:
            dev = current_device()
        else:
            dev = switch_to = resolve_device(device, "device")
        opened = Event.__new__(Event)
        opened._device = dev
        with nogil:
            enter_device(&scope, switch_to)
            try:
                rt.ipc_open_event_handle(&ev, h)
            finally:
                exit_device(&scope)
        opened._handle = <streams_event_t>ev
        opened._flags = cudaEventDisableTiming | cudaEventInterprocess
        streams_flag_set(<int*>&opened._recorded, True)
        opened._opened(True)
        return opened

    @property
    def handle(self):
        """The ``cudaEvent_t`` as an int."""
        self._check_open()
        return <uintptr_t>self._handle

    @property
    def flags(self):
        """The ``cudaEventCreateWithFlags`` flags."""
        return self._flags

    @property
    def device_id(self):
        return self._device

    @property
    def is_timing(self):
        return not (self._flags & cudaEventDisableTiming)

    def __repr__(self):
        if self.closed:
            return "<streams.Event (closed)>"
        opts = []
        if self.is_timing:
            opts.append("timing")
        if self._flags & cudaEventBlockingSync:
            opts.append("blocking")
        if self._flags & cudaEventInterprocess:
            opts.append("interprocess")
        if not self._owns_handle:
            return f"<streams.Event handle=0x{<uintptr_t>self._handle:x} foreign>"
        return (f"<streams.Event handle=0x{<uintptr_t>self._handle:x} device={self._device}"
                + (" " + ",".join(opts) if opts else "") + ">")


include "_stream/pools.pxi"


# Filled from any thread by single dict operations: two threads at the
# first call both import and store the same function.
cdef dict _later_names = {}


cdef object _later(str module, str name):
    # What a later module (which imports this one) implements for a method
    # here: imported once, at the first call.
    key = (module, name)
    fn = _later_names.get(key)
    if fn is None:
        fn = getattr(__import__(f"streams.{module}", fromlist=[name]), name)
        _later_names[key] = fn
    return fn


cdef class LaunchTarget:
    """Base of ``streams.Kernel``: something ``Stream.launch`` can launch."""

    cdef int _launch_on(self, Stream stream, object grid, object block, tuple args,
                        object shared_mem, object config, bint wait_producers) except -1:
        raise TypeError(f"{type(self).__name__} cannot be launched")


# ---- attributes --------------------------------------------------------------------------

class AccessPolicyWindow:
    """An L2 access policy window (``cudaAccessPolicyWindow``).

    ``hit_ratio`` of the accesses to ``[base_ptr, base_ptr + num_bytes)`` get
    ``hit_prop``, the rest ``miss_prop``.  ``base_ptr`` is an int address
    or any object ``streams`` takes as memory (a buffer, CAI, DLPack).
    """
    __slots__ = ("base_ptr", "num_bytes", "hit_ratio", "hit_prop", "miss_prop")

    def __init__(self, base_ptr, num_bytes, hit_ratio=1.0, hit_prop=AccessProperty.PERSISTING,
                 miss_prop=AccessProperty.STREAMING):
        if not isinstance(base_ptr, int) or isinstance(base_ptr, bool):
            base_ptr = _later("_memory", "_address_of")(base_ptr, "base_ptr")
        self.base_ptr = int(as_pointer_int(base_ptr, "base_ptr"))
        self.num_bytes = int(as_nbytes(num_bytes, "num_bytes"))
        if isinstance(hit_ratio, bool) or not isinstance(hit_ratio, (int, float)):
            raise TypeError(f"hit_ratio must be a number, not {type(hit_ratio).__name__}")
        hit_ratio = float(hit_ratio)
        if not 0.0 <= hit_ratio <= 1.0:
            raise ValueError(f"hit_ratio must be in [0, 1], got {hit_ratio}")
        self.hit_ratio = hit_ratio
        self.hit_prop = as_enum(AccessProperty, hit_prop, "hit_prop")
        self.miss_prop = as_enum(AccessProperty, miss_prop, "miss_prop")

    def __eq__(self, other):
        if not isinstance(other, AccessPolicyWindow):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return ("AccessPolicyWindow(base_ptr=0x%x, num_bytes=%d, hit_ratio=%g, hit_prop=%s, "
                "miss_prop=%s)" % (self.base_ptr, self.num_bytes, self.hit_ratio,
                                   self.hit_prop.name, self.miss_prop.name))


cdef object _stream_get_attribute(Stream stream, object name):
    cdef cudaStreamAttrValue value
    cdef cudaStreamAttrID attr
    attr = <cudaStreamAttrID><int>as_enum(StreamAttribute, name, "name")
    memset(&value, 0, sizeof(value))
    stream._use()
    try:
        with nogil:
            rt.stream_get_attribute(<cudaStream_t>stream._handle, attr, &value)
    finally:
        stream._unuse()
    if attr == cudaStreamAttributeAccessPolicyWindow:
        w = value.accessPolicyWindow
        return AccessPolicyWindow(<uintptr_t>w.base_ptr, w.num_bytes, w.hitRatio,
                                  <int>w.hitProp, <int>w.missProp)
    if attr == cudaStreamAttributeSynchronizationPolicy:
        # A stream whose policy was never set reports -1: the device's
        # scheduling flags apply.
        policy = <int>value.syncPolicy
        return SyncPolicy(policy) if policy in SyncPolicy._value2member_map_ else None
    return value.priority


cdef int _stream_set_attribute(Stream stream, object name, object value) except -1:
    cdef cudaStreamAttrValue v
    cdef cudaStreamAttrID attr
    attr = <cudaStreamAttrID><int>as_enum(StreamAttribute, name, "name")
    memset(&v, 0, sizeof(v))
    if attr == cudaStreamAttributeAccessPolicyWindow:
        if not isinstance(value, AccessPolicyWindow):
            raise TypeError("value for access_policy_window must be an AccessPolicyWindow, "
                            f"not {type(value).__name__}")
        # Checked again here: its fields are plain attributes, set after
        # __init__ to anything (a size past size_t would wrap).
        v.accessPolicyWindow.base_ptr = <void*>as_pointer_int(value.base_ptr, "value.base_ptr")
        v.accessPolicyWindow.num_bytes = as_nbytes(value.num_bytes, "value.num_bytes")
        ratio = value.hit_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
                or not 0.0 <= ratio <= 1.0:
            raise ValueError(f"value.hit_ratio must be a number in [0, 1], got {ratio!r}")
        v.accessPolicyWindow.hitRatio = ratio
        v.accessPolicyWindow.hitProp = <cudaAccessProperty><int>as_enum(
            AccessProperty, value.hit_prop, "value.hit_prop")
        v.accessPolicyWindow.missProp = <cudaAccessProperty><int>as_enum(
            AccessProperty, value.miss_prop, "value.miss_prop")
    elif attr == cudaStreamAttributeSynchronizationPolicy:
        v.syncPolicy = <cudaSynchronizationPolicy><int>as_enum(SyncPolicy, value, "value")
    else:
        v.priority = as_int(value, "value for priority")
    stream._use()
    try:
        with nogil:
            rt.stream_set_attribute(<cudaStream_t>stream._handle, attr, &v)
    finally:
        stream._unuse()
    return 0


def reset_persisting_l2_cache():
    """Turn every persisting L2 line back to normal (``cudaCtxResetPersistingL2Cache``)."""
    require_device()
    with nogil:
        rt.ctx_reset_persisting_l2_cache()


include "_stream/_testing.pxi"
