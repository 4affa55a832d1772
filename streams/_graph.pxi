# Stream capture and CUDA graphs.
#
# Python callables in graphs (host nodes, and launch_host_func captured from
# a stream) are owned by CUDA user objects retained by the graph: every
# graph, clone and executable that can still run the node keeps the payload
# alive, and the last one to go releases it through the deferred queue of
# the C shim (never taking the GIL on CUDA's thread).

from collections import namedtuple
import os as _os
import tempfile as _tempfile

_CAPTURE_MODES = {"global": cudaStreamCaptureModeGlobal,
                  "thread_local": cudaStreamCaptureModeThreadLocal,
                  "relaxed": cudaStreamCaptureModeRelaxed}
_CAPTURE_MODE_NAMES = {v: k for k, v in _CAPTURE_MODES.items()}
_CAPTURE_STATUS_NAMES = {cudaStreamCaptureStatusNone: "none",
                         cudaStreamCaptureStatusActive: "active",
                         cudaStreamCaptureStatusInvalidated: "invalidated"}
_NODE_TYPE_NAMES = {
    cudaGraphNodeTypeKernel: "kernel", cudaGraphNodeTypeMemcpy: "memcpy",
    cudaGraphNodeTypeMemset: "memset", cudaGraphNodeTypeHost: "host",
    cudaGraphNodeTypeGraph: "graph", cudaGraphNodeTypeEmpty: "empty",
    cudaGraphNodeTypeWaitEvent: "event_wait", cudaGraphNodeTypeEventRecord: "event_record",
    cudaGraphNodeTypeExtSemaphoreSignal: "ext_semaphore_signal",
    cudaGraphNodeTypeExtSemaphoreWait: "ext_semaphore_wait",
    cudaGraphNodeTypeMemAlloc: "mem_alloc", cudaGraphNodeTypeMemFree: "mem_free",
    cudaGraphNodeTypeConditional: "conditional"}
_UPDATE_RESULT_NAMES = {
    cudaGraphExecUpdateSuccess: "success",
    cudaGraphExecUpdateError: "error",
    cudaGraphExecUpdateErrorTopologyChanged: "topology changed",
    cudaGraphExecUpdateErrorNodeTypeChanged: "node type changed",
    cudaGraphExecUpdateErrorFunctionChanged: "kernel function changed",
    cudaGraphExecUpdateErrorParametersChanged: "parameters changed unsupportedly",
    cudaGraphExecUpdateErrorNotSupported: "node not supported for update",
    cudaGraphExecUpdateErrorUnsupportedFunctionChange: "unsupported kernel function change",
    cudaGraphExecUpdateErrorAttributesChanged: "attributes changed unsupportedly"}

CaptureInfo = namedtuple("CaptureInfo", "status id graph dependencies edge_data",
                         module="streams")
CaptureInfo.__doc__ = """What ``Stream.capture_info()`` returns.

``status`` is "none", "active" or "invalidated"; ``graph`` is the graph
being built (valid while the capture runs); ``dependencies`` the nodes the
next captured work will depend on; ``edge_data`` one ``(from_port, to_port,
type)`` per dependency."""

UpdateResult = namedtuple("UpdateResult", "ok reason error_node", module="streams")
UpdateResult.__doc__ = """What ``GraphExec.update()`` returns: ``ok``, a
``reason`` in words, and the node CUDA blamed (or None)."""


cdef class _ErrorSlot:
    """Where exceptions of a graph's host callbacks wait for the next launch."""
    cdef public object _callback_error


# Captures we attached Python callbacks to, by the graph being built, so
# that end_capture() hands their error slot to the Graph it returns.
cdef dict _capture_slots = {}


cdef int _capture_mode_value(object mode) except -1:
    try:
        return _CAPTURE_MODES[mode]
    except (KeyError, TypeError):
        raise ValueError(f"mode must be one of {sorted(_CAPTURE_MODES)}, got {mode!r}") from None


