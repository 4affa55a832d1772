"""The result document and its rendering, checked without a GPU: the
statistics, the schema, the numbers derived from the raw values, and the
table and chart of the stored synthetic fixture.
"""
import copy

import pytest

from benchmarks import ops, render, results


def test_summarize():
    s = results.summarize([5, 1, 4, 2, 3])
    assert s["median"] == 3 and s["min"] == 1 and s["n"] == 5 and s["mean"] == 3
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)
    assert results.summarize([7])["p10"] == 7
    assert results.summarize([]) is None


def test_example_is_a_valid_synthetic_result(example):
    results.validate_result(example)
    assert example["synthetic"] is True
    assert "SYNTHETIC" in example["note"] and "not a measurement" in example["note"]
    assert example["schema"] == results.SCHEMA
    assert set(example["results"]) == set(ops.OP_BY_NAME)
    statuses = {cell["status"] for row in example["results"].values() for cell in row.values()}
    assert {"ok", "n/a", "missing", "error"} <= statuses


@pytest.mark.parametrize("breakage, complaint", [
    (lambda d: d.pop("schema"), "schema"),
    (lambda d: d["results"]["stream_query"]["cupy"].update(floor_ns=[]), "cupy.floor_ns"),
    (lambda d: d["results"]["stream_query"]["cupy"].update(floor_ns=[1, 0]), "floor_ns"),
    (lambda d: d["results"]["stream_query"]["cupy"].update(floor_reason=3), "floor_reason"),
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
    (lambda d: d["ops"]["event_record_torch_stream"]["targets"]["streams-py"].update(
        of="event_recrod"), "targets"),
    (lambda d: d["ops"]["event_record_torch_stream"]["targets"]["streams-py"].update(
        plus_ns=-1), "targets"),
    (lambda d: d["ops"]["event_record_torch_stream"]["targets"]["streams-py"].pop("plus_ns"),
     "targets"),
])
def test_validate_rejects(example, breakage, complaint):
    breakage(example)
    with pytest.raises(results.ResultError) as exc:
        results.validate_result(example)
    assert complaint in str(exc.value)


def test_validate_rejects_non_objects():
    for doc in ([], "x", None):
        with pytest.raises(results.ResultError):
            results.validate_result(doc)


def test_finalize_recomputes_from_raw_numbers(example):
    doc = copy.deepcopy(example)
    row = doc["results"]["stream_query"]
    row["c"]["ns"] = [90.0, 90.0, 90.0]
    row["streams-py"].update(ns=[120.0, 125.0, 130.0], floor_ns=[100.0, 100.0, 104.0])
    row["streams-cy"].update(ns=[110.0] * 3, floor_ns=[100.0] * 3)
    row["streams-py"]["ratio"] = 99.0               # stale numbers are ignored
    results.finalize(doc)
    py = row["streams-py"]
    assert py["stats"]["median"] == 125.0 and py["floor_stats"]["median"] == 100.0
    assert py["ratio"] == pytest.approx(1.25)      # to its own process's floor
    assert py["ratio_to_c"] == pytest.approx(125 / 90)     # the second reference
    assert py["ratio_stats"]["median"] == pytest.approx(1.25)  # paired batches
    assert py["ratio_stats"]["min"] == pytest.approx(1.2)
    assert py["verdict"] == "pass"
    assert row["streams-cy"]["verdict"] == "miss"   # 1.10 > 1.05
    assert row["c"]["ratio"] is None and row["c"]["ratio_to_c"] is None
    assert {"op": "stream_query", "contender": "streams-cy", "ratio": 1.1,
            "target": 1.05} in doc["summary"]["misses"]
    # Without the C program the ratios to the floor stand.
    doc["results"]["kernel_launch"]["c"] = {"status": "unavailable", "reason": "no gcc"}
    results.finalize(doc)
    launch = doc["results"]["kernel_launch"]["streams-py"]
    assert launch["ratio_to_c"] is None and launch["verdict"] in ("pass", "miss")
    # Without a floor there is nothing to compare: not measured.
    del launch["floor_ns"]
    launch["floor_reason"] = "CudaError: ..."
    results.finalize(doc)
    assert launch["ratio"] is None and launch["verdict"] == "not measured"
    # Nor where streams has no numbers.
    doc["results"]["graph_launch"]["streams-py"] = {"status": "n/a", "reason": "not yet"}
    results.finalize(doc)
    assert doc["results"]["graph_launch"]["streams-py"]["verdict"] == "not measured"


