"""Fixtures of the benchmark harness's tests, and the import paths they need.

The checkout is appended to sys.path, never put first: where an installed
wheel is under test, the checkout's ``streams/`` has no compiled module and
must not shadow it.  tests/ comes too, for ``_support`` (child Pythons that
import the same streams as this process).
"""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (str(ROOT), str(ROOT / "tests")):
    if path not in sys.path:
        sys.path.append(path)

EXAMPLE = str(ROOT / "benchmarks" / "results" / "example-dry-run.json")


@pytest.fixture
def example_path():
    """The stored synthetic result's path (test modules cannot import this
    conftest by name: with tests/ in the run, "conftest" may be that one)."""
    return EXAMPLE


@pytest.fixture
def example():
    """The stored synthetic result (made-up numbers), as a fresh dict."""
    with open(EXAMPLE) as f:
        return json.load(f)
