# Type stubs for streams._stream (streams/_stream.pyx): streams, events, the
# current stream, and stream attributes.

from collections.abc import Callable, Coroutine, Generator
from typing import Any, ClassVar, Literal, Protocol, SupportsIndex, TypeVar, final, overload

from typing_extensions import Self, TypeAlias, disjoint_base

from streams._args import StreamsEnum, _Dim
from streams._cudart import CudaError
from streams._device import Device, _DeviceLike
from streams._graph import CaptureContext, CaptureInfo, Graph, _Nodes
from streams._launch import Kernel, LaunchConfig, _KernelArg
from streams._memory import _Address
from streams._handle import HandleOwner

# Comparisons of Stream.wait_value.
_WaitOp: TypeAlias = Literal["geq", "eq", "and", "nor"]

_T = TypeVar("_T")

# ---------------------------------------------------------------------------
# Stream arguments
# ---------------------------------------------------------------------------

class _CudaStreamMethod(Protocol):
    # The CUDA stream protocol: (version 0, cudaStream_t as an int).
    def __cuda_stream__(self) -> tuple[int, int]: ...

class _CudaStreamAttribute(Protocol):
    @property
    def __cuda_stream__(self) -> tuple[int, int]: ...

class _HasCudaStream(Protocol):
    # torch.cuda.Stream
    @property
    def cuda_stream(self) -> int: ...

class _HasPtr(Protocol):
    # cupy.cuda.Stream
    @property
    def ptr(self) -> int: ...

class _HasCudaEvent(Protocol):
    # torch.cuda.Event (0 until its first record)
    @property
    def cuda_event(self) -> int: ...

class _HasHandle(Protocol):
    # cuda.core and numba-cuda events
    @property
    def handle(self) -> object: ...

# Every `stream=` argument (None: the current stream): a Stream, or another
# library's stream: the __cuda_stream__ protocol, PyTorch's .cuda_stream,
# CuPy's .ptr (as_stream says which objects are read how).
_StreamArg: TypeAlias = Stream | _CudaStreamMethod | _CudaStreamAttribute | _HasCudaStream | _HasPtr
# What Stream.from_external reads: the same.
_StreamLike: TypeAlias = _StreamArg
# What an event to wait for may be: an Event, or a PyTorch, CuPy, cuda.core
# or numba-cuda event.
_EventArg: TypeAlias = Event | _HasCudaEvent | _HasPtr | _HasHandle

# ---------------------------------------------------------------------------
# Enums
# ---------------------------------------------------------------------------

class CaptureStatus(StreamsEnum):
    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2

class CaptureMode(StreamsEnum):
    GLOBAL = 0
    THREAD_LOCAL = 1
    RELAXED = 2

class StreamAttribute(StreamsEnum):
    ACCESS_POLICY_WINDOW = 1
    SYNCHRONIZATION_POLICY = 3
    PRIORITY = 8

class SyncPolicy(StreamsEnum):
    AUTO = 1
    SPIN = 2
    YIELD = 3
    BLOCKING_SYNC = 4

class HostFuncSyncMode(StreamsEnum):
    BLOCKING = 0
    SPIN_WAIT = 1

class AccessProperty(StreamsEnum):
    NORMAL = 0
    STREAMING = 1
    PERSISTING = 2

class MemAttach(StreamsEnum):
    GLOBAL = 1
    HOST = 2
    SINGLE = 4

# Enum arguments also take the member's value or its name in any case
# ("persisting", "BLOCKING_SYNC").
_CaptureModeLike: TypeAlias = CaptureMode | Literal["global", "thread_local", "relaxed"] | int
_StreamAttributeLike: TypeAlias = (
    StreamAttribute | Literal["access_policy_window", "synchronization_policy", "priority"] | int
)
_SyncPolicyLike: TypeAlias = SyncPolicy | Literal["auto", "spin", "yield", "blocking_sync"] | int
_HostFuncSyncModeLike: TypeAlias = HostFuncSyncMode | Literal["blocking", "spin_wait"] | int
# A native host function, void fn(void* data): its address, or a ctypes or
# cffi function pointer (typed loosely: neither library is typed precisely).
_NativeHostFn: TypeAlias = int | Any
_AccessPropertyLike: TypeAlias = AccessProperty | Literal["normal", "streaming", "persisting"] | int
_MemAttachLike: TypeAlias = MemAttach | Literal["global", "host", "single"] | int

# ---------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------

def current_stream(device: _DeviceLike | None = None) -> Stream: ...
def as_stream(stream: _StreamArg | None, argname: str = "stream") -> Stream: ...

