# cython: language_level=3
"""Stream-ordered device memory, pinned and managed host memory, copies and
sets in stream order, the CUDA array interface and DLPack, both ways.

Every API that takes memory resolves it through ``resolve_span``: streams
buffers, raw addresses (accepted only where CUDA knows the memory), foreign
arrays through ``__cuda_array_interface__`` (honouring its ``stream``) or
DLPack (handing the producer the consuming stream), and, where host memory
is fine, anything with the buffer protocol.
"""
cimport cython
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_SIMPLE, PyBUF_WRITABLE, \
    PyBuffer_Release, PyObject_GetBuffer
from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, \
    PyCapsule_New
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc

cimport streams._cudart as rt
from streams._args cimport as_int, as_nbytes, as_pointer_int
from streams._device cimport (DeviceScope, current_device, enter_device, exit_device,
                              resolve_device)
from streams._handle cimport HandleOwner
from streams._platform cimport streams_close_begin, streams_is_closed
from streams._stream cimport Event, Stream, as_stream
from streams.cudart cimport *

cdef extern from "Python.h":
    enum:
        PyBUF_FORMAT
        PyBUF_ND
    void PyErr_WriteUnraisable(object obj)


# ---- DLPack -----------------------------------------------------------------------------
# The ABI of DLPack 0.8 (the unversioned "dltensor" capsule every consumer
# reads) and of 1.x ("dltensor_versioned"), which some producers return.

cdef struct DLDevice:
    int32_t device_type
    int32_t device_id

cdef struct DLDataType:
    uint8_t code
    uint8_t bits
    uint16_t lanes

cdef struct DLTensor:
    void* data
    DLDevice device
    int32_t ndim
    DLDataType dtype
    int64_t* shape
    int64_t* strides
    uint64_t byte_offset

cdef struct DLManagedTensor:
    DLTensor dl_tensor
    void* manager_ctx
    void (*deleter)(DLManagedTensor*) noexcept nogil

cdef struct DLPackVersion:
    uint32_t major
    uint32_t minor

cdef struct DLManagedTensorVersioned:
    DLPackVersion version
    void* manager_ctx
    void (*deleter)(DLManagedTensorVersioned*) noexcept nogil
    uint64_t flags
    DLTensor dl_tensor

cdef struct _DLPackBlock:
    DLManagedTensor managed
    int64_t shape[1]

cdef enum:
    _kDLCPU = 1
    _kDLCUDA = 2
    _kDLCUDAHost = 3
    _kDLCUDAManaged = 13
    _DLPACK_FLAG_READ_ONLY = 1

_DEVICE_NAMES = {_kDLCPU: "CPU", _kDLCUDA: "CUDA", _kDLCUDAHost: "CUDA host (pinned)",
                 _kDLCUDAManaged: "CUDA managed"}


cdef void _dlpack_deleter(DLManagedTensor* managed) noexcept nogil:
    # Consumers call this from whichever thread frees the tensor, possibly
    # while the interpreter is being torn down: then it leaks rather than
    # touch Python.
    if not rt.may_release_any_thread():
        return
    with gil:
        rt.count(rt.STREAMS_CNT_DLPACK_DECREF)
        buf = <_Buffer>managed.manager_ctx
        buf._unuse()           # the export was a user of the memory
        Py_DECREF(buf)
    free(managed)


cdef void _dlpack_capsule_destructor(object capsule) noexcept:
    # An unconsumed capsule still owns its tensor; a consumed one is renamed.
    cdef const char* name = PyCapsule_GetName(capsule)
    cdef DLManagedTensor* managed
    if name != NULL and name == b"dltensor":
        managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        if managed != NULL and managed.deleter != NULL:
            managed.deleter(managed)


