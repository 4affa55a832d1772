# Devices: counting, selecting, argument parsing, and the one way to make a
# device current for a while and put the previous one back.

# The waits' poll slice: how often a wait checks for Ctrl-C and its deadline.
cdef enum:
    WAIT_SLICE_NS = 2000000

cdef struct DeviceScope:
    int previous     # -1 until a switch happened
    int target

# The index a user's device argument names; None is the current device.
cdef int resolve_device(object device, str argname=*) except -1
# The calling thread's current device (CUDA's, after the "no GPU" check).
cdef int current_device() except -1
cdef int require_device() except -1
cdef int check_device_index(int dev, str argname) except -1
cdef int priority_range(int dev, int* least, int* greatest) except -1
# Make `dev` current (a no-op when it is, or when dev < 0); exit_device
# restores what enter_device replaced.
cdef int enter_device(DeviceScope* scope, int dev) except -1 nogil
cdef int exit_device(DeviceScope* scope) except -1 nogil
# Wait for all work on `dev`; 1 done, 0 when `timeout_ns` (>= 0) passed first.
cdef int device_synchronize(int dev, long long timeout_ns) except -1


cdef class Device:
    cdef int _id
