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
    row["c"]["ns"] = [100.0, 100.0, 100.0]
    row["streams-py"]["ns"] = [120.0, 125.0, 130.0]
    row["streams-cy"]["ns"] = [110.0] * 3
    row["streams-py"]["ratio_to_c"] = 99.0          # stale numbers are ignored
    results.finalize(doc)
    assert row["streams-py"]["stats"]["median"] == 125.0
    assert row["streams-py"]["ratio_to_c"] == pytest.approx(1.25)
    assert row["streams-py"]["verdict"] == "pass"
    assert row["streams-cy"]["verdict"] == "miss"   # 1.10 > 1.05
    assert row["c"]["ratio_to_c"] is None
    assert {"op": "stream_query", "contender": "streams-cy", "ratio": 1.1,
            "target": 1.05} in doc["summary"]["misses"]
    # No C numbers: nothing to compare, so targets are not measured.
    doc["results"]["kernel_launch"]["c"] = {"status": "unavailable", "reason": "no gcc"}
    results.finalize(doc)
    assert doc["results"]["kernel_launch"]["streams-py"]["verdict"] == "not measured"
    # Nor where streams has no numbers.
    doc["results"]["graph_launch"]["streams-py"] = {"status": "n/a", "reason": "not yet"}
    results.finalize(doc)
    assert doc["results"]["graph_launch"]["streams-py"]["verdict"] == "not measured"


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
    results.finalize(doc)
    text = render.render_table(doc, ops=["stream_query"], contenders=["c", "streams-py"])
    assert "C floor: unavailable (no C compiler)" in text
    assert "event record" not in text and "CuPy" not in text
    row = next(line for line in text.splitlines() if line.startswith("stream query"))
    assert "unavail." in row and "x" not in row.split("unavail.")[1]


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
