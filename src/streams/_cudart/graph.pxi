# Graph management, part of streams._cudart (_cudart.pyx includes it).

cdef int graph_create(cudaGraph_t* out) except -1 nogil:
    guard()
    check(cudaGraphCreate(out, 0))
    streams_count(STREAMS_CNT_GRAPH_CREATED)
    return 0


cdef void count_graph_adopted() noexcept nogil:
    # A graph CUDA made (end of a capture) and streams now owns.
    streams_count(STREAMS_CNT_GRAPH_CREATED)


cdef int graph_clone(cudaGraph_t* out, cudaGraph_t g) except -1 nogil:
    guard()
    check(cudaGraphClone(out, g))
    streams_count(STREAMS_CNT_GRAPH_CREATED)
    return 0


cdef int graph_get_nodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) except -1 nogil:
    guard()
    return check(cudaGraphGetNodes(g, nodes, n))


cdef int graph_get_edges(cudaGraph_t g, cudaGraphNode_t* src, cudaGraphNode_t* dst,
                         cudaGraphEdgeData* data, size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaGraphGetEdges(g, src, dst, data, n))


cdef int graph_node_get_type(cudaGraphNode_t node, cudaGraphNodeType* out) except -1 nogil:
    cdef cudaError_t err
    cdef int t = 0
    guard()
    err = cudaGraphNodeGetType(node, out)
    if err == cudaErrorUnknown:
        # A static cudart 12 under a CUDA 13 driver fails to translate the
        # type of a conditional node (seen: 12.9 on driver 580, an H100).
        # The driver's own answer uses the numbering cudart's enum shares.
        cudaGetLastError()
        err = <cudaError_t>(<_node_type_fn>_driver_fn(DRIVER_NODE_GET_TYPE))(node, &t)
        if err == cudaSuccess:
            out[0] = <cudaGraphNodeType>t
    return check(err)


cdef int graph_node_get_dependencies(cudaGraphNode_t node, cudaGraphNode_t* deps,
                                     size_t* n) except -1 nogil:
    guard()
    return check(streams_cudaGraphNodeGetDependencies(node, deps, NULL, n))


cdef int graph_add_empty_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                              size_t n) except -1 nogil:
    guard()
    return check(cudaGraphAddEmptyNode(out, g, deps, n))


cdef int graph_add_kernel_node(cudaGraphNode_t* out, cudaGraph_t g,
                               const cudaGraphNode_t* deps, size_t n,
                               const cudaKernelNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddKernelNode(out, g, deps, n, params))


cdef int graph_add_memset_node(cudaGraphNode_t* out, cudaGraph_t g,
                               const cudaGraphNode_t* deps, size_t n,
                               const cudaMemsetParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddMemsetNode(out, g, deps, n, params))


cdef int graph_add_memcpy_node_1d(cudaGraphNode_t* out, cudaGraph_t g,
                                  const cudaGraphNode_t* deps, size_t n, void* dst,
                                  const void* src, size_t count) except -1 nogil:
    guard()
    return check(cudaGraphAddMemcpyNode1D(out, g, deps, n, dst, src, count, cudaMemcpyDefault))


cdef int graph_add_child_graph_node(cudaGraphNode_t* out, cudaGraph_t g,
                                    const cudaGraphNode_t* deps, size_t n,
                                    cudaGraph_t child) except -1 nogil:
    guard()
    return check(cudaGraphAddChildGraphNode(out, g, deps, n, child))


cdef int graph_add_event_record_node(cudaGraphNode_t* out, cudaGraph_t g,
                                     const cudaGraphNode_t* deps, size_t n,
                                     cudaEvent_t ev) except -1 nogil:
    guard()
    return check(cudaGraphAddEventRecordNode(out, g, deps, n, ev))


cdef int graph_add_event_wait_node(cudaGraphNode_t* out, cudaGraph_t g,
                                   const cudaGraphNode_t* deps, size_t n,
                                   cudaEvent_t ev) except -1 nogil:
    guard()
    return check(cudaGraphAddEventWaitNode(out, g, deps, n, ev))


