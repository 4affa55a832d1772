# Type stubs for the `streams` package (streams/__init__.py).
#
# Every public name is re-exported from the compiled module; stubtest checks
# that this list and __all__ match the runtime.  When streams/__init__.py
# grows a name, add it here too (tests/test_stubs.py fails until it is).

from streams._core import (
    CudaError as CudaError,
    Device as Device,
    Event as Event,
    HostCallbackError as HostCallbackError,
    Stream as Stream,
    current_stream as current_stream,
    debug_counters as debug_counters,
    device_count as device_count,
    driver_version as driver_version,
    get_device as get_device,
    runtime_version as runtime_version,
    set_device as set_device,
    stream_priority_range as stream_priority_range,
    synchronize_device as synchronize_device,
)

__version__: str

__all__ = [
    "CudaError",
    "Device",
    "Event",
    "HostCallbackError",
    "Stream",
    "current_stream",
    "debug_counters",
    "device_count",
    "driver_version",
    "get_include",
    "get_device",
    "runtime_version",
    "set_device",
    "stream_priority_range",
    "synchronize_device",
]

def get_include() -> str: ...
