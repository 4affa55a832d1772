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
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_ND, PyBUF_SIMPLE, \
    PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_WriteUnraisable
from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, \
    PyCapsule_New
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from posix.unistd cimport close as close_fd

cimport streams._cudart as rt
cimport streams._nvtx as nvtx
from streams._args cimport as_bool, as_int, as_nbytes, as_pointer_int
from streams._device cimport (DeviceScope, current_device, enter_device, exit_device,
                              resolve_device)
from streams._foreign cimport (STREAM_LEGACY, STREAM_NULL, STREAM_PER_THREAD, cai_stream,
                               dlpack_stream_arg, framework_array_stream)
from streams._handle cimport HandleOwner, keep_in_use
from streams._platform cimport (streams_close_begin, streams_flag_get, streams_is_closed,
                                streams_use_begin)
from streams._stream cimport (Event, Stream, as_stream, drop_dependent, note_dependent,
                              settle_dependent, stream_tail, wait_until_done)
from streams.cudart cimport *

import operator as _operator

from streams._cudart import CudaError as rt_CudaError

# streams.nvtx.trace_calls: the switch of the ranges around this module's
# traced operations (one load and one branch while off;
# tests/nvtx/test_nvtx_cpu.py, the per-call ranges).
cdef const int* _tracing = nvtx.trace_switch()
# streams.checker: the race checker's switch (one load and one branch while
# off); its hooks run after the operation was enqueued.
cdef const int* _checking = nvtx.check_switch()


cdef object _checked(list items, Span* span, size_t n, bint write, str op):
    # One access for the race checker: only streams buffers are tracked.
    if span.user != NULL:
        items.append((<uintptr_t>span.ptr, n, write, op))
    return items


cdef void _check_free(void* ptr, Stream st) noexcept:
    # A free in stream order on `st` (closed: on the legacy stream after its
    # tail; None: on the host).  Never raises (noexcept): it runs from
    # __dealloc__ too; the checker keeps a free's race and never raises it,
    # and any other error goes to sys.unraisablehook.
    nvtx.check_hooks().free(<uintptr_t>ptr, st, st is not None and st.closed)


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


cdef str _capture_advice = (
    "make the array's producer part of the capture (its stream captured too, or waited for "
    "inside it), make the array before the capture begins and synchronize, or pass "
    "wait_producers=False if you order it yourself")


cdef int _capture_of_handle(uintptr_t h, unsigned long long* cid) except -1:
    """The capture status of stream handle ``h`` and its capture id; the
    legacy stream (0, 1) is never captured (and asking about it during
    another stream's capture is itself an error)."""
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef cudaGraph_t g = NULL
    cdef const cudaGraphNode_t* deps = NULL
    cdef const cudaGraphEdgeData* edges = NULL
    cdef size_t n = 0
    cid[0] = 0
    if h == STREAM_NULL or h == STREAM_LEGACY:
        return cudaStreamCaptureStatusNone
    with nogil:
        rt.stream_get_capture_info(<cudaStream_t>h, &status, cid, &g, &deps, &edges, &n)
    return status


cdef int _capture_of(Stream consumer, unsigned long long* cid) except -1:
    """The capture status of ``consumer`` (held in use by the caller), and
    its capture id."""
    return _capture_of_handle(<uintptr_t>consumer._handle, cid)


# ---- ordering a consumer after a producer's stream ------------------------------------
# One rule for every path that makes a consuming stream wait for the stream
# an array's producer works on (_order_after: the stream an array interface
# names, PyTorch's current stream; DeviceBuffer.__dlpack__(stream=): the
# buffer's stream for the consumer's), decided by where both streams stand
# (docs/safety.rst, "A capture is never broken by a foreign array"):
#   * the consumer is being captured: a producer in the same capture is
#     waited for (a captured dependency); any other is refused before
#     anything is enqueued (the wait would invalidate the capture);
#   * the consumer is not being captured and the producer is: nothing is
#     waited for.  What a capturing stream has "queued" since its capture
#     began is a graph being built, not work that will run, and a wait on it
#     would fork the consumer into that capture, which then fails at its end
#     (cudaErrorStreamCaptureUnjoined) while the consumer's own work goes
#     into someone else's graph.  (Work queued on the producer before its
#     capture began cannot be told apart then: the capture's owner orders
#     it, as torch.cuda.graph does by synchronizing before it captures.)
#   * neither is being captured: the consumer waits.
# The GPU tests of tests/foreign/test_arrays_capture_gpu.py show each case.
cdef enum _Order:
    _ORDER_SKIP = 0         # nothing to wait for
    _ORDER_WAIT = 1         # wait
    _ORDER_REFUSE = 2       # the consumer's capture would break


cdef int _order_decision(uintptr_t consumer, uintptr_t producer) except -1:
    cdef unsigned long long cid = 0, theirs = 0
    cdef int mine_status = _capture_of_handle(consumer, &cid)
    cdef int their_status
    if mine_status == cudaStreamCaptureStatusInvalidated:
        return _ORDER_SKIP      # the enqueue that follows reports it
    their_status = _capture_of_handle(producer, &theirs)
    if mine_status == cudaStreamCaptureStatusActive:
        if their_status == cudaStreamCaptureStatusActive and theirs == cid:
            return _ORDER_WAIT
        return _ORDER_REFUSE
    if their_status != cudaStreamCaptureStatusNone:
        return _ORDER_SKIP
    return _ORDER_WAIT


cdef int _order_after(Stream consumer, uintptr_t producer, str argname, str source) except -1:
    """Make ``consumer`` wait for the work now on stream handle ``producer``
    (0 and 1: the legacy stream), which ``source`` named for ``argname``,
    by the rule above."""
    cdef uintptr_t mine
    cdef int decision
    if consumer is None:
        return 0
    mine = <uintptr_t>consumer._handle
    if producer == STREAM_NULL:
        producer = STREAM_LEGACY
    if mine == STREAM_NULL:
        mine = STREAM_LEGACY
    if producer == mine:
        return 0
    consumer._use()
    try:
        decision = _order_decision(mine, producer)
        if decision == _ORDER_REFUSE:
            what = (" (the legacy default stream)" if producer == STREAM_LEGACY else
                    " (the per-thread default stream)" if producer == STREAM_PER_THREAD else "")
            raise RuntimeError(
                f"{argname}: {source} is stream 0x{producer:x}{what}, which is not part of "
                f"the capture on stream 0x{mine:x}; waiting for it there would invalidate "
                f"the capture (nothing was enqueued): {_capture_advice}")
        if decision == _ORDER_WAIT:
            with nogil:
                rt.stream_wait_stream(<cudaStream_t>consumer._handle, <cudaStream_t>producer,
                                      consumer.c_device())
    finally:
        consumer._unuse()
    return 0


cdef int _cai_span(object obj, object cai, Span* span, int flags, Stream consumer,
                   str argname) except -1:
    cdef uintptr_t producer = 0
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
    if consumer is None or flags & SPAN_NO_WAIT:
        return 0
    # The producer's stream: the one the interface names (version 3), else
    # the framework's current stream where streams knows it (PyTorch, whose
    # interface is version 2), else the one DLPack orders, where offered.
    version = cai.get("version", 0)
    if isinstance(version, int) and version >= 3 and "stream" in cai:
        if cai_stream(cai["stream"], f"{argname}.__cuda_array_interface__['stream']",
                      &producer):
            _order_after(consumer, producer, argname,
                         "the stream its __cuda_array_interface__ names")
        return 0
    if framework_array_stream(obj, &producer):
        _order_after(consumer, producer, argname, "PyTorch's current stream (its producer's)")
        return 0
    dev_fn = getattr(obj, "__dlpack_device__", None)
    if dev_fn is not None and hasattr(obj, "__dlpack__"):
        dev = tuple(dev_fn())
        if dev[0] == _kDLCUDA or dev[0] == _kDLCUDAManaged:
            return _dlpack_span(obj, dev, span, flags, consumer, argname)
    return 0


cdef int _dlpack_span(object obj, tuple dev, Span* span, int flags, Stream consumer,
                      str argname) except -1:
    cdef DLTensor* t
    cdef DLManagedTensorVersioned* v
    cdef int64_t count = 1
    cdef int i
    cdef unsigned long long cid = 0
    cdef int status
    kind = dev[0]
    if kind == _kDLCUDA or kind == _kDLCUDAManaged:
        if flags & SPAN_NO_WAIT:
            capsule = obj.__dlpack__(stream=-1)     # DLPack's "no synchronization"
        elif consumer is None or consumer._handle == NULL:
            capsule = obj.__dlpack__(stream=1)
        else:
            consumer._use()
            try:
                status = _capture_of(consumer, &cid)
            finally:
                consumer._unuse()
            if status == cudaStreamCaptureStatusActive:
                # The producer would make the capturing stream wait for its
                # own stream, which streams cannot see: if that one is not
                # captured, the capture would be invalidated.
                raise RuntimeError(
                    f"{argname}: its DLPack producer would order it after a stream streams "
                    f"cannot see, from inside the capture on stream "
                    f"0x{<uintptr_t>consumer._handle:x}, which invalidates the capture if "
                    f"that stream is not captured too (nothing was enqueued): "
                    f"{_capture_advice}")
            capsule = obj.__dlpack__(stream=<uintptr_t>consumer._handle)
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
        return _cai_span(obj, cai, span, flags, consumer, argname)
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


