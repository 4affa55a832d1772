# cython: language_level=3
"""Modules and kernels: load PTX/cubin/fatbin with the library API (no nvcc,
no context juggling), look kernels up, and launch them.

Arguments are packed into fixed 8-byte slots: every CUDA kernel parameter
of a scalar or pointer type fits, and each value is written with its own C
type at the start of its slot, so the kernel reads exactly the bytes it
expects.  Every launch is checked against the parameter layout CUDA reports
for the kernel (count and sizes), so that a wrong argument list is an error
instead of a kernel reading stack garbage.

The private hooks of the tests (the built-in kernels' launches behind
``streams.testing`` among them) are included last (``_launch/_testing.pxi``).
"""
import os as _os
import threading as _threading
import weakref as _weakref

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsUnsignedLongLong
from cpython.ref cimport Py_DECREF
from libc.limits cimport LLONG_MIN
from libc.stdint cimport uintptr_t
from libc.string cimport memset

cimport streams._cudart as rt
cimport streams._nvtx as nvtx
from streams._args cimport as_bool, as_dim3, as_int, as_nbytes, as_uint
from streams._device cimport DeviceScope, enter_device, exit_device, require_device
from streams._foreign cimport foreign_code_handle
from streams._memory cimport (SPAN_DEVICE, SPAN_NO_WAIT, SPAN_NULL_OK, Span, init_span,
                              release_span, resolve_span)
from streams._handle cimport HandleOwner, keep_in_use
from streams._platform cimport streams_flag_get, streams_flag_set, streams_mark_bit
from streams._stream cimport Event, LaunchTarget, Stream, as_stream
from streams.cudart cimport *

from streams._cudart import CudaError
from streams._cudart import runtime_version as rt_runtime_version

# streams.nvtx.trace_calls: the switch of the ranges around this module's
# traced operations (one load and one branch while off;
# tests/nvtx/test_nvtx_cpu.py, the per-call ranges).
cdef const int* _tracing = nvtx.trace_switch()
# streams.checker: the race checker's switch (one load and one branch while
# off); its hooks run after the launch was enqueued.
cdef const int* _checking = nvtx.check_switch()


cdef enum _ArgType:
    _T_I8, _T_I16, _T_I32, _T_I64, _T_U8, _T_U16, _T_U32, _T_U64, _T_F32, _T_F64, _T_PTR, _T_COND

_ARG_TYPE_NAMES = {
    "int8": _T_I8, "int16": _T_I16, "int32": _T_I32, "int64": _T_I64,
    "uint8": _T_U8, "uint16": _T_U16, "uint32": _T_U32, "uint64": _T_U64,
    "float32": _T_F32, "float64": _T_F64, "pointer": _T_PTR, "condition": _T_COND,
    # C spellings
    "char": _T_I8, "short": _T_I16, "int": _T_I32, "long long": _T_I64,
    "unsigned char": _T_U8, "unsigned short": _T_U16, "unsigned int": _T_U32,
    "unsigned long long": _T_U64, "float": _T_F32, "double": _T_F64,
    "ptr": _T_PTR, "void*": _T_PTR, "size_t": _T_U64,
    "cudaGraphConditionalHandle": _T_COND,
}
_ARG_TYPE_LABEL = {_T_I8: "int8", _T_I16: "int16", _T_I32: "int32", _T_I64: "int64",
                   _T_U8: "uint8", _T_U16: "uint16", _T_U32: "uint32", _T_U64: "uint64",
                   _T_F32: "float32", _T_F64: "float64", _T_PTR: "pointer",
                   _T_COND: "condition"}
cdef int _SIZE_OF[12]
_SIZE_OF[:] = [1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 8, 8]
# Each integer type's range, in C, and each argument's name, made once:
# Python-level lookups per argument would dominate the packing of a
# launch's arguments (the kernel_launch_args16 row of benchmarks/ops.py
# measures it).
cdef long long _INT_LO[8]
cdef unsigned long long _INT_HI[8]
_INT_LO[:] = [-(1 << 7), -(1 << 15), -(1 << 31), LLONG_MIN, 0, 0, 0, 0]
_INT_HI[:] = [(1 << 7) - 1, (1 << 15) - 1, (1 << 31) - 1, (1 << 63) - 1,
              (1 << 8) - 1, (1 << 16) - 1, (1 << 32) - 1, (1 << 64) - 1]
cdef tuple _ARG_NAMES = tuple([f"argument {i}" for i in range(MAX_KERNEL_ARGS)])

# ---- conditions ------------------------------------------------------------------------

# A condition is a kernel argument (a 64-bit cudaGraphConditionalHandle): the
# packer below knows its class; Graph.create_condition makes them (_graph).

@cython.final
cdef class ConditionHandle:
    """The value a conditional node tests (``cudaGraphConditionalHandle``),
    from ``Graph.create_condition()``.

    Pass it to a kernel (its parameter a ``cudaGraphConditionalHandle``, or
    "condition" in a signature) that calls ``cudaGraphSetConditional``, such
    as the built-in "set_condition" and "set_condition_lt" kernels.  It is
    valid in the graph that made it, its conditional bodies, and their
    executables; ``int(handle)`` is the raw value.
    """
    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Graph.create_condition()")

    def __index__(self):
        return self._value

    def __int__(self):
        return self._value

    @property
    def handle(self):
        return self._value

    @property
    def graph(self):
        """The Graph that made it (None once that object is gone)."""
        return self._graph_ref() if self._graph_ref is not None else None

    @property
    def default(self):
        return self._default

    @property
    def reset(self):
        """Whether every launch starts with the value set to ``default``;
        if not, a launch reads the value the previous launch of the same
        executable left."""
        return self._reset

    def __repr__(self):
        return (f"<streams.ConditionHandle 0x{self._value:x} default={self._default} "
                f"reset={self._reset}>")




# ---- argument packing ---------------------------------------------------------------------

cdef int _store_arg(ArgPack* pack, Py_ssize_t i, int kind, object value,
                    Stream consumer, int span_flags, str argname) except -1:
    cdef void* slot = &pack.slots[i]
    cdef Span span
    cdef double d
    pack.ptrs[i] = slot
    pack.slots[i] = 0
    if kind == _T_PTR:
        resolve_span(value, &span, SPAN_DEVICE | SPAN_NULL_OK | span_flags, consumer, argname)
        (<uintptr_t*>slot)[0] = <uintptr_t>span.ptr
        if span.user != NULL:
            # Held in use until the launch is enqueued (or the prepared
            # launch is gone): a close() meanwhile frees afterwards.
            pack.users[pack.nusers] = span.user
            pack.nusers += 1
        return 0
    if kind == _T_COND:
        if not isinstance(value, ConditionHandle):
            raise TypeError(f"{argname} must be a streams.ConditionHandle (a "
                            f"cudaGraphConditionalHandle parameter), not {type(value).__name__}")
        (<unsigned long long*>slot)[0] = (<ConditionHandle>value)._value
        return 0
    if kind == _T_F32 or kind == _T_F64:
        if type(value) is float:
            d = PyFloat_AS_DOUBLE(value)
        elif isinstance(value, bool) or not hasattr(value, "__float__"):
            raise TypeError(f"{argname} must be a number ({_ARG_TYPE_LABEL[kind]}), not "
                            f"{type(value).__name__}")
        else:
            d = float(value)
        if kind == _T_F32:
            (<float*>slot)[0] = <float>d
        else:
            (<double*>slot)[0] = d
        return 0
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{argname} must be an integer ({_ARG_TYPE_LABEL[kind]}), not "
                            f"{type(value).__name__}")
        value = value.__index__()
        if type(value) is not int:      # an int subclass: the plain int it stands for
            value = int(value)
    return _store_int(slot, kind, value, argname)


cdef int _store_int(void* slot, int kind, object value, str argname) except -1:
    """Write ``value`` with the C type of ``kind`` at ``slot``; a value out of
    that type's range is a ValueError, never truncated."""
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    cdef unsigned long long u
    if overflow == 0:
        if v < _INT_LO[kind] or (v > 0 and <unsigned long long>v > _INT_HI[kind]):
            return _out_of_range(kind, value, argname)
        u = <unsigned long long>v
    elif overflow > 0 and kind == _T_U64:
        try:
            u = PyLong_AsUnsignedLongLong(value)
        except OverflowError:
            return _out_of_range(kind, value, argname)
    else:
        return _out_of_range(kind, value, argname)
    if kind == _T_I8:
        (<signed char*>slot)[0] = <signed char>v
    elif kind == _T_I16:
        (<short*>slot)[0] = <short>v
    elif kind == _T_I32:
        (<int*>slot)[0] = <int>v
    elif kind == _T_I64:
        (<long long*>slot)[0] = v
    elif kind == _T_U8:
        (<unsigned char*>slot)[0] = <unsigned char>u
    elif kind == _T_U16:
        (<unsigned short*>slot)[0] = <unsigned short>u
    elif kind == _T_U32:
        (<unsigned int*>slot)[0] = <unsigned int>u
    else:
        (<unsigned long long*>slot)[0] = u
    return 0


