# Type stubs for the `streams` package (streams/__init__.py).
#
# Every public name but get_include, get_cython_include and show_config is re-exported from the
# extension module that defines it (see that module's stub for the types),
# in the order of the layers, as streams/__init__.py imports them.
# streams/__init__.py makes its __all__ from the public names it imports and
# defines; __all__ below is the one written-out list of them.  stubtest
# checks that these re-exports and __all__ match the runtime: when
# streams/__init__.py grows a name, add it to both lists here
# (tests/package/test_stubs.py fails until it is).

from _typeshed import SupportsWrite

from streams._cudart import (
    CudaError as CudaError,
    CudaWarning as CudaWarning,
    HostCallbackError as HostCallbackError,
    debug_build as debug_build,
    debug_counters as debug_counters,
    driver_version as driver_version,
    runtime_version as runtime_version,
)
from streams._args import StreamsEnum as StreamsEnum
from streams._device import (
    Device as Device,
    can_access_peer as can_access_peer,
    device_count as device_count,
    disable_peer_access as disable_peer_access,
    enable_peer_access as enable_peer_access,
    get_device as get_device,
    set_device as set_device,
    stream_priority_range as stream_priority_range,
    synchronize_device as synchronize_device,
)
from streams._stream import (
    AccessPolicyWindow as AccessPolicyWindow,
    AccessProperty as AccessProperty,
    CaptureMode as CaptureMode,
    CaptureStatus as CaptureStatus,
    Event as Event,
    EventPool as EventPool,
    MemAttach as MemAttach,
    Stream as Stream,
    StreamAttribute as StreamAttribute,
    StreamPool as StreamPool,
    HostFuncSyncMode as HostFuncSyncMode,
    SyncPolicy as SyncPolicy,
    as_stream as as_stream,
    current_stream as current_stream,
    reset_persisting_l2_cache as reset_persisting_l2_cache,
)
from streams._memory import (
    DeviceBuffer as DeviceBuffer,
    IpcBufferDescriptor as IpcBufferDescriptor,
    ManagedBuffer as ManagedBuffer,
    MemoryPool as MemoryPool,
    PinnedBuffer as PinnedBuffer,
    memcpy_async as memcpy_async,
    memcpy_batch_async as memcpy_batch_async,
    memcpy_peer_async as memcpy_peer_async,
    memset_async as memset_async,
    advise as advise,
    discard as discard,
    discard_and_prefetch as discard_and_prefetch,
    managed_range_info as managed_range_info,
    prefetch as prefetch,
)
from streams._launch import (
    CompileError as CompileError,
    Kernel as Kernel,
    LaunchConfig as LaunchConfig,
    Module as Module,
    PreparedLaunch as PreparedLaunch,
    builtin_kernel as builtin_kernel,
    builtin_ptx as builtin_ptx,
)
from streams._green import (
    GreenContext as GreenContext,
    SmPartition as SmPartition,
    SmResource as SmResource,
)
from streams._semaphore import (
    SemaphoreAbandoned as SemaphoreAbandoned,
    SemaphoreDescriptor as SemaphoreDescriptor,
    TimelineSemaphore as TimelineSemaphore,
)
from streams._deadline import (
    Deadline as Deadline,
    DeadlineExceeded as DeadlineExceeded,
    Watchdog as Watchdog,
    deadline as deadline,
    watchdog as watchdog,
)
from streams._interop import (
    current_in as current_in,
    follow_current_stream as follow_current_stream,
)
from streams import nvtx as nvtx
from streams import checker as checker
from streams._launch import ConditionHandle as ConditionHandle
from streams._graph import (
    CaptureInfo as CaptureInfo,
    Graph as Graph,
    GraphAllocation as GraphAllocation,
    GraphExec as GraphExec,
    GraphMemoryInfo as GraphMemoryInfo,
    GraphNode as GraphNode,
    KernelNodeParams as KernelNodeParams,
    NodeType as NodeType,
    UpdateResult as UpdateResult,
    capture_mode as capture_mode,
    exchange_capture_mode as exchange_capture_mode,
    graph_memory_info as graph_memory_info,
    reset_graph_memory_high as reset_graph_memory_high,
    trim_graph_memory as trim_graph_memory,
)

__version__: str

__all__ = [
    "AccessPolicyWindow",
    "AccessProperty",
    "CaptureInfo",
    "CaptureMode",
    "CaptureStatus",
    "CompileError",
    "ConditionHandle",
    "CudaError",
    "CudaWarning",
    "Deadline",
    "DeadlineExceeded",
    "Device",
    "DeviceBuffer",
    "Event",
    "EventPool",
    "Graph",
    "GraphAllocation",
    "GraphExec",
    "GraphMemoryInfo",
    "GraphNode",
    "GreenContext",
    "HostCallbackError",
    "HostFuncSyncMode",
    "IpcBufferDescriptor",
    "Kernel",
    "KernelNodeParams",
    "LaunchConfig",
    "ManagedBuffer",
    "MemAttach",
    "MemoryPool",
    "Module",
    "NodeType",
    "PinnedBuffer",
    "PreparedLaunch",
    "SemaphoreAbandoned",
    "SemaphoreDescriptor",
    "SmPartition",
    "SmResource",
    "Stream",
    "StreamAttribute",
    "StreamPool",
    "StreamsEnum",
    "SyncPolicy",
    "TimelineSemaphore",
    "UpdateResult",
    "Watchdog",
    "advise",
    "as_stream",
    "builtin_kernel",
    "builtin_ptx",
    "can_access_peer",
    "capture_mode",
    "checker",
    "current_in",
    "current_stream",
    "deadline",
    "debug_build",
    "debug_counters",
    "device_count",
    "disable_peer_access",
    "discard",
    "discard_and_prefetch",
    "driver_version",
    "enable_peer_access",
    "exchange_capture_mode",
    "follow_current_stream",
    "get_cython_include",
    "get_device",
    "get_include",
    "graph_memory_info",
    "managed_range_info",
    "memcpy_async",
    "memcpy_batch_async",
    "memcpy_peer_async",
    "memset_async",
    "nvtx",
    "prefetch",
    "reset_graph_memory_high",
    "reset_persisting_l2_cache",
    "runtime_version",
    "set_device",
    "show_config",
    "stream_priority_range",
    "synchronize_device",
    "trim_graph_memory",
    "watchdog",
]

def get_cython_include() -> str: ...
def get_include() -> str: ...
def show_config(file: SupportsWrite[str] | None = None) -> None: ...