cdef object keep_memory(object obj):
    if not isinstance(obj, _Buffer):
        return obj
    return keep_in_use(<_Buffer>obj)


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
        # The look at the views and the mark closed in one critical section,
        # which __getbuffer__ takes too: no view is handed out between them
        # (free-threaded CPython; the GIL elsewhere).  The release that may
        # follow the mark runs detached, which ends the section: by then
        # every new view is refused.
        cdef int views
        with cython.critical_section(self):
            views = 0 if streams_is_closed(&self._state) else self._views
            if not views:
                self._close_handle()
        if views:
            raise BufferError(f"cannot close a {type(self).__name__} while {views} "
                              "buffer view(s) (e.g. numpy arrays) still use it")

    def __repr__(self):
        if self.closed:
            return f"<streams.{type(self).__name__} (closed)>"
        return (f"<streams.{type(self).__name__} ptr=0x{<uintptr_t>self._ptr:x} "
                f"nbytes={self._nbytes} device={self._device}>")


@cython.final
@cython.no_gc_clear
cdef class _PendingFree:
    """A device allocation whose free waits for a thread that may call CUDA."""
    # no_gc_clear: the deferred free reads the streams.
    cdef void* ptr
    cdef int device
    cdef Stream stream
    cdef Stream free_on
    cdef object pool


cdef bint _try_use(HandleOwner owner) noexcept nogil:
    """A counted use of ``owner`` if it is open (end it with ``_unuse``);
    False, and no use, if it is closed."""
    if streams_use_begin(&owner._state) == 0:
        return True
    owner._unuse()      # backs out; the last user of a closed owner releases it
    return False


cdef void _free_device_memory(void* ptr, int device, Stream stream, Stream free_on,
                              object pool) noexcept:
    # Frees `ptr` (NULL: nothing to free, or nothing may be freed here) and
    # ends what the buffer held: its count on its stream, the use of the
    # stream close(stream=...) named, the use of its pool.
    #
    # The free is ordered after the work of the stream it belongs to:
    # `free_on`, held in use since close(stream=free_on), so its handle is
    # alive even if it was closed since; else the allocation's stream, used
    # (counted) across the call if it is open, so that a close() in another
    # thread cannot destroy it under the call.  A closed allocation stream:
    # on the legacy stream of the buffer's device, after the event its
    # close() recorded.
    cdef DeviceScope scope
    cdef cudaStream_t on = cudaStreamLegacy
    cdef cudaEvent_t tail = NULL
    cdef Event tail_event = None    # keeps the tail alive while it is waited for
    cdef bint stream_used = False
    cdef void* frees = NULL
    cdef int injected = 0
    cdef bint capturing = False
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef _PendingFree pending
    try:
        if ptr != NULL:
            if free_on is not None:
                on = <cudaStream_t>free_on._handle
            elif stream is not None and _try_use(stream):
                stream_used = True
                on = <cudaStream_t>stream._handle
            elif stream is not None:
                tail_event = stream_tail(stream)
                if tail_event is not None:
                    tail = <cudaEvent_t>tail_event._handle
            if pool is not None:
                frees = (<MemoryPool>pool)._frees
            with nogil:
                enter_device(&scope, device)
                try:
                    # Relaxed: another thread's global capture would refuse
                    # the free (and be invalidated by the refusal).
                    rt.thread_exchange_capture_mode(&mode)
                    try:
                        capturing = rt.stream_in_capture(on)
                        if not capturing:
                            if tail != NULL:
                                rt.stream_wait_event(on, tail, 0)
                            rt.free_async(ptr, on)
                            injected = rt.injected_failure(rt.CLEANUP_DEVICE_MEMORY)
                            if injected:
                                rt.cleanup_failed(rt.CLEANUP_DEVICE_MEMORY, ptr, injected)
                            if frees != NULL:
                                # Before the pool use ends: the pool is
                                # destroyed only once this free has run.
                                rt.marks_record(frees, on)
                    finally:
                        rt.thread_exchange_capture_mode(&mode)
                finally:
                    exit_device(&scope)
            if capturing:
                # The stream is being captured: a free now would become a
                # node of the user's graph (or be refused, invalidating the
                # capture).  Tried again by the drain of a later streams call
                # (end_capture makes one), not by a pending call, which would
                # retry it between every few bytecodes while the capture
                # lasts; what the buffer holds stays held until then.
                pending = _PendingFree.__new__(_PendingFree)
                pending.ptr, pending.device = ptr, device
                pending.stream, pending.free_on, pending.pool = stream, free_on, pool
                rt.defer_release(_free_pending, <void*>pending, pending, False)
                if stream_used:
                    stream._unuse()
                return
    except rt_CudaError as exc:
        # Released where nothing can be raised: a CudaWarning names it.
        rt.cleanup_failed(rt.CLEANUP_DEVICE_MEMORY, ptr, exc.code)
    except BaseException:
        PyErr_WriteUnraisable(stream)
    rt.flush_cleanup_warnings()
    if stream_used:
        stream._unuse()
    if free_on is not None:
        free_on._unuse()
    if stream is not None:
        drop_dependent(stream)
    if pool is not None:
        (<MemoryPool>pool)._unuse()   # the last user of a closed pool releases it


cdef void _free_pending(void* arg, int kind) noexcept nogil:
    with gil:
        p = <_PendingFree>arg
        _free_device_memory(p.ptr, p.device, p.stream, p.free_on, p.pool)



cdef int _allocate(DeviceBuffer buf, size_t n, Stream s, MemoryPool pool) except -1:
    """Give ``buf`` ``n`` bytes allocated in order on ``s``: from ``pool``, or
    from the device's current pool (``cudaMallocAsync``) when it is None."""
    cdef void* p = NULL
    cdef DeviceScope scope
    cdef int dev
    cdef cudaMemPool_t h = NULL
    rt.drain_deferred()
    s._use()
    try:
        if s._device >= 0:
            dev = s._device
        elif pool is not None:
            dev = pool._device     # a default stream acts on the pool's device
        else:
            dev = current_device()
        if pool is not None:
            if dev != pool._device:
                raise ValueError(f"stream is on device {dev}, but the pool allocates on device "
                                 f"{pool._device}: use a stream of device {pool._device}")
            pool._use()            # the buffer's, until its free is enqueued
            h = <cudaMemPool_t>pool._handle
        # Counted before the enqueue, looked at after it: a close() of `s`
        # in another thread meanwhile records where its work ends after
        # this allocation, there or here (Stream.close).
        note_dependent(s)
        try:
            if n:
                with nogil:
                    enter_device(&scope, dev)
                    try:
                        if h == NULL:
                            rt.malloc_async(&p, n, <cudaStream_t>s._handle)
                        else:
                            rt.malloc_from_pool_async(&p, n, h, <cudaStream_t>s._handle)
                    finally:
                        exit_device(&scope)
            settle_dependent(s)
        except BaseException:
            drop_dependent(s)
            if pool is not None:
                pool._unuse()
            raise
    finally:
        s._unuse()
    buf._adopt_device(p, n, dev, s, pool)
    if streams_flag_get(_checking) != 0:
        nvtx.check_hooks().alloc(<uintptr_t>p, s)
    return 0


