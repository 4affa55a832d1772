# Green contexts through the driver or the runtime, part of
# streams._cudart (_cudart.pyx includes it).

# The runtime's own green-context API (cudaGreenCtxCreate and the
# execution-context calls, CUDA 13.1) where this build's runtime and the
# driver both have it; otherwise the driver's green-context calls (CUDA
# 12.4/12.5), reached through the runtime's entry points at the ABI of
# STREAMS_GREEN_VERSION, so that the CUDA 12 build and a CUDA 13 build on a
# 13.0 driver have them too.  The choice is made once per process, before
# the first context: a context is always destroyed by the API that made it.
cdef extern from "green.h" nogil:
    ctypedef int (*streams_device_get_dev_resource_fn)(int dev, streams_dev_resource* out,
                                                       int type)
    ctypedef int (*streams_sm_split_fn)(streams_dev_resource* result, unsigned int* groups,
                                        const streams_dev_resource* input,
                                        streams_dev_resource* remaining, unsigned int flags,
                                        unsigned int min_count)
    ctypedef int (*streams_generate_desc_fn)(streams_resource_desc* out,
                                             streams_dev_resource* resources, unsigned int n)
    ctypedef int (*streams_green_create_fn)(streams_green_ctx* out, streams_resource_desc desc,
                                            int dev, unsigned int flags)
    ctypedef int (*streams_green_destroy_fn)(streams_green_ctx ctx)
    ctypedef int (*streams_green_stream_create_fn)(void** stream, streams_green_ctx ctx,
                                                   unsigned int flags, int priority)
    ctypedef int (*streams_green_get_resource_fn)(streams_green_ctx ctx,
                                                  streams_dev_resource* out, int type)
    ctypedef int (*streams_stream_get_green_fn)(void* stream, streams_green_ctx* out)
    ctypedef int (*streams_stream_get_resource_fn)(void* stream, streams_dev_resource* out,
                                                   int type)
    ctypedef int (*streams_green_record_event_fn)(streams_green_ctx ctx, void* event)
    enum:
        STREAMS_GREEN_CTX_DEFAULT_STREAM
        STREAMS_STREAM_NON_BLOCKING
        STREAMS_GREEN_VERSION
        STREAMS_STREAM_RESOURCE_VERSION

cdef extern from "green_rt.h" nogil:
    cudaError_t streams_rt_device_sm_resource(int dev, streams_dev_resource* out)
    cudaError_t streams_rt_sm_split(streams_dev_resource* result, unsigned int* groups,
                                    const streams_dev_resource* input,
                                    streams_dev_resource* remaining, unsigned int min_count)
    cudaError_t streams_rt_green_create(streams_green_ctx* out, streams_dev_resource* resource,
                                        int dev)
    cudaError_t streams_rt_green_destroy(streams_green_ctx ctx)
    cudaError_t streams_rt_green_stream_create(cudaStream_t* out, streams_green_ctx ctx,
                                               int priority)
    cudaError_t streams_rt_green_sm_resource(streams_green_ctx ctx, streams_dev_resource* out)
    cudaError_t streams_rt_green_record_event(streams_green_ctx ctx, cudaEvent_t ev)
    enum:
        STREAMS_HAVE_RUNTIME_GREEN
        STREAMS_RUNTIME_GREEN_VERSION

cdef enum:
    _G_GET_RESOURCE
    _G_SPLIT
    _G_DESC
    _G_CREATE
    _G_DESTROY
    _G_STREAM_CREATE
    _G_CTX_RESOURCE
    _G_STREAM_GREEN
    _G_N
cdef const char* _GREEN_NAMES[_G_N]
_GREEN_NAMES[:] = [b"cuDeviceGetDevResource", b"cuDevSmResourceSplitByCount",
                   b"cuDevResourceGenerateDesc", b"cuGreenCtxCreate", b"cuGreenCtxDestroy",
                   b"cuGreenCtxStreamCreate", b"cuGreenCtxGetDevResource",
                   b"cuStreamGetGreenCtx"]
