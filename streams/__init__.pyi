# Type stubs for the `streams` package (streams/__init__.py).
#
# Every public name but get_include and show_config is re-exported from the compiled module
# (see _core.pyi for the types).  stubtest checks that these re-exports and
# __all__ match the runtime: when streams/__init__.py grows a name, add it
# to both lists here (tests/test_stubs.py fails until it is).

from _typeshed import SupportsWrite

from streams._core import (
    AccessPolicyWindow as AccessPolicyWindow,
    AccessProperty as AccessProperty,
    CaptureInfo as CaptureInfo,
    CudaError as CudaError,
    Device as Device,
    DeviceBuffer as DeviceBuffer,
    Event as Event,
    Graph as Graph,
    GraphExec as GraphExec,
    GraphNode as GraphNode,
    HostCallbackError as HostCallbackError,
    Kernel as Kernel,
    ManagedBuffer as ManagedBuffer,
    Module as Module,
    PinnedBuffer as PinnedBuffer,
    PreparedLaunch as PreparedLaunch,
    Stream as Stream,
    StreamAttribute as StreamAttribute,
    SyncPolicy as SyncPolicy,
    UpdateResult as UpdateResult,
    capture_mode as capture_mode,
    current_stream as current_stream,
    debug_build as debug_build,
    debug_counters as debug_counters,
    device_count as device_count,
    driver_version as driver_version,
    exchange_capture_mode as exchange_capture_mode,
    get_device as get_device,
    memcpy_async as memcpy_async,
    memset_async as memset_async,
    reset_persisting_l2_cache as reset_persisting_l2_cache,
    runtime_version as runtime_version,
    set_device as set_device,
    stream_priority_range as stream_priority_range,
    synchronize_device as synchronize_device,
)

__version__: str

__all__ = [
    "AccessPolicyWindow",
    "AccessProperty",
    "CaptureInfo",
    "CudaError",
    "Device",
    "DeviceBuffer",
    "Event",
    "Graph",
    "GraphExec",
    "GraphNode",
    "HostCallbackError",
    "Kernel",
    "ManagedBuffer",
    "Module",
    "PinnedBuffer",
    "PreparedLaunch",
    "Stream",
    "StreamAttribute",
    "SyncPolicy",
    "UpdateResult",
    "capture_mode",
    "current_stream",
    "debug_build",
    "debug_counters",
    "device_count",
    "driver_version",
    "exchange_capture_mode",
    "get_device",
    "get_include",
    "memcpy_async",
    "memset_async",
    "reset_persisting_l2_cache",
    "runtime_version",
    "set_device",
    "show_config",
    "stream_priority_range",
    "synchronize_device",
]

def get_include() -> str: ...
def show_config(file: SupportsWrite[str] | None = None) -> None: ...
