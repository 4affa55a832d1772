"""The floor, checked without a GPU: ``streams._cudart.floor_batch`` knows
every operation and refuses bad arguments before calling CUDA, and the C
loops of src/floor.h run, through bench.c, against a stand-in
cudart (fake_cudart.c) that counts every handle and every call: each
operation makes its calls, those of a pipeline step or a graph launch as
benchmarks/ops.py says, and leaves nothing alive, failures included.
"""
import json
import os
import re
import subprocess

import pytest

from benchmarks import CHECKOUT as ROOT
from benchmarks import builders, ops
from benchmarks.under_test import builtin_ptx

FLOOR_H = os.path.join(ROOT, "src", "floor.h")
NOTHING_LIVE = ("fake-cudart live: streams=0 events=0 graphs=0 execs=0 memory=0 pinned=0 "
                "unrun=0")


# The operations that make CUDA calls, each with a floor loop, in ops.py's order.
FLOORED = [op.name for op in ops.OPS if op.name not in ops.NO_FLOOR and op.name not in ops.FLOOR_OF]

def test_floor_knows_the_operations_of_ops_py_in_order():
    with open(FLOOR_H) as f:
        src = f.read()
    table = src[src.index("streams_floor_op_names[STREAMS_FLOOR_OP_COUNT] = {"):]
    table = table[:table.index("};")]
    assert re.findall(r'"(\w+)"', table) == FLOORED


def test_floor_batch_validates_before_calling_cuda():
    from streams._cudart import floor_batch
    with pytest.raises(ValueError, match="no operation 'stream_qurey'.*stream_query"):
        floor_batch("stream_qurey", 10)
    # Every operation is known: the complaint is about n, not the name.
    for op in FLOORED:
        with pytest.raises(ValueError, match="n must be >= 1"):
            floor_batch(op, 0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        floor_batch("kernel_launch", 1 << 70)
    with pytest.raises(TypeError, match="op must be a str"):
        floor_batch(b"stream_query", 10)
    with pytest.raises(TypeError, match="n must be an int"):
        floor_batch("stream_query", 10.0)
    with pytest.raises(TypeError, match="n must be an int"):
        floor_batch("stream_query", True)


def test_quick_measurement_asks_the_floor_for_known_operations():
    from streams import _quick
    assert {op for op, _, _ in _quick.OPS} <= set(ops.OP_BY_NAME)
    assert _quick.SUSPECT_BELOW == ops.SUSPECT_BELOW


def test_quick_table_says_when_streams_is_below_its_floor():
    from streams import _quick
    per_call = dict(zip((op for op, _, _ in _quick.OPS), (190, 300, 2000, 9000)))
    batches = {op: (lambda n, v=v: v * n) for op, v in per_call.items()}
    rows = _quick.measure(batches, floor=lambda op, n: 200 * n, rounds=3)
    lines = _quick.table(rows, rounds=3).splitlines()
    assert next(ln for ln in lines if ln.startswith("stream query")).endswith("0.95x")
    assert next(ln for ln in lines if ln.startswith("event record")).endswith("1.50x")
    assert not any(ln.endswith("SUSPECT") for ln in lines)
    batches["stream_query"] = lambda n: 180 * n
    lines = _quick.table(_quick.measure(batches, floor=lambda op, n: 200 * n, rounds=3),
                         rounds=3).splitlines()
    assert next(ln for ln in lines if ln.startswith("stream query")).endswith("0.90x SUSPECT")
    assert any(ln.startswith("SUSPECT: streams below 0.95x of the floor") for ln in lines)


def _build_fake(d, ptx):
    """bench.c linked with the stand-in cudart, with ``ptx`` for its kernels
    (the stand-in finds a kernel by its .entry line)."""
    cc = builders.compiler()
    incs, _ = builders.find_cuda()
    if cc is None or incs is None:
        pytest.skip("needs a C compiler and the CUDA headers")
    (d / "streams_ptx.h").write_text("static const char streams_builtin_ptx[] =\n"
                                     + builders.c_string_literal(ptx) + ";\n")
    exe = str(d / "bench_fake")
    cmd = (cc + builders.C_FLAGS + ["-I", str(d), "-I", os.path.join(ROOT, "include"),
                                   "-I", os.path.join(ROOT, "src")]
           + [a for i in incs for a in ("-I", i)]
           + [os.path.join(ROOT, "benchmarks", "c_floor", "bench.c"),
              os.path.join(ROOT, "benchmarks", "tests", "fake_cudart.c"), "-lpthread", "-o", exe])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    return exe


@pytest.fixture(scope="module")
def fake_bench(tmp_path_factory):
    """The stand-in build, its PTX with the argument kernels too."""
    extra = "".join(f".entry {name}(\n" for name, _ in ops.ARG_KERNELS.values())
    return _build_fake(tmp_path_factory.mktemp("fake"), builtin_ptx() + extra)


def _bench(exe, *args, fail=None, calls=False):
    env = dict(os.environ)
    env.pop("FAKE_CUDART_FAIL", None)
    env.pop("FAKE_CUDART_CALLS", None)
    if fail:
        env["FAKE_CUDART_FAIL"] = fail
    if calls:
        env["FAKE_CUDART_CALLS"] = "1"
    proc = subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=60)
    return json.loads(proc.stdout), proc.stderr.strip()


