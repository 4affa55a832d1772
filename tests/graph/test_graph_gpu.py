"""Stream capture and CUDA graphs on a real GPU."""
import sys
import threading

import pytest

import streams
from streams import CudaError, Event, Graph, HostCallbackError, Stream
from streams.testing import launch_empty, spin

from _support import graphs_released, wait_for_refcount  # noqa: F401  (fixture)

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("graphs_released")]

MS = 1000


def test_capture_status_and_info(stream):
    assert stream.is_capturing() is False
    assert stream.capture_status == "none"
    assert stream.capture_info().status == "none"
    stream.begin_capture()
    try:
        assert stream.is_capturing() is True
        assert stream.capture_status == "active"
        launch_empty(stream)
        info = stream.capture_info()
        assert info.status == "active" and info.id > 0
        assert len(info.dependencies) == 1
        assert info.dependencies[0].type == "kernel"
        assert len(info.edge_data) == 1
    finally:
        graph = stream.end_capture()
    assert stream.is_capturing() is False
    assert [n.type for n in graph.nodes] == ["kernel"]
    graph.close()


def test_captured_work_runs_on_every_replay(stream):
    seen = []
    with stream.capture() as cap:
        spin(stream, 10 * MS)
        stream.launch_host_func(seen.append, "x")
    assert seen == [], "capture records, it does not run"
    graph = cap.graph
    with graph.instantiate() as ex:
        for _ in range(3):
            ex.launch(stream)
        stream.synchronize()
    assert seen == ["x", "x", "x"]
    graph.close()


def test_10000_replays_count_callbacks_and_release_payload(stream):
    counter = [0]

    def bump(arg):
        counter[0] += arg

    rc = sys.getrefcount(bump)
    with stream.capture() as cap:
        launch_empty(stream)
        stream.launch_host_func(bump, 1)
    ex = cap.graph.instantiate()
    cap.graph.close()  # the exec alone keeps the callable alive
    assert sys.getrefcount(bump) > rc
    for _ in range(10_000):
        ex.launch(stream)
    stream.synchronize()
    assert counter[0] == 10_000
    ex.close()
    stream.synchronize()
    del cap
    assert wait_for_refcount(bump, rc), (sys.getrefcount(bump), rc)


def test_fork_join_capture_across_streams():
    main, side = Stream(), Stream()
    order = []
    lock = threading.Lock()

    def note(tag):
        with lock:
            order.append(tag)

    try:
        with main.capture() as cap:
            fork = main.record()
            side.wait_event(fork)
            side.launch_host_func(note, "side")
            spin(main, 20 * MS)
            main.launch_host_func(note, "main")
            join = side.record()
            main.wait_event(join)
            main.launch_host_func(note, "joined")
        types = sorted(n.type for n in cap.graph.nodes)
        assert types.count("host") == 3 and "kernel" in types
        ex = cap.graph.instantiate()
        for _ in range(5):
            ex.launch(main)
        main.synchronize()
        assert len(order) == 15
        assert all(order[i * 3 + 2] == "joined" for i in range(5))
        ex.close()
        cap.graph.close()
        fork.close()
        join.close()
    finally:
        main.close()
        side.close()


def test_capture_failure_in_block_ends_capture(stream):
    with pytest.raises(ZeroDivisionError):
        with stream.capture():
            launch_empty(stream)
            1 / 0
    assert stream.is_capturing() is False
    spin(stream, 1)
    stream.synchronize()


def test_misuse_unsupported_then_invalidated(stream):
    stream.begin_capture()
    with pytest.raises(CudaError) as info:
        stream.synchronize()
    assert info.value.name == "cudaErrorStreamCaptureUnsupported"
    assert stream.capture_status == "invalidated"
    with pytest.raises(CudaError) as info:
        stream.end_capture()
    assert info.value.name == "cudaErrorStreamCaptureInvalidated"
    assert stream.is_capturing() is False
    stream.synchronize()


def test_misuse_unjoined():
    main, side = Stream(), Stream()
    try:
        main.begin_capture()
        fork = main.record()
        side.wait_event(fork)
        launch_empty(side)  # side never joins back
        with pytest.raises(CudaError) as info:
            main.end_capture()
        assert info.value.name == "cudaErrorStreamCaptureUnjoined"
        assert main.is_capturing() is False
        assert side.is_capturing() is False
        fork.close()
    finally:
        main.close()
        side.close()


def test_misuse_implicit_legacy_stream(stream):
    stream.begin_capture()
    try:
        with pytest.raises(CudaError) as info:
            launch_empty(Stream.legacy)
        assert info.value.name == "cudaErrorStreamCaptureImplicit"
    finally:
        with pytest.raises(CudaError):
            stream.end_capture()  # invalidated by the implicit sync
    assert stream.is_capturing() is False


