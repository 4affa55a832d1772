# Stream-ordered device memory, pinned and managed host memory, copies and
# sets in stream order, and the CUDA array interface / DLPack exports.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, \
    PyBUF_WRITABLE, PyBUF_SIMPLE
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_GetName
from libc.stdlib cimport malloc, free
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t


# DLPack 0.8 ABI (the unversioned "dltensor" capsule every consumer reads).
cdef struct _DLDevice:
    int32_t device_type
    int32_t device_id

cdef struct _DLDataType:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef struct _DLTensor:
    void* data
    _DLDevice device
    int32_t ndim
    _DLDataType dtype
    int64_t* shape
    int64_t* strides
    unsigned long long byte_offset

cdef struct _DLManagedTensor:
    _DLTensor dl_tensor
    void* manager_ctx
    void (*deleter)(_DLManagedTensor*) noexcept

cdef struct _DLPackBlock:
    _DLManagedTensor managed
    int64_t shape[1]

cdef enum:
    _kDLCPU = 1
    _kDLCUDA = 2
    _kDLCUDAHost = 3
    _kDLCUDAManaged = 13


cdef void _dlpack_deleter(_DLManagedTensor* managed) noexcept with gil:
    # Consumers call this from whichever thread frees the tensor.
    streams_dbg_count(STREAMS_DBG_DLPACK_DECREF)
    Py_DECREF(<object>managed.manager_ctx)
    free(managed)


cdef void _dlpack_capsule_destructor(object capsule) noexcept:
    # An unconsumed capsule still owns its tensor; a consumed one is renamed.
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef _DLManagedTensor* managed
    if name != NULL and name == b"dltensor":
        managed = <_DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        if managed != NULL and managed.deleter != NULL:
            managed.deleter(managed)


cdef cudaStream_t _protocol_stream(object stream, str argname) except? <cudaStream_t>-1:
    """A stream named by the DLPack/CAI convention (1 legacy, 2 per-thread)."""
    if isinstance(stream, Stream):
        return <cudaStream_t>(<Stream>stream)._handle
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"{argname} must be None, an int stream handle or a Stream, not "
                        f"{type(stream).__name__}")
    if stream == 0:
        raise ValueError(f"{argname}=0 is ambiguous (use 1 for the legacy default stream "
                         "or 2 for the per-thread one)")
    return <cudaStream_t><uintptr_t>_as_handle(stream, argname)


cdef class _Buffer:
    """Common base of the memory classes: a pointer, a size, a device."""

    def __cinit__(self, *args, **kwargs):
        self._ptr = NULL
        self._nbytes = 0
        self._closed = True
        self._device = -1

    cdef void* _check_ptr(self) except? NULL:
        if self._closed:
            raise ValueError(f"operation on a closed {type(self).__name__}")
        return self._ptr

    @property
    def ptr(self):
        """The address as an int."""
        return <uintptr_t>self._check_ptr()

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def size(self):
        return self._nbytes

    @property
    def device_id(self):
        return self._device

    @property
    def closed(self):
        return self._closed

    def __len__(self):
        return self._nbytes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._closed:
            return f"<streams.{type(self).__name__} (closed)>"
        return (f"<streams.{type(self).__name__} ptr=0x{<uintptr_t>self._ptr:x} "
                f"nbytes={self._nbytes} device={self._device}>")


cdef size_t _as_nbytes(object nbytes, str argname) except? 0:
    if isinstance(nbytes, bool) or not hasattr(nbytes, "__index__"):
        raise TypeError(f"{argname} must be an int, not {type(nbytes).__name__}")
    n = nbytes.__index__()
    if n < 0:
        raise ValueError(f"{argname} must be >= 0, got {n}")
    return <size_t>n


