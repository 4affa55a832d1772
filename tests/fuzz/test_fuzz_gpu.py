"""The fuzzer of the object graph (machine.py), checked and run.

The CPU tests check the machine's parts without a GPU: its rules and
strategies, its teardown, its models (NodeChangeModel, chain_order), its
hang watchdog and its command line (cli.py).  test_fuzz_object_graph runs
the fuzzer for STREAMS_FUZZ_SECONDS in a child Python, as ``python
tests/fuzz`` runs it (__main__.py): a crash fails the test, not pytest."""
import collections
import importlib.util
import random
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis")

import machine as fuzz_machine  # noqa: E402
from cli import cli_env  # noqa: E402
from machine import (  # noqa: E402
    BUDGET, EXAMPLES_PER_ROUND, STATS, GpuObjectGraph, HolderM, NodeChangeModel, chain_order,
    fuzz_settings)

from _support import run_python_args  # noqa: E402

import streams  # noqa: E402

# The package: ``python tests/fuzz`` runs its __main__.py.
HERE = Path(__file__).resolve().parent


def test_fuzzer_is_well_formed():
    """The state machine builds without a GPU: its rules, their strategies,
    and the TestCase hypothesis makes of it."""
    rules = GpuObjectGraph.setup_state().rules
    names = {r.function.__name__ for r in rules}
    for expected in ("new_stream", "close_buffer_on_closed_stream", "capture_graph",
                     "thread_captures_while_main_enqueues", "cycle_through_foreign_stream",
                     "new_object", "edge_launch_args", "raw_stream_ints", "foreign_node",
                     "await_work", "update_exec_node", "native_host_func", "adopt_kernel",
                     "compile_module", "new_green_stream", "change_captured_kernel_args",
                     "long_capture", "capture_info_node_keeps", "capture_info_node",
                     "kernel_node_changes", "foreign_producer_capturing",
                     "close_with_user_inside", "green_close_under_work", "host_released_wait",
                     "semaphore_handoff", "deadline_round"):
        assert expected in names, expected
    for r in rules:
        for strategy in r.arguments_strategies.values():
            strategy.validate()
    assert issubclass(GpuObjectGraph.TestCase, __import__("unittest").TestCase)
    assert fuzz_settings().max_examples == EXAMPLES_PER_ROUND
    for cls in ("Stream", "Event", "DeviceBuffer", "PinnedBuffer", "ManagedBuffer", "MemoryPool",
                "Graph", "GraphExec", "Module", "Kernel", "PreparedLaunch", "GraphNode",
                "ConditionHandle", "GraphAllocation", "StreamPool", "EventPool"):
        assert hasattr(streams, cls), cls


def test_teardown_checks_with_no_model_object_left(monkeypatch):
    """teardown() checks what was given back only once nothing of the model
    refers to a library object: a holder's model keeps its GraphNodes, a
    node its Graph, and the graph its kernel nodes' buffers in use (a last
    holder left bound by the teardown's loop reads as "live_buffers 16 ->
    17").  CPU only: stand-ins for the graph and its node."""
    import weakref

    class FakeGraph:
        def close(self):
            pass

    class FakeNode:     # as a streams.GraphNode keeps its graph
        def __init__(self, graph):
            self.graph = graph

    machine = GpuObjectGraph.__new__(GpuObjectGraph)
    for name in ("streams", "bufs", "zombies", "events", "mods", "execs", "preps", "pools",
                 "graveyard", "dropped_mods", "old_nodes", "defaults", "adopted", "compiled", "natives"):
        setattr(machine, name, [])
    machine.rng = random.Random(25)
    graph = FakeGraph()
    h = HolderM(graph, "graph")
    h.nodes.append((FakeNode(graph), 0, "fill"))
    machine.graphs = [h]
    alive_at_check = []
    machine.check_given_back = lambda: alive_at_check.append(graph_ref() is not None)
    graph_ref = weakref.ref(graph)
    del graph, h
    monkeypatch.setattr(streams, "synchronize_device", lambda: None)
    monkeypatch.setitem(STATS, "steps", 0)
    monkeypatch.setattr(fuzz_machine, "EXPECTED", collections.Counter())
    machine.teardown()
    assert alive_at_check == [False], "the model still held the graph when teardown checked"


