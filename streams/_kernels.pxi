# Built-in kernels (empty, spin, fill, increment), shipped as PTX text that
# the driver compiles at first use, so building the package needs no nvcc.
# Source: streams/kernels/builtin.cu.

cdef const char* _BUILTIN_PTX = b"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry streams_empty()
{
	ret;
}
.visible .entry streams_spin(
	.param .u64 streams_spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<6>;
	ld.param.u64 	%rd2, [streams_spin_param_0];
	mov.u64 %rd3, %globaltimer;
$L__BB1_1:
	mov.u64 %rd4, %globaltimer;
	sub.s64 	%rd5, %rd4, %rd3;
	setp.lt.u64 	%p1, %rd5, %rd2;
	@%p1 bra 	$L__BB1_1;
	ret;
}
.visible .entry streams_fill_u32(
	.param .u64 streams_fill_u32_param_0,
	.param .u32 streams_fill_u32_param_1,
	.param .u64 streams_fill_u32_param_2
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<15>;
	ld.param.u64 	%rd7, [streams_fill_u32_param_0];
	ld.param.u32 	%r1, [streams_fill_u32_param_1];
	ld.param.u64 	%rd8, [streams_fill_u32_param_2];
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	cvt.u64.u32 	%rd1, %r3;
	mul.wide.u32 	%rd9, %r2, %r3;
	mov.u32 	%r4, %tid.x;
	cvt.u64.u32 	%rd10, %r4;
	add.s64 	%rd14, %rd9, %rd10;
	setp.ge.u64 	%p1, %rd14, %rd8;
	@%p1 bra 	$L__BB2_3;
	mov.u32 	%r5, %nctaid.x;
	cvt.u64.u32 	%rd11, %r5;
	mul.lo.s64 	%rd3, %rd11, %rd1;
	cvta.to.global.u64 	%rd4, %rd7;
$L__BB2_2:
	shl.b64 	%rd12, %rd14, 2;
	add.s64 	%rd13, %rd4, %rd12;
	st.global.u32 	[%rd13], %r1;
	add.s64 	%rd14, %rd14, %rd3;
	setp.lt.u64 	%p2, %rd14, %rd8;
	@%p2 bra 	$L__BB2_2;
$L__BB2_3:
	ret;
}
.visible .entry streams_increment_u32(
	.param .u64 streams_increment_u32_param_0,
	.param .u64 streams_increment_u32_param_1
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<7>;
	.reg .b64 	%rd<15>;
	ld.param.u64 	%rd7, [streams_increment_u32_param_0];
	ld.param.u64 	%rd8, [streams_increment_u32_param_1];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	cvt.u64.u32 	%rd1, %r2;
	mul.wide.u32 	%rd9, %r1, %r2;
	mov.u32 	%r3, %tid.x;
	cvt.u64.u32 	%rd10, %r3;
	add.s64 	%rd14, %rd9, %rd10;
	setp.ge.u64 	%p1, %rd14, %rd8;
	@%p1 bra 	$L__BB3_3;
	mov.u32 	%r4, %nctaid.x;
	cvt.u64.u32 	%rd11, %r4;
	mul.lo.s64 	%rd3, %rd11, %rd1;
	cvta.to.global.u64 	%rd4, %rd7;
$L__BB3_2:
	shl.b64 	%rd12, %rd14, 2;
	add.s64 	%rd13, %rd4, %rd12;
	ld.global.u32 	%r5, [%rd13];
	add.s32 	%r6, %r5, 1;
	st.global.u32 	[%rd13], %r6;
	add.s64 	%rd14, %rd14, %rd3;
	setp.lt.u64 	%p2, %rd14, %rd8;
	@%p2 bra 	$L__BB3_2;
$L__BB3_3:
	ret;
}
"""

def _builtin_ptx():
    """The PTX text of the built-in kernels."""
    return (<bytes>_BUILTIN_PTX).decode("ascii")


cdef cudaLibrary_t _builtin_library = NULL
cdef cudaKernel_t _k_empty = NULL
cdef cudaKernel_t _k_spin = NULL
cdef cudaKernel_t _k_fill_u32 = NULL
cdef cudaKernel_t _k_increment_u32 = NULL


cdef int _load_builtin_kernels() except -1:
    global _builtin_library, _k_empty, _k_spin, _k_fill_u32, _k_increment_u32
    cdef cudaLibrary_t lib = NULL
    cdef cudaKernel_t k0 = NULL, k1 = NULL, k2 = NULL, k3 = NULL
    cdef cudaFuncAttributes attrs
    if _builtin_library != NULL:
        return 0
    guard()
    _require_device()
    with nogil:
        check(cudaLibraryLoadData(&lib, <const void*>_BUILTIN_PTX, NULL, NULL, 0,
                                  NULL, NULL, 0))
        check(cudaLibraryGetKernel(&k0, lib, b"streams_empty"))
        check(cudaLibraryGetKernel(&k1, lib, b"streams_spin"))
        check(cudaLibraryGetKernel(&k2, lib, b"streams_fill_u32"))
        check(cudaLibraryGetKernel(&k3, lib, b"streams_increment_u32"))
        # Loaded now rather than at a first launch, which would wait for
        # work already running (see Module.get_kernel).
        check(cudaFuncGetAttributes(&attrs, <const void*>k0))
        check(cudaFuncGetAttributes(&attrs, <const void*>k1))
        check(cudaFuncGetAttributes(&attrs, <const void*>k2))
        check(cudaFuncGetAttributes(&attrs, <const void*>k3))
    if _builtin_library != NULL:
        # Another thread won the race while the GIL was released.
        with nogil:
            cudaLibraryUnload(lib)
        return 0
    _k_empty, _k_spin, _k_fill_u32, _k_increment_u32 = k0, k1, k2, k3
    _builtin_library = lib
    return 0


cdef int _launch_builtin(cudaKernel_t kernel, Stream stream, unsigned int grid,
                         unsigned int block, void** args) except -1:
    cdef dim3 g, b
    cdef int cur, dev
    g.x, g.y, g.z = grid, 1, 1
    b.x, b.y, b.z = block, 1, 1
    guard()
    stream._check_open()
    dev = stream._device
    cur = _current_device()
    with nogil:
        if dev >= 0 and dev != cur:
            check(cudaSetDevice(dev))
        try:
            check(cudaLaunchKernel(<const void*>kernel, g, b, args, 0,
                                   <cudaStream_t>stream._handle))
        finally:
            if dev >= 0 and dev != cur:
                cudaSetDevice(cur)
    return 0


def _spin(Stream stream not None, double microseconds):
    cdef unsigned long long ns
    cdef void* args[1]
    if not (microseconds >= 0):
        raise ValueError(f"microseconds must be >= 0, got {microseconds!r}")
    ns = <unsigned long long>(microseconds * 1000.0)
    _load_builtin_kernels()
    args[0] = &ns
    _launch_builtin(_k_spin, stream, 1, 1, args)


def _launch_empty(Stream stream not None):
    _load_builtin_kernels()
    _launch_builtin(_k_empty, stream, 1, 1, NULL)


def _fill_u32(Stream stream not None, uintptr_t ptr, unsigned int value, unsigned long long n):
    cdef void* args[3]
    _load_builtin_kernels()
    args[0] = &ptr
    args[1] = &value
    args[2] = &n
    _launch_builtin(_k_fill_u32, stream, 256, 256, args)


def _increment_u32(Stream stream not None, uintptr_t ptr, unsigned long long n):
    cdef void* args[2]
    _load_builtin_kernels()
    args[0] = &ptr
    args[1] = &n
    _launch_builtin(_k_increment_u32, stream, 256, 256, args)


# Argument layouts of the built-in kernels, for graph kernel nodes.
_BUILTIN_SIGNATURES = {
    "empty": (),
    "spin": ("u64",),
    "fill_u32": ("ptr", "u32", "u64"),
    "increment_u32": ("ptr", "u64"),
}


@cython.final
cdef class _BuiltinArgs:
    """A built-in kernel with its arguments packed as CUDA wants them."""
    cdef cudaKernel_t kernel
    cdef unsigned long long values[4]
    cdef void* ptrs[4]


cdef _BuiltinArgs _pack_builtin_args(object name, object args):
    cdef _BuiltinArgs packed = _BuiltinArgs.__new__(_BuiltinArgs)
    cdef Py_ssize_t i
    try:
        signature = _BUILTIN_SIGNATURES[name]
    except (KeyError, TypeError):
        raise ValueError(f"kernel must name a built-in kernel, one of "
                         f"{sorted(_BUILTIN_SIGNATURES)}; got {name!r}") from None
    args = tuple(args)
    if len(args) != len(signature):
        raise TypeError(f"kernel {name!r} takes {len(signature)} argument(s) "
                        f"{signature}, got {len(args)}")
    _load_builtin_kernels()
    if name == "empty":
        packed.kernel = _k_empty
    elif name == "spin":
        packed.kernel = _k_spin
    elif name == "fill_u32":
        packed.kernel = _k_fill_u32
    else:
        packed.kernel = _k_increment_u32
    for i in range(len(args)):
        value = args[i]
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"argument {i} of kernel {name!r} must be an int "
                            f"({signature[i]}), not {type(value).__name__}")
        value = value.__index__()
        limit = 0xFFFFFFFF if signature[i] == "u32" else 0xFFFFFFFFFFFFFFFF
        if value < 0 or value > limit:
            raise ValueError(f"argument {i} of kernel {name!r} does not fit {signature[i]}")
        # Little-endian: a u32 argument reads the low half of its slot.
        packed.values[i] = <unsigned long long>value
        packed.ptrs[i] = &packed.values[i]
    return packed


cdef tuple _dim(object value, str argname):
    if type(value) is int and 1 <= <long long>value <= 0x7FFFFFFF:
        return (value, 1, 1)
    if isinstance(value, bool):
        raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, not bool")
    if isinstance(value, int):
        value = (value,)
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, got {value!r}")
    dims = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, got {value!r}")
        if v < 1 or v > 0x7FFFFFFF:
            raise ValueError(f"{argname} dimensions must be >= 1, got {value!r}")
        dims.append(v)
    while len(dims) < 3:
        dims.append(1)
    return tuple(dims)