# no_gc_clear: the free in __dealloc__ needs the stream(s) it is ordered on
# and the pool it came from ("Reference cycles" in docs/architecture.rst).
@cython.final
@cython.no_gc_clear
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
        self._init_once()
        try:
            _allocate(self, n, s, None)
        except BaseException:
            self._init_abandoned()
            raise

    def __dealloc__(self):
        # Here, not in the base class: by the time a base __dealloc__ runs,
        # Cython has already cleared this class's fields (the stream).
        if streams_close_begin(&self._state) == 1:
            self._release_memory()

    cdef void _adopt_device(self, void* p, size_t n, int dev, Stream s, object pool) noexcept:
        # Takes over what the caller took for it: one count of `s`'s
        # _dependents and, from a pool, one use of the pool.
        self._device = dev
        self._stream = s
        self._pool = pool
        self._adopt(p, n)

    @property
    def stream(self):
        return self._stream

    @property
    def pool(self):
        """The MemoryPool it came from (None for ``DeviceBuffer(...)``)."""
        return self._pool

    def export(self):
        """An ``IpcBufferDescriptor`` (picklable) that another process passes to
        ``pool.import_buffer()`` of the pool it imported with
        ``MemoryPool.import_handle()``.  Needs a buffer of an ``ipc=True`` pool.

        The importer must not read before the allocation is complete on this
        buffer's stream (order it with an interprocess Event), and must free
        its import before this process frees the buffer.
        """
        cdef cudaMemPoolPtrExportData data
        cdef MemoryPool pool
        self._check_open()
        if self._pool is None or not (<MemoryPool>self._pool)._ipc:
            raise ValueError("export() needs a buffer allocated from a MemoryPool made with "
                             "ipc=True")
        if self._ptr == NULL:
            raise ValueError("export(): a zero-byte buffer has no memory to share")
        pool = <MemoryPool>self._pool
        if not pool._shared:
            # cudaMemPoolExportPointer is documented for "an already shared
            # memory pool"; on a pool never exported it is refused (invalid
            # argument; H100, CUDA 13 driver).  Share it once: only the
            # export matters, not the descriptor.
            close_fd(pool._export_fd())
        self._use()
        try:
            with nogil:
                rt.mem_pool_export_pointer(&data, self._ptr)
        finally:
            self._unuse()
        return IpcBufferDescriptor((<char*>data.reserved)[:64], self._nbytes, self._device)

    def close(self, stream=None):
        """Free in order on ``stream`` (default: the allocation's stream).  Idempotent.

        ``stream`` must be open: a closed one cannot order the free after
        its work (``ValueError``; the buffer stays open).  It may be closed
        after this call: its handle stays until the free is enqueued on it.
        DLPack consumers still holding the memory keep it until they let go.
        """
        cdef Stream on
        if stream is None or self.closed:
            _Buffer.close(self)
            return
        on = as_stream(stream, "stream")
        # Counted, and checked in the same atomic step: a close() of `on` in
        # another thread either came first (refused here) or leaves its
        # handle to this use, which ends once the free is enqueued on it.
        if not _try_use(on):
            raise ValueError(f"stream: {on!r} is closed, so the free cannot be ordered after "
                             "its work; the buffer stays open (free it on an open stream "
                             "that waits for that work)")
        # Claimed in one step: of two close(stream=...) calls at once (free-
        # threaded CPython), one names the stream and the other just closes.
        claimed = False
        with cython.critical_section(self):
            if self._free_on is None and not streams_is_closed(&self._state):
                self._free_on = on
                claimed = True
        if not claimed:                 # another close() got in first
            on._unuse()
            _Buffer.close(self)
            return
        try:
            _Buffer.close(self)
        except BaseException:
            if not self.closed:     # refused (inside a host callback): stays open
                with cython.critical_section(self):
                    self._free_on = None
                on._unuse()
            raise

    cdef void _release_memory(self) noexcept:
        cdef _PendingFree pending
        cdef int decision = rt.release_decision()
        rt.count(rt.STREAMS_CNT_BUFFER_FREED)
        if self._ptr != NULL and streams_flag_get(_checking) != 0:
            _check_free(self._ptr, self._free_on if self._free_on is not None else self._stream)
        if self._ptr != NULL and decision == rt.RELEASE_DEFER:
            pending = _PendingFree.__new__(_PendingFree)
            pending.ptr, pending.device = self._ptr, self._device
            pending.stream, pending.free_on, pending.pool = self._stream, self._free_on, self._pool
            rt.defer_release(_free_pending, <void*>pending, pending)
        else:
            # Skipped: the memory is left to the process's end, but what
            # the buffer holds is let go.
            _free_device_memory(self._ptr if decision == rt.RELEASE_NOW else NULL,
                                self._device, self._stream, self._free_on, self._pool)
        self._ptr = NULL

    cdef uintptr_t _order_handle(self) except? 0:
        """The stream a consumer must order after: ours, or, once ours is
        closed, the legacy stream made to wait for where its work ended."""
        cdef Stream s = self._stream
        cdef DeviceScope scope
        cdef cudaEvent_t tail
        cdef Event tail_event
        cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
        cdef bint legacy_captured = False
        if not s.closed:
            return 1 if s._handle == NULL else <uintptr_t>s._handle
        tail_event = stream_tail(s)
        if tail_event is not None:
            with nogil:
                legacy_captured = rt.stream_in_capture(cudaStreamLegacy)
        if tail_event is not None and legacy_captured:
            # A blocking stream is being captured: work on the legacy stream
            # would join or break that capture, so the tail is waited for on
            # the host instead (GIL released; in relaxed capture mode, in
            # which the capture allows the queries of the wait).  Test:
            # tests/foreign/test_arrays_capture_gpu.py, a closed stream's
            # buffer during a capture.
            with nogil:
                rt.thread_exchange_capture_mode(&mode)
            try:
                wait_until_done(tail_event, -1)
            finally:
                with nogil:
                    rt.thread_exchange_capture_mode(&mode)
        elif tail_event is not None:
            tail = <cudaEvent_t>tail_event._handle
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
        cdef uintptr_t ours, wanted = 0
        cdef DeviceScope scope
        cdef Stream s
        cdef bint used
        cdef int decision
        self._check_open()
        if copy:
            raise BufferError("DeviceBuffer.__dlpack__ cannot copy")
        if dl_device is not None and tuple(dl_device) != (_kDLCUDA, self._device):
            raise BufferError(f"cannot export to device {dl_device}")
        if dlpack_stream_arg(stream, "stream", &wanted):
            consumer = <cudaStream_t>wanted
            s = self._stream
            # Our stream used across the wait (a close() in another thread
            # cannot destroy it under the call), or, closed, the legacy
            # stream made to wait for where its work ended.
            used = _try_use(s)
            try:
                # Closed, our stream's work is waited for through the legacy
                # stream: decided first, enqueued (_order_handle) only once
                # the consumer is known not to be captured (an enqueue on
                # the legacy stream would break its capture).
                ours = (1 if s._handle == NULL else <uintptr_t>s._handle) if used \
                    else STREAM_LEGACY
                decision = _ORDER_SKIP
                if <cudaStream_t>ours != consumer:
                    # The rule of _order_after, with our stream the producer.
                    decision = _order_decision(wanted, ours)
                    if decision == _ORDER_REFUSE:
                        raise BufferError(
                            f"stream=0x{wanted:x} is being captured, and this buffer's stream "
                            f"0x{ours:x} is not part of that capture: waiting for it there "
                            "would invalidate the capture (nothing was enqueued); synchronize "
                            "the buffer's stream before the capture begins and export with "
                            "stream=-1, or make the buffer's stream part of the capture")
                if not used:
                    self._order_handle()
                if decision == _ORDER_WAIT:
                    with nogil:
                        enter_device(&scope, self._device)
                        try:
                            rt.stream_wait_stream(consumer, <cudaStream_t>ours,
                                                  self._device)
                        finally:
                            exit_device(&scope)
            finally:
                if used:
                    s._unuse()
        return _export_dlpack(self, _kDLCUDA)


cdef class _HostBuffer(_Buffer):
    """Host memory with the buffer protocol (numpy.asarray works, no copy)."""

    def __getbuffer__(self, Py_buffer* view, int flags):
        with cython.critical_section(self):     # against close(): see _Buffer.close
            self._check_open()
            self._views += 1
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

    def __releasebuffer__(self, Py_buffer* view):
        with cython.critical_section(self):
            self._views -= 1

    cdef void _release_memory(self) noexcept:
        rt.count(rt.STREAMS_CNT_BUFFER_FREED)
        if self._ptr != NULL and streams_flag_get(_checking) != 0:
            _check_free(self._ptr, None)
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
        try:
            current_device()
            rt.drain_deferred()
            if n:
                with nogil:
                    rt.host_alloc(&p, n)
            self._kind = rt.HANDLE_HOST_MEMORY
            self._adopt(p, n)
        except BaseException:
            self._init_abandoned()
            raise
        if p != NULL and streams_flag_get(_checking) != 0:
            nvtx.check_hooks().alloc(<uintptr_t>p, None)     # on the host, at once

    def __dlpack_device__(self):
        return (_kDLCUDAHost, 0)



@cython.final
cdef class ManagedBuffer(_HostBuffer):
    """ManagedBuffer(nbytes, *, attach="global", stream=None)

    Managed (unified) memory from ``cudaMallocManaged``: host and device see it.

    ``stream`` is the stream the memory is used on: its
    ``__cuda_array_interface__`` names it, so that consumers wait for the
    work there (default: the legacy stream, which orders after every
    blocking stream of the device).
    """
    # The GC may clear `_stream`: only the array interface reads it, and the
    # free (cudaFree, which waits for the device) reads C fields alone.

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, nbytes, *, attach="global", stream=None):
        cdef size_t n = as_nbytes(nbytes, "nbytes")
        cdef void* p = NULL
        cdef unsigned int flags
        self._init_once()
        try:
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
        except BaseException:
            self._init_abandoned()
            raise
        if p != NULL and streams_flag_get(_checking) != 0:
            nvtx.check_hooks().alloc(<uintptr_t>p, None)     # on the host, at once

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




# ---- memory pools ---------------------------------------------------------------------------

_ACCESS = {"none": cudaMemAccessFlagsProtNone, "r": cudaMemAccessFlagsProtRead,
           "rw": cudaMemAccessFlagsProtReadWrite}
_ACCESS_NAMES = {<int>cudaMemAccessFlagsProtNone: "none", <int>cudaMemAccessFlagsProtRead: "r",
                 <int>cudaMemAccessFlagsProtReadWrite: "rw"}


class IpcBufferDescriptor:
    """What ``DeviceBuffer.export()`` gives another process: the opaque
    ``cudaMemPoolPtrExportData`` (64 bytes), the size and the device.
    Picklable; pass it to ``pool.import_buffer()``."""
    __slots__ = ("data", "nbytes", "device_id")

    def __init__(self, data, nbytes, device_id):
        if not isinstance(data, bytes) or len(data) != 64:
            raise ValueError("data must be the 64 bytes of a cudaMemPoolPtrExportData")
        self.data = data
        self.nbytes = int(as_nbytes(nbytes, "nbytes"))
        self.device_id = int(as_int(device_id, "device_id"))

    def __reduce__(self):
        return (IpcBufferDescriptor, (self.data, self.nbytes, self.device_id))

    def __eq__(self, other):
        if not isinstance(other, IpcBufferDescriptor):
            return NotImplemented
        return (self.data, self.nbytes, self.device_id) == (other.data, other.nbytes,
                                                            other.device_id)

    def __repr__(self):
        return f"IpcBufferDescriptor(nbytes={self.nbytes}, device_id={self.device_id})"


