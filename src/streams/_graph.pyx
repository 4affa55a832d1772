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

An executable keeps what each of its kernel nodes runs where that is no
longer the source graph's node (``GraphExec._kernel_state``): after a change
of its own, an update from another graph, or before a change of the source
graph's node; ``set_kernel_node_args`` changes some arguments of that.

What a node-by-node update of an executable brings (a new host callable,
buffers, a module, a child graph's needs) goes into the executable's "box":
a Python list owned by a CUDA user object that only the executable holds,
so it lives until the executable is destroyed and no replay of it is still
in flight.  The box is attached to the graph for the instant of
instantiation (the executable takes a reference to every user object of its
graph), then released from the graph.

Capture (``_graph/capture.pxi``) and the kernel nodes of any graph
(``_graph/kernel_nodes.pxi``) are parts of their own, included where they
stand in this module; its private hooks for the tests are included last
(``_graph/_testing.pxi``).
"""
import os as _os
import tempfile as _tempfile
import threading as _threading
from collections import namedtuple as _namedtuple

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uintptr_t
from libc.string cimport memcpy, memset

cimport streams._cudart as rt
cimport streams._nvtx as nvtx
from streams._cudart cimport (STREAMS_LAUNCH_PARAM_BUFFER_POINTER, STREAMS_LAUNCH_PARAM_BUFFER_SIZE,
                              STREAMS_LAUNCH_PARAM_END, streams_kernel_node_params)
from streams._args cimport as_bool, as_dim3, as_enum, as_int, as_nbytes, as_uint, as_unsigned
from streams._device cimport (DeviceScope, enter_device, exit_device, require_device,
                              resolve_device)
from streams._hostcall cimport (HostCall, KIND_HOST_FUNC, capture_entry, claim_capture,
                                forget_capture, native_host_func, new_call, new_error_slot,
                                register_capture, set_capture_hook, take_capture)
from streams._launch cimport ADOPTED_FUNCTION, ArgPack, Kernel, adopt_kernel, arg_is_condition, \
    arg_is_pointer, arg_kind, arg_size, find_node_kernel, keep_pack_users, pack_arg, pack_args, \
    release_pack, ConditionHandle
from streams._memory cimport (SPAN_DEVICE, Span, check_fits, init_span, keep_memory, release_span,
                              resolve_span)
from streams._handle cimport HandleOwner, keep_in_use
from streams._platform cimport (streams_close_begin, streams_flag_get, streams_flag_set,
                                streams_is_closed,
                                streams_ptr_load, streams_ptr_store)
from streams._stream cimport (ErrorSlot, Event, Stream, as_event, as_stream,
                              streams_host_fn_t)
from streams.cudart cimport *

from streams._args import StreamsEnum
from streams._cudart import CudaError
from streams._launch import builtin_kernel
from streams._stream import CaptureMode, CaptureStatus
import struct as _struct
import weakref as _weakref

# streams.nvtx.trace_calls: the switch of the ranges around this module's
# traced operations (one load and one branch while off;
# tests/nvtx/test_nvtx_cpu.py, the per-call ranges).
cdef const int* _tracing = nvtx.trace_switch()


cdef extern from "cuda_versions.h":
    cudaGraphConditionalNodeType streams_cudaGraphCondTypeSwitch


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
is the graph being built, the Graph ``end_capture`` will return (for a
capture into a graph, that Graph; closed once the capture ends otherwise:
invalidated, or ended by another library); ``dependencies`` the nodes the
next captured work will depend on (nodes of ``graph``); ``edge_data`` one
``(from_port, to_port, type)`` per dependency."""

UpdateResult = _namedtuple("UpdateResult", "ok reason error_node", module="streams")
UpdateResult.__doc__ = """What ``GraphExec.update()`` returns: ``ok``, a
``reason`` in words, and the node CUDA blamed (or None)."""

GraphMemoryInfo = _namedtuple("GraphMemoryInfo", "used used_high reserved reserved_high",
                              module="streams")
GraphMemoryInfo.__doc__ = """What ``streams.graph_memory_info()`` returns, in
bytes: physical memory mapped into at least one graph now (``used``) and held
by the allocator of graph memory nodes (``reserved``), each with its high
watermark.  A free ends an allocation, not its mapping: CUDA keeps the pages
for the next launch, and both counts drop only when ``trim_graph_memory()``
gives back what no unfreed allocation and no pending launch holds."""


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
        node._check()
        # A closed graph's handle may already be another graph's (CUDA reuses
        # addresses): its nodes are refused before their handles are compared.
        if node._graph.closed:
            raise ValueError(f"{argname}[{i}] is a node of a closed graph")
        if node._graph._handle != graph._handle:
            raise ValueError(f"{argname}[{i}] is a node of another graph")
    arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
    if arr == NULL:
        raise MemoryError()
    for i in range(n):
        arr[i] = <cudaGraphNode_t>(<GraphNode>nodes[i])._handle
    out[0] = arr
    return <size_t>n


ctypedef int (*_node_adder)(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                            size_t n, void* arg) except -1 nogil


cdef cudaGraphNode_t _add_node(Graph graph, object dependencies, _node_adder add,
                               void* arg, object keep=None) except NULL:
    """Add a node after ``dependencies`` (nodes of ``graph``) with ``add``,
    the graph held in use meanwhile; ``keep`` (what the node needs) goes to
    the graph's keep list before the use ends: a close() in another thread
    then lets it go with the rest (_let_go)."""
    cdef cudaGraphNode_t node = NULL
    cdef cudaGraphNode_t* deps = NULL
    cdef size_t n
    graph._use()
    try:
        n = _node_array(graph, dependencies, &deps, "dependencies")
        if keep is not None:
            _keep_ready(graph)
        try:
            with nogil:
                add(&node, <cudaGraph_t>graph._handle, deps, n, arg)
        finally:
            PyMem_Free(deps)
        if keep is not None:
            _keep_add(graph, keep)
    finally:
        graph._unuse()
    return node


# ---- the graph's keep list ------------------------------------------------------------------
# Graph._keep is read and replaced by any thread (close() rebinds it): every
# access is under the graph's critical section (free-threaded CPython; the
# GIL elsewhere), never through a borrowed read of the field that another
# thread's close() could free under it.  Written and copied while the graph
# is in use, so that what a node needs is in the list before the last user
# lets the list go, and a copy (instantiate, clone, a child, an update) is
# taken before a close() can empty it.

cdef int _keep_add(Graph graph, object obj) except -1:
    with cython.critical_section(graph):
        graph._keep.append(obj)
    return 0


cdef list _keep_copy(Graph graph):
    with cython.critical_section(graph):
        return list(graph._keep)


cdef int _keep_ready(Graph graph) except -1:
    # Before a node that needs something is added to the graph of a capture
    # in progress (capture_info().graph, held in use by the caller): its
    # keep list gets a CUDA user object of that graph, once, so that what
    # the node needs lives as long as CUDA's graph, its clones, executables
    # and replays, whoever ends the capture (another library too) and
    # whatever becomes of this Graph object.  Attached under the capture
    # lock, as every attach to a capture's graph (_hostcall).
    cdef Graph top = _top(graph)
    cdef bint moved = False
    cdef list keep
    if top._capture == 0:
        return 0
    with cython.critical_section(top):
        if top._keep_attached or top._capture == 0:
            return 0
        top._keep_attached = True
        keep = top._keep
    rt.payload_incref(<PyObject*>keep)      # the user object's, once it is made
    try:
        with nogil:
            rt.capture_lock_enter()
            try:
                rt.graph_attach_reference(<cudaGraph_t>top._handle, <PyObject*>keep, &moved)
            finally:
                rt.capture_lock_leave()
    except BaseException:
        if not moved:
            rt.payload_decref(<PyObject*>keep)
        with cython.critical_section(top):
            top._keep_attached = False
        raise
    return 0


cdef object _graph_lock(Graph graph):
    # The change lock of a graph's top graph (Graph._change_lock), made once.
    cdef Graph top = _top(graph)
    made = _threading.RLock() if top._change_lock is None else None
    with cython.critical_section(top):
        if top._change_lock is None:
            top._change_lock = made
        return top._change_lock


cdef tuple _callback_slots(Graph graph):
    # The slots of the callbacks an executable of `graph` runs: the graph's
    # own, and those of its child graphs.
    cdef Graph top = _top(graph)
    with cython.critical_section(top):
        children = top._child_errors
    return (graph._errors,) + children if children else (graph._errors,)


cdef void _let_go(Graph graph, bint later) noexcept:
    # The handle is gone (or was never this graph's to destroy): what its
    # nodes needed goes too, now, or (later: on the thread of a last user,
    # which may be anywhere) at the next drain of the deferred queue.
    # Rebound, not cleared: a conditional body shares the list.
    cdef list keep
    with cython.critical_section(graph):
        keep = graph._keep
        graph._keep = []
    if later and keep:
        rt.defer_release(<rt.release_fn>NULL, NULL, keep)


cdef struct _Copy:
    void* dst
    const void* src
    size_t count


cdef int _add_empty(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                    size_t n, void* arg) except -1 nogil:
    return rt.graph_add_empty_node(out, g, deps, n)


cdef int _add_host(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                   size_t n, void* arg) except -1 nogil:
    return rt.graph_add_host_node(out, g, deps, n, <PyObject*>arg)


cdef struct _NativeHost:
    rt.host_fn fn
    void* data


cdef int _add_native_host(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                          size_t n, void* arg) except -1 nogil:
    cdef _NativeHost* h = <_NativeHost*>arg
    return rt.graph_add_native_host_node(out, g, deps, n, h.fn, h.data)


cdef int _add_kernel(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                     size_t n, void* arg) except -1 nogil:
    # CUDA copies the argument values here.
    return rt.graph_add_kernel_node(out, g, deps, n, <cudaKernelNodeParams*>arg)


cdef int _add_function(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                       size_t n, void* arg) except -1 nogil:
    # An adopted CUfunction: the driver's kernel node (Kernel.from_handle).
    return rt.graph_add_function_node(out, g, deps, n, <cudaKernelNodeParams*>arg)


cdef int _add_memset(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                     size_t n, void* arg) except -1 nogil:
    return rt.graph_add_memset_node(out, g, deps, n, <cudaMemsetParams*>arg)


cdef int _add_memcpy(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                     size_t n, void* arg) except -1 nogil:
    cdef _Copy* c = <_Copy*>arg
    return rt.graph_add_memcpy_node_1d(out, g, deps, n, c.dst, c.src, c.count)


cdef int _add_child(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                    size_t n, void* arg) except -1 nogil:
    return rt.graph_add_child_graph_node(out, g, deps, n, <cudaGraph_t>arg)


cdef int _add_event_record(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                           size_t n, void* arg) except -1 nogil:
    return rt.graph_add_event_record_node(out, g, deps, n, <cudaEvent_t>arg)


cdef int _add_event_wait(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                         size_t n, void* arg) except -1 nogil:
    return rt.graph_add_event_wait_node(out, g, deps, n, <cudaEvent_t>arg)


cdef int _add_generic(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                      size_t n, void* arg) except -1 nogil:
    return rt.graph_add_node(out, g, deps, n, <cudaGraphNodeParams*>arg)


cdef int _add_mem_alloc(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                        size_t n, void* arg) except -1 nogil:
    return rt.graph_add_mem_alloc_node(out, g, deps, n, <cudaMemAllocNodeParams*>arg)


cdef int _add_mem_free(cudaGraphNode_t* out, cudaGraph_t g, const cudaGraphNode_t* deps,
                       size_t n, void* arg) except -1 nogil:
    return rt.graph_add_mem_free_node(out, g, deps, n, arg)


cdef GraphNode _wrap_node(Graph graph, cudaGraphNode_t handle):
    cdef GraphNode node = GraphNode.__new__(GraphNode)
    node._handle = <void*>handle
    node._graph = graph
    return node


cdef Graph _wrap_graph(cudaGraph_t handle, bint owns, ErrorSlot errors, list keep):
    cdef Graph g = Graph.__new__(Graph)
    g._handle = <streams_graph_t>handle
    g._errors = errors if errors is not None else new_error_slot(True)
    if errors is None and not owns:
        # A graph streams did not build (a capture's graph in progress): what
        # its nodes are is unknown, so its executables box as if it had host
        # callables.
        g._errors.host_calls = True
    g._keep = keep if keep is not None else []
    g._opened(owns)
    return g


cdef Graph _wrap_body(Graph parent, cudaGraph_t handle):
    """A body graph of a conditional node of ``parent``.  CUDA owns it (it
    dies with the node), so the body holds its parent in use instead: the
    parent, closed, is destroyed only once its bodies are closed or gone."""
    cdef Graph body = Graph.__new__(Graph)
    body._handle = <streams_graph_t>handle
    body._errors = parent._errors
    with cython.critical_section(parent):
        body._keep = parent._keep     # what its nodes need lives with the top graph
    parent._use()
    Py_INCREF(parent)
    body._parent = <void*>parent
    body._opened(True)
    return body


cdef bint _in_family(Graph graph, void* handle):
    """Whether ``handle`` is ``graph`` or a graph whose conditional node
    holds ``graph`` (a body, at any depth)."""
    cdef Graph g = graph
    while True:
        if g._handle == handle:
            return True
        if g._parent == NULL:
            return False
        g = <Graph>g._parent


def _recapture_refusal(runtime, driver):
    """The error Graph.recapture raises with these CUDA versions (runtime
    streams is built with, driver; as ``runtime_version()`` gives them)."""
    have = (f"this build uses the CUDA {runtime // 1000}.{runtime % 1000 // 10} runtime, "
            f"the driver supports CUDA {driver // 1000}.{driver % 1000 // 10}")
    if runtime < 13030 or driver < 13030:
        return NotImplementedError(
            "Graph.recapture needs CUDA 13.3 or newer in both the runtime streams is built "
            f"with and the driver (cudaStreamBeginRecaptureToGraph): {have}")
    # Recapturing releases the graph's user objects first (CUDA's rule),
    # which are what keeps the host callables of its nodes alive: not
    # offered until the graph's keep-alives are rebuilt around that.
    return NotImplementedError(
        "Graph.recapture (cudaStreamBeginRecaptureToGraph, CUDA 13.3) is not implemented "
        f"by this version of streams ({have}); capture a new graph and use "
        "GraphExec.update instead")


cdef Graph _top(Graph graph):
    cdef Graph g = graph
    while g._parent != NULL:
        g = <Graph>g._parent
    return g


cdef int _get_handles(void* owner, bint of_node, cudaGraphNode_t* out,
                      size_t* n) except -1 nogil:
    if of_node:
        return rt.graph_node_get_dependencies(<cudaGraphNode_t>owner, out, n)
    return rt.graph_get_nodes(<cudaGraph_t>owner, out, n)


cdef list _handles(void* owner, bint of_node):
    # The nodes of graph `owner`, or (of_node) the dependencies of node
    # `owner`, as ints; the caller holds what owns the handle in use.
    # CUDA fills at most the array's size, and says how many it filled.
    cdef size_t n = 0, i
    cdef cudaGraphNode_t* arr
    with nogil:
        _get_handles(owner, of_node, NULL, &n)
    if n == 0:
        return []
    arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
    if arr == NULL:
        raise MemoryError()
    try:
        with nogil:
            _get_handles(owner, of_node, arr, &n)
        return [<uintptr_t>arr[i] for i in range(n)]
    finally:
        PyMem_Free(arr)


cdef list _node_list(Graph graph, void* owner, bint of_node):
    # The nodes of `graph` (owner: its handle), or (of_node) the
    # dependencies of its node `owner`, as GraphNode objects: the one place
    # that turns the handles CUDA lists into nodes (no caller casts an int).
    # The caller holds `graph` in use.
    cdef size_t n = 0, i
    cdef cudaGraphNode_t* arr
    with nogil:
        _get_handles(owner, of_node, NULL, &n)
    if n == 0:
        return []
    arr = <cudaGraphNode_t*>PyMem_Malloc(n * sizeof(cudaGraphNode_t))
    if arr == NULL:
        raise MemoryError()
    try:
        with nogil:
            _get_handles(owner, of_node, arr, &n)
        return [_wrap_node(graph, arr[i]) for i in range(n)]
    finally:
        PyMem_Free(arr)


include "_graph/capture.pxi"


# ---- classes ------------------------------------------------------------------------------------



cdef int _check_alive(ConditionHandle c, str argname) except -1:
    # Its graph's handle, once destroyed, may be reused by a new graph: a
    # condition whose graph is gone or closed matches none.
    g = c._graph_ref() if c._graph_ref is not None else None
    if g is None or (<Graph>g).closed:
        raise ValueError(f"{argname} is a condition of a graph that is closed or gone")
    return 0


cdef ConditionHandle _own_condition(Graph graph, object cond, str argname):
    cdef ConditionHandle c
    if not isinstance(cond, ConditionHandle):
        raise TypeError(f"{argname} must be a streams.ConditionHandle (from "
                        f"Graph.create_condition()), not {type(cond).__name__}")
    c = <ConditionHandle>cond
    _check_alive(c, argname)
    if c._graph != graph._handle:
        raise ValueError(f"{argname} is a condition of another graph: a conditional node "
                         "takes a condition made by its own graph's create_condition()")
    return c


cdef int _check_conditions(Graph graph, tuple args) except -1:
    """A kernel of ``graph`` may set the conditions of ``graph`` and of the
    graphs whose conditional nodes hold it, no others."""
    for i, a in enumerate(args):
        if not isinstance(a, ConditionHandle):
            continue
        _check_alive(<ConditionHandle>a, f"argument {i}")
        if not _in_family(graph, (<ConditionHandle>a)._graph):
            raise ValueError(f"argument {i} is a ConditionHandle of another graph (a kernel "
                             "may set the conditions of its own graph and of the graphs "
                             "whose conditional nodes hold it)")
    return 0


@cython.final
cdef class GraphAllocation:
    """Device memory a graph's allocation node gives (``Graph.add_mem_alloc``).

    The address is fixed when the node is made and valid from the node to
    its free (a free node, ``auto_free_on_launch``, or a free in another
    graph or stream).  Pass this object (not ``ptr``) to the graph's kernel,
    memset and memcpy nodes: it carries its size, and CUDA knows the address
    only while a launch has it mapped.
    """
    cdef readonly GraphNode node
    cdef uintptr_t _ptr
    cdef size_t _nbytes

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Graph.add_mem_alloc()")

    @property
    def ptr(self):
        return self._ptr

    @property
    def nbytes(self):
        return self._nbytes

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self._nbytes,), "typestr": "|u1", "data": (self._ptr, False),
                "version": 3, "strides": None, "stream": None}

    def __iter__(self):
        # node, ptr = graph.add_mem_alloc(n)
        return iter((self.node, self._ptr))

    def __repr__(self):
        return f"<streams.GraphAllocation 0x{self._ptr:x} ({self._nbytes} bytes)>"