def exchange_capture_mode(mode):
    """Set this thread's capture interaction mode; return the previous one.

    Wraps ``cudaThreadExchangeStreamCaptureMode``; prefer ``capture_mode()``.
    """
    cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode>_capture_mode_value(mode)
    guard()
    with nogil:
        check(cudaThreadExchangeStreamCaptureMode(&m))
    return _CAPTURE_MODE_NAMES[m]


class capture_mode:
    """``with streams.capture_mode("relaxed"):`` sets this thread's capture
    interaction mode and restores the previous one on exit."""

    def __init__(self, mode):
        _capture_mode_value(mode)
        self.mode = mode
        self._previous = []

    def __enter__(self):
        self._previous.append(exchange_capture_mode(self.mode))
        return self

    def __exit__(self, *exc):
        exchange_capture_mode(self._previous.pop())
        return False


cdef size_t _node_array(object nodes, cudaGraphNode_t** out, str argname) except? 0:
    """Borrow the handles of a sequence of GraphNode into a malloc'ed array."""
    cdef Py_ssize_t n, i
    cdef cudaGraphNode_t* arr
    if nodes is None:
        out[0] = NULL
        return 0
    if isinstance(nodes, GraphNode):
        nodes = (nodes,)
    try:
        nodes = tuple(nodes)
    except TypeError:
        raise TypeError(f"{argname} must be a GraphNode or a sequence of GraphNode, not "
                        f"{type(nodes).__name__}") from None
    n = len(nodes)
    if n == 0:
        out[0] = NULL
        return 0
    arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
    if arr == NULL:
        raise MemoryError()
    for i in range(n):
        if not isinstance(nodes[i], GraphNode):
            PyMem_Free(arr)
            raise TypeError(f"{argname}[{i}] must be a GraphNode, not {type(nodes[i]).__name__}")
        arr[i] = <cudaGraphNode_t>(<GraphNode>nodes[i])._handle
    out[0] = arr
    return <size_t>n


cdef GraphNode _wrap_node(Graph graph, cudaGraphNode_t handle):
    cdef GraphNode node = GraphNode.__new__(GraphNode)
    node._handle = <void*>handle
    node._graph = graph
    return node


cdef GraphNode _node_added(Graph graph, cudaError_t err, cudaGraphNode_t node,
                          cudaGraphNode_t* deps):
    PyMem_Free(deps)
    check(err)
    return _wrap_node(graph, node)


cdef Graph _wrap_graph(cudaGraph_t handle, bint owns, _ErrorSlot errors):
    cdef Graph g = Graph.__new__(Graph)
    g._handle = <streams_graph_t>handle
    g._owns_handle = owns
    g._closed = False
    g._errors = errors if errors is not None else _ErrorSlot()
    if owns:
        _debug_graph_created()
    return g


# ---- capture, called by the Stream methods ---------------------------------

cdef int _begin_capture(Stream stream, object mode) except -1:
    cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode>_capture_mode_value(mode)
    guard()
    stream._check_open()
    with nogil:
        check(cudaStreamBeginCapture(<cudaStream_t>stream._handle, m))
    return 0


cdef int _begin_capture_to_graph(Stream stream, Graph graph, object dependencies,
                                 object mode) except -1:
    cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode>_capture_mode_value(mode)
    cdef cudaGraphNode_t* deps = NULL
    cdef size_t n
    cdef cudaError_t err
    guard()
    stream._check_open()
    graph._check_open()
    n = _node_array(dependencies, &deps, "dependencies")
    with nogil:
        err = cudaStreamBeginCaptureToGraph(<cudaStream_t>stream._handle,
                                            <cudaGraph_t>graph._handle, deps, NULL, n, m)
    PyMem_Free(deps)
    check(err)
    _capture_slots[<uintptr_t>graph._handle] = graph._errors
    _capture_targets[<uintptr_t>graph._handle] = graph
    return 0


