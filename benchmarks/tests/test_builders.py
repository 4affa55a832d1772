"""The compiled contenders, checked without a GPU: the C program and the
Cython contender know the operations of ops.py and compile, and the PTX
comes from the streams under test.  (The floor's loops themselves:
test_floor.py.)
"""
import os
import re
import subprocess

import pytest

from benchmarks import CHECKOUT as ROOT
from benchmarks import builders, ops
from benchmarks.under_test import builtin_ptx


def test_cython_ops_are_known_operations():
    with open(os.path.join(ROOT, "benchmarks", "cy_bench.pyx")) as f:
        src = f.read()
    table = re.search(r"_CODES = \{([^}]*)\}", src).group(1)
    names = re.findall(r'"(\w+)"', table)
    assert names and set(names) <= set(ops.OP_BY_NAME)
    assert set(names) >= {op.name for op in ops.OPS if "streams-cy" in op.targets}


def test_targets_as_promised():
    t = {op.name: op.targets for op in ops.OPS}
    for op in ("stream_query", "event_record", "stream_wait_event", "event_query"):
        assert t[op] == {"streams-py": 1.25, "streams-cy": 1.05}
    assert t["event_create_destroy"] == {"streams-py": 2.0}
    assert t["stream_create_destroy"] == {"streams-py": 2.0}
    assert t["kernel_launch"] == {"streams-py": 1.10}
    assert t["prepared_launch"] == {"streams-py": 1.03}
    assert t["kernel_launch_args16"] == {"streams-py": 1.2}
    assert t["host_func_round_trip"] == {"streams-py": 1.15}
    # A native host function's round trip is the C call's.
    assert t["host_func_native_round_trip"] == {"streams-py": 1.05}
    assert t["graph_launch"] == {"streams-py": 1.05}
    # A PyTorch stream costs Event.record at most 100 ns more.
    assert t["event_record_torch_stream"] == {"streams-py": {"of": "event_record",
                                                             "plus_ns": 100}}
    # A replay with a deadline costs at most 5% more than one without.
    assert t["graph_launch_deadline"] == {"streams-py": {"of": "graph_launch", "times": 1.05}}
    assert t["graph_launch_sync_deadline"] == {"streams-py": {"of": "graph_launch_sync",
                                                              "times": 1.05}}
    # A pipeline step from Python: at most 10% over the same calls from C.
    assert t["pipeline_inference"] == t["pipeline_data_loader"] == {"streams-py": 1.10}
    assert sum(len(v) for v in t.values()) == 4 * 2 + 13
    assert ops.SUSPECT_BELOW == 0.95


def test_builtin_ptx_comes_from_the_package():
    ptx = builtin_ptx()
    assert ".entry streams_empty(" in ptx and ".entry streams_spin(" in ptx
    code = [ln for ln in ptx.splitlines() if ln.strip() and not ln.startswith("//")]
    assert code[0] == ".version 7.0", "lowered for every driver a build supports"
    lit = builders.c_string_literal('a"b\\c\td\n')
    assert lit == '"a\\"b\\\\c\\td\\n"'


def test_c_floor_compiles(tmp_path):
    """Compile and link only: running it needs a GPU."""
    if builders.compiler() is None:
        pytest.skip("no C compiler")
    incs, lib = builders.find_cuda()
    if incs is None:
        pytest.skip(f"no CUDA headers: {lib}")
    exe, why = builders.build_c_floor(str(tmp_path), root=ROOT)
    assert why is None, why
    assert os.path.isfile(exe) and os.access(exe, os.X_OK)
    listed = subprocess.run([exe, "list"], capture_output=True, text=True).stdout.split()
    assert listed == [op.name for op in ops.OPS
                      if op.name not in ops.NO_FLOOR and op.name not in ops.FLOOR_OF]
    header = (tmp_path / "c_floor" / "streams_ptx.h").read_text()
    assert ".entry streams_empty(" in header and ".entry streams_spin(" in header
    log = (tmp_path / "c_floor" / "build.log").read_text()
    assert "bench.c:" not in log, log             # no warnings in our sources
    assert "floor.h:" not in log, log
    # Unchanged inputs: the cached build is reused.
    mtime = os.stat(exe).st_mtime_ns
    assert builders.build_c_floor(str(tmp_path), root=ROOT) == (exe, None)
    assert os.stat(exe).st_mtime_ns == mtime


