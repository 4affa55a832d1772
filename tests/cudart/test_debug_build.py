"""The debug build (STREAMS_DEBUG_REFCOUNTS=1 when building): its counters
move exactly as the reference protocol says.  In a normal build only the
first test runs; ci/run-gpu-tests debug-refcounts builds and runs them
all (and then every GPU test's teardown checks the balances too)."""
import gc
import time

import pytest

import streams
from streams import DeviceBuffer, PinnedBuffer
from streams.testing import builtin_module, spin

from _support import MS

DEBUG_KEYS = {"payload_increfs", "payload_decrefs", "live_payload_refs", "payloads_leaked",
              "dlpack_increfs", "dlpack_decrefs", "live_dlpack_refs", "memory_allocs",
              "memory_frees", "live_allocations", "module_loads", "module_unloads",
              "live_module_loads"}

debug_only = pytest.mark.skipif(not streams.debug_build(),
                                reason="needs a build with STREAMS_DEBUG_REFCOUNTS=1 "
                                       "(ci/run-gpu-tests debug-refcounts)")


def test_counters_say_which_build_this_is():
    counters = streams.debug_counters()
    assert counters["debug_build"] is streams.debug_build()
    if streams.debug_build():
        assert DEBUG_KEYS <= set(counters)
    else:
        assert not DEBUG_KEYS & set(counters), "a normal build must not pretend to count"


def _delta(before, *keys):
    after = streams.debug_counters()
    return tuple(after[k] - before[k] for k in keys)


@debug_only
@pytest.mark.gpu
def test_one_shot_callback_takes_one_reference_and_gives_it_back(stream):
    seen = []
    before = streams.debug_counters()
    spin(stream, 20 * MS)
    stream.launch_host_func(seen.append, 1)
    stream.add_callback(lambda s, status, arg: seen.append(arg), 2)
    # Enqueued behind the spin: taken, not yet given back.
    assert _delta(before, "payload_increfs", "payload_decrefs") == (2, 0)
    stream.synchronize()
    assert seen == [1, 2]
    assert _delta(before, "payload_increfs", "payload_decrefs", "payloads_leaked") == (2, 2, 0)


@debug_only
@pytest.mark.gpu
def test_graph_payload_is_held_once_for_all_replays(stream):
    seen = []
    before = streams.debug_counters()
    with stream.capture() as cap:
        stream.launch_host_func(seen.append, "x")
    graph = cap.graph
    # The host node's payload: one reference, owned by the graph's user object
    # (an enqueue's first attempt, which assumes no capture, may have taken
    # one and given it back on finding the stream capturing).
    increfs, decrefs = _delta(before, "payload_increfs", "payload_decrefs")
    assert increfs - decrefs == 1 and decrefs <= 1, (increfs, decrefs)
    with graph.instantiate() as ex:
        # Instantiation boxes what the executable keeps alive (one more
        # reference, the box's); replays take none, however many.
        instantiated = _delta(before, "payload_increfs")
        for _ in range(5):
            ex.launch(stream)
        stream.synchronize()
        assert _delta(before, "payload_increfs") == instantiated
    assert seen == ["x"] * 5
    graph.close()
    gc.collect()
    # CUDA releases the user objects on its own thread (a later CUDA call may
    # be what runs them); each drop follows through the deferred queue.
    for _ in range(200):
        streams._cudart._drain_deferred()
        if _delta(before, "payload_decrefs") == instantiated:
            break
        stream.synchronize()
        time.sleep(0.01)
    assert _delta(before, "payload_increfs", "payload_decrefs") == instantiated * 2
    assert streams.debug_counters()["live_host_calls"] == before["live_host_calls"]


@debug_only
@pytest.mark.gpu
def test_only_graphs_with_host_callables_box_their_executables(stream):
    # The box is a CUDA user object owning one payload reference; an
    # executable holding any user object costs CUDA a tracking of every
    # replay, so only graphs whose host callables already incur it get one.
    empty = builtin_module().get_kernel("streams_empty")
    with stream.capture() as cap:
        for _ in range(3):
            stream.launch(empty, 1, 1)
    plain = cap.graph
    with_host = streams.Graph()
    with_host.add_host_node(len, ())
    parent = streams.Graph()
    parent.add_child_graph_node(with_host)
    try:
        for graph, boxes in ((plain, 0), (with_host, 1), (parent, 1)):
            before = streams.debug_counters()
            with graph.instantiate() as ex:
                assert _delta(before, "payload_increfs") == (boxes,), graph
                ex.launch(stream)
                stream.synchronize()
    finally:
        for graph in (plain, with_host, parent):
            graph.close()
    for _ in range(200):
        streams._cudart._drain_deferred()
        if streams.debug_counters()["live_payload_refs"] == 0:
            break
        time.sleep(0.01)


@debug_only
@pytest.mark.gpu
def test_allocations_and_modules_are_given_back(stream):
    before = streams.debug_counters()
    buf = DeviceBuffer(4096, stream)
    pinned = PinnedBuffer(4096)
    mod = builtin_module()
    assert _delta(before, "memory_allocs", "module_loads") == (2, 1)
    buf.close()
    buf.close()                       # idempotent: counted once
    pinned.close()
    mod.close()
    assert _delta(before, "memory_frees", "module_unloads") == (2, 1)
    gone = DeviceBuffer(64, stream)   # freed by the garbage collector instead
    del gone
    gc.collect()
    assert _delta(before, "memory_allocs", "memory_frees") == (3, 3)


@debug_only
@pytest.mark.gpu
def test_unconsumed_dlpack_capsule_gives_its_reference_back(stream):
    buf = DeviceBuffer(256, stream)
    before = streams.debug_counters()
    capsule = buf.__dlpack__(stream=None)
    assert _delta(before, "dlpack_increfs", "dlpack_decrefs") == (1, 0)
    del capsule
    gc.collect()
    assert _delta(before, "dlpack_increfs", "dlpack_decrefs") == (1, 1)
    stream.synchronize()
    buf.close()
