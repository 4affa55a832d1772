# The kernel nodes of any graph and of executables: what they launch, and
# changing their arguments; part of streams._graph (_graph.pyx includes it).

# ---- kernel nodes of any graph: what they launch, and changing their arguments -----------
# Read and changed through the driver's form of a kernel node (the runtime's
# cannot name another library's kernel); the parameter layout comes from
# cuFuncGetParamInfo, so any kernel node can be read, captured ones too.

# struct formats of the type names a signature may use
_ARG_FORMATS = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float32": "f", "float64": "d", "pointer": "P", "condition": "Q",
    "char": "b", "short": "h", "int": "i", "long long": "q",
    "unsigned char": "B", "unsigned short": "H", "unsigned int": "I",
    "unsigned long long": "Q", "float": "f", "double": "d",
    "ptr": "P", "void*": "P", "size_t": "Q", "cudaGraphConditionalHandle": "Q",
}
# CU_FUNC_ATTRIBUTE_* a KernelNodeParams reports (cuda.h's values)
_KERNEL_ATTRIBUTES = ((0, "max_threads_per_block"), (1, "shared_size_bytes"),
                      (2, "const_size_bytes"), (3, "local_size_bytes"), (4, "num_regs"))
# A node's parameters are read while no other thread changes them: the
# driver's copy of them is replaced by a change.
cdef object _kernel_node_lock = _threading.Lock()


@cython.final
cdef class KernelNodeParams:
    """What a kernel node launches (``GraphNode.kernel_params()``), as CUDA
    recorded it when this was read.

    ``name`` is the kernel's (None where CUDA cannot tell it);
    ``function``/``kernel_handle`` are its ``CUfunction``/``CUkernel`` (0
    when absent); ``args`` holds each argument's bytes, ``param_sizes`` and
    ``param_offsets`` their layout (``cuFuncGetParamInfo``);
    :meth:`values` reads them as the types of a signature.  ``attributes``
    holds what CUDA tells of the kernel (``cuFuncGetAttribute``):
    ``max_threads_per_block``, ``shared_size_bytes``, ``const_size_bytes``,
    ``local_size_bytes``, ``num_regs``, each None where CUDA does not answer.
    :attr:`kernel` is the kernel itself, as a :class:`~streams.Kernel`.
    """
    cdef streams_kernel_node_params _p
    cdef object _graph_ref       # a weak reference to the Graph of the node
    cdef Kernel _kernel          # what .kernel gave, once asked
    cdef readonly object name
    cdef readonly tuple grid
    cdef readonly tuple block
    cdef readonly unsigned int shared_mem
    cdef readonly tuple param_sizes
    cdef readonly tuple param_offsets
    cdef readonly tuple args
    cdef readonly dict attributes

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "GraphNode.kernel_params() makes them")

    @property
    def function(self):
        return <uintptr_t>self._p.func

    @property
    def kernel_handle(self):
        return <uintptr_t>self._p.kern

    @property
    def kernel(self):
        """The node's kernel as a :class:`~streams.Kernel`, to read its
        ``name`` and attributes, launch it or ``prepare`` it.

        For a node streams built or captured from a kernel of an open
        :class:`~streams.Module`, that Kernel itself (the one ``get_kernel``
        last gave for it).  Otherwise (a captured launch of CuPy, PyTorch,
        cuda.core, ...) the handle the node records, adopted as by
        :meth:`Kernel.from_handle` with the node's graph as ``owner``: the
        Kernel keeps the graph alive, but neither it nor the graph keeps the
        other library's code loaded.  It is valid while the library that
        loaded it keeps it loaded; using it after that is undefined
        behaviour, as for every raw handle (docs/safety.rst).  Its
        ``signature`` is None: plain Python ints and floats need numpy
        scalars, and an argument for a parameter of a struct type is
        refused.  The same Kernel on every access of this object.

        ValueError once the graph the node was read from is closed or gone
        (the handle may be stale: read the node again), or where CUDA
        refuses the handle; NotImplementedError where the driver is older
        than CUDA 12.4."""
        cdef Kernel k
        if self.args is None:
            raise ValueError("this KernelNodeParams was not read from a node")
        with _kernel_node_lock:
            k = self._kernel
        if k is not None:
            return k
        graph = self._graph_ref()
        if graph is None or graph.closed:
            raise ValueError("the graph this kernel node was read from is closed or gone: its "
                             "kernel may have been unloaded since (read the node again)")
        k = _node_kernel(self, <Graph>graph)
        with _kernel_node_lock:
            if self._kernel is None:
                self._kernel = k
            return self._kernel

    def values(self, signature):
        """The arguments as the types ``signature`` names (a Kernel with a
        signature, a comma-separated string or a sequence of type names, as
        for ``Module.get_kernel``); pointers read as ints."""
        if self.args is None:
            raise ValueError("this KernelNodeParams was not read from a node")
        formats = _signature_formats(signature, self.param_sizes)
        return tuple(_struct.unpack("<" + f if f != "P" else "<Q", a)[0]
                     for f, a in zip(formats, self.args))

    def __repr__(self):
        if self.args is None:
            return "<streams.KernelNodeParams (never initialised)>"
        return (f"<streams.KernelNodeParams {self.name or '?'} grid={self.grid} "
                f"block={self.block} shared_mem={self.shared_mem} "
                f"params={len(self.param_sizes)}>")


