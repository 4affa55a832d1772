"""The benchmark harness, checked without a GPU.

Everything but the timing itself runs here: argument parsing, the result
schema, table and chart rendering from the stored synthetic fixture, the
whole worker protocol through the pure-Python "noop" contender (crashes and
failures included), and compiling the C floor and the Cython contender.
"""
import copy
import io
import json
import os
import re
import sys

import pytest

from streams import bench

# The checkout (benchmarks/ lives there) may differ from where the streams
# under test is installed: CI tests an installed wheel from outside it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "benchmarks", "results", "example-dry-run.json")


def _run(args, tmp_path, env=None, timeout=300):
    """``python ARGS`` in a child that imports the same streams as this process."""
    from _support import run_python_args
    return run_python_args(args, cwd=tmp_path, extra_env=env, timeout=timeout)


@pytest.fixture
def example():
    with open(EXAMPLE) as f:
        return json.load(f)


# ---- argument parsing -------------------------------------------------------

def test_parse_defaults():
    a = bench.parse_args([])
    assert not a.quick and a.json is None and a.png is None and a.dry_run is None
    assert a.ops is None and a.contenders is None


def test_parse_everything():
    a = bench.parse_args(["--quick", "--json", "r.json", "--png", "r.png",
                          "--ops", "stream_query,kernel_launch",
                          "--contenders", "c,streams-py,cupy", "--dry-run", "x.json",
                          "--rounds", "3", "--batches", "4", "--scale", "0.5"])
    assert a.quick and a.json == "r.json" and a.png == "r.png" and a.dry_run == "x.json"
    assert a.ops == ["stream_query", "kernel_launch"]
    assert a.contenders == ["c", "streams-py", "cupy"]
    assert (a.rounds, a.batches, a.scale) == (3, 4, 0.5)


