# Adopted kernels (Kernel.from_handle) through the driver, part of
# streams._cudart (_cudart.pyx includes it).

ctypedef int (*_func_get_name_fn)(const char** name, const void* func) noexcept nogil
# Looked up at first use, from any thread: the pointer is stored first and
# the state after it, both atomically (release), and read state first, then
# pointer (acquire), so a reader that sees "found" sees the pointer too.
# Racing lookups store the same values.
cdef void* _get_name_ptr[2]
cdef int _get_name_state[2]        # 0 not looked up, 1 found, 2 missing
_get_name_ptr[0] = NULL
_get_name_ptr[1] = NULL
_get_name_state[0] = 0
_get_name_state[1] = 0


cdef void* _driver_entry_since(const char* symbol, unsigned int version) noexcept nogil:
    # A driver function newer than CUDA 12.0: asked for at the ABI of the
    # version that introduced it (at 12.0's, cudaGetDriverEntryPointByVersion
    # answers that it is not there yet); a runtime older than 12.5 has no
    # versioned lookup, and its cudaGetDriverEntryPoint gives the newest.
    # NULL where the driver lacks it.
    cdef void* fn = NULL
    if streams_get_driver_entry_at(symbol, &fn, version) == cudaSuccess and fn != NULL:
        return fn
    cudaGetLastError()
    fn = NULL
    if streams_get_driver_entry(symbol, &fn) == cudaSuccess and fn != NULL:
        return fn
    cudaGetLastError()
    return NULL


cdef int func_get_name(const void* func, bint is_kernel, const char** out) except -1 nogil:
    cdef void* fn = NULL
    cdef int which = 1 if is_kernel else 0
    cdef int r
    guard()
    if streams_flag_get(&_get_name_state[which]) == 0:
        fn = _driver_entry_since(b"cuKernelGetName" if is_kernel else b"cuFuncGetName", 12030)
        if fn != NULL:
            streams_ptr_store(&_get_name_ptr[which], fn)
            streams_flag_set(&_get_name_state[which], 1)
        else:
            streams_flag_set(&_get_name_state[which], 2)
    if streams_flag_get(&_get_name_state[which]) != 1:
        return 1
    fn = streams_ptr_load(&_get_name_ptr[which])
    out[0] = NULL
    r = (<_func_get_name_fn>fn)(out, func)
    if r != 0 or out[0] == NULL:
        return 1
    return 0


cdef void sync_devices_quietly(unsigned long long devices) noexcept nogil:
    cdef cudaError_t err
    cdef int injected
    if devices == 0 or _release_decision() != RELEASE_NOW:
        return
    injected = injected_failure(CLEANUP_DEVICE_SYNC)
    err = _sync_devices(devices)
    if err != cudaSuccess:
        cudaGetLastError()
    if injected:
        err = <cudaError_t>injected
    if err != cudaSuccess:
        cleanup_failed(CLEANUP_DEVICE_SYNC, <const void*><uintptr_t>devices, <int>err)


# ---- CUfunction handles, through the driver ----
# The driver's structs, as cuda.h lays them out (CUlaunchConfig;
# CUDA_KERNEL_NODE_PARAMS_v2, the ABI of the 12.0 entry points).
cdef struct _CULaunchConfig:
    unsigned int gridDimX, gridDimY, gridDimZ
    unsigned int blockDimX, blockDimY, blockDimZ
    unsigned int sharedMemBytes
    void* hStream
    void* attrs
    unsigned int numAttrs

cdef struct _CUKernelNodeParams:
    void* func
    unsigned int gridDimX, gridDimY, gridDimZ
    unsigned int blockDimX, blockDimY, blockDimZ
    unsigned int sharedMemBytes
    void** kernelParams
    void** extra
    void* kern
    void* ctx

ctypedef int (*_cu_launch_ex_fn)(const _CULaunchConfig* config, const void* f, void** params,
                                 void** extra) noexcept nogil
ctypedef int (*_cu_func_get_attribute_fn)(int* out, int attrib, const void* f) noexcept nogil
ctypedef int (*_cu_func_set_attribute_fn)(const void* f, int attrib, int value) noexcept nogil
ctypedef int (*_cu_func_get_param_info_fn)(const void* f, size_t index, size_t* offset,
                                           size_t* size) noexcept nogil
ctypedef int (*_cu_graph_add_kernel_fn)(cudaGraphNode_t* out, cudaGraph_t g,
                                        const cudaGraphNode_t* deps, size_t n,
                                        const _CUKernelNodeParams* params) noexcept nogil
ctypedef int (*_cu_exec_kernel_set_fn)(cudaGraphExec_t ex, cudaGraphNode_t node,
                                       const _CUKernelNodeParams* params) noexcept nogil

cdef enum:
    _FN_LAUNCH_EX
    _FN_GET_ATTRIBUTE
    _FN_SET_ATTRIBUTE
    _FN_GET_PARAM_INFO
    _FN_GRAPH_ADD_KERNEL
    _FN_EXEC_KERNEL_SET
    _FN_COUNT
# Resolved at first use, each published with one atomic store (a racing
# second resolution writes the same pointer): two threads launching an
# adopted CUfunction for the first time read NULL or the whole pointer.
cdef void* _function_fns[_FN_COUNT]
memset(_function_fns, 0, sizeof(_function_fns))
cdef const char* _FUNCTION_FN_NAMES[_FN_COUNT]
_FUNCTION_FN_NAMES[:] = [b"cuLaunchKernelEx", b"cuFuncGetAttribute", b"cuFuncSetAttribute",
                         b"cuFuncGetParamInfo", b"cuGraphAddKernelNode",
                         b"cuGraphExecKernelNodeSetParams"]