cdef list _signature_type_names(object signature):
    if isinstance(signature, Kernel):
        names = signature.signature
        if names is None:
            raise ValueError("signature: this Kernel was loaded without a signature")
        return list(names)
    if isinstance(signature, str):
        return [n.strip() for n in signature.split(",") if n.strip()]
    try:
        names = list(signature)
    except TypeError:
        raise TypeError(f"signature must be a Kernel, a str or a sequence of type names, "
                        f"not {type(signature).__name__}") from None
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"signature: type names are str, not {type(name).__name__}")
    return names


cdef int _check_signature_count(list names, tuple sizes) except -1:
    if len(names) != len(sizes):
        raise ValueError(f"signature names {len(names)} parameters; the kernel has "
                         f"{len(sizes)} (sizes {list(sizes)})")
    return 0


cdef tuple _signature_formats(object signature, tuple sizes):
    # struct formats, to read arguments (KernelNodeParams.values)
    cdef list names = _signature_type_names(signature)
    cdef list formats = []
    for name in names:
        f = _ARG_FORMATS.get(name.strip())
        if f is None:
            raise ValueError(f"signature: unknown type {name!r}")
        formats.append(f)
    _check_signature_count(names, sizes)
    for i, (f, size) in enumerate(zip(formats, sizes)):
        if _struct.calcsize("<" + (f if f != "P" else "Q")) != size:
            raise ValueError(f"signature: parameter {i} is {size} bytes, not a {names[i]}")
    return tuple(formats)


cdef list _names_kinds(list names, tuple sizes):
    # the packer's kinds, to write arguments (the kinds launches pack), of
    # a signature's type names
    cdef list kinds = []
    cdef int kind
    for name in names:
        kind = arg_kind(name)
        if kind < 0:
            raise ValueError(f"signature: unknown type {name!r}")
        kinds.append(kind)
    _check_signature_count(names, sizes)
    for i in range(len(kinds)):
        if <size_t>arg_size(kinds[i]) != <size_t>sizes[i]:
            raise ValueError(f"signature: parameter {i} is {sizes[i]} bytes, not a {names[i]}")
    return kinds


cdef Kernel _node_kernel(KernelNodeParams info, Graph graph):
    # What KernelNodeParams.kernel gives: the graph in use meanwhile, so that
    # a close in another thread waits (a node streams built keeps its module
    # loaded while the graph is open).
    cdef void* func = info._p.func
    cdef void* kern = info._p.kern
    cdef Kernel k
    if func == NULL and kern == NULL:
        raise ValueError("CUDA named no kernel for this kernel node")
    graph._use()
    try:
        k = find_node_kernel(func, kern, info.name)
        if k is not None:
            return k
        # A CUfunction where the node has one: the driver's calls (name,
        # attributes, launch) take it, whichever way it was recorded.
        if func != NULL:
            return adopt_kernel(<uintptr_t>func, False, _top(graph), None, True)
        return adopt_kernel(<uintptr_t>kern, True, _top(graph), None, True)
    finally:
        graph._unuse()


cdef int _require_kernel_node(cudaGraphNode_t node, str argname) except -1:
    # The caller holds the node's graph in use.
    cdef cudaGraphNodeType t
    with nogil:
        rt.graph_node_get_type(node, &t)
    if t != cudaGraphNodeTypeKernel:
        try:
            kind = NodeType(<int>t).name.lower()
        except ValueError:
            kind = f"type {<int>t}"
        raise ValueError(f"{argname} is a {kind} node, not a kernel node")
    return 0


