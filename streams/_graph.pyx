# cython: language_level=3
"""Stream capture and CUDA graphs: ``Graph``, ``GraphNode``, ``GraphExec``.

A graph keeps alive what its nodes need: Python callables (owned by CUDA
user objects, so every graph, clone and executable that can still run the
node keeps them, and the last one releases them through the deferred queue
of ``_cudart`` without taking the GIL on CUDA's thread), and the streams
buffers and modules its kernel nodes use (held in use by the graph and its
executables: closing one of them frees it only once they are gone).  Work
captured from a stream refers to memory and modules by address only: keep
those alive while the graph lives.
"""
import os as _os
import tempfile as _tempfile
import threading as _threading
from collections import namedtuple as _namedtuple

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t

cimport streams._cudart as rt
from streams._args cimport as_dim3, as_enum, as_int, as_nbytes
from streams._device cimport DeviceScope, enter_device, exit_device, require_device
from streams._hostcall cimport (HostCall, KIND_HOST_FUNC, new_call, new_error_slot,
                                register_capture, take_capture)
from streams._launch cimport ArgPack, Kernel, keep_module, keep_pack_users, pack_args, \
    release_pack
from streams._memory cimport Span, hold_memory, release_span, resolve_span
from streams._handle cimport HandleOwner
from streams._platform cimport streams_close_begin, streams_is_closed
from streams._stream cimport ErrorSlot, Event, Stream, as_event, as_stream
from streams.cudart cimport *

from streams._args import StreamsEnum
from streams._cudart import CudaError
from streams._launch import builtin_kernel
from streams._stream import CaptureMode, CaptureStatus


class NodeType(StreamsEnum):
    """The kind of a graph node (``cudaGraphNodeType``)."""
    KERNEL = cudaGraphNodeTypeKernel
    MEMCPY = cudaGraphNodeTypeMemcpy
    MEMSET = cudaGraphNodeTypeMemset
    HOST = cudaGraphNodeTypeHost
    GRAPH = cudaGraphNodeTypeGraph
    EMPTY = cudaGraphNodeTypeEmpty
    EVENT_WAIT = cudaGraphNodeTypeWaitEvent
    EVENT_RECORD = cudaGraphNodeTypeEventRecord
    EXT_SEMAPHORE_SIGNAL = cudaGraphNodeTypeExtSemaphoreSignal
    EXT_SEMAPHORE_WAIT = cudaGraphNodeTypeExtSemaphoreWait
    MEM_ALLOC = cudaGraphNodeTypeMemAlloc
    MEM_FREE = cudaGraphNodeTypeMemFree
    CONDITIONAL = cudaGraphNodeTypeConditional


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

CaptureInfo = _namedtuple("CaptureInfo", "status id graph dependencies edge_data",
                          module="streams")
CaptureInfo.__doc__ = """What ``Stream.capture_info()`` returns.

``status`` is a CaptureStatus ("none", "active" or "invalidated"); ``graph``
is the graph being built (valid while the capture runs); ``dependencies``
the nodes the next captured work will depend on; ``edge_data`` one
``(from_port, to_port, type)`` per dependency."""

UpdateResult = _namedtuple("UpdateResult", "ok reason error_node", module="streams")
UpdateResult.__doc__ = """What ``GraphExec.update()`` returns: ``ok``, a
``reason`` in words, and the node CUDA blamed (or None)."""

cdef object _tls = _threading.local()    # .capture_modes: what capture_mode() replaced


# ---- capture modes --------------------------------------------------------------------------

def exchange_capture_mode(mode):
    """Set this thread's capture interaction mode; return the previous one.

    Wraps ``cudaThreadExchangeStreamCaptureMode``; prefer ``capture_mode()``.
    """
    cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode><int>as_enum(CaptureMode, mode, "mode")
    with nogil:
        rt.thread_exchange_capture_mode(&m)
    return CaptureMode(<int>m)


