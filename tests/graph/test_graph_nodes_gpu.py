"""Graph nodes beyond capture: conditional nodes driven by the
built-in condition kernels, graph memory nodes and their footprint, node by
node updates of an executable, enabled/disabled nodes, kernel node launch
attributes, and what graphs keep alive.  Every test checks numbers the GPU
computed."""
import gc
import sys
import textwrap

import pytest

import streams
from streams import CudaError, Event, Graph
from streams.testing import spin
from streams._launch import builtin_kernel

from _support import (BLOCK, GRID, MS, N, close_all, graphs_released,  # noqa: F401
                      run_python, to_host, wait_for_refcount)

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("graphs_released")]

np = pytest.importorskip("numpy")


def set_u32(buf, value, stream):
    host = np.full(N, value, dtype=np.uint32)
    streams.memcpy_async(buf, host, stream=stream)
    stream.synchronize()


# ---- conditional nodes -------------------------------------------------------------------

def test_while_loop_counts_to_n_on_the_device(stream, device_buffer, closer):
    counter = device_buffer()
    g = closer(Graph())
    cond = g.create_condition()
    # Tested before the loop too: a counter already at 25 runs no iteration.
    check = g.add_kernel_node("set_condition_lt", 1, 1, cond, counter, 25)
    loop, body = g.add_while(cond, dependencies=[check])
    closer(body)
    assert loop.type == "conditional" and body.parent is g
    inc = body.add_kernel_node("increment_u32", 1, 1, counter, 1)
    body.add_kernel_node("set_condition_lt", 1, 1, cond, counter, 25, dependencies=[inc])
    with g.instantiate() as ex:
        ex.launch(stream)
        host = to_host(counter, stream)
        assert host[0] == 25 and not host[1:].any()
        ex.launch(stream)   # nothing left to count
        assert to_host(counter, stream)[0] == 25
    close_all(body, g)


def test_while_body_filled_by_capture(stream, device_buffer, closer):
    counter = device_buffer()
    g = closer(Graph())
    cond = g.create_condition(1)    # reset to 1 at each launch: the body runs first
    _, body = g.add_while(cond)
    closer(body)
    stream.begin_capture_to_graph(body)
    stream.launch(builtin_kernel("increment_u32"), GRID, BLOCK, counter, N)
    stream.launch(builtin_kernel("set_condition_lt"), 1, 1, cond, counter, 7)
    assert stream.end_capture() is body
    assert sorted(n.type.name for n in body.nodes) == ["KERNEL", "KERNEL"]
    with g.instantiate() as ex:
        ex.launch(stream)
        assert (to_host(counter, stream) == 7).all()
        ex.launch(stream)   # do-while: one more run
        assert (to_host(counter, stream) == 8).all()
    close_all(body, g)


def test_if_else_branch_chosen_by_device_flag(stream, device_buffer, closer):
    flag, a, b = device_buffer(), device_buffer(), device_buffer()
    g = closer(Graph())
    cond = g.create_condition()
    setter = g.add_kernel_node("set_condition", 1, 1, cond, flag)
    _, then_body, else_body = g.add_if_else(cond, dependencies=[setter])
    closer(then_body, else_body)
    then_body.add_kernel_node("fill_u32", GRID, BLOCK, a, 7, N)
    else_body.add_kernel_node("fill_u32", GRID, BLOCK, b, 9, N)
    with g.instantiate() as ex:
        set_u32(flag, 1, stream)
        ex.launch(stream)
        assert (to_host(a, stream) == 7).all() and not to_host(b, stream).any()
        set_u32(flag, 0, stream)
        ex.launch(stream)
        assert (to_host(b, stream) == 9).all()
    close_all(then_body, else_body, g)


