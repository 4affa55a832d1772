# Argument checks shared by every module: each turns a Python value into the
# C value a CUDA call takes, or raises TypeError/ValueError naming the
# argument.  No CUDA calls here.
from libc.stdint cimport uintptr_t

from streams.cudart cimport dim3

# Nanoseconds to wait, or -1 for no limit (None, or an infinite timeout).
cdef long long as_timeout_ns(object timeout) except -2
cdef size_t as_nbytes(object value, str argname) except? 0
# A raw integer handle or address that fits a pointer.
cdef uintptr_t as_pointer_int(object value, str argname) except? 0
cdef object as_enum(object cls, object value, str argname)
cdef int as_dim3(object value, dim3* out, str argname) except -1
cdef int as_int(object value, str argname) except? -1
