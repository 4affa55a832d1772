# cython: language_level=3
"""The one resource pattern of the package's handle owners.

A handle may be in use with the GIL released (a wait, an enqueue, a
cimporter's nogil call) while another thread closes its owner.  So
``close()`` only marks the owner closed, and whoever sees it closed with no
users left, ``close()`` itself or the last user on its way out, releases the
handle, once (include/streams/handle.h).  A subclass says how its handle is
destroyed (``_destroy``) and released without raising (``_release``).
"""
cimport cython

cimport streams._cudart as rt
from streams._platform cimport (STREAMS_H_INERT, streams_close_begin, streams_flag_claim,
                                streams_flag_get, streams_flag_set, streams_is_closed,
                                streams_open)


# HandleOwner._initialised: never initialised; an __init__ under way (one
# thread claimed it); given a handle.
cdef enum:
    INIT_NONE = 0
    INIT_DONE = 1
    INIT_RUNNING = 2


cdef class HandleOwner:
    """Base of the classes that own a CUDA handle: ``closed``, an idempotent
    ``close()``, a context manager, and a ``__dealloc__`` that never raises."""

    def __cinit__(self, *args, **kwargs):
        # Unusable until a factory or __init__ gives it a handle.
        self._state = STREAMS_H_INERT
        self._owns_handle = False

    cdef void _opened(self, bint owns_handle) noexcept:
        self._owns_handle = owns_handle
        streams_flag_set(&self._initialised, INIT_DONE)
        streams_open(&self._state)

    cdef int _init_once(self) except -1:
        # Claimed atomically: of two threads that run __init__ on one
        # object at once, one makes the handle and the other is refused,
        # so no handle is orphaned and no field is written twice.
        if streams_flag_claim(&self._initialised, INIT_NONE, INIT_RUNNING):
            return 0
        if streams_flag_get(&self._initialised) == INIT_RUNNING:
            raise RuntimeError(f"{type(self).__name__}.__init__ is running in another thread "
                               "on this object: make a new one instead")
        raise RuntimeError(f"{type(self).__name__}.__init__ was called on an object that "
                           "was already initialised: make a new one instead")

    cdef void _init_abandoned(self) noexcept:
        # An __init__ that failed before it got a handle: a later one may try.
        streams_flag_claim(&self._initialised, INIT_RUNNING, INIT_NONE)

    cdef bint _is_initialised(self) noexcept nogil:
        return streams_flag_get(&self._initialised) == INIT_DONE

    cdef int _raise_closed(self) except -1:
        return rt.raise_closed(self)

    cdef int _check_open(self) except -1 nogil:
        if streams_is_closed(&self._state):
            with gil:
                return rt.raise_closed(self)
        return 0

    cdef int _destroy(self) except -1 nogil:
        return 0

    cdef void _release(self) noexcept nogil:
        pass

    cdef int _close_handle(self) except -1:
        cdef int how
        if streams_is_closed(&self._state):
            return 0
        # Inside a host callback CUDA cannot destroy anything: refuse before
        # the object is marked closed, so that it stays usable.
        rt.refuse_forbidden()
        how = streams_close_begin(&self._state)
        if how == 1 and self._owns_handle:
            with nogil:
                self._destroy()
        return how

    @property
    def closed(self):
        return bool(streams_is_closed(&self._state))

    def close(self):
        """Release the handle now; later use raises ValueError.  Idempotent.

        A call still using it in another thread finishes first: the handle
        is released when that call leaves.
        """
        self._close_handle()

    def __dealloc__(self):
        # No user can be left (each holds a reference), so an open handle is
        # released here: now, or later if CUDA cannot be called on this
        # thread (a callback dropped the last reference).
        if self._owns_handle and streams_close_begin(&self._state) == 1:
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# no_gc_clear: its __dealloc__ gives the use back, so the GC must not set
# `owner` to None first ("Reference cycles" in docs/architecture.rst).
@cython.final
@cython.no_gc_clear
cdef class HandleUse:
    """One use of a handle owner, kept by whoever holds this object (see
    keep_in_use): the owner's handle outlives a close() until it goes."""
    cdef HandleOwner owner

    def __dealloc__(self):
        if self.owner is not None:
            self.owner._unuse()


cdef object keep_in_use(HandleOwner owner):
    cdef HandleUse use
    if owner is None:
        raise TypeError("keep_in_use needs a handle owner, not None")
    use = HandleUse.__new__(HandleUse)
    owner._use()            # a closed owner raises: `use` goes, holding nothing
    use.owner = owner
    return use