cdef tuple _param_layout(void* func, void* kern, dict layouts):
    # (sizes, offsets) of the kernel's parameters (cuFuncGetParamInfo), from
    # `layouts` when a node of the same kernel was read in the same call.
    cdef size_t offset = 0, size = 0, i = 0
    cdef int more
    key = (<uintptr_t>func, <uintptr_t>kern)
    if layouts is not None:
        found = layouts.get(key)
        if found is not None:
            return found
    sizes, offsets = [], []
    while i < 4096:
        with nogil:
            more = rt.kernel_param_info(func, kern, i, &offset, &size)
        if not more:
            break
        offsets.append(offset)
        sizes.append(size)
        i += 1
    found = (tuple(sizes), tuple(offsets))
    if layouts is not None:
        layouts[key] = found
    return found


cdef tuple _read_node_args(cudaGraphNode_t node, streams_kernel_node_params* p, str argname,
                           dict layouts):
    """A kernel node's parameters as CUDA recorded them (``p``, its argument
    pointers cleared) and ``(sizes, offsets, args)``.  The caller holds the
    node's graph in use and _kernel_node_lock."""
    cdef size_t j, buf_size = <size_t>-1
    cdef char* buf = NULL
    cdef Py_ssize_t k
    cdef list args = []
    with nogil:
        rt.kernel_node_get(node, p)
    sizes, offsets = _param_layout(p.func, p.kern, layouts)
    if p.kernel_params != NULL:
        for k in range(len(sizes)):
            args.append((<char*>p.kernel_params[k])[:<size_t>sizes[k]])
    elif p.extra != NULL:
        # CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs, ending with _END
        j = 0
        while j < 64 and p.extra[j] != STREAMS_LAUNCH_PARAM_END:
            if p.extra[j] == STREAMS_LAUNCH_PARAM_BUFFER_POINTER:
                buf = <char*>p.extra[j + 1]
            elif p.extra[j] == STREAMS_LAUNCH_PARAM_BUFFER_SIZE:
                buf_size = (<size_t*>p.extra[j + 1])[0]
            j += 2
        if buf == NULL and sizes:
            raise ValueError(f"{argname}: CUDA gave no argument buffer for this "
                             "kernel node")
        for k in range(len(sizes)):
            if buf_size != <size_t>-1 and <size_t>offsets[k] + <size_t>sizes[k] > buf_size:
                raise ValueError(f"{argname}: the node's argument buffer "
                                 f"({buf_size} bytes) is shorter than its kernel's "
                                 "parameters")
            args.append(buf[<size_t>offsets[k]:<size_t>offsets[k] + <size_t>sizes[k]])
    elif sizes:
        raise ValueError(f"{argname}: CUDA gave no arguments for this kernel node")
    p.kernel_params = NULL     # the driver's copy: not ours to keep
    p.extra = NULL
    return sizes, offsets, tuple(args)


cdef KernelNodeParams _read_kernel_node(GraphNode nd, str argname):
    cdef KernelNodeParams info
    cdef streams_kernel_node_params p
    cdef const char* name = NULL
    cdef int more, attr, value = 0
    nd._check()
    rt.kernel_node_require()
    with _kernel_node_lock:
        nd._graph._use()
        try:
            _require_kernel_node(<cudaGraphNode_t>nd._handle, argname)
            sizes, offsets, args = _read_node_args(<cudaGraphNode_t>nd._handle, &p, argname,
                                                   None)
            with nogil:
                name = rt.kernel_name(p.func, p.kern)
            attributes = {}
            for attr, attr_name in _KERNEL_ATTRIBUTES:
                with nogil:
                    more = rt.kernel_attribute(p.func, p.kern, attr, &value)
                attributes[attr_name] = value if more else None
        finally:
            nd._graph._unuse()
    info = KernelNodeParams.__new__(KernelNodeParams)
    info._p = p
    info._graph_ref = _weakref.ref(nd._graph)
    info.name = (<bytes>name).decode("utf-8", "replace") if name != NULL else None
    info.grid = (p.grid[0], p.grid[1], p.grid[2])
    info.block = (p.block[0], p.block[1], p.block[2])
    info.shared_mem = p.shared_mem
    info.param_sizes = sizes
    info.param_offsets = offsets
    info.args = args
    info.attributes = attributes
    return info


# ---- what a kernel node runs, to change some of its arguments ----------------------------------

@cython.final
cdef class _NodeState:
    """What one kernel node runs: as read from a graph's node (the driver's
    form, ``p``), or as ``GraphExec.set_kernel_node`` set it (``kernel``:
    the same runtime call again, with other arguments).  An executable
    keeps one per kernel node it changed, or that changed under it
    (GraphExec._kernel_state); never changed once made."""
    cdef streams_kernel_node_params p    # func, kern, ctx, grid, block, shared_mem
    cdef Kernel kernel                   # set_kernel_node's kernel, or None: `p` as read
    cdef bint function                   # that kernel is an adopted CUfunction (the driver's call)
    cdef tuple sizes                     # each parameter's size
    cdef tuple args                      # each argument's bytes
    cdef object name                     # the kernel's name; None: not read yet
    cdef object typed                    # the streams Kernel whose signature types changes:
                                         # None not looked up yet, False none


