"""Bad arguments raise TypeError or ValueError naming the argument, before
anything looks at the device: on a machine without a GPU (or without a
driver) the error is the argument's, not "no driver", and on a GPU the
same call fails the same way.  No GPU needed."""
import pytest

import streams
from streams import (Event, EventPool, Graph, GraphExec, Kernel, LaunchConfig, MemoryPool, Stream,
                     StreamPool)

np = pytest.importorskip("numpy")

# What a flag must refuse: truthy or falsy stand-ins for a bool, which would
# otherwise turn the flag on ('false', 'no', 1, 2) or off (0, None, '').
NOT_BOOLS = ["false", "no", "", 1, 0, 2, None, 1.0, [True]]


def _uninitialised(cls):
    return cls.__new__(cls)


# (what is called, the flag it passes) for every public flag argument.
FLAG_CALLS = {
    "Stream(non_blocking)": (lambda v: Stream(non_blocking=v), "non_blocking"),
    "StreamPool(non_blocking)": (lambda v: StreamPool(non_blocking=v), "non_blocking"),
    "Event(enable_timing)": (lambda v: Event(enable_timing=v), "enable_timing"),
    "Event(blocking)": (lambda v: Event(blocking=v), "blocking"),
    "Event(interprocess)": (lambda v: Event(interprocess=v), "interprocess"),
    "EventPool(enable_timing)": (lambda v: EventPool(enable_timing=v), "enable_timing"),
    "EventPool(blocking)": (lambda v: EventPool(blocking=v), "blocking"),
    "Stream.wait_event(external)": (
        lambda v: Stream.legacy.wait_event(_uninitialised(Event), external=v), "external"),
    "Event.record(external)": (
        lambda v: _uninitialised(Event).record(Stream.legacy, external=v), "external"),
    "Stream.wait_value(flush)": (lambda v: Stream.legacy.wait_value(4096, 1, flush=v), "flush"),
    "Stream.launch(wait_producers)": (
        lambda v: Stream.legacy.launch(_uninitialised(Kernel), 1, 1, wait_producers=v),
        "wait_producers"),
    "Stream.launch_ex(cooperative)": (
        lambda v: Stream.legacy.launch_ex(_uninitialised(Kernel), 1, 1, cooperative=v),
        "cooperative"),
    "LaunchConfig(cooperative)": (lambda v: LaunchConfig(1, 1, cooperative=v), "cooperative"),
    "LaunchConfig(programmatic_stream_serialization)": (
        lambda v: LaunchConfig(1, 1, programmatic_stream_serialization=v),
        "programmatic_stream_serialization"),
    "LaunchConfig(trigger_at_block_start)": (
        lambda v: LaunchConfig(1, 1, trigger_at_block_start=v), "trigger_at_block_start"),
    "MemoryPool(ipc)": (lambda v: MemoryPool(ipc=v), "ipc"),
    "memcpy_async(wait_producers)": (
        lambda v: streams.memcpy_async(bytearray(4), bytearray(4), wait_producers=v),
        "wait_producers"),
    "memset_async(wait_producers)": (
        lambda v: streams.memset_async(bytearray(4), 0, wait_producers=v), "wait_producers"),
    "Graph.instantiate(auto_free_on_launch)": (
        lambda v: _uninitialised(Graph).instantiate(auto_free_on_launch=v),
        "auto_free_on_launch"),
    "Graph.instantiate(device_launch)": (
        lambda v: _uninitialised(Graph).instantiate(device_launch=v), "device_launch"),
    "Graph.instantiate(use_node_priority)": (
        lambda v: _uninitialised(Graph).instantiate(use_node_priority=v), "use_node_priority"),
    "Graph.debug_dot(verbose)": (lambda v: _uninitialised(Graph).debug_dot(verbose=v),
                                 "verbose"),
    "Graph.add_kernel_node(cooperative)": (
        lambda v: _uninitialised(Graph).add_kernel_node("empty", cooperative=v), "cooperative"),
    "Graph.create_condition(reset)": (lambda v: _uninitialised(Graph).create_condition(reset=v),
                                      "reset"),
    "GraphExec.set_enabled(enabled)": (
        lambda v: _uninitialised(GraphExec).set_enabled(None, v), "enabled"),
}


# launch_ex's cooperative=None means "not given" (the config's own then).
TAKES_NONE = {"Stream.launch_ex(cooperative)"}


@pytest.mark.parametrize("call, value", [
    pytest.param(call, value, id=f"{call}-{value!r}") for call in sorted(FLAG_CALLS)
    for value in NOT_BOOLS if not (value is None and call in TAKES_NONE)])
def test_flags_take_only_bools(call, value):
    fn, name = FLAG_CALLS[call]
    with pytest.raises(TypeError, match=f"^{name} must be a bool, not {type(value).__name__}$"):
        fn(value)


def test_the_flags_of_the_issue_are_refused():
    # Both were taken as True: a timing event, a non-blocking stream.
    with pytest.raises(TypeError, match="enable_timing must be a bool, not str"):
        Event(enable_timing="false")
    with pytest.raises(TypeError, match="non_blocking must be a bool, not str"):
        Stream(non_blocking="no")


@pytest.mark.parametrize("value, expected", [(True, True), (False, False),
                                             (np.True_, True), (np.False_, False),
                                             (np.array([3]) > 2, None)])
def test_flags_take_bools_and_numpy_bools(value, expected):
    if expected is None:
        # An array is not a bool, even of one element.
        with pytest.raises(TypeError, match="cooperative must be a bool, not ndarray"):
            LaunchConfig(1, 1, cooperative=value)
        return
    config = LaunchConfig(1, 1, cooperative=value, programmatic_stream_serialization=value)
    assert config.cooperative is expected
    assert config.programmatic_stream_serialization is expected


