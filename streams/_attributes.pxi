# Stream attributes (cudaStreamGet/SetAttribute, cudaStreamCopyAttributes),
# managed-memory attachment and the persisting-L2 reset.

import enum as _enum


class StreamAttribute(_enum.IntEnum):
    """Names for ``Stream.get_attribute``/``set_attribute`` (``cudaStreamAttrID``)."""
    ACCESS_POLICY_WINDOW = cudaStreamAttributeAccessPolicyWindow
    SYNCHRONIZATION_POLICY = cudaStreamAttributeSynchronizationPolicy
    PRIORITY = cudaStreamAttributePriority


class SyncPolicy(_enum.IntEnum):
    """How a host thread waits for this stream (``cudaSynchronizationPolicy``)."""
    AUTO = cudaSyncPolicyAuto
    SPIN = cudaSyncPolicySpin
    YIELD = cudaSyncPolicyYield
    BLOCKING_SYNC = cudaSyncPolicyBlockingSync


class AccessProperty(_enum.IntEnum):
    """L2 access property of a window's hits or misses (``cudaAccessProperty``)."""
    NORMAL = cudaAccessPropertyNormal
    STREAMING = cudaAccessPropertyStreaming
    PERSISTING = cudaAccessPropertyPersisting


class AccessPolicyWindow:
    """An L2 access policy window (``cudaAccessPolicyWindow``).

    ``hit_ratio`` of the accesses to ``[base_ptr, base_ptr + num_bytes)`` get
    ``hit_prop``, the rest ``miss_prop``.
    """
    __slots__ = ("base_ptr", "num_bytes", "hit_ratio", "hit_prop", "miss_prop")

    def __init__(self, base_ptr, num_bytes, hit_ratio=1.0, hit_prop=AccessProperty.PERSISTING,
                 miss_prop=AccessProperty.STREAMING):
        if isinstance(base_ptr, _Buffer):
            base_ptr = base_ptr.ptr
        self.base_ptr = int(_as_handle(base_ptr, "base_ptr"))
        self.num_bytes = int(_as_nbytes(num_bytes, "num_bytes"))
        hit_ratio = float(hit_ratio)
        if not 0.0 <= hit_ratio <= 1.0:
            raise ValueError(f"hit_ratio must be in [0, 1], got {hit_ratio}")
        self.hit_ratio = hit_ratio
        self.hit_prop = _as_enum(AccessProperty, hit_prop, "hit_prop")
        self.miss_prop = _as_enum(AccessProperty, miss_prop, "miss_prop")

    def __eq__(self, other):
        if not isinstance(other, AccessPolicyWindow):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return ("AccessPolicyWindow(base_ptr=0x%x, num_bytes=%d, hit_ratio=%g, hit_prop=%s, "
                "miss_prop=%s)" % (self.base_ptr, self.num_bytes, self.hit_ratio,
                                   self.hit_prop.name, self.miss_prop.name))


cdef object _as_enum(object cls, object value, str argname):
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            pass
    elif not isinstance(value, bool) and isinstance(value, int):
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(repr(m.name.lower()) for m in cls)
    raise ValueError(f"{argname} must be a {cls.__name__} or one of {names}, got {value!r}")


cdef object _stream_get_attribute(Stream stream, object name):
    cdef cudaStreamAttrValue value
    cdef cudaStreamAttrID attr
    attr = <cudaStreamAttrID><int>_as_enum(StreamAttribute, name, "name")
    memset(&value, 0, sizeof(value))
    guard()
    stream._check_open()
    with nogil:
        check(cudaStreamGetAttribute(<cudaStream_t>stream._handle, attr, &value))
    if attr == cudaStreamAttributeAccessPolicyWindow:
        w = value.accessPolicyWindow
        return AccessPolicyWindow(<uintptr_t>w.base_ptr, w.num_bytes, w.hitRatio,
                                  <int>w.hitProp, <int>w.missProp)
    if attr == cudaStreamAttributeSynchronizationPolicy:
        # A stream whose policy was never set reports -1: the device's
        # scheduling flags apply.
        policy = <int>value.syncPolicy
        return SyncPolicy(policy) if policy in SyncPolicy._value2member_map_ else None
    return value.priority


cdef int _stream_set_attribute(Stream stream, object name, object value) except -1:
    cdef cudaStreamAttrValue v
    cdef cudaStreamAttrID attr
    attr = <cudaStreamAttrID><int>_as_enum(StreamAttribute, name, "name")
    memset(&v, 0, sizeof(v))
    if attr == cudaStreamAttributeAccessPolicyWindow:
        if not isinstance(value, AccessPolicyWindow):
            raise TypeError("value for access_policy_window must be an AccessPolicyWindow, "
                            f"not {type(value).__name__}")
        v.accessPolicyWindow.base_ptr = <void*><uintptr_t>value.base_ptr
        v.accessPolicyWindow.num_bytes = value.num_bytes
        v.accessPolicyWindow.hitRatio = value.hit_ratio
        v.accessPolicyWindow.hitProp = <cudaAccessProperty><int>value.hit_prop
        v.accessPolicyWindow.missProp = <cudaAccessProperty><int>value.miss_prop
    elif attr == cudaStreamAttributeSynchronizationPolicy:
        v.syncPolicy = <cudaSynchronizationPolicy><int>_as_enum(SyncPolicy, value, "value")
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"value for priority must be an int, not {type(value).__name__}")
        v.priority = value
    guard()
    stream._check_open()
    with nogil:
        check(cudaStreamSetAttribute(<cudaStream_t>stream._handle, attr, &v))
    return 0


_ATTACH_FLAGS = {"single": cudaMemAttachSingle, "global": cudaMemAttachGlobal,
                 "host": cudaMemAttachHost}


cdef int _stream_attach_mem(Stream stream, object buffer, size_t length, object flags) except -1:
    cdef void* p
    cdef unsigned int f
    try:
        f = _ATTACH_FLAGS[flags]
    except (KeyError, TypeError):
        raise ValueError(f"flags must be one of {sorted(_ATTACH_FLAGS)}, got {flags!r}") from None
    if isinstance(buffer, _Buffer):
        p = (<_Buffer>buffer)._check_ptr()
    else:
        p = <void*>_as_handle(buffer, "buffer")
    guard()
    stream._check_open()
    with nogil:
        check(cudaStreamAttachMemAsync(<cudaStream_t>stream._handle, p, length, f))
    return 0


def reset_persisting_l2_cache():
    """Turn every persisting L2 line back to normal (``cudaCtxResetPersistingL2Cache``)."""
    guard()
    _require_device()
    with nogil:
        check(cudaCtxResetPersistingL2Cache())
