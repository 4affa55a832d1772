# Event: cudaEvent_t with RAII, recording, waiting and timing.


cdef int _check_timeout(object timeout) except -1:
    cdef double seconds
    if timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be None or a number of seconds, not "
                        f"{type(timeout).__name__}")
    seconds = timeout
    if seconds != seconds or seconds < 0:
        raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
    return 0


cdef int _wait_until_done(int kind, void* handle, object timeout, bint sleepy=False) except -1:
    """Wait for a stream (kind 0) or event (kind 1) to complete.

    Returns 1 when the work is done, 0 when ``timeout`` seconds passed first.
    The GIL is released while waiting, and signals are checked between short
    slices so that Ctrl-C raises KeyboardInterrupt within milliseconds.
    Completion is noticed by polling the status with a yield between polls:
    the same spin-then-yield the driver does for a synchronize under its
    default scheduling, so it adds no wake-up latency.  ``sleepy`` waits
    (blocking-sync events) sleep between polls instead, backing off from
    20 us to 1 ms, trading that much latency for an idle CPU.
    """
    cdef long long nap_ns = 20000
    cdef long long spin_until = streams_now_ns() + 100000   # 100 us of pause-spinning
    cdef cudaError_t err
    cdef long long deadline = -1
    cdef long long slice_end
    cdef long long slice_ns = 2000000   # signal checks every 2 ms
    cdef double seconds
    if timeout is not None:
        seconds = timeout
        if seconds != seconds or seconds < 0:
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        deadline = streams_now_ns() + <long long>(seconds * 1e9)
    while True:
        with nogil:
            slice_end = streams_now_ns() + slice_ns
            if deadline >= 0 and deadline < slice_end:
                slice_end = deadline
            while True:
                if kind == 0:
                    err = cudaStreamQuery(<cudaStream_t>handle)
                else:
                    err = cudaEventQuery(<cudaEvent_t>handle)
                if err != cudaErrorNotReady or streams_now_ns() >= slice_end:
                    break
                if sleepy:
                    streams_sleep_ns(nap_ns)
                    if nap_ns < 1000000:
                        nap_ns = nap_ns * 2
                elif streams_now_ns() < spin_until:
                    streams_cpu_relax()
                else:
                    streams_cpu_yield()
        if err == cudaSuccess:
            return 1
        if err != cudaErrorNotReady:
            check(err)
        PyErr_CheckSignals()
        if deadline >= 0 and streams_now_ns() >= deadline:
            return 0