cdef object _keep_memory(object obj):
    # What a node needs alive of a memory argument.  Graph memory is the
    # graph's own (and keeping it would tie the graph to itself).
    if isinstance(obj, GraphAllocation):
        return None
    return keep_memory(obj)


cdef tuple _kept_args(tuple args):
    return tuple(a for a in args if not isinstance(a, (ConditionHandle, GraphAllocation)))


cdef Kernel _kernel_node_params(object kernel, object grid, object block, tuple args,
                                object shared_mem, cudaKernelNodeParams* params,
                                ArgPack* pack):
    """Fill ``params`` for a kernel node; ``pack`` holds the arguments'
    buffers in use (release_pack it, or hand it to keep_pack_users)."""
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
    params.sharedMemBytes = as_uint(shared_mem, "shared_mem")
    params.func = k._func
    params.gridDim = g
    params.blockDim = b
    params.extra = NULL
    pack_args(k, args, pack, None)
    params.kernelParams = pack.ptrs if len(args) else NULL
    return k


cdef int _memset_params(object ptr, object value, object nbytes, cudaMemsetParams* params,
                        Span* span) except -1:
    """Fill ``params``; ``span`` must be released by the caller."""
    cdef int v = as_int(value, "value")
    cdef size_t count = as_nbytes(nbytes, "nbytes")
    if v < 0 or v > 255:
        raise ValueError(f"value must be a byte (0-255), got {v}")
    resolve_span(ptr, span, 0, None, "ptr")
    check_fits(count, span, "ptr")
    params.dst = span.ptr
    params.pitch = 0
    params.value = <unsigned int>v
    params.elementSize = 1
    params.width = count
    params.height = 1
    return 0


