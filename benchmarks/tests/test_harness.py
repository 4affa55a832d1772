"""The timing loops and the harness, checked without a GPU: the generated
loop, batches, and the worker protocol through the pure-Python "noop"
contender (failures, crashes, interruptions and missing peers included).
"""
import os
import sys

import pytest

import benchmarks
from benchmarks import adapters, harness, ops, render, results, timing
from benchmarks.under_test import child_pythonpath, streams_parent


def test_make_loop_runs_body_n_times_and_tail_once():
    calls = []
    timed = timing.make_loop("f(1)", tail="f(2)", f=calls.append)
    ns = timed(7)
    assert isinstance(ns, int) and ns >= 0
    assert calls == [1] * 7 + [2]
    multi = timing.make_loop("e = f(3)\nif e: f(4)", f=calls.append)
    calls.clear()
    multi(2)
    assert calls == [3, 3]


@pytest.mark.parametrize("name", sorted(adapters.ADAPTERS))
def test_every_statement_of_every_adapter_compiles(name):
    """Syntax only: running them needs the library and a GPU."""
    cls = adapters.ADAPTERS[name]
    for op, stmt in cls.stmts.items():
        assert op in ops.OP_BY_NAME, op
        body = stmt.replace("{kernel}", "k(s)").replace("{args}", "a0, a1")
        assert "{" not in body, (op, body)
        timing.make_loop(body + "\n" + cls.sync)
    for op in cls.na:
        assert op in ops.OP_BY_NAME, op


def test_run_batches_skips_warmup_and_counts_disturbed():
    seen = []
    case = timing.Case(lambda n: 10 * n, before=seen.append,
                       after=lambda n, ns: len(seen) % 2 == 0)
    out = timing.run_batches(case, 5, 4, 2)
    assert out == {"ns": [10.0] * 4, "drained": 2, "floor_ns": [], "floor_error": None}
    assert len(seen) == 6


def test_run_batches_interleave_the_floor_batch_by_batch():
    order = []

    def timed(n):
        order.append("case")
        return 30 * n

    def floor(n):
        order.append("floor")
        return 20 * n

    out = timing.run_batches(timing.Case(timed), 5, 3, 1, floor=floor)
    assert out["ns"] == [30.0] * 3 and out["floor_ns"] == [20.0] * 3
    # Same batches, each pair in the other order than the one before.
    assert order == ["case", "floor", "floor", "case", "case", "floor", "floor", "case"]


def test_a_failing_floor_is_asked_once_and_said():
    calls = []

    def floor(n):
        calls.append(n)
        raise RuntimeError("no GPU here")

    out = timing.run_batches(timing.Case(lambda n: n), 5, 3, 1, floor=floor)
    assert calls == [5] and out["floor_ns"] == [] and len(out["ns"]) == 3
    assert out["floor_error"] == "RuntimeError: no GPU here"


def test_producers_split_the_calls_over_threads_and_sync_once():
    import threading
    calls, threads, synced = [], set(), []

    def work(k):
        threads.add(threading.get_ident())
        calls.append(k)

    timed = timing.producers(work, lambda: synced.append(sorted(calls)), 8)
    assert timed(21) > 0
    assert sorted(calls) == [2] * 3 + [3] * 5
    assert len(threads) == 8 and synced == [sorted(calls)]


def test_producers_raise_what_a_thread_raised():
    def work(k):
        raise ValueError("enqueue failed")

    with pytest.raises(ValueError, match="enqueue failed"):
        timing.producers(work, lambda: None, 8)(16)


