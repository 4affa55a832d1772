# C-level declarations of modules and kernels (streams._launch).  Like
# _stream.pxd, free of CUDA types: a project that cimports streams needs no
# CUDA headers.
from libc.stdint cimport uintptr_t

from streams._handle cimport HandleOwner
from streams._stream cimport Event, LaunchTarget, Stream

cdef enum:
    MAX_KERNEL_ARGS = 64

# What a Kernel is (Kernel._adopted): a kernel of a Module, or one adopted
# with Kernel.from_handle, whose calls are the runtime's (a CUkernel or
# cudaKernel_t) or the driver's (a CUfunction).
cdef enum:
    ADOPTED_NONE = 0
    ADOPTED_KERNEL = 1
    ADOPTED_FUNCTION = 2


cdef class Module(HandleOwner):
    cdef void* _handle           # cudaLibrary_t
    cdef bytes _image            # the driver may read it again when loading lazily
    cdef unsigned long long _devices   # bit d: a kernel of it was launched on device d
    # Set on the stand-in module of an adopted kernel (Kernel.from_handle,
    # no library of its own): the object that owns the kernel's code, kept
    # alive as long as the module is.
    cdef object _owner
    cdef dict _lowered          # from_source's name expressions: their lowered names
    cdef int _destroy(self) except -1 nogil
    cdef void _release(self) noexcept nogil


cdef class Kernel(LaunchTarget):
    cdef void* _func             # cudaKernel_t
    cdef Module _module
    cdef str _name
    cdef int _nsig               # parameters the signature names; -1 without one
    cdef int _kinds[MAX_KERNEL_ARGS]
    cdef int _nparams            # parameters CUDA reports; -1 when it cannot tell
    cdef unsigned short _param_size[MAX_KERNEL_ARGS]
    cdef object _signature_names
    cdef int _adopted            # ADOPTED_NONE, ADOPTED_KERNEL or ADOPTED_FUNCTION
    cdef object __weakref__      # the registry of KernelNodeParams.kernel

    cdef int _check_usable(self) except -1
    cdef void* c_handle(self) noexcept nogil
    # One cudaLaunchKernel with arguments the caller packed (CUDA's layout:
    # an array of pointers to each value) on the stream's device.
    cdef int c_launch(self, Stream stream, unsigned int grid_x, unsigned int grid_y,
                      unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                      unsigned int block_z, void** args, size_t shared_mem) except -1 nogil


# Grid, block, shared memory and the attributes of cudaLaunchKernelExC.
cdef class LaunchConfig:
    cdef unsigned int _grid_dims[3]
    cdef unsigned int _block_dims[3]
    cdef unsigned int _cluster[3]
    cdef size_t _shared_mem
    cdef bint _has_cluster
    cdef bint _cooperative
    cdef bint _pss                 # programmatic stream serialization
    cdef bint _trigger_at_block_start
    cdef bint _has_priority
    cdef int _priority
    cdef int _mem_sync_domain      # -1: not set
    cdef Event _programmatic_event
    cdef Event _completion_event
    cdef bint _has_programmatic_event    # for the nogil launch path
    cdef bint _has_completion_event
    # Whether __init__ published it (its grid, read with acquire ordering).
    cdef bint _initialised_now(self) noexcept nogil


cdef class PreparedLaunch:
    cdef Kernel _kernel
    cdef unsigned int _grid[3]
    cdef unsigned int _block[3]
    cdef unsigned long long _slots[MAX_KERNEL_ARGS]
    cdef void* _ptrs[MAX_KERNEL_ARGS]
    cdef int _nargs
    cdef size_t _shared_mem
    cdef object _keepalive       # the argument objects
    cdef object _users           # streams buffers held in use while it lives
    cdef LaunchConfig _config    # extended launch attributes, or None

    # One cudaLaunchKernel: the hot loop of a cimporter.
    cdef int c_launch(self, Stream stream) except -1 nogil
    cdef int _launch(self, Stream stream) except -1 nogil


# The argument packer shared by launches, prepared launches and graph
# kernel nodes: every value written with its parameter's C type into an
# 8-byte slot; pointer arguments resolved (and checked) as device memory.
cdef struct ArgPack:
    unsigned long long slots[MAX_KERNEL_ARGS]
    void* ptrs[MAX_KERNEL_ARGS]
    void* users[MAX_KERNEL_ARGS]    # streams buffers held in use meanwhile
    int nusers

cdef int pack_args(Kernel kernel, tuple args, ArgPack* pack, Stream consumer,
                   int span_flags=*) except -1
cdef void release_pack(ArgPack* pack) noexcept
# One value packed into slot `i` of `pack` as pack_args packs an argument
# (the caller set pack.nusers = 0 first, and releases the pack): `kind`
# from arg_kind, or -1 to infer it as for a kernel without a signature (a
# numpy scalar's type, a ConditionHandle, else memory as a pointer).  A
# pointer is resolved as device memory (an int must be memory CUDA knows;
# None or 0 is NULL).  `argname` names the value in errors.  Returns the
# kind packed.
cdef int pack_arg(ArgPack* pack, Py_ssize_t i, int kind, object value, str argname) except -1
# The kind of a signature's type name (as get_kernel takes them), or -1.
cdef int arg_kind(object name) except -2
cdef int arg_size(int kind) noexcept
cdef bint arg_is_pointer(int kind) noexcept
cdef bint arg_is_condition(int kind) noexcept
# An object that holds the buffers of a pack in use until it goes.
cdef object keep_pack_users(ArgPack* pack)
# streams.ConditionHandle: the value a conditional node tests, passed to a
# kernel as a 64-bit cudaGraphConditionalHandle.  Graph.create_condition
# (_graph) makes them and fills these fields.
cdef class ConditionHandle:
    cdef unsigned long long _value
    cdef void* _graph            # cudaGraph_t that made it
    cdef object _graph_ref       # weak reference to that Graph
    cdef unsigned int _default
    cdef bint _reset


# Kernel.from_handle with the handle's kind known (is_kernel: a CUkernel or
# cudaKernel_t; else a CUfunction); any_sizes: keep a kernel whose
# parameters include structs (its launches refuse an argument for one).
cdef Kernel adopt_kernel(uintptr_t h, bint is_kernel, object owner, object signature,
                         bint any_sizes)
# The Kernel of an open streams Module that a kernel node names (by its
# CUkernel, or its CUfunction in the current device's primary context), or
# None: what KernelNodeParams.kernel gives back for a node streams built.
cdef Kernel find_node_kernel(void* func, void* kern, object name)
# The one-thread kernels of a timeline semaphore's kernel path
# (streams._semaphore): signal (True) or wait, each taking the counter's
# device address and a value, both 64-bit.  Loaded at first use.
cdef Kernel semaphore_kernel(bint signal)
