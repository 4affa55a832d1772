# Graph data: a graph's nodes and edges as plain data (Graph.to_dict,
# GraphExec.to_dict; docs/graphs.rst, "Graph data"), and the flags of CUDA's
# own printer (Graph.debug_dot); part of streams._graph (_graph.pyx includes
# it).  Ints, strs, lists, dicts, bools and None only: json.dumps takes the
# result as it is (tests/graph/test_graph_data_gpu.py).

#: The ``schema`` of :meth:`Graph.to_dict`: a new number when a key changes
#: meaning or goes; new keys may come without one.
GRAPH_DATA_SCHEMA = "streams.graph/1"

# cudaGraphDependencyType and cudaGraphKernelNodePort* (driver_types.h)
_EDGE_TYPES = {0: "default", 1: "programmatic"}
_EDGE_PORTS = {0: "default", 1: "programmatic", 2: "launch_completion"}
_MEMCPY_KINDS = {cudaMemcpyHostToHost: "host_to_host", cudaMemcpyHostToDevice: "host_to_device",
                 cudaMemcpyDeviceToHost: "device_to_host",
                 cudaMemcpyDeviceToDevice: "device_to_device", cudaMemcpyDefault: "default"}
_DOT_FLAGS = {
    "verbose": cudaGraphDebugDotFlagsVerbose,
    "kernel_params": cudaGraphDebugDotFlagsKernelNodeParams,
    "memcpy_params": cudaGraphDebugDotFlagsMemcpyNodeParams,
    "memset_params": cudaGraphDebugDotFlagsMemsetNodeParams,
    "host_params": cudaGraphDebugDotFlagsHostNodeParams,
    "event_params": cudaGraphDebugDotFlagsEventNodeParams,
    "ext_semaphore_signal_params": cudaGraphDebugDotFlagsExtSemasSignalNodeParams,
    "ext_semaphore_wait_params": cudaGraphDebugDotFlagsExtSemasWaitNodeParams,
    "kernel_attributes": cudaGraphDebugDotFlagsKernelNodeAttributes,
    "handles": cudaGraphDebugDotFlagsHandles,
    "conditional_params": cudaGraphDebugDotFlagsConditionalNodeParams,
}


cdef unsigned int _dot_flags(object flags) except? 0xFFFFFFFF:
    """``flags`` of debug_dot: None, an int of cudaGraphDebugDotFlags, a
    name of _DOT_FLAGS or an iterable of names."""
    cdef unsigned int out = 0
    if flags is None:
        return 0
    if isinstance(flags, int) and not isinstance(flags, bool):
        return <unsigned int>as_uint(flags, "flags")
    if isinstance(flags, str):
        flags = (flags,)
    try:
        names = list(flags)
    except TypeError:
        raise TypeError(f"flags must be None, an int, a flag name or an iterable of flag "
                        f"names, not {type(flags).__name__}") from None
    for name in names:
        found = _DOT_FLAGS.get(name) if isinstance(name, str) else None
        if found is None:
            raise ValueError(f"flags: {name!r} is not one of "
                             f"{', '.join(repr(n) for n in _DOT_FLAGS)}")
        out |= <unsigned int>found
    return out


cdef str _type_name(int t):
    try:
        return NodeType(t).name.lower()
    except ValueError:
        return f"unknown_{t}"


cdef dict _kernel_data(KernelNodeParams info):
    return {"name": info.name, "grid": list(info.grid), "block": list(info.block),
            "shared_mem": info.shared_mem, "param_sizes": list(info.param_sizes),
            "param_offsets": list(info.param_offsets),
            "args": [bytes(a).hex() for a in info.args],
            "function": info.function, "kernel_handle": info.kernel_handle,
            "attributes": dict(info.attributes)}


