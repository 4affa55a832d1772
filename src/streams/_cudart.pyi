# Type stubs for streams._cudart (streams/_cudart.pyx): the call layer.
#
# Hand-written, like every stub of the package: Cython does not generate
# them.  One stub per extension module, each typing what that module exposes
# at Python level; helper types that exist only for type checkers start with
# an underscore (stubtest ignores private names absent at runtime) and are
# shared through imports between the stubs, never re-exported.
#
# Checked against the built modules by `python -m mypy.stubtest streams`
# (run `python tests/package/test_stubs.py` for the command); the Cython artefacts it
# must ignore are listed, with reasons, in .github/stubtest-allowlist.txt.  A
# new public name in a module needs an entry in its stub and, when
# streams/__init__.py re-exports it, in __init__.pyi too.

from typing import SupportsIndex, SupportsInt, TypedDict

from typing_extensions import NotRequired, Self

class CudaError(RuntimeError):
    code: int
    name: str
    message: str
    def __init__(self, code: SupportsInt | SupportsIndex, name: str | None = None, message: str | None = None) -> None: ...
    def __reduce__(self) -> tuple[type[Self], tuple[int, str, str]]: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class HostCallbackError(RuntimeError): ...
class CudaWarning(RuntimeWarning): ...

class _DebugCounters(TypedDict):
    streams_created: int
    streams_destroyed: int
    live_streams: int
    events_created: int
    events_destroyed: int
    live_events: int
    graphs_created: int
    graphs_destroyed: int
    live_graphs: int
    graphs_abandoned: int
    graph_execs_created: int
    graph_execs_destroyed: int
    live_graph_execs: int
    modules_created: int
    modules_destroyed: int
    live_modules: int
    buffers_created: int
    buffers_destroyed: int
    live_buffers: int
    mem_pools_created: int
    mem_pools_destroyed: int
    live_mem_pools: int
    callbacks_enqueued: int
    callbacks_completed: int
    callbacks_dropped: int
    live_callbacks: int
    native_calls_enqueued: int
    live_native_calls: int
    live_host_calls: int
    graph_callback_runs: int
    pending_one_shots: int
    stale_one_shot_calls: int
    deferred_releases: int
    marker_events: int
    debug_build: bool
    # Only in a debug build (STREAMS_DEBUG_REFCOUNTS=1 when building):
    payload_increfs: NotRequired[int]
    payload_decrefs: NotRequired[int]
    live_payload_refs: NotRequired[int]
    dlpack_increfs: NotRequired[int]
    dlpack_decrefs: NotRequired[int]
    live_dlpack_refs: NotRequired[int]
    memory_allocs: NotRequired[int]
    memory_frees: NotRequired[int]
    live_allocations: NotRequired[int]
    module_loads: NotRequired[int]
    module_unloads: NotRequired[int]
    live_module_loads: NotRequired[int]
    payloads_leaked: NotRequired[int]
    cuda_calls_with_gil: NotRequired[int]

def _drain_deferred() -> int: ...
# Private (debug builds): where CUDA was called with the GIL held.
def _cuda_calls_with_gil() -> list[str]: ...
def _flush_cleanup_warnings() -> None: ...
def _inject_cleanup_failure(kind: str, error: int, count: int) -> None: ...
def _cleanup_kind_names() -> tuple[str, ...]: ...
def _queue_cleanup_failure(kind: str, handle: int, error: int) -> None: ...
# Private (tests): hold the lock of the queue of failed releases, GIL released.
def _hold_cleanup_lock(seconds: float) -> None: ...
def _cleanup_lock_holds() -> int: ...
def _producers_yield(on: bool | None = None) -> bool: ...
# Private: ns per empty `with nogil` block (tools/quick_timing.py).
def _nogil_round_trip(n: int = 100000) -> float: ...
def _testing_native_increment_address() -> int: ...
def debug_build() -> bool: ...
def debug_counters() -> _DebugCounters: ...
def runtime_version() -> int: ...
def driver_version() -> int: ...
def _ticket_issue() -> int: ...
def _ticket_claim(ticket: int) -> bool: ...
def _shutdown() -> None: ...
# The in-process floor of the benchmarks (src/floor.h): ns for n
# calls of a benchmark operation, made in C through this module's cudart.
def floor_batch(op: str, n: int) -> int: ...