class capture_mode:
    """``with streams.capture_mode("relaxed"):`` sets this thread's capture
    interaction mode and restores the previous one on exit (per thread: one
    object may be used by several threads)."""

    def __init__(self, mode):
        self.mode = as_enum(CaptureMode, mode, "mode")

    def __enter__(self):
        previous = exchange_capture_mode(self.mode)
        try:
            stack = _tls.capture_modes
        except AttributeError:
            stack = _tls.capture_modes = []
        stack.append(previous)
        return self

    def __exit__(self, *exc):
        exchange_capture_mode(_tls.capture_modes.pop())
        return False


# ---- nodes and dependencies ------------------------------------------------------------------

cdef size_t _node_array(Graph graph, object nodes, cudaGraphNode_t** out,
                        str argname) except? 0:
    """Borrow the handles of GraphNodes of ``graph`` into a malloc'ed array."""
    cdef Py_ssize_t n, i
    cdef cudaGraphNode_t* arr
    cdef GraphNode node
    out[0] = NULL
    if nodes is None:
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
        return 0
    for i in range(n):
        if not isinstance(nodes[i], GraphNode):
            raise TypeError(f"{argname}[{i}] must be a GraphNode, not {type(nodes[i]).__name__}")
        node = <GraphNode>nodes[i]
        if node._graph is None or node._graph._handle != graph._handle:
            raise ValueError(f"{argname}[{i}] is a node of another graph")
    arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
    if arr == NULL:
        raise MemoryError()
    for i in range(n):
        arr[i] = <cudaGraphNode_t>(<GraphNode>nodes[i])._handle
    out[0] = arr
    return <size_t>n


cdef GraphNode _wrap_node(Graph graph, cudaGraphNode_t handle):
    cdef GraphNode node = GraphNode.__new__(GraphNode)
    node._handle = <void*>handle
    node._graph = graph
    return node


cdef Graph _wrap_graph(cudaGraph_t handle, bint owns, ErrorSlot errors, list keep):
    cdef Graph g = Graph.__new__(Graph)
    g._handle = <streams_graph_t>handle
    g._errors = errors if errors is not None else new_error_slot()
    g._keep = keep if keep is not None else []
    g._opened(owns)
    return g


cdef list _node_list(Graph graph, cudaGraphNode_t* arr, size_t n):
    return [_wrap_node(graph, arr[i]) for i in range(n)]


# ---- capture, for the Stream methods ------------------------------------------------------------

cdef unsigned long long _capture_id(Stream stream, cudaGraph_t* graph) except? 0:
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long cid = 0
    with nogil:
        rt.stream_get_capture_info(<cudaStream_t>stream._handle, &status, &cid, graph, NULL,
                                   NULL, NULL)
    # An invalidated capture still has its id: its end must find it too.
    return cid if status != cudaStreamCaptureStatusNone else 0


def begin_capture_to_graph(Stream stream not None, graph, dependencies, mode):
    cdef cudaStreamCaptureMode m = <cudaStreamCaptureMode><int>as_enum(CaptureMode, mode, "mode")
    cdef cudaGraphNode_t* deps = NULL
    cdef size_t n
    cdef Graph g
    cdef unsigned long long cid
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a streams.Graph, not {type(graph).__name__}")
    g = <Graph>graph
    # The graph stays in use (it cannot be destroyed) until the capture ends.
    g._use()
    try:
        stream._use()
        try:
            n = _node_array(g, dependencies, &deps, "dependencies")
            try:
                with nogil:
                    rt.stream_begin_capture_to_graph(<cudaStream_t>stream._handle,
                                                     <cudaGraph_t>g._handle, deps, n, m)
            finally:
                PyMem_Free(deps)
            cid = _capture_id(stream, NULL)
        finally:
            stream._unuse()
    except BaseException:
        g._unuse()
        raise
    register_capture(cid, g._errors, g, stream)


