"""The pipeline and graph-size rows inside the workers, checked without a
GPU: each contender's step, made by its adapter's make_case over recording
stand-ins for the library's objects, makes the CUDA calls of one step of
ops.STEP_CALLS (the floor's, test_floor.py), each on the stream the floor
makes it on; after a batch both streams are synchronized and the host
functions counted; the graph-size rows launch with graph_launch's
statement, streams' of a graph of their size.  The libraries themselves
are not here: what each call costs, and that it is the CUDA call named
here, needs a GPU.
"""
import functools
from unittest import mock

import pytest

from benchmarks import adapters, ops, render, results
from benchmarks.timing import NotAvailable
from benchmarks.under_test import builtin_ptx

K, G, R, W, C, H = ("cudaLaunchKernel", "cudaGraphLaunch", "cudaEventRecord",
                    "cudaStreamWaitEvent", "cudaMemcpyAsync", "cudaLaunchHostFunc")
SYNC, CURRENT = "synchronize", "current stream"

# The stream of each call of a step, as src/floor.h makes them: the
# inference step computes on s and copies out on `other`, the data loader
# copies in on `other` and computes on s.
STREAMS = {"pipeline_inference": {K: "s", G: "s", R: "s", W: "other", C: "other", H: "other"},
           "pipeline_data_loader": {C: "other", R: "other", W: "s", K: "s"}}

# Per contender: which CUDA call each call of its step is.  A call is named
# by the stand-in called (L, memcpy_async) or by the kind of object and the
# method (stream.record); any other call fails the test.
CALLS = {
    "streams-py": {"stream.launch": K, "graph.launch": G, "stream.record": R,
                   "stream.wait_event": W, "memcpy_async": C, "stream.launch_host_func": H,
                   "stream.synchronize": SYNC},
    "cupy": {"kx": K, "graph.launch": G, "stream.record": R, "stream.wait_event": W,
             "buffer.copy_to_host_async": C, "buffer.copy_from_host_async": C,
             "stream.launch_host_func": H, "stream.synchronize": SYNC},
    "torch": {"k": K, "stream.record_event": R, "stream.wait_event": W, "buffer.copy_": C,
              "stream.synchronize": SYNC, "set_stream": CURRENT},
    "cuda-core": {"L": K, "graph.launch": G, "stream.record": R, "stream.wait": W,
                  "buffer.copy_from": C, "HL": H, "stream.sync": SYNC},
    "cuda-bindings": {"L": K, "GL": G, "rec": R, "w": W, "cp": C, "LH": H, "sy": SYNC},
}


class Log:
    """What the stand-ins were asked: (CUDA call, stream name) in order.  A
    host function runs at its stream's next synchronize, as CUDA runs it
    once the stream gets there; torch's calls go to the current stream."""

    def __init__(self, table):
        self.table = table
        self.calls = []
        self.current = None
        self.queued = {}

    def call(self, path, receiver, args, kwargs):
        what = self.table[path]         # KeyError: a call the step must not make
        streams = [x for x in (receiver, *args, *kwargs.values())
                   if isinstance(x, Rec) and x.kind == "stream"]
        stream = streams[0].name if streams else self.current
        if what == CURRENT:
            self.current = stream
            return None
        self.calls.append((what, stream))
        if what == H:
            # The callback: the first plain callable, given what follows it.
            i = next(i for i, x in enumerate(args) if callable(x) and not isinstance(x, Rec))
            self.queued.setdefault(stream, []).append(functools.partial(args[i], *args[i + 1:]))
        elif what == SYNC:
            for fn in self.queued.pop(stream, []):
                fn()
        return (0,)         # cuda.bindings' `e, = f(...)`: no error


class Rec:
    """A stand-in for one object of a library: ``kind`` says what it is
    (stream, event, graph, kernel, buffer, function)."""

    def __init__(self, log, name, kind):
        self.log, self.name, self.kind = log, name, kind

    def __call__(self, *args, **kwargs):
        return self.log.call(self.name, None, args, kwargs)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return lambda *args, **kwargs: self.log.call(f"{self.kind}.{attr}", self, args, kwargs)


