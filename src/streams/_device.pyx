# cython: language_level=3
"""Devices: ``Device``, the current device, device-wide synchronization."""
import threading as _threading

from cpython.exc cimport PyErr_CheckSignals

cimport streams._cudart as rt
cimport streams._nvtx as nvtx
from streams._args cimport as_timeout_ns
from streams._platform cimport streams_flag_get, streams_flag_set, streams_now_ns
from streams.cudart cimport cudaDeviceAttr, cudaDevAttrComputeCapabilityMajor, \
    cudaDevAttrComputeCapabilityMinor

# streams.checker: the race checker's switch (one load and one branch while off).
cdef const int* _checking = nvtx.check_switch()

cdef object _MISSING = object()
cdef int _device_count = -1                     # cached: fixed for the process
cdef int _prio_least[rt.STREAMS_MAX_DEVICES]
cdef int _prio_greatest[rt.STREAMS_MAX_DEVICES]
# Set (releasing) after the two values of the device: a thread that reads
# it set (acquiring) reads the range, not the zeros before it.  Racing
# first calls write the same values.
cdef int _prio_known[rt.STREAMS_MAX_DEVICES]
cdef object _tls = _threading.local()           # .device_stack: saved devices of `with Device`


cdef int _count_devices() except -1:
    global _device_count
    cdef int n
    if _device_count >= 0:
        return _device_count
    with nogil:
        n = rt.get_device_count()
    _device_count = n
    return n


def device_count():
    """Number of CUDA devices visible to this process (0 without a driver or GPU)."""
    return _count_devices()


cdef int require_device() except -1:
    cdef int n = _count_devices()
    if n > 0:
        return n
    return rt.no_device_error()


cdef int current_device() except -1:
    cdef int dev
    if require_device() == 1:
        return 0    # the one visible device is always the current one
    with nogil:
        dev = rt.get_device()
    return dev


cdef int check_device_index(int dev, str argname) except -1:
    cdef int n = require_device()
    if dev < 0 or dev >= n:
        raise ValueError(
            f"{argname}={dev} is out of range: this process sees {n} CUDA device(s), "
            f"numbered 0 to {n - 1}")
    return dev


cdef int resolve_device(object device, str argname="device") except -1:
    cdef object idx
    if device is None:
        return current_device()
    if isinstance(device, bool):
        raise TypeError(f"{argname} must be an int, 'cuda:N' or a device object, not bool")
    if isinstance(device, int):
        if device < -0x80000000 or device > 0x7FFFFFFF:
            raise ValueError(f"{argname}={device} is out of range")
        return check_device_index(device, argname)
    if isinstance(device, str):
        text = device.strip().lower()
        if text == "cuda" or text == "gpu":
            return current_device()
        for prefix in ("cuda:", "gpu:"):
            if text.startswith(prefix) and text[len(prefix):].isdigit() \
                    and len(text) - len(prefix) < 10:
                return check_device_index(int(text[len(prefix):]), argname)
        raise ValueError(f"{argname}={device!r} is not a CUDA device string like 'cuda:0'")
    if isinstance(device, Device):
        return check_device_index((<Device>device)._id, argname)
    # torch.device(type='cuda', index=...) and friends
    kind = getattr(device, "type", None)
    if kind is not None and isinstance(kind, str) and kind not in ("cuda", "gpu"):
        raise ValueError(f"{argname}={device!r} is not a CUDA device")
    for attr in ("index", "device_id"):
        idx = getattr(device, attr, _MISSING)
        # list.index and friends are methods, not device indices
        if idx is not _MISSING and not callable(idx):
            if idx is None:
                return current_device()
            if isinstance(idx, int) and not isinstance(idx, bool):
                if idx < -0x80000000 or idx > 0x7FFFFFFF:
                    raise ValueError(f"{argname}.{attr}={idx} is out of range")
                return check_device_index(idx, argname)
            raise TypeError(f"{argname}.{attr} must be an int, got {type(idx).__name__}")
    raise TypeError(
        f"{argname} must be None, an int, a string like 'cuda:0', or an object with an "
        f"integer .index or .device_id, not {type(device).__name__}")


cdef inline int _single_device() except -1 nogil:
    global _device_count
    if _device_count < 0:
        _device_count = rt.get_device_count()   # racing threads store the same
    return _device_count == 1


cdef int enter_device(DeviceScope* scope, int dev) except -1 nogil:
    cdef int cur
    scope.previous = -1
    scope.target = dev
    # With one visible device it is always the current one: no cudaGetDevice
    # on the launch path.
    if dev < 0 or _single_device():
        return 0
    cur = rt.get_device()
    if cur != dev:
        rt.set_device(dev)
        scope.previous = cur
    return 0


