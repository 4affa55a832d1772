# cython: language_level=3
"""Other libraries' streams and events, and raw stream ints: how each is
read, and which values may reach CUDA.

Every path that takes a stream or event it did not make goes through here:
the ``stream=`` arguments (``as_stream``), the waits and records that use a
foreign handle for the call's duration, ``Stream.from_external`` and
``from_handle``, the stream a DLPack consumer passes to ``__dlpack__`` and
the one an array's ``__cuda_array_interface__`` names.  So one rule decides
what a raw stream int may be, and one set of messages says why not:
CUDA dereferences a stream handle, and a value that cannot be one (0x10,
say) would crash the process there instead of raising.
"""
import sys as _sys
import weakref as _weakref

cimport cython
from libc.stdint cimport uintptr_t

cimport streams._cudart as rt
from streams._args cimport as_pointer_int
from streams._device cimport require_device
from streams._handle cimport HandleOwner
from streams.cudart cimport cudaStream_t

# No valid object lives below the lowest address Linux maps (vm.mmap_min_addr
# is 64 KiB by default), nor at an address that is not pointer-aligned, nor
# above the user half of a 57-bit address space.
cdef uintptr_t _LOWEST_HANDLE = 65536
cdef uintptr_t _HIGHEST_HANDLE = (<uintptr_t>1) << 56


# ---- raw handles ---------------------------------------------------------------------------

cdef int check_stream_handle(uintptr_t h, str argname) except -1:
    if h < _LOWEST_HANDLE or h >= _HIGHEST_HANDLE or h % sizeof(void*) != 0:
        raise ValueError(f"{argname}=0x{h:x} cannot be a CUDA stream handle (handles are "
                         "aligned addresses of the process; the special streams are 0, 1 "
                         "and 2)")
    return 0


cdef int check_event_handle(uintptr_t h, str argname) except -1:
    if h < _LOWEST_HANDLE or h >= _HIGHEST_HANDLE or h % sizeof(void*) != 0:
        raise ValueError(f"{argname}=0x{h:x} cannot be a CUDA event handle (handles are "
                         "aligned addresses of the process)")
    return 0


cdef int _protocol_stream_int(object stream, str argname, str none_means,
                              uintptr_t* out) except -1:
    # The part the DLPack and CAI stream ints share: 1 and 2 are the
    # default streams, 0 is ambiguous (both specs forbid it), anything else
    # must be able to be a handle.
    cdef uintptr_t h
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"{argname} must be None ({none_means}), an int stream handle or a "
                        f"streams.Stream, not {type(stream).__name__}")
    if stream == 0:
        raise ValueError(f"{argname}=0 is ambiguous (use 1 for the legacy default stream or "
                         "2 for the per-thread one)")
    h = as_pointer_int(stream, argname)
    if h > STREAM_PER_THREAD:
        check_stream_handle(h, argname)
    out[0] = h
    return 0


cdef int dlpack_stream_arg(object stream, str argname, uintptr_t* out) except -1:
    # The DLPack rules for CUDA: None is the legacy default stream, -1 asks
    # for no synchronization, 1 legacy, 2 per-thread, above 2 a handle.
    cdef uintptr_t h
    if stream is None:
        out[0] = STREAM_LEGACY
        return 1
    if isinstance(stream, HandleOwner):
        # A streams.Stream (the package's own consumers pass theirs).
        foreign_stream(stream, argname, &h, False)
        out[0] = STREAM_LEGACY if h == STREAM_NULL else h
        return 1
    if type(stream) is int and stream == -1:
        return 0
    _protocol_stream_int(stream, argname, "the legacy default stream", out)
    return 1


cdef int cai_stream(object stream, str argname, uintptr_t* out) except -1:
    # The CUDA array interface (version 3): None (or no entry) needs no
    # synchronization, 1 legacy, 2 per-thread, anything else a handle.
    if stream is None:
        return 0
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"{argname} must be None (no synchronization) or an int stream "
                        f"handle, not {type(stream).__name__}")
    _protocol_stream_int(stream, argname, "no synchronization", out)
    return 1


# ---- other libraries' streams and events --------------------------------------------------
#
# A foreign object is read where it is passed, without a wrapper when the
# call only uses its handle for the call's duration (the caller's reference
# keeps it alive meanwhile): Event.record, Event.wait, Stream.wait_event,
# Stream.wait_stream.  How a type gives its handle is decided once per type.

