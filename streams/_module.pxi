# Modules and kernels: load PTX/cubin/fatbin with the library API (no nvcc,
# no context juggling), look kernels up, and launch them.
#
# Arguments are packed into fixed 8-byte slots on the C stack: every CUDA
# kernel parameter of a scalar or pointer type fits, and each value is
# written with its own C type at the start of its slot, so the kernel reads
# exactly the bytes it expects.

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

cdef enum:
    _MAX_KERNEL_ARGS = 64

cdef enum _ArgType:
    _T_I8, _T_I16, _T_I32, _T_I64, _T_U8, _T_U16, _T_U32, _T_U64, _T_F32, _T_F64, _T_PTR

_ARG_TYPE_NAMES = {
    "int8": _T_I8, "int16": _T_I16, "int32": _T_I32, "int64": _T_I64,
    "uint8": _T_U8, "uint16": _T_U16, "uint32": _T_U32, "uint64": _T_U64,
    "float32": _T_F32, "float64": _T_F64, "pointer": _T_PTR,
    # C spellings
    "char": _T_I8, "short": _T_I16, "int": _T_I32, "long long": _T_I64,
    "unsigned char": _T_U8, "unsigned short": _T_U16, "unsigned int": _T_U32,
    "unsigned long long": _T_U64, "float": _T_F32, "double": _T_F64,
    "ptr": _T_PTR, "void*": _T_PTR, "size_t": _T_U64,
}
_ARG_TYPE_LABEL = {_T_I8: "int8", _T_I16: "int16", _T_I32: "int32", _T_I64: "int64",
                   _T_U8: "uint8", _T_U16: "uint16", _T_U32: "uint32", _T_U64: "uint64",
                   _T_F32: "float32", _T_F64: "float64", _T_PTR: "pointer"}
_INT_LIMITS = {_T_I8: (-(1 << 7), (1 << 7) - 1), _T_I16: (-(1 << 15), (1 << 15) - 1),
               _T_I32: (-(1 << 31), (1 << 31) - 1), _T_I64: (-(1 << 63), (1 << 63) - 1),
               _T_U8: (0, (1 << 8) - 1), _T_U16: (0, (1 << 16) - 1),
               _T_U32: (0, (1 << 32) - 1), _T_U64: (0, (1 << 64) - 1)}


cdef struct _ArgPack:
    unsigned long long slots[_MAX_KERNEL_ARGS]
    void* ptrs[_MAX_KERNEL_ARGS]


cdef uintptr_t _pointer_of(object value, Py_ssize_t pos) except? 0:
    """The device/host address an argument stands for."""
    cdef void* p
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0 or value > <uintptr_t>-1:
            raise ValueError(f"argument {pos}: pointer {value} does not fit in a pointer")
        return <uintptr_t>value
    if isinstance(value, _Buffer):
        return <uintptr_t>(<_Buffer>value)._check_ptr()
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return <uintptr_t>cai["data"][0]
    if hasattr(value, "__dlpack__"):
        capsule = value.__dlpack__()
        if not PyCapsule_IsValid(capsule, b"dltensor"):
            raise TypeError(f"argument {pos}: __dlpack__ returned no 'dltensor' capsule")
        p = PyCapsule_GetPointer(capsule, b"dltensor")
        # DLManagedTensor starts with its DLTensor: data pointer, then the
        # device, ndim, dtype, shape, strides and byte_offset.
        return <uintptr_t>(<_DLTensor*>p).data + (<_DLTensor*>p).byte_offset
    raise TypeError(f"argument {pos} must be a pointer (int, a streams buffer, or an object "
                    f"with __cuda_array_interface__ or __dlpack__), not "
                    f"{type(value).__name__}")