def _env(contender, op, log):
    """The names of ``contender``'s step over stand-ins, as its env(op)
    binds them (benchmarks/adapters.py)."""
    def rec(name, kind):
        return Rec(log, name, kind)

    bufs = [rec(f"dev{i}", "buffer") for i in range(ops.LOADER_COPIES)]
    hosts = [rec(f"host{i}", "buffer") for i in range(ops.LOADER_COPIES)]
    env = {"s": rec("s", "stream"), "other": rec("other", "stream"), "ev": rec("ev", "event"),
           "_closers": [], "loads": list(zip(bufs, hosts)), "dev": bufs[0], "host": hosts[0]}
    adapters._callbacks(adapters._pipeline_env(env))
    adapters._bind_args(ops.PIPELINE_ARGS, env, {"pointer": bufs[0], "uint64": 1, "uint32": 1,
                                                 "float32": 1.0, "float64": 1.0})
    env["a1"] = bufs[1]
    env.update({
        "streams-py": lambda: {"kx": rec("kx", "kernel"), "ex": rec("ex", "graph"),
                               "memcpy_async": rec("memcpy_async", "function")},
        "cupy": lambda: {"kx": rec("kx", "kernel"), "g": rec("g", "graph"), "g1": (1,)},
        "torch": lambda: {"set_stream": rec("set_stream", "function"), "k": rec("k", "function"),
                          "a": 0},
        "cuda-core": lambda: {"L": rec("L", "function"), "cfg": object(), "kx": object(),
                              "g": rec("g", "graph"), "HL": rec("HL", "function")},
        "cuda-bindings": lambda: {
            **{name: rec(name, "function") for name in ("L", "GL", "rec", "w", "cp", "LH", "sy")},
            "kx": object(), "kp": object(), "ex": object(), "dflt": object(),
            "h": lambda data: env["cb"](data), "fail": pytest.fail},
    }[contender]())
    return env


def _adapter(contender, tmp_path):
    """``contender``'s adapter, its env() the stand-ins' (no library set up)."""
    ptx = tmp_path / "builtin.ptx"
    ptx.write_text(builtin_ptx())
    log = Log(CALLS[contender])

    class Recorded(adapters.ADAPTERS[contender]):
        def env(self, op):
            return _env(contender, op, log)

    return Recorded(str(ptx)), log


STEPS = [(c, op) for c in CALLS for op in ops.PIPELINE_OPS
         if not (c == "torch" and op == "pipeline_inference")]


@pytest.mark.parametrize("contender, op", STEPS)
def test_each_step_makes_the_calls_of_the_floor(contender, op, tmp_path):
    adapter, log = _adapter(contender, tmp_path)
    case = adapter.make_case(op)
    assert case.note, "the cell says what the library's step is made of"
    n = 2 * ops.HOST_FUNC_EVERY
    for batch in range(2):
        log.calls.clear()
        ns = case.timed(n)
        steps = [c for c in log.calls if c[0] != SYNC]
        counts = {what: sum(1 for w, _ in steps if w == what) / n for what, _ in steps}
        assert counts == ops.STEP_CALLS[op]
        assert {what: stream for what, stream in steps} == STREAMS[op]
        assert all(stream == STREAMS[op][what] for what, stream in steps)
        # Untimed after the batch: both streams drained, and every host
        # function (one each HOST_FUNC_EVERY steps of the batch) run by then.
        log.calls.clear()
        case.after(n, ns)
        assert sorted(log.calls) == [(SYNC, "other"), (SYNC, "s")]
    assert not log.queued


def test_a_host_function_that_did_not_run_fails_the_batch(tmp_path):
    adapter, log = _adapter("streams-py", tmp_path)
    case = adapter.make_case("pipeline_inference")
    log.table = dict(log.table, **{"stream.synchronize": "not a synchronize"})
    ns = case.timed(ops.HOST_FUNC_EVERY)
    with pytest.raises(RuntimeError, match="1 host functions enqueued but 0 ran"):
        case.after(ops.HOST_FUNC_EVERY, ns)


@pytest.mark.parametrize("contender, why", [
    ("torch", "PyTorch has no host-function API"),
    ("numba-cuda", "no graph API"),
    ("streams-cy", r"no C-level \(cimport\) copy"),
])
def test_a_step_a_library_cannot_make_is_na_with_why(contender, why):
    with pytest.raises(NotAvailable, match=why):
        adapters.ADAPTERS[contender]().make_case("pipeline_inference")


