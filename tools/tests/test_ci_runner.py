"""ci/run-gpu-tests, the runner of the GPU matrix, and ci/gpu-matrix.yml:
its arguments, and the commands it would run for each row (--print, which
runs nothing).  No GPU, no build: only bash."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "ci" / "run-gpu-tests"
MATRIX = ROOT / "ci" / "gpu-matrix.yml"
FLAVOURS = ("release", "debug-refcounts", "cuda12", "free-threaded")
SANITIZERS = ("none", "memcheck", "racecheck", "synccheck")

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="the runner is a bash script"),
    # An sdist carries tools/tests but not ci/.
    pytest.mark.skipif(not RUNNER.is_file(), reason=f"no {RUNNER} (not a checkout)"),
]


def runner(*args, tmp_path, **env):
    """The runner's exit status and output, in an environment of its own:
    none of its variables set unless ``env`` sets them."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHON", "PYTHONPATH", "CUDA12_HOME", "FT_PREFIX", "FT_BUNDLE",
                          "GPU_TEST_WORKERS", "GPU_TEST_REUSE_BUILD", "SANITIZER_EXTRA", "SANITIZER_BACKTRACE")}
    clean.update(GPU_TEST_LOGS=str(tmp_path / "logs"), CUDA_HOME="/opt/cuda-x", **env)
    result = subprocess.run(["bash", str(RUNNER), *args], capture_output=True, text=True,
                            env=clean, timeout=30)
    return result.returncode, result.stdout, result.stderr


def matrix_rows():
    """The rows of ci/gpu-matrix.yml, read as one flow mapping a line (the
    file's own rule), and checked against a YAML parser where there is one."""
    rows = []
    for line in MATRIX.read_text().splitlines():
        m = re.fullmatch(r"\s*- \{(.*)\}\s*", line)
        if m:
            pairs = (item.split(":", 1) for item in m[1].split(","))
            rows.append({k.strip(): v.strip().strip('"') for k, v in pairs})
    try:
        import yaml
    except ImportError:
        return rows
    assert yaml.safe_load(MATRIX.read_text()) == {"rows": rows}, "one row a line, flow style"
    return rows


def test_help_says_how_to_call_it(tmp_path):
    code, out, _ = runner("--help", tmp_path=tmp_path)
    assert code == 0
    assert "ci/run-gpu-tests [--print] FLAVOUR [SANITIZER] [-- PYTEST_ARGS...]" in out
    for word in FLAVOURS + SANITIZERS + ("GPU_TEST_LOGS", "CUDA12_HOME", "FT_BUNDLE", "86"):
        assert word in out, word


@pytest.mark.parametrize("args, message", [
    ((), "no FLAVOUR"),
    (("debug",), "unknown FLAVOUR 'debug'"),
    (("release", "initcheck"), "unknown SANITIZER 'initcheck'"),
    (("release", "memcheck", "tests/stream/test_event_gpu.py"), "pytest's arguments go after --"),
    (("--print", "cuda13"), "unknown FLAVOUR 'cuda13'"),
])
def test_a_wrong_call_exits_2_and_says_why(tmp_path, args, message):
    code, out, err = runner(*args, tmp_path=tmp_path)
    assert code == 2, (out, err)
    assert message in err and "usage: ci/run-gpu-tests" in err, err
    assert not (tmp_path / "logs").exists()


def test_a_worker_count_must_be_a_count(tmp_path):
    code, _, err = runner("--print", "release", tmp_path=tmp_path, GPU_TEST_WORKERS="four")
    assert code == 2 and "GPU_TEST_WORKERS must be a count" in err
    code, _, err = runner("--print", "release", tmp_path=tmp_path, GPU_TEST_REUSE_BUILD="yes")
    assert code == 2 and "GPU_TEST_REUSE_BUILD must be 0 or 1, not 'yes'" in err


def printed(tmp_path, *args, **env):
    """What --print says for a row: the commands, one a line; it must run
    none of them (no log folder made)."""
    code, out, err = runner("--print", *args, tmp_path=tmp_path, **env)
    assert code == 0, (out, err)
    assert not (tmp_path / "logs").exists(), "--print ran something"
    return out


def test_print_release(tmp_path):
    out = printed(tmp_path, "release", PYTHON="python3.12")
    assert ("+ env CUDA_HOME=/opt/cuda-x python3.12 setup.py build_ext --inplace --force "
            f">{tmp_path}/logs/build.log 2>&1") in out
    assert "assert got == (13, False, True)" in out
    test = out.splitlines()[-1]
    assert test.startswith(f"+ env PYTHONPATH={ROOT}/src python3.12 -m pytest -q "), test
    for part in ("--timeout=120", "-o faulthandler_timeout=100", f"--junitxml={tmp_path}/logs/",
                 "-n 4 --max-worker-restart 40 --timeout-method=thread"):
        assert part in test, part
    assert "compute-sanitizer" not in out and " -m 'not timing" not in test
    assert f"OUT={tmp_path}/logs stackdump_preload" in out


def test_print_reused_build(tmp_path):
    """GPU_TEST_REUSE_BUILD=1: no build (not even the free-threaded
    interpreter's), and the same import check of the flavour."""
    for flavour, want in (("debug-refcounts", "(13, True, True)"),
                          ("free-threaded", "(13, False, False)")):
        out = printed(tmp_path, flavour, GPU_TEST_REUSE_BUILD="1", FT_PREFIX="/opt/ft")
        assert "setup.py" not in out and "free_threaded.sh" not in out, out
        assert "GPU_TEST_REUSE_BUILD=1: no build" in out
        assert f"assert got == {want}" in out
    assert "setup.py build_ext" in printed(tmp_path, "release", GPU_TEST_REUSE_BUILD="0")


