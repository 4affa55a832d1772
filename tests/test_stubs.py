"""The hand-written stubs (streams/*.pyi) match the compiled module.

Runs ``python -m mypy.stubtest streams`` in a subprocess, against whichever
``streams`` this interpreter imports (an in-place build or an installed
wheel), with the [tool.mypy] config of pyproject.toml and the allowlist in
.github/stubtest-allowlist.txt.  Needs mypy; no GPU.
"""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWLIST = ROOT / ".github" / "stubtest-allowlist.txt"
CONFIG = ROOT / "pyproject.toml"  # [tool.mypy]


def _stubtest_env_and_cwd(tmp_path):
    """Where to run stubtest so that it sees the same `streams` we import.

    stubtest imports the runtime module and mypy looks the stubs up from the
    current directory and the interpreter's sys.path.  For an in-place build,
    run from the folder holding the package; for an installed package, run
    from an empty folder (mypy refuses to run inside site-packages, and the
    source checkout must not shadow the wheel).
    """
    import streams

    parent = Path(streams.__file__).resolve().parent.parent
    site_dirs = {Path(p).resolve() for p in
                 (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if parent in site_dirs:
        return env, tmp_path
    return env, parent


def test_stubtest(tmp_path):
    pytest.importorskip("mypy.stubtest", reason="mypy is not installed (pip install mypy)")
    if not ALLOWLIST.is_file() or not CONFIG.is_file():
        pytest.skip(f"{ALLOWLIST} or {CONFIG} is missing (not a source checkout)")
    env, cwd = _stubtest_env_and_cwd(tmp_path)
    cmd = [sys.executable, "-m", "mypy.stubtest", "streams",
           "--mypy-config-file", str(CONFIG), "--allowlist", str(ALLOWLIST)]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"stubtest failed (cwd={cwd}): {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")


def test_stubs_are_shipped():
    """py.typed and the .pyi files sit next to the module, as installed."""
    import streams

    pkg = Path(streams.__file__).resolve().parent
    for name in ("py.typed", "__init__.pyi", "_core.pyi"):
        assert (pkg / name).is_file(), f"{name} is missing from {pkg}"


def test_stub_all_matches_runtime():
    """__all__ in __init__.pyi lists exactly the runtime's public API.

    stubtest checks this too; this test says it in one line when mypy is
    not installed.
    """
    import ast

    import streams

    stub = Path(streams.__file__).resolve().parent / "__init__.pyi"
    tree = ast.parse(stub.read_text())
    stub_all = next(
        ast.literal_eval(node.value) for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    assert sorted(stub_all) == sorted(streams.__all__)