def _calls(exe, op, n, by_stream=False):
    """The stand-in's count of each function's calls in one batch of ``n``
    calls of ``op`` (set-up, warm-up and clean-up included); ``by_stream``:
    of the calls that take a stream, by stream and copy direction
    (``cudaMemcpyAsync@1:D2H``: fake_cudart.c says how streams are named)."""
    answer, err = _bench(exe, op, str(n), "1", "0", calls=True)
    assert answer["ok"], answer
    live, calls, on_streams = err.splitlines()
    assert live == NOTHING_LIVE
    assert calls.startswith("fake-cudart calls: ")
    assert on_streams.startswith("fake-cudart on streams: ")
    line = on_streams if by_stream else calls
    return {name: int(count) for name, count in
            (item.split("=") for item in line.split(": ", 1)[1].split())}


def _per_call(exe, op, n=32, by_stream=False):
    """What one more call of ``op`` makes: the calls of a batch of 2n calls
    less those of a batch of n, over n (the set-up, the warm-up and the
    clean-up are the same in both)."""
    few, many = _calls(exe, op, n, by_stream), _calls(exe, op, 2 * n, by_stream)
    diff = {name: (many.get(name, 0) - few.get(name, 0)) / n for name in set(few) | set(many)}
    return {name: d for name, d in diff.items() if d}


@pytest.mark.parametrize("op", FLOORED)
def test_every_floor_loop_runs_and_leaves_nothing(fake_bench, op):
    answer, live = _bench(fake_bench, op, "40", "3", "1")
    assert answer["ok"], answer
    assert len(answer["ns"]) == 3 and all(x > 0 for x in answer["ns"])
    assert live == NOTHING_LIVE


@pytest.mark.parametrize("op, fail", [
    ("graph_capture_instantiate", "cudaGraphInstantiateWithFlags"),
    ("graph_capture_instantiate", "cudaLaunchKernel"),
    ("graph_launch", "cudaGraphUpload"),
    ("host_func_throughput_8threads", "cudaLaunchHostFunc"),
    ("host_func_throughput_8threads", "cudaSetDevice"),
    ("host_func_enqueue", "cudaLaunchHostFunc"),
    ("stream_wait_stream", "cudaStreamWaitEvent"),
    ("event_record_query", "cudaEventQuery"),
    ("kernel_launch_args16", "cudaLaunchKernel"),
    ("kernel_launch", "cudaLibraryGetKernel"),
    ("stream_query", "cudaEventCreateWithFlags"),
    ("memcpy_loop_8", "cudaMemcpyAsync"),
    ("memcpy_loop_8", "cudaMalloc"),
    ("memcpy_batch_8", "cudaMemcpyBatchAsync"),
    ("graph_launch_1000", "cudaGraphLaunch"),
    ("pipeline_inference", "cudaMallocHost"),
    ("pipeline_inference", "cudaLaunchHostFunc"),
    ("pipeline_inference", "cudaMemcpyAsync"),
    ("pipeline_inference", "cudaGraphUpload"),
    ("pipeline_data_loader", "cudaStreamWaitEvent"),
    ("pipeline_data_loader", "cudaLaunchKernel"),
])
def test_a_failed_call_is_reported_and_cleaned_up(fake_bench, op, fail):
    answer, live = _bench(fake_bench, op, "40", "2", "1", fail=fail)
    assert answer == {"ok": False, "error": answer["error"]}
    assert answer["error"].split("(")[0].split(":")[0].strip() == fail
    assert live == NOTHING_LIVE