def test_capture_modes_and_exchange():
    assert streams.exchange_capture_mode("relaxed") == "global"
    assert streams.exchange_capture_mode("thread_local") == "relaxed"
    assert streams.exchange_capture_mode("global") == "thread_local"
    with streams.capture_mode("relaxed"):
        with streams.capture_mode("thread_local"):
            assert streams.exchange_capture_mode("thread_local") == "thread_local"
        assert streams.exchange_capture_mode("relaxed") == "relaxed"
    assert streams.exchange_capture_mode("global") == "global"
    with pytest.raises(ValueError, match="mode must be one of"):
        streams.capture_mode("loose")
    s = Stream()
    with pytest.raises(ValueError, match="mode must be one of"):
        s.begin_capture("sometimes")
    assert s.is_capturing() is False
    for mode in ("global", "thread_local", "relaxed"):
        with s.capture(mode=mode) as cap:
            launch_empty(s)
        cap.graph.close()
    s.close()


def test_update_capture_dependencies(stream):
    g = Graph()
    extra = g.add_empty_node()
    with pytest.raises(ValueError, match="mode must be 'add' or 'set'"):
        stream.update_capture_dependencies([], mode="merge")
    with stream.capture() as cap:
        launch_empty(stream)
        deps = stream.capture_info().dependencies
        assert len(deps) == 1
        stream.update_capture_dependencies([], mode="set")
        assert stream.capture_info().dependencies == []
        stream.update_capture_dependencies(deps, mode="add")
        assert stream.capture_info().dependencies == deps
        with pytest.raises(TypeError, match=r"nodes\[0\] must be a GraphNode"):
            stream.update_capture_dependencies([1])
    cap.graph.close()
    g.close()
    del extra


def test_begin_capture_to_graph(stream):
    g = Graph()
    first = g.add_empty_node()
    stream.begin_capture_to_graph(g, dependencies=[first])
    launch_empty(stream)
    result = stream.end_capture()
    assert result is g
    kinds = sorted(n.type.name.lower() for n in g.nodes)
    assert kinds == ["empty", "kernel"]
    (src, dst), = g.edges
    assert src == first and dst.type == "kernel"
    with pytest.raises(TypeError, match="graph must be a streams.Graph"):
        stream.begin_capture_to_graph("g")
    g.close()


def test_explicit_graph_nodes_and_dot():
    hits = []
    g = Graph()
    a = g.add_kernel_node("spin", 1, 1, 5 * MS * 1000)
    b = g.add_host_node(hits.append, "host", dependencies=[a])
    ev = Event()
    c = g.add_event_record_node(ev, dependencies=b)
    child = Graph()
    child.add_empty_node()
    d = g.add_child_graph_node(child, dependencies=[c])
    e = g.add_event_wait_node(ev, dependencies=[d])
    assert b.dependencies == [a]
    assert sorted(n.type.name.lower() for n in g.nodes) == sorted(
        ["kernel", "host", "event_record", "graph", "event_wait"])
    assert len(g.edges) == 4
    dot = g.debug_dot()
    assert dot.startswith("digraph")
    # CUDA labels kernel nodes with the kernel's name, others with their type.
    for label in ("streams_spin", "HOST", "EVENT_RECORD", "EVENT_WAIT", "EMPTY"):
        assert f"\n{label}\n" in dot, label
    assert dot.count("->") == 4
    verbose = g.debug_dot(verbose=True)
    assert len(verbose) > len(dot)
    s = Stream()
    with g.instantiate(upload_stream=s) as ex:
        ex.launch(s)
        ex.launch(s)
        s.synchronize()
    assert hits == ["host", "host"]
    with pytest.raises(ValueError, match="no built-in kernel 'nope'"):
        g.add_kernel_node("nope")
    with pytest.raises(TypeError, match="takes 1 argument"):
        g.add_kernel_node("spin")
    with pytest.raises(TypeError, match=r"argument 0 must be an integer \(uint64\), not str"):
        g.add_kernel_node("spin", 1, 1, "x")
    with pytest.raises(ValueError, match="grid dimensions must be >= 1"):
        g.add_kernel_node("empty", grid=0)
    with pytest.raises(TypeError, match=r"dependencies\[0\] must be a GraphNode"):
        g.add_empty_node(dependencies=[1])
    for obj in (g, child, ev, s):
        obj.close()
    del a, b, c, d, e


