# Devices: counting, selecting, argument parsing and per-device caches.

cdef enum:
    _MAX_DEVICES = 64

import threading
import time as _time

cdef object _MISSING = object()
cdef int _device_count = -1                     # cached: fixed for the process
cdef int _prio_least[_MAX_DEVICES]
cdef int _prio_greatest[_MAX_DEVICES]
cdef bint _prio_known[_MAX_DEVICES]


cdef str _runtime_version_str():
    cdef int v = 0
    cudaRuntimeGetVersion(&v)
    return f"{v // 1000}.{(v % 1000) // 10}"


def runtime_version():
    """The CUDA runtime version this package was built with, e.g. ``13000``."""
    cdef int v = 0
    check(cudaRuntimeGetVersion(&v))
    return v


def driver_version():
    """The CUDA version the installed driver supports, e.g. ``13000``; 0 without a driver."""
    cdef int v = 0
    cdef cudaError_t err
    with nogil:
        err = cudaDriverGetVersion(&v)
    if err != cudaSuccess:
        cudaGetLastError()
        return 0
    return v


cdef int _count_devices() except -1:
    global _device_count
    cdef int n = 0
    cdef cudaError_t err
    if _device_count >= 0:
        return _device_count
    guard()
    with nogil:
        err = cudaGetDeviceCount(&n)
    if err == cudaErrorNoDevice or err == cudaErrorInsufficientDriver:
        # No driver or no GPU is a valid answer here: zero devices.
        cudaGetLastError()
        n = 0
    else:
        check(err)
    _device_count = n
    return n


def device_count():
    """Number of CUDA devices visible to this process (0 without a driver or GPU)."""
    return _count_devices()


cdef int _require_device() except -1:
    """Raise the plain-words CudaError when there is no usable GPU."""
    cdef int n
    cdef int dummy = 0
    cdef cudaError_t err
    n = _count_devices()
    if n > 0:
        return n
    with nogil:
        err = cudaGetDeviceCount(&dummy)
    if err == cudaSuccess:
        err = cudaErrorNoDevice
    return _raise_cuda_error(err)


cdef inline int _current_device() except -1 nogil:
    cdef int dev = 0
    guard()
    check(cudaGetDevice(&dev))
    return dev


cdef int _check_device_index(int dev, str argname) except -1:
    cdef int n = _require_device()
    if dev < 0 or dev >= n:
        raise ValueError(
            f"{argname}={dev} is out of range: this process sees {n} CUDA device(s), "
            f"numbered 0 to {n - 1}")
    return dev


cdef int _resolve_device(object device, str argname="device") except -2:
    """Turn a user's device argument into an index; -1 never comes back."""
    cdef object idx
    if device is None:
        _require_device()
        return _current_device()
    if isinstance(device, bool):
        raise TypeError(f"{argname} must be an int, 'cuda:N' or a device object, not bool")
    if isinstance(device, int):
        return _check_device_index(device, argname)
    if isinstance(device, str):
        text = device.strip().lower()
        if text == "cuda" or text == "gpu":
            _require_device()
            return _current_device()
        for prefix in ("cuda:", "gpu:"):
            if text.startswith(prefix) and text[len(prefix):].isdigit():
                return _check_device_index(int(text[len(prefix):]), argname)
        raise ValueError(f"{argname}={device!r} is not a CUDA device string like 'cuda:0'")
    if isinstance(device, Device):
        return _check_device_index((<Device>device)._id, argname)
    # torch.device(type='cuda', index=...) and friends
    kind = getattr(device, "type", None)
    if kind is not None and isinstance(kind, str) and kind not in ("cuda", "gpu"):
        raise ValueError(f"{argname}={device!r} is not a CUDA device")
    for attr in ("index", "device_id"):
        idx = getattr(device, attr, _MISSING)
        # list.index and friends are methods, not device indices
        if idx is not _MISSING and not callable(idx):
            if idx is None:
                _require_device()
                return _current_device()
            if isinstance(idx, int) and not isinstance(idx, bool):
                return _check_device_index(idx, argname)
            raise TypeError(f"{argname}.{attr} must be an int, got {type(idx).__name__}")
    raise TypeError(
        f"{argname} must be None, an int, a string like 'cuda:0', or an object with an "
        f"integer .index or .device_id, not {type(device).__name__}")