cdef MemoryPool _new_pool(void* handle, int dev, bint ipc, bint owned, void* frees):
    # An owned pool takes `frees` (rt.marks_new()); another has none.
    cdef MemoryPool pool = MemoryPool.__new__(MemoryPool)
    pool._handle = handle
    pool._device = dev
    pool._ipc = ipc
    pool._frees = frees
    pool._opened(owned)
    return pool


cdef void* _pool_handle(cudaMemPool_t* h, int dev, int fd, bint share, size_t cap) except NULL:
    # A pool of `dev` made (fd < 0; `share` and `cap` as MemoryPool() takes
    # them) or imported from `fd`, and the list its frees will be marked in
    # (rt.marks_new), which is returned; freed again when CUDA refuses.
    cdef DeviceScope scope
    cdef void* frees
    rt.drain_deferred()
    frees = rt.marks_new()
    try:
        with nogil:
            enter_device(&scope, dev)
            try:
                if fd < 0:
                    rt.mem_pool_create(h, dev, share, cap)
                else:
                    rt.mem_pool_import_fd(h, fd)
            finally:
                exit_device(&scope)
    except BaseException:
        rt.marks_free(frees)
        raise
    return frees


cdef dict _default_pools = {}     # device -> the MemoryPool of its default pool
cdef object _default_pools_lock = object()  # its critical section (see _hostcall's _capture_lock)


@cython.final
cdef class MemoryPool(HandleOwner):
    """MemoryPool(device=None, *, release_threshold=None, ipc=False, max_size=None)

    A stream-ordered memory pool of one device (``cudaMemPoolCreate``).

    ``allocate(nbytes, stream)`` returns a ``DeviceBuffer`` allocated on
    ``stream`` (``cudaMallocFromPoolAsync``) and freed in stream order, as
    any DeviceBuffer; each buffer keeps its pool alive.  Memory freed to the
    pool stays reserved for reuse up to ``release_threshold`` bytes (CUDA's
    default is 0: everything above is given back at each synchronization).
    ``ipc=True`` makes a pool whose memory other processes can map
    (``export_handle``/``import_handle``, ``DeviceBuffer.export``/
    ``import_buffer``); ``max_size`` caps what the pool may reserve.
    ``MemoryPool.default(device)`` is the device's own pool, which
    ``DeviceBuffer(...)`` uses and which is never destroyed.
    ``close()`` stops new allocations at once; an owned pool is destroyed
    once every buffer from it has been freed and those frees have run on
    the GPU.
    """

    def __cinit__(self, *args, **kwargs):
        self._handle = NULL
        self._device = -1
        self._frees = NULL

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, device=None, *, release_threshold=None, ipc=False, max_size=None):
        cdef size_t cap = 0 if max_size is None else as_nbytes(max_size, "max_size")
        cdef bint share = as_bool(ipc, "ipc")
        cdef unsigned long long threshold = 0 if release_threshold is None \
            else as_nbytes(release_threshold, "release_threshold")
        cdef cudaMemPool_t h = NULL
        cdef int dev
        cdef void* frees
        self._init_once()
        try:
            dev = resolve_device(device)
            frees = _pool_handle(&h, dev, -1, share, cap)
            self._handle = <void*>h
            self._device = dev
            self._ipc = share
            self._frees = frees
            self._opened(True)
            if release_threshold is not None:
                self.release_threshold = threshold
        except BaseException:
            self._init_abandoned()
            raise

    @staticmethod
    def default(device=None):
        """The default pool of ``device`` (``cudaDeviceGetDefaultMemPool``): not
        owned, never destroyed (``close()`` only stops this object)."""
        cdef int dev = resolve_device(device)
        cdef cudaMemPool_t h = NULL
        pool = _default_pools.get(dev)
        if pool is not None and not (<MemoryPool>pool).closed:
            return pool
        with nogil:
            rt.device_get_default_mem_pool(&h, dev)
        made = _new_pool(<void*>h, dev, False, False, NULL)
        # Threads asking at once all get the first one made (a wrapper of
        # the default pool owns nothing: the others just go).
        with cython.critical_section(_default_pools_lock):
            pool = _default_pools.get(dev)
            if pool is None or streams_is_closed(&(<MemoryPool>pool)._state):
                pool = made
                _default_pools[dev] = pool
        return pool

    @staticmethod
    def import_handle(fd, device=None):
        """Open a pool another process exported with ``export_handle()``.

        ``fd`` is the file descriptor received (over a Unix socket, or
        ``os.pidfd_getfd``); it is not closed here.  ``device`` is the device
        the pool's memory lives on, as this process numbers it.
        """
        cdef int c_fd = as_int(fd, "fd")
        cdef cudaMemPool_t h = NULL
        cdef int dev
        cdef void* frees
        if c_fd < 0:
            raise ValueError(f"fd must be a file descriptor (>= 0), got {c_fd}")
        dev = resolve_device(device)
        frees = _pool_handle(&h, dev, c_fd, True, 0)
        pool = _new_pool(<void*>h, dev, True, True, frees)
        (<MemoryPool>pool)._shared = True
        return pool

    # ---- the handle's life (HandleOwner) -----------------------------------
    # Each buffer from the pool is one of its users until its free is
    # enqueued (and marked in _frees): a close() with buffers out leaves the
    # release to the last of them.  Either way the pool is destroyed once
    # those frees have run, never with an allocation out (see _cudart).
    cdef int _destroy(self) except -1 nogil:
        cdef void* frees = self._frees
        self._frees = NULL
        return rt.destroy_pool(self._handle, frees)

    cdef void _release(self) noexcept nogil:
        cdef void* frees = self._frees
        self._frees = NULL
        rt.release_pool(self._handle, frees)

    # ---- allocation ----------------------------------------------------------
    def allocate(self, nbytes, stream=None):
        """A ``DeviceBuffer`` of ``nbytes`` from this pool, allocated in order on
        ``stream`` (default: the current stream), which must be of the pool's
        device; freed in order by its ``close()``."""
        cdef size_t n = as_nbytes(nbytes, "nbytes")
        cdef Stream s
        cdef DeviceBuffer buf
        self._check_open()
        s = as_stream(stream, "stream")
        buf = DeviceBuffer.__new__(DeviceBuffer)
        _allocate(buf, n, s, self)
        return buf

    def import_buffer(self, descriptor, stream=None):
        """The memory another process exported with ``DeviceBuffer.export()``,
        from the pool this process imported (``import_handle``), as a
        ``DeviceBuffer`` freed in order on ``stream`` (default: the current
        stream).  Free it before the exporting process frees its buffer."""
        cdef cudaMemPoolPtrExportData data
        cdef Stream s
        cdef void* p = NULL
        cdef DeviceBuffer buf
        cdef DeviceScope scope
        cdef bytes raw
        cdef int i
        if not isinstance(descriptor, IpcBufferDescriptor):
            raise TypeError("descriptor must be an IpcBufferDescriptor from DeviceBuffer.export(), "
                            f"not {type(descriptor).__name__}")
        if not self._ipc:
            self._check_open()
            raise ValueError("import_buffer() needs a pool opened with MemoryPool.import_handle()")
        s = as_stream(stream, "stream")
        if s._device >= 0 and s._device != self._device:
            raise ValueError(f"stream is on device {s._device}, the pool on device "
                             f"{self._device}")
        raw = descriptor.data
        for i in range(64):
            data.reserved[i] = raw[i]
        buf = DeviceBuffer.__new__(DeviceBuffer)
        self._use()                 # the buffer's, until its free is enqueued
        # A closed stream would leave the free unordered (it recorded no
        # tail for this buffer): refused before anything is imported.
        if not _try_use(s):
            self._unuse()
            raise ValueError(f"stream: {s!r} is closed")
        note_dependent(s)
        try:
            with nogil:
                enter_device(&scope, self._device)
                try:
                    rt.mem_pool_import_pointer(&p, <cudaMemPool_t>self._handle, &data)
                finally:
                    exit_device(&scope)
            settle_dependent(s)
        except BaseException:
            drop_dependent(s)
            self._unuse()
            raise
        finally:
            s._unuse()
        buf._adopt_device(p, descriptor.nbytes, self._device, s, self)
        return buf

    # ---- IPC -------------------------------------------------------------------
    def export_handle(self):
        """A POSIX file descriptor for ``MemoryPool.import_handle()`` in another
        process (``ipc=True`` pools).  The caller owns it: send it (for
        example ``socket.send_fds``), then ``os.close`` it."""
        if not self._ipc:
            self._check_open()
            raise ValueError("export_handle() needs a MemoryPool made with ipc=True")
        return self._export_fd()

    cdef int _export_fd(self) except -1:
        cdef int fd = -1
        self._use()
        try:
            with nogil:
                rt.mem_pool_export_fd(<cudaMemPool_t>self._handle, &fd)
        finally:
            self._unuse()
        self._shared = True
        return fd

    # ---- attributes ------------------------------------------------------------
    cdef unsigned long long _get_u64(self, int attr) except? 0:
        cdef unsigned long long value = 0
        self._use()
        try:
            with nogil:
                rt.mem_pool_get_attribute(<cudaMemPool_t>self._handle, <cudaMemPoolAttr>attr, &value)
        finally:
            self._unuse()
        return value

    cdef int _set_u64(self, int attr, unsigned long long value) except -1:
        self._use()
        try:
            with nogil:
                rt.mem_pool_set_attribute(<cudaMemPool_t>self._handle, <cudaMemPoolAttr>attr, &value)
        finally:
            self._unuse()
        return 0

    cdef bint _get_flag(self, int attr) except -1:
        cdef int value = 0
        self._use()
        try:
            with nogil:
                rt.mem_pool_get_attribute(<cudaMemPool_t>self._handle, <cudaMemPoolAttr>attr, &value)
        finally:
            self._unuse()
        return value != 0

    cdef int _set_flag(self, int attr, object value, str name) except -1:
        cdef int v = as_bool(value, name)
        self._use()
        try:
            with nogil:
                rt.mem_pool_set_attribute(<cudaMemPool_t>self._handle, <cudaMemPoolAttr>attr, &v)
        finally:
            self._unuse()
        return 0

    @property
    def release_threshold(self):
        """Bytes of freed memory the pool keeps reserved instead of giving them
        back to the system at synchronization."""
        return self._get_u64(cudaMemPoolAttrReleaseThreshold)

    @release_threshold.setter
    def release_threshold(self, value):
        self._set_u64(cudaMemPoolAttrReleaseThreshold, as_nbytes(value, "release_threshold"))

    @property
    def reserved_current(self):
        """Bytes the pool holds from the system now."""
        return self._get_u64(cudaMemPoolAttrReservedMemCurrent)

    @property
    def reserved_high(self):
        """The high-water mark of ``reserved_current`` since the last ``reset_high()``."""
        return self._get_u64(cudaMemPoolAttrReservedMemHigh)

    @property
    def used_current(self):
        """Bytes allocated from the pool and not yet freed."""
        return self._get_u64(cudaMemPoolAttrUsedMemCurrent)

    @property
    def used_high(self):
        """The high-water mark of ``used_current`` since the last ``reset_high()``."""
        return self._get_u64(cudaMemPoolAttrUsedMemHigh)

    def reset_high(self):
        """Reset both high-water marks to the current values."""
        self._set_u64(cudaMemPoolAttrReservedMemHigh, 0)
        self._set_u64(cudaMemPoolAttrUsedMemHigh, 0)

    @property
    def follow_event_dependencies(self):
        """Reuse memory freed on another stream once an event orders the two."""
        return self._get_flag(cudaMemPoolReuseFollowEventDependencies)

    @follow_event_dependencies.setter
    def follow_event_dependencies(self, value):
        self._set_flag(cudaMemPoolReuseFollowEventDependencies, value,
                       "follow_event_dependencies")

    @property
    def allow_opportunistic(self):
        """Reuse memory whose free the GPU has already passed, on any stream."""
        return self._get_flag(cudaMemPoolReuseAllowOpportunistic)

    @allow_opportunistic.setter
    def allow_opportunistic(self, value):
        self._set_flag(cudaMemPoolReuseAllowOpportunistic, value, "allow_opportunistic")

    @property
    def allow_internal_dependencies(self):
        """Reuse memory freed on another stream by making the allocating
        stream wait for that free."""
        return self._get_flag(cudaMemPoolReuseAllowInternalDependencies)

    @allow_internal_dependencies.setter
    def allow_internal_dependencies(self, value):
        self._set_flag(cudaMemPoolReuseAllowInternalDependencies, value,
                       "allow_internal_dependencies")

    def trim(self, min_bytes=0):
        """Give unused reserved memory back, keeping at least ``min_bytes``
        reserved (``cudaMemPoolTrimTo``)."""
        cdef size_t keep = as_nbytes(min_bytes, "min_bytes")
        self._use()
        try:
            with nogil:
                rt.mem_pool_trim_to(<cudaMemPool_t>self._handle, keep)
        finally:
            self._unuse()

    def set_access(self, device, access="rw"):
        """Let ``device`` (a peer of the pool's device) read and write ("rw"),
        only read ("r") or not map ("none") the pool's memory."""
        cdef int dev = resolve_device(device)
        cdef cudaMemAccessFlags flags
        if not isinstance(access, str) or access not in _ACCESS:
            raise ValueError(f"access must be 'rw', 'r' or 'none', got {access!r}")
        flags = _ACCESS[access]
        self._use()
        try:
            with nogil:
                rt.mem_pool_set_access(<cudaMemPool_t>self._handle, dev, flags)
        finally:
            self._unuse()

    def get_access(self, device):
        """How ``device`` may access the pool's memory: "rw", "r" or "none"."""
        cdef int dev = resolve_device(device)
        cdef cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone
        self._use()
        try:
            with nogil:
                rt.mem_pool_get_access(<cudaMemPool_t>self._handle, dev, &flags)
        finally:
            self._unuse()
        return _ACCESS_NAMES.get(<int>flags, "none")

    # ---- properties --------------------------------------------------------------
    @property
    def handle(self):
        """The ``cudaMemPool_t`` as an int."""
        self._check_open()
        return <uintptr_t>self._handle

    @property
    def device_id(self):
        return self._device

    @property
    def ipc(self):
        """Whether other processes can map its memory."""
        return self._ipc

    @property
    def is_default(self):
        """Whether this is a device's default pool (never destroyed here)."""
        return self._is_initialised() and not self._owns_handle

    def close(self):
        """Destroy an owned pool (its memory goes once the buffers still out are
        freed); for a default pool, stop using this object.  Idempotent."""
        self._close_handle()

    def __repr__(self):
        if self.closed:
            return "<streams.MemoryPool (closed)>"
        kind = "default" if self.is_default else ("ipc" if self._ipc else "owned")
        return (f"<streams.MemoryPool handle=0x{<uintptr_t>self._handle:x} "
                f"device={self._device} {kind}>")