cdef enum:
    _READ_NONE = 0
    _READ_PROTOCOL = 1      # __cuda_stream__, a method or an attribute
    _READ_CUDA_STREAM = 2   # PyTorch streams: .cuda_stream
    _READ_PTR = 3           # CuPy streams and events: .ptr
    _READ_CUDA_EVENT = 4    # PyTorch events: .cuda_event, 0 until the first record
    _READ_HANDLE = 5        # cuda.core and numba-cuda events: .handle (int() or ctypes)

# Type -> how to read it, keyed by id(type) with a weak reference to the
# type beside the answer: a cache must not keep a class alive (a class made
# per call or per test, read once as a stream or an event, is collected when
# its last user drops it, and its entry goes with it).  An entry is trusted
# only while its reference still gives the very type asked about (an id is
# reused once its object is gone).  tests/foreign/test_foreign_readers_cpu.py shows a
# dropped class collected.
cdef dict _stream_readers = {}
cdef dict _event_readers = {}
# id(foreign stream) -> (weak reference, handle, device): cudaStreamGetDevice
# once per object, the entry gone with the object.  Two threads may work
# out the same answer at once; every table is changed under a critical
# section (of the reader table itself, or _foreign_devices_lock), so that a
# weak reference's callback removes only its own entry (free-threaded
# CPython; the GIL elsewhere).
cdef dict _foreign_devices = {}
cdef object _foreign_devices_lock = object()


cdef bint _from_library(type t, str prefix):
    return (getattr(t, "__module__", None) or "").startswith(prefix)


cdef bint _named_in_mro(type t, tuple names):
    for cls in t.__mro__:
        if cls.__name__ in names:
            return True
    return False


cdef class _ForgetType:
    # The weak reference callback of a reader cache's entry: the type went.
    cdef dict table
    cdef object key

    def __call__(self, ref):
        # Looked at and removed in one step: meanwhile another thread may
        # put a new entry under the same id (the id of a new type).
        with cython.critical_section(self.table):
            entry = self.table.get(self.key)
            if entry is not None and (<tuple>entry)[0] is ref:
                del self.table[self.key]


cdef inline int _cached_reader(dict table, type t) except -2:
    # The cached answer for `t`, or -1.
    cdef object entry = table.get(id(t))
    if entry is not None and (<tuple>entry)[0]() is t:
        return (<tuple>entry)[1]
    return -1


cdef int _remember_reader(dict table, type t, int code) except -1:
    cdef _ForgetType forget = _ForgetType.__new__(_ForgetType)
    forget.table = table
    forget.key = id(t)
    try:
        ref = _weakref.ref(t, forget)
    except TypeError:
        return 0        # a type without weak references: worked out each time
    with cython.critical_section(table):
        table[forget.key] = (ref, code)
    return 0


cdef int _stream_reader(type t) except -1:
    cdef int r = _cached_reader(_stream_readers, t)
    if r >= 0:
        return r
    # The library's own field first where it has one: one attribute read
    # instead of a call and a tuple, for the same handle.
    if _from_library(t, "torch") and hasattr(t, "cuda_stream"):
        code = _READ_CUDA_STREAM
    elif (_from_library(t, "cupy")
          and _named_in_mro(t, ("_BaseStream", "BaseStream", "Stream", "ExternalStream"))):
        # (CuPy and numba-cuda set these fields on the instance: the type
        # cannot be asked for them.)
        code = _READ_PTR
    elif hasattr(t, "__cuda_stream__"):
        code = _READ_PROTOCOL
    elif hasattr(t, "cuda_stream"):
        code = _READ_CUDA_STREAM
    elif _from_library(t, "numba") and _named_in_mro(t, ("Stream",)):
        code = _READ_HANDLE     # numba-cuda before it implemented the protocol
    else:
        # A .ptr of anything else (a CuPy MemoryPointer, a buffer) read as
        # a stream would hand CUDA a pointer that is none.
        code = _READ_NONE
    _remember_reader(_stream_readers, t, code)
    return code


cdef uintptr_t _handle_int(object value, object obj, str field, str argname) except? 0:
    # An int handle out of a library's field: an int, a ctypes pointer
    # (.value, None for NULL) or an object with __int__ (cuda.bindings).
    if type(value) is int:
        # The usual case, on the hot path: no further checks.
        try:
            return <uintptr_t>value
        except OverflowError:
            return as_pointer_int(value, argname)   # the error, naming the argument
    if isinstance(value, bool):
        raise TypeError(f"{argname}: {type(obj).__name__}.{field} must be an int handle, "
                        "got bool")
    if not isinstance(value, int):
        if hasattr(value, "value") and (value.value is None or isinstance(value.value, int)):
            value = value.value or 0
        elif hasattr(value, "__int__") and not isinstance(value, float):
            value = int(value)
        else:
            raise TypeError(f"{argname}: {type(obj).__name__}.{field} must be an int handle, "
                            f"got {type(value).__name__}")
    return as_pointer_int(value, argname)


