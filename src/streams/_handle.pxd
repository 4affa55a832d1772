# The life of every handle owner (streams, events, graphs, executables,
# modules, buffers), in one base class.  Free of CUDA types like
# _stream.pxd: a project that cimports streams compiles it too.
from streams._platform cimport streams_use_begin, streams_use_end

cdef class HandleOwner:
    cdef unsigned int _state      # streams/handle.h: closed flag and users
    cdef bint _owns_handle        # False for a foreign handle: never destroyed here
    # Given a handle once (1; 2 while an __init__ runs): __init__ may not run
    # again.  Changed atomically (streams_flag_*): threads may race __init__.
    cdef int _initialised
    cdef object __weakref__

    # A factory or __init__ that got a handle: open for use.
    cdef void _opened(self, bint owns_handle) noexcept
    # First thing of every __init__: a second call would orphan the handle,
    # or, with users still inside, corrupt the count of users.
    cdef int _init_once(self) except -1
    # An __init__ that raised before _opened gives its claim back.
    cdef void _init_abandoned(self) noexcept
    # Opened by a factory or __init__ (closed since or not).
    cdef bint _is_initialised(self) noexcept nogil
    # Every use of the handle with the GIL released is bracketed by these,
    # so that close() in another thread never frees it under the caller.
    # Inline (no call through the vtable): the C-level methods of Cython
    # projects make two or four of them per call.
    cdef inline int _use(self) except -1 nogil:
        if streams_use_begin(&self._state) == 0:
            return 0
        self._unuse()
        with gil:
            return self._raise_closed()
    cdef inline void _unuse(self) noexcept nogil:
        if streams_use_end(&self._state) and self._owns_handle:
            self._release()
    cdef int _check_open(self) except -1 nogil
    cdef int _raise_closed(self) except -1
    # What a subclass does with its handle.  _destroy: now, for close(),
    # raising on a CUDA error.  _release: never raising, deferred where CUDA
    # cannot be called (the last user leaving, __dealloc__); it may read C
    # fields only, because the base __dealloc__ runs after the subclass's
    # object fields were cleared.
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    # The common part of every close(): 0 when it was closed already, 1 when
    # closed and destroyed now, 2 when closed and the last user releases.
    # The destroy runs with the GIL released (it takes a driver lock).
    cdef int _close_handle(self) except -1


# A keep-alive that holds `owner` in use (one _use, given back when the
# returned HandleUse goes): while it lives, owner.close() marks the owner
# closed but its handle is destroyed only when the keep-alive goes.  What
# graphs, executables and prepared launches keep of the events, modules and
# buffers their nodes use.
cdef object keep_in_use(HandleOwner owner)