cdef int _store_arg(_ArgPack* pack, Py_ssize_t i, int kind, object value) except -1:
    cdef void* slot = &pack.slots[i]
    pack.ptrs[i] = slot
    if kind == _T_PTR:
        (<uintptr_t*>slot)[0] = _pointer_of(value, i)
        return 0
    if kind == _T_F32 or kind == _T_F64:
        if isinstance(value, bool) or not hasattr(value, "__float__"):
            raise TypeError(f"argument {i} must be a number ({_ARG_TYPE_LABEL[kind]}), not "
                            f"{type(value).__name__}")
        if kind == _T_F32:
            (<float*>slot)[0] = <float>float(value)
        else:
            (<double*>slot)[0] = <double>float(value)
        return 0
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"argument {i} must be an integer ({_ARG_TYPE_LABEL[kind]}), not "
                        f"{type(value).__name__}")
    v = value.__index__()
    lo, hi = _INT_LIMITS[kind]
    if v < lo or v > hi:
        raise ValueError(f"argument {i}: {v} does not fit {_ARG_TYPE_LABEL[kind]}")
    if kind == _T_I8:
        (<signed char*>slot)[0] = <signed char>v
    elif kind == _T_I16:
        (<short*>slot)[0] = <short>v
    elif kind == _T_I32:
        (<int*>slot)[0] = <int>v
    elif kind == _T_I64:
        (<long long*>slot)[0] = <long long>v
    elif kind == _T_U8:
        (<unsigned char*>slot)[0] = <unsigned char>v
    elif kind == _T_U16:
        (<unsigned short*>slot)[0] = <unsigned short>v
    elif kind == _T_U32:
        (<unsigned int*>slot)[0] = <unsigned int>v
    else:
        (<unsigned long long*>slot)[0] = <unsigned long long>v
    return 0


cdef int _infer_kind(object value, Py_ssize_t pos) except -1:
    """Type of an argument when the kernel has no signature: numpy scalars
    say what they are, buffers are pointers; a bare int or float is ambiguous."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "ndim", 1) == 0:
        kind = _ARG_TYPE_NAMES.get(str(dtype))
        if kind is not None:
            return kind
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise TypeError(f"argument {pos}: a Python {type(value).__name__} is ambiguous for a "
                        "kernel without a signature; pass a numpy scalar (numpy.int32(...)) "
                        "or declare signature= in get_kernel()")
    return _T_PTR


cdef int _pack_args(Kernel kernel, tuple args, _ArgPack* pack) except -1:
    cdef Py_ssize_t n = len(args), i
    if n > _MAX_KERNEL_ARGS:
        raise TypeError(f"too many kernel arguments ({n} > {_MAX_KERNEL_ARGS})")
    if kernel._signature is not None:
        if n != kernel._nargs:
            raise TypeError(f"kernel {kernel._name!r} takes {kernel._nargs} argument(s) "
                            f"{kernel._signature_names}, got {n}")
        for i in range(n):
            _store_arg(pack, i, kernel._kinds[i], args[i])
    else:
        for i in range(n):
            _store_arg(pack, i, _infer_kind(args[i], i), args[i])
    return 0


cdef int _dims3(object value, dim3* out, str argname) except -1:
    cdef long long v
    if type(value) is int:
        v = value
        if 1 <= v <= 0x7FFFFFFF:   # the common 1-D case, without tuples
            out.x, out.y, out.z = <unsigned int>v, 1, 1
            return 0
    cdef tuple d = _dim(value, argname)
    out.x, out.y, out.z = d
    return 0


@cython.final
cdef class Module:
    """Code loaded with the CUDA library API (``cudaLibraryLoadData``).

    Build one with ``Module.from_ptx``, ``from_cubin``, ``from_fatbin`` or
    ``from_file``; the library is loaded into every device lazily.
    """

    def __cinit__(self):
        self._closed = True

    @staticmethod
    def from_ptx(text):
        """Load PTX source (``str`` or ``bytes``), compiled by the driver."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, bytes):
            raise TypeError(f"text must be str or bytes of PTX, not {type(text).__name__}")
        if b".entry" not in text and b".func" not in text:
            raise ValueError("text does not look like PTX (no .entry or .func)")
        return _load_module_image(text + b"\0")

    @staticmethod
    def from_cubin(data):
        """Load a cubin (ELF) image."""
        data = _as_image(data, "data")
        if not data.startswith(b"\x7fELF"):
            raise ValueError("data is not a cubin (no ELF header)")
        return _load_module_image(data)

    @staticmethod
    def from_fatbin(data):
        """Load a fatbin image (as made by nvcc --fatbin)."""
        return _load_module_image(_as_image(data, "data"))

    @staticmethod
    def from_file(path):
        """Load a .ptx, .cubin or .fatbin file."""
        cdef Module m = Module.__new__(Module)
        cdef cudaLibrary_t lib = NULL
        cdef bytes fname = _os.fsencode(path)
        cdef const char* c_name = fname
        if not _os.path.isfile(path):
            raise FileNotFoundError(f"no such module file: {path!r}")
        guard()
        _require_device()
        with nogil:
            check(cudaLibraryLoadFromFile(&lib, c_name, NULL, NULL, 0, NULL, NULL, 0))
            streams_dbg_count(STREAMS_DBG_MODULE_LOAD)
        m._handle = <void*>lib
        m._closed = False
        return m

    def get_kernel(self, name, signature=None):
        """The kernel ``name`` (an ``extern "C"`` or mangled entry name).

        ``signature`` lists the C type of each parameter ("int32", "float32",
        "pointer", ...), so plain Python ints and floats can be passed.
        """
        cdef Kernel k = Kernel.__new__(Kernel)
        cdef cudaKernel_t handle = NULL
        cdef cudaFuncAttributes attrs
        cdef bytes bname
        cdef const char* c_name
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        self._check_open()
        if signature is not None:
            if isinstance(signature, str):
                signature = tuple(s.strip() for s in signature.split(","))
            signature = tuple(signature)
            if len(signature) > _MAX_KERNEL_ARGS:
                raise ValueError(f"signature has more than {_MAX_KERNEL_ARGS} parameters")
            for i, t in enumerate(signature):
                if t not in _ARG_TYPE_NAMES:
                    raise ValueError(f"signature[{i}]: unknown C type {t!r}; use one of "
                                     f"{sorted(set(_ARG_TYPE_LABEL.values()))}")
                k._kinds[i] = _ARG_TYPE_NAMES[t]
            k._nargs = len(signature)
            k._signature = signature
            k._signature_names = tuple(_ARG_TYPE_LABEL[_ARG_TYPE_NAMES[t]] for t in signature)
        bname = name.encode("utf-8")
        c_name = bname
        guard()
        with nogil:
            check(cudaLibraryGetKernel(&handle, <cudaLibrary_t>self._handle, c_name))
            # Load it into the current device now: CUDA loads kernels lazily,
            # and a first launch that has to load waits for the work already
            # running on the device (a surprise synchronization in a hot loop).
            check(cudaFuncGetAttributes(&attrs, <const void*>handle))
        k._func = <void*>handle
        k._module = self
        k._name = name
        return k

    cdef int _check_open(self) except -1:
        if self._closed:
            raise ValueError("operation on a closed Module")
        return 0

    def close(self):
        """Unload (kernels from it must not be launched afterwards).  Idempotent."""
        if self._closed:
            return
        self._closed = True
        with nogil:
            streams_dbg_count(STREAMS_DBG_MODULE_UNLOAD)
            check(cudaLibraryUnload(<cudaLibrary_t>self._handle))

    def __dealloc__(self):
        if not self._closed and _dealloc_may_call_cuda():
            with nogil:
                streams_dbg_count(STREAMS_DBG_MODULE_UNLOAD)
                cudaLibraryUnload(<cudaLibrary_t>self._handle)