cdef size_t _memcpy_spans(object dst, object src, object nbytes, Span* d,
                          Span* s) except? 0:
    """Resolve both ends of a copy; the caller releases both spans."""
    cdef size_t count = as_nbytes(nbytes, "nbytes")
    resolve_span(dst, d, 0, None, "dst")
    resolve_span(src, s, 0, None, "src")
    check_fits(count, s, "src")
    check_fits(count, d, "dst")
    return count


include "_graph/kernel_nodes.pxi"
include "_graph/data.pxi"


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
        self._check()
        self._graph._use()
        try:
            return _node_list(self._graph, self._handle, True)
        finally:
            self._graph._unuse()

    def kernel_params(self):
        """What a kernel node launches, as CUDA recorded it: a
        :class:`~streams.KernelNodeParams` (the kernel's name and handles,
        grid, block, dynamic shared memory, each argument's bytes).  Works
        on nodes of any origin, captured launches of other libraries
        included; ValueError for a node of another type."""
        return _read_kernel_node(self, "node")

    def set_args(self, changes, signature=None):
        """Change some arguments of this kernel node in its graph (what
        later instantiations and ``GraphExec.update`` take, not the
        executables made already); ``changes`` as for
        :meth:`GraphExec.set_kernel_node_args`.  Memory passed here stays
        alive with the graph."""
        cdef KernelNodeParams info
        cdef Graph top
        cdef _NodeState st
        self._check()
        top = _top(self._graph)
        # Read, noted and changed under the graph's change lock: an
        # executable made meanwhile (instantiate) is made before, running
        # the node as read here, and told, or after, running the change.
        with _graph_lock(self._graph):
            self._graph._use()
            try:
                info = _read_kernel_node(self, "node")
                _refuse_other_context(info._p.ctx, "node")
                st = _state_of(info)
                new_args, keeps = _changed_args(st, changes, signature, self._graph)
                # The executables made from the graph keep running the node as
                # it is now: each takes it as what its node runs, unless it
                # knows better (a change of its own), so that its later
                # argument changes start from it and not from this change.
                _note_before_change(top, <uintptr_t>self._handle, st)
                if keeps:
                    _keep_ready(self._graph)
                    _keep_add(top, keeps)
                _set_kernel_args(&st.p, st.sizes, new_args, None, self)
            finally:
                self._graph._unuse()

    def __eq__(self, other):
        cdef GraphNode o
        if not isinstance(other, GraphNode):
            return NotImplemented
        o = <GraphNode>other
        if self._handle != o._handle:
            return False
        if self._graph is o._graph:
            return True
        # Two Graph objects of one handle: equal while both are open; after
        # a close the address may be reused.
        return (self._graph is not None and o._graph is not None
                and not self._graph.closed and not o._graph.closed)

    def __hash__(self):
        return hash(("streams.GraphNode", <uintptr_t>self._handle))

    def __repr__(self):
        try:
            kind = str(self.type.name.lower())
        except Exception:
            kind = "?"
        return f"<streams.GraphNode {kind} 0x{<uintptr_t>self._handle:x}>"


ctypedef int (*_graph_op)(cudaGraph_t g, void* out, unsigned long long arg) except -1 nogil


cdef struct _Update:
    cudaGraphExec_t ex
    cudaGraphExecUpdateResultInfo info
    int refused


cdef int _update(cudaGraph_t g, void* out, unsigned long long unused) except -1 nogil:
    cdef _Update* up = <_Update*>out
    up.refused = rt.graph_exec_update(up.ex, g, &up.info)
    return 0


cdef int _instantiate(cudaGraph_t g, void* out, unsigned long long flags) except -1 nogil:
    return rt.graph_instantiate(<cudaGraphExec_t*>out, g, flags)


cdef int with_box(cudaGraph_t g, list box, _graph_op op, void* out,
                  unsigned long long arg) except -1:
    """Run ``op`` (an instantiation or an update from ``g``) while ``g`` holds
    ``box`` through a user object: the executable takes a reference to it,
    and only the executable keeps it once ``g`` releases its own."""
    cdef cudaUserObject_t uo = NULL
    cdef int r
    rt.graph_attach_owned(g, <PyObject*>box, &uo)
    try:
        with nogil:
            r = op(g, out, arg)
    finally:
        try:
            with nogil:
                rt.graph_release_user_object(g, uo)
        except CudaError:
            pass    # the box then lives as long as the graph too: harmless
    return r