@pytest.mark.parametrize("op, fail, left", [
    ("pipeline_inference", "cudaFreeHost", "pinned"),
    ("pipeline_data_loader", "cudaFree", "memory"),
    ("graph_launch", "cudaGraphExecDestroy", "execs"),
    ("graph_launch_1000", "cudaGraphDestroy", "graphs"),
    ("event_record", "cudaEventDestroy", "events"),
    ("stream_query", "cudaStreamDestroy", "streams"),
])
def test_a_failed_clean_up_fails_the_batch(fake_bench, op, fail, left):
    """A destroy or free that fails after the timing leaves a handle or an
    allocation alive: the batch is an error that names the call, not a
    result; the rest of the clean-up still runs."""
    answer, live = _bench(fake_bench, op, "40", "2", "1", fail=fail)
    assert answer == {"ok": False, "error": answer["error"]}
    assert answer["error"].split("(")[0] == fail, answer["error"]
    assert live == NOTHING_LIVE.replace(f" {left}=0", f" {left}=1")


def test_the_pipelines_copies_must_fit_the_copy_arrays(tmp_path):
    """floor.h refuses to compile, with the C compiler and flags of the C
    program, where a pipeline step has more copies than its arrays hold."""
    cc = builders.compiler()
    incs, _ = builders.find_cuda()
    if cc is None or incs is None:
        pytest.skip("needs a C compiler and the CUDA headers")
    with open(FLOOR_H) as f:
        floor = f.read()
    (tmp_path / "use.c").write_text('#include "floor.h"\n')

    def compiles(text):
        (tmp_path / "floor.h").write_text(text)
        cmd = (cc + builders.C_FLAGS + ["-fsyntax-only", "-I", str(tmp_path),
                                       "-I", os.path.join(ROOT, "include"),
                                       "-I", os.path.join(ROOT, "src")]
               + [a for i in incs for a in ("-I", i)] + [str(tmp_path / "use.c")])
        return subprocess.run(cmd, capture_output=True, text=True)

    assert compiles(floor).returncode == 0
    line = "#define STREAMS_FLOOR_LOADER_COPIES 2\n"
    assert floor.count(line) == 1
    proc = compiles(floor.replace(line, "#define STREAMS_FLOOR_LOADER_COPIES 9\n"))
    assert proc.returncode != 0
    assert "the copies of a pipeline step must fit the arrays of STREAMS_FLOOR_COPIES" in proc.stderr


def test_a_missing_kernel_is_named(tmp_path):
    # The built-in PTX without streams_args4.
    ptx = builtin_ptx().replace(".entry streams_args4(", ".entry streams_other4(")
    exe = _build_fake(tmp_path, ptx)
    answer, live = _bench(exe, "kernel_launch_args4", "10", "1", "0")
    assert not answer["ok"]
    assert answer["error"].startswith("cudaLibraryGetKernel(streams_args4): ")
    assert live == NOTHING_LIVE


def test_an_aliased_floor_is_the_loop_of_its_operation(fake_bench, monkeypatch, tmp_path):
    """event_record_torch_stream makes event_record's CUDA calls: its floor,
    in a worker and in the C program, is that loop, not a copy of it."""
    from benchmarks import adapters, harness
    assert set(ops.FLOOR_OF.values()) <= set(FLOORED)
    assert not set(ops.FLOOR_OF) & set(FLOORED) and not set(ops.FLOOR_OF) & set(ops.NO_FLOOR)
    floor = adapters.Adapter().floor("event_record_torch_stream")
    assert floor.args == ("event_record",)
    # The C program (here on the stand-in cudart) is asked for event_record's loop.
    monkeypatch.setattr(harness, "build_c_floor", lambda *a, **k: (fake_bench, None))
    cfg = harness.Config(ops=["event_record_torch_stream"], contenders=["c", "noop"],
                         quick=True, cache_dir=str(tmp_path), progress=False, timeout=60)
    doc = harness.run_benchmark(cfg)
    row = doc["results"]["event_record_torch_stream"]
    assert row["c"]["status"] == "ok", row["c"]
    assert len(row["c"]["ns"]) == cfg.rounds * cfg.batches
    assert row["c"]["note"] == "the loop of event_record: the same CUDA calls"
    assert row["noop"] == {"status": "n/a", "ratio": None, "ratio_to_c": None, "target": None,
                           "verdict": None, "reason": row["noop"]["reason"]}
    assert row["noop"]["reason"].startswith("only streams-py, streams-py-baseline: ")


