# Other libraries' streams and events, and raw stream ints: the one place
# that reads them and decides what may reach CUDA (streams._foreign).  No
# CUDA call here but cudaStreamGetDevice (foreign_stream_device).
from libc.stdint cimport uintptr_t

# Handles of CUDA's special streams (macros in driver_types.h): the null
# stream (which this package, built without per-thread default streams,
# treats as the legacy one), the legacy and the per-thread default stream.
cdef enum:
    STREAM_NULL = 0
    STREAM_LEGACY = 1
    STREAM_PER_THREAD = 2

# A raw stream or event handle above the special streams that cannot be one
# (below the lowest mapped address, unaligned, beyond the user address
# space) raises ValueError naming `argname`, before CUDA sees it.
cdef int check_stream_handle(uintptr_t h, str argname) except -1
cdef int check_event_handle(uintptr_t h, str argname) except -1

# The stream a protocol's stream int names.  Both return 0 for "no
# synchronization" (DLPack's -1; CAI's None), 1 with `out` set (1 legacy,
# 2 per-thread, or a checked handle); 0 is refused (both specs forbid it as
# ambiguous), as is anything from_handle would refuse.  `stream` of
# dlpack_stream_arg may also be a streams.Stream (the package's own callers).
cdef int dlpack_stream_arg(object stream, str argname, uintptr_t* out) except -1
cdef int cai_stream(object stream, str argname, uintptr_t* out) except -1

# The handle of another library's stream `obj`, checked (no CUDA call).
# With trust_ptr (Stream.from_external: the caller says it is a stream),
# a .cuda_stream or .ptr of any object is read too.
cdef int foreign_stream(object obj, str argname, uintptr_t* out, bint trust_ptr) except -1
# The device of foreign stream `obj` of handle `h`; -1 for 0, 1 and 2.
cdef int foreign_stream_device(object obj, uintptr_t h) except -2
# The handle of another library's event, checked; 0 for a PyTorch event
# never recorded (no CUDA event yet).
cdef uintptr_t foreign_event(object obj, str argname) except? 1
# The stream a PyTorch tensor's producer works on: torch's current stream
# on the tensor's device (what its own __dlpack__ orders after), set in
# `out`; 0 when `obj` is no CUDA tensor of PyTorch.
cdef int framework_array_stream(object obj, uintptr_t* out) except -1

# ---- handles of other libraries' code objects (Kernel.from_handle) ----
# The int a raw handle argument stands for: an int, a ctypes pointer
# (.value), or a cuda-bindings object (its __int__; getPtr() is the address
# of its storage, not the handle); checked as an
# address (nonzero, aligned, in the user address space), else TypeError or
# ValueError naming `argname`.
cdef uintptr_t foreign_code_handle(object value, str argname) except? 0
