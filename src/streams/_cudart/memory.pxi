# Memory management, and stream memory operations: part of
# streams._cudart (_cudart.pyx includes it).

cdef int host_alloc(void** out, size_t n) except -1 nogil:
    guard()
    check(cudaHostAlloc(out, n, cudaHostAllocDefault))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int malloc_managed(void** out, size_t n, unsigned int flags) except -1 nogil:
    guard()
    check(cudaMallocManaged(out, n, flags))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int pointer_get_attributes(cudaPointerAttributes* out, const void* p) except -1 nogil:
    """The cudaError_t of cudaPointerGetAttributes (0: ``out`` is filled)."""
    cdef cudaError_t err
    guard()
    err = cudaPointerGetAttributes(out, p)
    if err != cudaSuccess:
        cudaGetLastError()
    return <int>err


cdef int memset_async(void* p, int value, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemsetAsync(p, value, n, s))


cdef int memcpy_async(void* dst, const void* src, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s))


cdef int memcpy_batch_async(void** dsts, void** srcs, size_t* sizes, size_t count,
                            cudaStream_t s) except -1 nogil:
    guard()
    if not STREAMS_HAVE_MEMCPY_BATCH:
        return -2
    return check(streams_cudaMemcpyBatchAsync(dsts, srcs, sizes, count, s))


cdef int mem_prefetch_async(void* p, size_t n, cudaMemLocation loc, cudaStream_t s) except -1 nogil:
    guard()
    return check(streams_cudaMemPrefetchAsync(p, n, loc, 0, s))


cdef int mem_advise(void* p, size_t n, int advice, cudaMemLocation loc) except -1 nogil:
    guard()
    return check(streams_cudaMemAdvise(p, n, advice, loc))


cdef int mem_prefetch_batch_async(void** ps, size_t* ns, size_t count, cudaMemLocation* locs,
                                  bint discard, cudaStream_t s) except -1 nogil:
    cdef size_t first = 0      # every range goes to locs[0]
    guard()
    if not STREAMS_HAVE_MEM_BATCH:
        return -2
    return check(streams_cudaMemPrefetchBatchAsync(ps, ns, count, locs, &first, 1, discard, s))


cdef int mem_discard_batch_async(void** ps, size_t* ns, size_t count, cudaStream_t s) except -1 nogil:
    guard()
    if not STREAMS_HAVE_MEM_BATCH:
        return -2
    return check(streams_cudaMemDiscardBatchAsync(ps, ns, count, s))


cdef bint mem_batch_available() noexcept nogil:
    return STREAMS_HAVE_MEM_BATCH


cdef int mem_range_attribute(void* out, size_t size, int attribute, void* p,
                             size_t n) except -1 nogil:
    guard()
    return check(cudaMemRangeGetAttribute(out, size, attribute, p, n))


# ---- stream memory operations (the driver's, through its entry points) -------------------

# The driver functions reached through the entry-point table, in the order
# of _DRIVER_NAMES; each 32-bit value operation is followed by its 64-bit
# form.  Resolved at first use and published with one atomic store each (a
# racing second resolution writes the same), so a thread without the GIL
# reads either NULL or the whole pointer.
cdef enum _DriverFn:
    DRIVER_WAIT_VALUE32
    DRIVER_WAIT_VALUE64
    DRIVER_WRITE_VALUE32
    DRIVER_WRITE_VALUE64
    DRIVER_NODE_GET_TYPE
    DRIVER_DEVICE_GET
    DRIVER_DEVICE_GET_ATTRIBUTE
    DRIVER_FN_COUNT


cdef void* _driver_fns[DRIVER_FN_COUNT]


cdef const char* _DRIVER_NAMES[DRIVER_FN_COUNT]
_DRIVER_NAMES[:] = [b"cuStreamWaitValue32", b"cuStreamWaitValue64", b"cuStreamWriteValue32",
                    b"cuStreamWriteValue64", b"cuGraphNodeGetType", b"cuDeviceGet",
                    b"cuDeviceGetAttribute"]


ctypedef int (*_device_get_fn)(int* out, int ordinal) noexcept nogil
ctypedef int (*_device_get_attribute_fn)(int* out, int attribute, int device) noexcept nogil
# CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (cuda.h): the runtime's
# enum has no name for it (cudaDevAttrReserved122).
cdef int _CU_ATTR_64_BIT_MEMOPS = 122


ctypedef int (*_node_type_fn)(cudaGraphNode_t node, int* out) noexcept nogil


cdef void* _entry_once(void** slot, const char* name) except NULL nogil:
    # The driver's `name`, resolved at its first use and published in `slot`
    # with one atomic store (a racing second resolution writes the same).
    cdef void* fn = streams_ptr_load(slot)
    if fn == NULL:
        check(streams_get_driver_entry(name, &fn))
        streams_ptr_store(slot, fn)
    return fn


cdef void* _driver_fn(int which) except NULL nogil:
    return _entry_once(&_driver_fns[which], _DRIVER_NAMES[which])


cdef int _value_op(int which, cudaStream_t s, unsigned long long addr,
                   unsigned long long value, unsigned int flags, bint wide) except -1 nogil:
    cdef void* fn
    cdef int dev = 0
    guard()
    fn = _driver_fn(which + (1 if wide else 0))
    # The driver call needs a current context, which a thread gets from
    # the runtime only at its first call that uses the device: bind the
    # current device's primary context now (a no-op when it is bound).
    check(cudaGetDevice(&dev))
    check(cudaSetDevice(dev))
    if wide:
        return check(<cudaError_t>(<streams_stream_value64_fn>fn)(s, addr, value, flags))
    return check(<cudaError_t>(<streams_stream_value32_fn>fn)(s, addr, <unsigned int>value,
                                                             flags))


