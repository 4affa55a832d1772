# Errors: one checker for every CUDA return code, one exception type.

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


class CudaError(RuntimeError):
    """A CUDA runtime call failed.

    ``code`` is the numeric ``cudaError_t``, ``name`` its enumerator name
    (``"cudaErrorInvalidResourceHandle"``) and ``message`` the explanation.
    Instances pickle and compare by these three fields.
    """

    def __init__(self, code, name=None, message=None):
        code = int(code)
        if name is None:
            name = _error_name(code)
        if message is None:
            message = _error_message(code)
        super().__init__(code, name, message)
        self.code = code
        self.name = name
        self.message = message

    def __str__(self):
        return f"{self.name}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.message))

    def __eq__(self, other):
        if not isinstance(other, CudaError):
            return NotImplemented
        return (self.code, self.name, self.message) == (other.code, other.name, other.message)

    __hash__ = RuntimeError.__hash__


class HostCallbackError(RuntimeError):
    """A Python host callback enqueued on a stream raised.

    Raised by the stream's next ``synchronize()`` (and by ``Graph`` replays'
    owners); ``__cause__`` is the first exception the callback raised.  Every
    exception is also reported through ``sys.unraisablehook`` when it happens.
    """


cdef str _error_name(int code):
    # cudaGetErrorName needs neither a driver nor a device.
    return (<bytes>cudaGetErrorName(<cudaError_t>code)).decode("ascii", "replace")


cdef str _error_message(int code):
    cdef str text = (<bytes>cudaGetErrorString(<cudaError_t>code)).decode("utf-8", "replace")
    if code == <int>cudaErrorInsufficientDriver:
        return ("no NVIDIA driver found, or the installed driver is older than the CUDA "
                f"{_runtime_version_str()} runtime this package was built with "
                f"(CUDA says: {text})")
    if code == <int>cudaErrorNoDevice:
        return f"no CUDA device: the NVIDIA driver sees no GPU (CUDA says: {text})"
    return text


cdef int _raise_cuda_error(cudaError_t err) except -1:
    # Reset the runtime's per-thread last error so that it does not leak
    # into a later, unrelated cudaGetLastError().
    cudaGetLastError()
    raise CudaError(<int>err)


cdef inline int check(cudaError_t err) except -1 nogil:
    """Raise CudaError for anything but cudaSuccess."""
    global streams_cuda_touched
    streams_cuda_touched = 1
    if err == cudaSuccess:
        return 0
    with gil:
        return _raise_cuda_error(err)


cdef int _raise_guard(int state) except -1:
    if state == 1:
        raise RuntimeError(
            "CUDA calls are not allowed inside a host callback (CUDA forbids them there and "
            "they can deadlock); do the work after synchronize(), or enqueue it from another "
            "thread")
    raise RuntimeError(
        "this process was forked after CUDA was initialised in its parent; CUDA cannot be "
        "used in the child (use the 'spawn' or 'forkserver' start method)")


cdef inline bint _dealloc_may_call_cuda() noexcept:
    """Whether a destructor may release its CUDA handle now: not once the
    interpreter is shutting down (Python and the runtime are being torn
    down), not in a forked child nor inside a host callback (CUDA forbids
    calls there).  Otherwise the handle is left to the process's end."""
    return (not streams_is_shutting_down() and not streams_py_finalizing()
            and streams_guard_state() == 0)


cdef inline int guard() except -1 nogil:
    """Refuse CUDA calls where CUDA forbids them (host callbacks, forked children)."""
    cdef int state = streams_guard_state()
    if state == 0:
        return 0
    with gil:
        return _raise_guard(state)
