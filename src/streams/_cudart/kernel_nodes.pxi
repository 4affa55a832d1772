# Kernel nodes through the driver, part of streams._cudart (_cudart.pyx
# includes it).

# The driver's kernel-node calls, at the ABI of CUDA 12.4 (the parameter
# layout of a kernel came then), resolved together at first use.
cdef extern from "kernel_node.h" nogil:
    ctypedef int (*streams_kernel_node_get_fn)(void* node, streams_kernel_node_params* out)
    ctypedef int (*streams_exec_kernel_node_set_fn)(void* ex, void* node,
                                                    const streams_kernel_node_params* params)
    ctypedef int (*streams_kernel_node_set_fn)(void* node,
                                               const streams_kernel_node_params* params)
    ctypedef int (*streams_param_info_fn)(void* func, size_t index, size_t* offset,
                                          size_t* size)
    ctypedef int (*streams_get_name_fn)(const char** name, void* func)
    ctypedef int (*streams_func_attribute_fn)(int* value, int attribute, void* func)
    ctypedef int (*streams_kernel_attribute_fn)(int* value, int attribute, void* kernel, int dev)
    ctypedef int (*streams_kernel_function_fn)(void** func, void* kernel)
    enum:
        STREAMS_KERNEL_NODE_VERSION

cdef enum:
    _K_GET
    _K_EXEC_SET
    _K_SET
    _K_FUNC_PARAM
    _K_KERNEL_PARAM
    _K_FUNC_NAME
    _K_KERNEL_NAME
    _K_FUNC_ATTR
    _K_KERNEL_ATTR
    _K_KERNEL_FUNC
    _K_CTX_CURRENT
    _K_PRIMARY_STATE
    _K_PRIMARY_RETAIN
    _K_PRIMARY_RELEASE
    _K_N
cdef const char* _KERNEL_NODE_NAMES[_K_N]
_KERNEL_NODE_NAMES[:] = [b"cuGraphKernelNodeGetParams", b"cuGraphExecKernelNodeSetParams",
                         b"cuGraphKernelNodeSetParams", b"cuFuncGetParamInfo",
                         b"cuKernelGetParamInfo", b"cuFuncGetName", b"cuKernelGetName",
                         b"cuFuncGetAttribute", b"cuKernelGetAttribute",
                         b"cuKernelGetFunction", b"cuCtxGetCurrent",
                         b"cuDevicePrimaryCtxGetState", b"cuDevicePrimaryCtxRetain",
                         b"cuDevicePrimaryCtxRelease"]
ctypedef int (*_ctx_get_current_fn)(void** ctx) noexcept nogil
ctypedef int (*_primary_ctx_state_fn)(int dev, unsigned int* flags, int* active) noexcept nogil
ctypedef int (*_primary_ctx_retain_fn)(void** ctx, int dev) noexcept nogil
ctypedef int (*_primary_ctx_release_fn)(int dev) noexcept nogil
cdef void* _kernel_node_fns[_K_N]
# Read without the lock: streams_flag_get acquires the table written before.
cdef int _kernel_node_resolved = False


cdef object _kernel_node_lock = object()


cdef int kernel_node_require() except -1:
    if streams_flag_get(&_kernel_node_resolved):
        return 0
    with cython.critical_section(_kernel_node_lock):
        return _kernel_node_resolve()


cdef int _kernel_node_resolve() except -1:
    global _kernel_node_resolved
    if streams_flag_get(&_kernel_node_resolved):
        return 0
    refuse_forbidden()
    _resolve_driver_table(_KERNEL_NODE_NAMES, _kernel_node_fns, _K_N,
                          STREAMS_KERNEL_NODE_VERSION,
                          "reading and changing the kernel nodes of any graph needs a driver "
                          "for CUDA 12.4 or newer and streams built against a CUDA 12.5 or "
                          "newer runtime (the driver's cuGraphKernelNodeGetParams and "
                          "cuFuncGetParamInfo, reached with cudaGetDriverEntryPointByVersion)")
    streams_flag_set(&_kernel_node_resolved, True)   # last: it publishes the table
    return 0


cdef int _bind_primary_context() except -1 nogil:
    # A driver call runs in the thread's current context, which a thread
    # gets from the runtime only at its first call that uses the device:
    # bind the current device's primary context (a no-op when it is bound).
    cdef int dev = 0
    check(cudaGetDevice(&dev))
    return check(cudaSetDevice(dev))


cdef int _kernel_node_ready() except -1 nogil:
    guard()
    if not streams_flag_get(&_kernel_node_resolved):
        with gil:
            kernel_node_require()
    return _bind_primary_context()


cdef int kernel_node_get(cudaGraphNode_t node, streams_kernel_node_params* out) except -1 nogil:
    _kernel_node_ready()
    memset(out, 0, sizeof(streams_kernel_node_params))
    return check(<cudaError_t>(<streams_kernel_node_get_fn>_kernel_node_fns[_K_GET])(
        <void*>node, out))