@pytest.mark.parametrize("argv", [
    ["--ops", "no_such_op"],
    ["--contenders", "c,jax"],
    ["--ops", ","],
    ["--rounds", "0"],
    ["--scale", "-1"],
])
def test_parse_rejects(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_unknown_op_message_lists_choices(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--ops", "stream_qurey"])
    err = capsys.readouterr().err
    assert "stream_qurey" in err and "stream_query" in err


def test_config_quick_and_full():
    full, quick = bench.Config(), bench.Config(quick=True)
    assert full.contenders == list(bench.DEFAULT_CONTENDERS)
    assert "noop" not in full.contenders
    assert quick.rounds < full.rounds and quick.batches < full.batches
    assert all(quick.iters(op.name) <= full.iters(op.name) for op in bench.OPS)
    assert all(full.iters(op.name) == op.iters for op in bench.OPS)


def test_list(capsys):
    assert bench.main(["--list"]) == 0
    out = capsys.readouterr().out
    for op in bench.OPS:
        assert op.name in out
    assert "noop" not in out


# ---- the plan is consistent across the three implementations -----------------

def test_c_floor_knows_every_operation():
    with open(os.path.join(ROOT, "benchmarks", "c_floor", "bench.c")) as f:
        src = f.read()
    table = src[src.index("op_names[OP_COUNT] = {"):]
    table = table[:table.index("};")]
    assert re.findall(r'"(\w+)"', table) == [op.name for op in bench.OPS]


def test_cython_ops_are_known_operations():
    with open(os.path.join(ROOT, "benchmarks", "cy_bench.pyx")) as f:
        src = f.read()
    ops = re.search(r"OPS = \(([^)]*)\)", src).group(1)
    names = re.findall(r'"(\w+)"', ops)
    assert names and set(names) <= set(bench.OP_BY_NAME)
    assert set(names) >= {op.name for op in bench.OPS if "streams-cy" in op.targets}


def test_targets_as_promised():
    t = {op.name: op.targets for op in bench.OPS}
    for op in ("stream_query", "stream_synchronize", "event_record", "event_query",
               "stream_wait_event"):
        assert t[op] == {"streams-py": 1.3, "streams-cy": 1.05}
    assert t["event_create_destroy"] == {"streams-py": 2.0}
    assert t["stream_create_destroy"] == {"streams-py": 1.1}
    assert t["kernel_launch"] == {"streams-py": 1.15}
    assert t["host_func_enqueue"] == {"streams-py": 1.2}
    assert t["host_func_round_trip"] == {"streams-py": 1.15}
    assert t["graph_launch"] == {"streams-py": 1.05}


def test_builtin_ptx_comes_from_the_package():
    ptx = bench.builtin_ptx(ROOT)
    assert ".entry streams_empty(" in ptx and ".entry streams_spin(" in ptx
    assert ptx.lstrip().startswith(".version")
    lit = bench.c_string_literal('a"b\\c\td\n')
    assert lit == '"a\\"b\\\\c\\td\\n"'


# ---- statistics and the timing loop -------------------------------------------

def test_summarize():
    s = bench.summarize([5, 1, 4, 2, 3])
    assert s["median"] == 3 and s["min"] == 1 and s["n"] == 5 and s["mean"] == 3
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)
    assert bench.summarize([7])["p10"] == 7
    assert bench.summarize([]) is None


def test_make_loop_runs_body_n_times_and_tail_once():
    calls = []
    timed = bench.make_loop("f(1)", tail="f(2)", f=calls.append)
    ns = timed(7)
    assert isinstance(ns, int) and ns >= 0
    assert calls == [1] * 7 + [2]
    multi = bench.make_loop("e = f(3)\nif e: f(4)", f=calls.append)
    calls.clear()
    multi(2)
    assert calls == [3, 3]


def test_run_batches_skips_warmup_and_counts_disturbed():
    seen = []
    case = bench.Case(lambda n: 10 * n, before=seen.append,
                      after=lambda n, ns: len(seen) % 2 == 0)
    ns, drained = bench.run_batches(case, 5, 4, 2)
    assert ns == [10.0] * 4
    assert len(seen) == 6
    assert drained == 2


# ---- the result schema ---------------------------------------------------------

def test_example_is_a_valid_synthetic_result(example):
    bench.validate_result(example)
    assert example["synthetic"] is True
    assert "SYNTHETIC" in example["note"] and "not a measurement" in example["note"]
    assert example["schema"] == bench.SCHEMA
    assert set(example["results"]) == set(bench.OP_BY_NAME)
    statuses = {cell["status"] for row in example["results"].values() for cell in row.values()}
    assert {"ok", "n/a", "missing", "error"} <= statuses


@pytest.mark.parametrize("breakage, complaint", [
    (lambda d: d.pop("schema"), "schema"),
    (lambda d: d.update(synthetic="yes"), "synthetic"),
    (lambda d: d.pop("results"), "results must be an object"),
    (lambda d: d["config"].update(rounds=0), "config.rounds"),
    (lambda d: d["results"]["stream_query"]["c"].update(ns=[]), "results.stream_query.c.ns"),
    (lambda d: d["results"]["stream_query"]["c"].update(ns=[1, -2]), "positive"),
    (lambda d: d["results"]["stream_query"]["c"].update(status="great"), "status"),
    (lambda d: d["results"]["stream_query"]["cupy"].update(iters=0), "iters"),
    (lambda d: d["results"]["stream_query"]["cuda-core"].pop("reason"), "reason"),
    (lambda d: d["results"]["stream_query"].update(jax={"status": "ok"}), "not in contenders"),
    (lambda d: d["ops"]["stream_query"].update(targets={"streams-py": "fast"}), "targets"),
    (lambda d: d["contenders"]["c"].update(status="sleepy"), "contenders.c.status"),
])
def test_validate_rejects(example, breakage, complaint):
    breakage(example)
    with pytest.raises(bench.ResultError) as exc:
        bench.validate_result(example)
    assert complaint in str(exc.value)


def test_validate_rejects_non_objects():
    for doc in ([], "x", None):
        with pytest.raises(bench.ResultError):
            bench.validate_result(doc)


def test_finalize_recomputes_from_raw_numbers(example):
    doc = copy.deepcopy(example)
    row = doc["results"]["stream_query"]
    row["c"]["ns"] = [100.0, 100.0, 100.0]
    row["streams-py"]["ns"] = [120.0, 125.0, 130.0]
    row["streams-cy"]["ns"] = [110.0] * 3
    row["streams-py"]["ratio_to_c"] = 99.0          # stale numbers are ignored
    bench.finalize(doc)
    assert row["streams-py"]["stats"]["median"] == 125.0
    assert row["streams-py"]["ratio_to_c"] == pytest.approx(1.25)
    assert row["streams-py"]["verdict"] == "pass"
    assert row["streams-cy"]["verdict"] == "miss"   # 1.10 > 1.05
    assert row["c"]["ratio_to_c"] is None
    assert {"op": "stream_query", "contender": "streams-cy", "ratio": 1.1,
            "target": 1.05} in doc["summary"]["misses"]
    # No C numbers: nothing to compare, so targets are not measured.
    doc["results"]["kernel_launch"]["c"] = {"status": "unavailable", "reason": "no gcc"}
    bench.finalize(doc)
    assert doc["results"]["kernel_launch"]["streams-py"]["verdict"] == "not measured"
    # Nor where streams has no numbers.
    doc["results"]["graph_launch"]["streams-py"] = {"status": "n/a", "reason": "not yet"}
    bench.finalize(doc)
    assert doc["results"]["graph_launch"]["streams-py"]["verdict"] == "not measured"


# ---- rendering -----------------------------------------------------------------

def test_table(example):
    doc = bench.finalize(example)
    text = bench.render_table(doc)
    assert "SYNTHETIC FIXTURE, NOT A MEASUREMENT" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("operation"))
    for c in doc["config"]["contenders"]:
        assert doc["contenders"][c]["label"] in header
    for op in bench.OPS:
        assert any(line.startswith(op.label) for line in lines), op.name
    row = next(line for line in lines if line.startswith("stream query (idle)"))
    cell = doc["results"]["stream_query"]["streams-py"]
    assert f"{cell['stats']['median']:.0f}±" in row
    assert f"{cell['ratio_to_c']:.2f}x" in row
    assert "Py<=1.3 Cy<=1.05" in row
    assert " MISS" in text and " ok" in text
    assert "numba-cuda: missing" in text
    assert "PyTorch: PyTorch has no host-function API" in text     # an n/a footnote
    summ = doc["summary"]
    assert f"targets: {summ['pass']} pass, {summ['miss']} miss" in text


