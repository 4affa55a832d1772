# Stream: cudaStream_t with RAII, foreign handles, ordering and the
# per-thread current stream.

import threading

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject* tp_dict
    void PyType_Modified(PyTypeObject* t)

# Handles of CUDA's special streams (macros in driver_types.h).
cdef enum:
    _HANDLE_NULL = 0
    _HANDLE_LEGACY = 1
    _HANDLE_PER_THREAD = 2

cdef object _tls = threading.local()   # .current: {device: Stream}, .stack: [...]


cdef inline Stream _as_stream(object stream, str argname):
    """None -> the current stream; a Stream as is; anything else: TypeError."""
    if stream is None:
        return current_stream()
    if isinstance(stream, Stream):
        return <Stream>stream
    raise TypeError(f"{argname} must be a streams.Stream or None, not {type(stream).__name__} "
                    "(wrap foreign streams with Stream.from_external)")


cdef inline Event _as_event(object event, str argname):
    if isinstance(event, Event):
        return <Event>event
    raise TypeError(f"{argname} must be a streams.Event, not {type(event).__name__}")


cdef uintptr_t _as_handle(object ptr, str argname) except? 0:
    if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
        raise TypeError(f"{argname} must be an int handle, not {type(ptr).__name__}")
    value = ptr.__index__()
    if value < 0 or value > <uintptr_t>-1:
        raise ValueError(f"{argname}={value} does not fit in a pointer")
    return <uintptr_t>value


cdef dict _current_map():
    try:
        return _tls.current
    except AttributeError:
        _tls.current = {}
        _tls.stack = []
        return _tls.current


def current_stream(device=None):
    """The calling thread's current stream for ``device`` (default: current device).

    Set by ``with stream:`` and ``stream.use()``; ``Stream.legacy`` when none was set.
    """
    cdef int dev
    if device is None:
        dev = _current_device()
    else:
        dev = _resolve_device(device)
    cdef object s = _current_map().get(dev)
    return Stream.legacy if s is None else s


cdef Stream _make_special(uintptr_t handle, object owner=None, type cls=Stream):
    cdef Stream s = Stream.__new__(cls)
    s._handle = <streams_stream_t>handle
    s._device = -1
    s._special = True
    s._owns_handle = False
    s._closed = False
    s._owner = owner
    return s