cdef Module _load_module_image(bytes image):
    cdef Module m = Module.__new__(Module)
    cdef cudaLibrary_t lib = NULL
    cdef const char* data = image
    guard()
    _require_device()
    with nogil:
        check(cudaLibraryLoadData(&lib, <const void*>data, NULL, NULL, 0, NULL, NULL, 0))
        streams_dbg_count(STREAMS_DBG_MODULE_LOAD)
    m._handle = <void*>lib
    m._image = image  # the driver may read it again when loading lazily
    m._closed = False
    return m


cdef bytes _as_image(object data, str argname):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{argname} must be bytes, not {type(data).__name__}")


cdef cudaFuncAttributes _kernel_attributes(Kernel k) except *:
    cdef cudaFuncAttributes attrs
    k._module._check_open()
    with nogil:
        check(cudaFuncGetAttributes(&attrs, <const void*>k._func))
    return attrs


@cython.final
cdef class Kernel:
    """A kernel of a Module; launch it with ``Stream.launch`` or ``prepare``."""

    @property
    def name(self):
        return self._name

    @property
    def signature(self):
        return self._signature_names

    @property
    def handle(self):
        return <uintptr_t>self._func

    @property
    def max_threads_per_block(self):
        return _kernel_attributes(self).maxThreadsPerBlock

    @property
    def num_regs(self):
        return _kernel_attributes(self).numRegs

    @property
    def shared_size_bytes(self):
        """Static shared memory per block."""
        return _kernel_attributes(self).sharedSizeBytes

    @property
    def local_size_bytes(self):
        return _kernel_attributes(self).localSizeBytes

    @property
    def const_size_bytes(self):
        return _kernel_attributes(self).constSizeBytes

    @property
    def max_dynamic_shared_size_bytes(self):
        return _kernel_attributes(self).maxDynamicSharedSizeBytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, int value):
        if value < 0:
            raise ValueError(f"max_dynamic_shared_size_bytes must be >= 0, got {value}")
        self._module._check_open()
        with nogil:
            check(cudaFuncSetAttribute(<const void*>self._func,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, value))

    def prepare(self, grid, block, *args, shared_mem=0):
        """Pack the launch once; ``PreparedLaunch.launch(stream)`` is then one C call."""
        cdef PreparedLaunch p = PreparedLaunch.__new__(PreparedLaunch)
        cdef _ArgPack pack
        cdef dim3 g, b
        cdef Py_ssize_t i, n
        if shared_mem < 0:
            raise ValueError(f"shared_mem must be >= 0, got {shared_mem}")
        _dims3(grid, &g, "grid")
        _dims3(block, &b, "block")
        _pack_args(self, args, &pack)
        p._grid[0], p._grid[1], p._grid[2] = g.x, g.y, g.z
        p._block[0], p._block[1], p._block[2] = b.x, b.y, b.z
        n = len(args)
        for i in range(n):
            p._slots[i] = pack.slots[i]
            p._ptrs[i] = &p._slots[i]
        p._nargs = n
        p._kernel = self
        p._keepalive = args   # buffers passed as pointers stay alive with it
        p._shared_mem = shared_mem
        return p

    def __repr__(self):
        return f"<streams.Kernel {self._name!r}>"


