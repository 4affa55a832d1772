"""The Sphinx documentation builds with warnings as errors, as in CI.

Builds docs/ with ``sphinx-build -W -b html`` into a temporary folder, in a
subprocess that imports the same ``streams`` as this interpreter (autodoc
reads the compiled module).  Needs sphinx and furo
(``pip install -r docs/requirements.txt``); no GPU.
"""
import subprocess
import sys

import pytest

from _support import ROOT, env_importing_this_streams

DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    pytest.importorskip("sphinx", reason="sphinx is not installed "
                        "(pip install -r docs/requirements.txt)")
    pytest.importorskip("furo", reason="the furo theme is not installed "
                        "(pip install -r docs/requirements.txt)")
    if not (DOCS / "conf.py").is_file():
        pytest.skip(f"{DOCS} is missing (not a source checkout)")
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html",
           "-d", str(doctrees), str(DOCS), str(out)]
    proc = subprocess.run(cmd, cwd=out, env=env_importing_this_streams(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (
        f"sphinx-build failed: {' '.join(cmd)}\n{proc.stdout[-5000:]}\n{proc.stderr}")
    return out


def test_docs_build(built_docs):
    for page in ("index", "install", "quickstart", "streams-and-events", "graphs", "contributing",
                 "host-callbacks", "memory", "kernels",
                 "interrupts-and-timeouts", "interop", "cython", "benchmarks", "api",
                 "safety", "architecture"):
        assert (built_docs / f"{page}.html").is_file(), page


def test_api_reference_covers_all(built_docs):
    """Every name in streams.__all__ is documented in the API reference."""
    import zlib

    import streams

    # objects.inv: four header lines, then zlib-compressed
    # "name domain:role priority uri dispname" lines.
    data = (built_docs / "objects.inv").read_bytes()
    body = data.split(b"\n", 4)[4]
    documented = {line.split(" ", 1)[0]
                  for line in zlib.decompress(body).decode("utf-8").splitlines() if line}
    missing = [name for name in streams.__all__ if f"streams.{name}" not in documented]
    assert not missing, f"not in docs/api.rst: {missing}"
