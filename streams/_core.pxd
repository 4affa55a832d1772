# C-level declarations of the classes in the `streams._core` extension.
#
# Every class lives in the one extension module so that exactly one copy of
# the statically linked CUDA runtime exists in the package; each class has its
# own source file (_stream.pxi, _event.pxi, ...).  Handles are declared with
# the types of include/streams/streams.h, so a project that cimports these
# classes needs `streams.get_include()` on its include path and no CUDA
# headers.
#
# C-level methods meant for cimporters run without the GIL and report errors
# as Python exceptions (`except -1`): call them inside `with nogil:`.

cdef extern from "streams/streams.h":
    ctypedef void* streams_stream_t
    ctypedef void* streams_event_t
    ctypedef void* streams_graph_t
    ctypedef void* streams_graph_exec_t


cdef class Event
cdef class GraphNode


cdef class Stream:
    cdef streams_stream_t _handle
    cdef int _device            # -1 for the device-agnostic special streams
    cdef bint _owns_handle
    cdef bint _closed
    cdef bint _special          # legacy / per-thread / null singletons
    cdef object _owner          # keeps a foreign handle's owner alive
    cdef Event _marker          # reused by wait_stream(): no event per call
    cdef object _callback_error  # first exception raised by a host callback
    cdef object __weakref__

    # 1 when all work is done, 0 when not; never raises cudaErrorNotReady.
    cdef int c_query(self) except -1 nogil
    # Plain cudaStreamSynchronize: blocks, not interruptible.
    cdef int c_synchronize(self) except -1 nogil
    cdef int c_record(self, Event event) except -1 nogil
    cdef int c_wait_event(self, Event event) except -1 nogil
    cdef int c_wait_stream(self, Stream other) except -1 nogil
    cdef streams_stream_t c_handle(self) noexcept nogil
    # private
    cdef int _check_open(self) except -1 nogil
    cdef Event _get_marker(self)


cdef class Event:
    cdef streams_event_t _handle
    cdef int _device
    cdef unsigned int _flags
    cdef bint _owns_handle
    cdef bint _closed
    cdef bint _recorded
    cdef object __weakref__

    cdef int c_record(self, Stream stream) except -1 nogil
    cdef int c_query(self) except -1 nogil
    cdef int c_synchronize(self) except -1 nogil
    cdef int c_wait(self, Stream stream) except -1 nogil
    cdef streams_event_t c_handle(self) noexcept nogil
    # private
    cdef int _check_open(self) except -1 nogil


cdef class Graph:
    cdef streams_graph_t _handle
    cdef bint _owns_handle
    cdef bint _closed
    cdef object _errors          # _ErrorSlot shared with its executables
    cdef object __weakref__

    cdef int _check_open(self) except -1


cdef class GraphNode:
    cdef void* _handle
    cdef Graph _graph


cdef class GraphExec:
    cdef streams_graph_exec_t _handle
    cdef bint _closed
    cdef object _errors
    cdef object __weakref__

    cdef int c_launch(self, Stream stream) except -1 nogil
    # private
    cdef int _check_open(self) except -1 nogil


cdef class Module:
    cdef void* _handle           # cudaLibrary_t
    cdef bytes _image
    cdef bint _closed
    cdef int _check_open(self) except -1


cdef class Kernel:
    cdef void* _func             # cudaKernel_t
    cdef Module _module
    cdef str _name
    cdef int _kinds[64]
    cdef int _nargs
    cdef object _signature
    cdef object _signature_names


cdef class PreparedLaunch:
    cdef Kernel _kernel
    cdef unsigned int _grid[3]
    cdef unsigned int _block[3]
    cdef unsigned long long _slots[64]
    cdef void* _ptrs[64]
    cdef int _nargs
    cdef size_t _shared_mem
    cdef object _keepalive

    # One cudaLaunchKernel: the hot loop of a cimporter.
    cdef int c_launch(self, Stream stream) except -1 nogil


cdef class _Buffer:
    cdef void* _ptr
    cdef size_t _nbytes
    cdef bint _closed
    cdef int _device
    cdef void* _check_ptr(self) except? NULL


cdef class DeviceBuffer(_Buffer):
    cdef Stream _stream


cdef class _HostBuffer(_Buffer):
    cdef Py_ssize_t _shape[1]
    cdef int _exports
    cdef int _check_no_exports(self) except -1


cdef class PinnedBuffer(_HostBuffer):
    pass


cdef class ManagedBuffer(_HostBuffer):
    pass
