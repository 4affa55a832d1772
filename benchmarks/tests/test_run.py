"""The command line of the benchmark (``python -m benchmarks.run``),
checked without a GPU: argument parsing, --list, --dry-run of the stored
synthetic fixture, and a whole run through the pure-Python "noop" contender
in a child process, as a user starts it.
"""
import io
import json
import os
import sys

import pytest

from benchmarks import CHECKOUT, harness, ops, results, run
from benchmarks.under_test import child_pythonpath


def _run(args, tmp_path, env=None, timeout=300):
    """``python ARGS`` in a child that imports the same streams as this
    process, and this checkout's benchmarks."""
    from _support import run_python_args
    extra = dict(env or {}, PYTHONPATH=child_pythonpath())
    return run_python_args(args, cwd=tmp_path, extra_env=extra, timeout=timeout)


# ---- argument parsing -------------------------------------------------------

def test_parse_defaults():
    a = run.parse_args([])
    assert not a.quick and a.json is None and a.png is None and a.dry_run is None
    assert a.ops is None and a.contenders is None


def test_parse_everything():
    a = run.parse_args(["--quick", "--json", "r.json", "--png", "r.png",
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
    ["--cpus", "x"],
    ["--cpus", "100000"],
])
def test_parse_rejects(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        run.parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_cpus_pin_every_worker():
    allowed = sorted(os.sched_getaffinity(0))
    a = run.parse_args(["--cpus", str(allowed[-1])])
    assert a.cpus == {allowed[-1]}
    cfg = harness.Config(cpus=a.cpus)
    assert cfg.as_dict()["cpus"] == [allowed[-1]]
    # A worker started with them runs on those CPUs only.
    w = harness.Worker("probe", [sys.executable, "-c",
                                 "import os; print(sorted(os.sched_getaffinity(0)))"],
                       cpus=cfg.cpus)
    w.start()
    out, _ = w.proc.communicate(timeout=60)
    assert out.decode().strip() == str([allowed[-1]])


def test_unknown_op_message_lists_choices(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--ops", "stream_qurey"])
    err = capsys.readouterr().err
    assert "stream_qurey" in err and "stream_query" in err


def test_config_quick_and_full():
    full, quick = harness.Config(), harness.Config(quick=True)
    assert full.contenders == list(ops.DEFAULT_CONTENDERS)
    assert "noop" not in full.contenders
    assert quick.rounds < full.rounds and quick.batches < full.batches
    assert all(quick.iters(op.name) <= full.iters(op.name) for op in ops.OPS)
    assert all(full.iters(op.name) == op.iters for op in ops.OPS)


def test_list(capsys):
    assert run.main(["--list"]) == 0
    out = capsys.readouterr().out
    for op in ops.OPS:
        assert op.name in out
    assert "noop" not in out


def test_list_says_what_a_pipeline_step_and_a_graph_size_are(capsys):
    assert run.main(["--list"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()
             if ln.startswith("  ")}
    inference, loader = lines["pipeline_inference"], lines["pipeline_data_loader"]
    assert "8 launches of a 4-parameter kernel and a 10-kernel graph replay" in inference
    assert "a host function every 16 steps; ns per step [target Py<=1.1]" in inference
    assert "2 copies of 4 KiB from pinned memory to the device" in loader
    assert loader.endswith("ns per step [target Py<=1.1]")
    for op, nodes in ops.GRAPH_SIZES.items():
        assert f"captured from {nodes} empty-kernel launch" in lines[op]


def test_dry_run_renders_the_pipeline_and_graph_size_rows(example_path):
    out = io.StringIO()
    rows = ["graph_launch_1", "graph_launch_100", "graph_launch_1000", "pipeline_inference",
            "pipeline_data_loader"]
    assert run.main(["--dry-run", example_path, "--ops", ",".join(rows)], out=out) == 0
    lines = out.getvalue().splitlines()
    doc = results.load_result(example_path)

    def row(op):
        return next(ln for ln in lines if ln.startswith(ops.OP_BY_NAME[op].label + "  "))

    for op in rows:
        cell = doc["results"][op]["streams-py"]
        assert f" /{cell['floor_stats']['median']:.0f} {cell['ratio']:.2f}x" in row(op)
    assert "/node" not in row("graph_launch_1")
    for op in ("graph_launch_100", "graph_launch_1000"):
        assert row(op).count("/node") == 7       # every column with numbers
    assert " ok" in row("pipeline_inference") and "Py<=1.1 " in row("pipeline_inference")
    assert row("pipeline_inference").count("n/a[") == 3
    assert any(ln.startswith("N/node: ") for ln in lines)
    assert any("PyTorch: PyTorch has no host-function API" in ln for ln in lines)


def test_dry_run_cli(tmp_path, example_path):
    out = io.StringIO()
    copy_path = tmp_path / "again.json"
    assert run.main(["--dry-run", example_path, "--ops", "stream_query,kernel_launch",
                     "--json", str(copy_path)], out=out) == 0
    text = out.getvalue()
    assert "stream query (idle)" in text and "empty-kernel launch" in text
    assert "event record" not in text
    again = json.loads(copy_path.read_text())
    results.validate_result(again)
    assert again["synthetic"] is True


def test_dry_run_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something else"}')
    assert run.main(["--dry-run", str(bad)]) == 2
    assert "not a streams benchmark result" in capsys.readouterr().err
    assert run.main(["--dry-run", str(tmp_path / "missing.json")]) == 2


def test_chart_without_matplotlib(monkeypatch, tmp_path, capsys, example_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = io.StringIO()
    assert run.main(["--dry-run", example_path, "--png", str(tmp_path / "c.png")], out=out) == 0
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


# ---- without a GPU -------------------------------------------------------------

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}    # also hides a real GPU, where there is one


@pytest.mark.hidden_device
def test_bench_without_device_exits_1(tmp_path):
    proc = _run(["-m", "benchmarks.run", "--quick", "--contenders", "streams-py"], tmp_path,
                env=NO_GPU)
    assert proc.returncode == 1
    assert "cannot run the benchmark" in proc.stderr


def test_noop_end_to_end(tmp_path):
    out = tmp_path / "noop.json"
    proc = _run(["-m", "benchmarks.run", "--contenders", "noop", "--quick", "--json", str(out),
                 "--cache-dir", str(tmp_path / "cache")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "no-op (self-test)" in proc.stdout
    assert "[   1/" in proc.stderr                   # the progress lines
    doc = json.loads(out.read_text())
    results.validate_result(doc)
    assert doc["synthetic"] is False
    cfg = harness.Config(quick=True)
    for op in ops.OPS:
        cell = doc["results"][op.name]["noop"]
        if op.name in ops.GRAPH_OPS or op.only:
            assert cell["status"] == "n/a"
        else:
            assert cell["status"] == "ok", cell
            assert len(cell["ns"]) == len(cell["floor_ns"]) == cfg.rounds * cfg.batches
            assert cell["iters"] == cfg.iters(op.name)
    assert doc["machine"]["python"] and doc["config"]["quick"] is True


@pytest.mark.hidden_device
def test_runs_from_the_checkout_root():
    """`python -m benchmarks.run` as the README says, from the checkout: it
    imports the streams under test even where that is an installed wheel
    and the checkout's streams/ has no compiled module."""
    from _support import run_python_args
    proc = run_python_args(["-m", "benchmarks.run", "--quick", "--contenders", "streams-py"],
                           cwd=CHECKOUT, extra_env=NO_GPU, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot import streams" not in proc.stderr
    assert "cannot run the benchmark: no usable CUDA device (device_count() == 0" in proc.stderr


def test_a_baseline_must_be_a_built_streams(tmp_path):
    """--baseline adds the baseline column; a folder without a built streams
    makes it unavailable, with the reason, before any GPU is needed."""
    from benchmarks.under_test import baseline_problem
    assert "no baseline build given" in baseline_problem(None)
    assert "has no streams package" in baseline_problem(str(tmp_path))
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "__init__.py").write_text("")
    assert "has no compiled module" in baseline_problem(str(tmp_path))
    (tmp_path / "streams" / "_cudart.cpython-312-x86_64-linux-gnu.so").write_text("")
    assert baseline_problem(str(tmp_path)) is None
    from benchmarks.harness import Config
    assert Config(baseline=str(tmp_path)).contenders[:5] == [
        "c", "streams-py", "streams-py-baseline", "streams-cy", "streams-cy-baseline"]
    assert not {"streams-py-baseline", "streams-cy-baseline"} & set(Config().contenders)
    assert Config(contenders=["streams-py"], baseline=str(tmp_path)).contenders == ["streams-py"]


def test_the_baseline_folder_gives_its_streams_and_our_benchmarks(tmp_path):
    from benchmarks import CHECKOUT
    from benchmarks.harness import Config, _baseline_folder
    from benchmarks.under_test import child_pythonpath
    base = tmp_path / "old-checkout"
    (base / "streams").mkdir(parents=True)
    (base / "benchmarks").mkdir()          # a checkout's own harness must not be used
    config = Config(baseline=str(base), cache_dir=str(tmp_path / "cache"))
    folder = _baseline_folder(config)
    assert os.listdir(folder) == ["streams"]
    assert os.path.realpath(os.path.join(folder, "streams")) == str((base / "streams").resolve())
    path = child_pythonpath(folder).split(os.pathsep)
    assert path[:2] == [folder, CHECKOUT]
    assert _baseline_folder(config) == folder, "made again over the old link"


def test_the_cython_baseline_is_built_against_the_baseline_and_run_with_it(tmp_path,
                                                                            monkeypatch):
    """streams-cy-baseline: cy_bench.pyx built from the baseline's .pxd files
    into a folder of its own, its worker started where the baseline's streams
    comes first (here the baseline is the streams under test: no GPU)."""
    pytest.importorskip("Cython")
    from benchmarks import builders
    from benchmarks.under_test import streams_parent
    if builders.compiler() is None:
        pytest.skip("no C compiler")
    started = {}

    class Recorder(harness.Worker):
        def start(self):
            started[self.name] = self

        def ask(self, line, timeout):
            return {"ok": True}

        def stop(self):
            pass

    monkeypatch.setattr(harness, "Worker", Recorder)
    config = harness.Config(ops=["stream_query"], contenders=["streams-cy", "streams-cy-baseline"],
                            baseline=streams_parent(), cache_dir=str(tmp_path), progress=False)
    doc = results.new_doc(config)
    harness._prepare(config, doc, harness.Progress(0, enabled=False))
    assert set(started) == {"streams-cy", "streams-cy-baseline"}, doc["contenders"]
    mine, base = started["streams-cy"], started["streams-cy-baseline"]
    mod = base.argv[base.argv.index("--cy-module") + 1]
    assert os.path.dirname(mod) == str(tmp_path / "cy-baseline")
    assert os.path.dirname(mine.argv[mine.argv.index("--cy-module") + 1]) == str(tmp_path / "cy")
    assert base.cwd == harness._baseline_folder(config)
    assert base.env["PYTHONPATH"].split(os.pathsep)[0] == base.cwd
    # Without a built baseline the column is unavailable, before anything is built.
    config = harness.Config(ops=["stream_query"], contenders=["streams-cy-baseline"],
                            baseline=str(tmp_path / "none"), cache_dir=str(tmp_path),
                            progress=False)
    started.clear()
    doc = results.new_doc(config)
    harness._prepare(config, doc, harness.Progress(0, enabled=False))
    assert not started
    assert doc["contenders"]["streams-cy-baseline"]["status"] == "unavailable"
    assert "has no streams package" in doc["contenders"]["streams-cy-baseline"]["reason"]