cdef Graph _end_capture(Stream stream):
    cdef cudaGraph_t g = NULL
    cdef cudaGraph_t building = NULL
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef cudaError_t err
    guard()
    stream._check_open()
    with nogil:
        # Which graph is being built, to find the error slot of callbacks
        # captured into it (also when CUDA fails the end below).
        if streams_cudaStreamGetCaptureInfo(<cudaStream_t>stream._handle, &status, NULL,
                                            &building, NULL, NULL, NULL) != cudaSuccess:
            building = NULL
        err = cudaStreamEndCapture(<cudaStream_t>stream._handle, &g)
    slot = _capture_slots.pop(<uintptr_t>building, None) if building != NULL else None
    check(err)
    target = _capture_targets.pop(<uintptr_t>g, None)
    if target is not None:
        # begin_capture_to_graph: CUDA returns the user's graph again.
        return <Graph>target
    return _wrap_graph(g, True, slot)


# Graphs passed to begin_capture_to_graph, returned as-is by end_capture.
cdef dict _capture_targets = {}


cdef int _capture_status(Stream stream) except -1:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    guard()
    stream._check_open()
    with nogil:
        check(cudaStreamIsCapturing(<cudaStream_t>stream._handle, &status))
    return <int>status


cdef object _capture_info(Stream stream):
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long cid = 0
    cdef cudaGraph_t g = NULL
    cdef const cudaGraphNode_t* deps = NULL
    cdef const cudaGraphEdgeData* edges = NULL
    cdef size_t n = 0, i
    guard()
    stream._check_open()
    with nogil:
        check(streams_cudaStreamGetCaptureInfo(<cudaStream_t>stream._handle, &status, &cid,
                                               &g, &deps, &edges, &n))
    if status != cudaStreamCaptureStatusActive:
        return CaptureInfo(_CAPTURE_STATUS_NAMES[status], cid if cid else None, None, [], [])
    graph = _wrap_graph(g, False, None)
    dep_nodes = [_wrap_node(graph, deps[i]) for i in range(n)]
    edge_data = ([(edges[i].from_port, edges[i].to_port, edges[i].type) for i in range(n)]
                 if edges != NULL else [(0, 0, 0)] * n)
    return CaptureInfo("active", cid, graph, dep_nodes, edge_data)


cdef int _update_capture_dependencies(Stream stream, object nodes, object mode) except -1:
    cdef unsigned int flags
    cdef cudaGraphNode_t* deps = NULL
    cdef size_t n
    cdef cudaError_t err
    if mode == "add":
        flags = cudaStreamAddCaptureDependencies
    elif mode == "set":
        flags = cudaStreamSetCaptureDependencies
    else:
        raise ValueError(f"mode must be 'add' or 'set', got {mode!r}")
    guard()
    stream._check_open()
    n = _node_array(nodes, &deps, "nodes")
    with nogil:
        err = streams_cudaStreamUpdateCaptureDependencies(<cudaStream_t>stream._handle, deps,
                                                          NULL, n, flags)
    PyMem_Free(deps)
    return check(err)


class _CaptureContext:
    """``with stream.capture() as cap:`` ... ``cap.graph`` after the block.

    If the block raises, the capture is ended and its graph destroyed, so
    the stream leaves capture mode and stays usable; the exception goes on.
    """

    def __init__(self, stream, mode):
        _capture_mode_value(mode)
        self.stream = stream
        self.mode = mode
        self.graph = None

    def __enter__(self):
        self.stream.begin_capture(self.mode)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.graph = self.stream.end_capture()
            return False
        try:
            self.stream.end_capture().close()
        except CudaError:
            pass  # an invalidated capture still ends; the user's error matters
        return False


# ---- graph-owned Python callables -------------------------------------------

