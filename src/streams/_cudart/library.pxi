# Library management, part of streams._cudart (_cudart.pyx includes it).

cdef int library_load_data(cudaLibrary_t* out, const void* image, bint resident) except -1 nogil:
    guard()
    check(cudaLibraryLoadData(out, image, NULL, NULL, 0, NULL, NULL, 0))
    if not resident:   # the package's built-in kernels stay for the process
        streams_count(STREAMS_CNT_MODULE_CREATED)
        streams_count(STREAMS_CNT_MODULE_LOAD)
    return 0


cdef int library_load_from_file(cudaLibrary_t* out, const char* path) except -1 nogil:
    guard()
    check(cudaLibraryLoadFromFile(out, path, NULL, NULL, 0, NULL, NULL, 0))
    streams_count(STREAMS_CNT_MODULE_CREATED)
    streams_count(STREAMS_CNT_MODULE_LOAD)
    return 0


cdef cudaError_t _sync_devices(unsigned long long devices) noexcept nogil:
    # A library must not go while kernels of it are queued or running: wait
    # for every device one of its kernels was launched on.
    cdef int cur = -1, dev
    cdef cudaError_t err = cudaSuccess, e
    if devices == 0:
        return cudaSuccess
    if cudaGetDevice(&cur) != cudaSuccess:
        return cudaGetLastError()
    for dev in range(64):
        if devices & ((<unsigned long long>1) << dev):
            e = cudaSetDevice(dev)
            if e == cudaSuccess:
                e = cudaDeviceSynchronize()
            if e != cudaSuccess and err == cudaSuccess:
                err = e
    cudaSetDevice(cur)
    return err


cdef int library_unload(cudaLibrary_t lib, unsigned long long devices) except -1 nogil:
    guard()
    check(_sync_devices(devices))
    check(cudaLibraryUnload(lib))
    streams_count(STREAMS_CNT_MODULE_DESTROYED)
    streams_count(STREAMS_CNT_MODULE_UNLOAD)
    return 0


cdef struct _LibraryRelease:
    cudaLibrary_t lib
    unsigned long long devices


cdef void _unload_library_later(void* arg, int kind) noexcept nogil:
    cdef _LibraryRelease* rel = <_LibraryRelease*>arg
    cdef int injected = injected_failure(CLEANUP_LIBRARY)
    cdef cudaError_t err = _sync_devices(rel.devices)
    cdef cudaError_t unload = cudaLibraryUnload(rel.lib)
    if unload != cudaSuccess:
        cudaGetLastError()
        err = unload
    elif err != cudaSuccess:
        cudaGetLastError()
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(CLEANUP_LIBRARY, <const void*>rel.lib, <int>err)
    free(rel)


cdef void release_library(cudaLibrary_t lib, unsigned long long devices) noexcept nogil:
    cdef _LibraryRelease* rel
    cdef int decision = _release_decision()
    streams_count(STREAMS_CNT_MODULE_DESTROYED)
    streams_count(STREAMS_CNT_MODULE_UNLOAD)
    if decision == RELEASE_SKIP:
        return
    rel = <_LibraryRelease*>malloc(sizeof(_LibraryRelease))
    if rel == NULL:
        return   # out of memory: the library stays loaded, which is safe
    rel.lib = lib
    rel.devices = devices
    if decision == RELEASE_NOW:
        streams_release_without_gil(_unload_library_later, <void*>rel, 0)
        _flush_if_gil()
    else:
        streams_defer(_unload_library_later, <void*>rel, 0, NULL)


cdef int library_get_kernel(cudaKernel_t* out, cudaLibrary_t lib,
                            const char* name) except -1 nogil:
    guard()
    return check(cudaLibraryGetKernel(out, lib, name))