@pytest.mark.parametrize("op", ops.PIPELINE_OPS)
def test_a_pipeline_step_makes_the_calls_of_ops_py(fake_bench, op):
    """One step of each pipeline, in C, makes the CUDA calls that
    ops.STEP_CALLS lists (every contender's step makes the same:
    test_pipeline.py), and nothing else: the host function of the inference
    step once every HOST_FUNC_EVERY steps, its graph of GRAPH_KERNELS nodes."""
    step = _per_call(fake_bench, op)
    expected = dict(ops.STEP_CALLS[op])
    if op == "pipeline_inference":
        expected["graph_nodes"] = ops.GRAPH_KERNELS
    assert step == expected
    assert ops.STEP_CALLS["pipeline_inference"]["cudaLaunchHostFunc"] == 1 / 16
    assert ops.STEP_CALLS["pipeline_inference"]["cudaLaunchKernel"] == 8


def test_the_inference_step_enqueues_its_host_function_mid_period(fake_bench):
    """The step numbered HOST_FUNC_AT of each HOST_FUNC_EVERY (from 0, at
    each batch's start) enqueues the host function: a batch's last step
    never does, so none is left to run after the timing.  (A batch of n
    steps follows a warm-up of min(n, 4), which enqueues none.)"""
    sizes = (ops.HOST_FUNC_AT, ops.HOST_FUNC_AT + 1, ops.HOST_FUNC_EVERY,
             ops.HOST_FUNC_EVERY + ops.HOST_FUNC_AT, ops.HOST_FUNC_EVERY + ops.HOST_FUNC_AT + 1)
    assert [ops.host_funcs(n) for n in sizes] == [0, 1, 1, 1, 2]
    for n in sizes:
        calls = _calls(fake_bench, "pipeline_inference", n)
        assert calls.get("cudaLaunchHostFunc", 0) == ops.host_funcs(n), n


# The stand-in names a stream by the streams alive when it was made: a
# batch makes its `s` first, then its `other`.
STREAM_ID = {"s": 0, "other": 1}


def test_the_stand_in_names_each_batchs_streams_in_the_order_made(fake_bench):
    """stream_wait_stream records on `other` and waits on `s`; the copies of
    memcpy_loop_8 go device to device on `s`."""
    assert _per_call(fake_bench, "stream_wait_stream", by_stream=True) == {
        "cudaEventRecord@1": 1, "cudaStreamWaitEvent@0": 1}
    assert _per_call(fake_bench, "memcpy_loop_8", by_stream=True) == {
        "cudaMemcpyAsync@0:D2D": ops.COPIES}


@pytest.mark.parametrize("op", ops.PIPELINE_OPS)
def test_a_pipeline_step_makes_each_call_on_the_stream_of_ops_py(fake_bench, op):
    """Each call of one step on the stream that ops.STEP_STREAMS names (the
    table every contender's step is held to: test_pipeline.py), its copies
    in the direction of ops.STEP_COPIES, between device and pinned memory."""
    expected = {}
    for call, per_step in ops.STEP_CALLS[op].items():
        key = f"{call}@{STREAM_ID[ops.STEP_STREAMS[op][call]]}"
        expected[key + (":" + ops.STEP_COPIES[op] if call == "cudaMemcpyAsync" else "")] = per_step
    assert _per_call(fake_bench, op, by_stream=True) == expected


@pytest.mark.parametrize("op", sorted(ops.GRAPH_SIZES, key=ops.GRAPH_SIZES.get))
def test_a_graph_launch_runs_a_graph_of_its_size(fake_bench, op):
    assert _per_call(fake_bench, op) == {"cudaGraphLaunch": 1,
                                         "graph_nodes": ops.GRAPH_SIZES[op]}
    assert _per_call(fake_bench, op, by_stream=True) == {"cudaGraphLaunch@0": 1}


def test_the_graph_sizes_are_those_of_the_issue():
    assert sorted(ops.GRAPH_SIZES.values()) == [1, 10, 100, 1000]
    assert ops.GRAPH_SIZES["graph_launch"] == ops.GRAPH_KERNELS == 10
    assert set(ops.GRAPH_SIZES) <= set(ops.GRAPH_OPS) and set(ops.GRAPH_SIZES) <= ops.ENQUEUES


def test_a_capture_makes_its_ten_launches(fake_bench):
    assert _per_call(fake_bench, "graph_capture_instantiate") == {
        "cudaStreamBeginCapture": 1, "cudaLaunchKernel": ops.GRAPH_KERNELS,
        "cudaStreamEndCapture": 1, "cudaGraphInstantiateWithFlags": 1,
        "cudaGraphExecDestroy": 1, "cudaGraphDestroy": 1}
