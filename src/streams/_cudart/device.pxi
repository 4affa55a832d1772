# Versions and device management, part of streams._cudart (_cudart.pyx
# includes it).

cdef str _runtime_version_str():
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return _version_str(runtime)


def runtime_version():
    """The CUDA runtime version this package was built with, e.g. ``13000``."""
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return runtime


def driver_version():
    """The CUDA version the installed driver supports, e.g. ``13000``; 0 without a driver."""
    cdef int driver = 0, runtime = 0
    _versions(&driver, &runtime)
    return driver


cdef int get_device_count() except -1 nogil:
    cdef int n = 0
    cdef cudaError_t err
    guard()
    err = cudaGetDeviceCount(&n)
    if err == cudaErrorNoDevice or err == cudaErrorInsufficientDriver:
        cudaGetLastError()
        return 0
    check(err)
    return n


cdef int no_device_error() except -1:
    """Raise the plain-words CudaError of a process that sees no usable GPU."""
    cdef int n = 0
    cdef cudaError_t err
    with nogil:
        err = cudaGetDeviceCount(&n)
    if err == cudaSuccess:
        err = cudaErrorNoDevice
    return raise_cuda_error(err)


cdef int get_device() except -1 nogil:
    cdef int dev = 0
    guard()
    check(cudaGetDevice(&dev))
    return dev


cdef int set_device(int dev) except -1 nogil:
    guard()
    return check(cudaSetDevice(dev))


cdef int device_get_attribute(int* value, cudaDeviceAttr attr, int dev) except -1 nogil:
    guard()
    return check(cudaDeviceGetAttribute(value, attr, dev))


cdef int device_get_name(char* out, size_t size, int dev) except -1 nogil:
    cdef cudaDeviceProp prop
    cdef size_t i
    guard()
    check(cudaGetDeviceProperties(&prop, dev))
    for i in range(size - 1):
        out[i] = prop.name[i]
        if prop.name[i] == 0:
            break
    out[size - 1] = 0
    return 0


cdef int device_get_stream_priority_range(int* least, int* greatest) except -1 nogil:
    guard()
    return check(cudaDeviceGetStreamPriorityRange(least, greatest))


cdef int ctx_reset_persisting_l2_cache() except -1 nogil:
    guard()
    return check(cudaCtxResetPersistingL2Cache())


cdef unsigned long long device_synchronize_request(int dev) except 0 nogil:
    cdef cudaError_t err = cudaSuccess
    cdef unsigned long long ticket
    guard()
    ticket = streams_devsync_request(dev, &err)
    if ticket == 0:
        check(err)
        with gil:
            raise RuntimeError("could not start the device-synchronize helper thread")
    return ticket


cdef int device_synchronize_wait(int dev, unsigned long long ticket, long long slice_ns,
                                 long long* in_flight_ns) except -1 nogil:
    cdef cudaError_t err = cudaSuccess
    cdef int done = streams_devsync_wait(dev, ticket, slice_ns, &err, in_flight_ns)
    if done:
        check(err)
    return done


cdef str _version_str(int v):
    return f"{v // 1000}.{(v % 1000) // 10}"


# Asked once: neither changes while the process lives.  Threads that race
# the first ask store the same values (an int each: no torn read; one
# seen unset is asked again).
cdef int _driver_version = -1
cdef int _runtime_version = -1


cdef int _versions(int* driver, int* runtime) except -1:
    global _driver_version, _runtime_version
    cdef int d = 0, r = 0
    # Atomic loads and stores (streams_flag_*): plain ones racing are a
    # data race to the C compiler, even where no value can tear.
    d = streams_flag_get(&_driver_version)
    r = streams_flag_get(&_runtime_version)
    if r < 0 or d < 0:
        with nogil:
            if cudaDriverGetVersion(&d) != cudaSuccess:
                cudaGetLastError()
                d = 0
            cudaRuntimeGetVersion(&r)
        streams_flag_set(&_driver_version, d)
        streams_flag_set(&_runtime_version, r)
    driver[0] = d
    runtime[0] = r
    return 0