@cython.final
cdef class PreparedLaunch:
    """A kernel launch with its configuration and arguments packed once."""

    cdef int c_launch(self, Stream stream) except -1 nogil:
        cdef dim3 g, b
        guard()
        stream._check_open()
        g.x, g.y, g.z = self._grid[0], self._grid[1], self._grid[2]
        b.x, b.y, b.z = self._block[0], self._block[1], self._block[2]
        return check(cudaLaunchKernel(<const void*>self._kernel._func, g, b,
                                      self._ptrs if self._nargs else NULL,
                                      self._shared_mem, <cudaStream_t>stream._handle))

    def launch(self, stream=None):
        """Enqueue the launch on ``stream`` (default: the current stream)."""
        cdef Stream s = _as_stream(stream, "stream")
        with nogil:
            self.c_launch(s)

    @property
    def kernel(self):
        return self._kernel


cdef int _stream_launch(Stream stream, object kernel, object grid, object block, tuple args,
                        size_t shared_mem) except -1:
    cdef _ArgPack pack
    cdef dim3 g, b
    cdef Kernel k
    cdef Py_ssize_t n = len(args)
    cdef cudaError_t err
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
    k = <Kernel>kernel
    _dims3(grid, &g, "grid")
    _dims3(block, &b, "block")
    _pack_args(k, args, &pack)
    guard()
    stream._check_open()
    with nogil:
        err = cudaLaunchKernel(<const void*>k._func, g, b, pack.ptrs if n else NULL,
                               shared_mem, <cudaStream_t>stream._handle)
    return check(err)


cdef int _stream_launch_ex(Stream stream, object kernel, object grid, object block, tuple args,
                           size_t shared_mem, object cluster, bint cooperative) except -1:
    cdef _ArgPack pack
    cdef cudaLaunchConfig_t config
    cdef cudaLaunchAttribute attrs[2]
    cdef dim3 cl
    cdef Kernel k
    cdef unsigned int nattrs = 0
    cdef Py_ssize_t n = len(args)
    cdef cudaError_t err
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
    k = <Kernel>kernel
    _dims3(grid, &config.gridDim, "grid")
    _dims3(block, &config.blockDim, "block")
    _pack_args(k, args, &pack)
    if cluster is not None:
        _dims3(cluster, &cl, "cluster")
        attrs[nattrs].id = cudaLaunchAttributeClusterDimension
        attrs[nattrs].val.clusterDim.x = cl.x
        attrs[nattrs].val.clusterDim.y = cl.y
        attrs[nattrs].val.clusterDim.z = cl.z
        nattrs += 1
    if cooperative:
        attrs[nattrs].id = cudaLaunchAttributeCooperative
        attrs[nattrs].val.cooperative = 1
        nattrs += 1
    config.dynamicSmemBytes = shared_mem
    config.attrs = attrs
    config.numAttrs = nattrs
    guard()
    stream._check_open()
    config.stream = <cudaStream_t>stream._handle
    with nogil:
        err = cudaLaunchKernelExC(&config, <const void*>k._func, pack.ptrs if n else NULL)
    return check(err)
