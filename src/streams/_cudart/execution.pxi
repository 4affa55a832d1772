# Execution control: host functions, function attributes, kernel launches;
# part of streams._cudart (_cudart.pyx includes it).

# ---- host functions ---------------------------------------------------------------------

cdef void set_dispatcher(dispatch_fn fn) noexcept:
    global streams_dispatch
    streams_dispatch = <streams_dispatch_fn>fn


cdef int _ticket_failed(unsigned long long ticket, cudaError_t err) except -1 nogil:
    # Not enqueued: the slot is free again, the payload still the caller's.
    streams_ticket_take(ticket)
    return check(err)


cdef unsigned long long _ticket(void* payload) except 0 nogil:
    cdef unsigned long long ticket = streams_ticket_new(payload)
    if ticket == 0:
        with gil:
            raise MemoryError("no slot left for a one-shot host function")
    return ticket


# The driver's host-function launch with a sync mode (CUDA 13.1's ABI of
# cuLaunchHostFunc), resolved at first use; NULL until then.
cdef void* _host_fn_v2 = NULL


cdef int _raise_no_sync_mode(int driver, cudaError_t err) except -1:
    cdef int runtime = 0
    cudaGetLastError()
    _versions(&driver, &runtime)
    raise NotImplementedError(
        "sync_mode='spin_wait' needs a driver for CUDA 13.1 or newer and streams built "
        "against a CUDA 12.5 or newer runtime (cudaGetDriverEntryPointByVersion; the "
        f"spin-wait host function is the driver's cuLaunchHostFunc at ABI 13010): this "
        f"driver supports CUDA {_version_str(driver)}, this build uses the CUDA "
        f"{_version_str(runtime)} runtime (CUDA said: {error_name(<int>err)})")


cdef int check_host_func_sync_mode(int sync_mode) except -1:
    global _host_fn_v2
    cdef int driver = 0, runtime = 0
    cdef void* fn = NULL
    cdef cudaError_t err = cudaSuccess
    if sync_mode == 0 or streams_ptr_load(&_host_fn_v2) != NULL:
        return 0
    if sync_mode != 1:
        raise ValueError(f"sync_mode must be 0 (blocking) or 1 (spin_wait), got {sync_mode}")
    refuse_forbidden()
    _versions(&driver, &runtime)
    with nogil:
        if driver >= STREAMS_HOST_FN_SYNC_VERSION:
            err = streams_get_driver_entry_at(b"cuLaunchHostFunc", &fn,
                                              STREAMS_HOST_FN_SYNC_VERSION)
        else:
            err = cudaErrorNotSupported
    if err != cudaSuccess or fn == NULL:
        return _raise_no_sync_mode(driver, err)
    # Published atomically: a racing second resolution writes the same.
    streams_ptr_store(&_host_fn_v2, fn)
    return 0


cdef int _launch_host_fn(cudaStream_t h, cudaHostFn_t fn, void* data,
                         int sync_mode) except -1 nogil:
    cdef int dev = 0
    cdef void* v2
    guard()
    if sync_mode == 0:
        return check(cudaLaunchHostFunc(h, fn, data))
    v2 = streams_ptr_load(&_host_fn_v2)
    if v2 == NULL:
        # Every enqueue resolves it first, with the GIL and outside the
        # capture fence; this is the backstop (a read hold of the fence may
        # take the GIL, it never waits for the fence with it).
        with gil:
            check_host_func_sync_mode(sync_mode)
        v2 = streams_ptr_load(&_host_fn_v2)
    # A driver call needs a current context, which a thread gets from the
    # runtime only at its first call that uses the device (see _value_op).
    check(cudaGetDevice(&dev))
    check(cudaSetDevice(dev))
    return check(<cudaError_t>(<streams_launch_host_func_v2_fn>v2)(
        h, fn, data, <unsigned int>sync_mode))


cdef int _launch_one_shot(cudaStream_t h, cudaHostFn_t trampoline, void* payload,
                          int sync_mode) except -1 nogil:
    # `payload` travels as a ticket (shim.h): a capture that took the work
    # item in behind the fence's back calls it at its first replay only.
    cdef unsigned long long ticket = _ticket(payload)
    cdef bint enqueued = False
    try:
        _launch_host_fn(h, trampoline, <void*><uintptr_t>ticket, sync_mode)
        enqueued = True
    finally:
        if not enqueued:
            # The slot is free again, the payload still the caller's.
            streams_ticket_take(ticket)
    return 0