cdef _NodeState _state_read(streams_kernel_node_params* p, tuple sizes, tuple args,
                            object name):
    cdef _NodeState st = _NodeState.__new__(_NodeState)
    st.p = p[0]
    st.p.kernel_params = NULL
    st.p.extra = NULL
    st.sizes = sizes
    st.args = args
    st.name = name
    return st


cdef _NodeState _state_of(KernelNodeParams info):
    return _state_read(&info._p, info.param_sizes, info.args, info.name)


cdef _NodeState _state_set(Kernel k, cudaKernelNodeParams* params, ArgPack* pack,
                           Py_ssize_t nargs):
    # What set_kernel_node gave the node: its arguments as packed.
    cdef _NodeState st = _NodeState.__new__(_NodeState)
    cdef Py_ssize_t i
    cdef list sizes = []
    for i in range(nargs):
        sizes.append(k._param_size[i] if k._nparams >= 0 else arg_size(k._kinds[i]))
    memset(&st.p, 0, sizeof(st.p))
    st.p.grid[0], st.p.grid[1], st.p.grid[2] = \
        params.gridDim.x, params.gridDim.y, params.gridDim.z
    st.p.block[0], st.p.block[1], st.p.block[2] = \
        params.blockDim.x, params.blockDim.y, params.blockDim.z
    st.p.shared_mem = params.sharedMemBytes
    st.kernel = k
    st.function = k._adopted == ADOPTED_FUNCTION
    st.sizes = tuple(sizes)
    st.args = tuple([(<char*>&pack.slots[i])[:<size_t>sizes[i]] for i in range(nargs)])
    st.name = k._name
    st.typed = k if k._nsig >= 0 else False
    return st


cdef _NodeState _state_with_args(_NodeState st, tuple args):
    cdef _NodeState new = _NodeState.__new__(_NodeState)
    new.p = st.p
    new.kernel = st.kernel
    new.function = st.function
    new.sizes = st.sizes
    new.args = args
    new.name = st.name
    new.typed = st.typed
    return new


cdef object _state_name(_NodeState st):
    cdef const char* name = NULL
    if st.name is None and st.kernel is None:
        with nogil:
            name = rt.kernel_name(st.p.func, st.p.kern)
        if name != NULL:
            st.name = (<bytes>name).decode("utf-8", "replace")
    return st.name


cdef list _own_kinds(_NodeState st):
    # Without signature=, the signature of the node's kernel types the
    # values where streams knows it (a Module's kernel loaded with one, the
    # built-in kernels): a pointer is then checked as a launch checks it.
    cdef Kernel k
    cdef Py_ssize_t i
    if st.typed is None:
        k = None
        if st.p.func != NULL or st.p.kern != NULL:
            k = find_node_kernel(st.p.func, st.p.kern, _state_name(st))
        st.typed = k if k is not None and k._nsig >= 0 else False
    if st.typed is False:
        return None
    k = <Kernel>st.typed
    if k._nsig != len(st.sizes):
        return None
    for i in range(k._nsig):
        if <size_t>arg_size(k._kinds[i]) != <size_t>st.sizes[i]:
            return None
    return [k._kinds[i] for i in range(k._nsig)]


cdef int _check_condition(Graph graph, object value, str argname) except -1:
    # A kernel of `graph` may set the conditions of `graph` and of the graphs
    # whose conditional nodes hold it (as _check_conditions, for one value).
    _check_alive(<ConditionHandle>value, argname)
    if graph is None or not _in_family(graph, (<ConditionHandle>value)._graph):
        raise ValueError(f"{argname} is a ConditionHandle of another graph (a kernel may set "
                         "the conditions of its own graph and of the graphs whose conditional "
                         "nodes hold it)")
    return 0


cdef bytes _arg_bytes(object value, size_t size, int kind, list keeps, Graph graph, str what):
    # One argument's new bytes, exactly `size` of them whatever the value's
    # type says of itself (CUDA copies `size` bytes from the argument:
    # tests/graph/test_graph_audit_cpu.py, an int subclass's short to_bytes).
    cdef bytes b = _arg_bytes_of(value, size, kind, keeps, graph, what)
    if <size_t>len(b) != size:
        raise ValueError(f"{what}: {type(value).__name__} gave {len(b)} bytes for a parameter "
                         f"of {size}")
    return b


