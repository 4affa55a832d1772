# Pools of stream and event handles (StreamPool, EventPool), part of
# streams._stream (_stream.pyx includes it).

cdef class _HandlePool:
    """Common part of StreamPool and EventPool: a bounded stack of idle handles
    of one kind, shared with the objects made from it (include/streams/pool.h)."""
    cdef void* _pool
    cdef int _kind
    cdef int _device
    cdef Py_ssize_t _maxsize
    cdef bint _claimed      # __init__ ran (or runs): never again, closed or not

    def __cinit__(self, *args, **kwargs):
        self._pool = NULL

    # __init__ in three steps, so that a second __init__ (another thread's,
    # or one after close()) changes nothing: the arguments are checked, the
    # object claimed (_claim, which refuses a second time), the subclass's
    # parameters written, then the pool published (_publish) after them.
    @staticmethod
    cdef int _check_maxsize(object maxsize) except -1:
        # Before the device is looked at (tests/package/test_arguments.py).
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise TypeError(f"maxsize must be an int, not {type(maxsize).__name__}")
        if maxsize < 0 or maxsize > 1 << 20:
            raise ValueError(f"maxsize must be between 0 and {1 << 20}, got {maxsize}")
        return 0

    cdef void* _claim(self, object maxsize) except NULL:
        _HandlePool._check_maxsize(maxsize)
        cdef void* p = streams_pool_new(<size_t>maxsize)
        cdef bint again
        if p == NULL:
            raise MemoryError()
        with cython.critical_section(self):
            again = self._claimed
            self._claimed = True
        if again:
            streams_pool_unref(<streams_pool*>p)
            raise RuntimeError(f"{type(self).__name__}.__init__ was called on a pool that was "
                               "already initialised (a pool is made once, and stays closed "
                               "once closed): make a new one instead")
        return p

    cdef void _publish(self, void* p, int kind, int device, Py_ssize_t maxsize) noexcept:
        with cython.critical_section(self):
            self._kind = kind
            self._device = device
            self._maxsize = maxsize
            self._pool = p      # last: acquire() reads the fields once it sees the pool

    # _pool is read and cleared under the pool object's critical section
    # (free-threaded CPython; the GIL elsewhere): a close() in another thread
    # cannot let the C pool go between a look at the pointer and its use.
    # The C pool's own mutex, taken inside, is never held while waiting for
    # anything else.

    cdef void* _take(self) except? NULL:
        cdef void* h = NULL
        cdef bint is_open = False
        with cython.critical_section(self):
            if self._pool != NULL:
                is_open = True
                h = streams_pool_take(<streams_pool*>self._pool)
        if not is_open:
            rt.raise_closed(self)
        return h

    cdef void* _lend(self) noexcept:
        # For an object whose handle goes back here: its reference to the
        # pool.  NULL, a plain owned handle, when another thread closed the
        # pool while acquire() made the handle with the GIL released.
        cdef void* p
        with cython.critical_section(self):
            p = self._pool
            if p != NULL:
                streams_pool_ref(<streams_pool*>p)
        return p

    @property
    def maxsize(self):
        """How many idle handles the pool keeps at most."""
        return self._maxsize

    @property
    def idle(self):
        """How many idle handles the pool holds now."""
        cdef size_t n = 0
        with cython.critical_section(self):
            if self._pool != NULL:
                n = streams_pool_idle(<streams_pool*>self._pool)
        return n

    @property
    def device_id(self):
        return self._device

    @property
    def closed(self):
        return self._pool == NULL

    def close(self):
        """Destroy the idle handles; those still lent out are destroyed when
        their objects close.  Idempotent."""
        if self._pool == NULL:
            return
        rt.refuse_forbidden()
        self._shut()

    cdef void _shut(self) noexcept:
        # Never raises: the idle handles are released one by one (deferred
        # where CUDA cannot be called here).
        # The pointer is taken in one step: of two close() calls at once,
        # one shuts the C pool and the other finds nothing left to do.
        cdef void* h
        cdef void* p
        with cython.critical_section(self):
            p = self._pool
            self._pool = NULL
        if p == NULL:
            return
        streams_pool_close(<streams_pool*>p)
        h = streams_pool_take(<streams_pool*>p)
        while h != NULL:
            rt.release_handle(self._kind, h)
            h = streams_pool_take(<streams_pool*>p)
        streams_pool_unref(<streams_pool*>p)

    def __dealloc__(self):
        if self._pool != NULL:
            self._shut()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._pool == NULL:
            return f"<streams.{type(self).__name__} (closed)>"
        return (f"<streams.{type(self).__name__} device={self._device} idle={self.idle} "
                f"maxsize={self._maxsize}>")