@pytest.mark.parametrize("contender, ratio, verdict", [
    ("streams-py", 0.94, "suspect"),       # below its floor: a measurement problem
    ("streams-py", 0.96, "pass"),
    ("streams-cy", 0.5, "suspect"),
    ("streams-py", 1.3, "miss"),
    ("cupy", 0.5, None),                   # peers may do other work (pools, laziness)
])
def test_a_streams_cell_below_its_floor_is_suspect_never_a_pass(example, contender, ratio,
                                                                 verdict):
    doc = copy.deepcopy(example)
    cell = doc["results"]["event_record"][contender]
    cell.update(ns=[100.0 * ratio] * 4, floor_ns=[100.0] * 4)
    results.finalize(doc)
    assert cell["verdict"] == verdict
    suspects = [(s["op"], s["contender"]) for s in doc["summary"]["suspects"]]
    assert (("event_record", contender) in suspects) == (verdict == "suspect")
    # Also where the operation has no target.
    row = doc["results"]["stream_synchronize"][contender]
    row.update(ns=[100.0 * ratio] * 4, floor_ns=[100.0] * 4)
    results.finalize(doc)
    assert row["verdict"] == ("suspect" if verdict == "suspect" else None)


@pytest.mark.parametrize("extra, verdict", [(60.0, "pass"), (100.0, "pass"), (101.0, "miss")])
def test_a_target_relative_to_another_row(example, extra, verdict):
    """The target of a record on a PyTorch stream: at most 100 ns more than
    streams-py's own event record, whatever the ratio to the floor; shown as
    ok/MISS with the difference in a footnote."""
    doc = copy.deepcopy(example)
    ref = doc["results"]["event_record"]["streams-py"]
    cell = doc["results"]["event_record_torch_stream"]["streams-py"]
    ref.update(ns=[400.0, 410.0, 390.0], floor_ns=[300.0] * 3)
    cell.update(ns=[400.0 + extra, 420.0 + extra, 380.0 + extra], floor_ns=[200.0] * 3)
    results.finalize(doc)
    assert cell["ratio"] == pytest.approx((400 + extra) / 200)     # the floor still counts
    assert cell["target_ref_ns"] == 400.0 and cell["over_ns"] == pytest.approx(extra)
    assert cell["verdict"] == verdict
    misses = [m for m in doc["summary"]["misses"] if m["op"] == "event_record_torch_stream"]
    assert misses == ([{"op": "event_record_torch_stream", "contender": "streams-py",
                        "ratio": round(cell["ratio"], 3), "over_ns": extra,
                        "target": {"of": "event_record", "plus_ns": 100}}]
                      if verdict == "miss" else [])
    text = render.render_table(doc, ops=["event_record", "event_record_torch_stream"])
    row = next(ln for ln in text.splitlines() if ln.startswith("event record on a PyTorch"))
    assert "Py<=event_record+100ns" in row
    assert (" ok[" if verdict == "pass" else " MISS[") in row
    assert (f"streams (Py): {extra:+.0f} ns per call over its event record (400 ns); "
            "the target: at most +100 ns") in text
    # Without the other row (not run, or no numbers) the target is not measured.
    ref.update(status="error", reason="it broke")
    results.finalize(doc)
    assert cell["verdict"] == "not measured" and "over_ns" not in cell


def test_schema_1_documents_load_with_ratios_to_the_c_program(example, tmp_path):
    """Results stored before the in-process floor: their ratio is to the
    separate C program, and a streams cell below it is suspect."""
    import json
    doc = copy.deepcopy(example)
    doc["schema"] = results.SCHEMA_V1
    for row in doc["results"].values():
        for cell in row.values():
            cell.pop("floor_ns", None)
    row = doc["results"]["stream_query"]
    row["c"]["ns"] = [100.0] * 3
    row["streams-py"]["ns"] = [57.0] * 3
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    doc = results.load_result(str(path))
    assert doc["results"]["stream_query"]["streams-py"]["ratio"] == pytest.approx(0.57)
    assert doc["results"]["stream_query"]["streams-py"]["verdict"] == "suspect"
    text = render.render_table(doc)
    assert "ratios are to the separate C program" in text
    assert "57±0% 0.57x SUSPECT" in text