@disjoint_base
class Stream(Waitable):
    # The default streams: singletons, never destroyed, device_id -1.
    null: ClassVar[Stream]  # handle 0 (treated as the legacy stream)
    legacy: ClassVar[Stream]  # cudaStreamLegacy, handle 1
    per_thread: ClassVar[Stream]  # cudaStreamPerThread, handle 2
    def __init__(
        self, device: _DeviceLike | None = None, priority: int = 0, non_blocking: bool = False, *, name: str | None = None
    ) -> None: ...
    # The NVTX name (docs/nvtx.rst); None until one is given.
    @property
    def name(self) -> str | None: ...
    @name.setter
    def name(self, value: str) -> None: ...
    @classmethod
    def from_handle(cls, ptr: SupportsIndex, owner: object = None, device: _DeviceLike | None = None) -> Self: ...
    @staticmethod
    def from_external(obj: _StreamLike) -> Stream: ...
    def __cuda_stream__(self) -> tuple[Literal[0], int]: ...
    def query(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def wait_async(self) -> Coroutine[Any, Any, None]: ...
    def __await__(self) -> Generator[Any, None, None]: ...
    def synchronize(self, timeout: float | None = None) -> bool: ...
    def record(self, event: Event | None = None) -> Event: ...
    def record_event(self, event: Event | None = None) -> Event: ...
    def wait_event(self, event: _EventArg, *, external: bool = False) -> None: ...
    def wait_stream(self, other: _StreamArg) -> None: ...
    @overload
    def launch_host_func(
        self, callback: Callable[[None], object], arg: None = None, *, owner: object = None,
        sync_mode: _HostFuncSyncModeLike = "blocking",
    ) -> None: ...
    @overload
    def launch_host_func(
        self, callback: Callable[[_T], object], arg: _T, *, owner: object = None,
        sync_mode: _HostFuncSyncModeLike = "blocking",
    ) -> None: ...
    @overload
    def launch_host_func(
        self, callback: _NativeHostFn, arg: object = None, *, owner: object = None,
        sync_mode: _HostFuncSyncModeLike = "blocking",
    ) -> None: ...
    @overload
    def add_callback(self, callback: Callable[[Stream, CudaError | None, None], object], arg: None = None) -> None: ...
    @overload
    def add_callback(self, callback: Callable[[Stream, CudaError | None, _T], object], arg: _T) -> None: ...
    @overload
    def get_attribute(self, name: Literal[StreamAttribute.ACCESS_POLICY_WINDOW, "access_policy_window"]) -> AccessPolicyWindow: ...
    # None while the policy was never set (the device's scheduling flags apply).
    @overload
    def get_attribute(
        self, name: Literal[StreamAttribute.SYNCHRONIZATION_POLICY, "synchronization_policy"]
    ) -> SyncPolicy | None: ...
    @overload
    def get_attribute(self, name: Literal[StreamAttribute.PRIORITY, "priority"]) -> int: ...
    @overload
    def get_attribute(self, name: _StreamAttributeLike) -> AccessPolicyWindow | SyncPolicy | int | None: ...
    @overload
    def set_attribute(
        self, name: Literal[StreamAttribute.ACCESS_POLICY_WINDOW, "access_policy_window"], value: AccessPolicyWindow
    ) -> None: ...
    @overload
    def set_attribute(
        self, name: Literal[StreamAttribute.SYNCHRONIZATION_POLICY, "synchronization_policy"], value: _SyncPolicyLike
    ) -> None: ...
    @overload
    def set_attribute(self, name: Literal[StreamAttribute.PRIORITY, "priority"], value: SupportsIndex) -> None: ...
    @overload
    def set_attribute(self, name: _StreamAttributeLike, value: AccessPolicyWindow | _SyncPolicyLike | SupportsIndex) -> None: ...
    def copy_attributes(self, src: Stream) -> None: ...
    def attach_mem_async(self, buffer: _Address, length: SupportsIndex = 0, flags: _MemAttachLike = "single") -> None: ...
    @property
    def device(self) -> Device: ...
    def launch(
        self, kernel: Kernel, grid: _Dim, block: _Dim, *args: _KernelArg, shared_mem: SupportsIndex = 0, wait_producers: bool = True
    ) -> None: ...
    @overload
    def launch_ex(self, kernel: Kernel, config: LaunchConfig, *args: _KernelArg, wait_producers: bool = True) -> None: ...
    @overload
    def launch_ex(
        self,
        kernel: Kernel,
        config: _Dim,
        *args: _KernelArg,
        shared_mem: SupportsIndex | None = None,
        cluster: _Dim | None = None,
        cooperative: bool | None = None,
        wait_producers: bool = True,
    ) -> None: ...
    def wait_value(
        self, address: _Address, value: SupportsIndex, op: _WaitOp = "geq", flush: bool = False, *, width: Literal[32, 64] = 32
    ) -> Self: ...
    def write_value(self, address: _Address, value: SupportsIndex, *, width: Literal[32, 64] = 32) -> Self: ...
    def begin_capture(self, mode: _CaptureModeLike = "global") -> None: ...
    def begin_capture_to_graph(self, graph: Graph, dependencies: _Nodes = (), mode: _CaptureModeLike = "global") -> None: ...
    def end_capture(self) -> Graph: ...
    def is_capturing(self) -> bool: ...
    @property
    def capture_status(self) -> CaptureStatus: ...
    def capture_info(self) -> CaptureInfo: ...
    def update_capture_dependencies(self, nodes: _Nodes, mode: Literal["add", "set"] = "add") -> None: ...
    def capture(self, mode: _CaptureModeLike = "global") -> CaptureContext: ...
    def use(self) -> Self: ...
    @property
    def handle(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def non_blocking(self) -> bool: ...
    @property
    def id(self) -> int: ...
    @property
    def owner(self) -> Any: ...
    @property
    def sm_count(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class ErrorSlot:
    # Where host callbacks' exceptions wait for their stream or graph;
    # made by streams and graphs only (the constructor raises TypeError).
    ...

# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------

@disjoint_base
class Waitable(HandleOwner):
    # Base of Stream and Event: work that can be queried and waited for.
    def query(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def wait_async(self) -> Coroutine[Any, Any, None]: ...
    def __await__(self) -> Generator[Any, None, None]: ...
    @property
    def name(self) -> str | None: ...
    @name.setter
    def name(self, value: str) -> None: ...

@disjoint_base
class Event(Waitable):
    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        device: _DeviceLike | None = None,
        *,
        name: str | None = None,
    ) -> None: ...
    @property
    def name(self) -> str | None: ...
    @name.setter
    def name(self, value: str) -> None: ...
    def record(self, stream: _StreamArg | None = None, *, external: bool = False) -> Self: ...
    def query(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def wait_async(self) -> Coroutine[Any, Any, None]: ...
    def __await__(self) -> Generator[Any, None, None]: ...
    def synchronize(self, timeout: float | None = None) -> bool: ...
    def wait(self, stream: _StreamArg | None = None) -> Self: ...
    def elapsed_time(self, end: Event) -> float: ...
    def ipc_handle(self) -> bytes: ...
    @classmethod
    def from_handle(cls, ptr: SupportsIndex, owner: object = None, device: _DeviceLike | None = None) -> Self: ...
    @property
    def owner(self) -> Any: ...
    @staticmethod
    def from_ipc_handle(handle: bytes | bytearray | memoryview, device: _DeviceLike | None = None) -> Event: ...
    @property
    def handle(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def is_timing(self) -> bool: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# ---------------------------------------------------------------------------
# Pools
# ---------------------------------------------------------------------------

@disjoint_base
class _HandlePool:
    @property
    def maxsize(self) -> int: ...
    @property
    def idle(self) -> int: ...
    @property
    def device_id(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

@final
class StreamPool(_HandlePool):
    def __init__(
        self, device: _DeviceLike | None = None, priority: int = 0, non_blocking: bool = False, *, maxsize: int = 16
    ) -> None: ...
    def acquire(self) -> Stream: ...
    @property
    def priority(self) -> int: ...
    @property
    def non_blocking(self) -> bool: ...

@final
class EventPool(_HandlePool):
    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, device: _DeviceLike | None = None, *, maxsize: int = 64
    ) -> None: ...
    def acquire(self) -> Event: ...
    @property
    def is_timing(self) -> bool: ...

@disjoint_base
class LaunchTarget:
    # Base of streams.Kernel: what Stream.launch accepts.
    ...

# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------

class AccessPolicyWindow:
    __slots__ = ("base_ptr", "num_bytes", "hit_ratio", "hit_prop", "miss_prop")
    base_ptr: int
    num_bytes: int
    hit_ratio: float
    hit_prop: AccessProperty
    miss_prop: AccessProperty
    def __init__(
        self,
        base_ptr: _Address,
        num_bytes: SupportsIndex,
        hit_ratio: float = 1.0,
        hit_prop: _AccessPropertyLike = ...,
        miss_prop: _AccessPropertyLike = ...,
    ) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def reset_persisting_l2_cache() -> None: ...