@cython.final
cdef class StreamPool(_HandlePool):
    """StreamPool(device=None, priority=0, non_blocking=False, *, maxsize=16)

    Streams that reuse the handles of closed ones.

    ``StreamPool(device=None, priority=0, non_blocking=False, maxsize=16)``:
    ``acquire()`` returns an open ``Stream`` with those parameters, whose
    handle is an idle one of the pool when there is one.  Closing that
    stream (or dropping it) gives its handle back, unless ``maxsize`` idle
    handles are kept already or the pool is closed: then it is destroyed.
    A handle given back while work is still queued on it stays usable: the
    next stream made from it runs its work after that.  Thread-safe.
    """
    cdef _StreamParams _params

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, device=None, priority=0, non_blocking=False, *, maxsize=16):
        cdef _StreamParams params
        _HandlePool._check_maxsize(maxsize)
        _stream_params(device, priority, non_blocking, &params)
        cdef void* p = self._claim(maxsize)
        self._params = params
        self._publish(p, rt.HANDLE_STREAM, params.device, maxsize)

    def acquire(self):
        """An open Stream: a pooled handle, or a new one."""
        cdef void* h = self._take()
        cdef Stream s
        if h == NULL:
            h = _create_stream(&self._params)
        s = Stream.__new__(Stream)
        s._handle = <streams_stream_t>h
        s._device = self._device
        s._pool = self._lend()
        s._opened(True)
        return s

    @property
    def priority(self):
        return self._params.priority

    @property
    def non_blocking(self):
        return self._params.flags == cudaStreamNonBlocking


@cython.final
cdef class EventPool(_HandlePool):
    """EventPool(enable_timing=False, blocking=False, device=None, *, maxsize=64)

    Events that reuse the handles of closed ones.

    ``EventPool(enable_timing=False, blocking=False, device=None, maxsize=64)``:
    ``acquire()`` returns an unrecorded-or-reused ``Event`` with those flags,
    on ``device``; closing or dropping it gives its handle back (as
    StreamPool does).  A reused handle may still carry its last record:
    record it before querying or waiting on it, as with any event you reuse.
    Interprocess events are not pooled.  Thread-safe.
    """
    cdef unsigned int _flags

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, enable_timing=False, blocking=False, device=None, *, maxsize=64):
        _HandlePool._check_maxsize(maxsize)
        cdef unsigned int flags = _event_flags(enable_timing, blocking, False)
        cdef int dev = resolve_device(device)
        cdef void* p = self._claim(maxsize)
        self._flags = flags
        self._publish(p, rt.HANDLE_EVENT, dev, maxsize)

    def acquire(self):
        """An open Event: a pooled handle, or a new one."""
        cdef void* h = self._take()
        cdef Event ev
        if h == NULL:
            ev = new_event(self._device, self._flags)
        else:
            ev = Event.__new__(Event)
            ev._handle = <streams_event_t>h
            ev._device = self._device
            ev._flags = self._flags
            ev._opened(True)
        ev._pool = self._lend()
        return ev

    @property
    def is_timing(self):
        return not (self._flags & cudaEventDisableTiming)