# CUfunction_attribute (cuda.h)
cdef enum:
    _CU_FUNC_MAX_THREADS = 0
    _CU_FUNC_SHARED_SIZE = 1
    _CU_FUNC_CONST_SIZE = 2
    _CU_FUNC_LOCAL_SIZE = 3
    _CU_FUNC_NUM_REGS = 4
    _CU_FUNC_PTX_VERSION = 5
    _CU_FUNC_BINARY_VERSION = 6
    _CU_FUNC_MAX_DYNAMIC_SHARED = 8


cdef void* _function_fn(int which) except NULL nogil:
    return _entry_once(&_function_fns[which], _FUNCTION_FN_NAMES[which])


cdef int launch_function(const cudaLaunchConfig_t* config, const void* func,
                         void** args) except -1 nogil:
    cdef _CULaunchConfig cfg
    cdef void* fn
    guard()
    if config.dynamicSmemBytes >> 32:
        with gil:
            raise ValueError(f"shared_mem={config.dynamicSmemBytes} does not fit a C unsigned "
                             "int")
    fn = _function_fn(_FN_LAUNCH_EX)
    _bind_primary_context()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (config.gridDim.x, config.gridDim.y,
                                                config.gridDim.z)
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (config.blockDim.x, config.blockDim.y,
                                                   config.blockDim.z)
    cfg.sharedMemBytes = <unsigned int>config.dynamicSmemBytes
    cfg.hStream = <void*>config.stream
    cfg.attrs = <void*>config.attrs
    cfg.numAttrs = config.numAttrs
    return check(<cudaError_t>(<_cu_launch_ex_fn>fn)(&cfg, func, args, NULL))


cdef int _function_attribute(int* out, int attrib, const void* func) except -1 nogil:
    return check(<cudaError_t>(<_cu_func_get_attribute_fn>_function_fn(_FN_GET_ATTRIBUTE))(
        out, attrib, func))


cdef int function_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil:
    cdef int v = 0
    guard()
    _bind_primary_context()
    memset(out, 0, sizeof(cudaFuncAttributes))
    _function_attribute(&v, _CU_FUNC_SHARED_SIZE, func)
    out.sharedSizeBytes = <size_t>v
    _function_attribute(&v, _CU_FUNC_CONST_SIZE, func)
    out.constSizeBytes = <size_t>v
    _function_attribute(&v, _CU_FUNC_LOCAL_SIZE, func)
    out.localSizeBytes = <size_t>v
    _function_attribute(&out.maxThreadsPerBlock, _CU_FUNC_MAX_THREADS, func)
    _function_attribute(&out.numRegs, _CU_FUNC_NUM_REGS, func)
    _function_attribute(&out.ptxVersion, _CU_FUNC_PTX_VERSION, func)
    _function_attribute(&out.binaryVersion, _CU_FUNC_BINARY_VERSION, func)
    _function_attribute(&out.maxDynamicSharedSizeBytes, _CU_FUNC_MAX_DYNAMIC_SHARED, func)
    return 0


cdef int function_set_max_dynamic_shared(const void* func, int value) except -1 nogil:
    guard()
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_func_set_attribute_fn>_function_fn(_FN_SET_ATTRIBUTE))(
        func, _CU_FUNC_MAX_DYNAMIC_SHARED, value))


cdef int function_get_param_info(const void* func, size_t index, size_t* offset,
                                 size_t* size) except -1 nogil:
    cdef void* fn = streams_ptr_load(&_function_fns[_FN_GET_PARAM_INFO])
    cdef int r
    guard()
    if fn == NULL:
        fn = _driver_entry_since(_FUNCTION_FN_NAMES[_FN_GET_PARAM_INFO], 12040)
        if fn == NULL:
            return 2     # a driver older than CUDA 12.4
        streams_ptr_store(&_function_fns[_FN_GET_PARAM_INFO], fn)
    _bind_primary_context()
    r = (<_cu_func_get_param_info_fn>fn)(func, index, offset, size)
    if r == 0:
        return 0
    if r == 1:          # CUDA_ERROR_INVALID_VALUE: past the last parameter
        return 1
    return check(<cudaError_t>r)


cdef void _function_node_params(_CUKernelNodeParams* out,
                                const cudaKernelNodeParams* p) noexcept nogil:
    out.func = p.func
    out.gridDimX, out.gridDimY, out.gridDimZ = p.gridDim.x, p.gridDim.y, p.gridDim.z
    out.blockDimX, out.blockDimY, out.blockDimZ = p.blockDim.x, p.blockDim.y, p.blockDim.z
    out.sharedMemBytes = p.sharedMemBytes
    out.kernelParams = p.kernelParams
    out.extra = NULL
    out.kern = NULL
    out.ctx = NULL


cdef int graph_add_function_node(cudaGraphNode_t* out, cudaGraph_t g,
                                 const cudaGraphNode_t* deps, size_t n,
                                 const cudaKernelNodeParams* params) except -1 nogil:
    cdef _CUKernelNodeParams p
    guard()
    _function_node_params(&p, params)
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_graph_add_kernel_fn>_function_fn(_FN_GRAPH_ADD_KERNEL))(
        out, g, deps, n, &p))


cdef int graph_exec_function_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                             const cudaKernelNodeParams* params) except -1 nogil:
    cdef _CUKernelNodeParams p
    guard()
    _function_node_params(&p, params)
    _bind_primary_context()
    return check(<cudaError_t>(<_cu_exec_kernel_set_fn>_function_fn(_FN_EXEC_KERNEL_SET))(
        ex, node, &p))
