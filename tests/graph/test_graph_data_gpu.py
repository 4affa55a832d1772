"""Graph data (Graph.to_dict, GraphExec.to_dict, Graph.debug_dot) checked
against what was captured or built: node types, kernel names, grids,
blocks and argument bytes, the dependency edges of a fork/join capture on
two streams, a memset's and a memcpy's addresses and sizes, a host node, a
child graph, event and memory nodes; what an executable runs after its own
changes; the JSON round trip; CUDA's printer writing a file that names the
kernel."""
import json

import pytest

import streams
from streams import DeviceBuffer, Event, Graph, PinnedBuffer, Stream

from _support import N, graphs_released  # noqa: F401  (fixture)

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("graphs_released")]


def u64(v):
    return v.to_bytes(8, "little").hex()


def u32(v):
    return v.to_bytes(4, "little").hex()


def by_type(data, kind):
    return [n for n in data["nodes"] if n["type"] == kind]


def fork_join(s, t, kernels, a, b, host, seen, fork, join):
    """memset a; fork: fill a (s) and fill b (t); join; copy a to host;
    a host function."""
    s.begin_capture()
    try:
        streams.memset_async(a, 0, stream=s)
        fork.record(s)
        t.wait_event(fork)
        s.launch(kernels.fill, 16, 256, a, 5, N)
        t.launch(kernels.fill, 8, 128, b, 7, N)
        join.record(t)
        s.wait_event(join)
        streams.memcpy_async(host, a, stream=s)
        s.launch_host_func(seen.append, "done")
    finally:
        graph = s.end_capture()
    return graph


def test_a_fork_join_capture_reads_back_as_captured(kernels, closer):
    s, t = closer(Stream(non_blocking=True)), closer(Stream(non_blocking=True))
    a, b = closer(DeviceBuffer(4 * N, s)), closer(DeviceBuffer(4 * N, s))
    host = closer(PinnedBuffer(4 * N))
    s.synchronize()
    seen = []
    fork, join = closer(Event()), closer(Event())
    graph = closer(fork_join(s, t, kernels, a, b, host, seen, fork, join))
    data = graph.to_dict()
    assert data["schema"] == "streams.graph/1" and data["handle"] == graph.handle
    assert sorted(n["type"] for n in data["nodes"]) == ["host", "kernel", "kernel", "memcpy",
                                                         "memset"]
    assert [n["id"] for n in data["nodes"]] == list(range(5))
    assert {n["handle"] for n in data["nodes"]} == {n.handle for n in graph.nodes}

    [ms] = by_type(data, "memset")
    assert ms["params"]["dst"] == a.ptr and ms["params"]["value"] == 0
    assert ms["params"]["nbytes"] == 4 * N and ms["dependencies"] == []

    kernels_by_first_arg = {n["params"]["args"][0]: n for n in by_type(data, "kernel")}
    ka, kb = kernels_by_first_arg[u64(a.ptr)], kernels_by_first_arg[u64(b.ptr)]
    for node, grid, block, value, buf in ((ka, 16, 256, 5, a), (kb, 8, 128, 7, b)):
        p = node["params"]
        assert p["name"] == "streams_fill_u32"
        assert p["grid"] == [grid, 1, 1] and p["block"] == [block, 1, 1]
        assert p["shared_mem"] == 0
        assert p["param_sizes"] == [8, 4, 8]
        assert p["args"] == [u64(buf.ptr), u32(value), u64(N)]
        assert p["attributes"]["num_regs"] == kernels.fill.num_regs
        # The fork: both fills after the memset, neither after the other.
        assert node["dependencies"] == [ms["id"]]

    [mc] = by_type(data, "memcpy")
    assert mc["params"]["dst"] == host.ptr and mc["params"]["src"] == a.ptr
    assert mc["params"]["nbytes"] == 4 * N
    assert mc["params"]["kind"] in ("default", "device_to_host")
    assert not mc["params"]["dst_array"] and not mc["params"]["src_array"]
    # The join: the copy after both fills.
    assert sorted(mc["dependencies"]) == sorted([ka["id"], kb["id"]])

    [hn] = by_type(data, "host")
    assert hn["params"]["python"] is True and hn["params"]["function"] != 0
    assert hn["dependencies"] == [mc["id"]]

    assert sorted((e["from"], e["to"]) for e in data["edges"]) == sorted(
        [(ms["id"], ka["id"]), (ms["id"], kb["id"]), (ka["id"], mc["id"]),
         (kb["id"], mc["id"]), (mc["id"], hn["id"])])
    assert {e["type"] for e in data["edges"]} == {"default"}
    assert {e["from_port"] for e in data["edges"]} == {"default"}

    assert json.loads(json.dumps(data)) == data
    # What was read is what runs.
    with graph.instantiate() as exe:
        exe.launch(s)
        s.synchronize()
    np = pytest.importorskip("numpy")
    assert (np.frombuffer(host, dtype=np.uint32, count=N) == 5).all()
    assert seen == ["done"]