def test_print_flavours(tmp_path):
    assert "+ env CUDA_HOME=/opt/cuda-x STREAMS_DEBUG_REFCOUNTS=1 python3 setup.py" in printed(
        tmp_path, "debug-refcounts")
    out = printed(tmp_path, "cuda12", CUDA12_HOME="/opt/cu12")
    assert "+ env CUDA_HOME=/opt/cu12 STREAMS_CUDA_MAJOR=12 python3 setup.py" in out
    assert "assert got == (12, False, True)" in out
    out = printed(tmp_path, "free-threaded", FT_PREFIX="/opt/ft")
    for line in ("+ bash tools/free_threaded.sh build /opt/ft",
                 "+ bash tools/free_threaded.sh deps /opt/ft",
                 "+ env CUDA_HOME=/opt/cuda-x /opt/ft/bin/python3.13t setup.py build_ext",
                 f"+ env -u PYTHON_GIL PYTHONPATH={ROOT}/src /opt/ft/bin/python3.13t -m pytest"):
        assert line in out, line
    assert "assert got == (13, False, False)" in out
    out = printed(tmp_path, "free-threaded", FT_BUNDLE=str(tmp_path / "no-bundle.tar"))
    assert f"bash tools/free_threaded.sh gpu {tmp_path}/no-bundle.tar" in out
    assert "free_threaded.sh build" not in out


@pytest.mark.parametrize("tool", SANITIZERS[1:])
def test_print_sanitizer(tmp_path, tool):
    """The sanitizer prefixes each xdist worker's Python, with the options
    and the deselected markers of the suite's sanitizer runs; with one
    worker, it prefixes pytest and follows its children."""
    out = printed(tmp_path, "release", tool, "--", "tests/stream/test_event_gpu.py")
    options = (f"--tool {tool} --error-exitcode 86 --report-api-errors no --show-backtrace no "
               f"--log-file {tmp_path}/logs/sanitizer-{tool}-%p.log --print-limit 100")
    wrapper = f"{tmp_path}/logs/python-under-{tool}.sh"
    assert re.search(rf"\nexec \S*compute-sanitizer {re.escape(options)} "
                     rf"--target-processes application-only \S*python3 \"\$@\"\n", out), out
    test = out.splitlines()[-1]
    assert "STREAMS_TEST_UNDER_SANITIZER=1" in test
    assert "-m 'not timing and not slow and not concurrent and not hidden_device'" in test
    assert f"--dist load --tx '4*popen//python={wrapper}'" in test
    assert test.endswith(" tests/stream/test_event_gpu.py"), test
    test = printed(tmp_path, "release", tool, GPU_TEST_WORKERS="1").splitlines()[-1]
    assert f"compute-sanitizer {options} --target-processes all python3 -m pytest" in test
    assert "--tx" not in test and " -n " not in test


def test_every_matrix_row_is_a_call_of_the_runner(tmp_path):
    rows = matrix_rows()
    assert len(rows) >= len(FLAVOURS) + len(SANITIZERS) - 1
    assert len({tuple(sorted(r.items())) for r in rows}) == len(rows), "a row twice"
    assert {r["flavour"] for r in rows} == set(FLAVOURS)
    assert {r["sanitizer"] for r in rows} == set(SANITIZERS)
    for row in rows:
        assert set(row) == {"flavour", "python", "sanitizer"}, row
        # The free-threaded rows run tools/free_threaded.sh's 3.13t.
        assert (row["python"] == "3.13t") == (row["flavour"] == "free-threaded"), row
        assert row["sanitizer"] == "none" or row["flavour"] == "release", row
        assert re.fullmatch(r"3\.\d+t?", row["python"]), row
        out = printed(tmp_path, row["flavour"], row["sanitizer"], PYTHON=f"python{row['python']}")
        assert "-m pytest" in out.splitlines()[-1], row


def test_the_workflow_runs_the_matrix_through_the_runner():
    """The workflow reads the matrix file and calls the runner once per row
    on a self-hosted GPU runner (it cannot run here: read, not run)."""
    text = (ROOT / ".github" / "workflows" / "gpu-tests.yml").read_text()
    assert "ci/gpu-matrix.yml" in text and "fromJSON(needs.matrix.outputs.rows)" in text
    assert "runs-on: [self-hosted, linux, gpu]" in text
    assert 'ci/run-gpu-tests "$FLAVOUR" "$SANITIZER"' in text
    assert "pull_request" not in text, "a fork's pull request would run on the GPU machine"


@pytest.mark.parametrize("script", ["gpu_all.sh", "gpu_poll.sh"])
def test_the_whole_check_scripts_parse(script):
    path = ROOT / "tools" / script
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_every_lane_of_the_whole_check_starts_with_sigint_at_its_default():
    """A background job of a script inherits SIGINT ignored: the rows and
    the fuzzers go through the wrapper that restores it."""
    text = (ROOT / "tools" / "gpu_all.sh").read_text()
    assert "signal.signal(signal.SIGINT, signal.SIG_DFL)" in text
    runs = [ln for ln in text.splitlines() if "ci/run-gpu-tests" in ln and not ln.lstrip().startswith("#")]
    fuzzes = [ln for ln in text.splitlines() if "tests/fuzz --seconds" in ln]
    assert runs and fuzzes
    assert all('"${DFL[@]}"' in ln for ln in runs + fuzzes), runs + fuzzes