cdef class Graph(HandleOwner):
    """A CUDA graph (``cudaGraph_t``): ``Graph()`` is empty; captures return one."""
    # The GC may clear it: its release reads C fields only (the handle, the
    # parent of a body), and a graph runs only as an executable, which holds
    # what the nodes need in a tuple of its own (instantiate).
    # Every public method checks that the graph is open before it reads a
    # field: one made with Graph.__new__ has none (its _errors is None).

    def __init__(self):
        cdef cudaGraph_t g = NULL
        self._init_once()
        try:
            require_device()
            rt.drain_deferred()
            with nogil:
                rt.graph_create(&g)
            self._handle = <streams_graph_t>g
            self._errors = new_error_slot(True)
            self._keep = []
            self._opened(True)
        except BaseException:
            self._init_abandoned()
            raise

    cdef streams_graph_t c_handle(self) noexcept nogil:
        return self._handle

    cdef void* c_add_host_node(self, streams_host_fn_t fn, void* data, void** deps,
                               size_t ndeps) except NULL nogil:
        cdef cudaGraphNode_t node = NULL
        if fn == NULL or self._parent != NULL:
            with gil:
                if fn == NULL:
                    raise ValueError("fn must not be NULL")
                self._refuse_in_body("a host node")
        self._use()
        try:
            rt.graph_add_native_host_node(&node, <cudaGraph_t>self._handle,
                                          <const cudaGraphNode_t*>deps, ndeps,
                                          <rt.host_fn>fn, data)
        finally:
            self._unuse()
        return <void*>node

    cdef int _destroy(self) except -1 nogil:
        if self._parent != NULL:
            self._leave_parent()
            return 0
        return rt.destroy_handle(rt.HANDLE_GRAPH, self._handle)

    cdef void _release(self) noexcept nogil:
        if self._parent != NULL:
            self._leave_parent()
        else:
            rt.release_handle(rt.HANDLE_GRAPH, self._handle)
        if not self._dying:
            # The last user of a closed graph (close() left the destroy to
            # it): what the nodes needed goes with the handle, through the
            # deferred queue (this may be any caller's thread and moment).
            with gil:
                _let_go(self, True)

    def __dealloc__(self):
        # Before the fields are cleared: the base __dealloc__'s _release must
        # not touch them.
        self._dying = True

    cdef void _leave_parent(self) noexcept nogil:
        # A body's handle is CUDA's: closing the body gives back the use of
        # its parent, which may then be destroyed.
        cdef void* parent = self._parent
        self._parent = NULL
        with gil:
            (<Graph>parent)._unuse()
            Py_DECREF(<object>parent)

    cdef int _refuse_in_body(self, str what) except -1:
        if self._parent != NULL:
            raise ValueError(f"{what} cannot go in the body of a conditional node (CUDA "
                             "allows kernel, empty, memset, memcpy, child graph and "
                             "conditional nodes there)")
        return 0

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

    @property
    def parent(self):
        """For the body of a conditional node, the graph that holds the node; else None."""
        return <Graph>self._parent if self._parent != NULL else None

    def recapture(self, stream, mode="global"):
        """Capture ``stream`` again into this graph, keeping its nodes
        (CUDA 13.3's ``cudaStreamBeginRecaptureToGraph``).  Not available in
        this build: raises NotImplementedError naming the CUDA versions it
        needs and those present."""
        from streams._cudart import driver_version, runtime_version
        self._check_open()
        as_stream(stream, "stream")
        as_enum(CaptureMode, mode, "mode")
        raise _recapture_refusal(runtime_version(), driver_version())

    def instantiate(self, *, auto_free_on_launch=False, upload_stream=None,
                    device_launch=False, use_node_priority=False):
        """Make an executable graph (``cudaGraphInstantiateWithFlags``).

        With ``upload_stream`` the executable is also uploaded there, so the
        first launch does not pay for it.
        """
        cdef bint auto_free = as_bool(auto_free_on_launch, "auto_free_on_launch")
        cdef bint on_device = as_bool(device_launch, "device_launch")
        cdef bint node_priority = as_bool(use_node_priority, "use_node_priority")
        self._check_open()
        cdef unsigned long long flags = 0
        cdef cudaGraphExec_t ex = NULL
        cdef Stream up = None
        cdef GraphExec result
        cdef list box = []
        if upload_stream is not None:
            up = as_stream(upload_stream, "upload_stream")
        if auto_free:
            flags |= cudaGraphInstantiateFlagAutoFreeOnLaunch
        if on_device:
            flags |= cudaGraphInstantiateFlagDeviceLaunch
        if node_priority:
            flags |= cudaGraphInstantiateFlagUseNodePriority
        cdef bint boxed = self._errors.host_calls
        cdef list keep
        lock = _graph_lock(self)
        self._use()
        try:
            rt.drain_deferred()
            # Made and listed in _execs under the graph's change lock: a
            # change of a node of the graph (GraphNode.set_args) comes
            # before, and the executable runs it, or after, and is told.
            with lock:
                # Only a graph with host callables gets the box's user
                # object: an executable that holds any user object costs CUDA
                # a tracking of every replay (+3.6 us per launch of a
                # 10-kernel graph on an H100, benchmarks/results), which the
                # host callables' user objects already incur.  Without one,
                # the GraphExec holds what node updates bring, as it holds
                # what the graph's nodes need.
                if boxed:
                    with_box(<cudaGraph_t>self._handle, box, _instantiate, &ex, flags)
                else:
                    with nogil:
                        _instantiate(<cudaGraph_t>self._handle, &ex, flags)
                result = GraphExec.__new__(GraphExec)
                result._handle = <streams_graph_exec_t>ex
                result._opened(True)     # from here its handle is the object's
                # Copied while the graph is in use: a close() meanwhile lets
                # go of the list only once this use ends.
                keep = _keep_copy(self)
                result._lock = _threading.RLock()
                result._errors = new_error_slot()
                result._keep = tuple(keep)
                result._box = box if boxed else None
                result._boxed = boxed
                if result._keep:
                    # Its replays use what the graph's nodes need: mark where
                    # each launch ends, so that it is let go only after them
                    # (close()).
                    result._marks = rt.marks_new()
                result._source = self._handle
                result._source_ref = _weakref.ref(self)
                # Its kernel nodes run what the graph's run now: read from
                # the graph's nodes until one changes (GraphNode.set_args
                # notes the node in the executables listed here first).
                result._states_from_source = True
                # The errors of the host callbacks it runs (the graph's and
                # its child graphs') are raised by its launch.
                result._graph_sources = _callback_slots(self)
                result._link_sources()
                ref = _weakref.ref(result)
                with cython.critical_section(self):
                    if self._execs is None:
                        self._execs = []
                    else:
                        self._execs = [r for r in self._execs if r() is not None]
                    self._execs.append(ref)
        except CudaError as exc:
            if exc.code == cudaErrorNotSupported:
                why = self._one_executable_only()
                if why:
                    raise CudaError(exc.code, exc.name, f"{exc.message} ({why})") from None
            raise
        finally:
            self._unuse()
        if up is not None:
            result.upload(up)
        return result

    cdef str _one_executable_only(self):
        # CUDA refuses a second executable of a graph with memory or
        # conditional nodes while the first exists, with a bare
        # cudaErrorNotSupported (seen with conditional nodes on an H200,
        # driver 580): say which rule it is.
        try:
            kinds = {node.type for node in self.nodes}
        except CudaError:
            return None
        found = [name for kind, name in ((NodeType.CONDITIONAL, "conditional"),
                                         (NodeType.MEM_ALLOC, "memory"))
                 if kind in kinds]
        if not found:
            return None
        return (f"a graph with {' and '.join(found)} nodes can have one executable at a "
                "time: close the other one first; one closed while its launches still "
                "run is destroyed when they finish")

    def clone(self):
        """A copy of the graph (what its nodes need stays alive for the clone too)."""
        self._check_open()
        cdef cudaGraph_t g = NULL
        cdef list keep
        cdef Graph result
        self._use()
        try:
            with nogil:
                rt.graph_clone(&g, <cudaGraph_t>self._handle)
            keep = _keep_copy(self)
        finally:
            self._unuse()
        result = _wrap_graph(g, True, self._errors, keep)
        result._child_errors = _callback_slots(self)[1:] or None
        return result

    @property
    def nodes(self):
        self._use()
        try:
            return _node_list(self, self._handle, False)
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

    def to_dict(self):
        """The graph as plain data (docs/graphs.rst, "Graph data"):
        ``{"schema", "handle", "nodes", "edges"}``, each node ``{"id",
        "handle", "type", "dependencies", "params"}`` (a kernel node's name,
        grid, block, shared memory and argument bytes, a memset's or a
        memcpy's addresses and sizes, a host node's function, a child
        graph's own data, ...), each edge ``{"from", "to", "type",
        "from_port", "to_port"}`` by node id.  ``json.dumps`` takes it as it
        is.  A snapshot: the nodes as they are now."""
        self._check_open()
        return _graph_data(self)

    def debug_dot(self, path=None, flags=None, *, verbose=False):
        """Graphviz text of the graph, as CUDA prints it
        (``cudaGraphDebugDotPrint``); also written to ``path`` if given.

        ``flags``: what CUDA adds to each node, as an int of
        ``cudaGraphDebugDotFlags`` or names: "verbose" (everything),
        "kernel_params", "memcpy_params", "memset_params", "host_params",
        "event_params", "ext_semaphore_signal_params",
        "ext_semaphore_wait_params", "kernel_attributes", "handles",
        "conditional_params".  ``verbose=True`` adds "verbose"."""
        cdef unsigned int flags_value = _dot_flags(flags) | (
            cudaGraphDebugDotFlagsVerbose if as_bool(verbose, "verbose") else 0)
        self._check_open()
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
                    rt.graph_debug_dot_print(<cudaGraph_t>self._handle, c_target, flags_value)
            finally:
                self._unuse()
            with open(tmp if tmp is not None else path) as f:
                return f.read()
        finally:
            if tmp is not None:
                _os.unlink(tmp)

    # ---- explicit construction -----------------------------------------------
    def add_empty_node(self, dependencies=()):
        self._check_open()
        return _wrap_node(self, _add_node(self, dependencies, _add_empty, NULL))

    def add_host_node(self, callback, arg=None, dependencies=(), *, owner=None):
        """A node that calls ``callback(arg)`` on the host, on every replay.

        ``callback`` may be a native function, ``void fn(void* data)`` (a
        ctypes or cffi function pointer, or its address as an int), as for
        ``Stream.launch_host_func``: ``arg`` is then its data pointer, and
        the graph keeps the function's Python object, a ctypes/cffi ``arg``
        and ``owner`` alive for as long as it, a clone or an executable
        made from it may call the function.
        """
        self._check_open()
        cdef HostCall call
        cdef _NativeHost h
        self._refuse_in_body("a host node")
        native = native_host_func(callback, arg, owner, "callback", "arg")
        if native is not None:
            h.fn = <rt.host_fn><uintptr_t>native[0]
            h.data = <void*><uintptr_t>native[1]
            if native[2] is not None:
                self._use()
                try:
                    rt.graph_attach_payload(<cudaGraph_t>self._handle, <PyObject*>native[2])
                finally:
                    self._unuse()
            return _wrap_node(self, _add_node(self, dependencies, _add_native_host, &h))
        if owner is not None:
            raise TypeError("owner is for native host functions; a Python callback keeps "
                            "what it references alive itself")
        call = new_call(callback, arg, None, self._errors, KIND_HOST_FUNC)
        call.persistent = True
        self._errors.host_calls = True
        self._use()
        try:
            rt.graph_attach_payload(<cudaGraph_t>self._handle, <PyObject*>call)
        finally:
            self._unuse()
        return _wrap_node(self, _add_node(self, dependencies, _add_host, <void*>call))

    def add_kernel_node(self, kernel, grid=1, block=1, *args, shared_mem=0, cluster=None,
                        cooperative=False, dependencies=()):
        """A kernel node: ``kernel`` (a streams.Kernel, or the name of a
        built-in kernel: "empty", "spin", "fill_u32", "increment_u32",
        "set_condition", "set_condition_lt") with ``grid`` x ``block``
        threads and ``args`` packed as ``Stream.launch`` packs them.
        ``cluster`` (thread-block cluster dimensions, compute capability 9.0+)
        and ``cooperative`` are set as the node's launch attributes.  The
        graph keeps the kernel's module loaded and the streams buffers among
        the arguments alive; a ConditionHandle argument must be this graph's
        or, in a conditional body, that of a graph holding the body."""
        cdef bint with_coop = as_bool(cooperative, "cooperative")
        self._check_open()
        cdef cudaGraphNode_t node = NULL
        cdef cudaKernelNodeParams params
        cdef cudaLaunchAttributeValue cluster_dim, coop
        cdef ArgPack pack
        cdef Kernel k
        cdef dim3 cl
        cdef bint with_cluster = cluster is not None
        memset(&cluster_dim, 0, sizeof(cluster_dim))
        memset(&coop, 0, sizeof(coop))
        if with_cluster:
            as_dim3(cluster, &cl, "cluster")
            cluster_dim.clusterDim.x, cluster_dim.clusterDim.y, cluster_dim.clusterDim.z = \
                cl.x, cl.y, cl.z
        coop.cooperative = 1
        _check_conditions(self, args)
        k = _kernel_node_params(kernel, grid, block, args, shared_mem, &params, &pack)
        try:
            module_use = keep_in_use(k._module)
            self._use()
            try:
                _keep_ready(self)
                node = _add_node(self, dependencies,
                                 _add_function if k._adopted == ADOPTED_FUNCTION
                                 else _add_kernel, &params)
                try:
                    with nogil:
                        if with_cluster:
                            rt.graph_kernel_node_set_attribute(
                                node, cudaLaunchAttributeClusterDimension, &cluster_dim)
                        if with_coop:
                            rt.graph_kernel_node_set_attribute(
                                node, cudaLaunchAttributeCooperative, &coop)
                except BaseException:
                    # Not a half-configured node left in the graph.
                    with nogil:
                        rt.graph_destroy_node(node)
                    raise
                # In the list before this use ends (see _keep_add).
                _keep_add(self, (module_use, keep_pack_users(&pack), _kept_args(args)))
            finally:
                self._unuse()
        finally:
            release_pack(&pack)
        return _wrap_node(self, node)

    def add_memset_node(self, ptr, value, nbytes, dependencies=()):
        """Set ``nbytes`` bytes at ``ptr`` (device memory) to ``value`` (0-255)."""
        self._check_open()
        cdef cudaGraphNode_t node
        cdef cudaMemsetParams params
        cdef Span span
        init_span(&span)
        try:
            _memset_params(ptr, value, nbytes, &params, &span)
            node = _add_node(self, dependencies, _add_memset, &params, _keep_memory(ptr))
        finally:
            release_span(&span)
        return _wrap_node(self, node)

    def add_memcpy_node(self, dst, src, nbytes, dependencies=()):
        """Copy ``nbytes`` from ``src`` to ``dst`` (memory CUDA knows: device,
        managed or pinned)."""
        self._check_open()
        cdef cudaGraphNode_t node
        cdef _Copy copy
        cdef Span d, s
        init_span(&d)
        init_span(&s)
        try:
            copy.count = _memcpy_spans(dst, src, nbytes, &d, &s)
            copy.dst = d.ptr
            copy.src = s.ptr
            node = _add_node(self, dependencies, _add_memcpy, &copy,
                             (_keep_memory(dst), _keep_memory(src)))
        finally:
            release_span(&s)
            release_span(&d)
        return _wrap_node(self, node)

    # ---- conditional nodes ---------------------------------------------------
    def create_condition(self, default=0, *, reset=True):
        """A ConditionHandle for a conditional node of this graph.

        ``reset=True`` (the default): every launch starts with the value
        ``default`` (``cudaGraphCondAssignDefault``).  ``reset=False``: CUDA
        assigns nothing at launch; each executable keeps the value its last
        launch left, and the value its first launch reads is not documented
        by CUDA (0 in practice): set the condition in the graph before a
        conditional node reads it.  ``default`` must then be 0, since no
        launch would ever see another value.
        """
        cdef cudaGraphConditionalHandle h = 0
        cdef ConditionHandle c
        cdef unsigned int d
        cdef unsigned int flags = (cudaGraphCondAssignDefault if as_bool(reset, "reset")
                                   else 0)
        # The arguments first (they read no field), then whether it is open.
        d = as_uint(default, "default")
        if d != 0 and not reset:
            # CUDA applies a default at the start of every launch or never;
            # a default only the first launch sees cannot be expressed.
            raise ValueError(f"default={d} needs reset=True: without it CUDA never assigns "
                             "the default (set the condition from a kernel in the graph "
                             "instead)")
        self._check_open()
        self._use()
        try:
            with nogil:
                rt.graph_conditional_handle_create(&h, <cudaGraph_t>self._handle, d, flags)
        finally:
            self._unuse()
        c = ConditionHandle.__new__(ConditionHandle)
        c._value = h
        c._graph = self._handle
        c._graph_ref = _weakref.ref(self)
        c._default = d
        c._reset = flags != 0
        return c

    cdef tuple _add_conditional(self, object cond, int kind, unsigned int size,
                                object dependencies):
        cdef cudaGraphNodeParams params
        cdef cudaGraphNode_t node
        cdef unsigned int i
        cdef ConditionHandle c = _own_condition(self, cond, "cond")
        memset(&params, 0, sizeof(params))
        params.type = cudaGraphNodeTypeConditional
        params.conditional.handle = c._value
        params.conditional.type = <cudaGraphConditionalNodeType>kind
        params.conditional.size = size
        node = _add_node(self, dependencies, _add_generic, &params)
        # The bodies are valid while the node is: _wrap_body holds this graph.
        bodies = [_wrap_body(self, params.conditional.phGraph_out[i]) for i in range(size)]
        return _wrap_node(self, node), bodies

    def add_if(self, cond, dependencies=()):
        """An "if" node: its body runs when ``cond`` is nonzero.  Returns
        ``(node, body)``; fill ``body`` (a Graph) with nodes or by capture."""
        self._check_open()
        node, bodies = self._add_conditional(cond, cudaGraphCondTypeIf, 1, dependencies)
        return node, bodies[0]

    def add_if_else(self, cond, dependencies=()):
        """An "if/else" node (CUDA 12.8+): returns ``(node, then_body, else_body)``."""
        self._check_open()
        node, bodies = self._add_conditional(cond, cudaGraphCondTypeIf, 2, dependencies)
        return node, bodies[0], bodies[1]

    def add_while(self, cond, dependencies=()):
        """A "while" node: its body runs again and again while ``cond`` is
        nonzero (tested before each run; a kernel of the body sets it).
        Returns ``(node, body)``."""
        self._check_open()
        node, bodies = self._add_conditional(cond, cudaGraphCondTypeWhile, 1, dependencies)
        return node, bodies[0]

    def add_switch(self, cond, n, dependencies=()):
        """A "switch" node (CUDA 12.8+) with ``n`` bodies: body ``i`` runs when
        ``cond`` is ``i``, none when it is ``n`` or more.  Returns
        ``(node, [body_0, ..., body_n-1])``."""
        self._check_open()
        cdef unsigned int count = as_uint(n, "n")
        if count < 1:
            raise ValueError(f"n must be >= 1 (the number of bodies), got {count}")
        return self._add_conditional(cond, streams_cudaGraphCondTypeSwitch, count, dependencies)

    # ---- memory nodes --------------------------------------------------------
    def add_mem_alloc(self, nbytes, dependencies=()):
        """A node that allocates ``nbytes`` of device memory (on the current
        device) each launch.  Returns a GraphAllocation (``.node``, ``.ptr``;
        ``node, ptr = ...`` unpacks it); free it with ``add_mem_free``, or
        instantiate with ``auto_free_on_launch=True``."""
        self._check_open()
        cdef cudaGraphNode_t node
        cdef cudaMemAllocNodeParams params
        cdef GraphAllocation result
        cdef size_t count = as_nbytes(nbytes, "nbytes")
        if count == 0:
            raise ValueError("nbytes must be > 0")
        self._refuse_in_body("a memory allocation node")
        memset(&params, 0, sizeof(params))
        params.poolProps.allocType = cudaMemAllocationTypePinned
        params.poolProps.location.type = cudaMemLocationTypeDevice
        with nogil:
            params.poolProps.location.id = rt.get_device()
        params.bytesize = count
        node = _add_node(self, dependencies, _add_mem_alloc, &params)
        result = GraphAllocation.__new__(GraphAllocation)
        result.node = _wrap_node(self, node)
        result._ptr = <uintptr_t>params.dptr
        result._nbytes = count
        return result

    def add_mem_free(self, ptr, dependencies=()):
        """A node that frees graph memory: a GraphAllocation, or the address
        of one (of this graph or of another graph whose launches left it
        allocated)."""
        self._check_open()
        cdef cudaGraphNode_t node
        cdef uintptr_t address
        if isinstance(ptr, GraphAllocation):
            address = (<GraphAllocation>ptr)._ptr
            if address == 0:
                raise ValueError("ptr: this GraphAllocation was never initialised (use "
                                 "Graph.add_mem_alloc())")
        elif isinstance(ptr, int) and not isinstance(ptr, bool):
            if ptr <= 0 or ptr > <uintptr_t>-1:
                raise ValueError(f"ptr must be a device address, got {ptr}")
            address = <uintptr_t>ptr
        else:
            raise TypeError(f"ptr must be a streams.GraphAllocation or an int address, not "
                            f"{type(ptr).__name__}")
        self._refuse_in_body("a memory free node")
        try:
            node = _add_node(self, dependencies, _add_mem_free, <void*>address)
        except CudaError as exc:
            raise ValueError(f"ptr=0x{address:x}: CUDA refused to free it in a graph "
                             f"({exc.name}); a free node takes memory a graph's "
                             "allocation node gave") from exc
        return _wrap_node(self, node)

    def add_event_record_node(self, event, dependencies=()):
        self._check_open()
        return self._add_event_node(as_event(event, "event"), dependencies, True)

    def add_event_wait_node(self, event, dependencies=()):
        self._check_open()
        return self._add_event_node(as_event(event, "event"), dependencies, False)

    cdef GraphNode _add_event_node(self, Event ev, object dependencies, bint record):
        cdef cudaGraphNode_t node
        ev._use()
        try:
            node = _add_node(self, dependencies, _add_event_record if record else _add_event_wait,
                             ev._handle, keep_in_use(ev))
        finally:
            ev._unuse()
        if record:
            streams_flag_set(<int*>&ev._recorded, True)
        return _wrap_node(self, node)

    def add_child_graph_node(self, Graph child not None, dependencies=()):
        """Embed a copy of ``child`` (what its nodes need stays alive with this graph)."""
        self._check_open()
        cdef cudaGraphNode_t node
        cdef Graph top = _top(self)
        child._use()
        try:
            # The child's list, copied while it is in use, in this graph's.
            node = _add_node(self, dependencies, _add_child, child._handle,
                             tuple(_keep_copy(child)))
        finally:
            child._unuse()
        # The executables made from this graph from now on run the child's
        # host callbacks (and its children's): their errors reach those
        # executables (instantiate links the slots), not the ones made before.
        slots = _callback_slots(child)
        with cython.critical_section(top):
            have = top._child_errors or ()
            top._child_errors = have + tuple([x for x in slots if x not in have])
        if child._errors.host_calls:
            self._errors.host_calls = True
        return _wrap_node(self, node)

    def close(self):
        """Destroy the graph (executables made from it keep working).  Idempotent.

        What its nodes needed is let go with it (executables and clones keep
        their own), even while this object is still referenced.  Closed
        while a capture into it or a call in another thread uses it, the
        graph is destroyed, and what its nodes needed let go, when that use
        ends; the graph of a capture (``capture_info().graph``, or the graph
        captured into) closed during the capture makes ``end_capture`` raise
        ValueError.
        """
        if self._close_handle() == 1:
            _let_go(self, False)
        # Otherwise a user is inside (a capture into the graph, a call in
        # another thread): the last one to leave destroys the handle and
        # lets go of the list (_release).
        rt.drain_deferred()

    def __repr__(self):
        if self.closed:
            return "<streams.Graph (closed)>"
        return f"<streams.Graph 0x{<uintptr_t>self._handle:x}>"


