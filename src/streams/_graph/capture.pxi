# Stream capture: the capture modes, and beginning, ending and inspecting
# captures for the Stream methods; part of streams._graph (_graph.pyx
# includes it).

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
    g._check_open()
    if g._parent == NULL and (g._capture != 0 or not g._owns_handle):
        # The graph of another capture in progress (capture_info().graph):
        # not streams' to capture into, as the next rule says for its bodies.
        raise ValueError(
            "cannot capture into the graph of a capture in progress (capture_info().graph) "
            "or of a graph streams does not own: capture on the capturing stream instead, "
            "or add nodes with the graph's add_*_node methods")
    if g._parent != NULL and not _top(g)._owns_handle:
        # An invalidated capture into a body would leave the graph holding
        # its node corrupt, and streams cannot keep a graph it does not own
        # from being destroyed (or a capture from ending) through that fault.
        raise ValueError(
            "cannot capture into the body of a conditional node of a graph streams does not "
            "own (a capture in progress, a child graph): if the capture were invalidated, "
            "the CUDA driver would crash when that graph is destroyed "
            "(NVIDIA/cuda-python#2918); fill the body with its add_*_node methods")
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
            # While the stream is in use: the registry keys it by its handle.
            register_capture(cid, g._errors, g, stream)
        finally:
            stream._unuse()
    except BaseException:
        g._unuse()
        raise


cdef int _abandon(Graph top) except -1:
    """Close ``top`` for good without destroying its handle: the driver left
    it corrupt.  Its bodies (held by its nodes) stay CUDA's."""
    if top._owns_handle:
        top._owns_handle = False
        rt.count(rt.STREAMS_CNT_GRAPH_ABANDONED)
    streams_close_begin(&top._state)
    return 0


cdef str _CLOSED_DURING_CAPTURE = (
    "end_capture: the graph of this capture was closed during the capture ({}): the "
    "capture has ended and its graph is destroyed; capture again")


# ---- the Graph of a plain capture -----------------------------------------------------------
# capture_info() gives the graph of a capture in progress as the Graph that
# end_capture() will return: one object (its nodes, its executables' record,
# its keep list, closed or not), registered with the capture (a weak
# reference: a Graph nobody holds is not kept for the capture).  Until the
# capture ends, CUDA's capture owns the handle and the capture holds the
# Graph in use (Graph._capture): end_capture adopts it (the Graph owns the
# handle from then on), a capture that fails or ends elsewhere (another
# library; found by the registry's sweep) closes it without destroying it.

cdef unsigned long long _capture_release(Graph graph):
    # The capture's claim on `graph`, taken once: by end_capture, or by the
    # close of a capture that failed or ended elsewhere.
    cdef unsigned long long cid
    with cython.critical_section(graph):
        cid = graph._capture
        graph._capture = 0
    return cid


cdef int _capture_dropped(Graph graph) except -1:
    # The capture of `graph` ended without streams getting its graph (CUDA
    # destroyed it, or another library has it): closed, never destroyed
    # here; the capture's use given back; its keep list let go (the user
    # object of _keep_ready keeps what CUDA's graph still needs).
    if _capture_release(graph) == 0:
        return 0
    streams_close_begin(&graph._state)
    graph._unuse()
    _let_go(graph, False)
    return 0


def _capture_gone(target):
    # The registry forgot a capture that ended elsewhere (_hostcall._sweep)
    # or before it was used.  A capture into a Graph keeps its use of that
    # Graph: streams cannot tell whether CUDA freed it (an invalidated
    # capture's graph is), so it is never destroyed (docs/graphs.rst).
    if isinstance(target, _weakref.ref):
        target = target()
    if isinstance(target, Graph):
        _capture_dropped(<Graph>target)


set_capture_hook(_capture_gone)


cdef Graph _capture_graph(Stream stream, unsigned long long cid, cudaGraph_t g):
    """The Graph of capture ``cid`` (building ``g``) on ``stream``: the one
    registered with the capture, else a new one, registered."""
    cdef Graph made
    slot, found, registered = capture_entry(cid, stream, None)
    if isinstance(found, _weakref.ref):
        found = found()
    if isinstance(found, Graph) and (<Graph>found)._handle == <streams_graph_t>g:
        made = <Graph>found
    else:
        made = _wrap_graph(g, False, slot, [])
        made._capture = cid
        made._use()             # the capture's, until it ends
        _, found, again = capture_entry(cid, stream, _weakref.ref(made))
        registered = registered or again
        if isinstance(found, _weakref.ref):
            found = found()
        if found is not made:
            # Another thread's Graph (or the capture's own Graph) came first.
            _capture_dropped(made)
            if isinstance(found, Graph) and (<Graph>found)._handle == <streams_graph_t>g:
                made = <Graph>found
    if registered:
        try:
            now = _capture_id(stream, NULL)
        except CudaError:
            now = cid
        if now != cid:
            # Ended meanwhile in another thread: no end_capture takes it.
            forget_capture(cid, slot, stream)
    return made


cdef Graph _adopt(Graph graph, cudaGraph_t g, object owner):
    """end_capture's Graph for a capture whose graph capture_info gave:
    that object, owning the handle from now on; ValueError (the graph
    destroyed) if it was closed during the capture."""
    cdef bint closed
    graph._owns_handle = True       # while the capture's use holds it: see below
    rt.count_graph_adopted()
    if owner is not None:
        _keep_add(graph, owner)
    closed = graph.closed
    # The capture's use: a close() during the capture left the destroy to
    # the last user, which may be this one (or a body still open).
    graph._unuse()
    if closed:
        raise ValueError(_CLOSED_DURING_CAPTURE.format("capture_info().graph.close()"))
    return graph