cdef bytes _arg_bytes_of(object value, size_t size, int kind, list keeps, Graph graph,
                         str what):
    # One argument's new bytes: raw bytes as given; a value of a known type
    # (`kind`: a signature's, or the kernel's own) or anything but a plain
    # int or float (memory, a numpy scalar, a ConditionHandle) through the
    # packer of launches, which checks a pointer as memory CUDA knows; a
    # plain int or float of an untyped parameter packed to its size.
    cdef ArgPack pack
    cdef bytes b
    if isinstance(value, (bytes, bytearray, memoryview)):
        b = bytes(value)
        if <size_t>len(b) != size:
            raise ValueError(f"{what}: {len(b)} bytes for a parameter of {size}")
        if kind >= 0 and arg_is_pointer(kind):
            # the address they hold is checked as any other pointer's
            pack.nusers = 0
            try:
                pack_arg(&pack, 0, kind, int.from_bytes(b, "little"), what)
            finally:
                release_pack(&pack)
        elif kind >= 0 and arg_is_condition(kind):
            raise TypeError(f"{what}: a condition parameter takes a streams.ConditionHandle "
                            "(of the node's graph), not bytes")
        return b
    if kind < 0:
        if isinstance(value, bool):
            raise TypeError(f"{what}: a bool is not a kernel argument here; pass bytes or a "
                            "signature")
        if isinstance(value, int):
            # The int's own value, not what a subclass's methods say.
            value = int.__index__(value)
            try:
                return value.to_bytes(size, "little", signed=value < 0)
            except OverflowError:
                raise ValueError(f"{what}: {value} does not fit a parameter of {size} "
                                 "bytes") from None
        if isinstance(value, float):
            value = float.__float__(value)
            if size == 4:
                return _struct.pack("<f", value)
            if size == 8:
                return _struct.pack("<d", value)
            raise ValueError(f"{what}: a float for a parameter of {size} bytes")
    pack.nusers = 0
    try:
        kind = pack_arg(&pack, 0, kind, value, what)
        if <size_t>arg_size(kind) != size:
            raise TypeError(f"{what}: a {type(value).__name__} for a parameter of {size} bytes"
                            + (" (memory is passed as a pointer, 8 bytes)"
                               if arg_is_pointer(kind) else ""))
        if arg_is_condition(kind):
            _check_condition(graph, value, what)
        b = (<char*>&pack.slots[0])[:size]
        if arg_is_pointer(kind):
            # The memory stays while the node may use it: a streams buffer
            # held in use, another library's array by reference.
            if pack.nusers:
                keeps.append(keep_pack_users(&pack))
            if value is not None and not isinstance(value, int):
                keeps.append(value)
    finally:
        release_pack(&pack)
    return b


cdef tuple _changed_args(_NodeState st, object changes, object signature, Graph graph):
    return _changes_to(_own_kinds(st), st.sizes, st.args, None, st, changes, signature, graph)


cdef tuple _changes_to(list own, tuple sizes, tuple old, object name, _NodeState st,
                       object changes, object signature, Graph graph):
    # `old` (each argument's bytes) with `changes`; `own`: the kinds of the
    # kernel's own signature, or None.  The signature is read once (it may
    # be an iterator).
    cdef list args = list(old)
    cdef list keeps = []
    cdef list kinds
    cdef list names
    cdef Py_ssize_t n = len(args)
    cdef int i
    if not isinstance(changes, dict):
        raise TypeError(f"changes must be a dict of parameter index to value, not "
                        f"{type(changes).__name__}")
    kinds = own
    if signature is not None:
        names = _signature_type_names(signature)
        kinds = _names_kinds(names, sizes)
        if own is not None:
            # What the kernel declares a pointer or a condition stays one:
            # a signature cannot turn its check off.
            for i in range(n):
                if ((arg_is_pointer(own[i]) and not arg_is_pointer(kinds[i]))
                        or (arg_is_condition(own[i]) and not arg_is_condition(kinds[i]))):
                    if name is None and st is not None:
                        name = _state_name(st)
                    raise ValueError(
                        f"signature: parameter {i} of {name or 'the kernel'} is a "
                        f"{'pointer' if arg_is_pointer(own[i]) else 'condition'}, not a "
                        f"{names[i].strip()}")
    for index, value in changes.items():
        i = as_int(index, "changes")
        if i < 0 or i >= n:
            if name is None and st is not None:
                name = _state_name(st)
            raise IndexError(f"changes: parameter {i} of a kernel with {n} parameters "
                             f"({name or 'unnamed'})")
        args[i] = _arg_bytes(value, <size_t>sizes[i], kinds[i] if kinds is not None else -1,
                             keeps, graph, f"changes[{i}]")
    return tuple(args), tuple(keeps)