cdef int _out_of_range(int kind, object value, str argname) except -1:
    raise ValueError(f"{argname}: {value} does not fit {_ARG_TYPE_LABEL[kind]}")


cdef int _infer_kind(object value, str argname) except -1:
    """Type of an argument when the kernel has no signature: numpy scalars
    say what they are, memory is a pointer; a bare int or float is ambiguous."""
    if isinstance(value, ConditionHandle):
        return _T_COND
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "ndim", 1) == 0:
        kind = _ARG_TYPE_NAMES.get(str(dtype))
        if kind is not None:
            return kind
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise TypeError(f"{argname}: a Python {type(value).__name__} is ambiguous for a "
                        "kernel without a signature; pass a numpy scalar (numpy.int32(...)) "
                        "or declare signature= in get_kernel()")
    return _T_PTR


cdef int pack_args(Kernel kernel, tuple args, ArgPack* pack, Stream consumer,
                   int span_flags=0) except -1:
    cdef Py_ssize_t n = len(args), i
    cdef int kind
    pack.nusers = 0
    if n > MAX_KERNEL_ARGS:
        raise TypeError(f"too many kernel arguments ({n} > {MAX_KERNEL_ARGS})")
    if kernel._nparams >= 0 and n != kernel._nparams:
        raise TypeError(f"kernel {kernel._name!r} takes {kernel._nparams} argument(s)"
                        + (f" {kernel._signature_names}" if kernel._nsig >= 0 else "")
                        + f", got {n}")
    if kernel._nsig >= 0 and n != kernel._nsig:
        raise TypeError(f"kernel {kernel._name!r} takes {kernel._nsig} argument(s) "
                        f"{kernel._signature_names}, got {n}")
    if kernel._nsig < 0 and kernel._nparams < 0:
        raise TypeError(f"kernel {kernel._name!r} has no signature, and this CUDA runtime "
                        "cannot report its parameters: pass signature= to get_kernel()")
    try:
        for i in range(n):
            if kernel._nsig >= 0:
                kind = kernel._kinds[i]
            else:
                kind = _infer_kind(args[i], <str>_ARG_NAMES[i])
                if _SIZE_OF[kind] != kernel._param_size[i]:
                    raise TypeError(
                        f"argument {i} of kernel {kernel._name!r}: a {_ARG_TYPE_LABEL[kind]} "
                        f"({_SIZE_OF[kind]} bytes) for a {kernel._param_size[i]}-byte "
                        "parameter")
            _store_arg(pack, i, kind, args[i], consumer, span_flags, <str>_ARG_NAMES[i])
    except BaseException:
        release_pack(pack)
        raise
    return 0


cdef int pack_arg(ArgPack* pack, Py_ssize_t i, int kind, object value, str argname) except -1:
    # pack_args' packer for one value: graph kernel-node argument changes
    # take it, so that a pointer is checked as every launch checks it.
    if kind < 0:
        kind = _infer_kind(value, argname)
    _store_arg(pack, i, kind, value, None, 0, argname)
    return kind


cdef int arg_kind(object name) except -2:
    if not isinstance(name, str):
        return -1
    return _ARG_TYPE_NAMES.get(name.strip(), -1)


cdef int arg_size(int kind) noexcept:
    return _SIZE_OF[kind]


cdef bint arg_is_pointer(int kind) noexcept:
    return kind == _T_PTR


cdef bint arg_is_condition(int kind) noexcept:
    return kind == _T_COND


cdef void release_pack(ArgPack* pack) noexcept:
    cdef Span span
    cdef int i
    init_span(&span)
    for i in range(pack.nusers):
        span.user = pack.users[i]
        release_span(&span)
    pack.nusers = 0


# ---- modules --------------------------------------------------------------------------------

# no_gc_clear: an adopted kernel's stand-in module lets its owner go in
# __dealloc__, once the work launched with the kernel is done; the GC must
# not drop the owner first ("Reference cycles" in docs/architecture.rst).
@cython.final
@cython.no_gc_clear
cdef class Module(HandleOwner):
    """Code loaded with the CUDA library API (``cudaLibraryLoadData``).

    Build one with ``Module.from_ptx``, ``from_cubin``, ``from_fatbin`` or
    ``from_file``; the library is loaded into every device lazily.
    ``close()`` unloads it once the work of its kernels is done (it waits
    for the devices they ran on) and the graphs and prepared launches that
    hold them are gone.
    """

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Module.from_ptx, from_cubin, from_fatbin or "
                                     "from_file")

    @staticmethod
    def from_ptx(text):
        """Load PTX source (``str`` or ``bytes``), compiled by the driver."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, bytes):
            raise TypeError(f"text must be str or bytes of PTX, not {type(text).__name__}")
        if b".entry" not in text and b".func" not in text:
            raise ValueError("text does not look like PTX (no .entry or .func)")
        return _load_image(text + b"\0", False)

    @staticmethod
    def from_cubin(data):
        """Load a cubin (ELF) image."""
        data = _as_image(data, "data")
        if not data.startswith(b"\x7fELF"):
            raise ValueError("data is not a cubin (no ELF header)")
        return _load_image(data, False)

    @staticmethod
    def from_fatbin(data):
        """Load a fatbin image (as made by nvcc --fatbin)."""
        data = _as_image(data, "data")
        # A fatbin starts with its magic, 0xBA55ED50 (little-endian);
        # anything else would be read as one by the driver.
        if not data.startswith(b"\x50\xed\x55\xba"):
            raise ValueError("data is not a fatbin (no fatbin header)")
        return _load_image(data, False)

    @staticmethod
    def from_file(path):
        """Load a .ptx, .cubin or .fatbin file."""
        cdef Module m
        cdef cudaLibrary_t lib = NULL
        cdef bytes fname = _os.fsencode(path)
        cdef const char* c_name = fname
        if not _os.path.isfile(path):
            raise FileNotFoundError(f"no such module file: {path!r}")
        require_device()
        rt.drain_deferred()
        with nogil:
            rt.library_load_from_file(&lib, c_name)
        m = Module.__new__(Module)
        m._handle = <void*>lib
        m._opened(True)
        return m

    @staticmethod
    def from_source(source, options=(), name_expressions=(), arch=None):
        """Compile CUDA C++ ``source`` with NVRTC and load it.

        ``options`` are NVRTC's (``"-std=c++17"``, ``"-DN=4"``, ...);
        ``name_expressions`` name template instances (``"add<float>"``) that
        ``get_kernel`` then finds by that name.  ``arch``: ``"sm_XY"``
        (a cubin) or ``"compute_XY"`` (PTX, compiled by the driver);
        default: the current device's ``sm_XY``.  NVRTC is loaded at first
        use: ``STREAMS_NVRTC`` (a path), the ``nvidia-cuda-nvrtc`` wheel
        (``pip install "nvidia-cuda-nvrtc==13.*"``), the toolkit's (``CUDA_HOME``,
        ``/usr/local/cuda``) or the system's ``libnvrtc.so``; none found is
        a RuntimeError.  A failed compilation raises ``CompileError``
        carrying NVRTC's log.  Compilations are cached in memory by
        (source, options, arch, name_expressions): the same call again loads
        the cached image without compiling (``Module.source_cache_info()``).
        """
        cdef Module m
        image, ptx, lowered = _compile_cached(source, options, name_expressions, arch)
        m = _load_image(image, False)
        m._lowered = lowered
        return m

    @staticmethod
    def source_cache_info():
        """``{"hits", "misses", "entries"}`` of ``from_source``'s cache."""
        with _source_cache_lock:
            return {"hits": _source_cache_stats[0], "misses": _source_cache_stats[1],
                    "entries": len(_source_cache)}

    @staticmethod
    def clear_source_cache():
        """Forget every compilation ``from_source`` cached."""
        with _source_cache_lock:
            _source_cache.clear()

    def get_kernel(self, name, signature=None):
        """The kernel ``name`` (an ``extern "C"`` or mangled entry name).

        ``signature`` lists the C type of each parameter ("int32", "float32",
        "pointer", ...), so plain Python ints and floats can be passed; it
        must agree with the parameters CUDA reports for the kernel.
        """
        cdef Kernel k = Kernel.__new__(Kernel)
        cdef cudaKernel_t handle = NULL
        cdef cudaFuncAttributes attrs
        cdef bytes bname
        cdef const char* c_name
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        _set_signature(k, signature)
        bname = (self._lowered.get(name, name) if self._lowered else name).encode("utf-8")
        c_name = bname
        self._use()
        try:
            with nogil:
                rt.library_get_kernel(&handle, <cudaLibrary_t>self._handle, c_name)
                # Load it into the current device now: CUDA loads kernels
                # lazily, and a first launch that has to load waits for the
                # work already running on the device (a surprise
                # synchronization in a hot loop).
                rt.func_get_attributes(&attrs, <const void*>handle)
        finally:
            self._unuse()
        k._func = <void*>handle
        k._module = self
        k._name = name
        _read_parameters(k)
        with _kernels_lock:
            _kernels_by_handle[<uintptr_t>handle] = k
        return k

    # ---- the handle's life (HandleOwner) -----------------------------------
    cdef int _destroy(self) except -1 nogil:
        if self._handle == NULL:
            return 0        # an adopted kernel's stand-in: nothing of ours to unload
        return rt.library_unload(<cudaLibrary_t>self._handle, self._devices)

    cdef void _release(self) noexcept nogil:
        if self._handle != NULL:
            rt.release_library(<cudaLibrary_t>self._handle, self._devices)

    def __dealloc__(self):
        # An adopted kernel's owner may unload the code when it goes: it
        # goes once the work launched with the kernel has finished (the
        # devices it ran on synchronized, as close() does for a library).
        # Inside a host callback CUDA cannot be called: the owner is held
        # by the deferred queue until a safe thread synchronizes.
        cdef unsigned long long devices = self._devices
        cdef int decision
        if self._owner is None or devices == 0:
            return
        decision = rt.release_decision()
        if decision == rt.RELEASE_DEFER:
            rt.defer_release(_sync_owner_devices, <void*><uintptr_t>devices, self._owner)
        elif decision == rt.RELEASE_NOW:
            with nogil:
                rt.sync_devices_quietly(devices)
            rt.flush_cleanup_warnings()

    @property
    def handle(self):
        """The ``cudaLibrary_t`` as an int."""
        self._check_open()
        return <uintptr_t>self._handle

    def close(self):
        """Unload, once the kernels launched from it have finished.  Idempotent.

        Kernels of a closed module can no longer be launched; graphs and
        prepared launches that hold them keep it loaded until they go.
        """
        self._close_handle()

    def __repr__(self):
        state = " (closed)" if self.closed else ""
        return f"<streams.Module 0x{<uintptr_t>self._handle:x}{state}>"