cdef enum _ExecOp:
    EXEC_UPLOAD
    EXEC_LAUNCH


cdef object _deadline_replay = None


cdef object _replay_with_deadline(GraphExec exe, Stream s, object deadline):
    # A replay with a deadline: the later module of deadlines checks the
    # arguments and the capture, launches, then writes the marker.
    global _deadline_replay
    if _deadline_replay is None:
        from streams._deadline import replay_with_deadline
        _deadline_replay = replay_with_deadline
    return _deadline_replay(exe, s, deadline)


cdef int _enqueue_exec(GraphExec exe, Stream stream, _ExecOp op) except -1 nogil:
    # With the stream's device current, as for a kernel launch (-1, the
    # special streams: the current device's).
    cdef DeviceScope scope
    cdef void* marks
    exe._use()
    try:
        stream._use()
        try:
            enter_device(&scope, stream._device)
            try:
                if op == EXEC_UPLOAD:
                    return rt.graph_upload(<cudaGraphExec_t>exe._handle,
                                           <cudaStream_t>stream._handle)
                rt.graph_launch(<cudaGraphExec_t>exe._handle, <cudaStream_t>stream._handle)
                marks = streams_ptr_load(&exe._marks)
                if marks != NULL:
                    rt.marks_record(marks, <cudaStream_t>stream._handle)
                return 0
            finally:
                exit_device(&scope)
        finally:
            stream._unuse()
    finally:
        exe._unuse()