cdef int _priority_range(int dev, int* least, int* greatest) except -1:
    """The device's stream priority range, cached (it is fixed per device)."""
    cdef int cur
    if dev < 0 or dev >= _MAX_DEVICES:
        raise ValueError(f"device {dev} is beyond the {_MAX_DEVICES} devices supported")
    if not _prio_known[dev]:
        cur = _current_device()
        with nogil:
            if cur != dev:
                check(cudaSetDevice(dev))
            try:
                check(cudaDeviceGetStreamPriorityRange(&_prio_least[dev], &_prio_greatest[dev]))
            finally:
                if cur != dev:
                    check(cudaSetDevice(cur))
        _prio_known[dev] = True
    least[0] = _prio_least[dev]
    greatest[0] = _prio_greatest[dev]
    return 0


def stream_priority_range(device=None):
    """``(least, greatest)`` stream priorities of a device, as CUDA numbers them.

    Lower numbers are higher priorities, so ``greatest <= least`` (for example
    ``(0, -5)``).
    """
    cdef int least, greatest
    _priority_range(_resolve_device(device), &least, &greatest)
    return (least, greatest)


def get_device():
    """The calling thread's current CUDA device."""
    _require_device()
    return _current_device()


def set_device(device):
    """Make ``device`` the calling thread's current CUDA device."""
    cdef int dev = _resolve_device(device)
    with nogil:
        check(cudaSetDevice(dev))


cdef int _device_synchronize_on(int dev) except -1:
    cdef int cur = _current_device()
    with nogil:
        if cur != dev:
            check(cudaSetDevice(dev))
        try:
            check(cudaDeviceSynchronize())
        finally:
            if cur != dev:
                check(cudaSetDevice(cur))
    return 0


def _device_sync_worker(int dev, list outcome, object finished):
    try:
        _device_synchronize_on(dev)
    except BaseException as exc:
        outcome.append(exc)
    finally:
        finished.set()


def synchronize_device(device=None, timeout=None):
    """Wait for all work on a device (default: the current one) to finish.

    ``cudaDeviceSynchronize`` cannot be interrupted, so it runs on a helper
    thread while this one waits with the GIL released and Ctrl-C working.
    Returns True when done; with ``timeout`` in seconds, False if it expired
    first (the device keeps working either way).
    """
    cdef int dev = _resolve_device(device)
    cdef double seconds = -1
    if timeout is not None:
        seconds = timeout
        if seconds != seconds or seconds < 0:
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
    guard()
    outcome = []
    finished = threading.Event()
    worker = threading.Thread(target=_device_sync_worker, args=(dev, outcome, finished),
                              name="streams-device-sync", daemon=True)
    worker.start()
    # Event.wait(timeout) is interruptible; bounded slices keep Ctrl-C
    # responsive on every platform.
    deadline = None if seconds < 0 else _time.monotonic() + seconds
    while not finished.wait(0.05 if deadline is None else
                            max(0.0, min(0.05, deadline - _time.monotonic()))):
        if deadline is not None and _time.monotonic() >= deadline:
            return False
    if outcome:
        raise outcome[0]
    return True


@cython.final
cdef class Device:
    """A CUDA device; ``with Device(1):`` makes it current and restores the previous one.

    Nested and re-entered ``with`` blocks restore correctly: each entry
    remembers what it replaced.
    """
    cdef int _id
    cdef list _saved

    def __init__(self, device=None):
        self._id = _resolve_device(device)
        self._saved = []

    @property
    def device_id(self):
        return self._id

    @property
    def index(self):
        return self._id

    @property
    def name(self):
        cdef cudaDeviceProp prop
        with nogil:
            check(cudaGetDeviceProperties(&prop, self._id))
        return (<bytes>prop.name).decode("utf-8", "replace")

    @property
    def compute_capability(self):
        cdef int major = 0, minor = 0
        with nogil:
            check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, self._id))
            check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, self._id))
        return (major, minor)

    def attribute(self, int attr):
        """Raw ``cudaDeviceGetAttribute`` for an integer ``cudaDeviceAttr``."""
        cdef int value = 0
        with nogil:
            check(cudaDeviceGetAttribute(&value, <cudaDeviceAttr>attr, self._id))
        return value

    def synchronize(self):
        synchronize_device(self._id)

    def use(self):
        set_device(self._id)
        return self

    def __enter__(self):
        cdef int prev = _current_device()
        self._saved.append(prev)
        if prev != self._id:
            with nogil:
                check(cudaSetDevice(self._id))
        return self

    def __exit__(self, *exc):
        cdef int prev = self._saved.pop()
        with nogil:
            check(cudaSetDevice(prev))
        return False

    def __index__(self):
        return self._id

    def __int__(self):
        return self._id

    def __eq__(self, other):
        if isinstance(other, Device):
            return self._id == (<Device>other)._id
        return NotImplemented

    def __hash__(self):
        return hash(("streams.Device", self._id))

    def __repr__(self):
        return f"<streams.Device {self._id}>"