cdef str _handle_kind(object handle):
    """"kernel" or "function" from the type of a cuda-bindings handle
    object; ValueError for anything that does not say."""
    name = type(handle).__name__
    if name in ("CUkernel", "cudaKernel_t"):
        return "kernel"
    if name in ("CUfunction", "cudaFunction_t"):
        return "function"
    raise ValueError(f"kind= is needed for a handle given as {name}: 'kernel' for a CUkernel "
                     "or cudaKernel_t (cuLibraryGetKernel, cuda.core), 'function' for a "
                     "CUfunction (cuModuleGetFunction: CuPy, Numba, Triton); CUDA cannot "
                     "tell them apart safely")


cdef int _set_signature(Kernel k, object signature) except -1:
    """Parse ``signature`` (None, a comma-separated str, or a sequence of C
    type names) into the kernel's kinds; ValueError/TypeError naming it."""
    k._nsig = -1
    if signature is None:
        return 0
    if isinstance(signature, str):
        signature = tuple(s.strip() for s in signature.split(",")) if signature.strip() \
            else ()
    try:
        signature = tuple(signature)
    except TypeError:
        raise TypeError(f"signature must be a sequence of C type names, not "
                        f"{type(signature).__name__}") from None
    if len(signature) > MAX_KERNEL_ARGS:
        raise ValueError(f"signature has more than {MAX_KERNEL_ARGS} parameters")
    for i, t in enumerate(signature):
        if not isinstance(t, str) or t not in _ARG_TYPE_NAMES:
            raise ValueError(f"signature[{i}]: unknown C type {t!r}; use one of "
                             f"{sorted(set(_ARG_TYPE_LABEL.values()))}")
        k._kinds[i] = _ARG_TYPE_NAMES[t]
    k._nsig = len(signature)
    k._signature_names = tuple(_ARG_TYPE_LABEL[_ARG_TYPE_NAMES[t]] for t in signature)
    return 0


cdef void _sync_owner_devices(void* arg, int kind) noexcept nogil:
    rt.sync_devices_quietly(<unsigned long long><uintptr_t>arg)


cdef Module _load_image(bytes image, bint resident):
    cdef Module m
    cdef cudaLibrary_t lib = NULL
    cdef const char* data = image
    require_device()
    rt.drain_deferred()
    with nogil:
        rt.library_load_data(&lib, <const void*>data, resident)
    m = Module.__new__(Module)
    m._handle = <void*>lib
    m._image = image
    m._opened(True)
    return m


cdef bytes _as_image(object data, str argname):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{argname} must be bytes, not {type(data).__name__}")


cdef int _read_parameters(Kernel k, bint any_sizes=False) except -1:
    """How many parameters the kernel takes and their sizes, from CUDA.
    ``any_sizes``: keep a kernel with parameters of other sizes than a
    scalar's or a pointer's (a struct): each launch then refuses an argument
    for one (pack_args checks every size), but its name and attributes can
    be read."""
    cdef size_t offset = 0, size = 0, i
    cdef int r
    k._nparams = -1
    for i in range(<size_t>MAX_KERNEL_ARGS + 1):
        with nogil:
            if k._adopted == ADOPTED_FUNCTION:
                r = rt.function_get_param_info(k._func, i, &offset, &size)
            else:
                r = rt.func_get_param_info(k._func, i, &offset, &size)
        if r == 2:
            return 0    # this runtime cannot tell: signatures are the only check
        if r == 1:
            k._nparams = <int>i
            break
        if i == MAX_KERNEL_ARGS:
            raise ValueError(f"kernel {k._name!r} has more than {MAX_KERNEL_ARGS} parameters")
        k._param_size[i] = <unsigned short>size
    if k._nsig >= 0:
        if k._nsig != k._nparams:
            raise ValueError(f"signature of kernel {k._name!r} names {k._nsig} parameter(s), "
                             f"but the kernel takes {k._nparams}")
        for i in range(<size_t>k._nparams):    # set above: 0 or more
            if _SIZE_OF[k._kinds[i]] != k._param_size[i]:
                raise ValueError(
                    f"signature[{i}] of kernel {k._name!r} is {k._signature_names[i]} "
                    f"({_SIZE_OF[k._kinds[i]]} bytes), but the parameter takes "
                    f"{k._param_size[i]} bytes")
    elif not any_sizes:
        for i in range(<size_t>k._nparams):    # set above: 0 or more
            if k._param_size[i] not in (1, 2, 4, 8):
                raise ValueError(f"kernel {k._name!r}: parameter {i} is a "
                                 f"{k._param_size[i]}-byte value; streams passes scalars and "
                                 "pointers (1, 2, 4 or 8 bytes)")
    return 0


# ---- extended launches ------------------------------------------------------------------------

_MEM_SYNC_DOMAINS = {"default": 0, "remote": 1}


cdef Event _launch_event(object event, str argname):
    if event is None:
        return None
    if not isinstance(event, Event):
        raise TypeError(f"{argname} must be a streams.Event, not {type(event).__name__}")
    if (<Event>event)._flags & cudaEventDisableTiming == 0:
        raise ValueError(f"{argname} must be created with enable_timing=False (CUDA requires "
                         "it for launch events)")
    if (<Event>event)._flags & cudaEventInterprocess:
        raise ValueError(f"{argname} must not be an interprocess event")
    (<Event>event)._check_open()
    return <Event>event


