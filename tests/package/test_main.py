"""``python -m streams`` and ``show_config()``: the build report, and the
short launch-overhead measurement (its timing and table checked with
stand-in batches, so without a GPU)."""
import io
import re

import pytest

import streams
from streams import _quick
from streams._info import streams_info

from _support import run_python_args

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}    # also hides a real GPU, where there is one


@pytest.mark.hidden_device
def test_python_m_streams_without_device_exits_1(tmp_path):
    proc = run_python_args(["-m", "streams"], cwd=tmp_path, extra_env=NO_GPU, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cannot run the benchmark: no usable CUDA device" in proc.stderr
    assert "device_count() == 0" in proc.stderr
    assert proc.stdout.startswith("streams ")
    for fact in ("built with Cython", "CUDA runtime (static)", "driver supports CUDA",
                 "devices:"):
        assert fact in proc.stdout


def test_python_m_streams_info_and_version(tmp_path):
    proc = run_python_args(["-m", "streams", "--info"], cwd=tmp_path, extra_env=NO_GPU,
                           timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "CUDA runtime (static)" in proc.stdout and "cannot run" not in proc.stderr
    proc = run_python_args(["-m", "streams", "--version"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"streams {streams.__version__}"


def test_streams_info_reports_build():
    info = streams_info(streams.__version__)
    import Cython
    assert info["version"] == streams.__version__
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?\w*", info["cython"] or ""), info["cython"]
    assert info["runtime_version"] == streams.runtime_version()
    assert info["debug_build"] == streams.debug_build()
    assert Cython.__version__


def test_info_needs_no_package_face():
    """_info imports the extension, never `streams` itself: the face uses it."""
    import ast
    import inspect
    from streams import _info
    tree = ast.parse(inspect.getsource(_info))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name != "streams" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.module != "streams", ast.unparse(node)


# ---- the quick measurement, with stand-ins for the GPU ------------------------------

def _fake_batches(ns_per_call):
    """Batches that report ``ns_per_call[op]`` per call, and count their calls."""
    calls = {op: 0 for op, _, _ in _quick.OPS}

    def batch_of(op):
        def batch(n):
            calls[op] += n
            return ns_per_call[op] * n
        return batch

    return {op: batch_of(op) for op, _, _ in _quick.OPS}, calls


def test_quick_measures_every_operation_with_warmup():
    batches, calls = _fake_batches({op: 100.0 for op, _, _ in _quick.OPS})
    rows = _quick.measure(batches, rounds=5, warmup=2)
    assert [r["op"] for r in rows] == [op for op, _, _ in _quick.OPS]
    for row, (op, label, n) in zip(rows, _quick.OPS):
        assert row["label"] == label and row["calls"] == n
        assert row["streams"] == {"median": 100.0, "spread": 0.0}
        assert row["floor"] is None
        assert calls[op] == 7 * n


def test_quick_table_without_floor_has_the_streams_column_only():
    batches, _ = _fake_batches({op: 250.0 for op, _, _ in _quick.OPS})
    text = _quick.table(_quick.measure(batches, rounds=3), rounds=3)
    header = next(line for line in text.splitlines() if line.startswith("operation"))
    assert header.split() == ["operation", "streams"]
    for _, label, _ in _quick.OPS:
        row = next(line for line in text.splitlines() if line.startswith(label))
        assert row.endswith("250 ±0%")
    assert "over 3 batches" in text


def test_quick_floor_column_alternates_and_gives_ratios():
    batches, _ = _fake_batches({op: 300.0 for op, _, _ in _quick.OPS})
    order = []

    def floor(op, n):
        order.append(op)
        if op == "host_func_round_trip":
            raise NotImplementedError("no C host function here")
        return 200 * n

    rows = _quick.measure(batches, floor=floor, rounds=4, warmup=1)
    assert order.count("stream_query") == 5
    assert order.count("host_func_round_trip") == 1       # not asked again once it failed
    by_op = {r["op"]: r for r in rows}
    assert by_op["stream_query"]["floor"] == {"median": 200.0, "spread": 0.0}
    assert "NotImplementedError: no C host function here" in by_op["host_func_round_trip"]["floor"]
    text = _quick.table(rows, rounds=4)
    header = next(line for line in text.splitlines() if line.startswith("operation"))
    assert "C floor" in header
    row = next(line for line in text.splitlines() if line.startswith("stream query"))
    assert row.split()[-1] == "1.50x"
    assert "C floor, host-func round trip: NotImplementedError" in text


def test_quick_summary_spread():
    s = _quick.summary([100, 110, 90, 120, 80])
    assert s["median"] == 100
    assert s["spread"] == pytest.approx((116 - 84) / 2)
    assert _quick.summary([7]) == {"median": 7, "spread": 0.0}


class _FakeStream:
    """Counts calls; host functions run at once, or never (``lazy``)."""

    def __init__(self, lazy=False):
        self.calls = {"query": 0, "record": 0, "synchronize": 0}
        self.lazy = lazy

    def query(self):
        self.calls["query"] += 1

    def record(self, event):
        self.calls["record"] += 1

    def synchronize(self):
        self.calls["synchronize"] += 1

    def launch_host_func(self, fn, arg):
        if not self.lazy:
            fn(arg)


def test_quick_batches_make_the_calls_and_leave_the_stream_idle():
    s = _FakeStream()
    batches = _quick.streams_batches(s, object())
    assert set(batches) == {op for op, _, _ in _quick.OPS}
    assert batches["stream_query"](7) >= 0
    assert s.calls == {"query": 7, "record": 0, "synchronize": 0}
    batches["event_record"](5)
    assert s.calls["record"] == 5 and s.calls["synchronize"] == 1
    batches["host_func_round_trip"](3)
    assert s.calls["synchronize"] == 1 + 3


def test_quick_round_trip_refuses_callbacks_that_did_not_run():
    batches = _quick.streams_batches(_FakeStream(lazy=True), object())
    with pytest.raises(RuntimeError, match="4 host functions enqueued, but 0 ran"):
        batches["host_func_round_trip"](4)


def test_quick_status_state_line():
    assert _quick.state_line((1512.4, 201.6)) == (
        "stream query (idle): 1512 ns as this process started, 202 ns after a device-wide "
        "synchronize; the table below is measured after it\n\n")


@pytest.mark.gpu
def test_quick_run_on_the_gpu():
    out = io.StringIO()
    floor = _quick.extension_floor()
    assert floor is not None, "this build has no in-process floor"
    assert _quick.run(out=out, floor=floor, rounds=3) == 0
    text = out.getvalue()
    for _, label, _ in _quick.OPS:
        # streams, the floor, and the ratio of the two
        assert re.search(rf"^{re.escape(label)}\s+\d+ ±\d+%\s+\d+ ±\d+%\s+\d+\.\d\dx", text,
                         re.M), text
    assert "C floor: the same CUDA runtime calls from C, in this process" in text


@pytest.mark.gpu
def test_python_m_streams_measures(tmp_path):
    proc = run_python_args(["-m", "streams"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launch overhead, from Python" in proc.stdout
    assert "empty-kernel launch" in proc.stdout
    # Which status state the table describes, and what the first one cost.
    m = re.search(r"stream query \(idle\): (\d+) ns as this process started, (\d+) ns after "
                  r"a device-wide synchronize; the table below is measured after it", proc.stdout)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, proc.stdout


def test_show_config_reports_build_facts():
    import io
    out = io.StringIO()
    streams.show_config(out)
    text = out.getvalue()
    assert text.startswith(f"streams {streams.__version__}")
    v = streams.runtime_version()
    assert f"CUDA runtime (static): {v // 1000}.{v % 1000 // 10} ({v})" in text
    assert "built with Cython:" in text