cdef tuple _pair():
    # A new 2-tuple, (None, None), for GraphExec._took to fill in place.
    cdef tuple t = PyTuple_New(2)
    Py_INCREF(None)
    PyTuple_SET_ITEM(t, 0, None)
    Py_INCREF(None)
    PyTuple_SET_ITEM(t, 1, None)
    return t


# no_gc_clear: __dealloc__ parks what the replays in flight use (_keep,
# _box); a tp_clear first would let it go under them ("Reference cycles" in
# docs/architecture.rst).
@cython.final
@cython.no_gc_clear
cdef class GraphExec(HandleOwner):
    """An executable graph (``cudaGraphExec_t``), from ``Graph.instantiate()``."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Graph.instantiate()")

    cdef int _destroy(self) except -1 nogil:
        return rt.destroy_handle(rt.HANDLE_GRAPH_EXEC, self._handle)

    cdef void _release(self) noexcept nogil:
        rt.release_handle(rt.HANDLE_GRAPH_EXEC, self._handle)
        if not self._dying:
            # The last user of a closed executable (close() left the destroy
            # to it): what the replays use is parked now, let go once the
            # launches made before are done, not only when the object goes.
            with gil:
                self._park()

    cdef streams_graph_exec_t c_handle(self) noexcept nogil:
        return self._handle

    cdef int c_launch(self, Stream stream) except -1 nogil:
        return _enqueue_exec(self, stream, EXEC_LAUNCH)

    cdef int c_upload(self, Stream stream) except -1 nogil:
        return _enqueue_exec(self, stream, EXEC_UPLOAD)

    def launch(self, stream=None, *, deadline=None):
        """Enqueue one replay on ``stream`` (default: the current stream).

        Raises HostCallbackError first if a host callback this executable
        runs raised during an earlier replay.

        ``deadline`` (seconds): the replay must be done within that long,
        or the watchdog reports it (docs/deadlines.rst); a progress marker
        is written after the replay, and the :class:`~streams.Deadline`
        is returned.  Refused (ValueError) while ``stream`` is capturing.
        """
        cdef Stream s = as_stream(stream, "stream")
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_GRAPH_LAUNCH)
        try:
            if self._errors is not None and self._errors.first is not None:
                self._errors.raise_pending("graph host callback")
            if deadline is not None:
                return _replay_with_deadline(self, s, deadline)
            # CUDA refuses a launch into a capture (cudaErrorStreamCaptureUnsupported,
            # with a message naming add_child_graph_node): no capture ever runs
            # this executable's callbacks, so its errors are linked nowhere else
            # (test_a_launch_into_a_capture_is_refused_clearly_and_links_nothing).
            with nogil:
                self.c_launch(s)
        finally:
            if traced:
                nvtx.trace_pop()

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
        cdef _Update up
        cdef list box = []
        cdef tuple kept
        cdef dict states = None
        cdef bint from_source = False
        cdef void* marks = NULL
        interrupted = None
        self._check_open()
        up.ex = <cudaGraphExec_t>self._handle
        up.info.errorNode = NULL
        up.refused = 1
        with self._lock:
            self._use()
            try:
                graph._use()
                try:
                    # Under `graph`'s change lock: its nodes stay as CUDA
                    # takes them until their record is read (below).
                    with _graph_lock(graph):
                        # What the executable links once CUDA took the
                        # update, made before it: nothing after the update
                        # fails (MemoryError) before its keep-alives are in
                        # place.  Copied while `graph` is in use: a close()
                        # meanwhile lets go of its list only after.
                        kept = tuple(_keep_copy(graph))
                        pair = _pair()
                        if kept and streams_ptr_load(&self._marks) == NULL:
                            marks = rt.marks_new()
                        if self._boxed:
                            # The old box holds the new one: what node updates
                            # put there lives as long as needed, whether the
                            # old box goes now or with the executable.
                            with cython.critical_section(self):
                                self._box.append(box)
                        source = self._source_ref() if self._source_ref is not None else None
                        from_source = source is graph
                        # CUDA gives the executable the user objects of
                        # `graph` in place of its own, keeping those until
                        # replays in flight end.  (Same shape: `graph` has
                        # host callables if and only if the executable's
                        # graph had, so an unboxed one stays unboxed.)
                        if self._boxed:
                            with_box(<cudaGraph_t>graph._handle, box, _update, &up, 0)
                        else:
                            with nogil:
                                _update(<cudaGraph_t>graph._handle, &up, 0)
                        if not up.refused:
                            if not from_source:
                                # Never raising past the update CUDA made.
                                try:
                                    states = _states_after_update(source, graph)
                                except BaseException as exc:
                                    states = {}
                                    if not isinstance(exc, Exception):
                                        interrupted = exc
                            # Linked while the executable is in use: a close()
                            # meanwhile parks what it holds only once this use
                            # ends (_release).
                            self._took(graph, kept, states, from_source, box, pair, &marks)
                finally:
                    graph._unuse()
            finally:
                if marks != NULL:
                    rt.marks_free(marks)
                self._unuse()
        if not up.refused:
            if interrupted is not None:
                raise interrupted
            return UpdateResult(True, "success", None)
        node = _wrap_node(graph, up.info.errorNode) if up.info.errorNode != NULL else None
        return UpdateResult(False, _UPDATE_RESULT_NAMES.get(up.info.result,
                                                            str(<int>up.info.result)), node)

    cdef int _took(self, Graph graph, tuple kept, dict states, bint from_source,
                   list box, object pair, void** marks) except -1:
        # What a successful update(graph) changes in the executable.  Its
        # keep-alives first, with what update() made before CUDA took the
        # update (`pair`, an empty 2-tuple; `marks`, taken if used): nothing
        # here fails before they are in place.  Replays already queued may
        # still use what the old nodes needed (linked, not copied: updates in
        # a loop stay linear).  Under the executable's critical section, as
        # every change of _keep, _box, _marks and _kernel_state: launches,
        # updates and close() of one executable may run in several threads
        # (free-threaded CPython).
        cdef object older
        with cython.critical_section(self):
            # Its kernel nodes now run what `graph`'s do.
            self._kernel_state = states
            self._states_from_source = from_source
            if kept:
                older = self._keep
                if older:
                    # (older, kept) in the tuple made for it (no one else has
                    # seen it), in place of its two Nones.
                    Py_INCREF(older)
                    PyTuple_SET_ITEM(pair, 0, older)
                    Py_INCREF(kept)
                    PyTuple_SET_ITEM(pair, 1, kept)
                    Py_DECREF(None)
                    Py_DECREF(None)
                    self._keep = pair
                else:
                    self._keep = kept
                if self._marks == NULL:
                    if marks[0] != NULL:
                        streams_ptr_store(&self._marks, marks[0])
                        marks[0] = NULL
                    else:
                        self._start_marks()
            if self._boxed:
                self._box = box
        # It runs `graph`'s host callbacks from now on (and no longer those
        # of the graph it ran, nor of children set_child_graph_node gave it).
        self._graph_sources = _callback_slots(graph)
        self._node_sources = None
        self._link_sources()
        return 0

    cdef int _link_sources(self) except -1:
        # Under _lock (or before the executable is shared): link the slots
        # of the callbacks it runs to its own, and unlink the others.
        cdef list wanted = list(self._graph_sources) if self._graph_sources else []
        if self._node_sources:
            for slots in self._node_sources.values():
                for slot in slots:
                    if not any(slot is x for x in wanted):
                        wanted.append(slot)
        for slot in wanted:
            (<ErrorSlot>slot).forward_to(self._errors)
        if self._linked:
            for slot in self._linked:
                if not any(slot is x for x in wanted):
                    (<ErrorSlot>slot).unforward(self._errors)
        self._linked = tuple(wanted)
        return 0

    # ---- node by node ----------------------------------------------------------
    cdef GraphNode _node_of(self, object node, str argname):
        """``node`` as a node of the graph this executable came from (or of a
        conditional body in it)."""
        cdef GraphNode nd
        if not isinstance(node, GraphNode):
            raise TypeError(f"{argname} must be a GraphNode, not {type(node).__name__}")
        self._check_open()
        nd = <GraphNode>node
        nd._check()
        # Handles are compared only while both graphs are open: the handle of
        # a closed graph may already be another graph's.
        source = self._source_ref() if self._source_ref is not None else None
        if source is None or (<Graph>source).closed:
            raise ValueError(f"{argname}: the graph this GraphExec was instantiated from is "
                             "closed or gone, so no node of it can be named any more")
        if nd._graph.closed or _top(nd._graph).closed:
            raise ValueError(f"{argname} is a node of a closed graph")
        if _top(nd._graph)._handle != self._source:
            raise ValueError(f"{argname} is not a node of the graph this GraphExec was "
                             "instantiated from")
        return nd

    cdef int _enter(self, GraphNode nd) except -1:
        # The node's handle is valid while its graph is: that graph must be
        # open, and stays so for the call.
        self._use()
        try:
            nd._graph._use()
        except BaseException:
            self._unuse()
            raise
        return 0

    cdef void _leave(self, GraphNode nd) noexcept:
        nd._graph._unuse()
        self._unuse()

    cdef int c_set_node_enabled(self, void* node, bint enabled) except -1 nogil:
        self._use()
        try:
            return rt.graph_node_set_enabled(<cudaGraphExec_t>self._handle,
                                             <cudaGraphNode_t>node, enabled)
        finally:
            self._unuse()

    def set_enabled(self, node, enabled):
        """Enable or disable a kernel, memset or memcpy node for the
        following launches (``cudaGraphNodeSetEnabled``); a disabled node
        does nothing, its dependencies hold."""
        cdef bint on = as_bool(enabled, "enabled")
        cdef GraphNode nd = self._node_of(node, "node")
        self._enter(nd)
        try:
            with nogil:
                self.c_set_node_enabled(nd._handle, on)
        finally:
            self._leave(nd)

    def to_dict(self):
        """The data of :meth:`Graph.to_dict` for the graph this executable
        was made from (which must still be open: CUDA lists no executable's
        nodes), with what the executable runs: ``"exec"`` (its handle and
        ``cudaGraphExecGetFlags``), each node's ``"enabled"`` (kernel,
        memcpy and memset nodes; None for the others), and each kernel
        node's parameters as this executable runs them (after
        ``set_kernel_node``, ``set_kernel_node_args`` and ``update``; None
        where streams cannot tell, after an update from another graph whose
        nodes did not pair)."""
        self._check_open()
        return _exec_data(self)

    def is_enabled(self, node):
        cdef GraphNode nd = self._node_of(node, "node")
        cdef unsigned int on = 0
        self._enter(nd)
        try:
            with nogil:
                rt.graph_node_get_enabled(<cudaGraphExec_t>self._handle,
                                          <cudaGraphNode_t>nd._handle, &on)
        finally:
            self._leave(nd)
        return bool(on)

    def set_kernel_node(self, node, kernel, grid=1, block=1, *args, shared_mem=0):
        """New kernel, configuration and arguments for a kernel node, from
        the next launch on (``cudaGraphExecKernelNodeSetParams``), packed as
        ``Graph.add_kernel_node`` packs them."""
        cdef GraphNode nd = self._node_of(node, "node")
        cdef cudaKernelNodeParams params
        cdef ArgPack pack
        cdef Kernel k
        cdef bint function
        _check_conditions(nd._graph, args)
        k = _kernel_node_params(kernel, grid, block, args, shared_mem, &params, &pack)
        function = k._adopted == ADOPTED_FUNCTION
        try:
            with self._lock:
                self._enter(nd)
                try:
                    # Refused before anything is kept for it.
                    _refuse_node_of_other_context(nd, "node")
                    # What the node runs from now on: later argument changes
                    # start from it (the same call again, with other
                    # arguments).  Made before the change: recorded with it,
                    # under the lock, so that the record is what runs.
                    st = _state_set(k, &params, &pack, len(args))
                    # Boxed before CUDA has the new parameters: a launch may
                    # use them as soon as the call returns.
                    self._keep_for_replays((keep_in_use(k._module), keep_pack_users(&pack),
                                            _kept_args(args)))
                    with nogil:
                        if function:
                            rt.graph_exec_function_node_set_params(
                                <cudaGraphExec_t>self._handle, <cudaGraphNode_t>nd._handle,
                                &params)
                        else:
                            rt.graph_exec_kernel_node_set_params(
                                <cudaGraphExec_t>self._handle, <cudaGraphNode_t>nd._handle,
                                &params)
                    self._set_state(<uintptr_t>nd._handle, st)
                finally:
                    self._leave(nd)
        finally:
            release_pack(&pack)

    def set_kernel_node_args(self, node, changes, signature=None):
        """Change some arguments of a kernel node, of any graph (a captured
        launch of another library too), from the next launch on; the
        others keep their values.  ``changes`` maps a parameter's index to
        its new value (see :doc:`graphs`, "Changing captured graphs"):
        bytes of the parameter's size, a memory object or an address for a
        pointer, an int or a float packed to the parameter's size, or, with
        ``signature`` (a Kernel, or type names as for ``get_kernel``), a
        value of the type it names.  Values are packed as launches pack
        them (with the kernel's own signature where ``streams`` knows it):
        a pointer must be memory CUDA knows.  The kernel, its configuration
        and the other arguments stay as the executable has them (captured,
        or as its last change or update left them).  Memory passed here
        stays alive while the executable may use it.  Raises ValueError or
        IndexError naming the change CUDA's parameter layout cannot take or
        the address CUDA does not know, ValueError for a node that runs in
        a context other than a device's primary one (one captured on a
        green context's stream: CUDA cannot change it in place) or whose
        arguments are not known after an update from a graph whose nodes
        did not pair in order (set the whole node with
        ``set_kernel_node``), CudaError where CUDA refuses the update."""
        cdef GraphNode nd = self._node_of(node, "node")
        cdef uintptr_t key = <uintptr_t>nd._handle
        cdef _NodeState st
        # Read, changed and recorded as one (under _lock): a change in
        # another thread comes before or after, and the record is what runs.
        with self._lock:
            # The node is read only while its graph is held (_enter): a
            # close() in another thread waits for this call.
            self._enter(nd)
            try:
                st = <_NodeState>self._state_of(nd)
                if st.kernel is None:
                    _refuse_other_context(st.p.ctx, "node")
                else:
                    _refuse_node_of_other_context(nd, "node")
                new_args, keeps = _changed_args(st, changes, signature, nd._graph)
                st = _state_with_args(st, new_args)
                if keeps:
                    # Kept before CUDA has the new arguments: a launch may use
                    # them as soon as the call returns.
                    self._keep_for_replays(keeps)
                _apply_state(st, self, nd)
                self._set_state(key, st)
            finally:
                self._leave(nd)

    cdef object _state_of(self, GraphNode nd):
        # What the executable's kernel node runs now: as its last change
        # left it, as the update that gave it left it, or (neither) the
        # graph it came from's node, which nothing changed since (a change
        # of that node notes it here first: _note_source_state).
        cdef uintptr_t key = <uintptr_t>nd._handle
        with cython.critical_section(self):
            states = self._kernel_state
            from_source = self._states_from_source
        found = states.get(key) if states is not None else None
        if found is not None:
            return found
        if from_source:
            st = _state_of(_read_kernel_node(nd, "node"))
            # A change of the graph's node notes the node as it was here
            # before it changes it: noted since the look above, the node
            # read may be the changed one, and the note is what runs.
            with cython.critical_section(self):
                states = self._kernel_state
            found = states.get(key) if states is not None else None
            return found if found is not None else st
        nd._graph._use()
        try:
            _require_kernel_node(<cudaGraphNode_t>nd._handle, "node")
        finally:
            nd._graph._unuse()
        raise ValueError(
            "node: this executable was updated from another graph, and streams does not know "
            "what this kernel node runs since (that graph's nodes did not pair with the "
            "nodes of the graph it was instantiated from in the order they were made, "
            "another node has this node's type and dependencies, so CUDA may pair either "
            "with either, another thread held the graph it came from for over a second "
            "during the update, the node is in a conditional body, or this driver cannot read "
            "kernel nodes): set "
            "the whole node with set_kernel_node, or change the graph's node and update "
            "again")

    cdef int _set_state(self, uintptr_t key, object st) except -1:
        with cython.critical_section(self):
            if self._kernel_state is None:
                self._kernel_state = {}
            self._kernel_state[key] = st
        return 0

    cdef int _note_source_state(self, uintptr_t key, object st) except -1:
        # The graph it came from changes this node: unless the executable
        # knows better, what it runs is what the node was until now.
        with cython.critical_section(self):
            if not self._states_from_source:
                return 0
            if self._kernel_state is None:
                self._kernel_state = {}
            if key not in self._kernel_state:
                self._kernel_state[key] = st
        return 0

    def set_memset_node(self, node, ptr, value, nbytes):
        cdef GraphNode nd = self._node_of(node, "node")
        cdef cudaMemsetParams params
        cdef Span span
        init_span(&span)
        try:
            _memset_params(ptr, value, nbytes, &params, &span)
            self._enter(nd)
            try:
                self._keep_for_replays(_keep_memory(ptr))
                with nogil:
                    rt.graph_exec_memset_node_set_params(<cudaGraphExec_t>self._handle,
                                                         <cudaGraphNode_t>nd._handle, &params)
            finally:
                self._leave(nd)
        finally:
            release_span(&span)

    def set_memcpy_node(self, node, dst, src, nbytes):
        cdef GraphNode nd = self._node_of(node, "node")
        cdef Span d, s
        cdef size_t count
        init_span(&d)
        init_span(&s)
        try:
            count = _memcpy_spans(dst, src, nbytes, &d, &s)
            self._enter(nd)
            try:
                self._keep_for_replays((_keep_memory(dst), _keep_memory(src)))
                with nogil:
                    rt.graph_exec_memcpy_node_set_params_1d(
                        <cudaGraphExec_t>self._handle, <cudaGraphNode_t>nd._handle, d.ptr,
                        s.ptr, count)
            finally:
                self._leave(nd)
        finally:
            release_span(&s)
            release_span(&d)

    def set_host_node(self, node, callback, arg=None, *, owner=None):
        """Call ``callback(arg)`` at this host node from the next launch on.

        Replays already in flight may still call the previous callable: it
        stays alive until they are done (it is released with the executable).
        ``callback`` may be a native function (see ``Graph.add_host_node``);
        what it needs alive is kept the same way.
        """
        cdef GraphNode nd = self._node_of(node, "node")
        cdef HostCall call
        cdef uintptr_t fn, data
        native = native_host_func(callback, arg, owner, "callback", "arg")
        if native is not None:
            fn, data = native[0], native[1]
            self._enter(nd)
            try:
                if native[2] is not None:
                    self._keep_for_replays(native[2])
                with nogil:
                    rt.graph_exec_native_host_node_set_params(
                        <cudaGraphExec_t>self._handle, <cudaGraphNode_t>nd._handle,
                        <rt.host_fn>fn, <void*>data)
            finally:
                self._leave(nd)
            return
        if owner is not None:
            raise TypeError("owner is for native host functions; a Python callback keeps "
                            "what it references alive itself")
        if not self._boxed:
            # Unreachable through the API (a host node makes its graph box);
            # a callable that could die under a replay in flight is refused.
            raise RuntimeError("this executable does not box host callables: instantiate it "
                               "again from its graph")
        call = new_call(callback, arg, None, self._errors, KIND_HOST_FUNC)
        call.persistent = True
        self._enter(nd)
        try:
            self._keep_for_replays(call)
            with nogil:
                rt.graph_exec_host_node_set_params(<cudaGraphExec_t>self._handle,
                                                   <cudaGraphNode_t>nd._handle,
                                                   <PyObject*>call)
        finally:
            self._leave(nd)

    def set_child_graph_node(self, node, Graph child not None):
        """Make a child graph node run a copy of ``child`` (same topology as
        the one it has) from the next launch on."""
        cdef GraphNode nd = self._node_of(node, "node")
        with self._lock:
            self._enter(nd)
            try:
                child._use()
                try:
                    # Copied while the child is in use (a close() lets go of
                    # its list only after), kept before CUDA has the new node.
                    self._keep_for_replays(tuple(_keep_copy(child)))
                    with nogil:
                        rt.graph_exec_child_graph_node_set_params(
                            <cudaGraphExec_t>self._handle, <cudaGraphNode_t>nd._handle,
                            <cudaGraph_t>child._handle)
                finally:
                    child._unuse()
                # Once CUDA took it: the node runs the child's host callbacks
                # now (and its children's), no longer those of the child it
                # ran before.
                if self._node_sources is None:
                    self._node_sources = {}
                self._node_sources[<uintptr_t>nd._handle] = _callback_slots(child)
                self._link_sources()
            finally:
                self._leave(nd)

    def set_event_record_node(self, node, event):
        self._set_event(node, as_event(event, "event"), True)

    def set_event_wait_node(self, node, event):
        self._set_event(node, as_event(event, "event"), False)

    cdef int _set_event(self, object node, Event ev, bint record) except -1:
        cdef GraphNode nd = self._node_of(node, "node")
        self._enter(nd)
        try:
            self._keep_for_replays(keep_in_use(ev))
            ev._use()
            try:
                with nogil:
                    rt.graph_exec_event_node_set_event(<cudaGraphExec_t>self._handle,
                                                       <cudaGraphNode_t>nd._handle,
                                                       <cudaEvent_t>ev._handle, record)
            finally:
                ev._unuse()
        finally:
            self._leave(nd)
        if record:
            streams_flag_set(<int*>&ev._recorded, True)
        return 0

    @property
    def handle(self):
        self._check_open()
        return <uintptr_t>self._handle

    cdef int _start_marks(self) except -1:
        # Set before the update that needs it takes effect, so that every
        # launch from then on is marked; a nogil launch in another thread
        # reads it with streams_ptr_load.
        streams_ptr_store(&self._marks, rt.marks_new())
        return 0

    cdef int _keep_for_replays(self, object obj) except -1:
        # What a node update brings.  Boxed: the CUDA user object that owns
        # _box keeps it past the replays in flight.  Unboxed: this object
        # keeps it, launches are marked from now on, and when it goes the
        # objects wait for the marked launches (close, __dealloc__).  Linked
        # into _keep, a tuple, not put in a list of its own: the GC would
        # clear such a list, which only this object refers to, even after
        # __dealloc__ parked it; a tuple it cannot clear.  (_box is safe:
        # the user object's reference keeps the GC from taking it.)
        with cython.critical_section(self):
            if self._boxed:
                self._box.append(obj)
            else:
                if self._marks == NULL:
                    self._start_marks()
                self._keep = (self._keep, obj)
        return 0

    cdef void _park(self) noexcept:
        # No user is left: hand what the replays use to the parking of
        # _cudart, which lets it go once every marked launch has ended.
        cdef void* marks
        cdef object keep, box
        with cython.critical_section(self):
            marks = self._marks
            self._marks = NULL
            keep, box = self._keep, self._box
            if marks != NULL:
                # The parking holds them now: a closed executable that is
                # still referenced lets them go with its replays, not only
                # when the object itself goes.
                self._keep = ()
        if marks == NULL:
            return
        rt.park(marks, keep, box)

    def close(self):
        """Destroy the executable (launches already queued still run).  Idempotent.

        What its replays use (the buffers, modules and events of its nodes)
        stays alive until the launches made before are done (also when a
        call in another thread is inside: it is then let go after that
        call and those launches), even while this object is still
        referenced.
        """
        if self._close_handle() == 1:
            self._park()        # otherwise a user is inside: the last one parks (_release)
        rt.drain_deferred()

    def __dealloc__(self):
        # Before the fields are cleared (the base __dealloc__ then releases
        # the handle, which CUDA destroys once the replays are done, and
        # its _release must not touch them).
        self._dying = True
        self._park()

    def __repr__(self):
        if self.closed:
            return "<streams.GraphExec (closed)>"
        return exec_name(<uintptr_t>self._handle)


cdef str exec_name(uintptr_t handle):
    return f"<streams.GraphExec 0x{handle:x}>"


# ---- graph memory of a device ----------------------------------------------------------------

def graph_memory_info(device=None):
    """How much physical memory graphs have mapped and the graph memory
    allocator holds on ``device`` (default: the current one): a
    GraphMemoryInfo (``cudaDeviceGetGraphMemAttribute``)."""
    cdef int dev = resolve_device(device)
    cdef unsigned long long v[4]
    with nogil:
        rt.device_get_graph_mem_attribute(dev, cudaGraphMemAttrUsedMemCurrent, &v[0])
        rt.device_get_graph_mem_attribute(dev, cudaGraphMemAttrUsedMemHigh, &v[1])
        rt.device_get_graph_mem_attribute(dev, cudaGraphMemAttrReservedMemCurrent, &v[2])
        rt.device_get_graph_mem_attribute(dev, cudaGraphMemAttrReservedMemHigh, &v[3])
    return GraphMemoryInfo(v[0], v[1], v[2], v[3])


def trim_graph_memory(device=None):
    """Give back to the device the memory graphs have reserved that no
    unfreed allocation and no running or pending launch uses
    (``cudaDeviceGraphMemTrim``)."""
    cdef int dev = resolve_device(device)
    with nogil:
        rt.device_graph_mem_trim(dev)


def reset_graph_memory_high(device=None):
    """Restart the high watermarks of ``graph_memory_info`` from now."""
    cdef int dev = resolve_device(device)
    with nogil:
        rt.device_reset_graph_mem_high(dev)


include "_graph/_testing.pxi"