@cython.final
cdef class DeviceBuffer(_Buffer):
    """Device memory from ``cudaMallocAsync`` on ``stream`` (default: current).

    Freed in stream order (``cudaFreeAsync`` on the same stream) by
    ``close()`` or garbage collection.  Exposes ``__cuda_array_interface__``
    (v3, with its stream) and DLPack, as a 1-D uint8 array.
    """

    def __init__(self, nbytes, stream=None):
        cdef size_t n = _as_nbytes(nbytes, "nbytes")
        cdef Stream s = _as_stream(stream, "stream")
        cdef void* p = NULL
        guard()
        s._check_open()
        self._device = _current_device() if s._device < 0 else s._device
        if n:
            with nogil:
                check(cudaMallocAsync(&p, n, <cudaStream_t>s._handle))
                streams_dbg_count(STREAMS_DBG_MEMORY_ALLOC)
        self._ptr = p
        self._nbytes = n
        self._stream = s
        self._closed = False

    @property
    def stream(self):
        return self._stream

    def close(self, stream=None):
        """Free in order on ``stream`` (default: the allocation's stream).  Idempotent."""
        cdef cudaStream_t h
        cdef void* p = self._ptr
        cdef Stream on
        if self._closed:
            return
        if stream is not None:
            on = _as_stream(stream, "stream")
            h = <cudaStream_t>on._handle
        elif self._stream._closed:
            h = cudaStreamLegacy
        else:
            h = <cudaStream_t>self._stream._handle
        self._closed = True
        self._ptr = NULL
        if p != NULL:
            with nogil:
                streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
                check(cudaFreeAsync(p, h))

    def __dealloc__(self):
        cdef cudaStream_t h
        if self._closed or self._ptr == NULL:
            return
        if not _dealloc_may_call_cuda():
            return
        h = cudaStreamLegacy if self._stream is None or self._stream._closed \
            else <cudaStream_t>self._stream._handle
        with nogil:
            streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
            cudaFreeAsync(self._ptr, h)

    @property
    def __cuda_array_interface__(self):
        cdef uintptr_t h = <uintptr_t>self._stream._handle
        return {"shape": (self._nbytes,), "typestr": "|u1", "descr": [("", "|u1")],
                "data": (<uintptr_t>self._check_ptr(), False), "strides": None,
                "version": 3, "stream": 1 if h == 0 else h}

    def __dlpack_device__(self):
        return (_kDLCUDA, self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule; the consumer's ``stream`` waits for ours."""
        cdef cudaStream_t consumer
        cdef Event ev
        self._check_ptr()
        if copy:
            raise BufferError("DeviceBuffer.__dlpack__ cannot copy")
        if dl_device is not None and tuple(dl_device) != (_kDLCUDA, self._device):
            raise BufferError(f"cannot export to device {dl_device}")
        if stream != -1:
            consumer = cudaStreamLegacy if stream is None else _protocol_stream(stream, "stream")
            if consumer != <cudaStream_t>self._stream._handle:
                ev = Event()
                with nogil:
                    check(cudaEventRecord(<cudaEvent_t>ev._handle,
                                          <cudaStream_t>self._stream._handle))
                    check(cudaStreamWaitEvent(consumer, <cudaEvent_t>ev._handle, 0))
                ev.close()
        return _make_dlpack(self, _kDLCUDA)


cdef object _make_dlpack(_Buffer buf, int device_type):
    cdef _DLPackBlock* block = <_DLPackBlock*>malloc(sizeof(_DLPackBlock))
    if block == NULL:
        raise MemoryError()
    block.shape[0] = <int64_t>buf._nbytes
    block.managed.dl_tensor.data = buf._ptr
    block.managed.dl_tensor.device.device_type = device_type
    block.managed.dl_tensor.device.device_id = buf._device if buf._device >= 0 else 0
    block.managed.dl_tensor.ndim = 1
    block.managed.dl_tensor.dtype.code = 1   # kDLUInt
    block.managed.dl_tensor.dtype.bits = 8
    block.managed.dl_tensor.dtype.lanes = 1
    block.managed.dl_tensor.shape = block.shape
    block.managed.dl_tensor.strides = NULL
    block.managed.dl_tensor.byte_offset = 0
    streams_dbg_count(STREAMS_DBG_DLPACK_INCREF)
    Py_INCREF(buf)
    block.managed.manager_ctx = <void*>buf
    block.managed.deleter = _dlpack_deleter
    return PyCapsule_New(<void*>block, b"dltensor", _dlpack_capsule_destructor)


cdef class _HostBuffer(_Buffer):
    """Host memory with the buffer protocol (numpy.asarray works, no copy)."""

    def __getbuffer__(self, Py_buffer* view, int flags):
        self._check_ptr()
        view.buf = self._ptr
        view.obj = self
        view.len = self._nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        self._shape[0] = <Py_ssize_t>self._nbytes
        view.shape = self._shape if flags & PyBUF_ND else NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self._exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._exports -= 1

    cdef int _check_no_exports(self) except -1:
        if self._exports:
            raise BufferError(f"cannot close a {type(self).__name__} while {self._exports} "
                              "buffer view(s) (e.g. numpy arrays) still use it")
        return 0


cdef extern from "Python.h":
    enum:
        PyBUF_FORMAT
        PyBUF_ND


@cython.final
cdef class PinnedBuffer(_HostBuffer):
    """Page-locked host memory (``cudaHostAlloc``): fast, truly async copies."""

    def __init__(self, nbytes):
        cdef size_t n = _as_nbytes(nbytes, "nbytes")
        cdef void* p = NULL
        guard()
        _require_device()
        if n:
            with nogil:
                check(cudaHostAlloc(&p, n, cudaHostAllocDefault))
                streams_dbg_count(STREAMS_DBG_MEMORY_ALLOC)
        self._ptr = p
        self._nbytes = n
        self._closed = False

    def __dlpack_device__(self):
        return (_kDLCUDAHost, 0)

    def close(self):
        """Free the memory (refused while numpy arrays still view it).  Idempotent."""
        cdef void* p = self._ptr
        if self._closed:
            return
        self._check_no_exports()
        self._closed = True
        self._ptr = NULL
        if p != NULL:
            with nogil:
                streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
                check(cudaFreeHost(p))

    def __dealloc__(self):
        if not self._closed and self._ptr != NULL and _dealloc_may_call_cuda():
            with nogil:
                streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
                cudaFreeHost(self._ptr)


@cython.final
cdef class ManagedBuffer(_HostBuffer):
    """Managed (unified) memory from ``cudaMallocManaged``: host and device see it."""

    def __init__(self, nbytes, *, attach="global"):
        cdef size_t n = _as_nbytes(nbytes, "nbytes")
        cdef void* p = NULL
        cdef unsigned int flags
        if attach == "global":
            flags = cudaMemAttachGlobal
        elif attach == "host":
            flags = cudaMemAttachHost
        else:
            raise ValueError(f"attach must be 'global' or 'host', got {attach!r}")
        guard()
        _require_device()
        self._device = _current_device()
        if n:
            with nogil:
                check(cudaMallocManaged(&p, n, flags))
                streams_dbg_count(STREAMS_DBG_MEMORY_ALLOC)
        self._ptr = p
        self._nbytes = n
        self._closed = False

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self._nbytes,), "typestr": "|u1", "descr": [("", "|u1")],
                "data": (<uintptr_t>self._check_ptr(), False), "strides": None,
                "version": 3, "stream": None}

    def __dlpack_device__(self):
        return (_kDLCUDAManaged, self._device)

    def close(self):
        """Free the memory (refused while numpy arrays still view it).  Idempotent."""
        cdef void* p = self._ptr
        if self._closed:
            return
        self._check_no_exports()
        self._closed = True
        self._ptr = NULL
        if p != NULL:
            with nogil:
                streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
                check(cudaFree(p))

    def __dealloc__(self):
        if not self._closed and self._ptr != NULL and _dealloc_may_call_cuda():
            with nogil:
                streams_dbg_count(STREAMS_DBG_MEMORY_FREE)
                cudaFree(self._ptr)


