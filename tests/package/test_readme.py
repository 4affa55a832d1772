"""The README is the front door: what it says holds, and it reads on a
package index page.  Its commands are run as written in a fresh virtual
environment by test_readme_commands_in_a_fresh_venv (CI), its quickstart on a
GPU by tests/package/test_docs_examples.py."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _support import ROOT

README = ROOT / "README.md"
pytestmark = pytest.mark.skipif(not README.is_file(),
                                reason="README.md is missing (not a source checkout)")


def _text():
    return README.read_text(encoding="utf-8")


def _section(title):
    """The lines of the README's ``## title`` section."""
    lines = _text().splitlines()
    start = lines.index(f"## {title}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _commands():
    """(install, check, test) commands, as the README writes them."""
    text = _text()
    install = re.search(r"\*\*Install\*\*[^\n]*\n\n```bash\n(.+?)\n```", text).group(1)
    check = re.search(r"\*\*Check\*\* a machine: `([^`]+)`", text).group(1)
    test = re.search(r"\*\*Test\*\*: `([^`]+)`", text).group(1)
    return install, check, test


def test_no_line_is_longer_than_100_columns():
    long = [(n, len(line)) for n, line in enumerate(_text().splitlines(), 1) if len(line) > 100]
    assert not long, long


def test_the_commands_are_there():
    assert _commands() == ('pip install ".[test]"', "python -m streams", "pytest")


def test_speed_fits_in_12_lines_and_cites_results_that_exist():
    lines = [line for line in _section("Speed") if line.strip()]
    assert len(lines) <= 12, len(lines)
    text = "\n".join(lines)
    for pattern in re.findall(r"`(benchmarks/results/[^`]+)`", text):
        assert list(ROOT.glob(pattern)), pattern
    assert "C: " in text and "ratio" in text


def test_links_work_on_a_package_index_page():
    # Relative links break on a package index page: every link is absolute,
    # into the repository that pyproject.toml names.
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        source = tomllib.load(f)["project"]["urls"]["Source"]
    links = re.findall(r"\]\(([^)]+)\)", _text())
    assert links
    for link in links:
        assert link.startswith(source + "/"), link
        path = link[len(source) + 1:].split("/", 2)[-1]      # after blob/main or tree/main
        assert (ROOT / path).exists(), link


def test_the_quickstart_comes_before_any_detail():
    text = _text()
    order = [text.index(s) for s in ("**Why streams", "**Needs**", "**Install**",
                                     "**Quickstart**", "**Check**", "**Test**", "## Speed")]
    assert order == sorted(order)


# ---- the README's commands, run as written ----------------------------------------------------

# CI (.ci/run) passes the wheel it built from this checkout: the install
# command then installs it instead of building the same again (pip would).
WHEEL = os.environ.get("STREAMS_TEST_WHEEL")


@pytest.mark.skipif(not WHEEL and os.environ.get("STREAMS_TEST_README_BUILD") != "1",
                    reason="runs the README's commands in a fresh virtual environment: give it "
                           "a built wheel (STREAMS_TEST_WHEEL=path) or let it build "
                           "(STREAMS_TEST_README_BUILD=1); .ci/run does the first")
@pytest.mark.skipif(os.environ.get("STREAMS_TEST_README_INNER") == "1",
                    reason="already inside the README's test command")
def test_readme_commands_in_a_fresh_venv(tmp_path):
    """Install as the README says in a new virtual environment, then run its
    check and test commands in the checkout: the source folder must not
    shadow the installed package (it did, before the src layout)."""
    install, check, test = _commands()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bindir = venv / "bin"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "STREAMS_TEST_WHEEL")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["STREAMS_TEST_README_INNER"] = "1"
    if WHEEL:
        # The same command with the wheel for ".": same extras, no build.
        install = install.replace('"."', f'"{Path(WHEEL).resolve()}"').replace(
            '".[', f'"{Path(WHEEL).resolve()}[')
    started = time.monotonic()

    def run(command, timeout):
        proc = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)
        print(f"$ {command}  ({time.monotonic() - started:.0f} s so far)\n{proc.stdout[-3000:]}"
              f"\n{proc.stderr[-3000:]}")
        return proc

    proc = run(install, timeout=1500)
    assert proc.returncode == 0, f"{install} failed"
    # The package that venv imports is the installed one, never the checkout's.
    where = run(f'{bindir}/python -c "import streams; print(streams.__file__)"', timeout=60)
    assert where.returncode == 0 and str(venv) in where.stdout, where.stdout
    proc = run(check, timeout=300)
    assert "ModuleNotFoundError" not in proc.stderr and "ImportError" not in proc.stderr
    assert proc.stdout.startswith("streams 0.1.0"), proc.stdout
    import streams
    if streams.device_count():
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1 and "no usable CUDA device" in proc.stderr, proc.stderr
    proc = run(test, timeout=1800)
    assert proc.returncode == 0, f"{test} failed"
    assert re.search(r"\d+ passed", proc.stdout) and " failed" not in proc.stdout.splitlines()[-1]