cdef int launch_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil:
    return _launch_one_shot(h, streams_host_fn_trampoline, <void*>payload, sync_mode)


cdef int launch_graph_host_func(cudaStream_t h, PyObject* payload, int sync_mode) except -1 nogil:
    return _launch_host_fn(h, streams_graph_host_fn_trampoline, <void*>payload, sync_mode)


cdef int launch_native_host_func(cudaStream_t h, host_fn fn, void* data, PyObject* keep,
                                 int sync_mode) except -1 nogil:
    cdef streams_native_call* record
    cdef bint enqueued = False
    if keep == NULL:
        # Nothing to keep: exactly the C call (the floor of the benchmark).
        return _launch_host_fn(h, <cudaHostFn_t>fn, data, sync_mode)
    record = streams_native_call_new(<streams_host_fn_t>fn, data, keep)
    if record == NULL:
        with gil:
            raise MemoryError()
    # Counted before the launch: the trampoline may count it done at once.
    streams_count(STREAMS_CNT_NATIVE_CALL_ENQUEUED)
    try:
        _launch_one_shot(h, streams_native_host_fn_trampoline, <void*>record, sync_mode)
        enqueued = True
    finally:
        if not enqueued:
            free(record)     # the reference stays the caller's
            streams_count(STREAMS_CNT_NATIVE_CALL_DONE)
    return 0


cdef void producer_enter() noexcept nogil:
    streams_producer_enter()


cdef void producer_leave() noexcept nogil:
    streams_producer_leave()


cdef int call_on_native_thread(PyObject* payload, int count) except -1 nogil:
    if streams_call_on_native_thread(<void*>payload, count) != 0:
        with gil:
            raise OSError("could not start a thread")
    return 0


cdef int stream_add_callback(cudaStream_t h, PyObject* payload) except -1 nogil:
    cdef unsigned long long ticket
    cdef cudaError_t err
    guard()
    ticket = _ticket(<void*>payload)
    err = cudaStreamAddCallback(h, streams_stream_callback_trampoline,
                                <void*><uintptr_t>ticket, 0)
    if err != cudaSuccess:
        return _ticket_failed(ticket, err)
    return 0


def _shutdown():
    """atexit hook: stop callbacks from entering Python, then let those
    already on their way finish (bounded), so that no CUDA thread is left
    waiting for the GIL while the interpreter finalizes."""
    # Release failures still queued (from threads without the GIL) are
    # reported while warnings can still be shown; later releases are
    # skipped at shutdown, so nothing more can fail.
    flush_cleanup_warnings()
    streams_mark_shutting_down()
    with nogil:
        streams_wait_trampolines_idle(2000000000)


# ---- kernels -----------------------------------------------------------------------------

cdef int func_get_attributes(cudaFuncAttributes* out, const void* func) except -1 nogil:
    guard()
    return check(cudaFuncGetAttributes(out, func))


cdef int func_set_attribute(const void* func, cudaFuncAttribute attr,
                            int value) except -1 nogil:
    guard()
    return check(cudaFuncSetAttribute(func, attr, value))


cdef int func_get_param_info(const void* func, size_t index, size_t* offset,
                             size_t* size) except -1 nogil:
    """0 with the parameter's offset and size; 1 past the last parameter;
    2 when this runtime cannot tell (older than CUDA 12.6)."""
    cdef cudaError_t err
    guard()
    err = streams_cudaFuncGetParamInfo(func, index, offset, size)
    if err == cudaSuccess:
        return 0
    cudaGetLastError()
    if err == cudaErrorInvalidValue:
        return 1
    if err == cudaErrorNotSupported:
        return 2
    return check(err)


cdef int launch_kernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                       cudaStream_t s) except -1 nogil:
    guard()
    return check(cudaLaunchKernel(func, grid, block, args, shared, s))


cdef int launch_kernel_ex(const cudaLaunchConfig_t* config, const void* func,
                          void** args) except -1 nogil:
    guard()
    return check(cudaLaunchKernelExC(config, func, args))


cdef int launch_notify(cudaStream_t s, void* node) except -1 nogil:
    cdef unsigned long long ticket
    cdef cudaError_t err
    guard()
    ticket = _ticket(node)
    err = cudaLaunchHostFunc(s, streams_notify_ticket_fn, <void*><uintptr_t>ticket)
    if err != cudaSuccess:
        return _ticket_failed(ticket, err)
    return 0