cdef int graph_debug_dot_print(cudaGraph_t g, const char* path,
                               unsigned int flags) except -1 nogil:
    guard()
    return check(cudaGraphDebugDotPrint(g, path, flags))


# ---- what each node does (Graph.to_dict) -------------------------------------------------

cdef int graph_memset_node_get_params(cudaGraphNode_t node,
                                      cudaMemsetParams* out) except -1 nogil:
    guard()
    return check(cudaGraphMemsetNodeGetParams(node, out))


cdef int graph_memcpy_node_get_params(cudaGraphNode_t node,
                                      cudaMemcpy3DParms* out) except -1 nogil:
    guard()
    return check(cudaGraphMemcpyNodeGetParams(node, out))


cdef int graph_host_node_get_params(cudaGraphNode_t node, cudaHostNodeParams* out,
                                    bint* python) except -1 nogil:
    # python: the node calls a Python callable (streams' trampoline).
    guard()
    check(cudaGraphHostNodeGetParams(node, out))
    python[0] = out.fn == streams_graph_host_fn_trampoline
    return 0


cdef int graph_child_graph_node_get_graph(cudaGraphNode_t node,
                                          cudaGraph_t* out) except -1 nogil:
    guard()
    return check(cudaGraphChildGraphNodeGetGraph(node, out))


cdef int graph_event_node_get_event(cudaGraphNode_t node, bint record,
                                    cudaEvent_t* out) except -1 nogil:
    guard()
    if record:
        return check(cudaGraphEventRecordNodeGetEvent(node, out))
    return check(cudaGraphEventWaitNodeGetEvent(node, out))


cdef int graph_mem_alloc_node_get_params(cudaGraphNode_t node,
                                         cudaMemAllocNodeParams* out) except -1 nogil:
    guard()
    return check(cudaGraphMemAllocNodeGetParams(node, out))


cdef int graph_mem_free_node_get_params(cudaGraphNode_t node, void** out) except -1 nogil:
    guard()
    return check(cudaGraphMemFreeNodeGetParams(node, <void*>out))


cdef int graph_exec_get_flags(cudaGraphExec_t ex, unsigned long long* out) except -1 nogil:
    guard()
    return check(cudaGraphExecGetFlags(ex, out))


cdef int graph_instantiate(cudaGraphExec_t* out, cudaGraph_t g,
                           unsigned long long flags) except -1 nogil:
    guard()
    check(cudaGraphInstantiateWithFlags(out, g, flags))
    streams_count(STREAMS_CNT_EXEC_CREATED)
    return 0


cdef int graph_launch(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil:
    cdef cudaError_t err
    guard()
    err = cudaGraphLaunch(ex, s)
    # The message only where the stream is (or was, until this launch
    # invalidated it) capturing; any other cause keeps CUDA's own.
    if err == cudaErrorStreamCaptureUnsupported and stream_in_capture(s):
        with gil:
            cudaGetLastError()
            raise CudaError(<int>err, None, _LAUNCH_IN_CAPTURE)
    return check(err)


_LAUNCH_IN_CAPTURE = (
    "operation not permitted when stream is capturing: CUDA does not capture a graph "
    "launch (and invalidates the capture); embed the graph with "
    "Graph.add_child_graph_node, or launch the executable outside the capture")


cdef int graph_upload(cudaGraphExec_t ex, cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaGraphUpload(ex, s))


cdef int graph_exec_update(cudaGraphExec_t ex, cudaGraph_t g,
                           cudaGraphExecUpdateResultInfo* info) except -1 nogil:
    """0 when updated, 1 when CUDA refused the update (``info`` says why)."""
    cdef cudaError_t err
    guard()
    err = cudaGraphExecUpdate(ex, g, info)
    if err == cudaSuccess:
        return 0
    if err == cudaErrorGraphExecUpdateFailure:
        cudaGetLastError()
        return 1
    return check(err)


# ---- host nodes (their payloads: see host functions above) -------------------------------

cdef int graph_add_native_host_node(cudaGraphNode_t* out, cudaGraph_t g,
                                    const cudaGraphNode_t* deps, size_t n, host_fn fn,
                                    void* data) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = <cudaHostFn_t>fn
    params.userData = data
    return check(cudaGraphAddHostNode(out, g, deps, n, &params))


cdef int graph_exec_native_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                                host_fn fn, void* data) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = <cudaHostFn_t>fn
    params.userData = data
    return check(cudaGraphExecHostNodeSetParams(ex, node, &params))