def end_capture(Stream stream not None):
    cdef cudaGraph_t g = NULL
    cdef cudaGraph_t building = NULL
    cdef unsigned long long cid
    cdef Graph target
    stream._use()
    try:
        # Which capture this is, to find what its callbacks report to, also
        # when CUDA fails the end below: the registry forgets it either way.
        try:
            cid = _capture_id(stream, &building)
        except CudaError:
            cid = 0     # invalidated: found by its stream

        try:
            with nogil:
                rt.stream_end_capture(<cudaStream_t>stream._handle, &g)
        except CudaError:
            slot, target_obj = take_capture(cid, stream)
            if target_obj is not None:
                # CUDA destroys the graph of a capture into it that was
                # invalidated: the Graph is closed, with nothing to release.
                target = <Graph>target_obj
                target._unuse()
                if target._owns_handle:
                    target._owns_handle = False
                    rt.count(rt.STREAMS_CNT_GRAPH_DESTROYED)
                streams_close_begin(&target._state)
            raise
        slot, target_obj = take_capture(cid, stream)
        if target_obj is not None:
            (<Graph>target_obj)._unuse()
    finally:
        stream._unuse()
    if target_obj is not None and g == <cudaGraph_t>(<Graph>target_obj)._handle:
        return target_obj    # begin_capture_to_graph: CUDA returns the user's graph
    rt.count_graph_adopted()
    return _wrap_graph(g, True, slot, None)


def capture_info(Stream stream not None):
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long cid = 0
    cdef cudaGraph_t g = NULL
    cdef const cudaGraphNode_t* deps = NULL
    cdef const cudaGraphEdgeData* edges = NULL
    cdef size_t n = 0, i
    stream._use()
    try:
        with nogil:
            rt.stream_get_capture_info(<cudaStream_t>stream._handle, &status, &cid, &g, &deps,
                                       &edges, &n)
        if status != cudaStreamCaptureStatusActive:
            return CaptureInfo(CaptureStatus(<int>status), cid if cid else None, None, [], [])
        graph = _wrap_graph(g, False, None, None)
        dep_nodes = [_wrap_node(graph, deps[i]) for i in range(n)]
        edge_data = ([(edges[i].from_port, edges[i].to_port, edges[i].type) for i in range(n)]
                     if edges != NULL else [(0, 0, 0)] * n)
    finally:
        stream._unuse()
    return CaptureInfo(CaptureStatus.ACTIVE, cid, graph, dep_nodes, edge_data)


def update_capture_dependencies(Stream stream not None, nodes, mode):
    cdef unsigned int flags
    cdef cudaGraphNode_t* deps = NULL
    cdef cudaGraph_t building = NULL
    cdef size_t n
    if mode == "add":
        flags = cudaStreamAddCaptureDependencies
    elif mode == "set":
        flags = cudaStreamSetCaptureDependencies
    else:
        raise ValueError(f"mode must be 'add' or 'set', got {mode!r}")
    stream._use()
    try:
        if _capture_id(stream, &building) == 0:
            raise ValueError("update_capture_dependencies: the stream is not capturing")
        n = _node_array(_wrap_graph(building, False, None, None), nodes, &deps, "nodes")
        try:
            with nogil:
                rt.stream_update_capture_dependencies(<cudaStream_t>stream._handle, deps, n,
                                                      flags)
        finally:
            PyMem_Free(deps)
    finally:
        stream._unuse()


class CaptureContext:
    """``with stream.capture() as cap:`` ... ``cap.graph`` after the block.

    If the block raises, the capture is ended and its graph destroyed, so
    the stream leaves capture mode and stays usable; the exception goes on.
    """

    def __init__(self, stream, mode):
        as_enum(CaptureMode, mode, "mode")
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


# ---- classes ------------------------------------------------------------------------------------

@cython.final
cdef class _EventHold:
    """Holds an event in use while a graph node records or waits on it: its
    close() then destroys it only once the graph and its executables are gone."""
    cdef Event event

    def __cinit__(self, Event event not None):
        event._use()
        self.event = event

    def __dealloc__(self):
        if self.event is not None:
            self.event._unuse()