def test_memset_memcpy_and_kernel_nodes_move_data():
    np = pytest.importorskip("numpy")
    cupy = pytest.importorskip("cupy")
    n = 1 << 16
    buf = cupy.empty(n, dtype=cupy.uint32)
    out = cupy.empty(n, dtype=cupy.uint32)
    g = Graph()
    m = g.add_memset_node(buf.data.ptr, 0, n * 4)
    k = g.add_kernel_node("increment_u32", 64, 256, buf.data.ptr, n,
                          dependencies=[m])
    k2 = g.add_kernel_node("increment_u32", 64, 256, buf.data.ptr, n,
                           dependencies=[k])
    g.add_memcpy_node(out.data.ptr, buf.data.ptr, n * 4, dependencies=[k2])
    s = Stream()
    with g.instantiate() as ex:
        ex.launch(s)
        s.synchronize()
    assert np.array_equal(cupy.asnumpy(out), np.full(n, 2, dtype=np.uint32))
    g.close()
    s.close()


@pytest.mark.timing     # the replay must still be queued after the host calls
def test_a_closed_executable_lets_go_after_its_replays_while_still_referenced():
    """What an executable's replays use (here a buffer its kernel node
    writes) is let go once the executable and its graph are closed and the
    launches ended, even while both closed objects are still referenced,
    not when the objects themselves go."""
    import gc
    import weakref
    s = Stream()
    buf = streams.DeviceBuffer(4096, s)
    gone = weakref.ref(buf)
    g = Graph()
    g.add_kernel_node("fill_u32", 1, 256, buf, 3, 256)
    ex = g.instantiate()
    g.close()
    del buf
    spin(s, 50_000)                    # 50 ms
    ex.launch(s)
    ex.close()
    gc.collect()
    assert gone() is not None          # the replay is still queued
    s.synchronize()
    streams._cudart._drain_deferred()
    gc.collect()
    assert ex.closed and g.closed and gone() is None
    s.close()


def test_host_node_refcount_follows_graph_clone_and_exec():
    def fn(arg):
        pass

    arg = object()
    rc_fn, rc_arg = sys.getrefcount(fn), sys.getrefcount(arg)
    g = Graph()
    g.add_host_node(fn, arg)
    clone = g.clone()
    ex = clone.instantiate()
    g.close()
    clone.close()
    s = Stream()
    ex.launch(s)  # still runs: the exec owns the payload
    s.synchronize()
    assert sys.getrefcount(fn) > rc_fn
    ex.close()
    s.close()
    assert wait_for_refcount(fn, rc_fn)
    assert wait_for_refcount(arg, rc_arg)


def test_graph_callback_error_reported_and_raised_by_next_launch(monkeypatch):
    reports = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)

    def broken(arg):
        raise KeyError(arg)

    g = Graph()
    g.add_host_node(broken, "k")
    s = Stream()
    ex = g.instantiate()
    ex.launch(s)
    s.synchronize()
    assert len(reports) == 1 and "broken" in repr(reports[0].object)
    with pytest.raises(HostCallbackError, match="KeyError") as info:
        ex.launch(s)
    assert isinstance(info.value.__cause__, KeyError)
    ex.launch(s)  # delivered once
    s.synchronize()
    for obj in (ex, g, s):
        obj.close()


def test_exec_update_success_and_failure(stream):
    def build(n_kernels):
        g = Graph()
        prev = ()
        for _ in range(n_kernels):
            prev = [g.add_kernel_node("spin", 1, 1, 1000, dependencies=prev)]
        return g

    g1, g2, g3 = build(2), build(2), build(3)
    ex = g1.instantiate()
    ok = ex.update(g2)
    assert ok.ok and ok.reason == "success" and ok.error_node is None
    bad = ex.update(g3)
    assert not bad.ok and bad.reason == "topology changed"
    ex.launch(stream)
    stream.synchronize()
    for obj in (ex, g1, g2, g3):
        obj.close()


def test_event_record_external_inside_capture(stream):
    ev = Event()
    with stream.capture() as cap:
        launch_empty(stream)
        ev.record(stream, external=True)
    assert "event_record" in [n.type for n in cap.graph.nodes]
    cap.graph.close()
    ev.close()


def test_use_after_close_graph():
    g = Graph()
    g.close()
    g.close()
    for call in (lambda: g.nodes, g.instantiate, lambda: g.add_empty_node(), g.clone):
        with pytest.raises(ValueError, match="closed Graph"):
            call()
    g2 = Graph()
    ex = g2.instantiate()
    ex.close()
    ex.close()
    with pytest.raises(ValueError, match="closed GraphExec"):
        ex.launch(Stream.legacy)
    g2.close()