cdef int stream_wait_value(cudaStream_t s, unsigned long long addr, unsigned long long value,
                           unsigned int flags, bint wide) except -1 nogil:
    return _value_op(DRIVER_WAIT_VALUE32, s, addr, value, flags, wide)


cdef int stream_write_value(cudaStream_t s, unsigned long long addr, unsigned long long value,
                            unsigned int flags, bint wide) except -1 nogil:
    return _value_op(DRIVER_WRITE_VALUE32, s, addr, value, flags, wide)


cdef int device_has_64_bit_memops(int dev) except -1 nogil:
    cdef int cu_dev = 0
    cdef int value = 0
    guard()
    check(<cudaError_t>(<_device_get_fn>_driver_fn(DRIVER_DEVICE_GET))(&cu_dev, dev))
    check(<cudaError_t>(<_device_get_attribute_fn>_driver_fn(DRIVER_DEVICE_GET_ATTRIBUTE))(
        &value, _CU_ATTR_64_BIT_MEMOPS, cu_dev))
    return 1 if value else 0


# ---- host memory registered for the GPU (a TimelineSemaphore's page) --------------------

cdef int host_register(void* p, size_t n, void** dptr) except -1 nogil:
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef cudaError_t err
    guard()
    check(cudaThreadExchangeStreamCaptureMode(&mode))
    err = cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable)
    if err == cudaSuccess:
        err = cudaHostGetDevicePointer(dptr, p, 0)
        if err != cudaSuccess:
            cudaGetLastError()
            cudaHostUnregister(p)
    cudaThreadExchangeStreamCaptureMode(&mode)
    check(err)
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef struct _MappedPage:
    void* p
    size_t n
    bint registered


cdef cudaError_t _unregister_relaxed(void* p) noexcept nogil:
    # As _release_memory_relaxed: another thread's global capture would
    # refuse the call, and the refusal would invalidate that capture.
    cdef cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed
    cdef cudaError_t err
    if cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess:
        cudaGetLastError()
        return cudaHostUnregister(p)
    err = cudaHostUnregister(p)
    cudaThreadExchangeStreamCaptureMode(&mode)
    return err


cdef cudaError_t _unmap_page_now(void* p, size_t n, bint registered) noexcept nogil:
    # Unregistered first: CUDA must not keep a registration of pages that
    # are gone.  Unmapped whatever CUDA answered.
    cdef cudaError_t err = cudaSuccess
    if registered:
        err = _unregister_relaxed(p)
        if err != cudaSuccess:
            cudaGetLastError()
        streams_count(STREAMS_CNT_MEMORY_FREE)
    munmap(p, n)
    return err


cdef void _unmap_page_quietly(void* arg, int kind) noexcept nogil:
    # A parked or deferred release (or one now): never raises, a failure
    # becomes a CudaWarning (cleanup_failed).
    cdef _MappedPage* page = <_MappedPage*>arg
    cdef int injected = injected_failure(CLEANUP_HOST_REGISTRATION) if page.registered else 0
    cdef cudaError_t err = _unmap_page_now(page.p, page.n, page.registered)
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(CLEANUP_HOST_REGISTRATION, page.p, <int>err)
    free(page)


cdef bint _park_page(void* p, size_t n, bint registered, void* marks) noexcept nogil:
    # Parked until the marks are done (the parked list is kept with the GIL
    # held); False without memory to park.
    cdef _MappedPage* page = <_MappedPage*>malloc(sizeof(_MappedPage))
    cdef int failed
    if page == NULL:
        return False
    page.p = p
    page.n = n
    page.registered = registered
    with gil:
        failed = streams_park_release(<streams_marks_t*>marks, _unmap_page_quietly, page, 0)
    if failed:
        free(page)
    return failed == 0


cdef int destroy_mapped_page(void* p, size_t n, bint registered, void* marks) except -1 nogil:
    # A GPU operation still queued may still read or write the page: parked.
    guard()
    if marks != NULL and not streams_marks_done(<streams_marks_t*>marks):
        if _park_page(p, n, registered, marks):
            return 0
        # No memory to park: the page stays, as a release that was skipped.
        streams_marks_free(<streams_marks_t*>marks)
        return 0
    streams_marks_free(<streams_marks_t*>marks)
    return check(_unmap_page_now(p, n, registered))


cdef void release_mapped_page(void* p, size_t n, bint registered, void* marks) noexcept nogil:
    cdef int decision = _release_decision()
    cdef _MappedPage* page
    if decision == RELEASE_SKIP:
        return
    if marks != NULL and (decision == RELEASE_DEFER or not marks_done_released(marks)):
        # Deferred (inside a host callback) the marks cannot be queried:
        # parked, and the next safe drain looks.
        _park_page(p, n, registered, marks)
        return
    marks_free_released(marks)
    page = <_MappedPage*>malloc(sizeof(_MappedPage))
    if page == NULL:
        return
    page.p = p
    page.n = n
    page.registered = registered
    if decision == RELEASE_DEFER:
        streams_defer(_unmap_page_quietly, page, 0, NULL)
    else:
        streams_release_without_gil(_unmap_page_quietly, page, 0)
        _flush_if_gil()
