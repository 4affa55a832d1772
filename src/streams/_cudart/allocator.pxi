# Stream-ordered memory allocator: asynchronous allocations and memory
# pools; part of streams._cudart (_cudart.pyx includes it).

cdef int malloc_async(void** out, size_t n, cudaStream_t s) except -1 nogil:
    guard()
    check(cudaMallocAsync(out, n, s))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int free_async(void* p, cudaStream_t s) except -1 nogil:
    guard()
    check(cudaFreeAsync(p, s))
    streams_count(STREAMS_CNT_MEMORY_FREE)
    streams_note_async_free()
    return 0


cdef unsigned long long async_frees() noexcept nogil:
    return streams_async_frees_so_far()


# ---- memory pools ------------------------------------------------------------------------

# Stream-ordered pools and their IPC, batched copies, the driver's stream
# memory operations (reached through cudart's entry points: no libcuda link)
# and the asyncio doorbell host function.

cdef int mem_pool_create(cudaMemPool_t* out, int dev, bint ipc, size_t max_size) except -1 nogil:
    cdef cudaMemPoolProps props
    guard()
    memset(&props, 0, sizeof(props))
    props.allocType = cudaMemAllocationTypePinned
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor if ipc else cudaMemHandleTypeNone
    props.location.type = cudaMemLocationTypeDevice
    props.location.id = dev
    props.maxSize = max_size
    check(cudaMemPoolCreate(out, &props))
    streams_count(STREAMS_CNT_MEMPOOL_CREATED)
    return 0


cdef int device_get_default_mem_pool(cudaMemPool_t* out, int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGetDefaultMemPool(out, dev))


cdef int malloc_from_pool_async(void** out, size_t n, cudaMemPool_t pool,
                                cudaStream_t s) except -1 nogil:
    guard()
    check(cudaMallocFromPoolAsync(out, n, pool, s))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0


cdef int mem_pool_trim_to(cudaMemPool_t pool, size_t keep) except -1 nogil:
    guard()
    return check(cudaMemPoolTrimTo(pool, keep))


cdef int mem_pool_get_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                void* value) except -1 nogil:
    guard()
    return check(cudaMemPoolGetAttribute(pool, attr, value))


cdef int mem_pool_set_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                void* value) except -1 nogil:
    guard()
    return check(cudaMemPoolSetAttribute(pool, attr, value))


cdef int mem_pool_set_access(cudaMemPool_t pool, int dev,
                             cudaMemAccessFlags flags) except -1 nogil:
    cdef cudaMemAccessDesc desc
    guard()
    memset(&desc, 0, sizeof(desc))
    desc.location.type = cudaMemLocationTypeDevice
    desc.location.id = dev
    desc.flags = flags
    return check(cudaMemPoolSetAccess(pool, &desc, 1))


cdef int mem_pool_get_access(cudaMemPool_t pool, int dev,
                             cudaMemAccessFlags* out) except -1 nogil:
    cdef cudaMemLocation loc
    guard()
    memset(&loc, 0, sizeof(loc))
    loc.type = cudaMemLocationTypeDevice
    loc.id = dev
    return check(cudaMemPoolGetAccess(out, pool, &loc))


cdef int mem_pool_export_fd(cudaMemPool_t pool, int* fd) except -1 nogil:
    guard()
    return check(cudaMemPoolExportToShareableHandle(<void*>fd, pool,
                                                    cudaMemHandleTypePosixFileDescriptor, 0))


cdef int mem_pool_import_fd(cudaMemPool_t* out, int fd) except -1 nogil:
    guard()
    # The POSIX handle type passes the descriptor itself, as the pointer.
    check(cudaMemPoolImportFromShareableHandle(out, <void*><uintptr_t>fd,
                                               cudaMemHandleTypePosixFileDescriptor, 0))
    streams_count(STREAMS_CNT_MEMPOOL_CREATED)
    return 0


cdef int mem_pool_export_pointer(cudaMemPoolPtrExportData* out, void* p) except -1 nogil:
    guard()
    return check(cudaMemPoolExportPointer(out, p))


cdef int mem_pool_import_pointer(void** out, cudaMemPool_t pool,
                                 cudaMemPoolPtrExportData* data) except -1 nogil:
    guard()
    check(cudaMemPoolImportPointer(out, pool, data))
    streams_count(STREAMS_CNT_MEMORY_ALLOC)
    return 0