def test_worker_failure_and_crash_cost_one_cell(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMS_BENCH_NOOP_FAIL", "event_query")
    monkeypatch.setenv("STREAMS_BENCH_NOOP_CRASH", "kernel_launch")
    monkeypatch.setenv("STREAMS_BENCH_NOOP_FLOOR_FAIL", "event_record")
    cfg = harness.Config(ops=["stream_query", "event_query", "kernel_launch", "event_record"],
                         contenders=["noop"], quick=True, cache_dir=str(tmp_path),
                         progress=False, timeout=60)
    doc = harness.run_benchmark(cfg)
    res = doc["results"]
    assert res["stream_query"]["noop"]["status"] == "ok"
    assert res["event_query"]["noop"]["status"] == "error"
    assert "asked to fail" in res["event_query"]["noop"]["reason"]
    assert res["kernel_launch"]["noop"]["status"] == "error"
    assert "exit status 3" in res["kernel_launch"]["noop"]["reason"]
    # A fresh worker took over for the next operation; its floor failed,
    # which costs the ratio only.
    record = res["event_record"]["noop"]
    assert record["status"] == "ok" and "floor_ns" not in record and record["ratio"] is None
    assert record["floor_reason"] == "RuntimeError: asked to fail the floor of event_record"
    # The in-process floor came back batch by batch with the cell's own numbers.
    query = res["stream_query"]["noop"]
    assert len(query["floor_ns"]) == len(query["ns"]) == cfg.rounds * cfg.batches
    assert query["ratio"] == query["stats"]["median"] / query["floor_stats"]["median"]
    results.validate_result(doc)


def test_interrupted_run_keeps_what_was_measured(monkeypatch, tmp_path):
    real = harness._measure_op

    def measure(op, *args):
        if op == "event_query":
            raise KeyboardInterrupt
        return real(op, *args)

    monkeypatch.setattr(harness, "_measure_op", measure)
    cfg = harness.Config(ops=["stream_query", "event_query", "event_record"], contenders=["noop"],
                         quick=True, cache_dir=str(tmp_path), progress=False)
    doc = harness.run_benchmark(cfg)
    assert doc["interrupted"] is True
    assert doc["results"]["stream_query"]["noop"]["status"] == "ok"
    assert doc["results"]["event_record"] == {}
    results.validate_result(doc)
    assert "INTERRUPTED, PARTIAL" in render.render_table(doc)


def test_missing_peer_is_reported_not_fatal(monkeypatch, tmp_path):
    real = harness._module_present
    monkeypatch.setattr(harness, "_module_present", lambda name: name != "cupy" and real(name))
    cfg = harness.Config(ops=["stream_query"], contenders=["noop", "cupy"], quick=True,
                         cache_dir=str(tmp_path), progress=False)
    doc = harness.run_benchmark(cfg)
    assert doc["contenders"]["cupy"]["status"] == "missing"
    assert doc["results"]["stream_query"]["cupy"]["status"] == "missing"
    assert doc["results"]["stream_query"]["noop"]["status"] == "ok"
    assert "CuPy: missing" in render.render_table(doc)


# ---- the streams under test, in child Pythons -----------------------------------------

def test_children_import_the_streams_under_test_first():
    import streams
    parts = child_pythonpath().split(os.pathsep)
    assert parts[0] == streams_parent()
    assert os.path.isfile(os.path.join(parts[0], "streams", os.path.basename(streams.__file__)))
    assert benchmarks.CHECKOUT in parts


@pytest.mark.parametrize("built, installed, imported, added", [
    (True, False, False, True), (False, False, False, False), (True, True, False, False),
    (True, False, True, False)])
def test_an_in_place_build_serves_only_where_none_is_installed(tmp_path, monkeypatch, built,
                                                               installed, imported, added):
    # The package is in src/: an in-place build there goes on sys.path when
    # no streams is installed (and none imported yet), never before one.
    import importlib.util
    checkout = tmp_path / "checkout"
    (checkout / "src" / "streams").mkdir(parents=True)
    if built:
        (checkout / "src" / "streams" / "_cudart.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    monkeypatch.setattr(benchmarks, "CHECKOUT", str(checkout))
    monkeypatch.setattr(sys, "path", [str(checkout), "/site-packages"])
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: object() if installed and name == "streams" else None)
    if not imported:
        monkeypatch.delitem(sys.modules, "streams")
    benchmarks._in_place_build_if_none_installed()
    expected = [str(checkout), "/site-packages"]
    assert sys.path == ([str(checkout / "src")] + expected if added else expected)


def test_the_torch_stream_row_is_na_without_torch(monkeypatch):
    """event_record_torch_stream needs torch in the streams (Py) worker;
    without it the cell says so (the set-up before it needs a GPU, this
    part does not)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(timing.NotAvailable, match="PyTorch is not importable in this worker"):
        adapters.StreamsPy()._torch_stream({"_closers": []})
    assert "event_record_torch_stream" in adapters.StreamsPy.stmts
    assert "event_record_torch_stream" in ops.ENQUEUES


def test_one_process_serves_every_member_from_one_worker(tmp_path):
    cfg = harness.Config(ops=["stream_query", "event_record"], contenders=["noop", "noop-2"],
                         quick=True, cache_dir=str(tmp_path), progress=False, timeout=60,
                         one_process=True)
    doc = harness.run_benchmark(cfg)
    assert doc["config"]["one_process"] is True
    pids = set()
    for name in ("noop", "noop-2"):
        assert doc["contenders"][name]["process"] == (
            "shared with " + ("noop-2" if name == "noop" else "noop"))
        for op in cfg.ops:
            cell = doc["results"][op][name]
            assert cell["status"] == "ok", cell
            assert len(cell["ns"]) == len(cell["floor_ns"]) == cfg.rounds * cfg.batches
        pids.add(doc["contenders"][name]["info"]["pid"])
    assert len(pids) == 1      # one process answered for both
    results.validate_result(doc)
    assert "one process" in render.render_table(doc)


def test_one_process_crash_costs_the_cell_then_restarts_once_for_all(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMS_BENCH_NOOP_CRASH", "kernel_launch")
    cfg = harness.Config(ops=["kernel_launch", "stream_query"], contenders=["noop", "noop-2"],
                         quick=True, cache_dir=str(tmp_path), progress=False, timeout=60,
                         one_process=True)
    doc = harness.run_benchmark(cfg)
    res = doc["results"]
    # The first member's crash took the shared process: both cells of the row.
    assert {res["kernel_launch"][n]["status"] for n in ("noop", "noop-2")} == {"error"}
    # One fresh process served both on the next row.
    assert res["stream_query"]["noop"]["status"] == res["stream_query"]["noop-2"]["status"] == "ok"
    results.validate_result(doc)
