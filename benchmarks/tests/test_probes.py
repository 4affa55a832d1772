"""The probes (benchmarks/probes), checked without a GPU: each imports and
answers ``--help`` (its command line, as ``python -m benchmarks.probes.NAME``)
without touching CUDA, and the timing helper they share
(``benchmarks.timing.median_ns``) times the batches it promises."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import timing

ROOT = Path(__file__).resolve().parents[2]
PROBES = sorted(p.stem for p in (ROOT / "benchmarks" / "probes").glob("*.py")
                if p.stem != "__init__")


def test_the_probes_are_found():
    assert {"graph_marks", "graph_user_objects", "host_func_breakdown",
            "host_func_threads_breakdown", "native_host_breakdown", "status_breakdown",
            "quick_timing", "queue_depth", "capture_rules_probe", "probe_callback_backlog",
            "probe_green_kernel_args"} <= set(PROBES)


@pytest.mark.parametrize("name", PROBES)
def test_each_probe_imports_and_answers_help(name, capsys):
    probe = importlib.import_module(f"benchmarks.probes.{name}")
    with pytest.raises(SystemExit) as exc:
        probe.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m benchmarks.probes.{name}"), out[:200]


def test_a_probe_runs_as_a_module_from_the_checkout():
    # -m from the checkout: the command line the docs give.
    out = subprocess.run([sys.executable, "-m", "benchmarks.probes.quick_timing", "--help"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--summarize LOG" in out.stdout


def test_quick_timing_summarizes_rounds_per_interpreter(tmp_path, capsys):
    from benchmarks.probes import quick_timing
    log = tmp_path / "ft.txt"
    log.write_text("== round 1: 3.12.3 GIL\nstream.query                  100 ns\n"
                   "== round 1: 3.13.5 no GIL\nstream.query                  130 ns\n"
                   "== round 2: 3.12.3 GIL\nstream.query                  110 ns\n"
                   "== round 2: 3.13.5 no GIL\nstream.query                  150 ns\n")
    quick_timing.main(["--summarize", str(log)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "median ns per call over the rounds: 3.12.3 GIL | 3.13.5 no GIL"
    assert out[1].split() == ["stream.query", "105", "140", "no", "GIL", "+35", "ns"]


def test_batches_are_timed_after_a_warm_up_with_hooks_around_each():
    calls, events = [0], []

    def fn():
        calls[0] += 1

    xs = timing.batches_ns(timing.calls(fn), 10, 3, warmup=4,
                           before=lambda: events.append("before"),
                           after=lambda k: events.append(k))
    assert calls[0] == 4 + 3 * 10
    assert events == ["before", 4] + ["before", 10] * 3
    assert len(xs) == 3 and xs == sorted(xs) and all(x > 0 for x in xs)


def test_batches_are_per_call_sorted_and_leave_out_the_warm_up():
    # A fake clock: batch i of n calls takes (i + 1) * 100 * n ns.
    seen = []

    def timed(n):
        seen.append(n)
        return (len(seen)) * 100 * n

    assert timing.batches_ns(timed, 5, 3) == [100.0, 200.0, 300.0]
    seen.clear()
    assert timing.batches_ns(timed, 5, 3, warmup=2) == [200.0, 300.0, 400.0]
    assert seen == [2, 5, 5, 5]
    assert timing.median_ns(lambda: None, 100, 3) >= 0


def test_the_collector_is_off_while_timing_and_restored():
    import gc
    states = []
    assert gc.isenabled()
    timing.batches_ns(lambda n: states.append(gc.isenabled()) or 1, 1, 2)
    assert states == [False, False] and gc.isenabled()


def test_semaphore_latency_plays_ping_pong_between_two_processes():
    # The host side needs no GPU: a real second process, every value
    # waited for and answered, the child's exit code printed.
    pytest.importorskip("streams")
    from _support import run_python_args
    out = run_python_args(["-m", "benchmarks.probes.semaphore_latency", "--modes",
                           "semaphore host side", "--trips", "200", "--rounds", "2"],
                          cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "host only; 200 round trips x 2 rounds, median per hop"
    row = lines[2].split()
    assert row[:3] == ["semaphore", "host", "side"] and float(row[3]) > 0, lines
    assert row[-1] == "1.00x" and lines[-1] == "child exit code: 0"


def test_semaphore_latency_refuses_an_unknown_mode(capsys):
    from benchmarks.probes import semaphore_latency
    with pytest.raises(SystemExit) as exc:
        semaphore_latency.main(["--modes", "carrier pigeon"])
    assert exc.value.code == 2
    assert "unknown mode(s) ['carrier pigeon']" in capsys.readouterr().err