cdef str _OTHER_CONTEXT = (
    "{}: this kernel node runs in a context other than a device's primary one (a green "
    "context's, when it was captured on a green context's stream, or one made through the "
    "driver API), and streams does not change such a node in place: for a green context's "
    "node the 580 driver (CUDA 13.0) refuses the change or crashes; capture the graph "
    "again with the new arguments instead")


cdef int _refuse_other_context(void* ctx, str argname) except -1:
    # Before CUDA sees the change: see kernel_node_context_ok.
    cdef int ok
    with nogil:
        ok = rt.kernel_node_context_ok(ctx)
    if not ok:
        raise ValueError(_OTHER_CONTEXT.format(argname))
    return 0


cdef int _refuse_node_of_other_context(GraphNode nd, str argname) except -1:
    # A node about to get a new kernel through the runtime (or the adopted-
    # function path): its recorded context, read through the driver.  A
    # driver or build without that table (before CUDA 12.4 / a 12.5
    # runtime) has no green contexts' nodes to refuse either.
    cdef streams_kernel_node_params p
    try:
        rt.kernel_node_require()
    except NotImplementedError:
        return 0
    with _kernel_node_lock:
        with nogil:
            rt.kernel_node_get(<cudaGraphNode_t>nd._handle, &p)
    return _refuse_other_context(p.ctx, argname)


cdef int _args_buffer(tuple sizes, tuple args, void*** ptrs_out, char** data_out) except -1:
    # One buffer with each argument's bytes, each at a 16-byte boundary, and
    # the array of pointers to them that CUDA takes; the caller frees both.
    # CUDA copies each parameter's size from its pointer: every argument is
    # exactly that long (checked here, whatever made it).
    cdef Py_ssize_t n = len(args), i
    cdef size_t total = 0, at
    cdef bytes b
    if len(sizes) != n:
        raise ValueError(f"{n} arguments for a kernel with {len(sizes)} parameters")
    for i in range(n):
        if not isinstance(args[i], bytes) or <size_t>len(<bytes>args[i]) != <size_t>sizes[i]:
            raise ValueError(f"argument {i}: not the {sizes[i]} bytes of its parameter")
        total += (len(<bytes>args[i]) + 15) & ~(<size_t>15)
    ptrs_out[0] = <void**>PyMem_Malloc((n + 1) * sizeof(void*))
    data_out[0] = <char*>PyMem_Malloc(total + 16)
    if ptrs_out[0] == NULL or data_out[0] == NULL:
        raise MemoryError()
    at = 0
    for i in range(n):
        b = <bytes>args[i]
        memcpy(data_out[0] + at, <char*>b, len(b))
        ptrs_out[0][i] = data_out[0] + at
        at += (len(b) + 15) & ~(<size_t>15)
    return 0


cdef int _set_kernel_args(streams_kernel_node_params* src, tuple sizes, tuple args,
                          GraphExec ex, GraphNode nd) except -1:
    # The node's parameters `src` (as read), with `args` in place of its
    # arguments (CUDA copies them during the call).
    cdef streams_kernel_node_params p = src[0]
    cdef void** ptrs = NULL
    cdef char* data = NULL
    try:
        _args_buffer(sizes, args, &ptrs, &data)
        p.kernel_params = ptrs if len(args) else NULL
        p.extra = NULL
        with _kernel_node_lock:
            with nogil:
                if ex is not None:
                    rt.graph_exec_kernel_node_set(<cudaGraphExec_t>ex._handle,
                                                  <cudaGraphNode_t>nd._handle, &p)
                else:
                    rt.graph_kernel_node_set(<cudaGraphNode_t>nd._handle, &p)
    finally:
        PyMem_Free(ptrs)
        PyMem_Free(data)
    return 0


cdef int _apply_state(_NodeState st, GraphExec ex, GraphNode nd) except -1:
    # Give the executable's node what `st` says, the way it was made: the
    # driver's form as read, or set_kernel_node's runtime call again.
    cdef cudaKernelNodeParams params
    cdef void** ptrs = NULL
    cdef char* data = NULL
    if st.kernel is None:
        return _set_kernel_args(&st.p, st.sizes, st.args, ex, nd)
    try:
        _args_buffer(st.sizes, st.args, &ptrs, &data)
        memset(&params, 0, sizeof(params))
        params.func = st.kernel._func
        params.gridDim.x, params.gridDim.y, params.gridDim.z = \
            st.p.grid[0], st.p.grid[1], st.p.grid[2]
        params.blockDim.x, params.blockDim.y, params.blockDim.z = \
            st.p.block[0], st.p.block[1], st.p.block[2]
        params.sharedMemBytes = st.p.shared_mem
        params.kernelParams = ptrs if len(st.args) else NULL
        params.extra = NULL
        with nogil:
            if st.function:
                rt.graph_exec_function_node_set_params(
                    <cudaGraphExec_t>ex._handle, <cudaGraphNode_t>nd._handle, &params)
            else:
                rt.graph_exec_kernel_node_set_params(
                    <cudaGraphExec_t>ex._handle, <cudaGraphNode_t>nd._handle, &params)
    finally:
        PyMem_Free(ptrs)
        PyMem_Free(data)
    return 0