cdef void* _known_address(object value, str argname) except? NULL:
    """A raw int address, accepted only where CUDA knows the memory.

    With cudaMemcpyDefault an address CUDA does not know is taken for
    pageable host memory and copied with a plain memcpy: a wrong int would
    crash the process.  Host memory must come as a buffer object instead.
    """
    cdef void* p = <void*>_as_handle(value, argname)
    cdef cudaPointerAttributes attrs
    cdef cudaError_t err
    if p == NULL:
        raise ValueError(f"{argname} is a NULL address")
    guard()
    with nogil:
        err = cudaPointerGetAttributes(&attrs, p)
    if err != cudaSuccess:
        cudaGetLastError()
        raise ValueError(f"{argname}=0x{<uintptr_t>p:x}: CUDA cannot describe this address "
                         f"({CudaError(<int>err).name})")
    if attrs.type == cudaMemoryTypeUnregistered:
        raise ValueError(f"{argname}=0x{<uintptr_t>p:x} is not memory CUDA knows (device, "
                         "managed or pinned); pass host memory as an object with the buffer "
                         "protocol (numpy array, bytearray) instead of a raw address")
    return p


cdef struct _Span:
    void* ptr
    size_t nbytes
    bint has_view
    Py_buffer view


cdef int _span_of(object obj, _Span* span, bint writable, str argname) except -1:
    """Address and size of anything memory-like: our buffers, CAI objects,
    host objects with the buffer protocol, or a raw int address."""
    span.has_view = False
    if isinstance(obj, _Buffer):
        span.ptr = (<_Buffer>obj)._check_ptr()
        span.nbytes = (<_Buffer>obj)._nbytes
        return 0
    if isinstance(obj, int) and not isinstance(obj, bool):
        span.ptr = _known_address(obj, argname)
        span.nbytes = <size_t>-1     # unknown: nbytes= must be given
        return 0
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        if cai.get("strides") is not None:
            raise ValueError(f"{argname} must be C-contiguous (its CUDA array interface has "
                             "strides)")
        if writable and cai["data"][1]:
            raise ValueError(f"{argname} is read-only")
        count = 1
        for extent in cai["shape"]:
            count *= extent
        itemsize = int(cai["typestr"][2:])
        span.ptr = <void*><uintptr_t>cai["data"][0]
        span.nbytes = <size_t>(count * itemsize)
        return 0
    try:
        PyObject_GetBuffer(obj, &span.view,
                           PyBUF_C_CONTIGUOUS | (PyBUF_WRITABLE if writable else PyBUF_SIMPLE))
    except (TypeError, BufferError) as exc:
        raise TypeError(f"{argname} must be a streams buffer, an object with "
                        f"__cuda_array_interface__, a C-contiguous{' writable' if writable else ''}"
                        f" host buffer (numpy array, bytearray) or an int address; "
                        f"{type(obj).__name__}: {exc}") from None
    span.has_view = True
    span.ptr = span.view.buf
    span.nbytes = <size_t>span.view.len
    return 0