# ---- copies and sets ------------------------------------------------------------------------

cdef int check_fits(size_t n, Span* span, str argname) except -1:
    if span.nbytes != <size_t>-1 and n > span.nbytes:
        raise ValueError(f"nbytes={n} is more than {argname} holds ({span.nbytes})")
    return 0


cdef int _check_memory_arg(object obj, int flags, str argname) except -1:
    """What resolve_span refuses by the kind of ``obj`` alone (not memory;
    None; a NULL or too large address; a host buffer that is read-only or
    not contiguous, where one is taken), checked before the stream and the
    device are looked at: a bad argument is named as such on a machine
    without a GPU too (tests/package/test_arguments.py)."""
    cdef Py_buffer view
    if obj is None:
        if flags & SPAN_NULL_OK:
            return 0
        raise TypeError(f"{argname} must be memory (a streams buffer, an array with "
                        "__cuda_array_interface__ or __dlpack__, or an int address), not None")
    if isinstance(obj, _Buffer):
        if flags & SPAN_DEVICE and not isinstance(obj, (DeviceBuffer, ManagedBuffer,
                                                        PinnedBuffer)):
            raise TypeError(f"{argname}: {type(obj).__name__} is not device memory")
        return 0
    if isinstance(obj, int) and not isinstance(obj, bool):
        if obj == 0 and not flags & SPAN_NULL_OK:
            raise ValueError(f"{argname} is a NULL address")
        as_pointer_int(obj, argname)
        return 0
    if hasattr(obj, "__cuda_array_interface__") or (hasattr(obj, "__dlpack_device__")
                                                    and hasattr(obj, "__dlpack__")):
        return 0
    if flags & SPAN_HOST_OK:
        try:
            PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS |
                               (PyBUF_WRITABLE if flags & SPAN_WRITABLE else PyBUF_SIMPLE))
        except (TypeError, BufferError) as exc:
            raise TypeError(f"{argname} must be a streams buffer, an object with "
                            f"__cuda_array_interface__ or __dlpack__, a C-contiguous"
                            f"{' writable' if flags & SPAN_WRITABLE else ''} host buffer "
                            f"(numpy array, bytearray) or an int address; "
                            f"{type(obj).__name__}: {exc}") from None
        PyBuffer_Release(&view)
        return 0
    raise TypeError(f"{argname} must be a pointer to "
                    f"{'device' if flags & SPAN_DEVICE else 'CUDA'} memory: a streams buffer, "
                    f"an object with __cuda_array_interface__ or __dlpack__, or an int "
                    f"address, not {type(obj).__name__}")


cdef size_t _span_length(object nbytes, Span* span, str argname) except? 0:
    """``nbytes``, which must fit in ``span``, or all of it when None."""
    cdef size_t n
    if nbytes is None:
        if span.nbytes == <size_t>-1:
            raise ValueError(f"nbytes is required when {argname} is a raw address")
        return span.nbytes
    n = as_nbytes(nbytes, "nbytes")
    check_fits(n, span, argname)
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


cdef int _producer_flags(object wait_producers) except -1:
    return 0 if as_bool(wait_producers, "wait_producers") else SPAN_NO_WAIT


cdef int _memcpy(object dst, object src, object nbytes, object stream, bint peer,
                 object dst_device, object src_device, object wait_producers) except -1:
    """memcpy_async, or with ``peer`` memcpy_peer_async.  The copy is
    enqueued with the stream's device current (CUDA copies stream-ordered
    memory only with its device current)."""
    cdef Span d, s
    cdef size_t n
    cdef int dd, sd
    cdef int kinds = (SPAN_DEVICE if peer else SPAN_HOST_OK) | _producer_flags(wait_producers)
    _check_memory_arg(dst, SPAN_WRITABLE | kinds, "dst")
    _check_memory_arg(src, kinds, "src")
    if nbytes is not None:
        as_nbytes(nbytes, "nbytes")
    cdef Stream st = as_stream(stream, "stream")
    cdef DeviceScope scope
    init_span(&d)
    init_span(&s)
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
        check_fits(n, &d, "dst")
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
        if streams_flag_get(_checking) != 0:
            op = "memcpy_peer_async" if peer else "memcpy_async"
            items = _checked([], &s, n, False, op + " (src)")
            nvtx.check_hooks().accesses(st, _checked(items, &d, n, True, op + " (dst)"))
    finally:
        release_span(&s)
        release_span(&d)
    return 0