# ---- every argument before the device ---------------------------------------------------------

@pytest.mark.parametrize("cls", [StreamPool, EventPool])
@pytest.mark.parametrize("maxsize, exc, message", [
    (-3, ValueError, r"maxsize must be between 0 and 1048576, got -3"),
    (1 << 21, ValueError, r"maxsize must be between 0 and 1048576, got 2097152"),
    ("8", TypeError, r"maxsize must be an int, not str"),
    (True, TypeError, r"maxsize must be an int, not bool"),
    (8.0, TypeError, r"maxsize must be an int, not float")])
def test_pools_check_maxsize_before_the_device(cls, maxsize, exc, message):
    with pytest.raises(exc, match=message):
        cls(maxsize=maxsize)


def test_stream_pool_checks_its_stream_arguments_before_the_device():
    with pytest.raises(TypeError, match="priority must be an int, not str"):
        StreamPool(priority="high")
    with pytest.raises(ValueError, match="device='gpu0' is not a CUDA device string"):
        StreamPool(device="gpu0")


RO = b"four"            # a read-only host buffer
NOT_MEMORY = "device memory, please"

# (call, exception, message) for the memory calls' arguments.
COPY_CALLS = {
    "memcpy_async dst str": (lambda: streams.memcpy_async("a", "b"), TypeError,
                             r"^dst must be a streams buffer.*str: "),
    "memcpy_async src str": (lambda: streams.memcpy_async(bytearray(4), NOT_MEMORY), TypeError,
                             r"^src must be a streams buffer.*str: "),
    "memcpy_async dst read-only": (lambda: streams.memcpy_async(RO, bytearray(4)), TypeError,
                                   r"^dst must be .* C-contiguous writable host buffer"),
    "memcpy_async dst None": (lambda: streams.memcpy_async(None, bytearray(4)), TypeError,
                              r"^dst must be memory .* not None"),
    "memcpy_async dst NULL": (lambda: streams.memcpy_async(0, bytearray(4)), ValueError,
                              r"^dst is a NULL address"),
    "memcpy_async src bool": (lambda: streams.memcpy_async(bytearray(4), True), TypeError,
                              r"^src must be a streams buffer.*bool: "),
    "memcpy_async nbytes -1": (lambda: streams.memcpy_async(bytearray(4), bytearray(4), -1),
                               ValueError, r"^nbytes must be >= 0, got -1"),
    "memcpy_async nbytes str": (lambda: streams.memcpy_async(bytearray(4), bytearray(4), "4"),
                                TypeError, r"^nbytes must be an int, not str"),
    "memcpy_async stream": (lambda: streams.memcpy_async(bytearray(4), bytearray(4),
                                                         stream="s"),
                            TypeError, r"^stream must be a streams.Stream"),
    "memset_async dst str": (lambda: streams.memset_async("a", 0), TypeError,
                             r"^dst must be a streams buffer.*str: "),
    "memset_async dst read-only": (lambda: streams.memset_async(RO, 0), TypeError,
                                   r"^dst must be .* C-contiguous writable host buffer"),
    "memset_async value": (lambda: streams.memset_async(bytearray(4), 256), ValueError,
                           r"^value must be a byte \(0-255\), got 256"),
    "memset_async nbytes": (lambda: streams.memset_async(bytearray(4), 0, -1), ValueError,
                            r"^nbytes must be >= 0, got -1"),
    "memcpy_peer_async dst": (lambda: streams.memcpy_peer_async("a", 0, "b", 0), TypeError,
                              r"^dst must be a pointer to device memory: .* not str"),
    "memcpy_peer_async host src": (
        lambda: streams.memcpy_peer_async(1 << 20, 0, bytearray(4), 0), TypeError,
        r"^src must be a pointer to device memory: .* not bytearray"),
    "memcpy_batch_async dst": (lambda: streams.memcpy_batch_async([("a", "b")]), TypeError,
                               r"^copies\[0\] dst must be a streams buffer.*str: "),
    "memcpy_batch_async src": (
        lambda: streams.memcpy_batch_async([(bytearray(4), bytearray(4)),
                                            (bytearray(4), NOT_MEMORY)]),
        TypeError, r"^copies\[1\] src must be a streams buffer.*str: "),
    "memcpy_batch_async nbytes": (
        lambda: streams.memcpy_batch_async([(bytearray(4), bytearray(4), -2)]), ValueError,
        r"^copies\[0\] nbytes must be >= 0, got -2"),
    "DeviceBuffer nbytes": (lambda: streams.DeviceBuffer(-1), ValueError,
                            r"^nbytes must be >= 0, got -1"),
    "PinnedBuffer nbytes": (lambda: streams.PinnedBuffer("8"), TypeError,
                            r"^nbytes must be an int, not str"),
    "ManagedBuffer attach": (lambda: streams.ManagedBuffer(8, attach="device"), ValueError,
                             r"^attach must be 'global' or 'host', got 'device'"),
    "MemoryPool release_threshold": (lambda: MemoryPool(release_threshold=-1), ValueError,
                                     r"^release_threshold must be >= 0, got -1"),
}


@pytest.mark.parametrize("call", sorted(COPY_CALLS))
def test_memory_calls_check_their_arguments_before_the_device(call):
    fn, exc, message = COPY_CALLS[call]
    with pytest.raises(exc, match=message):
        fn()
