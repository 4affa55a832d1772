# Type stubs for the `streams` package (streams/__init__.py).
#
# Every public name but get_include is re-exported from the compiled module
# (see _core.pyi for the types).  stubtest checks that these re-exports and
# __all__ match the runtime: when streams/__init__.py grows a name, add it
# to both lists here (tests/test_stubs.py fails until it is).

from streams._core import (
    CaptureInfo as CaptureInfo,
    CudaError as CudaError,
    Device as Device,
    Event as Event,
    Graph as Graph,
    GraphExec as GraphExec,
    GraphNode as GraphNode,
    HostCallbackError as HostCallbackError,
    Stream as Stream,
    UpdateResult as UpdateResult,
    capture_mode as capture_mode,
    current_stream as current_stream,
    debug_counters as debug_counters,
    device_count as device_count,
    driver_version as driver_version,
    exchange_capture_mode as exchange_capture_mode,
    get_device as get_device,
    runtime_version as runtime_version,
    set_device as set_device,
    stream_priority_range as stream_priority_range,
    synchronize_device as synchronize_device,
)

__version__: str

__all__ = [
    "CaptureInfo",
    "CudaError",
    "Device",
    "Event",
    "Graph",
    "GraphExec",
    "GraphNode",
    "HostCallbackError",
    "Stream",
    "UpdateResult",
    "capture_mode",
    "current_stream",
    "debug_counters",
    "device_count",
    "driver_version",
    "exchange_capture_mode",
    "get_device",
    "get_include",
    "runtime_version",
    "set_device",
    "stream_priority_range",
    "synchronize_device",
]

def get_include() -> str: ...