@pytest.mark.parametrize("contender", sorted(set(CALLS) - {"torch"}))
@pytest.mark.parametrize("op", sorted(set(ops.GRAPH_SIZES) - {"graph_launch"}))
def test_every_graph_size_is_launched_by_graph_launchs_statement(contender, op, tmp_path):
    adapter, log = _adapter(contender, tmp_path)
    env = _env(contender, op, log)
    env["ex"] = env["g"] = Rec(log, "graph", "graph")
    adapter.env = lambda op: env
    case = adapter.make_case(op)
    ns = case.timed(5)
    assert log.calls == [(G, "s")] * 5
    case.after(5, ns)       # a graph launch leaves work: drained after the batch
    assert log.calls[5:] == [(SYNC, "s")]


@pytest.mark.parametrize("op", sorted(ops.GRAPH_SIZES))
def test_streams_captures_a_graph_of_the_rows_size(op):
    """StreamsPy.env over a stand-in streams: the graph it launches holds
    graph_nodes(op) launches of the empty kernel."""
    st = mock.MagicMock(name="streams")
    st.Stream.side_effect = lambda *a, **k: mock.MagicMock(name="Stream")
    adapter = adapters.StreamsPy(ptx_path=None)
    adapter.streams, adapter.has_launch = st, True
    adapter._module = lambda env, kernel="streams_empty": st.module
    env = adapter.env(op)
    s = env["s"]
    assert s.begin_capture.call_count == 1 and s.end_capture.call_count == 1
    # One launch loads the kernel before the capture; the others are captured.
    assert s.launch.call_count == 1 + ops.GRAPH_SIZES[op] == 1 + ops.graph_nodes(op)
    assert env["ex"] is s.end_capture.return_value.instantiate.return_value


def _series(example):
    """The synthetic fixture's graph-size rows, with made-up medians."""
    doc = dict(example)
    for op, median in (("graph_launch_1", 2000.0), ("graph_launch", 2600.0),
                       ("graph_launch_100", 8000.0), ("graph_launch_1000", 62000.0)):
        for c in ("c", "streams-py"):
            doc["results"][op][c].update(status="ok", ns=[median] * 3, iters=10)
        doc["results"][op]["streams-py"]["floor_ns"] = [median * 0.9] * 3
    return doc


def test_graph_size_rows_get_a_cost_per_node(example):
    doc = results.finalize(_series(example))
    res = doc["results"]
    assert "per_node_ns" not in res["graph_launch_1"]["streams-py"]
    assert res["graph_launch"]["c"]["per_node_ns"] == pytest.approx(600 / 9)
    assert res["graph_launch_100"]["streams-py"]["per_node_ns"] == pytest.approx(6000 / 99)
    assert res["graph_launch_1000"]["streams-py"]["per_node_ns"] == pytest.approx(60000 / 999)
    assert res["graph_launch_1000"]["streams-py"]["floor_per_node_ns"] == pytest.approx(
        0.9 * 60000 / 999)
    assert "floor_per_node_ns" not in res["graph_launch_1000"]["c"]   # the C program has none
    text = render.render_table(doc, ops=list(ops.GRAPH_SIZES))
    row = next(ln for ln in text.splitlines() if ln.startswith("1000-kernel graph launch"))
    assert f" {60000 / 999:.1f}/node" in row
    assert ("N/node: a graph of more nodes costs N ns per launch and node more than the "
            "same column's 1-kernel graph launch") in text
    # Without the 1-node row, the slope is from the smallest graph there is.
    doc = results.finalize(dict(doc, results={op: row for op, row in doc["results"].items()
                                              if op != "graph_launch_1"}))
    assert doc["results"]["graph_launch_1000"]["c"]["per_node_ns"] == pytest.approx(
        (62000 - 2600) / 990)
    assert "per_node_ns" not in doc["results"]["graph_launch"]["c"]


def test_a_graph_size_must_be_a_count(example):
    example["ops"]["graph_launch_100"]["nodes"] = 0
    with pytest.raises(results.ResultError, match="ops.graph_launch_100.nodes"):
        results.validate_result(example)


def test_every_inference_batch_has_its_share_of_host_functions():
    from benchmarks import harness
    for config in (harness.Config(), harness.Config(quick=True)):
        steps = config.iters("pipeline_inference")
        assert steps >= ops.HOST_FUNC_EVERY and steps % ops.HOST_FUNC_EVERY == 0


def test_a_result_says_each_graph_rows_size():
    from benchmarks import harness
    doc = results.new_doc(harness.Config(ops=["graph_launch_1000", "pipeline_inference"]))
    assert doc["ops"]["graph_launch_1000"]["nodes"] == 1000
    assert "nodes" not in doc["ops"]["pipeline_inference"]
    assert doc["ops"]["pipeline_inference"]["targets"] == {"streams-py": 1.10}