cdef dict _node_params(GraphNode nd, cudaGraphNodeType t):
    """What node ``nd`` (of a graph held in use) does, or None where the
    runtime tells nothing more than its type (empty, conditional and
    external-semaphore nodes)."""
    cdef cudaGraphNode_t node = <cudaGraphNode_t>nd._handle
    cdef cudaMemsetParams ms
    cdef cudaMemcpy3DParms mc
    cdef cudaHostNodeParams hp
    cdef cudaMemAllocNodeParams ma
    cdef cudaEvent_t ev = NULL
    cdef cudaGraph_t child = NULL
    cdef void* ptr = NULL
    cdef bint python = False
    cdef Graph body
    if t == cudaGraphNodeTypeKernel:
        try:
            return _kernel_data(_read_kernel_node(nd, "node"))
        except NotImplementedError:
            return None      # a driver older than CUDA 12.4 reads no kernel node
    if t == cudaGraphNodeTypeMemset:
        memset(&ms, 0, sizeof(ms))
        with nogil:
            rt.graph_memset_node_get_params(node, &ms)
        return {"dst": <uintptr_t>ms.dst, "value": ms.value, "element_size": ms.elementSize,
                "width": ms.width, "height": ms.height, "pitch": ms.pitch,
                "nbytes": ms.width * ms.height * ms.elementSize}
    if t == cudaGraphNodeTypeMemcpy:
        memset(&mc, 0, sizeof(mc))
        with nogil:
            rt.graph_memcpy_node_get_params(node, &mc)
        return {"dst": <uintptr_t>mc.dstPtr.ptr, "src": <uintptr_t>mc.srcPtr.ptr,
                "dst_pitch": mc.dstPtr.pitch, "src_pitch": mc.srcPtr.pitch,
                "dst_pos": [mc.dstPos.x, mc.dstPos.y, mc.dstPos.z],
                "src_pos": [mc.srcPos.x, mc.srcPos.y, mc.srcPos.z],
                "extent": [mc.extent.width, mc.extent.height, mc.extent.depth],
                "nbytes": (mc.extent.width * (mc.extent.height or 1)
                           * (mc.extent.depth or 1)),
                "kind": _MEMCPY_KINDS.get(<int>mc.kind, int(mc.kind)),
                "dst_array": mc.dstArray != NULL, "src_array": mc.srcArray != NULL}
    if t == cudaGraphNodeTypeHost:
        with nogil:
            rt.graph_host_node_get_params(node, &hp, &python)
        return {"function": <uintptr_t>hp.fn, "data": <uintptr_t>hp.userData,
                "python": bool(python)}
    if t == cudaGraphNodeTypeGraph:
        with nogil:
            rt.graph_child_graph_node_get_graph(node, &child)
        # CUDA's copy, owned by the node: read as a body, which holds the
        # graph in use meanwhile.
        body = _wrap_body(nd._graph, child)
        try:
            return _graph_data(body)
        finally:
            body.close()
    if t == cudaGraphNodeTypeEventRecord or t == cudaGraphNodeTypeWaitEvent:
        with nogil:
            rt.graph_event_node_get_event(node, t == cudaGraphNodeTypeEventRecord, &ev)
        return {"event": <uintptr_t>ev}
    if t == cudaGraphNodeTypeMemAlloc:
        memset(&ma, 0, sizeof(ma))
        with nogil:
            rt.graph_mem_alloc_node_get_params(node, &ma)
        return {"ptr": <uintptr_t>ma.dptr, "nbytes": ma.bytesize,
                "device": ma.poolProps.location.id}
    if t == cudaGraphNodeTypeMemFree:
        with nogil:
            rt.graph_mem_free_node_get_params(node, &ptr)
        return {"ptr": <uintptr_t>ptr}
    return None