def _if_graph(device_buffer, closer):
    """A graph whose if-node (no else) increments ``out`` when ``flag`` is
    nonzero: (flag, out, graph, body)."""
    flag, out = device_buffer(), device_buffer()
    g = closer(Graph())
    cond = g.create_condition()
    setter = g.add_kernel_node("set_condition", 1, 1, cond, flag)
    _, body = g.add_if(cond, dependencies=[setter])
    closer(body)
    body.add_kernel_node("increment_u32", GRID, BLOCK, out, N)
    return flag, out, g, body


def test_if_without_else_skips_on_zero(stream, device_buffer, closer):
    flag, out, g, body = _if_graph(device_buffer, closer)
    with g.instantiate() as ex:
        ex.launch(stream)   # flag 0
        set_u32(flag, 5, stream)
        ex.launch(stream)   # nonzero: runs
        ex.launch(stream)
        assert (to_host(out, stream) == 2).all()
    close_all(body, g)


def test_a_conditional_graph_has_one_executable_at_a_time(stream, device_buffer, closer):
    """CUDA refuses a second executable of a graph with a conditional node
    while the first lives (cudaErrorNotSupported on an H200, driver 580):
    the error says which rule it is, and once the first is closed a
    new one instantiates and runs."""
    flag, out, g, body = _if_graph(device_buffer, closer)
    first = g.instantiate()
    with pytest.raises(streams.CudaError, match="one executable at a time") as info:
        g.instantiate()
    assert info.value.name == "cudaErrorNotSupported"
    assert "conditional" in info.value.message
    first.close()
    with g.instantiate(auto_free_on_launch=True) as ex:
        set_u32(flag, 1, stream)
        ex.launch(stream)
        assert (to_host(out, stream) == 1).all()
    close_all(body, g)


def test_switch_selects_one_of_four_bodies(stream, device_buffer, closer):
    flag, out = device_buffer(), device_buffer()
    g = closer(Graph())
    cond = g.create_condition()
    setter = g.add_kernel_node("set_condition", 1, 1, cond, flag)
    node, bodies = g.add_switch(cond, 4, dependencies=[setter])
    closer(*bodies)
    assert len(bodies) == 4
    for i, body in enumerate(bodies):
        body.add_kernel_node("fill_u32", GRID, BLOCK, out, 100 + i, N)
    with g.instantiate() as ex:
        for choice in (2, 0, 3):
            set_u32(flag, choice, stream)
            ex.launch(stream)
            assert (to_host(out, stream) == 100 + choice).all(), choice
        set_u32(flag, 4, stream)    # past the last body: none runs
        ex.launch(stream)
        assert (to_host(out, stream) == 103).all()
    close_all(*bodies, g)


def test_if_body_clearing_its_condition_runs_once_per_launch_with_reset(stream, device_buffer,
                                                                       closer):
    # reset=True: "every launch starts from default".  The body clears the
    # condition (set_condition from a zeroed buffer), yet each of 3 launches
    # runs it once; CUDA's own reset=False default (create_condition(1,
    # reset=False)) runs the same graph's body 0 times in 3 launches,
    # against the documented once.
    zero, out = device_buffer(), device_buffer()
    g = closer(Graph())
    cond = g.create_condition(1)
    _, body = g.add_if(cond)
    closer(body)
    inc = body.add_kernel_node("increment_u32", GRID, BLOCK, out, N)
    body.add_kernel_node("set_condition", 1, 1, cond, zero, dependencies=[inc])
    with g.instantiate() as ex:
        for launches in (1, 2, 3):
            ex.launch(stream)
            assert (to_host(out, stream) == launches).all(), launches
    close_all(body, g)