cdef inline void _span_release(_Span* span) noexcept:
    if span.has_view:
        PyBuffer_Release(&span.view)
        span.has_view = False


def memcpy_async(dst, src, nbytes=None, stream=None):
    """Copy ``nbytes`` (default: all of ``src``) from ``src`` to ``dst`` in stream order.

    Either side may be device, pinned, managed or ordinary (pageable) host
    memory.  Copies from or to pageable memory return only once CUDA has
    staged them, so they are not truly asynchronous; use PinnedBuffer for
    overlap.  The caller keeps both sides alive until the stream passes the
    copy.
    """
    cdef _Span d, s
    cdef size_t n
    cdef Stream st = _as_stream(stream, "stream")
    cdef cudaError_t err
    _span_of(dst, &d, True, "dst")
    try:
        _span_of(src, &s, False, "src")
        try:
            if nbytes is None:
                if s.nbytes == <size_t>-1:
                    raise ValueError("nbytes is required when src is a raw address")
                n = s.nbytes
            else:
                n = _as_nbytes(nbytes, "nbytes")
            if s.nbytes != <size_t>-1 and n > s.nbytes:
                raise ValueError(f"nbytes={n} is more than src holds ({s.nbytes})")
            if d.nbytes != <size_t>-1 and n > d.nbytes:
                raise ValueError(f"nbytes={n} is more than dst holds ({d.nbytes})")
            guard()
            st._check_open()
            with nogil:
                err = cudaMemcpyAsync(d.ptr, s.ptr, n, cudaMemcpyDefault,
                                      <cudaStream_t>st._handle)
            check(err)
        finally:
            _span_release(&s)
    finally:
        _span_release(&d)


def memset_async(dst, int value, nbytes=None, stream=None):
    """Set ``nbytes`` bytes (default: all of ``dst``) to ``value`` (0-255) in stream order."""
    cdef _Span d
    cdef size_t n
    cdef Stream st = _as_stream(stream, "stream")
    cdef cudaError_t err
    if value < 0 or value > 255:
        raise ValueError(f"value must be a byte (0-255), got {value}")
    _span_of(dst, &d, True, "dst")
    try:
        if nbytes is None:
            if d.nbytes == <size_t>-1:
                raise ValueError("nbytes is required when dst is a raw address")
            n = d.nbytes
        else:
            n = _as_nbytes(nbytes, "nbytes")
            if d.nbytes != <size_t>-1 and n > d.nbytes:
                raise ValueError(f"nbytes={n} is more than dst holds ({d.nbytes})")
        guard()
        st._check_open()
        with nogil:
            err = cudaMemsetAsync(d.ptr, value, n, <cudaStream_t>st._handle)
        check(err)
    finally:
        _span_release(&d)