def test_built_nodes_read_back(kernels, closer):
    s = closer(Stream(non_blocking=True))
    buf = closer(DeviceBuffer(4 * N, s))
    s.synchronize()
    ev = closer(Event())
    child = closer(Graph())
    child.add_kernel_node(kernels.fill, 2, 64, buf, 9, N)
    graph = closer(Graph())
    first = graph.add_empty_node()
    node = graph.add_child_graph_node(child, dependencies=[first])
    rec = graph.add_event_record_node(ev, dependencies=[node])
    wait = graph.add_event_wait_node(ev, dependencies=[rec])
    alloc = graph.add_mem_alloc(1 << 20, dependencies=[wait])
    fill = graph.add_memset_node(alloc, 3, 1 << 20, dependencies=[alloc.node])
    graph.add_mem_free(alloc, dependencies=[fill])
    data = graph.to_dict()
    kinds = [n["type"] for n in data["nodes"]]
    assert sorted(kinds) == sorted(["empty", "graph", "event_record", "event_wait",
                                    "mem_alloc", "memset", "mem_free"])
    node_of = {n["type"]: n for n in data["nodes"]}
    assert node_of["empty"]["params"] is None
    inner = node_of["graph"]["params"]
    assert inner["schema"] == "streams.graph/1" and inner["edges"] == []
    [k] = inner["nodes"]
    assert k["type"] == "kernel" and k["params"]["name"] == "streams_fill_u32"
    assert k["params"]["grid"] == [2, 1, 1] and k["params"]["block"] == [64, 1, 1]
    assert k["params"]["args"] == [u64(buf.ptr), u32(9), u64(N)]
    assert node_of["event_record"]["params"] == {"event": ev.handle}
    assert node_of["event_wait"]["params"] == {"event": ev.handle}
    assert node_of["mem_alloc"]["params"]["ptr"] == alloc.ptr
    assert node_of["mem_alloc"]["params"]["nbytes"] == 1 << 20
    assert node_of["mem_alloc"]["params"]["device"] == streams.get_device()
    assert node_of["memset"]["params"]["dst"] == alloc.ptr
    assert node_of["memset"]["params"]["value"] == 3
    assert node_of["mem_free"]["params"] == {"ptr": alloc.ptr}
    # A chain, in the order built.
    ids = {n["type"]: n["id"] for n in data["nodes"]}
    chain = ["empty", "graph", "event_record", "event_wait", "mem_alloc", "memset", "mem_free"]
    assert sorted((e["from"], e["to"]) for e in data["edges"]) == sorted(
        (ids[x], ids[y]) for x, y in zip(chain, chain[1:]))
    assert json.loads(json.dumps(data)) == data


def test_an_executable_tells_what_it_runs(kernels, closer):
    s = closer(Stream(non_blocking=True))
    buf = closer(DeviceBuffer(4 * N, s))
    s.synchronize()
    graph = closer(Graph())
    node = graph.add_kernel_node(kernels.fill, 4, 128, buf, 1, N)
    graph.add_memset_node(buf, 0, 4 * N, dependencies=[node])
    exe = closer(graph.instantiate(auto_free_on_launch=True))
    exe.set_kernel_node_args(node, {1: 42}, signature="pointer, uint32, uint64")
    [memset_node] = [n for n in graph.nodes if n.type == "memset"]
    exe.set_enabled(memset_node, False)
    data = exe.to_dict()
    assert data["exec"]["handle"] == exe.handle
    assert data["exec"]["flags"] & 1, "cudaGraphInstantiateFlagAutoFreeOnLaunch"
    by = {n["type"]: n for n in data["nodes"]}
    assert by["kernel"]["params"]["args"] == [u64(buf.ptr), u32(42), u64(N)]
    assert by["kernel"]["params"]["name"] == "streams_fill_u32"
    assert by["kernel"]["enabled"] is True and by["memset"]["enabled"] is False
    # The graph keeps what was built.
    assert [n["params"]["args"] for n in by_type(graph.to_dict(), "kernel")] == [
        [u64(buf.ptr), u32(1), u64(N)]]
    assert json.loads(json.dumps(data)) == data
    graph.close()
    with pytest.raises(ValueError, match="the graph this executable was made from is closed"):
        exe.to_dict()


def test_debug_dot_writes_cudas_picture(kernels, closer, tmp_path):
    s = closer(Stream(non_blocking=True))
    buf = closer(DeviceBuffer(4 * N, s))
    s.synchronize()
    with s.capture() as cap:
        s.launch(kernels.fill, 1, 32, buf, 3, N)
    graph = closer(cap.graph)
    path = tmp_path / "graph.dot"
    text = graph.debug_dot(path, ["kernel_params", "handles"])
    assert path.read_text() == text
    assert text.startswith("digraph") and "streams_fill_u32" in text
    assert "streams_fill_u32" in graph.debug_dot(flags="verbose")
    assert graph.debug_dot(flags=0).startswith("digraph")