cdef class Event:
    """A CUDA event (``cudaEventCreateWithFlags``), destroyed by ``close()`` or GC.

    ``enable_timing`` allows ``elapsed_time``; ``blocking``
    (``cudaEventBlockingSync``) makes ``synchronize`` sleep between checks
    instead of spinning;
    ``interprocess`` allows sharing with another process (timing must then
    be off, as CUDA requires).
    """

    def __cinit__(self, *args, **kwargs):
        # Unusable until __init__ (or a factory) gives it a handle.
        self._closed = True
        self._owns_handle = False
        self._device = -1

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        cdef unsigned int flags = cudaEventDefault
        cdef cudaEvent_t handle = NULL
        if interprocess and enable_timing:
            raise ValueError("interprocess=True requires enable_timing=False (CUDA does "
                             "not support timing on interprocess events)")
        if not enable_timing:
            flags |= cudaEventDisableTiming
        if blocking:
            flags |= cudaEventBlockingSync
        if interprocess:
            flags |= cudaEventInterprocess
        guard()
        self._device = _current_device()
        with nogil:
            check(cudaEventCreateWithFlags(&handle, flags))
        self._handle = handle
        self._flags = flags
        self._owns_handle = True
        self._closed = False
        _debug_event_created()

    cdef int _check_open(self) except -1 nogil:
        if self._closed:
            with gil:
                raise ValueError("operation on a closed (or never initialised) Event")
        return 0

    # ---- C-level API (nogil, for cimporters) ------------------------------
    cdef streams_event_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_record(self, Stream stream) except -1 nogil:
        return stream.c_record(self)

    cdef int c_query(self) except -1 nogil:
        cdef cudaError_t err
        guard()
        self._check_open()
        err = cudaEventQuery(<cudaEvent_t>self._handle)
        if err == cudaSuccess:
            return 1
        if err == cudaErrorNotReady:
            return 0
        return check(err)

    cdef int c_synchronize(self) except -1 nogil:
        guard()
        self._check_open()
        return check(cudaEventSynchronize(<cudaEvent_t>self._handle))

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
        cdef Stream s = _as_stream(stream, "stream")
        cdef unsigned int flags = cudaEventRecordExternal if external else cudaEventRecordDefault
        if flags == cudaEventRecordDefault:
            with nogil:
                s.c_record(self)
        else:
            guard()
            self._check_open()
            s._check_open()
            with nogil:
                check(cudaEventRecordWithFlags(<cudaEvent_t>self._handle,
                                               <cudaStream_t>s._handle, flags))
            self._recorded = True
        return self

    def query(self):
        """True when all work captured by the last record has completed."""
        # GIL kept: a pure status check, as in Stream.query().
        return self.c_query() == 1

    @property
    def done(self):
        return self.query()

    def synchronize(self, timeout=None):
        """Wait for the recorded work (GIL released, Ctrl-C works).

        Returns True when done; with ``timeout`` (seconds), False if it expired.
        """
        _check_timeout(timeout)
        if self.c_query() == 1:   # fast path, GIL kept (see Stream.query)
            return True
        return _wait_until_done(1, <void*>self._handle, timeout,
                                (self._flags & cudaEventBlockingSync) != 0) == 1

    def wait(self, stream=None):
        """Make ``stream`` (default: the current stream) wait for this event."""
        cdef Stream s = _as_stream(stream, "stream")
        with nogil:
            s.c_wait_event(self)
        return self

    def elapsed_time(self, Event end not None):
        """Milliseconds from this event to ``end`` (both must be recorded, with timing).

        Waits for both events to complete first.
        """
        cdef float ms = 0
        self._check_open()
        end._check_open()
        for ev, role in ((self, "start"), (end, "end")):
            if (<Event>ev)._flags & cudaEventDisableTiming:
                raise ValueError(f"elapsed_time: the {role} event was created with "
                                 "enable_timing=False")
            if not (<Event>ev)._recorded:
                raise ValueError(f"elapsed_time: the {role} event was never recorded")
        _wait_until_done(1, <void*>self._handle, None)
        _wait_until_done(1, <void*>end._handle, None)
        with nogil:
            check(cudaEventElapsedTime(&ms, <cudaEvent_t>self._handle, <cudaEvent_t>end._handle))
        return ms

    def ipc_handle(self):
        """The 64-byte ``cudaIpcEventHandle_t`` for another process's ``from_ipc_handle``."""
        cdef cudaIpcEventHandle_t h
        self._check_open()
        if not self._flags & cudaEventInterprocess:
            raise ValueError("ipc_handle() needs an Event created with interprocess=True")
        with nogil:
            check(cudaIpcGetEventHandle(&h, <cudaEvent_t>self._handle))
        return (<char*>h.reserved)[:64]

    @staticmethod
    def from_ipc_handle(handle):
        """Open an event another process exported with ``ipc_handle()``."""
        cdef cudaIpcEventHandle_t h
        cdef cudaEvent_t ev = NULL
        cdef const unsigned char[:] view
        if not isinstance(handle, (bytes, bytearray, memoryview)):
            raise TypeError(f"handle must be bytes from Event.ipc_handle(), not "
                            f"{type(handle).__name__}")
        data = bytes(handle)
        if len(data) != 64:
            raise ValueError(f"handle must be 64 bytes, got {len(data)}")
        for i in range(64):
            h.reserved[i] = <char>data[i]
        guard()
        cdef Event opened = Event.__new__(Event)
        opened._device = _current_device()
        with nogil:
            check(cudaIpcOpenEventHandle(&ev, h))
        opened._handle = ev
        opened._flags = cudaEventDisableTiming | cudaEventInterprocess
        opened._owns_handle = True
        opened._closed = False
        opened._recorded = True
        _debug_event_created()
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

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Destroy the event now; further use raises ValueError.  Idempotent."""
        cdef cudaEvent_t h
        if self._closed:
            return
        self._closed = True
        if self._owns_handle:
            self._owns_handle = False
            h = <cudaEvent_t>self._handle
            _debug_event_destroyed()
            with nogil:
                check(cudaEventDestroy(h))

    def __dealloc__(self):
        # Never raises; skips CUDA at interpreter shutdown and in forked children.
        if self._owns_handle and not self._closed:
            _debug_event_destroyed()
            if _dealloc_may_call_cuda():
                with nogil:
                    cudaEventDestroy(<cudaEvent_t>self._handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __eq__(self, other):
        if not isinstance(other, Event):
            return NotImplemented
        if self._closed or (<Event>other)._closed:
            return self is other
        return self._handle == (<Event>other)._handle

    def __hash__(self):
        return hash(("streams.Event", <uintptr_t>self._handle))

    def __repr__(self):
        if self._closed:
            return "<streams.Event (closed)>"
        opts = []
        if self.is_timing:
            opts.append("timing")
        if self._flags & cudaEventBlockingSync:
            opts.append("blocking")
        if self._flags & cudaEventInterprocess:
            opts.append("interprocess")
        return (f"<streams.Event handle=0x{<uintptr_t>self._handle:x} device={self._device}"
                + (" " + ",".join(opts) if opts else "") + ">")