@cython.final
cdef class LaunchConfig:
    """LaunchConfig(grid, block, shared_mem=0, *, cluster=None, cooperative=False, programmatic_stream_serialization=False, programmatic_event=None, trigger_at_block_start=False, completion_event=None, priority=None, mem_sync_domain=None)

    How a kernel is launched by ``Stream.launch_ex`` and ``Kernel.prepare``
    (``cudaLaunchKernelExC`` with ``cudaLaunchAttribute`` entries).

    ``grid`` and ``block`` (ints or up to 3-tuples) and ``shared_mem``
    (dynamic shared memory in bytes) as for ``Stream.launch``, and:

    - ``cluster``: thread-block cluster dimensions (the grid must be a
      multiple);
    - ``cooperative``: a cooperative launch (grid-wide sync; all blocks
      resident at once);
    - ``programmatic_stream_serialization``: programmatic dependent launch
      (PDL): this kernel may start before the kernel before it on the
      stream has finished, once that one's blocks have all triggered
      (``griddepcontrol.launch_dependents``) or exited; it must wait
      (``griddepcontrol.wait``) before reading what that one writes;
    - ``programmatic_event`` (an ``Event``, timing off): recorded when every
      block of this kernel has triggered (or, with
      ``trigger_at_block_start``, has started); another stream waiting on it
      may then start a dependent kernel programmatically;
    - ``completion_event`` (an ``Event``, timing off): recorded once every
      block of this kernel has started (not finished): the kernel may still
      be running when it completes;
    - ``priority``: the launch's priority, overriding the stream's;
    - ``mem_sync_domain``: "default" or "remote", the memory
      synchronization domain of the kernel's fences.

    Immutable; a prepared launch keeps its config and its events.
    """
    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, grid, block, shared_mem=0, *, cluster=None, cooperative=False,
                 programmatic_stream_serialization=False, programmatic_event=None,
                 trigger_at_block_start=False, completion_event=None, priority=None,
                 mem_sync_domain=None):
        cdef dim3 g, b, d
        cdef size_t smem
        cdef bint has_cluster, coop, pss, at_start, has_priority, taken
        cdef int prio = 0, domain
        cdef Event prog, done
        # Everything is read and checked first, into locals (argument
        # conversions may run Python code), then published at once under
        # the object's critical section: two threads initialising one
        # config never mix their fields (a flag of one with the event of
        # the other would make a launch read a missing event).
        if self._initialised_now():
            raise RuntimeError(_CONFIG_REINIT)
        as_dim3(grid, &g, "grid")
        as_dim3(block, &b, "block")
        smem = as_uint(shared_mem, "shared_mem")
        has_cluster = cluster is not None
        if has_cluster:
            as_dim3(cluster, &d, "cluster")
        coop = as_bool(cooperative, "cooperative")
        pss = as_bool(programmatic_stream_serialization, "programmatic_stream_serialization")
        at_start = as_bool(trigger_at_block_start, "trigger_at_block_start")
        prog = _launch_event(programmatic_event, "programmatic_event")
        if at_start and prog is None:
            raise ValueError("trigger_at_block_start needs a programmatic_event")
        done = _launch_event(completion_event, "completion_event")
        has_priority = priority is not None
        if has_priority:
            prio = as_int(priority, "priority")
        if mem_sync_domain is None:
            domain = -1
        elif isinstance(mem_sync_domain, str) and mem_sync_domain.lower() in _MEM_SYNC_DOMAINS:
            domain = _MEM_SYNC_DOMAINS[mem_sync_domain.lower()]
        else:
            raise ValueError(f"mem_sync_domain must be 'default', 'remote' or None, got "
                             f"{mem_sync_domain!r}")
        taken = False
        with cython.critical_section(self):
            # Immutable once initialised: a launch in another thread may be
            # reading its events.
            if not self._initialised_now():
                taken = True
                self._shared_mem = smem
                self._has_cluster = has_cluster
                if has_cluster:
                    self._cluster[0], self._cluster[1], self._cluster[2] = d.x, d.y, d.z
                self._cooperative = coop
                self._pss = pss
                self._trigger_at_block_start = at_start
                self._programmatic_event = prog
                self._has_programmatic_event = prog is not None
                self._completion_event = done
                self._has_completion_event = done is not None
                self._has_priority = has_priority
                self._priority = prio
                self._mem_sync_domain = domain
                self._block_dims[0], self._block_dims[1], self._block_dims[2] = b.x, b.y, b.z
                self._grid_dims[1], self._grid_dims[2] = g.y, g.z
                # Last, with a releasing store: a grid of 0 marks a config
                # never initialised, and a reader that sees it set
                # (_usable_config) sees every field above.
                streams_flag_set(<int*>&self._grid_dims[0], <int>g.x)
        if not taken:
            raise RuntimeError(_CONFIG_REINIT)

    cdef bint _initialised_now(self) noexcept nogil:
        return streams_flag_get(<int*>&self._grid_dims[0]) != 0

    @property
    def grid(self):
        return tuple(self._grid_dims)

    @property
    def block(self):
        return tuple(self._block_dims)

    @property
    def shared_mem(self):
        return self._shared_mem

    @property
    def cluster(self):
        if not self._has_cluster:
            return None
        return tuple(self._cluster)

    @property
    def cooperative(self):
        return self._cooperative

    @property
    def programmatic_stream_serialization(self):
        return self._pss

    @property
    def programmatic_event(self):
        return self._programmatic_event

    @property
    def trigger_at_block_start(self):
        return self._trigger_at_block_start

    @property
    def completion_event(self):
        return self._completion_event

    @property
    def priority(self):
        return self._priority if self._has_priority else None

    @property
    def mem_sync_domain(self):
        if self._mem_sync_domain < 0:
            return None
        return "remote" if self._mem_sync_domain == 1 else "default"

    def __repr__(self):
        parts = [f"grid={self.grid}", f"block={self.block}"]
        if self._shared_mem:
            parts.append(f"shared_mem={self._shared_mem}")
        for name in ("cluster", "cooperative", "programmatic_stream_serialization",
                     "programmatic_event", "trigger_at_block_start", "completion_event",
                     "priority", "mem_sync_domain"):
            value = getattr(self, name)
            if value is not None and value is not False:
                parts.append(f"{name}={value!r}")
        return f"LaunchConfig({', '.join(parts)})"


cdef str _CONFIG_REINIT = ("LaunchConfig.__init__ was called on a config that was already "
                          "initialised: make a new one instead")


cdef LaunchConfig _usable_config(object config):
    """``config`` as a LaunchConfig that __init__ completed, or TypeError/ValueError."""
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a streams.LaunchConfig, not {type(config).__name__}")
    if not (<LaunchConfig>config)._initialised_now():
        raise ValueError("this LaunchConfig was never initialised (make one with "
                         "LaunchConfig(grid, block, ...))")
    return <LaunchConfig>config


cdef int _launch_configured(Kernel k, Stream stream, LaunchConfig c,
                            void** args) except -1 nogil:
    # The events are held in use for the call (a close() elsewhere waits),
    # and their handles read now: a config outlives any one launch.
    cdef cudaLaunchConfig_t cfg
    cdef cudaLaunchAttribute attrs[7]
    cdef unsigned int n = 0
    cdef bint prog = c._has_programmatic_event
    cdef bint done = c._has_completion_event
    if c._has_cluster:
        attrs[n].id = cudaLaunchAttributeClusterDimension
        attrs[n].val.clusterDim.x = c._cluster[0]
        attrs[n].val.clusterDim.y = c._cluster[1]
        attrs[n].val.clusterDim.z = c._cluster[2]
        n += 1
    if c._cooperative:
        attrs[n].id = cudaLaunchAttributeCooperative
        attrs[n].val.cooperative = 1
        n += 1
    if c._pss:
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization
        attrs[n].val.programmaticStreamSerializationAllowed = 1
        n += 1
    if c._has_priority:
        attrs[n].id = cudaLaunchAttributePriority
        attrs[n].val.priority = c._priority
        n += 1
    if c._mem_sync_domain >= 0:
        attrs[n].id = cudaLaunchAttributeMemSyncDomain
        attrs[n].val.memSyncDomain = <cudaLaunchMemSyncDomain>c._mem_sync_domain
        n += 1
    cfg.gridDim.x, cfg.gridDim.y, cfg.gridDim.z = c._grid_dims[0], c._grid_dims[1], c._grid_dims[2]
    cfg.blockDim.x, cfg.blockDim.y, cfg.blockDim.z = (c._block_dims[0], c._block_dims[1],
                                                      c._block_dims[2])
    cfg.dynamicSmemBytes = c._shared_mem
    cfg.stream = <cudaStream_t>stream._handle
    cfg.attrs = attrs
    if prog:
        c._programmatic_event._use()
    try:
        if done:
            c._completion_event._use()
        try:
            if prog:
                attrs[n].id = cudaLaunchAttributeProgrammaticEvent
                attrs[n].val.programmaticEvent.event = <cudaEvent_t>c._programmatic_event._handle
                attrs[n].val.programmaticEvent.flags = 0
                attrs[n].val.programmaticEvent.triggerAtBlockStart = c._trigger_at_block_start
                n += 1
            if done:
                attrs[n].id = cudaLaunchAttributeLaunchCompletionEvent
                attrs[n].val.launchCompletionEvent.event = <cudaEvent_t>c._completion_event._handle
                attrs[n].val.launchCompletionEvent.flags = 0
                n += 1
            cfg.numAttrs = n
            _launch_packed(k, stream, cfg.gridDim, cfg.blockDim, args, c._shared_mem, &cfg)
            if prog:
                streams_flag_set(<int*>&c._programmatic_event._recorded, True)
            if done:
                streams_flag_set(<int*>&c._completion_event._recorded, True)
        finally:
            if done:
                c._completion_event._unuse()
    finally:
        if prog:
            c._programmatic_event._unuse()
    return 0