cdef object _export_dlpack(_Buffer buf, int device_type):
    cdef _DLPackBlock* block = <_DLPackBlock*>malloc(sizeof(_DLPackBlock))
    if block == NULL:
        raise MemoryError()
    try:
        buf._use()    # the memory outlives close() while the consumer has it
    except BaseException:
        free(block)
        raise
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
    rt.count(rt.STREAMS_CNT_DLPACK_INCREF)
    Py_INCREF(buf)
    block.managed.manager_ctx = <void*>buf
    block.managed.deleter = _dlpack_deleter
    return PyCapsule_New(<void*>block, b"dltensor", _dlpack_capsule_destructor)


cdef cudaStream_t _dlpack_consumer(object stream, str argname) except? <cudaStream_t>-1:
    """The stream a DLPack/CAI ``stream`` argument names (1 legacy, 2 per-thread)."""
    if isinstance(stream, Stream):
        return <cudaStream_t>(<Stream>stream)._handle
    if stream is None:
        return cudaStreamLegacy
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"{argname} must be None, an int stream handle or a Stream, not "
                        f"{type(stream).__name__}")
    if stream == 0:
        raise ValueError(f"{argname}=0 is ambiguous (use 1 for the legacy default stream "
                         "or 2 for the per-thread one)")
    return <cudaStream_t>as_pointer_int(stream, argname)


# ---- resolving memory arguments ---------------------------------------------------------

cdef void* _known_address(uintptr_t value, int flags, str argname) except? NULL:
    """A raw address, accepted only where CUDA knows the memory.

    An address CUDA does not know is pageable host memory to it: a copy
    would read it with a plain memcpy and a kernel would fault the context.
    Host memory must come as an object with the buffer protocol instead.
    """
    cdef cudaPointerAttributes attrs
    cdef void* p = <void*>value
    cdef int err
    with nogil:
        err = rt.pointer_get_attributes(&attrs, p)
    if err != 0:
        raise ValueError(f"{argname}=0x{value:x}: CUDA cannot describe this address "
                         f"({rt.error_name(err)})")
    if attrs.type == cudaMemoryTypeUnregistered:
        raise ValueError(f"{argname}=0x{value:x} is not memory CUDA knows (device, managed or "
                         "pinned); pass host memory as an object with the buffer protocol "
                         "(numpy array, bytearray) instead of a raw address")
    if flags & SPAN_DEVICE and attrs.type == cudaMemoryTypeHost and attrs.devicePointer == NULL:
        raise ValueError(f"{argname}=0x{value:x} is pinned host memory the device cannot "
                         "address")
    return p


cdef int _order_after(Stream consumer, uintptr_t producer) except -1:
    """Make ``consumer`` wait for the work now on stream handle ``producer``."""
    cdef cudaStream_t theirs
    if consumer is None or producer == 0:
        return 0
    theirs = <cudaStream_t>producer
    if theirs == <cudaStream_t>consumer._handle:
        return 0
    consumer._use()
    try:
        with nogil:
            rt.stream_wait_stream(<cudaStream_t>consumer._handle, theirs, consumer.c_device())
    finally:
        consumer._unuse()
    return 0