cdef int kernel_param_info(void* func, void* kern, size_t index, size_t* offset,
                           size_t* size) except -1 nogil:
    cdef int err
    _kernel_node_ready()
    if func != NULL:
        err = (<streams_param_info_fn>_kernel_node_fns[_K_FUNC_PARAM])(func, index, offset, size)
    else:
        err = (<streams_param_info_fn>_kernel_node_fns[_K_KERNEL_PARAM])(kern, index, offset,
                                                                         size)
    if err == <int>cudaErrorInvalidValue:
        cudaGetLastError()
        return 0        # past the last parameter
    check(<cudaError_t>err)
    return 1


cdef const char* kernel_name(void* func, void* kern) noexcept nogil:
    cdef const char* name = NULL
    cdef int err
    if not streams_flag_get(&_kernel_node_resolved) or streams_guard_state() != STREAMS_GUARD_OK:
        return NULL
    if func != NULL:
        err = (<streams_get_name_fn>_kernel_node_fns[_K_FUNC_NAME])(&name, func)
    else:
        err = (<streams_get_name_fn>_kernel_node_fns[_K_KERNEL_NAME])(&name, kern)
    if err != 0:
        cudaGetLastError()
        return NULL
    return name


cdef int kernel_attribute(void* func, void* kern, int attribute, int* out) noexcept nogil:
    cdef int err, dev = 0
    if not streams_flag_get(&_kernel_node_resolved) or streams_guard_state() != STREAMS_GUARD_OK:
        return 0
    if func != NULL:
        err = (<streams_func_attribute_fn>_kernel_node_fns[_K_FUNC_ATTR])(out, attribute, func)
    else:
        if cudaGetDevice(&dev) != cudaSuccess:
            cudaGetLastError()
            return 0
        err = (<streams_kernel_attribute_fn>_kernel_node_fns[_K_KERNEL_ATTR])(out, attribute,
                                                                              kern, dev)
    if err != 0:
        cudaGetLastError()
        return 0
    return 1


cdef int kernel_function(void* kern, void** out) except -1 nogil:
    cdef int err
    out[0] = NULL
    _kernel_node_ready()
    err = (<streams_kernel_function_fn>_kernel_node_fns[_K_KERNEL_FUNC])(out, kern)
    if err != 0:
        cudaGetLastError()
        out[0] = NULL
        return 0
    return 1


cdef int kernel_node_context_ok(void* ctx) except -1 nogil:
    # 1 when a kernel node that CUDA recorded with context `ctx` may be
    # changed in place: none recorded, or a device's primary context (the
    # current device's, else another device's that is active: a retain of
    # an active one only counts, never creates).  0 for any other context,
    # a green context's above all: for a node captured on a green context's
    # stream the 580 driver (CUDA 13.0) answers every change with
    # cudaErrorInvalidValue or cudaErrorInvalidContext, and crashes inside
    # cuGraphExecKernelNodeSetParams when the parameters carry the function
    # without the context, which is what the runtime's setters and the
    # adopted-function path pass (tools/probe_green_kernel_args.py shows
    # it on an H200).
    cdef void* cur = NULL
    cdef void* prim = NULL
    cdef int n = 0, dev, active = 0
    cdef unsigned int flags = 0
    if ctx == NULL:
        return 1
    _kernel_node_ready()
    if (<_ctx_get_current_fn>_kernel_node_fns[_K_CTX_CURRENT])(&cur) == 0 and cur == ctx:
        return 1
    if cudaGetDeviceCount(&n) != cudaSuccess:
        cudaGetLastError()
        return 0
    for dev in range(n):
        if (<_primary_ctx_state_fn>_kernel_node_fns[_K_PRIMARY_STATE])(dev, &flags,
                                                                         &active) != 0 \
                or not active:
            continue
        if (<_primary_ctx_retain_fn>_kernel_node_fns[_K_PRIMARY_RETAIN])(&prim, dev) != 0:
            continue
        (<_primary_ctx_release_fn>_kernel_node_fns[_K_PRIMARY_RELEASE])(dev)
        if prim == ctx:
            return 1
    return 0


cdef int graph_exec_kernel_node_set(cudaGraphExec_t ex, cudaGraphNode_t node,
                                    const streams_kernel_node_params* params) except -1 nogil:
    _kernel_node_ready()
    return check(<cudaError_t>(<streams_exec_kernel_node_set_fn>_kernel_node_fns[_K_EXEC_SET])(
        <void*>ex, <void*>node, params))


cdef int graph_kernel_node_set(cudaGraphNode_t node,
                               const streams_kernel_node_params* params) except -1 nogil:
    _kernel_node_ready()
    return check(<cudaError_t>(<streams_kernel_node_set_fn>_kernel_node_fns[_K_SET])(
        <void*>node, params))