def test_node_change_model_follows_the_docs():
    """NodeChangeModel, which kernel_node_changes checks the GPU against,
    says what docs/graphs.rst says for the audit's three sequences: after
    set_kernel_node, after update(graph2) and after the graph's own
    set_args, set_kernel_node_args changes only what it names, on the
    executable's kernel and arguments.  CPU only (numpy)."""
    np_ = pytest.importorskip("numpy")

    def fill(buf, value):
        return {"kind": "fill", "buf": buf, "value": value, "count": 8, "grid": 1, "block": 8}

    def run(model):
        words = [np_.zeros(8, dtype=np_.uint32) for _ in range(2)]
        model.launch(words)
        return int(words[0][0]), int(words[1][0])

    a, b = 0, 1
    m = NodeChangeModel({"g": [fill(a, 5)]})
    m.instantiate("g")
    m.set_kernel_node(0, fill(b, 7))
    m.set_kernel_node_args(0, {1: 9})
    assert run(m) == (0, 9)

    m = NodeChangeModel({"g1": [fill(a, 5)], "g2": [fill(b, 5)]})
    m.instantiate("g1")
    m.update("g2")
    m.set_kernel_node_args(0, {1: 9})
    assert run(m) == (0, 9)

    m = NodeChangeModel({"g": [fill(a, 5)]})
    m.instantiate("g")
    m.set_args("g", 0, {0: b})
    m.set_kernel_node_args(0, {1: 9})
    assert run(m) == (9, 0)
    m.instantiate("g")              # a later instantiation takes the graph's change
    assert run(m) == (0, 5)
    m.update("g")                   # and so does an update
    assert run(m) == (0, 5)

    # An increment on part of the words (its count, whatever its grid: the
    # built-in kernels loop over the grid's stride), the count changed on
    # it, and a kernel change that keeps the buffer the executable had.
    inc = {"kind": "inc", "buf": a, "value": 0, "count": 6, "grid": 1, "block": 2}
    m = NodeChangeModel({"g": [inc]})
    m.instantiate("g")
    words = [np_.zeros(8, dtype=np_.uint32) for _ in range(2)]
    m.launch(words)
    assert words[0].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    m.set_kernel_node_args(0, {1: 2})
    m.launch(words)
    assert words[0].tolist() == [2, 2, 1, 1, 1, 1, 0, 0]
    m.set_kernel_node_args(0, {0: b})
    m.launch(words)
    assert words[1].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    assert m.graphs["g"][0] == inc, "an executable's change moved the graph's node"


def test_chain_order_follows_dependencies():
    """chain_order gives a captured chain's nodes in capture order whatever
    order the graph lists them in, and refuses what is not a chain.  CPU
    only: stand-ins for GraphNode (compared by identity)."""
    class Node:
        def __init__(self, *deps):
            self.dependencies = list(deps)

    n0 = Node()
    n1 = Node(n0)
    n2 = Node(n1)
    assert chain_order([n2, n0, n1]) == [n0, n1, n2]
    assert chain_order([]) == []
    with pytest.raises(AssertionError, match="not a chain"):
        chain_order([n2, n1])


def test_hang_watchdog_turns_a_hang_into_a_failure():
    """A block that ends in time cancels the watchdog (the process goes on
    past the bound); one that hangs holding the GIL (a C call that keeps
    it, as an enqueue that blocks in the driver would) ends the process
    with status 1 and every thread's stack, after the line that names the
    round's seed.  CPU only."""
    code = textwrap.dedent(f"""
        import ctypes, sys, time
        sys.path[:0] = [{str(HERE)!r}, {str(HERE.parent)!r}]
        import machine as f
        f.ROUND["seed"] = 4242
        with f.hang_watchdog(0.5, "a quick block"):
            pass
        time.sleep(1.0)
        print("past the first bound", flush=True)
        with f.hang_watchdog(0.5, "a hung block"):
            ctypes.PyDLL(None).sleep(30)
        print("not reached", flush=True)
    """)
    t0 = time.monotonic()
    result = run_python_args(["-c", code], timeout=60)
    assert time.monotonic() - t0 < 25, "the watchdog did not end the hang"
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "past the first bound" in result.stdout and "not reached" not in result.stdout
    assert "STREAMS_FUZZ_SEED=4242" in result.stderr, result.stderr[-2000:]
    assert "Timeout (0:00:00.500000)!" in result.stderr, result.stderr[-2000:]
    assert "<string>" in result.stderr, result.stderr[-2000:]