cdef uintptr_t _protocol_handle(object obj, object proto, str argname) except? 0:
    try:
        info = proto() if callable(proto) else proto
    except Exception as exc:
        # cuda.core raises for a closed stream: say so, naming the argument.
        if _from_library(type(obj), "cuda.core"):
            raise ValueError(f"{argname} is a closed cuda.core Stream ({exc})") from exc
        raise ValueError(f"{argname}: {type(obj).__name__}.__cuda_stream__() raised "
                         f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(info, tuple) or len(<tuple>info) != 2:
        raise ValueError(f"{argname}: {type(obj).__name__}.__cuda_stream__() must return a "
                         f"(version, handle) tuple, got {info!r}")
    version, handle = info
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"{argname}: __cuda_stream__ version must be an int, got "
                        f"{type(version).__name__}")
    if version != 0:
        raise ValueError(f"{argname}: unsupported __cuda_stream__ protocol version {version} "
                         f"from {type(obj).__name__} (streams understands version 0)")
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"{argname}: __cuda_stream__ handle must be an int, got "
                        f"{type(handle).__name__}")
    return as_pointer_int(handle, argname)


cdef int foreign_stream(object obj, str argname, uintptr_t* out, bint trust_ptr) except -1:
    """The handle of another library's stream ``obj``, checked; no CUDA call."""
    cdef int code = _stream_reader(type(obj))
    cdef uintptr_t h
    if code == _READ_CUDA_STREAM:
        h = _handle_int(obj.cuda_stream, obj, "cuda_stream", argname)
    elif code == _READ_PTR:
        h = _handle_int(obj.ptr, obj, "ptr", argname)
    elif code == _READ_HANDLE:
        h = _handle_int(obj.handle, obj, "handle", argname)
    else:
        proto = getattr(obj, "__cuda_stream__", None)   # also set on the instance only
        if proto is not None:
            h = _protocol_handle(obj, proto, argname)
            # cuda.core reports handle 0 once its stream is closed (its own
            # default streams are 1 and 2).
            if h == 0 and _from_library(type(obj), "cuda.core"):
                raise ValueError(f"{argname} is a closed cuda.core Stream")
        elif trust_ptr and getattr(obj, "cuda_stream", None) is not None:
            h = _handle_int(obj.cuda_stream, obj, "cuda_stream", argname)
        elif trust_ptr and getattr(obj, "ptr", None) is not None:
            h = _handle_int(obj.ptr, obj, "ptr", argname)
        elif trust_ptr:
            raise TypeError(f"{argname} must be a streams.Stream or an object with "
                            "__cuda_stream__, .cuda_stream or .ptr, not "
                            f"{type(obj).__name__}")
        else:
            raise TypeError(f"{argname} must be a streams.Stream, a PyTorch or CuPy stream, "
                            f"or an object with __cuda_stream__, not {type(obj).__name__}")
    if h > STREAM_PER_THREAD:
        check_stream_handle(h, argname)
    out[0] = h
    return 0


cdef class _Forget:
    # The weak reference callback of a _foreign_devices entry.
    cdef object key

    def __call__(self, ref):
        # Looked at and removed in one step: meanwhile another thread may
        # put a new entry under the same id (the id of a new object).
        with cython.critical_section(_foreign_devices_lock):
            entry = _foreign_devices.get(self.key)
            if entry is not None and (<tuple>entry)[0] is ref:
                del _foreign_devices[self.key]


cdef int foreign_stream_device(object obj, uintptr_t h) except -2:
    """The device of foreign stream ``obj`` of handle ``h``; -1 for 0, 1, 2."""
    cdef int dev = -1
    cdef _Forget forget
    if h <= STREAM_PER_THREAD:
        return -1
    key = id(obj)
    entry = _foreign_devices.get(key)
    if entry is not None and (<tuple>entry)[0]() is obj and (<tuple>entry)[1] == h:
        return (<tuple>entry)[2]
    require_device()
    with nogil:
        rt.stream_get_device(<cudaStream_t>h, &dev)
    forget = _Forget.__new__(_Forget)
    forget.key = key
    try:
        ref = _weakref.ref(obj, forget)
    except TypeError:
        return dev      # no weak references to it: looked up each time
    with cython.critical_section(_foreign_devices_lock):
        _foreign_devices[key] = (ref, h, dev)
    return dev