def memcpy_async(dst, src, nbytes=None, stream=None, *, wait_producers=True):
    """Copy ``nbytes`` (default: all of ``src``) from ``src`` to ``dst`` in stream order.

    Either side may be device, pinned, managed or ordinary (pageable) host
    memory; the stream waits for the producers of foreign arrays (the
    stream their ``__cuda_array_interface__`` names, PyTorch's current
    stream, or DLPack's ordering: docs/interop.rst), unless
    ``wait_producers=False`` (you order them yourself; also the way to use
    an array made outside a capture inside it).  Copies from or to pageable memory
    return only once CUDA has staged them, so they are not truly
    asynchronous; use PinnedBuffer for overlap.  The caller keeps both sides
    alive until the stream passes the copy.

    The copy is made with the stream's device current.  Between two
    :class:`DeviceBuffer` of different devices it is a peer copy
    (``cudaMemcpyPeerAsync``: CUDA cannot copy stream-ordered memory across
    devices otherwise); for other memory of two devices, see
    :func:`memcpy_peer_async`.
    """
    cdef bint traced = streams_flag_get(_tracing) != 0
    if traced:
        nvtx.trace_push(nvtx.CALL_MEMCPY)
    try:
        _memcpy(dst, src, nbytes, stream, False, None, None, wait_producers)
    finally:
        if traced:
            nvtx.trace_pop()


def memcpy_peer_async(dst, dst_device, src, src_device, nbytes=None, stream=None, *,
                      wait_producers=True):
    """Copy ``nbytes`` (default: all of ``src``) from ``src`` on device
    ``src_device`` to ``dst`` on device ``dst_device``, in stream order
    (``cudaMemcpyPeerAsync``, with the stream's device current).

    Both sides are device memory.  A device argument may be None for a
    :class:`DeviceBuffer` (its own device) and must otherwise match it.
    Works without :func:`enable_peer_access` (CUDA then stages the copy),
    and for stream-ordered memory, which peer access does not reach.  The
    copy is ordered on ``stream`` only: work on other devices that uses
    either side is ordered by the caller (``wait_stream``, events).
    ``wait_producers`` as for :func:`memcpy_async`.
    """
    _memcpy(dst, src, nbytes, stream, True, dst_device, src_device, wait_producers)


def memset_async(dst, value, nbytes=None, stream=None, *, wait_producers=True):
    """Set ``nbytes`` bytes (default: all of ``dst``) to ``value`` (0-255) in
    stream order, with the stream's device current.  ``wait_producers`` as
    for :func:`memcpy_async`."""
    cdef bint traced = streams_flag_get(_tracing) != 0
    if traced:
        nvtx.trace_push(nvtx.CALL_MEMSET)
    try:
        _memset(dst, value, nbytes, stream, wait_producers)
    finally:
        if traced:
            nvtx.trace_pop()


cdef int _memset(object dst, object value, object nbytes, object stream,
                 object wait_producers) except -1:
    cdef Span d
    cdef size_t n
    cdef int v = as_int(value, "value")
    cdef int nowait = _producer_flags(wait_producers)
    if v < 0 or v > 255:
        raise ValueError(f"value must be a byte (0-255), got {v}")
    _check_memory_arg(dst, SPAN_WRITABLE | SPAN_HOST_OK, "dst")
    if nbytes is not None:
        as_nbytes(nbytes, "nbytes")
    cdef Stream st = as_stream(stream, "stream")
    cdef DeviceScope scope
    init_span(&d)
    try:
        resolve_span(dst, &d, SPAN_WRITABLE | SPAN_HOST_OK | nowait, st, "dst")
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
        if streams_flag_get(_checking) != 0:
            nvtx.check_hooks().accesses(st, _checked([], &d, n, True, "memset_async"))
    finally:
        release_span(&d)
    return 0


cdef int _batch_on(void** dsts, void** srcs, size_t* sizes, size_t n,
                   cudaStream_t s) except -1 nogil:
    # cudaMemcpyBatchAsync refuses the legacy stream (cudaErrorInvalidValue).
    # On it (handle 0 or 1), the batch runs on the calling thread's
    # per-thread default stream, which the driver takes, between two waits
    # that keep the legacy stream's order: the per-thread stream waits for
    # the legacy stream's work so far (an event recorded on the legacy
    # stream follows the work of every blocking stream), and the legacy
    # stream's later work waits for the batch.
    cdef int dev
    cdef int r
    if s != NULL and s != cudaStreamLegacy:
        return rt.memcpy_batch_async(dsts, srcs, sizes, n, s)
    dev = rt.get_device()
    rt.stream_wait_stream(cudaStreamPerThread, cudaStreamLegacy, dev)
    r = rt.memcpy_batch_async(dsts, srcs, sizes, n, cudaStreamPerThread)
    if r == 0:
        rt.stream_wait_stream(cudaStreamLegacy, cudaStreamPerThread, dev)
    return r


def memcpy_batch_async(copies, stream=None, *, wait_producers=True):
    """Copy each ``(dst, src, nbytes)`` of ``copies`` in one call, in stream
    order (``cudaMemcpyBatchAsync``).

    Each side is memory as ``memcpy_async`` takes it; ``nbytes`` None copies
    all of ``src``.  The copies of one batch may run in any order among
    themselves: they must not overlap.  On the legacy default stream (the
    default, unless another stream is current), which CUDA refuses here,
    the batch runs on the per-thread default stream, ordered after the
    legacy stream's work and before its later work.  ``wait_producers`` as
    for :func:`memcpy_async`.  Needs CUDA 12.8 or newer (the runtime this
    package was built with, and the driver).
    """
    cdef Stream st
    cdef Py_ssize_t n, i, done = 0
    cdef Span* spans = NULL
    cdef void** dsts = NULL
    cdef void** srcs = NULL
    cdef size_t* sizes = NULL
    cdef int r = 0
    cdef int nowait = _producer_flags(wait_producers)
    if isinstance(copies, (str, bytes)) or not hasattr(copies, "__iter__"):
        raise TypeError(f"copies must be a sequence of (dst, src, nbytes), not "
                        f"{type(copies).__name__}")
    items = list(copies)
    n = len(items)
    if n == 0:
        return
    for i, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise TypeError(f"copies[{i}] must be a (dst, src, nbytes) tuple, not {item!r}")
        _check_memory_arg(item[0], SPAN_WRITABLE | SPAN_HOST_OK, f"copies[{i}] dst")
        _check_memory_arg(item[1], SPAN_HOST_OK, f"copies[{i}] src")
        if len(item) == 3 and item[2] is not None:
            as_nbytes(item[2], f"copies[{i}] nbytes")
    st = as_stream(stream, "stream")
    spans = <Span*>malloc(2 * n * sizeof(Span))
    dsts = <void**>malloc(n * sizeof(void*))
    srcs = <void**>malloc(n * sizeof(void*))
    sizes = <size_t*>malloc(n * sizeof(size_t))
    try:
        if spans == NULL or dsts == NULL or srcs == NULL or sizes == NULL:
            raise MemoryError()
        for i in range(n):
            item = items[i]
            resolve_span(item[0], &spans[2 * i], SPAN_WRITABLE | SPAN_HOST_OK | nowait, st,
                         f"copies[{i}] dst")
            done += 1
            resolve_span(item[1], &spans[2 * i + 1], SPAN_HOST_OK | nowait, st,
                         f"copies[{i}] src")
            done += 1
            sizes[i] = _span_length(item[2] if len(item) == 3 else None, &spans[2 * i + 1],
                                    f"copies[{i}] src")
            check_fits(sizes[i], &spans[2 * i], f"copies[{i}] dst")
            dsts[i] = spans[2 * i].ptr
            srcs[i] = spans[2 * i + 1].ptr
        st._use()
        try:
            with nogil:
                r = _batch_on(dsts, srcs, sizes, <size_t>n, <cudaStream_t>st._handle)
        finally:
            st._unuse()
        if r == -2:
            raise NotImplementedError(
                "memcpy_batch_async needs CUDA 12.8 or newer (cudaMemcpyBatchAsync); this "
                f"build of streams uses the CUDA {_runtime_text()} runtime")
        if streams_flag_get(_checking) != 0:
            items = []
            for i in range(n):
                _checked(items, &spans[2 * i + 1], sizes[i], False,
                         f"memcpy_batch_async (copies[{i}] src)")
                _checked(items, &spans[2 * i], sizes[i], True,
                         f"memcpy_batch_async (copies[{i}] dst)")
            nvtx.check_hooks().accesses(st, items)
    finally:
        for i in range(done):
            release_span(&spans[i])
        free(spans)
        free(dsts)
        free(srcs)
        free(sizes)


# ---- stream memory operations -----------------------------------------------------------------
# cuStreamWaitValue32/64 and cuStreamWriteValue32/64 (the driver's, reached
# through cudart's entry points): a stream waits for, or writes, a value in
# device, managed or pinned memory, without a host thread in the loop.

