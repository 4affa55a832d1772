# Memory: device, pinned and managed buffers, copies and sets in stream
# order, and the one way every API turns a memory-like argument (a streams
# buffer, a raw address, __cuda_array_interface__, DLPack, a host buffer)
# into an address.
from libc.stdint cimport uintptr_t

from streams._handle cimport HandleOwner
from streams._stream cimport Stream

cdef enum:
    SPAN_WRITABLE = 1     # it will be written
    SPAN_HOST_OK = 2      # pageable host memory (numpy, bytearray) is fine
    SPAN_DEVICE = 4       # a kernel reads it: device, managed or mapped pinned memory
    SPAN_NULL_OK = 8      # None or 0 stand for NULL
    SPAN_NO_WAIT = 16     # the caller orders foreign arrays itself (wait_producers=False)


cdef struct Span:
    void* ptr
    size_t nbytes         # (size_t)-1 when unknown (a raw address)
    bint has_view
    Py_buffer view
    void* user            # a streams buffer held in use until release_span


# What a span must be before a try whose finally calls release_span: empty.
cdef inline void init_span(Span* span) noexcept nogil:
    span.user = NULL
    span.has_view = False


# Resolve `obj` for use on `consumer` (None: no ordering).  A foreign array
# whose producer's stream is known (its __cuda_array_interface__ names it;
# a PyTorch tensor: torch's current stream) gets `consumer` ordered after
# that stream's work, a DLPack producer is handed `consumer`; neither inside
# a capture that would break (docs/interop.rst), nor with SPAN_NO_WAIT.
# Call release_span afterwards.
cdef int resolve_span(object obj, Span* span, int flags, Stream consumer,
                      str argname) except -1
cdef void release_span(Span* span) noexcept
# ``n`` bytes fit in ``span`` (or its length is unknown), else ValueError.
cdef int check_fits(size_t n, Span* span, str argname) except -1
# ``nbytes`` (which must fit in ``span``), or all of it when None.
cdef size_t _span_length(object nbytes, Span* span, str argname) except? 0
# Keep a streams buffer in use (its memory stays until the keep-alive goes):
# what graphs keep for their memset and memcpy nodes.  Other objects are
# returned as they are (kept alive by reference).
cdef object keep_memory(object obj)


cdef class _Buffer(HandleOwner):
    cdef void* _ptr
    cdef size_t _nbytes
    cdef int _device
    cdef int _views               # buffer-protocol views (numpy) alive
    cdef void _adopt(self, void* ptr, size_t nbytes) noexcept
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    cdef void _release_memory(self) noexcept


cdef class DeviceBuffer(_Buffer):
    cdef Stream _stream           # the allocation's stream, where it is freed
    # close(stream=...): free there instead; held in use (counted) from that
    # close() until the free is enqueued, so its handle outlives a close().
    cdef Stream _free_on
    # The MemoryPool it came from, or None; held in use (counted) until the
    # free is enqueued, so that the pool is never destroyed under it.
    cdef object _pool
    cdef uintptr_t _order_handle(self) except? 0
    cdef void _adopt_device(self, void* p, size_t n, int dev, Stream s, object pool) noexcept


# A stream-ordered memory pool (cudaMemPool_t) of one device.
cdef class MemoryPool(HandleOwner):
    cdef void* _handle            # cudaMemPool_t
    cdef int _device
    cdef bint _ipc                # exportable (POSIX file descriptor handles)
    cdef bint _shared             # exported (or imported) once: pointers can be exported
    # An owned pool's marks (_cudart): one after each free of its memory, on
    # the free's stream; the pool is destroyed once they are done.
    cdef void* _frees
    cdef int _export_fd(self) except -1
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil
    cdef unsigned long long _get_u64(self, int attr) except? 0
    cdef int _set_u64(self, int attr, unsigned long long value) except -1
    cdef bint _get_flag(self, int attr) except -1
    cdef int _set_flag(self, int attr, object value, str name) except -1


cdef class _HostBuffer(_Buffer):
    cdef int _kind                # how _cudart frees it (HANDLE_HOST_MEMORY, ...)


cdef class PinnedBuffer(_HostBuffer):
    pass


cdef class ManagedBuffer(_HostBuffer):
    cdef Stream _stream           # the stream its CAI names (legacy unless given)