cdef int _attach_payload(cudaGraph_t graph, _HostCall call) except -1:
    """Give `graph` a user object owning one reference to `call`."""
    cdef cudaUserObject_t uo = NULL
    cdef cudaError_t err
    cdef PyObject* payload = <PyObject*>call
    streams_payload_incref(payload)
    with nogil:
        err = cudaUserObjectCreate(&uo, <void*>payload, streams_user_object_release, 1,
                                   cudaUserObjectNoDestructorSync)
    if err != cudaSuccess:
        streams_payload_decref(payload)
        return check(err)
    with nogil:
        err = cudaGraphRetainUserObject(graph, uo, 1, cudaGraphUserObjectMove)
        if err != cudaSuccess:
            # Our reference dies with the user object (via the deferred queue).
            cudaUserObjectRelease(uo, 1)
    return check(err)


cdef int _enqueue_captured_call(Stream stream, _HostCall call, cudaGraph_t graph) except -1:
    cdef PyObject* payload = <PyObject*>call
    cdef cudaError_t err
    slot = _capture_slots.get(<uintptr_t>graph)
    if slot is None:
        slot = _capture_slots[<uintptr_t>graph] = _ErrorSlot()
    call.stream = None
    call.sink = slot
    call.persistent = True
    _attach_payload(graph, call)
    with nogil:
        err = cudaLaunchHostFunc(<cudaStream_t>stream._handle,
                                 streams_graph_host_fn_trampoline, <void*>payload)
    return check(err)


# ---- classes ----------------------------------------------------------------

@cython.final
cdef class GraphNode:
    """A node of a Graph (kept alive with its graph)."""

    def __cinit__(self):
        self._handle = NULL

    @property
    def handle(self):
        return <uintptr_t>self._handle

    @property
    def graph(self):
        return self._graph

    @property
    def type(self):
        """The node type: "kernel", "host", "memset", "memcpy", "empty", ..."""
        cdef cudaGraphNodeType t
        self._graph._check_open()
        with nogil:
            check(cudaGraphNodeGetType(<cudaGraphNode_t>self._handle, &t))
        return _NODE_TYPE_NAMES.get(t, f"type {<int>t}")

    @property
    def dependencies(self):
        cdef size_t n = 0, i
        cdef cudaGraphNode_t* deps
        self._graph._check_open()
        with nogil:
            check(streams_cudaGraphNodeGetDependencies(<cudaGraphNode_t>self._handle, NULL,
                                                       NULL, &n))
        if n == 0:
            return []
        deps = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        try:
            with nogil:
                check(streams_cudaGraphNodeGetDependencies(<cudaGraphNode_t>self._handle,
                                                           deps, NULL, &n))
            return [_wrap_node(self._graph, deps[i]) for i in range(n)]
        finally:
            PyMem_Free(deps)

    def __eq__(self, other):
        if not isinstance(other, GraphNode):
            return NotImplemented
        return self._handle == (<GraphNode>other)._handle

    def __hash__(self):
        return hash(("streams.GraphNode", <uintptr_t>self._handle))

    def __repr__(self):
        try:
            kind = self.type
        except Exception:
            kind = "?"
        return f"<streams.GraphNode {kind} 0x{<uintptr_t>self._handle:x}>"


