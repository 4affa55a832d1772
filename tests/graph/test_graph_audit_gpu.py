"""Graphs and executables as an outside audit found them wanting, each case
checked on the GPU's data, on the debug counters or on the error raised:

* an executable's kernel node keeps what the executable last gave it:
  ``set_kernel_node_args`` after ``set_kernel_node``, after ``update(graph2)``
  and after a change of the graph's own node (``GraphNode.set_args``)
  changes only the arguments it names;
* a pointer given to ``set_kernel_node_args``/``GraphNode.set_args`` is
  checked as every launch checks it (memory CUDA knows);
* a node added to a capture's graph through ``capture_info().graph`` is
  kept by the Graph that ``end_capture`` returns, and its host callbacks'
  errors are raised by that graph's executables;
* a host callback that ``update``, a child graph or ``set_child_graph_node``
  brings raises ``HostCallbackError`` at the executable's next launch;
* a graph closed while a capture into it runs lets go of what its nodes
  need once the capture ends its use (and ``end_capture`` says it was
  closed), and an invalidated capture into a graph closed meanwhile does
  not destroy CUDA's freed graph again;
* ``capture_info().graph`` is the Graph ``end_capture`` returns (one
  object: its nodes, its executables' record, its close), captures ended
  by another library leave nothing registered, and what nodes added to
  their graph need lives as long as CUDA's graph;
* a node is read only while its graph is held, and changes of one node in
  several threads are whole;
* a host callback's error is raised by the executables that run it, no
  others (after an update back, for an executable made before a child was
  added); a launch into a capture, which CUDA refuses, says so and links
  nothing.

Scenarios that can crash the process (a kernel of an unloaded module, an
unknown address replayed, a double destroy) run in a child (run_python)."""
import gc
import sys
import textwrap
import time
import weakref

import pytest

np = pytest.importorskip("numpy", reason="these tests check results with numpy")

from _support import closing, run_python

import streams
from streams import DeviceBuffer, Graph, HostCallbackError, Stream

pytestmark = pytest.mark.gpu

N = 1024
FILL_SIG = "pointer, uint32, uint64"


@pytest.fixture
def fill():
    return streams.builtin_kernel("fill_u32")       # (pointer, uint32 value, uint64 count)


@pytest.fixture
def s():
    with closing(Stream(non_blocking=True)) as stream:
        yield stream


def _zeroed(s, n):
    bufs = [DeviceBuffer(4 * N, s) for _ in range(n)]
    for b in bufs:
        streams.memset_async(b, 0, stream=s)
    s.synchronize()
    return bufs


def _words(buf, s):
    host = np.empty(N, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=s)
    s.synchronize()
    return host


def _capture_fill(s, fill, target, value, count=N):
    s.begin_capture()
    s.launch(fill, 4, 256, target, value, count)
    g = s.end_capture()
    (node,) = [nd for nd in g.nodes if nd.type == "kernel"]
    return g, node


def _gone(ref, timeout=5.0):
    # What a CUDA user object held goes once CUDA ran its destructor (on a
    # thread of its own) and the deferred queue was drained.
    deadline = time.monotonic() + timeout
    while ref() is not None and time.monotonic() < deadline:
        gc.collect()
        streams._cudart._drain_deferred()
        time.sleep(0.01)
    return ref() is None


def _child(code, timeout=120):
    r = run_python(textwrap.dedent(code), timeout=timeout)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


# ---- an executable's kernel node: what it runs is its own ----------------------------------------