@cython.final
cdef class GraphNode:
    """A node of a Graph (kept alive with its graph)."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "the Graph.add_*_node methods make them")

    cdef int _check(self) except -1:
        if self._graph is None:
            raise ValueError("this GraphNode was never initialised (the Graph.add_*_node "
                             "methods make them)")
        return 0

    @property
    def handle(self):
        return <uintptr_t>self._handle

    @property
    def graph(self):
        return self._graph

    @property
    def type(self):
        """A NodeType, equal to "kernel", "host", "memset", "memcpy", "empty", ..."""
        cdef cudaGraphNodeType t
        self._check()
        self._graph._use()
        try:
            with nogil:
                rt.graph_node_get_type(<cudaGraphNode_t>self._handle, &t)
        finally:
            self._graph._unuse()
        try:
            return NodeType(<int>t)
        except ValueError:
            return <int>t

    @property
    def dependencies(self):
        cdef size_t n = 0
        cdef cudaGraphNode_t* deps
        self._check()
        self._graph._use()
        try:
            with nogil:
                rt.graph_node_get_dependencies(<cudaGraphNode_t>self._handle, NULL, &n)
            if n == 0:
                return []
            deps = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
            if deps == NULL:
                raise MemoryError()
            try:
                with nogil:
                    rt.graph_node_get_dependencies(<cudaGraphNode_t>self._handle, deps, &n)
                return _node_list(self._graph, deps, n)
            finally:
                PyMem_Free(deps)
        finally:
            self._graph._unuse()

    def __eq__(self, other):
        if not isinstance(other, GraphNode):
            return NotImplemented
        return self._handle == (<GraphNode>other)._handle

    def __hash__(self):
        return hash(("streams.GraphNode", <uintptr_t>self._handle))

    def __repr__(self):
        try:
            kind = str(self.type.name.lower())
        except Exception:
            kind = "?"
        return f"<streams.GraphNode {kind} 0x{<uintptr_t>self._handle:x}>"


cdef class Graph(HandleOwner):
    """A CUDA graph (``cudaGraph_t``): ``Graph()`` is empty; captures return one."""

    def __init__(self):
        cdef cudaGraph_t g = NULL
        self._init_once()
        require_device()
        rt.drain_deferred()
        with nogil:
            rt.graph_create(&g)
        self._handle = <streams_graph_t>g
        self._errors = new_error_slot()
        self._keep = []
        self._opened(True)

    cdef streams_graph_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int _destroy(self) except -1 nogil:
        return rt.destroy_handle(rt.HANDLE_GRAPH, self._handle)

    cdef void _release(self) noexcept nogil:
        rt.release_handle(rt.HANDLE_GRAPH, self._handle)

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

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
        if upload_stream is not None:
            up = as_stream(upload_stream, "upload_stream")
        if auto_free_on_launch:
            flags |= cudaGraphInstantiateFlagAutoFreeOnLaunch
        if device_launch:
            flags |= cudaGraphInstantiateFlagDeviceLaunch
        if use_node_priority:
            flags |= cudaGraphInstantiateFlagUseNodePriority
        self._use()
        try:
            rt.drain_deferred()
            with nogil:
                rt.graph_instantiate(&ex, <cudaGraph_t>self._handle, flags)
        finally:
            self._unuse()
        result = GraphExec.__new__(GraphExec)
        result._handle = <streams_graph_exec_t>ex
        result._errors = self._errors
        result._keep = tuple(self._keep)
        result._opened(True)
        if up is not None:
            result.upload(up)
        return result

    def clone(self):
        """A copy of the graph (what its nodes need stays alive for the clone too)."""
        cdef cudaGraph_t g = NULL
        self._use()
        try:
            with nogil:
                rt.graph_clone(&g, <cudaGraph_t>self._handle)
        finally:
            self._unuse()
        return _wrap_graph(g, True, self._errors, list(self._keep))

    @property
    def nodes(self):
        cdef size_t n = 0
        cdef cudaGraphNode_t* arr
        self._use()
        try:
            with nogil:
                rt.graph_get_nodes(<cudaGraph_t>self._handle, NULL, &n)
            if n == 0:
                return []
            arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
            if arr == NULL:
                raise MemoryError()
            try:
                with nogil:
                    rt.graph_get_nodes(<cudaGraph_t>self._handle, arr, &n)
                return _node_list(self, arr, n)
            finally:
                PyMem_Free(arr)
        finally:
            self._unuse()

    @property
    def edges(self):
        """``[(from_node, to_node), ...]``."""
        cdef size_t n = 0, i
        cdef cudaGraphNode_t* src
        cdef cudaGraphNode_t* dst
        self._use()
        try:
            with nogil:
                rt.graph_get_edges(<cudaGraph_t>self._handle, NULL, NULL, NULL, &n)
            if n == 0:
                return []
            src = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
            dst = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
            try:
                if src == NULL or dst == NULL:
                    raise MemoryError()
                with nogil:
                    rt.graph_get_edges(<cudaGraph_t>self._handle, src, dst, NULL, &n)
                return [(_wrap_node(self, src[i]), _wrap_node(self, dst[i])) for i in range(n)]
            finally:
                PyMem_Free(src)
                PyMem_Free(dst)
        finally:
            self._unuse()

    def debug_dot(self, path=None, *, verbose=False):
        """Graphviz text of the graph; also written to ``path`` if given."""
        cdef unsigned int flags = cudaGraphDebugDotFlagsVerbose if verbose else 0
        cdef bytes target
        cdef const char* c_target
        tmp = None
        if path is None:
            fd, tmp = _tempfile.mkstemp(suffix=".dot")
            _os.close(fd)
            target = _os.fsencode(tmp)
        else:
            target = _os.fsencode(path)
        c_target = target
        try:
            self._use()
            try:
                with nogil:
                    rt.graph_debug_dot_print(<cudaGraph_t>self._handle, c_target, flags)
            finally:
                self._unuse()
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
        self._use()
        try:
            n = _node_array(self, dependencies, &deps, "dependencies")
            try:
                with nogil:
                    rt.graph_add_empty_node(&node, <cudaGraph_t>self._handle, deps, n)
            finally:
                PyMem_Free(deps)
        finally:
            self._unuse()
        return _wrap_node(self, node)

    def add_host_node(self, callback, arg=None, dependencies=()):
        """A node that calls ``callback(arg)`` on the host, on every replay."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef HostCall call = new_call(callback, arg, None, self._errors, KIND_HOST_FUNC)
        call.persistent = True
        self._use()
        try:
            n = _node_array(self, dependencies, &deps, "dependencies")
            try:
                rt.graph_attach_payload(<cudaGraph_t>self._handle, <PyObject*>call)
                with nogil:
                    rt.graph_add_host_node(&node, <cudaGraph_t>self._handle, deps, n,
                                           <PyObject*>call)
            finally:
                PyMem_Free(deps)
        finally:
            self._unuse()
        return _wrap_node(self, node)

    def add_kernel_node(self, kernel, grid=1, block=1, *args, shared_mem=0, dependencies=()):
        """A kernel node: ``kernel`` (a streams.Kernel, or the name of a
        built-in kernel: "empty", "spin", "fill_u32", "increment_u32") with
        ``grid`` x ``block`` threads and ``args`` packed as ``Stream.launch``
        packs them.  The graph keeps the kernel's module loaded and the
        streams buffers among the arguments alive."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaKernelNodeParams params
        cdef ArgPack pack
        cdef Kernel k
        cdef dim3 g, b
        if isinstance(kernel, str):
            kernel = builtin_kernel(kernel)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a streams.Kernel or a built-in kernel's name, not "
                            f"{type(kernel).__name__}")
        k = <Kernel>kernel
        k._check_usable()
        as_dim3(grid, &g, "grid")
        as_dim3(block, &b, "block")
        params.sharedMemBytes = <unsigned int>as_nbytes(shared_mem, "shared_mem")
        params.func = k._func
        params.gridDim = g
        params.blockDim = b
        params.extra = NULL
        module_use = keep_module(k._module)
        pack_args(k, args, &pack, None)
        try:
            params.kernelParams = pack.ptrs if len(args) else NULL
            self._use()
            try:
                n = _node_array(self, dependencies, &deps, "dependencies")
                try:
                    with nogil:
                        # CUDA copies the argument values here.
                        rt.graph_add_kernel_node(&node, <cudaGraph_t>self._handle, deps, n,
                                                 &params)
                finally:
                    PyMem_Free(deps)
            finally:
                self._unuse()
            self._keep.append(module_use)
            self._keep.append(keep_pack_users(&pack))
            self._keep.append(args)
        finally:
            release_pack(&pack)
        return _wrap_node(self, node)

    def add_memset_node(self, ptr, value, nbytes, dependencies=()):
        """Set ``nbytes`` bytes at ``ptr`` (device memory) to ``value`` (0-255)."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef cudaMemsetParams params
        cdef Span span
        cdef int v = as_int(value, "value")
        cdef size_t count = as_nbytes(nbytes, "nbytes")
        if v < 0 or v > 255:
            raise ValueError(f"value must be a byte (0-255), got {v}")
        resolve_span(ptr, &span, 0, None, "ptr")
        try:
            if span.nbytes != <size_t>-1 and count > span.nbytes:
                raise ValueError(f"nbytes={count} is more than ptr holds ({span.nbytes})")
            params.dst = span.ptr
            params.pitch = 0
            params.value = <unsigned int>v
            params.elementSize = 1
            params.width = count
            params.height = 1
            self._use()
            try:
                n = _node_array(self, dependencies, &deps, "dependencies")
                try:
                    with nogil:
                        rt.graph_add_memset_node(&node, <cudaGraph_t>self._handle, deps, n,
                                                 &params)
                finally:
                    PyMem_Free(deps)
            finally:
                self._unuse()
            self._keep.append(hold_memory(ptr))
        finally:
            release_span(&span)
        return _wrap_node(self, node)

    def add_memcpy_node(self, dst, src, nbytes, dependencies=()):
        """Copy ``nbytes`` from ``src`` to ``dst`` (memory CUDA knows: device,
        managed or pinned)."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        cdef Span d, s
        cdef size_t count = as_nbytes(nbytes, "nbytes")
        d.user = NULL
        d.has_view = False
        s.user = NULL
        s.has_view = False
        try:
            resolve_span(dst, &d, 0, None, "dst")
            resolve_span(src, &s, 0, None, "src")
            if s.nbytes != <size_t>-1 and count > s.nbytes:
                raise ValueError(f"nbytes={count} is more than src holds ({s.nbytes})")
            if d.nbytes != <size_t>-1 and count > d.nbytes:
                raise ValueError(f"nbytes={count} is more than dst holds ({d.nbytes})")
            self._use()
            try:
                n = _node_array(self, dependencies, &deps, "dependencies")
                try:
                    with nogil:
                        rt.graph_add_memcpy_node_1d(&node, <cudaGraph_t>self._handle, deps, n,
                                                    d.ptr, s.ptr, count)
                finally:
                    PyMem_Free(deps)
            finally:
                self._unuse()
            self._keep.append((hold_memory(dst), hold_memory(src)))
        finally:
            release_span(&s)
            release_span(&d)
        return _wrap_node(self, node)

    def add_event_record_node(self, event, dependencies=()):
        return self._add_event_node(as_event(event, "event"), dependencies, True)

    def add_event_wait_node(self, event, dependencies=()):
        return self._add_event_node(as_event(event, "event"), dependencies, False)

    cdef GraphNode _add_event_node(self, Event ev, object dependencies, bint record):
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        self._use()
        try:
            ev._use()
            try:
                n = _node_array(self, dependencies, &deps, "dependencies")
                try:
                    with nogil:
                        if record:
                            rt.graph_add_event_record_node(&node, <cudaGraph_t>self._handle,
                                                           deps, n, <cudaEvent_t>ev._handle)
                        else:
                            rt.graph_add_event_wait_node(&node, <cudaGraph_t>self._handle,
                                                         deps, n, <cudaEvent_t>ev._handle)
                finally:
                    PyMem_Free(deps)
            finally:
                ev._unuse()
        finally:
            self._unuse()
        if record:
            ev._recorded = True
        self._keep.append(_EventHold(ev))
        return _wrap_node(self, node)

    def add_child_graph_node(self, Graph child not None, dependencies=()):
        """Embed a copy of ``child`` (what its nodes need stays alive with this graph)."""
        cdef cudaGraphNode_t node = NULL
        cdef cudaGraphNode_t* deps = NULL
        cdef size_t n
        self._use()
        try:
            child._use()
            try:
                n = _node_array(self, dependencies, &deps, "dependencies")
                try:
                    with nogil:
                        rt.graph_add_child_graph_node(&node, <cudaGraph_t>self._handle, deps,
                                                      n, <cudaGraph_t>child._handle)
                finally:
                    PyMem_Free(deps)
            finally:
                child._unuse()
        finally:
            self._unuse()
        self._keep.extend(child._keep)
        return _wrap_node(self, node)

    def close(self):
        """Destroy the graph (executables made from it keep working).  Idempotent."""
        self._close_handle()
        rt.drain_deferred()

    def __repr__(self):
        if self.closed:
            return "<streams.Graph (closed)>"
        return f"<streams.Graph 0x{<uintptr_t>self._handle:x}>"


cdef int _enqueue_exec(GraphExec exe, Stream stream, bint launch) except -1 nogil:
    # With the stream's device current, as for a kernel launch (-1, the
    # special streams: the current device's).
    cdef DeviceScope scope
    exe._use()
    try:
        stream._use()
        try:
            enter_device(&scope, stream._device)
            try:
                if launch:
                    return rt.graph_launch(<cudaGraphExec_t>exe._handle,
                                           <cudaStream_t>stream._handle)
                return rt.graph_upload(<cudaGraphExec_t>exe._handle,
                                       <cudaStream_t>stream._handle)
            finally:
                exit_device(&scope)
        finally:
            stream._unuse()
    finally:
        exe._unuse()


@cython.final
cdef class GraphExec(HandleOwner):
    """An executable graph (``cudaGraphExec_t``), from ``Graph.instantiate()``."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Graph.instantiate()")

    cdef int _destroy(self) except -1 nogil:
        return rt.destroy_handle(rt.HANDLE_GRAPH_EXEC, self._handle)

    cdef void _release(self) noexcept nogil:
        rt.release_handle(rt.HANDLE_GRAPH_EXEC, self._handle)

    cdef streams_graph_exec_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_launch(self, Stream stream) except -1 nogil:
        return _enqueue_exec(self, stream, 1)

    cdef int c_upload(self, Stream stream) except -1 nogil:
        return _enqueue_exec(self, stream, 0)

    def launch(self, stream=None):
        """Enqueue one replay on ``stream`` (default: the current stream).

        Raises HostCallbackError first if a host callback of this graph
        raised during an earlier replay.
        """
        cdef Stream s = as_stream(stream, "stream")
        if self._errors is not None and self._errors.first is not None:
            self._errors.raise_pending("graph host callback")
        if rt.enqueue_may_keep_gil():
            self.c_launch(s)
        else:
            with nogil:
                self.c_launch(s)

    def upload(self, stream=None):
        """Upload the executable ahead of its first launch."""
        cdef Stream s = as_stream(stream, "stream")
        with nogil:
            self.c_upload(s)

    def update(self, Graph graph not None):
        """Update the executable in place from ``graph``.

        Returns ``UpdateResult(ok, reason, error_node)``; when not ok the
        executable is unchanged and CUDA's reason is given in words.
        """
        cdef cudaGraphExecUpdateResultInfo info
        cdef int refused
        info.errorNode = NULL
        self._use()
        try:
            graph._use()
            try:
                with nogil:
                    refused = rt.graph_exec_update(<cudaGraphExec_t>self._handle,
                                                   <cudaGraph_t>graph._handle, &info)
            finally:
                graph._unuse()
        finally:
            self._unuse()
        if not refused:
            # Replays already queued may still use what the old nodes needed.
            self._keep = self._keep + tuple(graph._keep)
            return UpdateResult(True, "success", None)
        node = _wrap_node(graph, info.errorNode) if info.errorNode != NULL else None
        return UpdateResult(False, _UPDATE_RESULT_NAMES.get(info.result, str(<int>info.result)),
                            node)

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

    def close(self):
        """Destroy the executable (launches already queued still run).  Idempotent."""
        self._close_handle()
        rt.drain_deferred()

    def __repr__(self):
        if self.closed:
            return "<streams.GraphExec (closed)>"
        return f"<streams.GraphExec 0x{<uintptr_t>self._handle:x}>"
