# Private hooks for tests, part of streams._launch (_launch.pyx includes it
# last): the built-in kernels' launches behind streams.testing, and what
# from_handle and from_source do, checked without a GPU.

def _handle_kind_for_tests(handle):
    """What from_handle reads a handle object's kind as (tests)."""
    return _handle_kind(handle)


# The longest spin: a kernel that never ends would hold the GPU until the
# process dies, so longer requests are clamped.
cdef double _MAX_SPIN_US = 600e6


def _spin(Stream stream not None, double microseconds):
    cdef void* args[1]
    cdef unsigned long long ns
    cdef dim3 one
    if not (microseconds >= 0):
        raise ValueError(f"microseconds must be >= 0, got {microseconds!r}")
    if microseconds > _MAX_SPIN_US:
        microseconds = _MAX_SPIN_US
    ns = <unsigned long long>(microseconds * 1000.0)
    _load_builtins()
    args[0] = &ns
    one.x, one.y, one.z = 1, 1, 1
    with nogil:
        _launch_packed(_k_spin, stream, one, one, args, 0, NULL)


def _launch_empty(Stream stream not None):
    cdef dim3 one
    _load_builtins()
    one.x, one.y, one.z = 1, 1, 1
    with nogil:
        _launch_packed(_k_empty, stream, one, one, NULL, 0, NULL)


def _fill_u32(Stream stream not None, ptr, value, count):
    _load_builtins()
    _k_fill_u32._launch_on(stream, 256, 256, (ptr, value, count), 0, None, True)


def _increment_u32(Stream stream not None, ptr, count):
    _load_builtins()
    _k_increment_u32._launch_on(stream, 256, 256, (ptr, count), 0, None, True)


def _compile(source, options=(), name_expressions=(), arch=None):
    """Compile without loading: ``(image bytes, is_ptx, {expression: lowered name})``.
    The image of PTX ends with its NUL.  Needs no GPU when ``arch`` is given."""
    return _compile_cached(source, options, name_expressions, arch)