# ---- kernels --------------------------------------------------------------------------------

cdef cudaFuncAttributes _kernel_attributes(Kernel k) except *:
    cdef cudaFuncAttributes attrs
    k._check_usable()
    k._module._use()
    try:
        with nogil:
            if k._adopted == ADOPTED_FUNCTION:
                rt.function_get_attributes(&attrs, <const void*>k._func)
            else:
                rt.func_get_attributes(&attrs, <const void*>k._func)
    finally:
        k._module._unuse()
    return attrs


cdef int _launch_packed(Kernel k, Stream stream, dim3 grid, dim3 block, void** args,
                        size_t shared_mem, const cudaLaunchConfig_t* config) except -1 nogil:
    # Module and stream are in use for the call, so that another thread's
    # close() of either waits for it to leave.
    cdef DeviceScope scope
    cdef cudaLaunchConfig_t plain
    cdef int dev
    k._module._use()
    try:
        stream._use()
        try:
            dev = stream.c_device()
            enter_device(&scope, dev)
            try:
                if k._adopted == ADOPTED_FUNCTION:
                    # A CUfunction: the driver's launch (the runtime's would
                    # read it as a cudaKernel_t).
                    if config == NULL:
                        memset(&plain, 0, sizeof(plain))
                        plain.gridDim, plain.blockDim = grid, block
                        plain.dynamicSmemBytes = shared_mem
                        plain.stream = <cudaStream_t>stream._handle
                        config = &plain
                    rt.launch_function(config, <const void*>k._func, args)
                elif config == NULL:
                    rt.launch_kernel(<const void*>k._func, grid, block, args, shared_mem,
                                     <cudaStream_t>stream._handle)
                else:
                    rt.launch_kernel_ex(config, <const void*>k._func, args)
                streams_mark_bit(&k._module._devices, dev)
            finally:
                exit_device(&scope)
        finally:
            stream._unuse()
    finally:
        k._module._unuse()
    return 0


# The kernels of streams' Modules by handle (the latest Kernel got for
# each), so that a kernel node built or captured from one can give that
# same Kernel back (KernelNodeParams.kernel).  Weak: the registry keeps no
# kernel, and so no module, alive.
cdef object _kernels_by_handle = _weakref.WeakValueDictionary()
cdef object _kernels_lock = _threading.Lock()


cdef Kernel adopt_kernel(uintptr_t h, bint is_kernel, object owner, object signature,
                         bint any_sizes):
    """Kernel.from_handle once the handle and its kind are known (see
    there); ``any_sizes`` as for _read_parameters."""
    cdef Kernel k = Kernel.__new__(Kernel)
    cdef Module holder
    cdef cudaFuncAttributes attrs
    cdef const char* c_name = NULL
    cdef int named = 1
    kind = "kernel" if is_kernel else "function"
    _set_signature(k, signature)
    require_device()
    rt.drain_deferred()
    try:
        with nogil:
            if is_kernel:
                rt.func_get_attributes(&attrs, <const void*>h)
            else:
                rt.function_get_attributes(&attrs, <const void*>h)
    except CudaError as exc:
        raise ValueError(f"handle=0x{h:x} is not a live {kind} of this process "
                         f"({exc})") from exc
    with nogil:
        named = rt.func_get_name(<const void*>h, is_kernel, &c_name)
    holder = Module.__new__(Module)
    holder._owner = owner
    holder._opened(False)
    k._func = <void*>h
    k._module = holder
    k._name = (<bytes>c_name).decode("utf-8", "replace") if named == 0 else \
        f"{kind} 0x{h:x}"
    k._adopted = ADOPTED_KERNEL if is_kernel else ADOPTED_FUNCTION
    _read_parameters(k, any_sizes)
    return k


cdef bint _names_kernel(Kernel k, object name):
    # Whether `name` (what the driver calls a node's kernel) may be k's: its
    # name, or the lowered name of a name expression.
    if name is None or name == k._name:
        return True
    lowered = k._module._lowered
    return lowered is not None and lowered.get(k._name) == name


cdef Kernel find_node_kernel(void* func, void* kern, object name):
    """The Kernel of a streams Module that a kernel node names (its CUkernel,
    or its CUfunction in the current device's primary context), or None.
    Only a kernel whose module is open counts: a closed module's handles
    may have been given to other code since."""
    cdef Kernel k
    cdef void* f = NULL
    cdef int found
    with _kernels_lock:
        candidates = list(_kernels_by_handle.values())
    for k in candidates:
        if (kern != NULL and k._func == kern) or (func != NULL and k._func == func):
            if _names_kernel(k, name) and not k._module.closed:
                return k
    if func == NULL:
        return None
    for k in candidates:
        if not _names_kernel(k, name):
            continue
        try:
            k._module._use()
        except ValueError:
            continue        # closed since
        try:
            with nogil:
                found = rt.kernel_function(k._func, &f)
        finally:
            k._module._unuse()
        if found and f == func:
            return k
    return None


