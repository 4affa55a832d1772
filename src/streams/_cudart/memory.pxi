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
    DRIVER_FN_COUNT


cdef void* _driver_fns[DRIVER_FN_COUNT]


cdef const char* _DRIVER_NAMES[DRIVER_FN_COUNT]
_DRIVER_NAMES[:] = [b"cuStreamWaitValue32", b"cuStreamWaitValue64", b"cuStreamWriteValue32",
                    b"cuStreamWriteValue64", b"cuGraphNodeGetType"]


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
