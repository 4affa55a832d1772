# Green contexts (streams/_green.pyx): a device's SMs in disjoint partitions,
# each with a context whose streams run on its SMs only.
cimport cython

from streams._cudart cimport streams_dev_resource, streams_green_ctx


@cython.final
cdef class SmResource:
    cdef readonly int device
    cdef readonly unsigned int sm_count
    cdef readonly unsigned int min_partition_size
    cdef readonly unsigned int alignment


@cython.final
cdef class SmPartition:
    cdef streams_dev_resource _res      # the driver's CUdevResource of the group
    cdef bint _valid                    # made by Device.split_sm
    cdef readonly int device
    cdef readonly bint remainder
    cdef int _check(self) except -1


# The driver's green context, destroyed when the last holder goes.
@cython.final
cdef class _GreenHandle:
    cdef streams_green_ctx ctx
    cdef int device


@cython.final
cdef class GreenContext:
    cdef _GreenHandle _handle            # None once closed
    cdef readonly SmPartition partition
    cdef int _init_state                 # 0 new, 2 __init__ running, 1 made (atomic)
    cdef int _init(self, object partition, object device) except -1
    cdef _GreenHandle _open(self)