@cython.final
cdef class Kernel(LaunchTarget):
    """A kernel of a Module, or of another library (``Kernel.from_handle``);
    launch it with ``Stream.launch``, ``prepare`` or a graph kernel node."""

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Module.get_kernel() or Kernel.from_handle()")

    cdef int _check_usable(self) except -1:
        if self._module is None:
            raise ValueError("this Kernel was never initialised (use Module.get_kernel() or "
                             "Kernel.from_handle())")
        return 0

    @staticmethod
    def from_handle(handle, signature=None, owner=None, kind=None):
        """Adopt a kernel another library loaded: a ``CUkernel`` or
        ``cudaKernel_t`` (a library kernel, usable on every device), or a
        ``CUfunction`` (bound to the context it was loaded in).

        ``handle`` is an int, or an object that gives one: a cuda-bindings
        handle (its ``int()``), a ctypes pointer.  ``signature`` as
        for ``Module.get_kernel``; without one, CUDA's report of the
        parameters is the check.  ``owner`` is the object whose lifetime
        keeps the code loaded (a CuPy ``RawKernel``, a cuda.core
        ``ObjectCode``, ...): the kernel, and every prepared launch, graph
        and executable that uses it, keep it alive, and it is let go only
        once the work launched with the kernel is done.

        ``kind`` says which handle it is: "kernel" (launched through the
        runtime, as a Module's kernels are) or "function" (launched through
        the driver: the runtime would read it as a kernel).  A cuda-bindings
        ``CUkernel``/``cudaKernel_t`` or ``CUfunction``/``cudaFunction_t``
        object says it itself; a plain int needs ``kind=``, because CUDA
        cannot tell the two apart safely (each query takes one kind and
        reads the other as if it were one).  A handle CUDA refuses is a
        ValueError; a dangling or mislabelled one is undefined behaviour,
        as for every raw handle (docs/safety.rst).
        """
        cdef uintptr_t h = foreign_code_handle(handle, "handle")
        if kind is None:
            kind = _handle_kind(handle)
        elif not isinstance(kind, str) or kind not in ("kernel", "function"):
            raise ValueError(f"kind must be 'kernel', 'function' or None, got {kind!r}")
        return adopt_kernel(h, kind == "kernel", owner, signature, False)

    cdef void* c_handle(self) noexcept nogil:
        return self._func

    cdef int c_launch(self, Stream stream, unsigned int grid_x, unsigned int grid_y,
                      unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                      unsigned int block_z, void** args, size_t shared_mem) except -1 nogil:
        cdef dim3 g, b
        if self._module is None:
            with gil:
                self._check_usable()
        if shared_mem >> 32:
            # CUDA's driver takes an unsigned int: a larger size_t would be
            # truncated to a smaller amount, silently.
            with gil:
                raise ValueError(f"shared_mem={shared_mem} does not fit a C unsigned int "
                                 "(at most 4294967295)")
        g.x, g.y, g.z = grid_x, grid_y, grid_z
        b.x, b.y, b.z = block_x, block_y, block_z
        return _launch_packed(self, stream, g, b, args, shared_mem, NULL)

    cdef int _launch_on(self, Stream stream, object grid, object block, tuple args,
                        object shared_mem, object config, bint wait_producers) except -1:
        # config: None for a plain launch, else a LaunchConfig (which then
        # carries the grid, block and shared memory).
        cdef ArgPack pack
        cdef dim3 g, b
        cdef size_t smem = 0
        cdef LaunchConfig lc = None
        if config is None:
            as_dim3(grid, &g, "grid")
            as_dim3(block, &b, "block")
            smem = as_uint(shared_mem, "shared_mem")
        else:
            lc = _usable_config(config)
        self._check_usable()
        cdef void** argv = pack.ptrs if len(args) else NULL
        pack_args(self, args, &pack, stream, 0 if wait_producers else SPAN_NO_WAIT)
        try:
            with nogil:
                if lc is None:
                    _launch_packed(self, stream, g, b, argv, smem, NULL)
                else:
                    _launch_configured(self, stream, lc, argv)
        finally:
            release_pack(&pack)
        if streams_flag_get(_checking) != 0:
            nvtx.check_hooks().launch(self, stream, args)
        return 0

    @property
    def name(self):
        return self._name

    @property
    def signature(self):
        """The C types of the parameters, as given to ``get_kernel`` (or None)."""
        return self._signature_names

    @property
    def num_params(self):
        """How many parameters CUDA reports (None when this runtime cannot tell)."""
        return None if self._nparams < 0 else self._nparams

    @property
    def param_sizes(self):
        """The size in bytes of each parameter, as CUDA reports them (or None)."""
        if self._nparams < 0:
            return None
        return tuple(self._param_size[i] for i in range(self._nparams))

    @property
    def module(self):
        """The Module it came from (None for an adopted kernel)."""
        return None if self._adopted != ADOPTED_NONE else self._module

    @property
    def owner(self):
        """The ``owner`` given to ``from_handle`` (None otherwise)."""
        if self._module is None:
            return None
        return self._module._owner

    @property
    def kind(self):
        """"kernel" (a library kernel: CUkernel, cudaKernel_t, or a Module's)
        or "function" (a CUfunction, launched through the driver)."""
        if self._module is None:
            return None
        return "function" if self._adopted == ADOPTED_FUNCTION else "kernel"

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
    def max_dynamic_shared_size_bytes(self, value):
        cdef int v
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"max_dynamic_shared_size_bytes must be an int, not "
                            f"{type(value).__name__}")
        if value < 0 or value > 0x7FFFFFFF:
            raise ValueError(f"max_dynamic_shared_size_bytes must be >= 0, got {value}")
        v = value
        self._check_usable()
        self._module._use()
        try:
            with nogil:
                if self._adopted == ADOPTED_FUNCTION:
                    rt.function_set_max_dynamic_shared(<const void*>self._func, v)
                else:
                    rt.func_set_attribute(<const void*>self._func,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, v)
        finally:
            self._module._unuse()

    def prepare(self, *args, shared_mem=0, config=None):
        """Pack the launch once; ``PreparedLaunch.launch(stream)`` is then one C call.

        ``prepare(grid, block, *args, shared_mem=0)``, or with a
        ``LaunchConfig`` (extended launch attributes, ``cudaLaunchKernelExC``):
        ``prepare(config, *args)`` or ``prepare(*args, config=config)``.
        Pointer arguments are resolved now: the prepared launch keeps the
        objects (and streams buffers in use, so that closing one frees it
        only once the prepared launch is gone).
        """
        cdef PreparedLaunch p = PreparedLaunch.__new__(PreparedLaunch)
        cdef ArgPack pack
        cdef dim3 g, b
        cdef Py_ssize_t i, n
        cdef LaunchConfig lc
        if config is None and args and isinstance(args[0], LaunchConfig):
            config, args = args[0], args[1:]
        if config is not None:
            lc = _usable_config(config)
            if shared_mem != 0:
                raise TypeError("with a LaunchConfig, shared_mem belongs in the config")
            g.x, g.y, g.z = lc._grid_dims[0], lc._grid_dims[1], lc._grid_dims[2]
            b.x, b.y, b.z = lc._block_dims[0], lc._block_dims[1], lc._block_dims[2]
            p._shared_mem = (<LaunchConfig>config)._shared_mem
            p._config = config
        else:
            if len(args) < 2:
                raise TypeError("prepare() needs grid and block (or a LaunchConfig)")
            as_dim3(args[0], &g, "grid")
            as_dim3(args[1], &b, "block")
            args = args[2:]
            p._shared_mem = as_uint(shared_mem, "shared_mem")
        self._check_usable()
        pack_args(self, args, &pack, None)
        p._grid[0], p._grid[1], p._grid[2] = g.x, g.y, g.z
        p._block[0], p._block[1], p._block[2] = b.x, b.y, b.z
        n = len(args)
        for i in range(n):
            p._slots[i] = pack.slots[i]
            p._ptrs[i] = &p._slots[i]
        p._nargs = n
        p._kernel = self
        p._keepalive = args
        p._users = (keep_pack_users(&pack), keep_in_use(self._module))
        return p

    def __repr__(self):
        if self._adopted != ADOPTED_NONE:
            return f"<streams.Kernel {self._name!r} (adopted)>"
        return f"<streams.Kernel {self._name!r}>"


# A tuple, not the pack's raw references, so that the GC sees what it holds:
# a buffer held only through a raw reference counts as reachable, and a
# cycle through it would never be collected.  no_gc_clear: __dealloc__ gives
# the uses back ("Reference cycles" in docs/architecture.rst).
@cython.final
@cython.no_gc_clear
cdef class _BufferUses:
    """Streams buffers a prepared launch or a graph keeps in use."""
    cdef tuple buffers

    def __dealloc__(self):
        if self.buffers is not None:
            for buf in self.buffers:
                (<HandleOwner>buf)._unuse()


cdef object keep_pack_users(ArgPack* pack):
    cdef _BufferUses uses = _BufferUses.__new__(_BufferUses)
    cdef int i
    # Each use goes on with the tuple; the pack's reference is dropped for it.
    uses.buffers = tuple([<object>pack.users[i] for i in range(pack.nusers)])
    for i in range(pack.nusers):
        Py_DECREF(<object>pack.users[i])
    pack.nusers = 0     # handed over
    return uses


@cython.final
cdef class PreparedLaunch:
    """A kernel launch with its configuration and arguments packed once."""
    # The GC may clear it: it has no __dealloc__, and dropping `_users`
    # early gives back the uses a prepared launch no one can launch holds.

    def __init__(self, *args, **kwargs):
        rt.refuse_construction(self, "use Kernel.prepare()")

    cdef int c_launch(self, Stream stream) except -1 nogil:
        return self._launch(stream)

    cdef int _launch(self, Stream stream) except -1 nogil:
        cdef dim3 g, b
        if self._kernel is None:
            with gil:
                raise ValueError("this PreparedLaunch was never initialised (use "
                                 "Kernel.prepare())")
        if self._config is not None:
            return _launch_configured(self._kernel, stream, self._config,
                                      self._ptrs if self._nargs else NULL)
        g.x, g.y, g.z = self._grid[0], self._grid[1], self._grid[2]
        b.x, b.y, b.z = self._block[0], self._block[1], self._block[2]
        return _launch_packed(self._kernel, stream, g, b, self._ptrs if self._nargs else NULL,
                              self._shared_mem, NULL)

    def launch(self, stream=None):
        """Enqueue the launch on ``stream`` (default: the current stream)."""
        cdef Stream s = as_stream(stream, "stream")
        cdef bint traced = streams_flag_get(_tracing) != 0
        if traced:
            nvtx.trace_push(nvtx.CALL_LAUNCH)
        try:
            with nogil:
                self._launch(s)
            if streams_flag_get(_checking) != 0:
                nvtx.check_hooks().launch(self._kernel, s, self._keepalive)
        finally:
            if traced:
                nvtx.trace_pop()

    @property
    def kernel(self):
        return self._kernel

    @property
    def config(self):
        """The LaunchConfig it launches with (None for a plain launch)."""
        return self._config


# ---- built-in kernels -------------------------------------------------------------------------
# empty, spin, fill and increment: what tests, benchmarks and examples run to
# put real work on a stream.  Shipped as PTX (streams/kernels/builtin.ptx, from
# builtin.cu), which the driver compiles at first use: building the package
# needs no nvcc.  Loaded once per process and never counted as a live module.

cdef Module _builtins = None
cdef Kernel _k_empty, _k_spin, _k_fill_u32, _k_increment_u32
# A timeline semaphore's kernel path (streams._semaphore): signal, wait.
cdef Kernel _k_sem_signal, _k_sem_wait
# Set (releasing) once the kernels above are: a thread that reads it set
# (acquiring) sees whole kernels, never a half-published one.
cdef int _builtins_ready = False
cdef object _builtins_lock = _threading.Lock()
# The kernels that set a conditional node's value: a module of their own
# (streams/kernels/conditional.ptx), loaded at first use, because the
# driver resolves their call of cudaGraphSetConditional when it loads them.
cdef dict _conditionals = None