cdef int exit_device(DeviceScope* scope) except -1 nogil:
    cdef int prev = scope.previous
    if prev < 0:
        return 0
    scope.previous = -1
    return rt.set_device(prev)


cdef int priority_range(int dev, int* least, int* greatest) except -1:
    """The device's stream priority range, cached (it is fixed per device)."""
    cdef DeviceScope scope
    cdef int lo = 0, hi = 0
    if dev < 0 or dev >= rt.STREAMS_MAX_DEVICES:
        raise ValueError(f"device {dev} is beyond the {rt.STREAMS_MAX_DEVICES} devices supported")
    if not streams_flag_get(&_prio_known[dev]):
        with nogil:
            enter_device(&scope, dev)
            try:
                rt.device_get_stream_priority_range(&lo, &hi)
            finally:
                exit_device(&scope)
        _prio_least[dev], _prio_greatest[dev] = lo, hi
        streams_flag_set(&_prio_known[dev], True)
    least[0] = _prio_least[dev]
    greatest[0] = _prio_greatest[dev]
    return 0


def stream_priority_range(device=None):
    """``(least, greatest)`` stream priorities of a device, as CUDA numbers them.

    Lower numbers are higher priorities, so ``greatest <= least`` (for example
    ``(0, -5)``).
    """
    cdef int least, greatest
    priority_range(resolve_device(device), &least, &greatest)
    return (least, greatest)


def get_device():
    """The calling thread's current CUDA device."""
    return current_device()


def set_device(device):
    """Make ``device`` the calling thread's current CUDA device."""
    cdef int dev = resolve_device(device)
    with nogil:
        rt.set_device(dev)


cdef int _peer_index(object peer) except -1:
    # None would name the current device, never a useful peer.
    if peer is None:
        raise ValueError("peer is required (an int, 'cuda:N' or a device object), not None")
    return resolve_device(peer, "peer")


def can_access_peer(device, peer):
    """Whether ``device`` can map memory of ``peer`` (``cudaDeviceCanAccessPeer``).

    False when both name the same device: CUDA does not count a device as
    its own peer (its own memory needs no peer access).
    """
    cdef int other = _peer_index(peer)
    cdef int dev = resolve_device(device, "device")
    cdef int can
    with nogil:
        can = rt.device_can_access_peer(dev, other)
    return can == 1


cdef int _peer_access(object peer, object device, bint enable) except -1:
    cdef int other = _peer_index(peer)
    cdef int dev = resolve_device(device, "device")
    cdef DeviceScope scope
    cdef int changed
    if other == dev:
        raise ValueError(f"peer={other} is the device itself: a device is not its own peer")
    # CUDA grants or withdraws the access of the current device.
    with nogil:
        enter_device(&scope, dev)
        try:
            changed = rt.device_set_peer_access(other, enable)
        finally:
            exit_device(&scope)
    return changed


def enable_peer_access(peer, device=None):
    """Let ``device`` (default: the current one) access memory of ``peer``
    directly (``cudaDeviceEnablePeerAccess``, made with ``device`` current).

    Returns True when this call enabled it, False when it already was.  The
    access is one-way and lasts for the process (or until
    :func:`disable_peer_access`).  It covers memory from ``cudaMalloc``
    and managed memory, not stream-ordered allocations: a
    :class:`DeviceBuffer` is copied to another device with
    :func:`memcpy_async` or :func:`memcpy_peer_async`, which need no peer
    access.  CudaError when the two devices cannot be peers (see
    :func:`can_access_peer`).
    """
    return _peer_access(peer, device, True) == 1


def disable_peer_access(peer, device=None):
    """Withdraw what :func:`enable_peer_access` granted
    (``cudaDeviceDisablePeerAccess``); True when it was enabled, False when not."""
    return _peer_access(peer, device, False) == 1


# A device synchronize that has run this long without finishing means the
# device is busy: an idle device answers in microseconds.  Waits with a
# shorter timeout (timeout=0: "is it idle?") still give it that long.
cdef long long _IDLE_ANSWER_NS = 200000


cdef int device_synchronize(int dev, long long timeout_ns) except -1:
    cdef unsigned long long ticket
    cdef long long start, in_flight = 0
    cdef int done
    with nogil:
        ticket = rt.device_synchronize_request(dev)
        start = streams_now_ns()
    while True:
        with nogil:
            done = rt.device_synchronize_wait(dev, ticket, WAIT_SLICE_NS, &in_flight)
        if done:
            # Whatever gone graph executables kept for their replays can
            # go now (rt.park).
            rt.drain_deferred()
            return 1
        PyErr_CheckSignals()
        if timeout_ns >= 0:
            now = streams_now_ns()
            # Timed out once the deadline passed and the synchronize that
            # answers us had its chance, or when it never started (one
            # started earlier for another caller is still running: busy).
            if now - start >= timeout_ns and (
                    in_flight >= _IDLE_ANSWER_NS or now - start >= timeout_ns + 10 * WAIT_SLICE_NS):
                return 0