def test_fuzzer_child_reports_and_seeds(tmp_path):
    """With no time budget the child runs nothing, and still says so; its
    settings come from the variables (the budget) and from its command
    line (the seed and the report) together."""
    report = tmp_path / "report.txt"
    result = run_python_args([str(HERE), "--seed", "1234",
                              "--report", str(report)], timeout=120, extra_env={
        "STREAMS_FUZZ_SECONDS": "0", "STREAMS_FUZZ_SEED": "99"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seed 1234" in result.stdout
    assert report.read_text().startswith("fuzz: 0 examples, 0 steps in ")


def test_command_line_sets_the_variables(capsys):
    """Each option of the fuzzer's command line sets the variable that
    configures the same knob, and only what it names (the variables of the
    environment keep the rest); --replay is a seed without shrinking.  CPU
    only."""
    assert cli_env([]) == {}
    assert cli_env(["--seconds", "90", "--seed", "7", "--trace"]) == {
        "STREAMS_FUZZ_SECONDS": "90", "STREAMS_FUZZ_SEED": "7", "STREAMS_FUZZ_TRACE": "1"}
    assert cli_env(["--replay", "3442", "--trace", "2", "--report", "r.txt"]) == {
        "STREAMS_FUZZ_SEED": "3442", "STREAMS_FUZZ_SHRINK_SECONDS": "0",
        "STREAMS_FUZZ_TRACE": "2", "STREAMS_FUZZ_REPORT": "r.txt"}
    assert cli_env(["--device-memory", "--torch", "--loose-names", "--seconds", "0.5"]) == {
        "STREAMS_FUZZ_DEVICE_MEMORY": "1", "STREAMS_FUZZ_TORCH": "1",
        "STREAMS_FUZZ_STRICT_NAMES": "0", "STREAMS_FUZZ_SECONDS": "0.5"}
    for bad in (["--trace", "3"], ["--seed", "1", "--replay", "2"], ["--seconds", "x"]):
        with pytest.raises(SystemExit) as exc:
            cli_env(bad)
        assert exc.value.code == 2, bad
    assert "usage: python tests/fuzz " in capsys.readouterr().err


# The run is longer than the suite's 120 s per test when asked to be
# (pytest-timeout's marker; without the plugin there is nothing to extend).
_long_timeout = (pytest.mark.timeout(int(BUDGET) + 400)
                 if importlib.util.find_spec("pytest_timeout") else (lambda f: f))


@pytest.mark.gpu
# slow: sanitizer runs deselect it, as their pytest workers do not follow
# its child (run the fuzzer's command itself under memcheck: docs/contributing.rst).
@pytest.mark.slow
@_long_timeout
def test_fuzz_object_graph():
    """The fuzzer, for STREAMS_FUZZ_SECONDS, in a child Python (``python tests/fuzz``)."""
    pytest.importorskip("numpy")
    try:
        result = run_python_args([str(HERE)], timeout=BUDGET + 300,
                                 extra_env={"PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"the fuzzer hung\n{out[-6000:]}\n{err[-6000:]}")
    print(result.stdout[-3000:])
    assert result.returncode == 0, (
        f"the fuzzer failed (exit {result.returncode}):\n{result.stdout[-12000:]}\n"
        f"{result.stderr[-8000:]}")
    summary = [line for line in result.stdout.splitlines() if " examples, " in line]
    assert summary and not summary[-1].startswith("fuzz: 0 examples"), result.stdout[-3000:]