def test_table(example):
    doc = results.finalize(example)
    text = render.render_table(doc)
    assert "SYNTHETIC FIXTURE, NOT A MEASUREMENT" in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("operation"))
    for c in doc["config"]["contenders"]:
        assert doc["contenders"][c]["label"] in header
    for op in ops.OPS:
        assert any(line.startswith(op.label) for line in lines), op.name
    row = next(line for line in lines if line.startswith("event record "))
    cell = doc["results"]["event_record"]["streams-py"]
    assert (f"{cell['stats']['median']:.0f}±" in row
            and f" /{cell['floor_stats']['median']:.0f} {cell['ratio']:.2f}x ok" in row)
    assert "Py<=1.25 Cy<=1.05" in row
    assert " MISS" in text and " ok" in text and " SUSPECT" in text
    assert "numba-cuda: missing" in text
    assert "PyTorch: PyTorch has no host-function API" in text     # an n/a footnote
    assert "cuda.bindings: no in-process floor: RuntimeError" in text
    summ = doc["summary"]
    assert f"targets: {summ['pass']} pass, {summ['miss']} miss" in text
    assert f"; {summ['suspect']} suspect" in text and summ["suspect"] >= 1


def test_table_filters_and_unavailable_c(example):
    doc = copy.deepcopy(example)
    for row in doc["results"].values():
        row["c"] = {"status": "unavailable", "reason": "no C compiler"}
    doc["contenders"]["c"].update(status="unavailable", reason="no C compiler")
    results.finalize(doc)
    text = render.render_table(doc, ops=["stream_query"], contenders=["c", "streams-py"])
    assert "C program: unavailable (no C compiler)" in text
    assert "event record" not in text and "CuPy" not in text
    row = next(line for line in text.splitlines() if line.startswith("stream query"))
    cell = doc["results"]["stream_query"]["streams-py"]
    # The floor does not need the C program.
    assert row.endswith(f"unavail.  {render._fmt_ns(cell['stats']['median'])}±2% "
                        f"/{cell['floor_stats']['median']:.0f} {cell['ratio']:.2f}x MISS")


def test_chart(example, tmp_path):
    pytest.importorskip("matplotlib")
    doc = results.finalize(example)
    path = tmp_path / "chart.png"
    assert render.render_chart(doc, str(path)) == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    small = tmp_path / "small.png"
    render.render_chart(doc, str(small), ops=["stream_query"], contenders=["c", "streams-py"])
    assert small.stat().st_size > 0
    with pytest.raises(ValueError):
        render.render_chart(doc, str(tmp_path / "none.png"), contenders=["c"])


def test_the_readme_table_is_rendered_from_the_document(example):
    """render_markdown: one row per README operation with the C program's
    median, each contender's median and its ratio to its own floor, n/a
    where a contender has no number."""
    doc = copy.deepcopy(example)
    results.finalize(doc)
    text = render.render_markdown(doc)
    lines = text.splitlines()
    assert lines[0].split("|")[1:-1] == [
        f" {'operation':<27} ", " C prog. ", " streams     ", " CuPy        ",
        " PyTorch     ", " cuda.core   "]
    assert len(lines) == 2 + len(render.README_OPS)
    cell = doc["results"]["event_record"]["streams-py"]
    row = next(ln for ln in lines if ln.startswith("| event record "))
    assert f"{cell['stats']['median']:.0f} {cell['ratio']:.2f}x" in row
    c = doc["results"]["event_record"]["c"]["stats"]["median"]
    assert row.split("|")[2].strip() == f"{c:.0f}"
    doc["results"]["event_record"]["cuda-core"].update(status="error", reason="broke")
    row = next(ln for ln in render.render_markdown(doc).splitlines()
               if ln.startswith("| event record "))
    assert row.rstrip(" |").endswith("n/a")