def test_c_floor_reports_missing_cuda(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    exe, why = builders.build_c_floor(str(tmp_path), root=ROOT)
    assert exe is None and "libcudart_static.a" in why


def test_cython_contender_builds_and_checks(tmp_path):
    pytest.importorskip("Cython")
    if builders.compiler() is None:
        pytest.skip("no C compiler")
    import streams
    path, why = builders.build_cython_bench(str(tmp_path), root=ROOT)
    assert why is None, why
    import importlib.util
    spec = importlib.util.spec_from_file_location(builders.CY_MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert set(mod.OPS) <= set(ops.OP_BY_NAME)
    # Never-initialised objects: no GPU needed to reach streams' own checks.
    s, ev = streams.Stream.__new__(streams.Stream), streams.Event.__new__(streams.Event)
    for op, complaint in (("host_func_enqueue", "no C-level API"),
                          ("kernel_launch", "needs a PreparedLaunch"),
                          ("prepared_launch", "needs a PreparedLaunch"),
                          ("graph_launch", "needs a GraphExec"),
                          ("graph_launch_1000", "needs a GraphExec"),
                          ("pipeline_inference", "no C-level API"),
                          ("stream_wait_stream", "needs the other Stream"),
                          ("kernel_launch_args16", "needs a Kernel")):
        with pytest.raises(ValueError, match=complaint):
            mod.run_batch(op, s, ev, ev, 10)
    # The error raised inside the nogil loop comes back as the exception.
    with pytest.raises(ValueError, match="closed"):
        mod.run_batch("stream_query", s, ev, ev, 10)


# ---- the Cython contender against another build of streams (--baseline) -------------

_OLD_LAYOUT = {
    # The one-extension layout of commit 81d8d78, cut down to what the probe reads.
    "__init__.pxd": "from streams._core cimport Stream, Event, streams_stream_t\n",
    "_core.pxd": ("cdef class Stream:\n    cdef int c_query(self) except -1 nogil\n\n"
                  "cdef class Kernel:\n    cdef void* _func\n\n"
                  "cdef class PreparedLaunch:\n"
                  "    cdef int c_launch(self, Stream stream) except -1 nogil\n"),
}


def test_cython_api_follows_the_layout_of_the_pxd_files(tmp_path):
    import streams
    text, why = builders.cython_api(os.path.dirname(os.path.abspath(streams.__file__)))
    assert why is None
    assert "from streams cimport Event, GraphExec, Kernel, PreparedLaunch, Stream\n" in text
    assert "KERNEL_C_LAUNCH = True" in text and "kernel.c_launch(stream, " in text
    old = tmp_path / "streams"
    old.mkdir()
    for name, src in _OLD_LAYOUT.items():
        (old / name).write_text(src)
    text, why = builders.cython_api(str(old))
    assert why is None
    assert "from streams._core cimport Event, GraphExec, Kernel, PreparedLaunch, Stream\n" in text
    # PreparedLaunch.c_launch is no Kernel.c_launch.
    assert "KERNEL_C_LAUNCH = False" in text and ".c_launch(" not in text
    (old / "_core.pxd").unlink()
    text, why = builders.cython_api(str(old))
    assert text is None and "neither streams/__init__.pxd nor streams/_core.pxd" in why


def _cython_or_skip():
    pytest.importorskip("Cython")
    if builders.compiler() is None:
        pytest.skip("no C compiler")


def test_cython_contender_builds_against_a_given_streams(tmp_path):
    """streams_dir: the streams of that folder, as a child Python imports
    it, into a cache folder of its own (here the streams under test)."""
    _cython_or_skip()
    from benchmarks.under_test import streams_parent
    path, why = builders.build_cython_bench(str(tmp_path), root=ROOT,
                                            streams_dir=streams_parent())
    assert why is None, why
    assert os.path.dirname(path) == str(tmp_path / "cy-baseline")
    api = (tmp_path / "cy-baseline" / builders.CY_API).read_text()
    assert "from streams cimport" in api
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    path, why = builders.build_cython_bench(str(tmp_path), root=ROOT, streams_dir=str(nowhere))
    assert path is None and why.startswith(f"cannot import the streams in {nowhere}")


@pytest.mark.skipif(not os.environ.get("STREAMS_BENCH_BASELINE"),
                    reason="set STREAMS_BENCH_BASELINE to an in-place build of an older "
                           "commit (e.g. 81d8d78)")
def test_cython_contender_builds_against_the_baseline(tmp_path):
    """The same cy_bench.pyx against an older build's .pxd files; the module
    imports with that streams only (its pxd won), and refuses what its
    C-level API lacks.  No GPU needed: never-initialised objects."""
    _cython_or_skip()
    from _support import run_python
    base = os.path.abspath(os.environ["STREAMS_BENCH_BASELINE"])
    path, why = builders.build_cython_bench(str(tmp_path), root=ROOT, streams_dir=base)
    assert why is None, why
    check = f"""
import importlib.util, streams
spec = importlib.util.spec_from_file_location({builders.CY_MODULE!r}, {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
s, ev = streams.Stream.__new__(streams.Stream), streams.Event.__new__(streams.Event)
for op in sorted(mod.NA) + ["stream_query"]:
    try:
        mod.run_batch(op, s, ev, ev, 10)
    except ValueError as exc:
        print(op, exc)
"""
    proc = run_python(check, cwd=base, extra_env={"PYTHONPATH": base}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("stream_query operation on a closed"), lines
    with open(os.path.join(base, "streams", "__init__.pxd")) as f:
        layered = "PreparedLaunch" in f.read()
    if not layered:     # before the module redesign: no Kernel.c_launch
        assert [ln.split()[0] for ln in lines[:-1]] == ["kernel_launch_args16",
                                                        "kernel_launch_args4"]
        assert "this build of streams has no Kernel.c_launch" in lines[0]
        # Built against the old .pxd files: the streams under test is not its streams.
        proc = run_python(check, timeout=120)
        assert proc.returncode != 0