cdef dict _WAIT_OPS = {"geq": 0x0, "eq": 0x1, "and": 0x2, "nor": 0x3}
cdef unsigned int _WAIT_FLUSH = 1 << 30


cdef uintptr_t _memop_address(void* p) except? 0:
    """The device address of ``p`` for a stream memory operation, which
    takes no managed memory (CUDA's rule) and pinned memory by its device
    pointer."""
    cdef cudaPointerAttributes attrs
    cdef int err
    with nogil:
        err = rt.pointer_get_attributes(&attrs, p)
    if err != 0:
        return <uintptr_t>p
    if attrs.type == cudaMemoryTypeManaged:
        raise ValueError(f"address=0x{<uintptr_t>p:x} is managed memory, which stream memory "
                         "operations do not accept: use device or pinned memory")
    if attrs.type == cudaMemoryTypeHost and attrs.devicePointer != NULL:
        return <uintptr_t>attrs.devicePointer
    return <uintptr_t>p


cdef bint _is_device_memory(void* p) noexcept:
    cdef cudaPointerAttributes attrs
    cdef int err
    try:
        with nogil:
            err = rt.pointer_get_attributes(&attrs, p)
    except BaseException:
        return False
    return err == 0 and attrs.type == cudaMemoryTypeDevice


cdef int _value_op(Stream stream, object address, object value, unsigned int flags,
                   object width, bint write) except -1:
    cdef Span span
    cdef unsigned long long v
    cdef uintptr_t addr
    cdef bint wide
    cdef DeviceScope scope
    cdef int dev
    if width != 32 and width != 64:
        raise ValueError(f"width must be 32 or 64, got {width!r}")
    wide = width == 64
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"value must be an int, not {type(value).__name__}")
    value = value.__index__()
    if value < 0 or value >= (1 << width):
        raise ValueError(f"value={value} does not fit {width} unsigned bits")
    v = <unsigned long long>value
    init_span(&span)
    resolve_span(address, &span, SPAN_DEVICE | (SPAN_WRITABLE if write else 0), None,
                 "address")
    try:
        addr = _memop_address(span.ptr)
        if span.nbytes != <size_t>-1 and span.nbytes < (8 if wide else 4):
            raise ValueError(f"address holds {span.nbytes} bytes, less than one "
                             f"{width}-bit value")
        if addr % (8 if wide else 4):
            raise ValueError(f"address=0x{addr:x} is not aligned to {8 if wide else 4} bytes, "
                             f"as {width}-bit stream memory operations need")
        stream._use()
        try:
            dev = stream.c_device()
            with nogil:
                enter_device(&scope, dev)
                try:
                    if write:
                        rt.stream_write_value(<cudaStream_t>stream._handle, addr, v, flags, wide)
                    else:
                        rt.stream_wait_value(<cudaStream_t>stream._handle, addr, v, flags, wide)
                finally:
                    exit_device(&scope)
        except rt_CudaError as exc:
            if exc.code == <int>cudaErrorInvalidValue and _is_device_memory(span.ptr):
                raise rt_CudaError(exc.code, exc.name,
                                   f"{exc.message}: the driver refused device memory at "
                                   f"0x{addr:x} for a stream memory operation (memory from "
                                   "a stream-ordered pool, as DeviceBuffer's, may not be "
                                   "accepted; pinned memory, PinnedBuffer, is)") from None
            if exc.code == <int>cudaErrorNotSupported:
                raise rt_CudaError(exc.code, exc.name,
                                   f"{exc.message}: this device or driver does not support "
                                   f"{width}-bit stream memory operations"
                                   + (" with op='nor'" if not write and flags & 3 == 3
                                      else "")) from None
            raise
        finally:
            stream._unuse()
    finally:
        release_span(&span)
    return 0


# ---- prefetch, discard, advice (managed memory) --------------------------------------------

cdef dict _ADVICE = {
    "read_mostly": 1, "unset_read_mostly": 2,               # cudaMemoryAdvise values
    "preferred_location": 3, "unset_preferred_location": 4,
    "accessed_by": 5, "unset_accessed_by": 6,
}


cdef int _location(object location, cudaMemLocation* loc, str argname) except -1:
    """A device (a streams.Device, an ordinal or 'cuda:N'), "host",
    "host_numa_current", or ("host_numa", node)."""
    loc.id = 0
    if location is None:
        raise TypeError(f"{argname} must be a device, 'host', 'host_numa_current' or "
                        "('host_numa', node), not None")
    if isinstance(location, str) and location in ("host", "host_numa_current"):
        loc.type = (cudaMemLocationTypeHost if location == "host"
                    else cudaMemLocationTypeHostNumaCurrent)
        return 0
    if isinstance(location, tuple):
        if not (len(location) == 2 and isinstance(location[0], str)
                and location[0] == "host_numa"):
            raise ValueError(f"{argname}: a tuple location is ('host_numa', node), not "
                             f"{location!r}")
        node = location[1]
        if not _is_count(node) or _operator.index(node) > 0x7fffffff:
            raise ValueError(f"{argname}: a host NUMA node is an int >= 0, not {node!r}")
        loc.type = cudaMemLocationTypeHostNuma
        loc.id = _operator.index(node)
        return 0
    loc.type = cudaMemLocationTypeDevice
    try:
        loc.id = resolve_device(location, argname)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{argname} must be a device, 'host', 'host_numa_current' or "
                        f"('host_numa', node): {exc}") from None
    return 0


cdef bint _is_count(object x):
    # An int >= 0 (numpy integers too), not memory: the second item of an
    # (memory, nbytes) pair.
    if isinstance(x, bool) or hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        return False
    try:
        return _operator.index(x) >= 0
    except TypeError:
        return False


cdef bint _is_pair(object x):
    # An (memory, nbytes) range: a tuple of two whose second item is a count.
    return isinstance(x, tuple) and len(x) == 2 and _is_count(x[1])


cdef list _ranges(object memory, str argname):
    """One range (memory, or an (memory, nbytes) pair), or a list or tuple
    of them."""
    if isinstance(memory, list) or (isinstance(memory, tuple) and not _is_pair(memory)):
        items = list(memory)
        if not items:
            raise ValueError(f"{argname} is empty")
        return items
    return [memory]


cdef tuple _range(object item):
    # (memory, nbytes or None)
    if _is_pair(item):
        return (item[0], _operator.index(item[1]))
    return (item, None)


cdef int _mem_batch(int kind, void** ps, size_t* ns, size_t n, cudaMemLocation* loc,
                    cudaStream_t s) except -1 nogil:
    # The batched prefetch and discard refuse the legacy stream (the CUDA 13
    # headers).  On it (handle 0 or 1), the batch runs on the calling
    # thread's per-thread default stream between two waits that keep the
    # legacy stream's order, as memcpy_batch_async's (_batch_on).
    cdef int dev = 0
    cdef int r
    cdef bint legacy = s == NULL or s == cudaStreamLegacy
    if not rt.mem_batch_available():
        return -2       # before any wait: nothing is left behind
    if legacy:
        dev = rt.get_device()
        rt.stream_wait_stream(cudaStreamPerThread, cudaStreamLegacy, dev)
        s = cudaStreamPerThread
    if kind == 1:
        r = rt.mem_discard_batch_async(ps, ns, n, s)
    else:
        r = rt.mem_prefetch_batch_async(ps, ns, n, loc, kind == 2, s)
    if legacy and r == 0:
        rt.stream_wait_stream(cudaStreamLegacy, cudaStreamPerThread, dev)
    return r


cdef str _runtime_text():
    from streams._cudart import runtime_version
    v = runtime_version()
    return f"{v // 1000}.{v % 1000 // 10}"


cdef int _no_batch(str op) except -1:
    raise NotImplementedError(
        f"{op} needs CUDA 13.0 or newer (cudaMemDiscardBatchAsync, "
        "cudaMemDiscardAndPrefetchBatchAsync); this build of streams uses the CUDA "
        f"{_runtime_text()} runtime")