def test_table_filters_and_unavailable_c(example):
    doc = copy.deepcopy(example)
    for row in doc["results"].values():
        row["c"] = {"status": "unavailable", "reason": "no C compiler"}
    doc["contenders"]["c"].update(status="unavailable", reason="no C compiler")
    bench.finalize(doc)
    text = bench.render_table(doc, ops=["stream_query"], contenders=["c", "streams-py"])
    assert "C floor: unavailable (no C compiler)" in text
    assert "event record" not in text and "CuPy" not in text
    row = next(line for line in text.splitlines() if line.startswith("stream query"))
    assert "unavail." in row and "x" not in row.split("unavail.")[1]


def test_dry_run_cli(tmp_path):
    out = io.StringIO()
    copy_path = tmp_path / "again.json"
    assert bench.main(["--dry-run", EXAMPLE, "--ops", "stream_query,kernel_launch",
                       "--json", str(copy_path)], out=out) == 0
    text = out.getvalue()
    assert "stream query (idle)" in text and "empty-kernel launch" in text
    assert "event record" not in text
    again = json.loads(copy_path.read_text())
    bench.validate_result(again)
    assert again["synthetic"] is True


def test_dry_run_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something else"}')
    assert bench.main(["--dry-run", str(bad)]) == 2
    assert "not a streams benchmark result" in capsys.readouterr().err
    assert bench.main(["--dry-run", str(tmp_path / "missing.json")]) == 2


def test_chart(example, tmp_path):
    pytest.importorskip("matplotlib")
    doc = bench.finalize(example)
    path = tmp_path / "chart.png"
    assert bench.render_chart(doc, str(path)) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    small = tmp_path / "small.png"
    bench.render_chart(doc, str(small), ops=["stream_query"], contenders=["c", "streams-py"])
    assert small.stat().st_size > 0
    with pytest.raises(ValueError):
        bench.render_chart(doc, str(tmp_path / "none.png"), contenders=["c"])


def test_chart_without_matplotlib(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = io.StringIO()
    assert bench.main(["--dry-run", EXAMPLE, "--png", str(tmp_path / "c.png")], out=out) == 0
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


# ---- without a GPU -------------------------------------------------------------

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}    # also hides a real GPU, where there is one


def test_bench_without_device_exits_1(tmp_path):
    proc = _run(["-m", "streams.bench", "--quick", "--contenders", "streams-py"], tmp_path,
                env=NO_GPU)
    assert proc.returncode == 1
    assert "cannot run the benchmark" in proc.stderr


# ---- the whole harness, through the GPU-free stand-in -----------------------------