def test_args_after_set_kernel_node_keep_the_new_kernel_and_arguments(s, fill):
    """set_kernel_node points the node at b (value 7); changing argument 1
    then writes 9 to b.  The failure it catches: the node rebuilt from the
    graph's (the capture on a, value 5), so a gets 9 and b nothing."""
    a, b = _zeroed(s, 2)
    g, node = _capture_fill(s, fill, a, 5)
    exe = g.instantiate()
    exe.set_kernel_node(node, fill, 4, 256, b, 7, N)
    exe.set_kernel_node_args(node, {1: 9})
    exe.launch(s)
    assert (_words(b, s) == 9).all()
    assert (_words(a, s) == 0).all()
    # And again, from the state the last change left (b, 9): count N // 2.
    streams.memset_async(b, 0, stream=s)
    exe.set_kernel_node_args(node, {2: N // 2})
    exe.launch(s)
    host = _words(b, s)
    assert (host[:N // 2] == 9).all() and (host[N // 2:] == 0).all()
    assert (_words(a, s) == 0).all()
    # The graph's node still has what was captured.
    assert node.kernel_params().values(FILL_SIG) == (a.ptr, 5, N)
    for obj in (exe, g, a, b):
        obj.close()


def test_args_after_set_kernel_node_with_another_kernel_keep_that_kernel(s, fill):
    """The node's kernel changed to increment_u32 (pointer, uint64 count):
    a change of its argument 0 increments b by 1.  The failure it catches:
    the node goes back to the captured fill kernel, writing 5 to b."""
    inc = streams.builtin_kernel("increment_u32")
    a, b = _zeroed(s, 2)
    g, node = _capture_fill(s, fill, a, 5)
    exe = g.instantiate()
    exe.set_kernel_node(node, inc, 4, 256, a, N)
    exe.set_kernel_node_args(node, {0: b})
    exe.launch(s)
    exe.launch(s)
    assert (_words(b, s) == 2).all()
    assert (_words(a, s) == 0).all()
    # The layout is increment's (two parameters), not fill's.
    with pytest.raises(IndexError, match="parameter 2 of a kernel with 2 parameters"):
        exe.set_kernel_node_args(node, {2: 1})
    for obj in (exe, g, a, b):
        obj.close()


def test_args_after_update_start_from_the_graph_it_took(s, fill):
    """update(g2), g2 capturing a fill of b: a change of argument 1 writes 9
    to b, also once g2 was changed and closed after the update.  The
    failure it catches: the node rebuilt from g1's node (a)."""
    a, b, c = _zeroed(s, 3)
    g1, node1 = _capture_fill(s, fill, a, 5)
    g2, node2 = _capture_fill(s, fill, b, 6)
    exe = g1.instantiate()
    assert exe.update(g2).ok
    node2.set_args({0: c})           # after the update: for later updates only
    g2.close()
    exe.set_kernel_node_args(node1, {1: 9})
    exe.launch(s)
    assert (_words(b, s) == 9).all()
    assert (_words(a, s) == 0).all() and (_words(c, s) == 0).all()
    # update(g1) brings back g1's arguments, and later changes start there.
    assert exe.update(g1).ok
    exe.set_kernel_node_args(node1, {2: N // 2})
    exe.launch(s)
    host = _words(a, s)
    assert (host[:N // 2] == 5).all() and (host[N // 2:] == 0).all()
    for obj in (exe, g1, a, b, c):
        obj.close()


def test_a_change_of_the_graphs_node_is_not_the_executables(s, fill):
    """node.set_args({0: b}) on the graph after instantiate, then the
    executable's change of argument 1: the executable still writes to a
    (with 9).  The failure it catches: it takes the graph's change too (b
    gets 9)."""
    a, b = _zeroed(s, 2)
    g, node = _capture_fill(s, fill, a, 5)
    exe = g.instantiate()
    node.set_args({0: b})
    exe.set_kernel_node_args(node, {1: 9})
    exe.launch(s)
    assert (_words(a, s) == 9).all()
    assert (_words(b, s) == 0).all()
    # A second change of the graph's node does not reach it either.
    node.set_args({1: 3})
    exe.set_kernel_node_args(node, {2: N})
    exe.launch(s)
    assert (_words(b, s) == 0).all()
    # update(g) takes the graph's node as it is now: b, 3.
    assert exe.update(g).ok
    exe.launch(s)
    assert (_words(b, s) == 3).all()
    # An executable made after the change starts from it.
    streams.memset_async(b, 0, stream=s)
    with g.instantiate() as exe2:
        exe2.set_kernel_node_args(node, {1: 4})
        exe2.launch(s)
        assert (_words(b, s) == 4).all()
    for obj in (exe, g, a, b):
        obj.close()


def test_nodes_that_do_not_pair_in_order_are_refused_not_guessed(s, fill):
    """g2 has g1's topology but its two first nodes made in the other order
    (C depends on [A, B] in both): CUDA pairs them by topology, which the
    order they were made in does not follow, so what each of the
    executable's nodes runs after update(g2) is not known: an argument
    change is refused (ValueError), a whole-node change is taken, and
    argument changes build on it, not on g1's nodes."""
    a, b, c, d = _zeroed(s, 4)
    g1 = Graph()
    na = g1.add_kernel_node(fill, 4, 256, a, 1, N)
    nb = g1.add_kernel_node(fill, 4, 256, b, 2, N)
    g1.add_kernel_node(fill, 4, 256, c, 3, N, dependencies=[na, nb])
    g2 = Graph()
    nb2 = g2.add_kernel_node(fill, 4, 256, b, 20, N)
    na2 = g2.add_kernel_node(fill, 4, 256, a, 10, N)
    g2.add_kernel_node(fill, 4, 256, c, 30, N, dependencies=[na2, nb2])
    exe = g1.instantiate()
    assert exe.update(g2).ok
    with pytest.raises(ValueError, match="updated from another graph"):
        exe.set_kernel_node_args(na, {1: 9})
    exe.set_kernel_node(na, fill, 4, 256, d, 7, N)
    exe.set_kernel_node_args(na, {1: 8})
    exe.launch(s)
    assert (_words(d, s) == 8).all()
    assert (_words(b, s) == 20).all() and (_words(c, s) == 30).all()
    for obj in (exe, g1, g2, a, b, c, d):
        obj.close()


# ---- pointers given to argument changes are checked ----------------------------------------------

def test_an_unknown_address_is_refused_by_argument_changes():
    """0x10000 is no memory CUDA knows: set_kernel_node refused it, and now
    so do set_kernel_node_args (with a signature, with the kernel's own, as
    raw bytes) and GraphNode.set_args, naming the change; the executable
    and the graph keep writing to a.  Taken as is, such a change makes the
    next replay fault, killing the context (hence the child)."""
    out = _child("""
        import streams
        from streams import DeviceBuffer, Stream
        fill = streams.builtin_kernel("fill_u32")
        s = Stream(non_blocking=True)
        a = DeviceBuffer(4096, s)
        streams.memset_async(a, 0, stream=s)
        s.synchronize()
        s.begin_capture(); s.launch(fill, 4, 256, a, 5, 1024); g = s.end_capture()
        (node,) = [n for n in g.nodes if n.type == "kernel"]
        exe = g.instantiate()
        BAD = 0x10000
        tries = {
            "set_kernel_node": lambda: exe.set_kernel_node(node, fill, 4, 256, BAD, 9, 1024),
            "signature": lambda: exe.set_kernel_node_args(
                node, {0: BAD}, signature="pointer, uint32, uint64"),
            "own signature": lambda: exe.set_kernel_node_args(node, {0: BAD}),
            "bytes": lambda: exe.set_kernel_node_args(
                node, {0: BAD.to_bytes(8, "little")}, signature="pointer, uint32, uint64"),
            "uint64 signature": lambda: exe.set_kernel_node_args(
                node, {0: BAD}, signature="uint64, uint32, uint64"),
            "graph node": lambda: node.set_args({0: BAD}),
        }
        for what, call in tries.items():
            try:
                call()
            except ValueError as exc:
                assert "0x10000" in str(exc) or "pointer" in str(exc), (what, exc)
                print("refused", what, flush=True)
            else:
                print("accepted", what, flush=True)
        exe.launch(s)
        s.synchronize()
        host = bytearray(4096)
        streams.memcpy_async(host, a, stream=s)
        s.synchronize()
        print("words", set(host[i] for i in range(0, 4096, 4)), flush=True)
        assert node.kernel_params().values("pointer, uint32, uint64") == (a.ptr, 5, 1024)
        for obj in (exe, g, a, s):
            obj.close()
        print("ok")
    """)
    refused = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("refused")]
    assert refused == ["set_kernel_node", "signature", "own signature", "bytes",
                       "uint64 signature", "graph node"], out
    assert "words {5}" in out and out.rstrip().endswith("ok"), out


# ---- nodes added through capture_info().graph ---------------------------------------------------

def test_a_node_added_to_a_captures_graph_is_kept_by_the_captured_graph():
    """A kernel node added through capture_info().graph (CUDA's pattern,
    with update_capture_dependencies) keeps its module loaded and its buffer
    allocated while the captured Graph or its executable lives, and a
    replay after Module.close() and DeviceBuffer.close() writes the data.
    A host node added the same way raises its error at the executable's
    next launch.  Control: Graph().add_kernel_node.  The failure it
    catches: both kept by the temporary wrapper only (the module unloaded
    under the graph: the replay crashes), and the host node's error sent
    to a slot nobody checks (hence the child)."""
    out = _child("""
        import gc, sys, time
        import streams
        from streams import DeviceBuffer, Graph, HostCallbackError, Module, Stream
        from streams.testing import BUILTIN_PTX, launch_empty
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)

        def raising(_):
            raise KeyError("from a node added to a capture")

        s = Stream(non_blocking=True)
        launch_empty(s)
        for mode in ("control", "capture_info"):
            mod = Module.from_ptx(BUILTIN_PTX)
            k = mod.get_kernel("streams_fill_u32", signature=("pointer", "uint32", "uint64"))
            buf = DeviceBuffer(4096, s)
            streams.memset_async(buf, 0, stream=s)
            s.synchronize()
            if mode == "control":
                g = Graph()
                g.add_kernel_node(k, 4, 256, buf, 7, 1024)
                g.add_host_node(raising)
            else:
                s.begin_capture()
                launch_empty(s)
                info = s.capture_info()
                node = info.graph.add_kernel_node(k, 4, 256, buf, 7, 1024,
                                                  dependencies=info.dependencies)
                host = info.graph.add_host_node(raising, dependencies=[node])
                s.update_capture_dependencies([host], "set")
                g = s.end_capture()
                del info, node, host
            ptr = buf.ptr
            gc.collect()
            base = streams.debug_counters()
            mod.close(); buf.close(); del k
            gc.collect(); streams._cudart._drain_deferred()
            kept = streams.debug_counters()
            exe = g.instantiate()
            exe.launch(s)
            s.synchronize()
            host = bytearray(4096)
            streams.memcpy_async(host, ptr, nbytes=4096, stream=s)
            s.synchronize()
            try:
                exe.launch(s)
                raised = False
            except HostCallbackError:
                raised = True
            s.synchronize()
            exe.close(); g.close()
            deadline = time.monotonic() + 5
            while True:     # the replays' keep-alives go once their marks are seen done
                gc.collect(); streams._cudart._drain_deferred()
                after = streams.debug_counters()
                if (after["live_modules"] < base["live_modules"]
                        and after["live_buffers"] < base["live_buffers"]
                        or time.monotonic() > deadline):
                    break
                time.sleep(0.01)
            print(mode, "modules", base["live_modules"] - kept["live_modules"],
                  "buffers", base["live_buffers"] - kept["live_buffers"],
                  "words", sorted(set(host[i] for i in range(0, 4096, 4))),
                  "raised", raised,
                  "released", base["live_modules"] - after["live_modules"],
                  base["live_buffers"] - after["live_buffers"], flush=True)
        # begin_capture_to_graph: the capture's graph is the Graph itself.
        g = Graph()
        s.begin_capture_to_graph(g)
        launch_empty(s)
        assert s.capture_info().graph is g
        assert s.end_capture() is g
        g.close()
        s.close()
        print("unraisable", sorted(set(seen)))
        print("ok")
    """)
    for mode in ("control", "capture_info"):
        assert f"{mode} modules 0 buffers 0 words [7] raised True released 1 1" in out, out
    assert "unraisable ['KeyError']" in out and out.rstrip().endswith("ok"), out


# ---- host callbacks an update or a child graph brings ------------------------------------------

def _capture_callback(s, cb):
    with s.capture() as cap:
        s.launch_host_func(cb, None)
    return cap.graph


def _raises_at_next_launch(exe, s):
    exe.launch(s)
    s.synchronize()
    return _raised_at_launch(exe, s)


def _ok(_):
    pass


def _raising(_):
    raise ValueError("from a callback the executable runs")


def test_a_callback_an_update_brings_raises_at_the_next_launch(s, monkeypatch):
    """update(g2), g2 capturing a raising callback (and closed at once):
    the executable's next launch raises HostCallbackError (the error goes
    to the executable's slot, not to g2's, which the executable never
    checks)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    g1, g2 = _capture_callback(s, _ok), _capture_callback(s, _raising)
    exe = g1.instantiate()
    assert exe.update(g2).ok
    g2.close()
    assert _raises_at_next_launch(exe, s)
    assert [type(e) for e in seen] == [ValueError]
    exe.close()
    g1.close()


def test_a_child_graphs_callback_raises_at_the_parents_next_launch(s, monkeypatch):
    """A child graph with a raising host node embedded with
    add_child_graph_node, and one put in place with set_child_graph_node:
    the parent's executable raises at its next launch (the errors go to
    the parent's slot, not the child's)."""
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    child_bad, child_ok = Graph(), Graph()
    child_bad.add_host_node(_raising)
    child_ok.add_host_node(_ok)
    parent = Graph()
    parent.add_child_graph_node(child_bad)
    with parent.instantiate() as exe:
        assert _raises_at_next_launch(exe, s)
    parent2 = Graph()
    node = parent2.add_child_graph_node(child_ok)
    with parent2.instantiate() as exe:
        assert not _raises_at_next_launch(exe, s)       # control
        exe.set_child_graph_node(node, child_bad)
        assert _raises_at_next_launch(exe, s)
    for obj in (parent, parent2, child_bad, child_ok):
        obj.close()


# ---- closing a graph with a user inside --------------------------------------------------------

def test_a_graph_closed_during_a_capture_into_it_lets_go_when_the_capture_ends(s):
    """Graph.close() while a capture into the graph holds it: the capture's
    end destroys the handle, and what the nodes needed (a module, a buffer)
    goes with it; end_capture raises ValueError (the graph it would return
    is closed), and the stream has left capture mode.  The failure it
    catches: what it needs kept for as long as the closed Graph object is
    referenced, and the closed graph returned as the capture's.  Control: the same close with no capture
    inside."""
    from streams.testing import BUILTIN_PTX, launch_empty
    launch_empty(s)
    s.synchronize()
    for in_use in (False, True):
        mod = streams.Module.from_ptx(BUILTIN_PTX)
        k = mod.get_kernel("streams_fill_u32", signature=("pointer", "uint32", "uint64"))
        buf = DeviceBuffer(4096, s)
        s.synchronize()
        g = Graph()
        g.add_kernel_node(k, 4, 256, buf, 7, N)
        graphs = streams.debug_counters()["live_graphs"]
        if in_use:
            s.begin_capture_to_graph(g)
            launch_empty(s)
            g.close()
            assert g.closed
            assert streams.debug_counters()["live_graphs"] == graphs   # the capture holds it
            with pytest.raises(ValueError, match="closed during the capture"):
                s.end_capture()
            assert s.capture_status == "none"
        else:
            g.close()
        gc.collect()
        streams._cudart._drain_deferred()
        base = streams.debug_counters()
        assert base["live_graphs"] == graphs - 1, base
        mod.close()
        buf.close()
        del k
        gc.collect()
        streams._cudart._drain_deferred()
        after = streams.debug_counters()
        assert base["live_modules"] - after["live_modules"] == 1, (in_use, base, after)
        assert base["live_buffers"] - after["live_buffers"] == 1, (in_use, base, after)
        del g          # referenced until here: the release did not wait for it


def test_an_invalidated_capture_into_a_graph_closed_meanwhile():
    """A capture into g, g.close() during it (the capture holds g), then the
    capture invalidated: CUDA frees g, so the failed end_capture must not
    destroy it again (the capture's use is the one that would).  The
    failure it catches: end_capture gives its use back first, as the last
    user, and destroys the graph CUDA has freed (hence the child)."""
    out = _child("""
        import gc, warnings
        import streams
        from streams.testing import launch_empty
        warnings.simplefilter("always")
        s = streams.Stream()
        launch_empty(s)
        s.synchronize()
        base = streams.debug_counters()
        g = streams.Graph()
        g.add_empty_node()
        s.begin_capture_to_graph(g)
        launch_empty(s)
        g.close()
        try:
            s.query()          # illegal while capturing: invalidates the capture
        except streams.CudaError:
            pass
        assert s.capture_status == "invalidated", s.capture_status
        try:
            s.end_capture()
        except streams.CudaError as exc:
            print("end_capture:", exc.name)
        else:
            raise AssertionError("an invalidated capture ended without error")
        assert g.closed
        with warnings.catch_warnings(record=True) as caught:
            del g
            gc.collect()
            streams._cudart._drain_deferred()
        assert not [w for w in caught if issubclass(w.category, streams.CudaWarning)], caught
        # Destroyed once, in the count: by CUDA, never by streams too.
        c = streams.debug_counters()
        assert c["live_graphs"] == base["live_graphs"], (base, c)
        launch_empty(s)
        s.synchronize()
        s.close()
        print("ok")
    """)
    assert out.rstrip().endswith("ok"), out


# ---- the graph of a capture is one Graph -------------------------------------------------------

def test_capture_info_gives_the_graph_end_capture_returns(s, fill):
    """capture_info().graph, the graph of its dependencies' nodes and the
    graph end_capture returns are one object, so that a change of the
    graph's node (GraphNode.set_args) through such a node is noted in that
    graph's executables: the executable's change of argument 1 still writes
    to a.  The failure it catches: a second Graph wraps the handle, the
    executables of the graph end_capture returns are not told of the
    change, and b gets 9."""
    a, b = _zeroed(s, 2)
    s.begin_capture()
    s.launch(fill, 4, 256, a, 5, N)
    info = s.capture_info()
    (dep,) = info.dependencies
    assert s.capture_info().graph is info.graph        # one object while it runs
    g = s.end_capture()
    assert info.graph is g and dep.graph is g
    exe = g.instantiate()
    dep.set_args({0: b})                   # the graph's node now fills b
    exe.set_kernel_node_args(dep, {1: 9})  # the executable's: still a, now 9
    exe.launch(s)
    assert (_words(a, s) == 9).all()
    assert (_words(b, s) == 0).all()
    for obj in (exe, g, a, b):
        obj.close()


def test_the_graph_of_a_capture_once_closed_refuses_its_nodes():
    """After g.close(), the nodes capture_info gave and its graph raise
    ValueError (closed) instead of handing the destroyed graph to the
    driver: they belong to the closed Graph, not to a wrapper that stays
    open (hence the child)."""
    out = _child("""
        import streams
        from streams import DeviceBuffer, Stream
        fill = streams.builtin_kernel("fill_u32")
        s = Stream(non_blocking=True)
        buf = DeviceBuffer(4096, s)
        s.begin_capture()
        s.launch(fill, 1, 32, buf, 5, 1024)
        info = s.capture_info()
        (dep,) = info.dependencies
        g = s.end_capture()
        g.close()
        streams._cudart._drain_deferred()
        assert info.graph.closed
        for what, call in (("kernel_params", lambda: dep.kernel_params()),
                           ("set_args", lambda: dep.set_args({1: 7})),
                           ("type", lambda: dep.type),
                           ("add_empty_node", lambda: info.graph.add_empty_node())):
            try:
                call()
            except ValueError as exc:
                assert "closed" in str(exc), (what, exc)
                print("refused", what, flush=True)
            else:
                print("accepted", what, flush=True)
        print("ok")
    """)
    assert "accepted" not in out and out.rstrip().endswith("ok"), out


def test_closing_the_graph_of_a_capture_lets_go_of_its_nodes_needs(s, fill):
    """A node added through capture_info().graph: closing the Graph that
    end_capture returned lets go of its buffer while the CaptureInfo is
    still referenced: the CaptureInfo holds no list of its own that would
    keep the buffer."""
    from streams.testing import launch_empty
    buf = DeviceBuffer(4 * N, s)
    launch_empty(s)
    s.synchronize()
    s.begin_capture()
    launch_empty(s)
    info = s.capture_info()
    node = info.graph.add_kernel_node(fill, 4, 256, buf, 3, N, dependencies=info.dependencies)
    s.update_capture_dependencies([node], "set")
    g = s.end_capture()
    ref = weakref.ref(buf)
    del buf, node
    g.close()
    assert _gone(ref), "the node's buffer outlived the closed graph"
    assert info.graph is g


def test_closing_the_graph_of_a_capture_during_it():
    """capture_info().graph.close() while the capture runs, for a plain
    capture and for a capture into a Graph (whose capture_info().graph is
    that Graph): the capture ends, its graph is destroyed (the count of
    live graphs is back), and end_capture raises ValueError naming the
    close.  The failure it catches: a plain capture's graph comes back
    open as if nothing was closed, and a capture into a Graph returns the
    closed Graph."""
    out = _child("""
        import gc
        import streams
        from streams import Graph, Stream
        from streams.testing import launch_empty
        s = Stream(non_blocking=True)
        launch_empty(s)
        s.synchronize()
        for mode in ("plain", "into"):
            gc.collect(); streams._cudart._drain_deferred()
            base = streams.debug_counters()["live_graphs"]
            target = Graph() if mode == "into" else None
            if target is None:
                s.begin_capture()
            else:
                s.begin_capture_to_graph(target)
            launch_empty(s)
            info = s.capture_info()
            assert target is None or info.graph is target
            info.graph.close()
            launch_empty(s)                    # the capture goes on
            try:
                s.end_capture()
            except ValueError as exc:
                assert "closed during the capture" in str(exc), exc
                print(mode, "raised", flush=True)
            assert s.capture_status == "none"
            del info, target
            gc.collect(); streams._cudart._drain_deferred()
            print(mode, "graphs", streams.debug_counters()["live_graphs"] - base, flush=True)
        s.close()
        print("ok")
    """)
    for mode in ("plain", "into"):
        assert f"{mode} raised" in out and f"{mode} graphs 0" in out, out
    assert out.rstrip().endswith("ok"), out


def test_a_capture_ended_by_another_library():
    """Captures ended with the driver API (as another library ends them):
    capture_info() about each leaves nothing registered for good (the
    registry is swept), the Graph it gave is closed once the capture is
    found ended (here by the stream's next capture), and what a node added
    through it needs (a buffer) lives as long as CUDA's graph (a CUDA user
    object of it), not longer.
    The failure it catches: each capture stays registered with its keep
    list, the buffer is never released, and the Graph stays open on a graph
    another library owns (hence the child)."""
    out = _child("""
        import ctypes, gc, time, weakref
        import streams
        from streams import DeviceBuffer, Stream
        from streams._hostcall import _capture_registry
        from streams.testing import launch_empty
        cuda = ctypes.CDLL("libcuda.so.1")
        fill = streams.builtin_kernel("fill_u32")

        def foreign_end(stream):
            g = ctypes.c_void_p()
            assert cuda.cuStreamEndCapture(ctypes.c_void_p(stream.handle), ctypes.byref(g)) == 0
            return g

        s = Stream(non_blocking=True)
        buf = DeviceBuffer(4096, s)
        launch_empty(s)
        s.launch(fill, 1, 32, buf, 0, 1024)
        s.synchronize()
        s.begin_capture()
        launch_empty(s)
        info = s.capture_info()
        node = info.graph.add_kernel_node(fill, 1, 32, buf, 3, 1024,
                                          dependencies=info.dependencies)
        s.update_capture_dependencies([node], "set")
        g = foreign_end(s)
        ref = weakref.ref(buf)
        del buf, node
        # CUDA's graph holds what the node needs until it is destroyed.
        gc.collect(); streams._cudart._drain_deferred()
        print("kept while CUDA's graph lives", ref() is not None, flush=True)
        # The stream's next capture finds the last one ended.
        s.begin_capture()
        s.capture_info()
        print("closed once found ended", info.graph.closed, flush=True)
        assert cuda.cuGraphDestroy(foreign_end(s)) == 0
        del info
        gc.collect(); streams._cudart._drain_deferred()
        print("kept by CUDA's graph alone", ref() is not None, flush=True)
        assert cuda.cuGraphDestroy(g) == 0
        deadline = time.monotonic() + 5
        while ref() is not None and time.monotonic() < deadline:
            gc.collect(); streams._cudart._drain_deferred(); time.sleep(0.01)
        print("released with CUDA's graph", ref() is None, flush=True)
        # Many captures, each on its own stream, asked about and ended elsewhere.
        most = 0
        for i in range(300):
            t = Stream(non_blocking=True)
            t.begin_capture()
            launch_empty(t)
            assert t.capture_info().status == "active"
            cuda.cuGraphDestroy(foreign_end(t))
            most = max(most, _capture_registry()[0])
            t.close()
        print("registry at most", most, flush=True)
        print("ok")
    """)
    assert "kept while CUDA's graph lives True" in out, out
    assert "closed once found ended True" in out, out
    assert "kept by CUDA's graph alone True" in out, out
    assert "released with CUDA's graph True" in out, out
    most = int(out.split("registry at most ")[1].split()[0])
    assert most <= 70, out
    assert out.rstrip().endswith("ok"), out


# ---- a node is read while its graph is held; changes of one node are whole ----------------------

_GATE = """
import threading
from streams._graph import _swap_kernel_node_lock

class Gate:
    # Stops the thread `who` at its first entry into the lock that kernel
    # nodes are read and changed under, until `go` is set.
    def __init__(self):
        self.real = threading.Lock()
        self.who = None
        self.reached = threading.Event()
        self.go = threading.Event()

    def __enter__(self):
        if threading.current_thread() is self.who and not self.reached.is_set():
            self.reached.set()
            self.go.wait(30)
        self.real.acquire()

    def __exit__(self, *exc):
        self.real.release()
        return False

    def stop(self, target):
        self.who = threading.Thread(target=target)
        self.previous = _swap_kernel_node_lock(self)
        self.who.start()
        return self.reached.wait(10)

    def release(self, *others):
        self.go.set()
        self.who.join(30)
        for t in others:
            t.join(30)
        _swap_kernel_node_lock(self.previous)
"""


def _gate_child(body):
    return _child(_GATE + textwrap.dedent("""
        import time
        import numpy as np
        import streams
        from streams import DeviceBuffer, Graph, Stream
        N = 1024
        fill = streams.builtin_kernel("fill_u32")
        s = Stream(non_blocking=True)

        def zeroed(n):
            bufs = [DeviceBuffer(4 * N, s) for _ in range(n)]
            for b in bufs:
                streams.memset_async(b, 0, stream=s)
            s.synchronize()
            return bufs

        def words(buf):
            h = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(h, buf, stream=s)
            s.synchronize()
            return h

        def capture_fill(target, value):
            s.begin_capture()
            s.launch(fill, 4, 256, target, value, N)
            g = s.end_capture()
            (node,) = [n for n in g.nodes if n.type == "kernel"]
            return g, node

        result = []

        def record(call):
            def run():
                try:
                    call()
                    result.append("ok")
                except Exception as exc:
                    result.append(repr(exc))
            return run
    """) + textwrap.dedent(body))


def test_a_change_reads_the_node_only_while_its_graph_is_held():
    """set_kernel_node_args on a node set_kernel_node changed reads the
    node's context through the driver: it does so while holding the node's
    graph, so a close() of that graph in another thread meanwhile (legal:
    executables keep working) waits for it.  The change is stopped at that
    read while the graph is closed; it then completes and the executable
    writes 9 to b.  The failure it catches: the node read before the graph
    is held, from a graph the close has destroyed (a use after free in the
    driver; then ValueError, closed), hence the child."""
    out = _gate_child("""
        a, b = zeroed(2)
        g = Graph()
        n = g.add_kernel_node(fill, 4, 256, a, 5, N)
        exe = g.instantiate()
        exe.set_kernel_node(n, fill, 4, 256, b, 7, N)
        gate = Gate()
        if not gate.stop(record(lambda: exe.set_kernel_node_args(n, {1: 9}))):
            gate.release()
            print("SKIP this driver reads no kernel node")
            raise SystemExit(0)
        g.close()
        assert g.closed
        gate.release()
        print("result", result, flush=True)
        exe.launch(s)
        print("b", sorted(set(words(b).tolist())), "a", sorted(set(words(a).tolist())))
        exe.close()
        print("ok")
    """)
    if "SKIP" in out:
        pytest.skip("the driver cannot read kernel nodes (CUDA 12.4+)")
    assert "result ['ok']" in out and "b [9] a [0]" in out, out
    assert out.rstrip().endswith("ok"), out


def test_two_changes_of_one_node_in_two_threads_both_hold():
    """Two threads change one node's arguments at once (argument 1, then
    argument 2): the second starts from what the first left, so the
    executable writes 9 to the first half of a.  The first is stopped
    while it reads what the node runs.  The failure it catches: both start
    from the captured arguments and the last to record wins: the first
    change (9 to all of a) is what runs, the record says half."""
    out = _gate_child("""
        (a,) = zeroed(1)
        g, node = capture_fill(a, 5)
        exe = g.instantiate()
        gate = Gate()
        if not gate.stop(record(lambda: exe.set_kernel_node_args(node, {1: 9}))):
            gate.release()
            print("SKIP this driver reads no kernel node")
            raise SystemExit(0)
        second = threading.Thread(
            target=record(lambda: exe.set_kernel_node_args(node, {2: N // 2})))
        second.start()
        time.sleep(0.5)
        gate.release(second)
        print("result", result, flush=True)
        exe.launch(s)
        host = words(a)
        print("first half", sorted(set(host[:N // 2].tolist())),
              "second half", sorted(set(host[N // 2:].tolist())), flush=True)
        # And the record is what runs: a change now starts from (a, 9, N/2).
        streams.memset_async(a, 0, stream=s)
        exe.set_kernel_node_args(node, {1: 4})
        exe.launch(s)
        host = words(a)
        print("then", sorted(set(host[:N // 2].tolist())), sorted(set(host[N // 2:].tolist())))
        exe.close(); g.close()
        print("ok")
    """)
    if "SKIP" in out:
        pytest.skip("the driver cannot read kernel nodes (CUDA 12.4+)")
    assert "result ['ok', 'ok']" in out, out
    assert "first half [9] second half [0]" in out and "then [4] [0]" in out, out
    assert out.rstrip().endswith("ok"), out


def test_a_change_of_the_graphs_node_while_an_executable_reads_it():
    """An executable's change reads the graph's node (it has no record of
    its own yet) while another thread changes that node (GraphNode.set_args
    to b): the executable's change takes what it ran, a, noted by the
    graph's change, and writes 9 there.  The executable's change is stopped
    between its look for a record and its read of the node.  The failure
    it catches: it reads the changed node and writes 9 to b."""
    out = _gate_child("""
        a, b = zeroed(2)
        g, node = capture_fill(a, 5)
        exe = g.instantiate()
        gate = Gate()
        if not gate.stop(record(lambda: exe.set_kernel_node_args(node, {1: 9}))):
            gate.release()
            print("SKIP this driver reads no kernel node")
            raise SystemExit(0)
        node.set_args({0: b})
        gate.release()
        print("result", result, flush=True)
        exe.launch(s)
        print("a", sorted(set(words(a).tolist())), "b", sorted(set(words(b).tolist())))
        exe.close(); g.close()
        print("ok")
    """)
    if "SKIP" in out:
        pytest.skip("the driver cannot read kernel nodes (CUDA 12.4+)")
    assert "result ['ok']" in out and "a [9] b [0]" in out, out
    assert out.rstrip().endswith("ok"), out


# ---- host-callback errors reach the executables that run the callback --------------------------

def _raised_at_launch(exe, s):
    try:
        exe.launch(s)
    except HostCallbackError:
        return True
    finally:
        s.synchronize()
    return False


def test_a_callback_error_reaches_only_the_executables_that_run_it(s, monkeypatch):
    """g2's callback raises in a replay of g2's own executable.  An
    executable of g1 updated to g2 and back, and one made from g1 later,
    do not run that callback: neither raises; g2's executable does.
    The failure it catches: the update links g2's errors, for good, to the
    slot g1 shares with all its executables, and both raise."""
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    g1, g2 = _capture_callback(s, _ok), _capture_callback(s, _raising)
    exe = g1.instantiate()
    assert exe.update(g2).ok
    assert exe.update(g1).ok          # back: it runs g1's callback only
    exe3 = g1.instantiate()
    ex2 = g2.instantiate()
    ex2.launch(s)
    s.synchronize()
    assert not _raised_at_launch(exe3, s)
    assert not _raised_at_launch(exe, s)
    assert _raised_at_launch(ex2, s)
    for obj in (exe, exe3, ex2, g1, g2):
        obj.close()


def test_a_child_graphs_callback_error_reaches_the_executables_that_embed_it(s, monkeypatch):
    """An executable made before a child graph with a raising callback was
    added to its graph does not run it, and does not raise its error; one
    made after does.  A child that set_child_graph_node could not put in
    place (another topology: CUDA refuses) does not pass its errors on
    either.  The failure it catches: the child's errors go to the slot the
    parent graph shares with all its executables, and
    set_child_graph_node links the child before CUDA takes it."""
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    parent = Graph()
    parent.add_empty_node()
    before = parent.instantiate()
    child_bad = Graph()
    child_bad.add_host_node(_raising)
    parent.add_child_graph_node(child_bad)
    after = parent.instantiate()
    after.launch(s)
    s.synchronize()
    assert not _raised_at_launch(before, s)
    assert _raised_at_launch(after, s)
    # set_child_graph_node refused: no link.
    child_ok, child_two = Graph(), Graph()
    child_ok.add_host_node(_ok)
    first = child_two.add_host_node(_ok)
    child_two.add_host_node(_raising, dependencies=[first])
    parent2 = Graph()
    node = parent2.add_child_graph_node(child_ok)
    with parent2.instantiate() as exe:
        with pytest.raises((streams.CudaError, ValueError)):
            exe.set_child_graph_node(node, child_two)
        with child_two.instantiate() as own:
            own.launch(s)
            s.synchronize()
        assert not _raised_at_launch(exe, s)
    for obj in (before, after, parent, parent2, child_bad, child_ok, child_two):
        obj.close()


def test_a_graph_replays_inside_a_capture_as_a_child_node(s, monkeypatch):
    """The way the refusal below names: a graph added to the capture's graph
    as a child node runs in every replay of the captured graph, after the
    work captured before it, and its callback's error reaches the captured
    graph's executable."""
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    seen = []
    inner = Graph()
    inner.add_host_node(seen.append, "inner")
    s.begin_capture()
    s.launch_host_func(seen.append, "before")
    info = s.capture_info()
    node = info.graph.add_child_graph_node(inner, dependencies=info.dependencies)
    s.update_capture_dependencies([node], "set")
    s.launch_host_func(seen.append, "after")
    outer = s.end_capture()
    with outer.instantiate() as ex:
        ex.launch(s)
        ex.launch(s)
        s.synchronize()
    assert seen == ["before", "inner", "after"] * 2
    bad = Graph()
    bad.add_host_node(_raising)
    s.begin_capture()
    info = s.capture_info()
    node = info.graph.add_child_graph_node(bad, dependencies=info.dependencies)
    s.update_capture_dependencies([node], "set")
    outer2 = s.end_capture()
    with outer2.instantiate() as ex:
        ex.launch(s)
        s.synchronize()
        assert _raised_at_launch(ex, s)
    for obj in (inner, bad, outer, outer2):
        obj.close()


def test_a_launch_into_a_capture_is_refused_clearly_and_links_nothing(s, monkeypatch):
    """CUDA does not capture a graph launch (cudaErrorStreamCaptureUnsupported,
    CUDA 12 and 13): the CudaError says so and names the way that works
    (add_child_graph_node); the refused launch links nothing, so the
    executable's own next launch still raises its callback's error and the
    capture's graph (if CUDA returns one) raises nothing; the stream leaves
    capture mode at end_capture."""
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    inner = Graph()
    inner.add_host_node(_raising)
    exe = inner.instantiate()
    s.begin_capture()
    with pytest.raises(streams.CudaError) as info:
        exe.launch(s)
    assert info.value.name == "cudaErrorStreamCaptureUnsupported"
    assert "add_child_graph_node" in str(info.value)
    # The refusal invalidates the capture, as the message says.
    assert s.capture_status == "invalidated"
    try:
        outer = s.end_capture()
    except streams.CudaError:
        outer = None
    assert s.capture_status == "none"
    if outer is not None:
        with outer.instantiate() as oexe:
            assert not _raised_at_launch(oexe, s)
            assert not _raised_at_launch(oexe, s)
        outer.close()
    # The executable itself, launched for real, raises at its next launch.
    exe.launch(s)
    s.synchronize()
    assert _raised_at_launch(exe, s)
    for obj in (exe, inner):
        obj.close()
