"""The layer-by-layer probe of status calls (benchmarks/probes/status_breakdown.py),
checked without a GPU: it times only the streams built in this checkout
(its probe reaches into the package's internal .pxd files), it names every
layer its report promises, and the report's summary of a layer is the
median and half the p10-p90 spread of its batches."""
import pytest

from benchmarks.probes import status_breakdown


def test_a_streams_from_elsewhere_is_refused_with_the_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(status_breakdown, "CHECKOUT", str(tmp_path))
    path, why = status_breakdown.build_probe(cache_dir=str(tmp_path / "cache"))
    assert path is None
    assert "is not this checkout's: build it in place" in why
    assert not (tmp_path / "cache").exists()
    assert status_breakdown.main(["--rounds", "1", "--n", "1"]) == 1
    assert "is not this checkout's" in capsys.readouterr().err


def test_every_operation_has_a_python_loop_of_its_own():
    probe_ops = ("stream_query", "event_record", "event_query", "stream_wait_event")
    assert tuple(status_breakdown.PY_BODIES) == probe_ops
    with open(status_breakdown.__file__.replace("status_breakdown.py", "status_probe.pyx")) as f:
        source = f.read()
    assert "OPS = (" + ", ".join(f'"{op}"' for op in probe_ops) + ")" in source


@pytest.mark.parametrize("values, summary", [
    ([5.0], (5.0, 0.0)),
    ([-100.0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1000.0], (5.0, 4.0)),   # the ends are left out
    ([10.0, 10.0, 30.0], (10.0, 10.0)),
])
def test_summary_is_the_median_and_half_the_p10_p90_spread(values, summary):
    assert status_breakdown._summary(values) == summary
