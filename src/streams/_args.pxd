# Argument checks shared by every module: each turns a Python value into the
# C value a CUDA call takes, or raises TypeError/ValueError naming the
# argument.  No CUDA calls here.
from libc.stdint cimport uintptr_t

from streams.cudart cimport dim3

# Nanoseconds to wait, or -1 for no limit (None, or an infinite timeout).
cdef long long as_timeout_ns(object timeout) except -2
# An unsigned C value in [0, most], or TypeError/ValueError naming the
# argument ("must be >= 0", "<argname>=<v> <too_big>").  as_nbytes (size_t)
# and as_uint (unsigned int: launch dimensions' and shared memory's type in
# CUDA's driver, which truncates a larger size_t) are its common cases.
cdef unsigned long long as_unsigned(object value, str argname, unsigned long long most,
                                    str too_big) except? 0xFFFFFFFFFFFFFFFF
cdef size_t as_nbytes(object value, str argname) except? 0
cdef unsigned int as_uint(object value, str argname) except? 0
# A raw integer handle or address that fits a pointer.
cdef uintptr_t as_pointer_int(object value, str argname) except? 0
cdef object as_enum(object cls, object value, str argname)
cdef int as_dim3(object value, dim3* out, str argname) except -1
cdef int as_int(object value, str argname) except? -1
# A flag: True or False (or a numpy bool), else TypeError naming the
# argument: a truthy stand-in ('false', 'no', 2, None) would silently turn
# the flag on or off (tests/package/test_arguments.py).  Inline: Stream.launch reads
# wait_producers with it on every launch.
cdef inline bint as_bool(object value, str argname) except -1:
    if value is True:
        return True
    if value is False:
        return False
    return as_bool_other(value, argname)
cdef bint as_bool_other(object value, str argname) except -1