# ---- what an executable's kernel nodes run ----------------------------------------------------
# set_kernel_node_args changes some arguments of what an executable's node
# runs now, and CUDA cannot read an executable's node: the executable keeps
# what each of its kernel nodes runs (GraphExec._kernel_state, _NodeState)
# once it is no longer what the graph it came from has in that node: after
# a change of its own (set_kernel_node, set_kernel_node_args), after an
# update from another graph (read from that graph's nodes, paired with its
# own), and before the graph it came from changes that node (GraphNode.
# set_args notes the node as it was in each executable of the graph).

cdef int _note_before_change(Graph top, uintptr_t key, object st) except -1:
    with cython.critical_section(top):
        refs = list(top._execs) if top._execs else None
    if refs is None:
        return 0
    for ref in refs:
        ex = ref()
        if ex is not None and not (<GraphExec>ex).closed:
            (<GraphExec>ex)._note_source_state(key, st)
    return 0


cdef list _pinned_pairs(list deps, list types, list wanted=None):
    """Which nodes of two graphs paired by index (same types, same
    dependencies by index) CUDA must pair the same way, whatever order it
    walks them in.  CUDA pairs nodes one to one, keeping each node's type
    and its paired dependencies (cudaGraphExecUpdate), so its pairing
    composed with ours is an automorphism of the graph (types and edges
    kept); a node is pinned when every such automorphism keeps it in place.
    Two sound tests, either suffices: by induction from the roots, a node
    whose dependencies are pinned and that no other node matches in type and
    set of dependencies; and colour refinement (types, then the multisets of
    the colours before and after a node, refined to a fixpoint or a work
    bound), a node alone in its colour.  Two siblings of one type (two
    kernels captured on forked streams) may be paired either way, and are
    not pinned (tests/graph/test_graph_update_pairing_gpu.py).  ``wanted``:
    the nodes whose answer matters (default all); refinement runs only
    while one of them is not pinned by induction, and within a work bound
    (an update holds its graphs' locks meanwhile)."""
    cdef Py_ssize_t n = len(deps), i
    keys = [(types[i], frozenset(deps[i])) for i in range(n)]
    counts = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    state = [0] * n            # 0 unknown, 1 pinned, 2 not, 3 being decided
    for i in range(n):
        _pin(i, deps, keys, counts, state)
    pinned = [st == 1 for st in state]
    if not all([pinned[i] for i in (range(n) if wanted is None else wanted)]):
        alone = _alone_in_colour(deps, types)
        pinned = [pinned[i] or alone[i] for i in range(n)]
    return pinned


# The work bound of colour refinement, in node and edge visits: a fixpoint
# for two forked chains of 1,000 kernels (~1,000 rounds), and a few seconds
# at most (tests/graph/test_graph_pairing_cpu.py).
cdef Py_ssize_t _REFINE_WORK = 4000000


cdef list _alone_in_colour(list deps, list types):
    # Colour refinement of the graph (nodes with a dependency that is not a
    # node of the graph are never alone).  Every round's colouring is kept
    # by every automorphism, so stopping early (the work bound) stays sound.
    cdef Py_ssize_t n = len(deps), i, edges = 0, rounds = 0
    bad = [False] * n
    preds = [[] for _ in range(n)]
    succs = [[] for _ in range(n)]
    for i in range(n):
        for d in deps[i]:
            if d < 0 or d >= n:
                bad[i] = True
            else:
                preds[i].append(d)
                succs[d].append(i)
                edges += 1
    colour = _relabel([(types[i], bad[i]) for i in range(n)])
    classes = len(set(colour))
    # Each round visits every node and edge once: the bound is checked
    # before each, so one round runs past it at most.
    while rounds * (n + edges) < _REFINE_WORK:
        rounds += 1
        colour = _relabel([(colour[i], tuple(sorted([colour[d] for d in preds[i]])),
                            tuple(sorted([colour[d] for d in succs[i]])))
                           for i in range(n)])
        now = len(set(colour))
        if now == classes:
            break
        classes = now
    counts = {}
    for c in colour:
        counts[c] = counts.get(c, 0) + 1
    return [counts[colour[i]] == 1 and not bad[i] for i in range(n)]