# All resolved, or all NULL; set once, under the GIL (green_require).
cdef void* _green_fns[_G_N]
# The flag is read without the lock (streams_flag_get, acquiring the table
# and _green_runtime, both written before its releasing store).
cdef int _green_resolved = False
cdef bint _green_runtime = False      # the runtime's API serves (decided with _green_resolved)
# cuStreamGetDevResource (CUDA 13.1), tried once: NULL where it is missing;
# the flag is published after the pointer, as _green_resolved.
cdef void* _stream_resource_fn = NULL
cdef int _stream_resource_tried = False


cdef object _green_lock = object()


cdef int green_require() except -1:
    # Resolved once, under the lock on free-threaded builds (the flag is set
    # after the functions it publishes).
    if streams_flag_get(&_green_resolved):
        return 0
    with cython.critical_section(_green_lock):
        return _green_resolve()


cdef int _green_resolve() except -1:
    global _green_resolved
    cdef int driver = 0, runtime = 0
    if streams_flag_get(&_green_resolved):
        return 0
    refuse_forbidden()
    _versions(&driver, &runtime)
    if (STREAMS_HAVE_RUNTIME_GREEN and runtime >= STREAMS_RUNTIME_GREEN_VERSION
            and driver >= STREAMS_RUNTIME_GREEN_VERSION):
        _green_runtime_chosen()
        return 0
    _resolve_driver_table(_GREEN_NAMES, _green_fns, _G_N, STREAMS_GREEN_VERSION,
                          "green contexts need a driver for CUDA 12.5 or newer and streams "
                          "built against a CUDA 12.5 or newer runtime (the driver's "
                          "cuGreenCtxCreate and cuGreenCtxStreamCreate, reached with "
                          "cudaGetDriverEntryPointByVersion)")
    streams_flag_set(&_green_resolved, True)     # last: it publishes the table
    return 0


cdef int _resolve_driver_table(const char** names, void** table, int n, int version,
                               str needs) except -1:
    """Fill ``table`` with the driver's ``names`` at the ABI of CUDA
    ``version``: all of them, or none and NotImplementedError saying what
    ``needs`` and what this driver and build have.  The caller publishes
    the table (its resolved flag) after this returns."""
    cdef void* fns[32]
    cdef int driver = 0, runtime = 0, i
    cdef cudaError_t err = cudaSuccess
    if n > 32:
        raise ValueError("at most 32 driver functions per table")
    _versions(&driver, &runtime)
    with nogil:
        for i in range(n):
            fns[i] = NULL
            if err == cudaSuccess:
                if driver >= version:
                    err = streams_get_driver_entry_at(names[i], &fns[i], version)
                else:
                    err = cudaErrorNotSupported
        if err != cudaSuccess:
            cudaGetLastError()
    if err != cudaSuccess:
        raise NotImplementedError(
            f"{needs}: this driver supports CUDA {_version_str(driver)}, this build uses the "
            f"CUDA {_version_str(runtime)} runtime (CUDA said: {error_name(<int>err)})")
    for i in range(n):
        table[i] = fns[i]
    return 0


cdef void _green_runtime_chosen() noexcept:
    global _green_runtime, _green_resolved
    _green_runtime = True
    streams_flag_set(&_green_resolved, True)     # after the choice it publishes


cdef inline int _green_check(int result) except -1 nogil:
    # CUresult and cudaError_t share the codes these calls return.
    return check(<cudaError_t>result)


cdef int _green_ready() except -1 nogil:
    guard()
    if not streams_flag_get(&_green_resolved):
        with gil:
            green_require()
    return 0


cdef int device_sm_resource(int dev, streams_dev_resource* out) except -1 nogil:
    _green_ready()
    memset(out, 0, sizeof(streams_dev_resource))
    # The driver call needs the driver initialised, which the runtime does
    # with the device's primary context; a green context made later shares it.
    check(cudaInitDevice(dev, 0, 0))
    if _green_runtime:
        return check(streams_rt_device_sm_resource(dev, out))
    return _green_check((<streams_device_get_dev_resource_fn>_green_fns[_G_GET_RESOURCE])(
        dev, out, STREAMS_DEV_RESOURCE_TYPE_SM))


cdef int sm_resource_split(streams_dev_resource* result, unsigned int* groups,
                           const streams_dev_resource* input, streams_dev_resource* remaining,
                           unsigned int min_count) except -1 nogil:
    _green_ready()
    if remaining != NULL:
        memset(remaining, 0, sizeof(streams_dev_resource))
    if result != NULL:
        memset(result, 0, sizeof(streams_dev_resource) * groups[0])
    if _green_runtime:
        return check(streams_rt_sm_split(result, groups, input, remaining, min_count))
    return _green_check((<streams_sm_split_fn>_green_fns[_G_SPLIT])(
        result, groups, input, remaining, 0, min_count))