def builtin_ptx(name="builtin"):
    """The PTX text of the built-in kernels (streams/kernels/builtin.ptx), or
    with ``name="conditional"`` of the condition-setting kernels."""
    if name not in ("builtin", "conditional"):
        raise ValueError(f"no built-in PTX module {name!r}")
    here = _os.path.dirname(_os.path.abspath(__file__))
    with open(_os.path.join(here, "kernels", name + ".ptx"), encoding="ascii") as f:
        return f.read()


cdef int _load_builtins() except -1:
    global _builtins, _k_empty, _k_spin, _k_fill_u32, _k_increment_u32
    global _k_sem_signal, _k_sem_wait
    cdef Module m
    if streams_flag_get(&_builtins_ready):
        return 0
    with _builtins_lock:   # one load per process: it is never unloaded
        if streams_flag_get(&_builtins_ready):
            return 0
        m = _load_image(builtin_ptx().encode("ascii") + b"\0", True)
        _k_empty = m.get_kernel("streams_empty", signature=())
        _k_spin = m.get_kernel("streams_spin", signature=("uint64",))
        _k_fill_u32 = m.get_kernel("streams_fill_u32",
                                   signature=("pointer", "uint32", "uint64"))
        _k_increment_u32 = m.get_kernel("streams_increment_u32",
                                        signature=("pointer", "uint64"))
        _k_sem_signal = m.get_kernel("streams_semaphore_signal", signature=("uint64", "uint64"))
        _k_sem_wait = m.get_kernel("streams_semaphore_wait", signature=("uint64", "uint64"))
        _builtins = m
        streams_flag_set(&_builtins_ready, True)
    return 0


cdef dict _load_conditionals():
    global _conditionals
    cdef Module m
    with _builtins_lock:   # one load per process, never unloaded
        if _conditionals is None:
            try:
                m = _load_image(builtin_ptx("conditional").encode("ascii") + b"\0", True)
            except CudaError as exc:
                raise CudaError(exc.code, exc.name,
                                f"{exc.message} (loading streams/kernels/conditional.ptx: "
                                "its call of cudaGraphSetConditional needs a driver for "
                                "CUDA 12.4 or newer)") from exc
            _conditionals = {
                "set_condition": m.get_kernel("streams_set_condition",
                                              signature=("condition", "pointer")),
                "set_condition_lt": m.get_kernel("streams_set_condition_lt",
                                                 signature=("condition", "pointer",
                                                            "uint32"))}
    return _conditionals


cdef Kernel semaphore_kernel(bint signal):
    _load_builtins()
    return _k_sem_signal if signal else _k_sem_wait


_BUILTIN_NAMES = ("empty", "fill_u32", "increment_u32", "set_condition", "set_condition_lt",
                  "spin")


def builtin_kernel(name):
    """The built-in kernel ``name``: "empty", "spin", "fill_u32",
    "increment_u32", or one that sets a conditional node's value from device
    memory (launch it with one thread): "set_condition" (condition, value
    pointer: ``cond = *value``) and "set_condition_lt" (condition, counter
    pointer, n: ``cond = *counter < n``)."""
    if not isinstance(name, str) or name not in _BUILTIN_NAMES:
        raise ValueError(f"no built-in kernel {name!r}; there are {list(_BUILTIN_NAMES)}")
    if name.startswith("set_condition"):
        return _load_conditionals()[name]
    _load_builtins()
    return {"empty": _k_empty, "spin": _k_spin, "fill_u32": _k_fill_u32,
            "increment_u32": _k_increment_u32}[name]


# ---- runtime compilation (NVRTC, loaded at first use) -------------------------------------
# NVRTC is a separate library of the toolkit (or the nvidia-cuda-nvrtc
# wheel): loaded with dlopen when from_source first needs it, so importing
# streams costs nothing and needs no NVRTC.  Only the calls below are used.
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlclose, dlerror, dlopen, dlsym
from libc.stdlib cimport free as _c_free, malloc as _c_malloc

ctypedef int (*_nvrtc_create_t)(void** prog, const char* src, const char* name, int nheaders,
                                const char* const* headers,
                                const char* const* include_names) noexcept nogil
ctypedef int (*_nvrtc_compile_t)(void* prog, int nopts, const char* const* opts) noexcept nogil
ctypedef int (*_nvrtc_size_t)(void* prog, size_t* size) noexcept nogil
ctypedef int (*_nvrtc_data_t)(void* prog, char* out) noexcept nogil
ctypedef int (*_nvrtc_add_name_t)(void* prog, const char* expr) noexcept nogil
ctypedef int (*_nvrtc_lowered_t)(void* prog, const char* expr, const char** out) noexcept nogil
ctypedef int (*_nvrtc_destroy_t)(void** prog) noexcept nogil
ctypedef const char* (*_nvrtc_error_string_t)(int result) noexcept nogil
ctypedef int (*_nvrtc_version_t)(int* major, int* minor) noexcept nogil

cdef struct _Nvrtc:
    _nvrtc_create_t create
    _nvrtc_compile_t compile
    _nvrtc_size_t log_size
    _nvrtc_data_t log
    _nvrtc_size_t cubin_size
    _nvrtc_data_t cubin
    _nvrtc_size_t ptx_size
    _nvrtc_data_t ptx
    _nvrtc_add_name_t add_name
    _nvrtc_lowered_t lowered
    _nvrtc_destroy_t destroy
    _nvrtc_error_string_t error_string
    _nvrtc_version_t version

cdef _Nvrtc _nvrtc
cdef bint _nvrtc_loaded = False
cdef object _nvrtc_path = None
cdef object _nvrtc_lock = _threading.Lock()
# What from_source compiled: key -> (image, is_ptx, lowered names).
cdef dict _source_cache = {}
cdef list _source_cache_stats = [0, 0]     # hits, misses
cdef object _source_cache_lock = _threading.Lock()
cdef Py_ssize_t _SOURCE_CACHE_MAX = 128


class CompileError(RuntimeError):
    """NVRTC refused the source of ``Module.from_source``.

    ``log`` is NVRTC's compilation log (the messages with their lines);
    ``str()`` of the error includes it.
    """

    def __init__(self, message, log=""):
        super().__init__(f"{message}\n{log}" if log else message)
        self.message = message
        self.log = log