cdef list _relabel(list signatures):
    # The same small int for equal signatures.
    ids = {}
    return [ids.setdefault(sig, len(ids)) for sig in signatures]


cdef int _pin(Py_ssize_t i, list deps, list keys, dict counts, list state) except -1:
    # Iterative depth-first decision of node i (graphs may be deep).  A
    # dependency still being decided (3) would mean a cycle: not pinned.
    stack = [i]
    while stack:
        j = stack[len(stack) - 1]
        if state[j] in (1, 2):
            stack.pop()
            continue
        state[j] = 3
        waiting = False
        for d in deps[j]:
            if d < 0 or d >= len(state):
                state[j] = 2        # not a node of the graph
                break
            if state[d] == 0:
                stack.append(d)
                waiting = True
        if state[j] == 2:
            stack.pop()
            continue
        if waiting:
            continue
        ok = counts[keys[j]] == 1 and all(state[d] == 1 for d in deps[j])
        state[j] = 1 if ok else 2
        stack.pop()
    return 0


cdef dict _paired_kernel_states(Graph source, Graph other):
    """What each kernel node of an executable of ``source`` runs once
    updated from ``other``, by node of ``source``; None when the two graphs'
    nodes do not pair in the order they were made (CUDA pairs them by
    topology, which that order follows for graphs built or captured the
    same way: the pairing is taken only where every pair has the same type
    and dependencies that pair in order).  Both graphs are in use."""
    cdef list a = _handles(source._handle, False)
    cdef list b = _handles(other._handle, False)
    cdef Py_ssize_t i, n = len(a)
    cdef cudaGraphNodeType ta, tb
    cdef streams_kernel_node_params p
    cdef dict states = {}
    cdef cudaGraphNode_t na, nb
    if len(b) != n:
        return None
    index_a = {h: i for i, h in enumerate(a)}
    index_b = {h: i for i, h in enumerate(b)}
    kernels = []
    deps = []
    types = []
    for i in range(n):
        na = <cudaGraphNode_t><uintptr_t>a[i]
        nb = <cudaGraphNode_t><uintptr_t>b[i]
        with nogil:
            rt.graph_node_get_type(na, &ta)
            rt.graph_node_get_type(nb, &tb)
        if ta != tb:
            return None
        # Dependencies are a set: CUDA lists a join's in no fixed order.
        da = sorted([index_a.get(d, -1) for d in _handles(<void*>na, True)])
        if da != sorted([index_b.get(d, -2) for d in _handles(<void*>nb, True)]):
            return None
        deps.append(da)
        types.append(<int>ta)
        if ta == cudaGraphNodeTypeKernel:
            kernels.append(i)
    pinned = _pinned_pairs(deps, types, kernels)
    layouts = {}
    with _kernel_node_lock:
        for i in kernels:
            if not pinned[i]:
                continue        # CUDA may pair it with a sibling: refused
            try:
                sizes, _, args = _read_node_args(<cudaGraphNode_t><uintptr_t>b[i], &p, "node",
                                                 layouts)
            except (ValueError, CudaError):
                continue        # not known: a change of it is refused
            states[a[i]] = _state_read(&p, sizes, args, None)
    return states


# How long an update waits for its source graph's change lock (seconds).
cdef double _SOURCE_LOCK_WAIT = 1.0


cdef dict _states_after_update(object source, Graph other):
    # What update(other) gave an executable of `source` (open or not).  An
    # empty dict where it cannot be known: a change of arguments of such a
    # node is refused (GraphExec._state_of), never made from stale values.
    cdef Graph src
    if source is None or (<Graph>source).closed:
        return {}    # no node of it can be named any more
    src = <Graph>source
    try:
        rt.kernel_node_require()
        src._use()
    except (NotImplementedError, ValueError):
        return {}
    # Read under the source's change lock too (a GraphNode.set_args there
    # meanwhile would be a second CUDA call on that graph at once), waited
    # for at most _SOURCE_LOCK_WAIT seconds: the caller holds `other`'s, and
    # an update the other way round in another thread holds them in the
    # other order (both then give up, no deadlock).  Still busy: nothing is
    # known, changes of arguments are refused (never guessed).
    try:
        lock = _graph_lock(src)
        got = lock.acquire(True, _SOURCE_LOCK_WAIT)
    except BaseException:
        src._unuse()
        raise
    if not got:
        src._unuse()
        return {}
    try:
        return _paired_kernel_states(src, other) or {}
    except CudaError:
        return {}
    finally:
        lock.release()
        src._unuse()