@cython.final
cdef class Graph:
    """A CUDA graph (``cudaGraph_t``): ``Graph()`` is empty; captures return one."""

    def __cinit__(self, *args, **kwargs):
        self._closed = True
        self._owns_handle = False

    def __init__(self):
        cdef cudaGraph_t g = NULL
        guard()
        _require_device()
        with nogil:
            check(cudaGraphCreate(&g, 0))
        self._handle = <streams_graph_t>g
        self._owns_handle = True
        self._closed = False
        self._errors = _ErrorSlot()
        _debug_graph_created()

    cdef int _check_open(self) except -1:
        if self._closed:
            raise ValueError("operation on a closed Graph")
        return 0

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

    @property
    def closed(self):
        return self._closed

    def instantiate(self, *, auto_free_on_launch=False, upload_stream=None,
                    device_launch=False, use_node_priority=False):
        """Make an executable graph (``cudaGraphInstantiateWithFlags``).

        With ``upload_stream`` the executable is also uploaded there, so the
        first launch does not pay for it.
        """
        cdef unsigned long long flags = 0
        cdef cudaGraphExec_t ex = NULL
        cdef Stream up = None
        cdef GraphExec result
        self._check_open()
        if upload_stream is not None:
            up = _as_stream(upload_stream, "upload_stream")
        if auto_free_on_launch:
            flags |= cudaGraphInstantiateFlagAutoFreeOnLaunch
        if device_launch:
            flags |= cudaGraphInstantiateFlagDeviceLaunch
        if use_node_priority:
            flags |= cudaGraphInstantiateFlagUseNodePriority
        guard()
        with nogil:
            check(cudaGraphInstantiateWithFlags(&ex, <cudaGraph_t>self._handle, flags))
        result = GraphExec.__new__(GraphExec)
        result._handle = <streams_graph_exec_t>ex
        result._closed = False
        result._errors = self._errors
        _debug_graph_exec_created()
        if up is not None:
            result.upload(up)
        return result

    def clone(self):
        """A copy of the graph (callables in it stay alive for the clone too)."""
        cdef cudaGraph_t g = NULL
        self._check_open()
        guard()
        with nogil:
            check(cudaGraphClone(&g, <cudaGraph_t>self._handle))
        return _wrap_graph(g, True, self._errors)

    @property
    def nodes(self):
        cdef size_t n = 0, i
        cdef cudaGraphNode_t* arr
        self._check_open()
        with nogil:
            check(cudaGraphGetNodes(<cudaGraph_t>self._handle, NULL, &n))
        if n == 0:
            return []
        arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        try:
            with nogil:
                check(cudaGraphGetNodes(<cudaGraph_t>self._handle, arr, &n))
            return [_wrap_node(self, arr[i]) for i in range(n)]
        finally:
            PyMem_Free(arr)

    @property
    def edges(self):
        """``[(from_node, to_node), ...]``."""
        cdef size_t n = 0, i
        cdef cudaGraphNode_t* src
        cdef cudaGraphNode_t* dst
        self._check_open()
        with nogil:
            check(streams_cudaGraphGetEdges(<cudaGraph_t>self._handle, NULL, NULL, NULL, &n))
        if n == 0:
            return []
        src = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        dst = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
        try:
            with nogil:
                check(streams_cudaGraphGetEdges(<cudaGraph_t>self._handle, src, dst, NULL, &n))
            return [(_wrap_node(self, src[i]), _wrap_node(self, dst[i])) for i in range(n)]
        finally:
            PyMem_Free(src)
            PyMem_Free(dst)

    def debug_dot(self, path=None, *, verbose=False):
        """Graphviz text of the graph; also written to ``path`` if given."""
        cdef unsigned int flags = cudaGraphDebugDotFlagsVerbose if verbose else 0
        cdef bytes target
        cdef const char* c_target
        self._check_open()
        tmp = None
        if path is None:
            fd, tmp = _tempfile.mkstemp(suffix=".dot")
            _os.close(fd)
            target = _os.fsencode(tmp)
        else:
            target = _os.fsencode(path)
        c_target = target
        try:
            with nogil:
                check(cudaGraphDebugDotPrint(<cudaGraph_t>self._handle, c_target, flags))
            with open(tmp if tmp is not None else path) as f:
                return f.read()
        finally:
            if tmp is not None:
                _os.unlink(tmp)

    # ---- explicit construction -----------------------------------------------
    def add_empty_node(self, dependencies=()):
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        self._check_open()
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddEmptyNode(&node, <cudaGraph_t>self._handle, deps, n)
        return _node_added(self, err, node, deps)

    def add_host_node(self, callback, arg=None, dependencies=()):
        """A node that calls ``callback(arg)`` on the host, on every replay."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef cudaHostNodeParams params
        cdef _HostCall call
        self._check_open()
        call = _new_call(callback, arg, None, _KIND_HOST_FUNC)
        call.sink = self._errors
        call.persistent = True
        n = _node_array(dependencies, &deps, "dependencies")
        try:
            _attach_payload(<cudaGraph_t>self._handle, call)
        except BaseException:
            PyMem_Free(deps)
            raise
        params.fn = streams_graph_host_fn_trampoline
        params.userData = <void*>call
        with nogil:
            err = cudaGraphAddHostNode(&node, <cudaGraph_t>self._handle, deps, n, &params)
        return _node_added(self, err, node, deps)

    def add_kernel_node(self, kernel, grid=1, block=1, args=(), dependencies=()):
        """A kernel node.  ``kernel`` names a built-in kernel ("empty", "spin",
        "fill_u32", "increment_u32") until ``streams.Kernel`` lands."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef cudaKernelNodeParams params
        cdef _BuiltinArgs packed
        self._check_open()
        packed = _pack_builtin_args(kernel, args)
        params.func = <void*>packed.kernel
        params.gridDim.x, params.gridDim.y, params.gridDim.z = _dim(grid, "grid")
        params.blockDim.x, params.blockDim.y, params.blockDim.z = _dim(block, "block")
        params.sharedMemBytes = 0
        params.kernelParams = packed.ptrs
        params.extra = NULL
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            # CUDA copies the argument values here.
            err = cudaGraphAddKernelNode(&node, <cudaGraph_t>self._handle, deps, n, &params)
        return _node_added(self, err, node, deps)

    def add_memset_node(self, ptr, int value, size_t nbytes, dependencies=()):
        """Set ``nbytes`` bytes at device pointer ``ptr`` to ``value``."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef cudaMemsetParams params
        self._check_open()
        params.dst = _known_address(ptr, "ptr")
        params.pitch = 0
        params.value = <unsigned int>(value & 0xff)
        params.elementSize = 1
        params.width = nbytes
        params.height = 1
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddMemsetNode(&node, <cudaGraph_t>self._handle, deps, n, &params)
        return _node_added(self, err, node, deps)

    def add_memcpy_node(self, dst, src, size_t nbytes, dependencies=()):
        """Copy ``nbytes`` from pointer ``src`` to ``dst`` (any memory CUDA knows)."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef void* d
        cdef void* s
        self._check_open()
        d = _known_address(dst, "dst")
        s = _known_address(src, "src")
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddMemcpyNode1D(&node, <cudaGraph_t>self._handle, deps, n, d, s,
                                           nbytes, cudaMemcpyDefault)
        return _node_added(self, err, node, deps)

    def add_event_record_node(self, event, dependencies=()):
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef Event ev = _as_event(event, "event")
        self._check_open()
        ev._check_open()
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddEventRecordNode(&node, <cudaGraph_t>self._handle, deps, n,
                                              <cudaEvent_t>ev._handle)
        ev._recorded = True
        return _node_added(self, err, node, deps)

    def add_event_wait_node(self, event, dependencies=()):
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        cdef Event ev = _as_event(event, "event")
        self._check_open()
        ev._check_open()
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddEventWaitNode(&node, <cudaGraph_t>self._handle, deps, n,
                                            <cudaEvent_t>ev._handle)
        return _node_added(self, err, node, deps)

    def add_child_graph_node(self, Graph child not None, dependencies=()):
        """Embed a copy of ``child`` (its callables stay alive with this graph)."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaError_t err
        self._check_open()
        child._check_open()
        n = _node_array(dependencies, &deps, "dependencies")
        with nogil:
            err = cudaGraphAddChildGraphNode(&node, <cudaGraph_t>self._handle, deps, n,
                                             <cudaGraph_t>child._handle)
        return _node_added(self, err, node, deps)

    def close(self):
        """Destroy the graph (executables made from it keep working).  Idempotent."""
        cdef cudaGraph_t g
        if self._closed:
            return
        self._closed = True
        if self._owns_handle:
            self._owns_handle = False
            g = <cudaGraph_t>self._handle
            _debug_graph_destroyed()
            with nogil:
                check(cudaGraphDestroy(g))
        streams_drain_deferred()

    def __dealloc__(self):
        if self._owns_handle and not self._closed:
            _debug_graph_destroyed()
            if _dealloc_may_call_cuda():
                with nogil:
                    cudaGraphDestroy(<cudaGraph_t>self._handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._closed:
            return "<streams.Graph (closed)>"
        return f"<streams.Graph 0x{<uintptr_t>self._handle:x}>"


@cython.final
cdef class GraphExec:
    """An executable graph (``cudaGraphExec_t``), from ``Graph.instantiate()``."""

    def __cinit__(self):
        self._closed = True

    cdef int _check_open(self) except -1 nogil:
        if self._closed:
            with gil:
                raise ValueError("operation on a closed GraphExec")
        return 0

    cdef int c_launch(self, Stream stream) except -1 nogil:
        guard()
        self._check_open()
        stream._check_open()
        return check(cudaGraphLaunch(<cudaGraphExec_t>self._handle,
                                     <cudaStream_t>stream._handle))

    def launch(self, stream=None):
        """Enqueue one replay on ``stream`` (default: the current stream).

        Raises HostCallbackError first if a host callback of this graph
        raised during an earlier replay.
        """
        cdef Stream s = _as_stream(stream, "stream")
        if self._errors._callback_error is not None:
            _raise_slot_error(self._errors)
        with nogil:
            self.c_launch(s)

    def upload(self, stream=None):
        """Upload the executable ahead of its first launch."""
        cdef Stream s = _as_stream(stream, "stream")
        guard()
        self._check_open()
        s._check_open()
        with nogil:
            check(cudaGraphUpload(<cudaGraphExec_t>self._handle, <cudaStream_t>s._handle))

    def update(self, Graph graph not None):
        """Update the executable in place from ``graph``.

        Returns ``UpdateResult(ok, reason, error_node)``; when not ok the
        executable is unchanged and CUDA's reason is given in words.
        """
        cdef cudaGraphExecUpdateResultInfo info
        cdef cudaError_t err
        self._check_open()
        graph._check_open()
        guard()
        info.errorNode = NULL
        with nogil:
            err = cudaGraphExecUpdate(<cudaGraphExec_t>self._handle, <cudaGraph_t>graph._handle,
                                      &info)
        if err == cudaSuccess:
            return UpdateResult(True, "success", None)
        if err != cudaErrorGraphExecUpdateFailure:
            check(err)
        cudaGetLastError()
        node = _wrap_node(graph, info.errorNode) if info.errorNode != NULL else None
        return UpdateResult(False, _UPDATE_RESULT_NAMES.get(info.result, str(<int>info.result)),
                            node)

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Destroy the executable (after queued launches it stays valid for them)."""
        cdef cudaGraphExec_t ex
        if self._closed:
            return
        self._closed = True
        ex = <cudaGraphExec_t>self._handle
        _debug_graph_exec_destroyed()
        with nogil:
            check(cudaGraphExecDestroy(ex))
        streams_drain_deferred()

    def __dealloc__(self):
        if not self._closed:
            _debug_graph_exec_destroyed()
            if _dealloc_may_call_cuda():
                with nogil:
                    cudaGraphExecDestroy(<cudaGraphExec_t>self._handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._closed:
            return "<streams.GraphExec (closed)>"
        return f"<streams.GraphExec 0x{<uintptr_t>self._handle:x}>"


cdef int _raise_slot_error(_ErrorSlot slot) except -1:
    first = slot._callback_error
    slot._callback_error = None
    return _raise_host_callback_error(first, "graph host callback")


def _drain_deferred():
    """Drop references released by CUDA user objects now (tests use this)."""
    return streams_drain_deferred()