def test_noop_end_to_end(tmp_path):
    out = tmp_path / "noop.json"
    proc = _run(["-m", "streams.bench", "--contenders", "noop", "--quick", "--json", str(out),
                 "--cache-dir", str(tmp_path / "cache")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no-op (self-test)" in proc.stdout
    assert "[   1/" in proc.stderr                   # the progress lines
    doc = json.loads(out.read_text())
    bench.validate_result(doc)
    assert doc["synthetic"] is False
    cfg = bench.Config(quick=True)
    for op in bench.OPS:
        cell = doc["results"][op.name]["noop"]
        if op.name.startswith("graph"):
            assert cell["status"] == "n/a"
        else:
            assert cell["status"] == "ok", cell
            assert len(cell["ns"]) == cfg.rounds * cfg.batches
            assert cell["iters"] == cfg.iters(op.name)
    assert doc["machine"]["python"] and doc["config"]["quick"] is True


def test_worker_failure_and_crash_cost_one_cell(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMS_BENCH_NOOP_FAIL", "event_query")
    monkeypatch.setenv("STREAMS_BENCH_NOOP_CRASH", "kernel_launch")
    cfg = bench.Config(ops=["stream_query", "event_query", "kernel_launch", "event_record"],
                       contenders=["noop"], quick=True, cache_dir=str(tmp_path),
                       progress=False, timeout=60)
    doc = bench.run_benchmark(cfg)
    res = doc["results"]
    assert res["stream_query"]["noop"]["status"] == "ok"
    assert res["event_query"]["noop"]["status"] == "error"
    assert "asked to fail" in res["event_query"]["noop"]["reason"]
    assert res["kernel_launch"]["noop"]["status"] == "error"
    assert "exit status 3" in res["kernel_launch"]["noop"]["reason"]
    # A fresh worker took over for the next operation.
    assert res["event_record"]["noop"]["status"] == "ok"
    bench.validate_result(doc)


def test_interrupted_run_keeps_what_was_measured(monkeypatch, tmp_path):
    real = bench._measure_op

    def measure(op, *args):
        if op == "event_query":
            raise KeyboardInterrupt
        return real(op, *args)

    monkeypatch.setattr(bench, "_measure_op", measure)
    cfg = bench.Config(ops=["stream_query", "event_query", "event_record"], contenders=["noop"],
                       quick=True, cache_dir=str(tmp_path), progress=False)
    doc = bench.run_benchmark(cfg)
    assert doc["interrupted"] is True
    assert doc["results"]["stream_query"]["noop"]["status"] == "ok"
    assert doc["results"]["event_record"] == {}
    bench.validate_result(doc)
    assert "INTERRUPTED, PARTIAL" in bench.render_table(doc)


def test_missing_peer_is_reported_not_fatal(monkeypatch, tmp_path):
    real = bench._module_present
    monkeypatch.setattr(bench, "_module_present", lambda name: name != "cupy" and real(name))
    cfg = bench.Config(ops=["stream_query"], contenders=["noop", "cupy"], quick=True,
                       cache_dir=str(tmp_path), progress=False)
    doc = bench.run_benchmark(cfg)
    assert doc["contenders"]["cupy"]["status"] == "missing"
    assert doc["results"]["stream_query"]["cupy"]["status"] == "missing"
    assert doc["results"]["stream_query"]["noop"]["status"] == "ok"
    assert "CuPy: missing" in bench.render_table(doc)


# ---- building the C floor and the Cython contender -------------------------------

def test_c_floor_compiles(tmp_path):
    """Compile and link only: running it needs a GPU."""
    if bench.compiler() is None:
        pytest.skip("no C compiler")
    incs, lib = bench.find_cuda()
    if incs is None:
        pytest.skip(f"no CUDA headers: {lib}")
    exe, why = bench.build_c_floor(str(tmp_path), root=ROOT)
    assert why is None, why
    assert os.path.isfile(exe) and os.access(exe, os.X_OK)
    header = (tmp_path / "c_floor" / "streams_ptx.h").read_text()
    assert ".entry streams_empty(" in header and ".entry streams_spin(" in header
    log = (tmp_path / "c_floor" / "build.log").read_text()
    assert "bench.c:" not in log, log             # no warnings in our source
    # Unchanged inputs: the cached build is reused.
    mtime = os.stat(exe).st_mtime_ns
    assert bench.build_c_floor(str(tmp_path), root=ROOT) == (exe, None)
    assert os.stat(exe).st_mtime_ns == mtime


def test_c_floor_reports_missing_cuda(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    exe, why = bench.build_c_floor(str(tmp_path), root=ROOT)
    assert exe is None and "libcudart_static.a" in why


def test_cython_contender_builds_and_checks(tmp_path):
    pytest.importorskip("Cython")
    if bench.compiler() is None:
        pytest.skip("no C compiler")
    import streams
    path, why = bench.build_cython_bench(str(tmp_path), root=ROOT)
    assert why is None, why
    import importlib.util
    spec = importlib.util.spec_from_file_location(bench._CY_MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert set(mod.OPS) <= set(bench.OP_BY_NAME)
    # Never-initialised objects: no GPU needed to reach streams' own checks.
    s, ev = streams.Stream.__new__(streams.Stream), streams.Event.__new__(streams.Event)
    with pytest.raises(ValueError, match="no C-level API"):
        mod.run_batch("host_func_enqueue", s, ev, ev, 10)
    with pytest.raises(ValueError, match="needs a PreparedLaunch"):
        mod.run_batch("kernel_launch", s, ev, ev, 10)
    with pytest.raises(ValueError, match="needs a GraphExec"):
        mod.run_batch("graph_launch", s, ev, ev, 10)
    # The error raised inside the nogil loop comes back as the exception.
    with pytest.raises(ValueError, match="closed"):
        mod.run_batch("stream_query", s, ev, ev, 10)