cdef int graph_attach_reference(cudaGraph_t g, PyObject* obj, bint* moved) except -1 nogil:
    """Give graph ``g`` a CUDA user object owning a reference to ``obj`` that
    the caller took.  ``moved`` tells whether the reference went to a user
    object (which then drops it, even when this raises); if not, it is still
    the caller's to drop."""
    cdef cudaUserObject_t uo = NULL
    cdef cudaError_t err
    moved[0] = False
    guard()
    err = cudaUserObjectCreate(&uo, <void*>obj, streams_user_object_release, 1,
                               cudaUserObjectNoDestructorSync)
    if err != cudaSuccess:
        return check(err)
    moved[0] = True
    err = cudaGraphRetainUserObject(g, uo, 1, cudaGraphUserObjectMove)
    if err != cudaSuccess:
        cudaUserObjectRelease(uo, 1)
        return check(err)
    return 0


cdef int graph_attach_payload(cudaGraph_t g, PyObject* payload) except -1:
    """Give graph ``g`` a CUDA user object owning one reference to ``payload``."""
    return graph_attach_owned(g, payload, NULL)


cdef int graph_add_host_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                             size_t n, PyObject* payload) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = streams_graph_host_fn_trampoline
    params.userData = <void*>payload
    return check(cudaGraphAddHostNode(out, g, deps, n, &params))


# ---- user objects, conditional and memory nodes, executable updates ----------------------

# Conditional and memory nodes, node-by-node updates of executables, and
# the user objects that keep what an executable needs alive.

cdef int graph_attach_owned(cudaGraph_t g, PyObject* obj, cudaUserObject_t* out) except -1:
    """Give graph ``g`` a CUDA user object owning one reference to ``obj``;
    ``out`` (if not NULL) gets the user object, to release from ``g`` later.
    CUDA drops the reference once no graph or executable (nor a replay
    still in flight) holds the user object."""
    cdef cudaUserObject_t uo = NULL
    cdef cudaError_t err
    refuse_forbidden()
    streams_payload_incref(obj)
    with nogil:
        err = cudaUserObjectCreate(&uo, <void*>obj, streams_user_object_release, 1,
                                   cudaUserObjectNoDestructorSync)
    if err != cudaSuccess:
        streams_payload_decref(obj)
        return check(err)
    with nogil:
        err = cudaGraphRetainUserObject(g, uo, 1, cudaGraphUserObjectMove)
        if err != cudaSuccess:
            # Our reference dies with the user object (via the deferred queue).
            cudaUserObjectRelease(uo, 1)
    check(err)
    if out != NULL:
        out[0] = uo
    return 0


cdef int graph_release_user_object(cudaGraph_t g, cudaUserObject_t uo) except -1 nogil:
    guard()
    return check(cudaGraphReleaseUserObject(g, uo, 1))


cdef int graph_destroy_node(cudaGraphNode_t node) except -1 nogil:
    guard()
    return check(cudaGraphDestroyNode(node))


cdef int graph_conditional_handle_create(cudaGraphConditionalHandle* out, cudaGraph_t g,
                                         unsigned int default_value,
                                         unsigned int flags) except -1 nogil:
    guard()
    return check(cudaGraphConditionalHandleCreate(out, g, default_value, flags))