def test_condition_without_reset_keeps_the_previous_launchs_value(stream, device_buffer,
                                                                  closer):
    # reset=False: CUDA assigns nothing at launch, so a launch reads the value
    # the previous launch of the executable left.  The if-node reads the
    # condition before the graph's setter writes it from `flag`.
    flag, out = device_buffer(), device_buffer()
    g = closer(Graph())
    cond = g.create_condition(reset=False)
    node, body = g.add_if(cond)
    closer(body)
    body.add_kernel_node("increment_u32", GRID, BLOCK, out, N)
    g.add_kernel_node("set_condition", 1, 1, cond, flag, dependencies=[node])
    with g.instantiate() as ex:
        set_u32(flag, 1, stream)
        ex.launch(stream)       # reads what CUDA starts with (undocumented); leaves 1
        first = int(to_host(out, stream)[0])
        assert first in (0, 1) and (to_host(out, stream) == first).all()
        set_u32(flag, 0, stream)
        ex.launch(stream)       # reads the 1 left by launch 1: runs; leaves 0
        assert (to_host(out, stream) == first + 1).all()
        ex.launch(stream)       # reads the 0 left by launch 2: skips
        assert (to_host(out, stream) == first + 1).all()
    close_all(body, g)


def test_condition_handle_properties_and_bad_input(device_buffer, closer):
    flag = device_buffer()
    g, other = closer(Graph()), closer(Graph())
    cond = g.create_condition(0, reset=False)
    assert cond.default == 0 and cond.reset is False and cond.graph is g
    # CUDA assigns a default at every launch (reset=True) or never.
    with pytest.raises(ValueError, match="default=3 needs reset=True"):
        g.create_condition(3, reset=False)
    assert int(cond) == cond.handle != 0
    with pytest.raises(TypeError, match="cannot be instantiated"):
        streams.ConditionHandle()
    with pytest.raises(TypeError, match="cond must be a streams.ConditionHandle"):
        g.add_while(cond.handle)
    with pytest.raises(ValueError, match="condition of another graph"):
        other.add_while(cond)
    with pytest.raises(TypeError, match=r"argument 0 must be a streams.ConditionHandle"):
        g.add_kernel_node("set_condition", 1, 1, 12345, flag)
    with pytest.raises(ValueError, match="argument 0 is a ConditionHandle of another graph"):
        other.add_kernel_node("set_condition", 1, 1, cond, flag)
    with pytest.raises(ValueError, match="n must be >= 1"):
        g.add_switch(cond, 0)
    with pytest.raises(ValueError, match="default must be >= 0"):
        g.create_condition(-1)
    _, body = g.add_if(cond)
    closer(body)
    # A body's kernel may set the condition of the graph holding it.
    body.add_kernel_node("set_condition", 1, 1, cond, flag)
    with pytest.raises(ValueError, match="cannot go in the body of a conditional node"):
        body.add_host_node(print)
    assert [n.type for n in g.nodes] == ["conditional"]
    close_all(body, g, other)