cdef int _cai_span(object cai, Span* span, int flags, Stream consumer, str argname) except -1:
    if not isinstance(cai, dict):
        raise TypeError(f"{argname}.__cuda_array_interface__ must be a dict, not "
                        f"{type(cai).__name__}")
    try:
        data = cai["data"]
        shape = tuple(cai["shape"])
        typestr = cai["typestr"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{argname}.__cuda_array_interface__ lacks {exc}") from None
    if (not isinstance(data, tuple) or len(data) != 2 or isinstance(data[0], bool)
            or not isinstance(data[0], int)):
        raise ValueError(f"{argname}.__cuda_array_interface__['data'] must be (int, bool), "
                         f"got {data!r}")
    if not isinstance(typestr, str) or len(typestr) < 3 or not typestr[2:].isdigit():
        raise ValueError(f"{argname}.__cuda_array_interface__['typestr'] is not a typestr: "
                         f"{typestr!r}")
    if flags & SPAN_WRITABLE and data[1]:
        raise ValueError(f"{argname} is read-only")
    itemsize = int(typestr[2:])
    count = 1
    for extent in shape:
        if isinstance(extent, bool) or not isinstance(extent, int) or extent < 0:
            raise ValueError(f"{argname}.__cuda_array_interface__['shape'] is not a shape: "
                             f"{shape!r}")
        count *= extent
    strides = cai.get("strides")
    if strides is not None and count > 1:
        expected = []
        step = itemsize
        for extent in reversed(shape):
            expected.append(step)
            step *= extent
        if tuple(strides) != tuple(reversed(expected)):
            raise ValueError(f"{argname} must be C-contiguous (its strides are {strides!r})")
    span.ptr = <void*>as_pointer_int(data[0], argname)
    span.nbytes = <size_t>(count * itemsize)
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    if stream is not None and consumer is not None:
        if isinstance(stream, bool) or not isinstance(stream, int) or stream == 0:
            raise ValueError(f"{argname}.__cuda_array_interface__['stream'] must be None or a "
                             f"nonzero stream handle, got {stream!r}")
        _order_after(consumer, as_pointer_int(stream, argname))
    return 0


cdef int _dlpack_span(object obj, tuple dev, Span* span, int flags, Stream consumer,
                      str argname) except -1:
    cdef DLTensor* t
    cdef DLManagedTensorVersioned* v
    cdef int64_t count = 1
    cdef int i
    kind = dev[0]
    if kind == _kDLCUDA or kind == _kDLCUDAManaged:
        capsule = obj.__dlpack__(stream=(1 if consumer is None or consumer._handle == NULL
                                         else <uintptr_t>consumer._handle))
    elif kind == _kDLCUDAHost:
        capsule = obj.__dlpack__()
    else:
        raise TypeError(f"{argname} is {_DEVICE_NAMES.get(kind, f'device type {kind}')} "
                        "memory (DLPack); this needs device, managed or pinned memory")
    if PyCapsule_IsValid(capsule, b"dltensor"):
        t = &(<DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")).dl_tensor
    elif PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        v = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if flags & SPAN_WRITABLE and v.flags & _DLPACK_FLAG_READ_ONLY:
            raise ValueError(f"{argname} is read-only")
        t = &v.dl_tensor
    else:
        raise TypeError(f"{argname}.__dlpack__() returned no DLPack capsule")
    for i in range(t.ndim):
        count *= t.shape[i]
    if t.strides != NULL and count > 1:
        step = 1
        for i in range(t.ndim - 1, -1, -1):
            if t.shape[i] != 1 and t.strides[i] != step:
                raise ValueError(f"{argname} must be C-contiguous")
            step *= t.shape[i]
    span.ptr = <void*>(<uintptr_t>t.data + t.byte_offset)
    span.nbytes = <size_t>(count * ((t.dtype.bits * t.dtype.lanes + 7) // 8))
    # The capsule goes now (its destructor gives the producer's reference
    # back); the memory stays with `obj`, which the caller holds.
    return 0


cdef int resolve_span(object obj, Span* span, int flags, Stream consumer,
                      str argname) except -1:
    span.has_view = False
    span.user = NULL
    span.nbytes = <size_t>-1
    if obj is None or (flags & SPAN_NULL_OK and type(obj) is int and obj == 0):
        if flags & SPAN_NULL_OK:
            span.ptr = NULL
            return 0
        raise TypeError(f"{argname} must be memory (a streams buffer, an array with "
                        "__cuda_array_interface__ or __dlpack__, or an int address), not None")
    if isinstance(obj, _Buffer):
        if flags & SPAN_DEVICE and not isinstance(obj, (DeviceBuffer, ManagedBuffer,
                                                        PinnedBuffer)):
            raise TypeError(f"{argname}: {type(obj).__name__} is not device memory")
        (<_Buffer>obj)._use()
        Py_INCREF(obj)      # a user holds the object too, not only its memory
        span.user = <void*>obj
        span.ptr = (<_Buffer>obj)._ptr
        span.nbytes = (<_Buffer>obj)._nbytes
        return 0
    if isinstance(obj, int) and not isinstance(obj, bool):
        if obj == 0:
            raise ValueError(f"{argname} is a NULL address")
        span.ptr = _known_address(as_pointer_int(obj, argname), flags, argname)
        return 0
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _cai_span(cai, span, flags, consumer, argname)
    dev_fn = getattr(obj, "__dlpack_device__", None)
    if dev_fn is not None and hasattr(obj, "__dlpack__"):
        dev = tuple(dev_fn())
        if not (dev[0] == _kDLCPU and flags & SPAN_HOST_OK):
            return _dlpack_span(obj, dev, span, flags, consumer, argname)
    if flags & SPAN_HOST_OK:
        try:
            PyObject_GetBuffer(obj, &span.view, PyBUF_C_CONTIGUOUS |
                               (PyBUF_WRITABLE if flags & SPAN_WRITABLE else PyBUF_SIMPLE))
        except (TypeError, BufferError) as exc:
            raise TypeError(f"{argname} must be a streams buffer, an object with "
                            f"__cuda_array_interface__ or __dlpack__, a C-contiguous"
                            f"{' writable' if flags & SPAN_WRITABLE else ''} host buffer "
                            f"(numpy array, bytearray) or an int address; "
                            f"{type(obj).__name__}: {exc}") from None
        span.has_view = True
        span.ptr = span.view.buf
        span.nbytes = <size_t>span.view.len
        return 0
    raise TypeError(f"{argname} must be a pointer to "
                    f"{'device' if flags & SPAN_DEVICE else 'CUDA'} memory: a streams buffer, "
                    f"an object with __cuda_array_interface__ or __dlpack__, or an int "
                    f"address, not {type(obj).__name__}")


cdef void release_span(Span* span) noexcept:
    cdef _Buffer buf
    if span.has_view:
        PyBuffer_Release(&span.view)
        span.has_view = False
    if span.user != NULL:
        buf = <_Buffer>span.user
        span.user = NULL
        buf._unuse()
        Py_DECREF(buf)


@cython.final
cdef class _MemoryHold:
    cdef _Buffer buffer

    def __dealloc__(self):
        if self.buffer is not None:
            self.buffer._unuse()


cdef object hold_memory(object obj):
    cdef _MemoryHold hold
    if not isinstance(obj, _Buffer):
        return obj
    (<_Buffer>obj)._use()
    hold = _MemoryHold.__new__(_MemoryHold)
    hold.buffer = <_Buffer>obj
    return hold


def _address_of(obj, argname="ptr"):
    """The device-visible address of memory-like ``obj`` (a streams buffer, an
    array, or an int CUDA knows), for APIs that take an address."""
    cdef Span span
    resolve_span(obj, &span, 0, None, argname)
    release_span(&span)
    return <uintptr_t>span.ptr


# ---- buffers ------------------------------------------------------------------------------

cdef class _Buffer(HandleOwner):
    """Common base of the memory classes: a pointer, a size, a device.

    Users of the memory (calls in flight in other threads, DLPack
    consumers) hold it: ``close()`` marks it closed at once, and the memory
    is freed when the last user lets go.
    """

    def __cinit__(self, *args, **kwargs):
        self._ptr = NULL
        self._nbytes = 0
        self._device = -1

    cdef void _adopt(self, void* ptr, size_t nbytes) noexcept:
        self._ptr = ptr
        self._nbytes = nbytes
        rt.count(rt.STREAMS_CNT_BUFFER_CREATED)
        self._opened(True)

    # Freeing takes the GIL: a device free is ordered after the work of a
    # stream object, and may be queued for a thread that can call CUDA.
    cdef int _destroy(self) except -1 nogil:
        with gil:
            self._release_memory()
        return 0

    cdef void _release(self) noexcept nogil:
        with gil:
            self._release_memory()

    cdef void _release_memory(self) noexcept:
        pass

    @property
    def ptr(self):
        """The address as an int."""
        self._check_open()
        return <uintptr_t>self._ptr

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def size(self):
        return self._nbytes

    @property
    def device_id(self):
        return self._device

    def __len__(self):
        return self._nbytes

    def close(self):
        """Free the memory (after any user still holding it).  Idempotent."""
        if self._views and not streams_is_closed(&self._state):
            raise BufferError(f"cannot close a {type(self).__name__} while {self._views} "
                              "buffer view(s) (e.g. numpy arrays) still use it")
        self._close_handle()

    def __repr__(self):
        if self.closed:
            return f"<streams.{type(self).__name__} (closed)>"
        return (f"<streams.{type(self).__name__} ptr=0x{<uintptr_t>self._ptr:x} "
                f"nbytes={self._nbytes} device={self._device}>")


@cython.final
cdef class _PendingFree:
    """A device allocation whose free waits for a thread that may call CUDA."""
    cdef void* ptr
    cdef int device
    cdef Stream stream
    cdef Stream free_on


cdef void _free_device_memory(void* ptr, int device, Stream stream, Stream free_on) noexcept:
    # The free is ordered after the work of the stream it belongs to.  That
    # stream may have been closed since: then after the event its close()
    # recorded, on the legacy stream of the buffer's device.
    cdef DeviceScope scope
    cdef cudaStream_t on
    cdef Stream order = free_on if free_on is not None else stream
    cdef cudaEvent_t tail = NULL
    try:
        if order.closed:
            on = cudaStreamLegacy
            if order._tail is not None:
                tail = <cudaEvent_t>order._tail._handle
        else:
            on = <cudaStream_t>order._handle
        with nogil:
            enter_device(&scope, device)
            try:
                if tail != NULL:
                    rt.stream_wait_event(on, tail, 0)
                rt.free_async(ptr, on)
            finally:
                exit_device(&scope)
    except BaseException:
        PyErr_WriteUnraisable(stream)
    for s in (stream, free_on):
        if s is not None:
            (<Stream>s)._dependents -= 1
            if (<Stream>s)._dependents == 0 and s.closed:
                (<Stream>s)._tail = None


cdef void _free_pending(void* arg, int kind) noexcept nogil:
    with gil:
        p = <_PendingFree>arg
        _free_device_memory(p.ptr, p.device, p.stream, p.free_on)


@cython.final
cdef class DeviceBuffer(_Buffer):
    """Device memory from ``cudaMallocAsync`` on ``stream`` (default: current).

    Freed in stream order (``cudaFreeAsync`` on the same stream) by
    ``close()`` or garbage collection, also after that stream was closed.
    Exposes ``__cuda_array_interface__`` (v3, with its stream) and DLPack,
    as a 1-D uint8 array; a DLPack consumer keeps the memory alive.  Using
    it on another stream than its own is ordered by the caller
    (``wait_stream``), as for any stream-ordered allocation.
    """

    def __init__(self, nbytes, stream=None):
        cdef size_t n = as_nbytes(nbytes, "nbytes")
        cdef Stream s = as_stream(stream, "stream")
        cdef void* p = NULL
        cdef DeviceScope scope
        cdef int dev
        self._init_once()
        rt.drain_deferred()
        s._use()
        try:
            dev = s._device if s._device >= 0 else current_device()
            if n:
                with nogil:
                    enter_device(&scope, dev)
                    try:
                        rt.malloc_async(&p, n, <cudaStream_t>s._handle)
                    finally:
                        exit_device(&scope)
        finally:
            s._unuse()
        self._device = dev
        self._stream = s
        s._dependents += 1
        self._adopt(p, n)

    def __dealloc__(self):
        # Here, not in the base class: by the time a base __dealloc__ runs,
        # Cython has already cleared this class's fields (the stream).
        if streams_close_begin(&self._state) == 1:
            self._release_memory()

    @property
    def stream(self):
        return self._stream

    def close(self, stream=None):
        """Free in order on ``stream`` (default: the allocation's stream).  Idempotent.

        DLPack consumers still holding the memory keep it until they let go.
        """
        if stream is not None and not self.closed and self._free_on is None:
            # Ordered after that stream's work, also if it is closed before
            # the free runs (a consumer may still hold the memory).
            self._free_on = as_stream(stream, "stream")
            self._free_on._dependents += 1
        _Buffer.close(self)

    cdef void _release_memory(self) noexcept:
        cdef _PendingFree pending
        rt.count(rt.STREAMS_CNT_BUFFER_FREED)
        if self._ptr == NULL:
            self._stream._dependents -= 1
            if self._free_on is not None:
                self._free_on._dependents -= 1
            return
        if rt.may_release():
            _free_device_memory(self._ptr, self._device, self._stream, self._free_on)
        elif rt.may_defer():
            pending = _PendingFree.__new__(_PendingFree)
            pending.ptr, pending.device = self._ptr, self._device
            pending.stream, pending.free_on = self._stream, self._free_on
            rt.defer_release(_free_pending, <void*>pending, pending)
        self._ptr = NULL

    cdef uintptr_t _order_handle(self) except? 0:
        """The stream a consumer must order after: ours, or, once ours is
        closed, the legacy stream made to wait for where its work ended."""
        cdef Stream s = self._stream
        cdef DeviceScope scope
        cdef cudaEvent_t tail
        if not s.closed:
            return 1 if s._handle == NULL else <uintptr_t>s._handle
        if s._tail is not None:
            tail = <cudaEvent_t>s._tail._handle
            with nogil:
                enter_device(&scope, self._device)
                try:
                    rt.stream_wait_event(cudaStreamLegacy, tail, 0)
                finally:
                    exit_device(&scope)
        return 1

    @property
    def __cuda_array_interface__(self):
        self._check_open()
        return {"shape": (self._nbytes,), "typestr": "|u1", "descr": [("", "|u1")],
                "data": (<uintptr_t>self._ptr, False), "strides": None,
                "version": 3, "stream": self._order_handle()}

    def __dlpack_device__(self):
        return (_kDLCUDA, self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule; the consumer's ``stream`` waits for ours."""
        cdef cudaStream_t consumer
        cdef uintptr_t ours
        cdef DeviceScope scope
        self._check_open()
        if copy:
            raise BufferError("DeviceBuffer.__dlpack__ cannot copy")
        if dl_device is not None and tuple(dl_device) != (_kDLCUDA, self._device):
            raise BufferError(f"cannot export to device {dl_device}")
        if stream != -1:
            consumer = _dlpack_consumer(stream, "stream")
            ours = self._order_handle()
            if <cudaStream_t>ours != consumer:
                with nogil:
                    enter_device(&scope, self._device)
                    try:
                        rt.stream_wait_stream(consumer, <cudaStream_t>ours, self._device)
                    finally:
                        exit_device(&scope)
        return _export_dlpack(self, _kDLCUDA)


cdef class _HostBuffer(_Buffer):
    """Host memory with the buffer protocol (numpy.asarray works, no copy)."""

    def __getbuffer__(self, Py_buffer* view, int flags):
        self._check_open()
        view.buf = self._ptr
        view.obj = self
        view.len = self._nbytes
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = NULL
        if flags & PyBUF_ND:
            view.shape = <Py_ssize_t*>&view.len
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self._views += 1

    def __releasebuffer__(self, Py_buffer* view):
        self._views -= 1

    cdef void _release_memory(self) noexcept:
        rt.count(rt.STREAMS_CNT_BUFFER_FREED)
        if self._ptr != NULL:
            rt.release_handle(self._kind, self._ptr)
            self._ptr = NULL

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (host memory: no stream ordering)."""
        self._check_open()
        if copy:
            raise BufferError(f"{type(self).__name__}.__dlpack__ cannot copy")
        if dl_device is not None and tuple(dl_device) != tuple(self.__dlpack_device__()):
            raise BufferError(f"cannot export to device {dl_device}")
        return _export_dlpack(self, self.__dlpack_device__()[0])


@cython.final
cdef class PinnedBuffer(_HostBuffer):
    """Page-locked host memory (``cudaHostAlloc``): fast, truly async copies,
    and addressable from kernels."""

    def __init__(self, nbytes):
        cdef size_t n = as_nbytes(nbytes, "nbytes")
        cdef void* p = NULL
        self._init_once()
        current_device()
        rt.drain_deferred()
        if n:
            with nogil:
                rt.host_alloc(&p, n)
        self._kind = rt.HANDLE_HOST_MEMORY
        self._adopt(p, n)

    def __dlpack_device__(self):
        return (_kDLCUDAHost, 0)



@cython.final
cdef class ManagedBuffer(_HostBuffer):
    """Managed (unified) memory from ``cudaMallocManaged``: host and device see it.

    ``stream`` is the stream the memory is used on: its
    ``__cuda_array_interface__`` names it, so that consumers wait for the
    work there (default: the legacy stream, which orders after every
    blocking stream of the device).
    """

    def __init__(self, nbytes, *, attach="global", stream=None):
        cdef size_t n = as_nbytes(nbytes, "nbytes")
        cdef void* p = NULL
        cdef unsigned int flags
        self._init_once()
        if attach == "global":
            flags = cudaMemAttachGlobal
        elif attach == "host":
            flags = cudaMemAttachHost
        else:
            raise ValueError(f"attach must be 'global' or 'host', got {attach!r}")
        self._stream = Stream.legacy if stream is None else as_stream(stream, "stream")
        self._device = current_device()
        rt.drain_deferred()
        if n:
            with nogil:
                rt.malloc_managed(&p, n, flags)
        self._kind = rt.HANDLE_MANAGED_MEMORY
        self._adopt(p, n)

    @property
    def stream(self):
        return self._stream

    @property
    def __cuda_array_interface__(self):
        self._check_open()
        h = <uintptr_t>self._stream._handle
        return {"shape": (self._nbytes,), "typestr": "|u1", "descr": [("", "|u1")],
                "data": (<uintptr_t>self._ptr, False), "strides": None,
                "version": 3, "stream": 1 if h == 0 else h}

    def __dlpack_device__(self):
        return (_kDLCUDAManaged, self._device)



# ---- copies and sets ------------------------------------------------------------------------

cdef int _check_fits(size_t n, Span* span, str argname) except -1:
    if span.nbytes != <size_t>-1 and n > span.nbytes:
        raise ValueError(f"nbytes={n} is more than {argname} holds ({span.nbytes})")
    return 0


cdef size_t _span_length(object nbytes, Span* span, str argname) except? 0:
    """``nbytes``, which must fit in ``span``, or all of it when None."""
    cdef size_t n
    if nbytes is None:
        if span.nbytes == <size_t>-1:
            raise ValueError(f"nbytes is required when {argname} is a raw address")
        return span.nbytes
    n = as_nbytes(nbytes, "nbytes")
    _check_fits(n, span, argname)
    return n


cdef int _buffer_device(Span* span) noexcept:
    """The device of a streams DeviceBuffer, -1 for any other memory."""
    if span.user != NULL and isinstance(<object>span.user, DeviceBuffer):
        return (<_Buffer>span.user)._device
    return -1


cdef int _peer_device(object device, Span* span, str argname) except -1:
    """The device a peer copy names for one side: ``device``, which must be
    the buffer's own for a DeviceBuffer, or, when None, that buffer's."""
    cdef int known = _buffer_device(span)
    cdef int dev
    if device is None:
        if known < 0:
            raise ValueError(f"{argname}_device is required: {argname} is not a DeviceBuffer")
        return known
    dev = resolve_device(device, argname + "_device")
    if known >= 0 and dev != known:
        raise ValueError(f"{argname}_device={dev}, but {argname} is a DeviceBuffer of "
                         f"device {known}")
    return dev


cdef int _memcpy(object dst, object src, object nbytes, object stream, bint peer,
                 object dst_device, object src_device) except -1:
    """memcpy_async, or with ``peer`` memcpy_peer_async.  The copy is
    enqueued with the stream's device current (CUDA copies stream-ordered
    memory only with its device current)."""
    cdef Span d, s
    cdef size_t n
    cdef int dd, sd
    cdef int kinds = SPAN_DEVICE if peer else SPAN_HOST_OK
    cdef Stream st = as_stream(stream, "stream")
    cdef DeviceScope scope
    d.user = NULL
    d.has_view = False
    s.user = NULL
    s.has_view = False
    try:
        resolve_span(dst, &d, SPAN_WRITABLE | kinds, st, "dst")
        resolve_span(src, &s, kinds, st, "src")
        if peer:
            dd = _peer_device(dst_device, &d, "dst")
            sd = _peer_device(src_device, &s, "src")
        else:
            dd = _buffer_device(&d)
            sd = _buffer_device(&s)
            peer = dd >= 0 and sd >= 0 and dd != sd
        n = _span_length(nbytes, &s, "src")
        _check_fits(n, &d, "dst")
        st._use()
        try:
            with nogil:
                # -1 for the special streams: they belong to the current device.
                enter_device(&scope, st._device)
                try:
                    if peer:
                        rt.memcpy_peer_async(d.ptr, dd, s.ptr, sd, n, <cudaStream_t>st._handle)
                    else:
                        rt.memcpy_async(d.ptr, s.ptr, n, <cudaStream_t>st._handle)
                finally:
                    exit_device(&scope)
        finally:
            st._unuse()
    finally:
        release_span(&s)
        release_span(&d)
    return 0


def memcpy_async(dst, src, nbytes=None, stream=None):
    """Copy ``nbytes`` (default: all of ``src``) from ``src`` to ``dst`` in stream order.

    Either side may be device, pinned, managed or ordinary (pageable) host
    memory; foreign arrays are ordered after the stream their
    ``__cuda_array_interface__`` names.  Copies from or to pageable memory
    return only once CUDA has staged them, so they are not truly
    asynchronous; use PinnedBuffer for overlap.  The caller keeps both sides
    alive until the stream passes the copy.

    The copy is made with the stream's device current.  Between two
    :class:`DeviceBuffer` of different devices it is a peer copy
    (``cudaMemcpyPeerAsync``: CUDA cannot copy stream-ordered memory across
    devices otherwise); for other memory of two devices, see
    :func:`memcpy_peer_async`.
    """
    _memcpy(dst, src, nbytes, stream, False, None, None)


def memcpy_peer_async(dst, dst_device, src, src_device, nbytes=None, stream=None):
    """Copy ``nbytes`` (default: all of ``src``) from ``src`` on device
    ``src_device`` to ``dst`` on device ``dst_device``, in stream order
    (``cudaMemcpyPeerAsync``, with the stream's device current).

    Both sides are device memory.  A device argument may be None for a
    :class:`DeviceBuffer` (its own device) and must otherwise match it.
    Works without :func:`enable_peer_access` (CUDA then stages the copy),
    and for stream-ordered memory, which peer access does not reach.  The
    copy is ordered on ``stream`` only: work on other devices that uses
    either side is ordered by the caller (``wait_stream``, events).
    """
    _memcpy(dst, src, nbytes, stream, True, dst_device, src_device)


def memset_async(dst, value, nbytes=None, stream=None):
    """Set ``nbytes`` bytes (default: all of ``dst``) to ``value`` (0-255) in
    stream order, with the stream's device current."""
    cdef Span d
    cdef size_t n
    cdef int v = as_int(value, "value")
    cdef Stream st = as_stream(stream, "stream")
    cdef DeviceScope scope
    if v < 0 or v > 255:
        raise ValueError(f"value must be a byte (0-255), got {v}")
    d.user = NULL
    d.has_view = False
    try:
        resolve_span(dst, &d, SPAN_WRITABLE | SPAN_HOST_OK, st, "dst")
        n = _span_length(nbytes, &d, "dst")
        st._use()
        try:
            with nogil:
                enter_device(&scope, st._device)
                try:
                    rt.memset_async(d.ptr, v, n, <cudaStream_t>st._handle)
                finally:
                    exit_device(&scope)
        finally:
            st._unuse()
    finally:
        release_span(&d)