cdef int green_ctx_create(streams_green_ctx* out, streams_dev_resource* resource,
                          int dev) except -1 nogil:
    cdef streams_resource_desc desc = NULL
    _green_ready()
    check(cudaInitDevice(dev, 0, 0))
    if _green_runtime:
        check(streams_rt_green_create(out, resource, dev))
        streams_count(STREAMS_CNT_GREEN_CTX_CREATED)
        return 0
    # A descriptor is the driver's: nothing to destroy.
    _green_check((<streams_generate_desc_fn>_green_fns[_G_DESC])(&desc, resource, 1))
    # CU_GREEN_CTX_DEFAULT_STREAM is required (CUDA 12.4 to 13).
    _green_check((<streams_green_create_fn>_green_fns[_G_CREATE])(
        out, desc, dev, STREAMS_GREEN_CTX_DEFAULT_STREAM))
    streams_count(STREAMS_CNT_GREEN_CTX_CREATED)
    return 0


cdef int green_ctx_stream_create(cudaStream_t* out, streams_green_ctx ctx,
                                 int priority) except -1 nogil:
    _green_ready()
    if _green_runtime:
        check(streams_rt_green_stream_create(out, ctx, priority))
        streams_count(STREAMS_CNT_STREAM_CREATED)
        return 0
    # CU_STREAM_NON_BLOCKING is the only flag the driver takes.
    _green_check((<streams_green_stream_create_fn>_green_fns[_G_STREAM_CREATE])(
        <void**>out, ctx, STREAMS_STREAM_NON_BLOCKING, priority))
    streams_count(STREAMS_CNT_STREAM_CREATED)
    return 0


cdef int green_ctx_sm_count(streams_green_ctx ctx, unsigned int* out) except -1 nogil:
    cdef streams_dev_resource res
    _green_ready()
    memset(&res, 0, sizeof(res))
    if _green_runtime:
        check(streams_rt_green_sm_resource(ctx, &res))
    else:
        _green_check((<streams_green_get_resource_fn>_green_fns[_G_CTX_RESOURCE])(
            ctx, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
    out[0] = res.sm_count
    return 0


cdef int stream_sm_count(cudaStream_t s, long long* out) except -1 nogil:
    global _stream_resource_fn, _stream_resource_tried
    cdef streams_dev_resource res
    cdef streams_green_ctx g = NULL
    cdef void* fn = NULL
    cdef int driver = 0
    guard()
    out[0] = -1
    if not streams_flag_get(&_stream_resource_tried):
        if cudaDriverGetVersion(&driver) != cudaSuccess:
            cudaGetLastError()
        elif driver >= STREAMS_STREAM_RESOURCE_VERSION:
            if streams_get_driver_entry_at(b"cuStreamGetDevResource", &fn,
                                           STREAMS_STREAM_RESOURCE_VERSION) != cudaSuccess:
                cudaGetLastError()
                fn = NULL
        # Racing resolutions write the same; the flag last, releasing it.
        streams_ptr_store(&_stream_resource_fn, fn)
        streams_flag_set(&_stream_resource_tried, True)
    fn = streams_ptr_load(&_stream_resource_fn)
    memset(&res, 0, sizeof(res))
    if fn != NULL:
        # Any stream's share, green or not.
        _green_check((<streams_stream_get_resource_fn>fn)(
            <void*>s, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
        out[0] = res.sm_count
        return 0
    with gil:
        try:
            green_require()
        except NotImplementedError:
            return 0    # no green contexts at all: an ordinary stream
    if _green_runtime:
        return 0        # (the runtime's choice implies a driver with the call above)
    _green_check((<streams_stream_get_green_fn>_green_fns[_G_STREAM_GREEN])(<void*>s, &g))
    if g != NULL:
        _green_check((<streams_green_get_resource_fn>_green_fns[_G_CTX_RESOURCE])(
            g, &res, STREAMS_DEV_RESOURCE_TYPE_SM))
        out[0] = res.sm_count
    return 0
