"""Every function of the runtime's stream-management chapter is reachable."""
import os
import re

import pytest

import streams

from _support import ROOT, module_source
from runtime_coverage import RUNTIME_GRAPH_FUNCTIONS, RUNTIME_STREAM_FUNCTIONS

SOURCES = os.path.join(ROOT, "src", "streams")


def _resolve(path):
    obj = streams
    parts = path.split(".")
    if parts[0] == "streams":
        parts = parts[1:]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def test_all_26_functions_listed_once():
    names = [row[0] for row in RUNTIME_STREAM_FUNCTIONS]
    assert len(names) == 26 == len(set(names))
    reference = os.path.join(ROOT, "..", "shared", "reference",
                             "cudart-6.5-stream-management.zh.txt")
    if os.path.exists(reference):
        text = open(reference, encoding="utf-8").read()
        documented = set(re.findall(r"cudaError_t (cuda\w+) \(", text))
        assert documented == set(names)


ALL_FUNCTIONS = RUNTIME_STREAM_FUNCTIONS + RUNTIME_GRAPH_FUNCTIONS
GRAPH_SECTION = "Graph nodes and updates"


def test_graph_functions_listed_once():
    names = [row[0] for row in RUNTIME_GRAPH_FUNCTIONS]
    assert names == sorted(set(names))


@pytest.mark.parametrize("name, called, api, note", ALL_FUNCTIONS)
def test_api_exists(name, called, api, note):
    if api.startswith("Stream.c_"):
        # C-level methods are visible to cimporters only: check the .pxd.
        pxd = open(os.path.join(SOURCES, "_stream.pxd")).read()
        assert f"cdef int {api.split('.')[1]}(" in pxd
    else:
        assert _resolve(api) is not None


@pytest.mark.skipif(not os.path.isdir(SOURCES) or not os.path.exists(
    os.path.join(SOURCES, "_cudart.pyx")), reason="needs the source tree")
@pytest.mark.parametrize("name, called, api, note", ALL_FUNCTIONS)
def test_function_is_called_in_sources(name, called, api, note):
    # Only the call layer calls CUDA (its .pyx and the parts it includes).
    text = module_source("_cudart")
    # a call, through the compat.h spelling where CUDA 12 and 13 differ
    assert re.search(rf"\b(streams_)?{called}\(", text), called


def test_docs_table_matches():
    path = os.path.join(ROOT, "docs", "runtime-coverage.rst")
    if not os.path.exists(path):
        pytest.skip("docs not present")
    text = open(path).read()
    streams_part, _, graph_part = text.partition(GRAPH_SECTION)
    for part, table in ((streams_part, RUNTIME_STREAM_FUNCTIONS),
                        (graph_part, RUNTIME_GRAPH_FUNCTIONS)):
        rows = re.findall(r"\* - ``(cuda\w+)``\n\s+- ``([\w.]+)``", part)
        assert rows == [(r[0], r[2]) for r in table]