def _nvrtc_candidates():
    """Where NVRTC may be, best first: STREAMS_NVRTC alone when it is set;
    else the wheel's, the toolkit's and the system's, this build's CUDA
    major version first."""
    import importlib.util
    env = _os.environ.get("STREAMS_NVRTC")
    if env:
        return [env]
    major = rt_runtime_version() // 1000
    majors = [major] + [m for m in (13, 12) if m != major]
    found = []
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    for m in majors:
        sub = "cu13/lib" if m >= 13 else "cuda_nvrtc/lib"
        for root in roots:
            found.append(_os.path.join(root, sub, f"libnvrtc.so.{m}"))
    homes = [_os.environ.get("CUDA_HOME"), _os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in homes:
        if home:
            for m in majors:
                found.append(_os.path.join(home, "lib64", f"libnvrtc.so.{m}"))
            found.append(_os.path.join(home, "lib64", "libnvrtc.so"))
    for m in majors:
        found.append(f"libnvrtc.so.{m}")      # the dynamic loader's search
    found.append("libnvrtc.so")
    return found


def _nvrtc_wheel():
    """The requirement of NVIDIA's NVRTC wheel for this build's CUDA major,
    quoted for a shell: what the error of a missing NVRTC tells to install
    (tests/launch/test_launch_cpu.py)."""
    major = rt_runtime_version() // 1000
    if major == 12:
        return '"nvidia-cuda-nvrtc-cu12==12.*"'
    return f'"nvidia-cuda-nvrtc=={major}.*"'


cdef void* _nvrtc_symbol(void* lib, const char* name, str path) except NULL:
    cdef void* fn = dlsym(lib, name)
    if fn == NULL:
        raise RuntimeError(f"{path} has no {name.decode()}: not an NVRTC library")
    return fn


cdef int _nvrtc_resolve(void* lib, str path, _Nvrtc* out) except -1:
    out.create = <_nvrtc_create_t>_nvrtc_symbol(lib, b"nvrtcCreateProgram", path)
    out.compile = <_nvrtc_compile_t>_nvrtc_symbol(lib, b"nvrtcCompileProgram", path)
    out.log_size = <_nvrtc_size_t>_nvrtc_symbol(lib, b"nvrtcGetProgramLogSize", path)
    out.log = <_nvrtc_data_t>_nvrtc_symbol(lib, b"nvrtcGetProgramLog", path)
    out.cubin_size = <_nvrtc_size_t>_nvrtc_symbol(lib, b"nvrtcGetCUBINSize", path)
    out.cubin = <_nvrtc_data_t>_nvrtc_symbol(lib, b"nvrtcGetCUBIN", path)
    out.ptx_size = <_nvrtc_size_t>_nvrtc_symbol(lib, b"nvrtcGetPTXSize", path)
    out.ptx = <_nvrtc_data_t>_nvrtc_symbol(lib, b"nvrtcGetPTX", path)
    out.add_name = <_nvrtc_add_name_t>_nvrtc_symbol(lib, b"nvrtcAddNameExpression", path)
    out.lowered = <_nvrtc_lowered_t>_nvrtc_symbol(lib, b"nvrtcGetLoweredName", path)
    out.destroy = <_nvrtc_destroy_t>_nvrtc_symbol(lib, b"nvrtcDestroyProgram", path)
    out.error_string = <_nvrtc_error_string_t>_nvrtc_symbol(lib, b"nvrtcGetErrorString", path)
    out.version = <_nvrtc_version_t>_nvrtc_symbol(lib, b"nvrtcVersion", path)
    return 0


cdef int _load_nvrtc() except -1:
    global _nvrtc_loaded, _nvrtc_path, _nvrtc
    cdef void* lib = NULL
    cdef _Nvrtc found
    cdef bytes bpath
    cdef const char* err
    # Always under the lock, the first check too: with free threading a
    # reader must not see the flag before the pointers it guards.
    with _nvrtc_lock:
        if _nvrtc_loaded:
            return 0
        tried = []
        env = _os.environ.get("STREAMS_NVRTC")
        for path in _nvrtc_candidates():
            if _os.sep in path and not _os.path.isfile(path):
                tried.append(f"{path} (no such file)")
                continue
            bpath = _os.fsencode(path)
            lib = dlopen(bpath, RTLD_NOW | RTLD_LOCAL)
            if lib != NULL:
                break
            err = dlerror()
            why = err.decode("utf-8", "replace") if err != NULL else "not loadable"
            tried.append(f"{path} ({why})")
        if lib == NULL:
            how = ("STREAMS_NVRTC names it" if env else
                   f"install NVIDIA's wheel of it with `pip install {_nvrtc_wheel()}`, set "
                   "CUDA_HOME to a CUDA toolkit, or set STREAMS_NVRTC to the path of "
                   "libnvrtc.so")
            raise RuntimeError(f"NVRTC (libnvrtc.so), needed by Module.from_source, was not "
                               f"found or could not be loaded; {how}. Tried: "
                               + "; ".join(tried))
        # Every symbol into a local table first: a library that lacks one
        # (STREAMS_NVRTC naming something else) is closed again, and the
        # table in use is never half-filled (tests/cudart/test_shared_state_cpu.py).
        try:
            _nvrtc_resolve(lib, path, &found)
        except BaseException:
            dlclose(lib)
            raise
        _nvrtc = found
        _nvrtc_path = path
        _nvrtc_loaded = True
    return 0


def nvrtc_info():
    """NVRTC's version and where it was loaded from, loading it if needed:
    ``{"version": (major, minor), "path": str}``."""
    cdef int major = 0, minor = 0
    _load_nvrtc()
    _nvrtc.version(&major, &minor)
    return {"version": (major, minor), "path": _nvrtc_path}


cdef str _nvrtc_error(int result):
    cdef const char* text = _nvrtc.error_string(result)
    return text.decode("utf-8", "replace") if text != NULL else f"NVRTC error {result}"


cdef str _default_arch():
    cdef int dev, major = 0, minor = 0
    require_device()
    with nogil:
        dev = rt.get_device()
        rt.device_get_attribute(&major, cudaDevAttrComputeCapabilityMajor, dev)
        rt.device_get_attribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)
    return f"sm_{major}{minor}"


cdef tuple _str_tuple(object value, str argname):
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{argname} must be a sequence of str, not a single "
                        f"{type(value).__name__}")
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{argname} must be a sequence of str, not "
                        f"{type(value).__name__}") from None
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{argname}[{i}] must be a str, not {type(item).__name__}")
        if "\0" in item:
            raise ValueError(f"{argname}[{i}] contains a NUL character")
    return items


cdef tuple _compile_cached(object source, object options, object name_expressions,
                           object arch):
    if isinstance(source, bytes):
        source = source.decode("utf-8")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of CUDA C++, not {type(source).__name__}")
    if "\0" in source:
        raise ValueError("source contains a NUL character")
    opts = _str_tuple(options, "options")
    names = _str_tuple(name_expressions, "name_expressions")
    if arch is not None:
        if not isinstance(arch, str):
            raise TypeError(f"arch must be a str such as 'sm_90' or 'compute_90', not "
                            f"{type(arch).__name__}")
        if not (arch.startswith("sm_") or arch.startswith("compute_")) or \
                not arch.split("_", 1)[1][:2].isdigit():
            raise ValueError(f"arch must look like 'sm_90' or 'compute_90', got {arch!r}")
    for o in opts:
        if o.startswith(("-arch", "--gpu-architecture")):
            raise ValueError(f"options: pass the architecture as arch=, not {o!r}")
    _load_nvrtc()
    if arch is None:
        arch = _default_arch()
    key = (source, opts, arch, names)
    with _source_cache_lock:
        hit = _source_cache.get(key)
        if hit is not None:
            _source_cache_stats[0] += 1
            return hit
    result = _nvrtc_compile(source, opts + (f"--gpu-architecture={arch}",), names,
                            arch.startswith("compute_"))
    with _source_cache_lock:
        _source_cache_stats[1] += 1
        if len(_source_cache) >= _SOURCE_CACHE_MAX:
            del _source_cache[next(iter(_source_cache))]    # the oldest
        _source_cache[key] = result
    return result


cdef tuple _nvrtc_compile(str source, tuple opts, tuple names, bint to_ptx):
    cdef void* prog = NULL
    cdef int r, compiled, n = len(opts)
    cdef bytes bsrc = source.encode("utf-8")
    cdef const char* c_src = bsrc
    cdef list bopts = [o.encode("utf-8") for o in opts]
    cdef const char** c_opts = <const char**>_c_malloc((n + 1) * sizeof(char*))
    cdef size_t size = 0
    cdef bytearray out
    cdef const char* lowered_name
    cdef bytes bname
    cdef const char* c_name
    if c_opts == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            bname = bopts[i]
            c_opts[i] = bname
        r = _nvrtc.create(&prog, c_src, b"streams_source.cu", 0, NULL, NULL)
        if r != 0:
            raise RuntimeError(f"nvrtcCreateProgram failed: {_nvrtc_error(r)}")
        try:
            for expr in names:
                bname = expr.encode("utf-8")
                r = _nvrtc.add_name(prog, bname)
                if r != 0:
                    raise ValueError(f"name_expressions: NVRTC refused {expr!r}: "
                                     f"{_nvrtc_error(r)}")
            with nogil:
                compiled = _nvrtc.compile(prog, n, c_opts)
            log = ""
            if _nvrtc.log_size(prog, &size) == 0 and size > 1:
                out = bytearray(size)
                if _nvrtc.log(prog, out) == 0:
                    log = bytes(out).rstrip(b"\0").decode("utf-8", "replace")
            if compiled != 0:
                raise CompileError(f"NVRTC could not compile the source "
                                   f"({_nvrtc_error(compiled)})", log)
            if to_ptx:
                r = _nvrtc.ptx_size(prog, &size)
            else:
                r = _nvrtc.cubin_size(prog, &size)
            if r != 0 or size == 0:
                raise RuntimeError(f"NVRTC returned no {'PTX' if to_ptx else 'cubin'}: "
                                   f"{_nvrtc_error(r)}")
            out = bytearray(size)
            r = _nvrtc.ptx(prog, out) if to_ptx else _nvrtc.cubin(prog, out)
            if r != 0:
                raise RuntimeError(f"NVRTC could not hand over its output: {_nvrtc_error(r)}")
            image = bytes(out)
            if to_ptx and not image.endswith(b"\0"):
                image += b"\0"
            lowered = {}
            for expr in names:
                bname = expr.encode("utf-8")
                c_name = bname
                lowered_name = NULL
                r = _nvrtc.lowered(prog, c_name, &lowered_name)
                if r != 0 or lowered_name == NULL:
                    raise ValueError(f"name_expressions: no lowered name for {expr!r} "
                                     f"({_nvrtc_error(r)})")
                lowered[expr] = (<bytes>lowered_name).decode("utf-8")
            return (image, bool(to_ptx), lowered)
        finally:
            _nvrtc.destroy(&prog)
    finally:
        _c_free(c_opts)


include "_launch/_testing.pxi"