def synchronize_device(device=None, timeout=None):
    """Wait for all work on a device (default: the current one) to finish.

    ``cudaDeviceSynchronize`` cannot be interrupted, so a helper thread (one
    per device, shared by all callers) makes the call while this thread
    waits with the GIL released and Ctrl-C working.  Returns True when done;
    with ``timeout`` in seconds, False if it expired first (the device keeps
    working either way).  An idle device answers True even to
    ``timeout=0``.
    """
    cdef long long timeout_ns = as_timeout_ns(timeout)
    cdef int dev = resolve_device(device)
    return _synchronized(device_synchronize(dev, timeout_ns) == 1)


cdef bint _synchronized(bint done) except -1:
    # What the race checker hears of a device synchronize that finished.
    if done and streams_flag_get(_checking) != 0:
        nvtx.check_hooks().sync_device()
    return done


cdef list _device_stack():
    try:
        return _tls.device_stack
    except AttributeError:
        _tls.device_stack = []
        return _tls.device_stack


cdef class Device:
    """A CUDA device; ``with Device(1):`` makes it current and restores the previous one.

    Nested and re-entered ``with`` blocks restore correctly, also when
    several threads share one Device object: what each entry replaced is
    kept per thread.
    """

    def __init__(self, device=None):
        self._id = resolve_device(device)

    def __reduce__(self):
        return (Device, (self._id,))

    @property
    def device_id(self):
        return self._id

    @property
    def index(self):
        return self._id

    @property
    def name(self):
        cdef char buf[256]
        with nogil:
            rt.device_get_name(buf, sizeof(buf), self._id)
        return (<bytes>buf).decode("utf-8", "replace")

    @property
    def compute_capability(self):
        cdef int major = 0, minor = 0
        with nogil:
            rt.device_get_attribute(&major, cudaDevAttrComputeCapabilityMajor, self._id)
            rt.device_get_attribute(&minor, cudaDevAttrComputeCapabilityMinor, self._id)
        return (major, minor)

    def attribute(self, attr):
        """Raw ``cudaDeviceGetAttribute`` for an integer ``cudaDeviceAttr``."""
        cdef int value = 0
        cdef int a
        if isinstance(attr, bool) or not isinstance(attr, int):
            raise TypeError(f"attr must be an int cudaDeviceAttr, not {type(attr).__name__}")
        if attr < 0 or attr > 0x7FFFFFFF:
            raise ValueError(f"attr={attr} is not a cudaDeviceAttr")
        a = attr
        with nogil:
            rt.device_get_attribute(&value, <cudaDeviceAttr>a, self._id)
        return value

    def sm_resource(self):
        """The device's SMs as a green-context split sees them: a
        :class:`~streams.SmResource` (``sm_count``, ``min_partition_size``,
        ``alignment``).  NotImplementedError where the driver or runtime
        has no green contexts (:doc:`partitions`)."""
        from streams._green import _sm_resource
        return _sm_resource(self._id)

    def split_sm(self, count, groups=None):
        """Cut the device's SMs into disjoint partitions of at least
        ``count`` SMs each: ``(partitions, remainder)``, a list of
        :class:`~streams.SmPartition` and the SMs left over (None when
        none are).  ``groups`` (None: as many as fit) is how many to make.
        CUDA rounds ``count`` up to its granularity (``sm_resource()``):
        read each partition's ``sm_count``.  A ``count`` or ``groups`` the
        device cannot satisfy raises ValueError naming it."""
        from streams._green import _split_sm
        return _split_sm(self._id, count, groups)

    def synchronize(self, timeout=None):
        """Wait for all work on this device; see :func:`synchronize_device`."""
        return _synchronized(device_synchronize(self._id, as_timeout_ns(timeout)) == 1)

    def use(self):
        """Make this device current (no restore)."""
        with nogil:
            rt.set_device(self._id)
        return self

    def __enter__(self):
        cdef int prev
        with nogil:
            prev = rt.get_device()
            if prev != self._id:
                rt.set_device(self._id)
        # Saved only once the switch worked: a failed __enter__ has no __exit__.
        _device_stack().append(prev)
        return self

    def __exit__(self, *exc):
        cdef int prev = _device_stack().pop()
        with nogil:
            rt.set_device(prev)
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