cdef int _event_reader(type t) except -1:
    cdef int r = _cached_reader(_event_readers, t)
    if r >= 0:
        return r
    if hasattr(t, "cuda_event"):
        code = _READ_CUDA_EVENT
    elif _from_library(t, "cupy") and _named_in_mro(t, ("Event",)):
        code = _READ_PTR
    elif ((_from_library(t, "cuda.core") or _from_library(t, "numba"))
          and _named_in_mro(t, ("Event",))):
        code = _READ_HANDLE
    else:
        code = _READ_NONE
    _remember_reader(_event_readers, t, code)
    return code


cdef uintptr_t foreign_event(object obj, str argname) except? 1:
    """The handle of another library's event ``obj``, 0 for a PyTorch event
    never recorded (PyTorch creates its CUDA event at the first record, and
    waiting for it is a no-op there, as here); no CUDA call."""
    cdef int code = _event_reader(type(obj))
    cdef uintptr_t h
    if code == _READ_CUDA_EVENT:
        h = _handle_int(obj.cuda_event, obj, "cuda_event", argname)
        if h == 0:
            return 0
    elif code == _READ_PTR:
        h = _handle_int(obj.ptr, obj, "ptr", argname)
    elif code == _READ_HANDLE:
        h = _handle_int(obj.handle, obj, "handle", argname)
        if h == 0:
            # cuda.core sets a closed event's handle to NULL.
            raise ValueError(f"{argname} is a closed {type(obj).__module__}."
                             f"{type(obj).__name__}")
    else:
        raise TypeError(f"{argname} must be a streams.Event or a PyTorch, CuPy, cuda.core or "
                        f"numba-cuda event, not {type(obj).__name__}")
    check_event_handle(h, argname)
    return h


def _is_foreign_stream(obj):
    """True when ``obj`` is another library's stream as ``as_stream`` reads
    them (not a streams.Stream); no CUDA call, nothing read but its type."""
    if isinstance(obj, HandleOwner):
        return False        # a streams.Stream
    return _stream_reader(type(obj)) != _READ_NONE or hasattr(obj, "__cuda_stream__")


def _is_foreign_event(obj):
    """True when ``obj`` is another library's event that waits accept."""
    return _event_reader(type(obj)) != _READ_NONE


# ---- the stream of an array's producer ---------------------------------------------------------

cdef int framework_array_stream(object obj, uintptr_t* out) except -1:
    # PyTorch exports __cuda_array_interface__ version 2, which names no
    # stream: its tensors are ordered after torch's current stream of their
    # device, which is what torch's own __dlpack__(stream=) orders after.
    cdef type t = type(obj)
    if not _from_library(t, "torch"):
        return 0
    torch = _sys.modules.get("torch")
    if torch is None:
        return 0
    device = getattr(obj, "device", None)
    if device is None or getattr(device, "type", None) != "cuda":
        return 0
    theirs = torch.cuda.current_stream(device)
    out[0] = _handle_int(theirs.cuda_stream, theirs, "cuda_stream", "stream")
    if out[0] > STREAM_PER_THREAD:
        check_stream_handle(out[0], "torch.cuda.current_stream().cuda_stream")
    return 1


# ---- handles of other libraries' code objects --------------------------------------------

cdef uintptr_t foreign_code_handle(object value, str argname) except? 0:
    # A kernel or function handle is dereferenced by CUDA as a stream is:
    # the same address rule keeps values that cannot be one away from it.
    cdef uintptr_t h
    if isinstance(value, bool) or isinstance(value, float):
        raise TypeError(f"{argname} must be an int handle (or an object with __int__, or a "
                        f"ctypes pointer), not {type(value).__name__}")
    if not isinstance(value, int):
        # cuda.bindings' CUfunction, CUkernel, ...: int() is the handle (their
        # getPtr() is the address where the object stores it, not the handle).
        if hasattr(value, "value") and (value.value is None or isinstance(value.value, int)):
            value = value.value or 0       # ctypes.c_void_p
        elif hasattr(value, "__int__"):
            value = int(value)
        else:
            raise TypeError(f"{argname} must be an int handle (or an object with __int__, or "
                            f"a ctypes pointer), not {type(value).__name__}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{argname} did not give an int handle (got "
                            f"{type(value).__name__})")
    if value < 0 or value >= (1 << 64):
        raise ValueError(f"{argname}={value} does not fit in a pointer")
    h = as_pointer_int(value, argname)
    if h == 0:
        raise ValueError(f"{argname} is NULL (0): not a kernel handle")
    if h < _LOWEST_HANDLE or h >= _HIGHEST_HANDLE or h % sizeof(void*) != 0:
        raise ValueError(f"{argname}=0x{h:x} cannot be a CUDA kernel or function handle "
                         "(handles are aligned addresses of the process)")
    return h