cdef int graph_add_node(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                        size_t n, cudaGraphNodeParams* params) except -1 nogil:
    guard()
    return check(streams_cudaGraphAddNode(out, g, deps, n, params))


cdef int graph_add_mem_alloc_node(cudaGraphNode_t* out, cudaGraph_t g,
                                  const cudaGraphNode_t* deps, size_t n,
                                  cudaMemAllocNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphAddMemAllocNode(out, g, deps, n, params))


cdef int graph_add_mem_free_node(cudaGraphNode_t* out, cudaGraph_t g,
                                 const cudaGraphNode_t* deps, size_t n,
                                 void* dptr) except -1 nogil:
    guard()
    return check(cudaGraphAddMemFreeNode(out, g, deps, n, dptr))


cdef int device_get_graph_mem_attribute(int dev, cudaGraphMemAttributeType attr,
                                        unsigned long long* value) except -1 nogil:
    guard()
    return check(cudaDeviceGetGraphMemAttribute(dev, attr, <void*>value))


cdef int device_reset_graph_mem_high(int dev) except -1 nogil:
    # CUDA accepts only zero: the high watermarks restart from what is used now.
    cdef unsigned long long zero = 0
    guard()
    check(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, <void*>&zero))
    return check(cudaDeviceSetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh,
                                                <void*>&zero))


cdef int device_graph_mem_trim(int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGraphMemTrim(dev))


cdef int graph_kernel_node_set_attribute(cudaGraphNode_t node, cudaLaunchAttributeID attr,
                                         const cudaLaunchAttributeValue* value) except -1 nogil:
    guard()
    return check(cudaGraphKernelNodeSetAttribute(node, attr, value))


cdef int graph_exec_kernel_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                           const cudaKernelNodeParams* params) except -1 nogil:
    guard()
    return check(cudaGraphExecKernelNodeSetParams(ex, node, params))


cdef int graph_exec_memset_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                           const cudaMemsetParams* params) except -1 nogil:
    guard()
    return check(cudaGraphExecMemsetNodeSetParams(ex, node, params))


cdef int graph_exec_memcpy_node_set_params_1d(cudaGraphExec_t ex, cudaGraphNode_t node,
                                              void* dst, const void* src,
                                              size_t count) except -1 nogil:
    guard()
    return check(cudaGraphExecMemcpyNodeSetParams1D(ex, node, dst, src, count,
                                                    cudaMemcpyDefault))


cdef int graph_exec_host_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                         PyObject* payload) except -1 nogil:
    cdef cudaHostNodeParams params
    guard()
    params.fn = streams_graph_host_fn_trampoline
    params.userData = <void*>payload
    return check(cudaGraphExecHostNodeSetParams(ex, node, &params))


cdef int graph_exec_child_graph_node_set_params(cudaGraphExec_t ex, cudaGraphNode_t node,
                                                cudaGraph_t child) except -1 nogil:
    guard()
    return check(cudaGraphExecChildGraphNodeSetParams(ex, node, child))


cdef int graph_exec_event_node_set_event(cudaGraphExec_t ex, cudaGraphNode_t node,
                                         cudaEvent_t ev, bint record) except -1 nogil:
    guard()
    if record:
        return check(cudaGraphExecEventRecordNodeSetEvent(ex, node, ev))
    return check(cudaGraphExecEventWaitNodeSetEvent(ex, node, ev))


cdef int graph_node_set_enabled(cudaGraphExec_t ex, cudaGraphNode_t node,
                                bint enabled) except -1 nogil:
    guard()
    return check(cudaGraphNodeSetEnabled(ex, node, 1 if enabled else 0))


cdef int graph_node_get_enabled(cudaGraphExec_t ex, cudaGraphNode_t node,
                                unsigned int* enabled) except -1 nogil:
    guard()
    return check(cudaGraphNodeGetEnabled(ex, node, enabled))