cdef class Stream:
    """A CUDA stream.  ``Stream(device=None, priority=0, non_blocking=False)``.

    Owns its ``cudaStream_t`` (destroyed by ``close()`` or garbage collection)
    unless it wraps a foreign handle (``from_handle``/``from_external``).
    ``priority`` follows CUDA: lower numbers run first, and values outside
    the device's range are clamped into it.  ``non_blocking`` streams do not
    synchronize with the legacy default stream.

    The default streams are singletons that are never destroyed:
    ``Stream.legacy`` (``cudaStreamLegacy``), ``Stream.per_thread``
    (``cudaStreamPerThread``) and ``Stream.null`` (handle 0, which this
    package, built without per-thread default streams, treats as the legacy
    stream; it exists because CuPy and PyTorch report their default stream
    as 0).
    """

    def __cinit__(self, *args, **kwargs):
        self._closed = True
        self._owns_handle = False
        self._special = False
        self._device = -1

    def __init__(self, device=None, priority=0, non_blocking=False):
        cdef int prio, least, greatest, cur, dev
        cdef unsigned int flags = cudaStreamNonBlocking if non_blocking else cudaStreamDefault
        cdef cudaStream_t handle = NULL
        cdef cudaError_t err
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"priority must be an int, not {type(priority).__name__}")
        guard()
        # Argument errors come before "no GPU": _resolve_device checks types
        # and formats first, and the range only against a real device count.
        if device is None:
            _require_device()
            dev = cur = _current_device()
        else:
            dev = _resolve_device(device)
            cur = _current_device()
        _priority_range(dev, &least, &greatest)
        # Clamp like PyTorch does: CUDA would clamp too, but then the stream's
        # priority would differ silently from what `priority` reports.
        prio = greatest if priority < greatest else (least if priority > least else priority)
        with nogil:
            if dev != cur:
                check(cudaSetDevice(dev))
            # The plainest call that expresses the request (all three end
            # in the same driver call; this keeps each one reachable).
            if prio == least and flags == cudaStreamDefault:
                err = cudaStreamCreate(&handle)
            elif prio == least:
                err = cudaStreamCreateWithFlags(&handle, flags)
            else:
                err = cudaStreamCreateWithPriority(&handle, flags, prio)
            if dev != cur:
                cudaSetDevice(cur)
        check(err)
        self._handle = handle
        self._device = dev
        self._owns_handle = True
        self._closed = False
        _debug_stream_created()

    # ---- factories for handles we do not own -------------------------------
    @classmethod
    def from_handle(cls, ptr, owner=None, device=None):
        """Wrap a foreign ``cudaStream_t`` (an int) without taking ownership.

        ``owner`` is kept alive as long as the returned Stream; ``device`` is
        looked up with ``cudaStreamGetDevice`` when not given.  The handle
        must be a valid stream: CUDA cannot validate a raw pointer.
        """
        cdef uintptr_t h = _as_handle(ptr, "ptr")
        cdef Stream s
        cdef int dev = -1
        if h <= _HANDLE_PER_THREAD:
            return _make_special(h, owner, cls)
        guard()
        if device is not None:
            dev = _resolve_device(device)
        else:
            _require_device()
            with nogil:
                check(cudaStreamGetDevice(<cudaStream_t>h, &dev))
        s = Stream.__new__(cls)
        s._handle = <streams_stream_t>h
        s._device = dev
        s._owner = owner
        s._closed = False
        return s

    @staticmethod
    def from_external(obj):
        """Wrap another library's stream.

        Accepts the ``__cuda_stream__`` protocol (a method, or attribute,
        returning ``(0, handle)``), PyTorch's ``.cuda_stream`` and CuPy's
        ``.ptr``.  The returned Stream keeps ``obj`` alive.
        """
        if isinstance(obj, Stream):
            return obj
        proto = getattr(obj, "__cuda_stream__", None)
        if proto is not None:
            info = proto() if callable(proto) else proto
            if not isinstance(info, tuple) or len(info) != 2:
                raise ValueError(f"{type(obj).__name__}.__cuda_stream__() must return a "
                                 f"(version, handle) tuple, got {info!r}")
            version, handle = info
            if isinstance(version, bool) or not isinstance(version, int):
                raise TypeError("__cuda_stream__ version must be an int, got "
                                f"{type(version).__name__}")
            if version != 0:
                raise ValueError(f"unsupported __cuda_stream__ protocol version {version} "
                                 "(streams understands version 0)")
            if isinstance(handle, bool) or not isinstance(handle, int):
                raise TypeError("__cuda_stream__ handle must be an int, got "
                                f"{type(handle).__name__}")
            return Stream.from_handle(handle, owner=obj)
        for attr in ("cuda_stream", "ptr"):
            handle = getattr(obj, attr, None)
            if handle is not None:
                if isinstance(handle, bool) or not isinstance(handle, int):
                    raise TypeError(f"{type(obj).__name__}.{attr} must be an int handle, got "
                                    f"{type(handle).__name__}")
                return Stream.from_handle(handle, owner=obj)
        raise TypeError(f"cannot get a CUDA stream from {type(obj).__name__}: it has no "
                        "__cuda_stream__, .cuda_stream or .ptr")

    def __cuda_stream__(self):
        """``(0, handle)``: the CUDA stream protocol (cuda.core, CuPy, ...)."""
        return (0, <uintptr_t>self._handle)

    # ---- C-level API (nogil, for cimporters) -------------------------------
    cdef int _check_open(self) except -1 nogil:
        if self._closed:
            with gil:
                raise ValueError("operation on a closed (or never initialised) Stream")
        return 0

    cdef streams_stream_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_query(self) except -1 nogil:
        cdef cudaError_t err
        guard()
        self._check_open()
        err = cudaStreamQuery(<cudaStream_t>self._handle)
        if err == cudaSuccess:
            return 1
        if err == cudaErrorNotReady:
            return 0
        return check(err)

    cdef int c_synchronize(self) except -1 nogil:
        guard()
        self._check_open()
        return check(cudaStreamSynchronize(<cudaStream_t>self._handle))

    cdef int c_record(self, Event event) except -1 nogil:
        guard()
        self._check_open()
        event._check_open()
        check(cudaEventRecord(<cudaEvent_t>event._handle, <cudaStream_t>self._handle))
        event._recorded = True
        return 0

    cdef int c_wait_event(self, Event event) except -1 nogil:
        guard()
        self._check_open()
        event._check_open()
        return check(cudaStreamWaitEvent(<cudaStream_t>self._handle,
                                         <cudaEvent_t>event._handle, 0))

    cdef int c_wait_stream(self, Stream other) except -1 nogil:
        cdef streams_event_t marker
        guard()
        self._check_open()
        other._check_open()
        with gil:
            # Borrowed: `other` (or the per-device table) keeps the Event alive.
            marker = other._get_marker()._handle
        check(cudaEventRecord(<cudaEvent_t>marker, <cudaStream_t>other._handle))
        return check(cudaStreamWaitEvent(<cudaStream_t>self._handle,
                                         <cudaEvent_t>marker, 0))

    cdef Event _get_marker(self):
        # One reusable event per stream: cudaStreamWaitEvent waits for the
        # event's state at call time, so re-recording it later is harmless.
        # The special streams follow the current device, so theirs is kept
        # per device.
        cdef int dev
        if not self._special:
            if self._marker is None:
                with Device(self._device):
                    self._marker = Event()
            return self._marker
        dev = _current_device()
        key = (<uintptr_t>self._handle, dev)
        marker = _special_markers.get(key)
        if marker is None:
            marker = _special_markers[key] = Event()
        return <Event>marker

    # ---- Python API -------------------------------------------------------
    def query(self):
        """True when all work enqueued so far has completed (never blocks)."""
        # The GIL stays held: cudaStreamQuery only reads status and never
        # waits on another thread (CUDA runs host functions without holding
        # the locks a query takes), so a callback waiting for the GIL cannot
        # block it; releasing and retaking the GIL would cost about as much
        # as the query itself (~250 ns on an H200 host, benchmarks/results).
        return self.c_query() == 1

    @property
    def done(self):
        return self.query()

    def synchronize(self, timeout=None):
        """Wait for all enqueued work.  The GIL is released and Ctrl-C works.

        Returns True once the work is done; with ``timeout`` in seconds,
        returns False if it expired first.  Raises HostCallbackError if a
        host callback enqueued on this stream raised since the last check.
        """
        cdef int done
        _check_timeout(timeout)
        # Idle fast path with the GIL held (see query()).
        done = self.c_query()
        if done == 0:
            done = _wait_until_done(0, <void*>self._handle, timeout)
        if self._callback_error is not None:
            _raise_callback_error(self)
        return done == 1

    def record(self, event=None):
        """Record ``event`` (a new one if None) on this stream and return it."""
        cdef Event ev = Event() if event is None else _as_event(event, "event")
        with nogil:
            self.c_record(ev)
        return ev

    def record_event(self, event=None):
        """Alias of ``record`` (PyTorch's name)."""
        return self.record(event)

    def wait_event(self, event, *, external=False):
        """Make future work on this stream wait for ``event`` (returns at once)."""
        cdef Event ev = _as_event(event, "event")
        if not external:
            with nogil:
                self.c_wait_event(ev)
            return
        guard()
        self._check_open()
        ev._check_open()
        with nogil:
            check(cudaStreamWaitEvent(<cudaStream_t>self._handle, <cudaEvent_t>ev._handle,
                                      cudaEventWaitExternal))

    def wait_stream(self, other):
        """Make future work on this stream wait for the work now enqueued on ``other``."""
        if not isinstance(other, Stream):
            raise TypeError(f"other must be a streams.Stream, not {type(other).__name__}")
        with nogil:
            self.c_wait_stream(<Stream>other)

    def launch_host_func(self, callback, arg=None):
        """Run ``callback(arg)`` on the host once all work enqueued so far is done.

        Later work on the stream waits until the callback has returned.  The
        callback must not call CUDA (streams raises RuntimeError if it
        tries).  If it raises, the exception goes to ``sys.unraisablehook``
        and the stream's next ``synchronize()`` raises HostCallbackError.
        """
        _enqueue_call(self, _new_call(callback, arg, self, _KIND_HOST_FUNC))

    def add_callback(self, callback, arg=None):
        """Run ``callback(stream, status, arg)`` after the enqueued work.

        ``status`` is None, or the CudaError CUDA reported for the stream.
        Prefer ``launch_host_func``; CUDA may deprecate stream callbacks.
        """
        _enqueue_call(self, _new_call(callback, arg, self, _KIND_STREAM_CB))

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
        if not isinstance(src, Stream):
            raise TypeError(f"src must be a streams.Stream, not {type(src).__name__}")
        guard()
        self._check_open()
        (<Stream>src)._check_open()
        with nogil:
            check(cudaStreamCopyAttributes(<cudaStream_t>self._handle,
                                           <cudaStream_t>(<Stream>src)._handle))

    def attach_mem_async(self, buffer, length=0, flags="single"):
        """Attach managed memory to this stream (``cudaStreamAttachMemAsync``).

        ``flags``: "single" (only this stream touches it), "global" or "host".
        ``length`` 0 means the whole allocation.
        """
        _stream_attach_mem(self, buffer, _as_nbytes(length, "length"), flags)

    @property
    def device(self):
        """The stream's Device (``cudaStreamGetDevice``)."""
        cdef int dev = -1
        guard()
        self._check_open()
        with nogil:
            check(cudaStreamGetDevice(<cudaStream_t>self._handle, &dev))
        return Device(dev)

    # ---- kernels --------------------------------------------------------------
    def launch(self, kernel, grid, block, *args, shared_mem=0):
        """Launch ``kernel`` with ``grid`` x ``block`` threads (ints or up to 3-tuples).

        Arguments follow the kernel's signature (see ``Module.get_kernel``);
        buffers and objects with ``__cuda_array_interface__``/``__dlpack__``
        pass their address.  The stream's device must be current.
        """
        _stream_launch(self, kernel, grid, block, args,
                       shared_mem if type(shared_mem) is int and shared_mem >= 0
                       else _as_nbytes(shared_mem, "shared_mem"))

    def launch_ex(self, kernel, grid, block, *args, shared_mem=0, cluster=None,
                  cooperative=False):
        """``cudaLaunchKernelExC``: ``launch`` plus thread-block ``cluster``
        dimensions and ``cooperative`` launch."""
        _stream_launch_ex(self, kernel, grid, block, args,
                          _as_nbytes(shared_mem, "shared_mem"), cluster, cooperative)

    # ---- capture ------------------------------------------------------------
    def begin_capture(self, mode="global"):
        """Start capturing this stream's work into a graph (``cudaStreamBeginCapture``).

        ``mode`` is "global", "thread_local" or "relaxed" (CUDA's capture
        interaction modes).  Work is recorded, not run, until ``end_capture``.
        """
        _begin_capture(self, mode)

    def begin_capture_to_graph(self, graph, dependencies=(), mode="global"):
        """Capture into an existing ``graph``, after ``dependencies`` (GraphNodes)."""
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be a streams.Graph, not {type(graph).__name__}")
        _begin_capture_to_graph(self, <Graph>graph, dependencies, mode)

    def end_capture(self):
        """Stop capturing and return the captured Graph.

        CUDA's error names tell what went wrong (``cudaErrorStreamCaptureInvalidated``,
        ``...Unjoined``, ...); the stream has left capture mode either way.
        """
        return _end_capture(self)

    def is_capturing(self):
        """True while a capture is active on this stream."""
        return _capture_status(self) == cudaStreamCaptureStatusActive

    @property
    def capture_status(self):
        """"none", "active" or "invalidated"."""
        return _CAPTURE_STATUS_NAMES[_capture_status(self)]

    def capture_info(self):
        """``CaptureInfo(status, id, graph, dependencies, edge_data)`` of the capture."""
        return _capture_info(self)

    def update_capture_dependencies(self, nodes, mode="add"):
        """Add to ("add") or replace ("set") the nodes the next captured work depends on."""
        _update_capture_dependencies(self, nodes, mode)

    def capture(self, mode="global"):
        """``with stream.capture() as cap: ...`` then ``cap.graph``."""
        return _CaptureContext(self, mode)

    def use(self):
        """Make this stream the thread's current stream for its device (no restore)."""
        cdef int dev = self._device if self._device >= 0 else _current_device()
        _current_map()[dev] = self
        return self

    def __enter__(self):
        cdef int prev_dev = _current_device()
        cdef int dev = self._device if self._device >= 0 else prev_dev
        cdef dict cur = _current_map()
        _tls.stack.append((prev_dev, dev, cur.get(dev)))
        if dev != prev_dev:
            with nogil:
                check(cudaSetDevice(dev))
        cur[dev] = self
        return self

    def __exit__(self, *exc):
        prev_dev, dev, prev_stream = _tls.stack.pop()
        cdef dict cur = _current_map()
        if prev_stream is None:
            cur.pop(dev, None)
        else:
            cur[dev] = prev_stream
        if dev != prev_dev:
            set_device(prev_dev)
        return False

    # ---- properties ---------------------------------------------------------
    @property
    def handle(self):
        """The ``cudaStream_t`` as an int."""
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
        guard()
        self._check_open()
        with nogil:
            check(cudaStreamGetPriority(<cudaStream_t>self._handle, &prio))
        return prio

    @property
    def flags(self):
        """``cudaStreamGetFlags``: 0 (default) or 1 (``cudaStreamNonBlocking``)."""
        cdef unsigned int flags = 0
        guard()
        self._check_open()
        with nogil:
            check(cudaStreamGetFlags(<cudaStream_t>self._handle, &flags))
        return flags

    @property
    def non_blocking(self):
        return bool(self.flags & cudaStreamNonBlocking)

    @property
    def id(self):
        """``cudaStreamGetId``: unique for the life of the process."""
        cdef unsigned long long sid = 0
        guard()
        self._check_open()
        with nogil:
            check(cudaStreamGetId(<cudaStream_t>self._handle, &sid))
        return sid

    @property
    def owner(self):
        return self._owner

    @property
    def closed(self):
        return self._closed

    # ---- lifetime ---------------------------------------------------------
    def close(self):
        """Destroy an owned stream now (pending work still completes).

        Idempotent; further use raises ValueError.  A no-op for the special
        default streams; for a foreign stream it only drops the reference to
        its owner.
        """
        cdef cudaStream_t h
        if self._closed or self._special:
            return
        self._closed = True
        self._owner = None
        if self._marker is not None:
            self._marker.close()
            self._marker = None
        if self._owns_handle:
            self._owns_handle = False
            h = <cudaStream_t>self._handle
            _debug_stream_destroyed()
            with nogil:
                check(cudaStreamDestroy(h))

    def __dealloc__(self):
        # Never raises; skips CUDA at interpreter shutdown and in forked
        # children.  Inside a host callback (the last reference dropped by a
        # payload) CUDA calls are forbidden: the destroy is deferred.
        cdef int state
        if self._owns_handle and not self._closed:
            _debug_stream_destroyed()
            if streams_is_shutting_down() or streams_py_finalizing():
                return
            state = streams_guard_state()
            if state == 1:
                _deferred_stream_destroys.append(<uintptr_t>self._handle)
                Py_AddPendingCall(_run_deferred_destroys, NULL)
            elif state == 0:
                with nogil:
                    cudaStreamDestroy(<cudaStream_t>self._handle)

    def __eq__(self, other):
        if not isinstance(other, Stream):
            return NotImplemented
        if self._closed or (<Stream>other)._closed:
            return self is other
        return (self._handle == (<Stream>other)._handle
                and self._device == (<Stream>other)._device)

    def __hash__(self):
        return hash(("streams.Stream", <uintptr_t>self._handle, self._device))

    def __repr__(self):
        cdef uintptr_t h = <uintptr_t>self._handle
        if self._special:
            name = {0: "null", 1: "legacy", 2: "per_thread"}[h]
            return f"<streams.Stream {name} (handle {h})>"
        if self._closed:
            return "<streams.Stream (closed)>"
        kind = "owned" if self._owns_handle else "foreign"
        return f"<streams.Stream handle=0x{h:x} device={self._device} {kind}>"


cdef dict _special_markers = {}
cdef list _deferred_stream_destroys = []

cdef extern from "Python.h":
    int Py_AddPendingCall(int (*func)(void*) noexcept, void* arg)


cdef int _run_deferred_destroys(void* unused) noexcept with gil:
    cdef uintptr_t h
    if streams_guard_state() != 0:
        return 0  # still inside a callback: the next pending call does it
    while _deferred_stream_destroys:
        h = _deferred_stream_destroys.pop()
        with nogil:
            cudaStreamDestroy(<cudaStream_t>h)
    return 0


cdef _install_special_streams():
    # Cython classes have no settable class attributes: put the singletons
    # in the type's dict directly (as if written in the class body).
    cdef dict d = <dict>(<PyTypeObject*>Stream).tp_dict
    d["null"] = _make_special(_HANDLE_NULL)
    d["legacy"] = _make_special(_HANDLE_LEGACY)
    d["per_thread"] = _make_special(_HANDLE_PER_THREAD)
    PyType_Modified(<PyTypeObject*>Stream)

_install_special_streams()