cdef list _edge_data(Graph graph, dict ids):
    cdef size_t n = 0, i
    cdef cudaGraphNode_t* src = NULL
    cdef cudaGraphNode_t* dst = NULL
    cdef cudaGraphEdgeData* data = NULL
    with nogil:
        rt.graph_get_edges(<cudaGraph_t>graph._handle, NULL, NULL, NULL, &n)
    if n == 0:
        return []
    try:
        src = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        dst = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        data = <cudaGraphEdgeData*>PyMem_Malloc(n * sizeof(cudaGraphEdgeData))
        if src == NULL or dst == NULL or data == NULL:
            raise MemoryError()
        memset(data, 0, n * sizeof(cudaGraphEdgeData))
        with nogil:
            rt.graph_get_edges(<cudaGraph_t>graph._handle, src, dst, data, &n)
        return [{"from": ids[<uintptr_t>src[i]], "to": ids[<uintptr_t>dst[i]],
                 "type": _EDGE_TYPES.get(data[i].type, int(data[i].type)),
                 "from_port": _EDGE_PORTS.get(data[i].from_port, int(data[i].from_port)),
                 "to_port": int(data[i].to_port)}
                for i in range(n)]
    finally:
        PyMem_Free(src)
        PyMem_Free(dst)
        PyMem_Free(data)


cdef dict _graph_data(Graph graph):
    """The data of ``graph`` (to_dict's answer); the caller holds it open
    (a body holds its parent in use)."""
    cdef cudaGraphNodeType t
    cdef GraphNode nd
    graph._use()
    try:
        handles = _handles(graph._handle, False)
        ids = {h: i for i, h in enumerate(handles)}
        nodes = []
        for i, h in enumerate(handles):
            nd = _wrap_node(graph, <cudaGraphNode_t><uintptr_t>h)
            with nogil:
                rt.graph_node_get_type(<cudaGraphNode_t>nd._handle, &t)
            nodes.append({"id": i, "handle": h, "type": _type_name(<int>t),
                          "dependencies": [], "params": _node_params(nd, t)})
        edges = _edge_data(graph, ids)
    finally:
        graph._unuse()
    for edge in edges:
        nodes[edge["to"]]["dependencies"].append(edge["from"])
    return {"schema": GRAPH_DATA_SCHEMA, "handle": <uintptr_t>graph._handle, "nodes": nodes,
            "edges": edges}


cdef dict _state_data(_NodeState st, dict read):
    # A kernel node's data (`read`, from the graph) as the executable runs it.
    sizes = list(st.sizes)
    return dict(read, name=_state_name(st), grid=[st.p.grid[0], st.p.grid[1], st.p.grid[2]],
                block=[st.p.block[0], st.p.block[1], st.p.block[2]],
                shared_mem=st.p.shared_mem, param_sizes=sizes,
                param_offsets=read["param_offsets"] if sizes == read["param_sizes"] else None,
                args=[bytes(a).hex() for a in st.args])


cdef dict _exec_data(GraphExec ex):
    """The data of the graph ``ex`` was made from, with what ``ex`` runs
    where it differs: each node's ``enabled`` (kernel, memcpy and memset
    nodes; None for the others) and the kernel nodes' parameters as the
    executable runs them (its own changes and updates)."""
    cdef unsigned long long flags = 0
    cdef unsigned int on = 0
    cdef cudaGraphNodeType t
    cdef GraphNode nd
    source = ex._source_ref() if ex._source_ref is not None else None
    if source is None or source.closed:
        raise ValueError("the graph this executable was made from is closed or gone: "
                         "GraphExec.to_dict reads its nodes (keep the graph open)")
    data = _graph_data(<Graph>source)
    ex._use()
    try:
        with nogil:
            rt.graph_exec_get_flags(<cudaGraphExec_t>ex._handle, &flags)
    finally:
        ex._unuse()
    data["exec"] = {"handle": <uintptr_t>ex._handle, "flags": flags}
    for node in data["nodes"]:
        nd = _wrap_node(<Graph>source, <cudaGraphNode_t><uintptr_t>node["handle"])
        node["enabled"] = None
        if node["type"] in ("kernel", "memcpy", "memset"):
            node["enabled"] = ex.is_enabled(nd)
        if node["type"] == "kernel" and node["params"] is not None:
            try:
                st = ex._state_of(nd)
            except ValueError:
                node["params"] = None     # updated from another graph: not known
                continue
            node["params"] = _state_data(<_NodeState>st, node["params"])
    return data