cdef int _memory_op(int kind, object memory, object location, object stream) except -1:
    # kind 0 prefetch, 1 discard, 2 discard and prefetch.  Every argument is
    # checked before the stream is looked at or any memory resolved.
    cdef cudaMemLocation loc
    cdef Stream st
    cdef list items = _ranges(memory, "buffers")
    cdef Py_ssize_t n = len(items), i, done = 0
    cdef Span* spans = NULL
    cdef void** ps = NULL
    cdef size_t* ns = NULL
    cdef DeviceScope scope
    cdef int r = 0
    # Discarding changes the contents: only writable memory.
    cdef int flags = SPAN_HOST_OK | (SPAN_WRITABLE if kind != 0 else 0)
    cdef list pairs = []
    cdef str op = ("prefetch", "discard", "discard_and_prefetch")[kind]
    if kind != 1:
        _location(location, &loc, "location")
    for i in range(n):
        argname = "buffers" if n == 1 else f"buffers[{i}]"
        obj, nbytes = _range(items[i])
        _check_memory_arg(obj, flags, argname)
        if nbytes is not None:
            as_nbytes(nbytes, argname + " nbytes")
        pairs.append((obj, nbytes, argname))
    if kind != 0 and not rt.mem_batch_available():
        # Before the stream or any array is looked at: resolving an array
        # may already make the stream wait for its producer.
        _no_batch(op)
    st = as_stream(stream, "stream")
    spans = <Span*>malloc(n * sizeof(Span))
    ps = <void**>malloc(n * sizeof(void*))
    ns = <size_t*>malloc(n * sizeof(size_t))
    try:
        if spans == NULL or ps == NULL or ns == NULL:
            raise MemoryError()
        for i in range(n):
            obj, nbytes, argname = pairs[i]
            init_span(&spans[i])
            done = i + 1
            resolve_span(obj, &spans[i], flags, st, argname)
            if nbytes is None and spans[i].nbytes == <size_t>-1:
                raise ValueError(f"{argname}: the length of a raw address is not known: pass "
                                 "(address, nbytes)")
            ns[i] = _span_length(nbytes, &spans[i], argname)
            ps[i] = spans[i].ptr
        st._use()
        try:
            with nogil:
                enter_device(&scope, st._device)
                try:
                    if kind == 0 and n == 1:
                        rt.mem_prefetch_async(ps[0], ns[0], loc, <cudaStream_t>st._handle)
                    else:
                        r = _mem_batch(kind, ps, ns, <size_t>n, &loc, <cudaStream_t>st._handle)
                        if r == -2 and kind == 0:
                            # One call per range where the runtime has no batch.
                            for i in range(n):
                                rt.mem_prefetch_async(ps[i], ns[i], loc,
                                                      <cudaStream_t>st._handle)
                            r = 0
                finally:
                    exit_device(&scope)
        finally:
            st._unuse()
        if r == -2:
            _no_batch(op)
        if kind != 0 and streams_flag_get(_checking) != 0:
            checked = []
            for i in range(n):
                _checked(checked, &spans[i], ns[i], True, op)
            nvtx.check_hooks().accesses(st, checked)
    finally:
        for i in range(done):
            release_span(&spans[i])
        free(spans)
        free(ps)
        free(ns)
    return 0


def prefetch(buffers, location, stream=None):
    """Migrate managed memory to ``location`` in stream order
    (``cudaMemPrefetchAsync``; several ranges in one
    ``cudaMemPrefetchBatchAsync`` where the runtime is CUDA 13).

    ``buffers``: a range, or a list (or tuple) of ranges; a range is memory
    as :func:`memcpy_async` takes it (all of it) or ``(memory, nbytes)``
    (a tuple of two whose second item is an int).  ``location``: a device
    (a :class:`Device`, an ordinal or ``"cuda:N"``), ``"host"``,
    ``"host_numa_current"`` or ``("host_numa", node)``.  On the legacy
    default stream, which CUDA refuses for a batch, the batch runs on the
    per-thread default stream, ordered after the legacy stream's work and
    before its later work.  Memory that is not managed (nor, with HMM,
    system memory) is refused by CUDA (:class:`CudaError`)."""
    _memory_op(0, buffers, location, stream)


def discard(buffers, stream=None):
    """Tell CUDA the contents of managed ``buffers`` (ranges, as
    :func:`prefetch` takes them; writable memory only) are no longer
    needed, in stream order (``cudaMemDiscardBatchAsync``): their pages may
    be dropped instead of migrated, and a read before the next write
    returns unspecified values.  Needs CUDA 13.0 (``NotImplementedError``
    before)."""
    _memory_op(1, buffers, None, stream)


def discard_and_prefetch(buffers, location, stream=None):
    """:func:`discard`, then :func:`prefetch` to ``location``, in one call
    (``cudaMemDiscardAndPrefetchBatchAsync``): the pages are made resident
    at ``location`` without copying their old contents.  Needs CUDA 13.0."""
    _memory_op(2, buffers, location, stream)


def advise(buffer, advice, location=None):
    """Advise CUDA about managed memory (``cudaMemAdvise``).

    ``advice``: ``"read_mostly"``, ``"unset_read_mostly"``,
    ``"preferred_location"``, ``"unset_preferred_location"``,
    ``"accessed_by"`` or ``"unset_accessed_by"``.  ``"preferred_location"``
    and the two ``accessed_by`` forms name a ``location`` (as
    :func:`prefetch` takes it); the read-mostly forms take none, and
    ``"unset_preferred_location"`` needs none.  ``buffer``: one range, as
    :func:`prefetch` takes it."""
    cdef cudaMemLocation loc
    cdef Span span
    cdef size_t n
    cdef int code
    if not isinstance(advice, str) or advice not in _ADVICE:
        raise ValueError(f"advice must be one of {', '.join(_ADVICE)}, not {advice!r}")
    code = _ADVICE[advice]
    if code <= 2 or (code == 4 and location is None):
        if code <= 2 and location is not None:
            raise ValueError(f"advice {advice!r} takes no location")
        loc.type = cudaMemLocationTypeDevice
        loc.id = 0
    else:
        _location(location, &loc, "location")
    init_span(&span)
    try:
        n = _one_range(buffer, &span)
        with nogil:
            rt.mem_advise(span.ptr, n, code, loc)
    finally:
        release_span(&span)


cdef size_t _one_range(object buffer, Span* span) except? 0:
    # `buffer` (one range) resolved into `span` (the caller releases it):
    # its length.  Its type is checked before any CUDA call; a raw address
    # is looked up (cudaPointerGetAttributes) before a missing length is
    # refused.
    obj, nbytes = _range(buffer)
    _check_memory_arg(obj, SPAN_HOST_OK, "buffer")
    resolve_span(obj, span, SPAN_HOST_OK | SPAN_NO_WAIT, None, "buffer")
    if nbytes is None and span.nbytes == <size_t>-1:
        raise ValueError("buffer: the length of a raw address is not known: pass "
                         "(address, nbytes)")
    return _span_length(nbytes, span, "buffer")


# cudaMemRangeAttribute values: ReadMostly, AccessedBy, and the location
# type and id of the preferred location and of the last prefetch.
cdef enum:
    _RANGE_READ_MOSTLY = 1
    _RANGE_ACCESSED_BY = 3
    _RANGE_PREFERRED_TYPE = 5
    _RANGE_PREFERRED_ID = 6
    _RANGE_LAST_PREFETCH_TYPE = 7
    _RANGE_LAST_PREFETCH_ID = 8


def managed_range_info(buffer):
    """What CUDA keeps of a managed range (``cudaMemRangeGetAttribute``): a
    dict of ``read_mostly`` (bool), ``preferred_location`` and
    ``last_prefetch_location`` (a location as :func:`prefetch` takes it:
    a device ordinal, ``"host"``, ``("host_numa", node)`` or
    ``"host_numa_current"``; None when none is set, or when the range's
    pages disagree), and ``accessed_by`` (the devices advised so, as
    ordinals, and ``"host"``).  ``buffer``: one range, as :func:`prefetch` takes it."""
    cdef Span span
    cdef size_t n
    cdef int mostly = 0, ptype = 0, pid = 0, ltype = 0, lid = 0
    cdef int ndev = 0
    cdef int* devs = NULL
    init_span(&span)
    try:
        n = _one_range(buffer, &span)
        with nogil:
            ndev = rt.get_device_count()
        # One slot more than the devices: the host may be advised too.
        devs = <int*>malloc((ndev + 1) * sizeof(int))
        if devs == NULL:
            raise MemoryError()
        with nogil:
            rt.mem_range_attribute(&mostly, sizeof(int), _RANGE_READ_MOSTLY, span.ptr, n)
            rt.mem_range_attribute(&ptype, sizeof(int), _RANGE_PREFERRED_TYPE, span.ptr, n)
            rt.mem_range_attribute(&pid, sizeof(int), _RANGE_PREFERRED_ID, span.ptr, n)
            rt.mem_range_attribute(&ltype, sizeof(int), _RANGE_LAST_PREFETCH_TYPE, span.ptr, n)
            rt.mem_range_attribute(&lid, sizeof(int), _RANGE_LAST_PREFETCH_ID, span.ptr, n)
            rt.mem_range_attribute(devs, (ndev + 1) * sizeof(int), _RANGE_ACCESSED_BY,
                                   span.ptr, n)
        # Device ordinals; cudaCpuDeviceId (-1): the host; -2: an empty slot.
        accessed = [("host" if devs[i] == -1 else devs[i]) for i in range(ndev + 1)
                    if devs[i] >= -1]
    finally:
        free(devs)
        release_span(&span)
    return {"read_mostly": bool(mostly), "preferred_location": _where(ptype, pid),
            "last_prefetch_location": _where(ltype, lid), "accessed_by": accessed}


cdef object _where(int kind, int ident):
    # A cudaMemLocation as prefetch takes it; None for cudaMemLocationTypeInvalid.
    if kind == cudaMemLocationTypeDevice:
        return ident
    if kind == cudaMemLocationTypeHost:
        return "host"
    if kind == cudaMemLocationTypeHostNuma:
        return ("host_numa", ident)
    if kind == cudaMemLocationTypeHostNumaCurrent:
        return "host_numa_current"
    return None


def _stream_wait_value(Stream stream not None, address, value, op, flush, width):
    if not isinstance(op, str) or op.lower() not in _WAIT_OPS:
        raise ValueError(f"op must be 'geq', 'eq', 'and' or 'nor', got {op!r}")
    _value_op(stream, address, value,
              _WAIT_OPS[op.lower()] | (_WAIT_FLUSH if as_bool(flush, "flush") else 0), width,
              False)


def _stream_write_value(Stream stream not None, address, value, width):
    _value_op(stream, address, value, 0, width, True)