def test_body_keeps_its_parent_until_closed():
    # In a child: a body outliving a destroyed parent would be a use after free.
    code = textwrap.dedent("""
        import gc
        import streams
        g = streams.Graph()
        cond = g.create_condition()
        node, body = g.add_if(cond)
        destroyed = streams.debug_counters()["graphs_destroyed"]
        g.close()
        del g, node
        gc.collect()
        # Closed for use, not destroyed: its body still holds it.
        assert streams.debug_counters()["graphs_destroyed"] == destroyed
        assert cond.graph is not None and body.parent is not None
        body.add_kernel_node("empty")
        body.close()
        assert streams.debug_counters()["graphs_destroyed"] == destroyed + 1
        assert body.parent is None
        try:
            body.add_empty_node()
        except ValueError as exc:
            assert "closed Graph" in str(exc), exc
        else:
            raise AssertionError("a closed body took a node")
        try:
            streams.Graph().add_while(cond)
        except ValueError as exc:
            assert "closed or gone" in str(exc), exc
        else:
            raise AssertionError("a dead graph's condition was taken")
        print("ok")
    """)
    result = run_python(code, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result


# ---- memory nodes -------------------------------------------------------------------------

def settled_graph_memory():
    """graph_memory_info() once nothing runs and trim_graph_memory() gave
    back what it can: what unfreed allocations (of earlier tests of this
    process too) still hold."""
    streams.synchronize_device()
    streams.trim_graph_memory()
    return streams.graph_memory_info()


def test_memory_nodes_alloc_compute_copy_free_1000_replays(stream, device_buffer, closer):
    out = device_buffer()
    base = settled_graph_memory()
    streams.reset_graph_memory_high()
    g = closer(Graph())
    alloc = g.add_mem_alloc(N * 4)
    node, ptr = alloc
    assert node.type == "mem_alloc" and ptr == alloc.ptr != 0 and alloc.nbytes == N * 4
    fill = g.add_kernel_node("fill_u32", GRID, BLOCK, alloc, 5, N, dependencies=[node])
    inc = g.add_kernel_node("increment_u32", GRID, BLOCK, alloc, N, dependencies=[fill])
    copy = g.add_memcpy_node(out, alloc, N * 4, dependencies=[inc])
    free = g.add_mem_free(alloc, dependencies=[copy])
    assert free.type == "mem_free"
    with g.instantiate() as ex:
        # Without the free node every launch after the first would fail.
        for _ in range(1000):
            ex.launch(stream)
        assert (to_host(out, stream) == 6).all()
        info = streams.graph_memory_info()
        # "used" counts pages mapped into a graph, and a free node does not
        # unmap them (CUDA keeps them for the next launch): no exact value
        # is documented while the executable lives.
        assert info.used_high >= N * 4, info
        assert info.used <= info.reserved, info     # mapped pages are reserved ones
    g.close()
    # Nothing left allocated: trimming gives back all this test took.
    after = settled_graph_memory()
    assert after.used == base.used and after.reserved == base.reserved, (base, after)


def test_auto_free_on_launch_and_free_in_another_graph(stream, device_buffer, closer):
    out = device_buffer()
    base = settled_graph_memory()
    g = closer(Graph())
    alloc = g.add_mem_alloc(N * 4)
    fill = g.add_kernel_node("fill_u32", GRID, BLOCK, alloc, 11, N, dependencies=[alloc.node])
    g.add_memcpy_node(out, alloc, N * 4, dependencies=[fill])   # no free node
    freer = closer(Graph())
    freer.add_mem_free(alloc.ptr)
    free_ex = closer(freer.instantiate())
    live = False    # whether a launch of g left the allocation allocated
    try:
        ex = closer(g.instantiate())
        ex.launch(stream)
        live = True
        stream.synchronize()
        assert (to_host(out, stream) == 11).all()
        # An allocation not freed yet keeps its pages mapped.
        assert streams.graph_memory_info().used >= base.used + N * 4
        # The allocation outlives the launch: relaunching first needs it freed.
        with pytest.raises(CudaError, match="cudaErrorInvalidValue"):
            ex.launch(stream)
        free_ex.launch(stream)
        live = False
        ex.launch(stream)
        live = True
        free_ex.launch(stream)
        live = False
        stream.synchronize()
        ex.close()
        # With auto_free_on_launch, a relaunch frees the previous allocation.
        with g.instantiate(auto_free_on_launch=True) as auto:
            for _ in range(3):
                auto.launch(stream)
                live = True
            stream.synchronize()
        free_ex.launch(stream)      # the last launch's allocation
        live = False
        stream.synchronize()
    finally:
        if live:
            # Graph memory outlives its graphs: leave none to later tests.
            try:
                free_ex.launch(stream)
                stream.synchronize()
            except CudaError:
                pass    # the test's own failure is what matters
    close_all(free_ex, freer, g)
    # Every allocation was freed: trimming gives back all this test took (an
    # unfreed allocation's memory stays).
    after = settled_graph_memory()
    assert after.used == base.used and after.reserved == base.reserved, (base, after)


def test_mem_free_bad_input(device_buffer, closer):
    buf = device_buffer()
    g = closer(Graph())
    with pytest.raises(TypeError, match="ptr must be a streams.GraphAllocation"):
        g.add_mem_free("x")
    with pytest.raises(ValueError, match="CUDA refused to free it in a graph"):
        g.add_mem_free(buf.__cuda_array_interface__["data"][0])
    with pytest.raises(ValueError, match="nbytes must be > 0"):
        g.add_mem_alloc(0)
    assert g.nodes == []


# ---- node by node updates -------------------------------------------------------------------

def test_kernel_node_update_changes_arguments_between_replays(stream, device_buffer, closer):
    a, b = device_buffer(), device_buffer()
    g = closer(Graph())
    k = g.add_kernel_node("fill_u32", GRID, BLOCK, a, 1, N)
    # Not given to `closer`: the executable must be gone for b's count to drop.
    ex = g.instantiate()
    try:
        ex.launch(stream)
        assert (to_host(a, stream) == 1).all()
        rc = sys.getrefcount(b)
        ex.set_kernel_node(k, "fill_u32", GRID, BLOCK, b, 2, N)
        assert sys.getrefcount(b) > rc     # the executable holds the new argument
        ex.launch(stream)
        assert (to_host(b, stream) == 2).all() and (to_host(a, stream) == 1).all()
        ex.set_kernel_node(k, "fill_u32", GRID, BLOCK, a, 3, N)
        ex.launch(stream)
        assert (to_host(a, stream) == 3).all() and (to_host(b, stream) == 2).all()
        with pytest.raises(TypeError, match="takes 3 argument"):
            ex.set_kernel_node(k, "fill_u32", GRID, BLOCK, a)
    finally:
        ex.close()
    g.close()
    del ex, k
    streams.synchronize_device()
    assert wait_for_refcount(b, rc)


def test_disabled_node_does_not_run(stream, device_buffer, closer):
    a = device_buffer()
    g = closer(Graph())
    fill = g.add_kernel_node("fill_u32", GRID, BLOCK, a, 1, N)
    inc = g.add_kernel_node("increment_u32", GRID, BLOCK, a, N, dependencies=[fill])
    with g.instantiate() as ex:
        assert ex.is_enabled(inc) is True
        ex.set_enabled(inc, False)
        assert ex.is_enabled(inc) is False
        ex.launch(stream)
        assert (to_host(a, stream) == 1).all()
        ex.set_enabled(inc, True)
        ex.launch(stream)
        assert (to_host(a, stream) == 2).all()
    g.close()


def test_memset_memcpy_child_and_event_updates(stream, device_buffer, closer):
    a, b, out, out2 = (device_buffer() for _ in range(4))
    g = closer(Graph())
    ms = g.add_memset_node(a, 1, N * 4)
    cp = g.add_memcpy_node(out, a, N * 4, dependencies=[ms])
    child1, child2 = closer(Graph()), closer(Graph())
    child1.add_kernel_node("fill_u32", GRID, BLOCK, b, 3, N)
    child2.add_kernel_node("fill_u32", GRID, BLOCK, b, 4, N)
    ch = g.add_child_graph_node(child1, dependencies=[cp])
    spin = g.add_kernel_node("spin", 1, 1, 100 * MS * 1000, dependencies=[ch])
    ev1, ev2 = closer(Event()), closer(Event())
    rec = g.add_event_record_node(ev1, dependencies=[spin])
    with g.instantiate() as ex:
        ex.launch(stream)
        assert (to_host(out, stream) == 0x01010101).all()
        assert (to_host(b, stream) == 3).all()
        ex.set_memset_node(ms, a, 2, N * 4)
        ex.set_memcpy_node(cp, out2, a, N * 4)
        ex.set_child_graph_node(ch, child2)
        ex.set_event_record_node(rec, ev2)
        ex.launch(stream)
        assert ev2.query() is False     # recorded after the 100 ms spin
        stream.synchronize()
        assert ev2.query() is True
        assert (to_host(out2, stream) == 0x02020202).all()
        assert (to_host(out, stream) == 0x01010101).all()
        assert (to_host(b, stream) == 4).all()
        with pytest.raises(ValueError, match="nbytes=8192 is more than ptr holds"):
            ex.set_memset_node(ms, a, 2, N * 8)
    close_all(g, child1, child2, ev1, ev2)


def test_host_node_swapped_while_replays_are_in_flight(stream, closer):
    seen = []

    def old(arg):
        seen.append(("old", arg))

    def new(arg):
        seen.append(("new", arg))

    rc_old, rc_new = sys.getrefcount(old), sys.getrefcount(new)
    g = closer(Graph())
    spin = g.add_kernel_node("spin", 1, 1, 30 * MS * 1000)
    host = g.add_host_node(old, 1, dependencies=[spin])
    # Not given to `closer`: the executable must be gone for the counts to drop.
    ex = g.instantiate()
    try:
        for _ in range(3):
            ex.launch(stream)       # still running when the node is updated
        ex.set_host_node(host, new, 2)
        ex.launch(stream)
        stream.synchronize()
        assert seen == [("old", 1)] * 3 + [("new", 2)]
        for _ in range(2):
            ex.launch(stream)
        ex.set_host_node(host, old, 3)
    finally:
        ex.close()      # replays in flight keep their callables
    g.close()
    del ex, host
    stream.synchronize()
    assert seen[4:] == [("new", 2)] * 2
    assert wait_for_refcount(old, rc_old) and wait_for_refcount(new, rc_new)


def test_whole_update_then_node_update(stream, device_buffer, closer):
    a, b = device_buffer(), device_buffer()
    g1, g2 = closer(Graph()), closer(Graph())
    g1.add_kernel_node("fill_u32", GRID, BLOCK, a, 1, N)
    k2 = g2.add_kernel_node("fill_u32", GRID, BLOCK, a, 2, N)
    with g1.instantiate() as ex:
        assert ex.update(g2).ok
        ex.launch(stream)
        assert (to_host(a, stream) == 2).all()
        # Nodes name the executable's nodes by the graph it came from.
        with pytest.raises(ValueError, match="not a node of the graph this GraphExec"):
            ex.set_kernel_node(k2, "fill_u32", GRID, BLOCK, b, 5, N)
        k1 = g1.nodes[0]
        ex.set_kernel_node(k1, "fill_u32", GRID, BLOCK, b, 5, N)
        ex.launch(stream)
        assert (to_host(b, stream) == 5).all()
    close_all(g1, g2)


def test_node_updates_bad_input(stream, closer):
    g, other = closer(Graph()), closer(Graph())
    e = g.add_empty_node()
    k = g.add_kernel_node("empty")
    foreign = other.add_kernel_node("empty")
    ex = closer(g.instantiate())
    with pytest.raises(TypeError, match="node must be a GraphNode"):
        ex.set_enabled("x", False)
    with pytest.raises(ValueError, match="not a node of the graph"):
        ex.set_enabled(foreign, False)
    with pytest.raises(CudaError):
        ex.set_enabled(e, False)    # an empty node cannot be disabled
    with pytest.raises(TypeError, match="takes 0 argument"):
        ex.set_kernel_node(k, "empty", 1, 1, 5)
    ex.close()
    with pytest.raises(ValueError, match="closed GraphExec"):
        ex.set_enabled(k, False)
    g2 = closer(Graph())
    k2 = g2.add_kernel_node("empty")
    ex2 = closer(g2.instantiate())
    g2.close()
    with pytest.raises(ValueError, match="closed Graph|instantiated from is closed"):
        ex2.set_enabled(k2, False)
    close_all(ex2, g, other)


# ---- kernel node launch attributes --------------------------------------------------------

def test_kernel_node_cluster_and_cooperative(stream, device_buffer, closer):
    a = device_buffer()
    g = closer(Graph())
    prev = g.add_kernel_node("fill_u32", GRID, BLOCK, a, 1, N, cooperative=True)
    expected = 1
    if streams.Device(0).compute_capability >= (9, 0):   # clusters: Hopper and newer
        g.add_kernel_node("increment_u32", 2, BLOCK, a, N, cluster=(2, 1, 1),
                          dependencies=[prev])
        expected = 2
    with pytest.raises(ValueError, match="dimensions must be >= 1"):
        g.add_kernel_node("empty", cluster=0)
    assert len(g.nodes) == expected
    with g.instantiate() as ex:
        ex.launch(stream)
        assert (to_host(a, stream) == expected).all()
    g.close()


def test_graph_keeps_buffer_of_kernel_node_alive(stream):
    buf = streams.DeviceBuffer(N * 4, stream=stream)
    g = Graph()
    g.add_kernel_node("fill_u32", GRID, BLOCK, buf, 8, N)
    buf.close()     # in use by the graph: freed once the graph is gone
    try:
        with g.instantiate() as ex:
            ex.launch(stream)
            stream.synchronize()
    except BaseException:
        g.close()
        raise
    del ex
    before = streams.debug_counters()["live_buffers"]
    g.close()
    del g
    gc.collect()
    streams.synchronize_device()
    assert streams.debug_counters()["live_buffers"] == before - 1


def _live_buffers():
    return streams.debug_counters()["live_buffers"]


def test_executable_without_host_callables_holds_what_updates_bring(stream):
    # No host callable in the graph: the executable owns no CUDA user object
    # (each would cost every replay).  The GraphExec holds the buffer a node
    # update brought, and once it is closed, until the launches marked since
    # have ended: a replay still queued behind a spin writes into live memory.
    a = streams.DeviceBuffer(N * 4, stream=stream)
    b = streams.DeviceBuffer(N * 4, stream=stream)
    g = Graph()
    k = g.add_kernel_node("fill_u32", GRID, BLOCK, a, 1, N)
    ex = g.instantiate()
    try:
        ex.set_kernel_node(k, "fill_u32", GRID, BLOCK, b, 7, N)
        ex.launch(stream)
        stream.synchronize()
        assert (to_host(b, stream) == 7).all()
        b.close()       # in use by the executable: freed once it is gone
        before = _live_buffers()
        spin(stream, 200 * MS)
        ex.launch(stream)       # queued behind the spin
    except BaseException:
        ex.close()
        g.close()
        raise
    ex.close()
    del ex
    gc.collect()
    streams._cudart._drain_deferred()
    assert stream.query() is False                  # the replay has not run yet
    assert _live_buffers() == before                # so b is still there
    assert streams._cudart._parked_count() >= 1
    stream.synchronize()
    streams._cudart._drain_deferred()
    assert _live_buffers() == before - 1
    g.close()
    a.close()


def test_closed_executable_keeps_its_graphs_buffers_for_replays_in_flight(stream):
    # What the graph's own nodes need (here a buffer its user closed) stays
    # alive after the executable and the graph are gone, until the replays
    # queued before have ended; streams.synchronize_device() lets it go.
    buf = streams.DeviceBuffer(N * 4, stream=stream)
    g = Graph()
    g.add_kernel_node("fill_u32", GRID, BLOCK, buf, 3, N)
    buf.close()
    ex = g.instantiate()
    try:
        spin(stream, 200 * MS)
        ex.launch(stream)
    except BaseException:
        ex.close()
        g.close()
        raise
    before = _live_buffers()
    ex.close()
    g.close()
    del ex, g
    gc.collect()
    streams._cudart._drain_deferred()
    assert stream.query() is False
    assert _live_buffers() == before
    streams.synchronize_device()
    assert _live_buffers() == before - 1