def end_capture(Stream stream not None):
    cdef cudaGraph_t g = NULL
    cdef cudaGraph_t building = NULL
    cdef unsigned long long cid
    cdef Graph target = None
    cdef Graph made = None
    cdef bint target_closed = False
    slot = target_obj = None
    stream._use()
    try:
        # What the capturing stream's handle needs (a green context, a
        # foreign stream's owner) lives as long as the graph and its
        # executables: the captured kernel nodes name functions of the
        # stream's context, and instantiating them once a green context is
        # destroyed crashes in the driver (tests/green/test_green_gpu.py).  Read
        # while the stream is in use: a close() in another thread may drop
        # it once the use ends.
        owner = stream._owner
        # Which capture this is, to find what its callbacks report to, also
        # when CUDA fails the end below: the registry forgets it either way.
        try:
            cid = _capture_id(stream, &building)
        except CudaError:
            cid = 0     # invalidated: found by its stream
        # Claimed first: a sweep of the registry in another thread would
        # otherwise take it, once ended, for a capture ended elsewhere.
        claim_capture(cid, stream)
        try:
            with nogil:
                rt.stream_end_capture(<cudaStream_t>stream._handle, &g)
        except CudaError:
            slot, target_obj = take_capture(cid, stream)
            if isinstance(target_obj, _weakref.ref):
                target_obj = target_obj()
                if isinstance(target_obj, Graph):
                    # CUDA destroyed the graph of the invalidated capture.
                    _capture_dropped(<Graph>target_obj)
            elif isinstance(target_obj, Graph):
                # CUDA destroys the graph of a capture into it that was
                # invalidated: the Graph is closed, with nothing to release
                # (no longer its to destroy before the capture's use ends: a
                # close() during the capture left the destroy to that use).
                target = <Graph>target_obj
                if target._owns_handle:
                    target._owns_handle = False
                    target._unuse()
                    if target._parent != NULL:
                        # A conditional node's body: the driver frees it
                        # although the node still holds it, and destroying
                        # the graph that holds the node then crashes in the
                        # driver (NVIDIA/cuda-python#2918).  That graph is
                        # closed and never destroyed (a leak, counted),
                        # before the body gives back its use of it.
                        _abandon(_top(target))
                        target._leave_parent()  # a body: CUDA's, never counted
                    else:
                        rt.count(rt.STREAMS_CNT_GRAPH_DESTROYED)
                else:
                    target._unuse()
                streams_close_begin(&target._state)
                _let_go(target, False)
            raise
        slot, target_obj = take_capture(cid, stream)
        if isinstance(target_obj, _weakref.ref):
            target_obj = target_obj()
            if isinstance(target_obj, Graph):
                made = <Graph>target_obj
                if made._handle != <streams_graph_t>g or _capture_release(made) == 0:
                    _capture_dropped(made)
                    made = None
        elif isinstance(target_obj, Graph):
            target = <Graph>target_obj
            target_closed = target.closed
            if g == <cudaGraph_t>target._handle and owner is not None:
                # Added before the capture's use of the graph ends (a close()
                # meanwhile lets go of the list when that use ends).
                _keep_add(target, owner)
            target._unuse()
    finally:
        stream._unuse()
        # Buffers released during the capture are freed now (see _memory).
        rt.drain_deferred()
    if target is not None and g == <cudaGraph_t>target._handle:
        # begin_capture_to_graph: CUDA returns the user's graph, which a
        # close() during the capture destroyed as the capture ended.
        if target_closed:
            raise ValueError(_CLOSED_DURING_CAPTURE.format("the Graph captured into"))
        return target
    if made is not None:
        return _adopt(made, g, owner)
    rt.count_graph_adopted()
    return _wrap_graph(g, True, slot, [owner] if owner is not None else [])


def capture_info(Stream stream not None):
    cdef cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone
    cdef unsigned long long cid = 0
    cdef cudaGraph_t g = NULL
    cdef const cudaGraphNode_t* deps = NULL
    cdef const cudaGraphEdgeData* edges = NULL
    cdef size_t n = 0, i
    cdef Graph graph
    stream._use()
    try:
        with nogil:
            rt.stream_get_capture_info(<cudaStream_t>stream._handle, &status, &cid, &g, &deps,
                                       &edges, &n)
        if status != cudaStreamCaptureStatusActive:
            return CaptureInfo(CaptureStatus(<int>status), cid if cid else None, None, [], [])
        # Copied first: CUDA's arrays are valid until the next call on the
        # stream (the registry may ask it about its captures).
        handles = [<uintptr_t>deps[i] for i in range(n)]
        edge_data = ([(edges[i].from_port, edges[i].to_port, edges[i].type) for i in range(n)]
                     if edges != NULL else [(0, 0, 0)] * <Py_ssize_t>n)
        # The graph being built, as the Graph end_capture will return (for
        # a capture into a graph, that Graph itself).
        graph = _capture_graph(stream, cid, g)
        dep_nodes = [_wrap_node(graph, <cudaGraphNode_t><uintptr_t>h) for h in handles]
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
        except (CudaError, ValueError):
            # An invalidated capture, or a graph closed during it, still
            # ends; the user's error matters.
            pass
        return False
