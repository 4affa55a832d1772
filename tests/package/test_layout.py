"""The package's layout holds: one owner of the CUDA runtime, imports that
point one way and every way up named in docs/architecture.rst, modules cut
into the parts they are pinned to, private hooks in their _testing parts,
library-made classes that refuse direct construction, and the tests in one
folder per concept.  No GPU needed."""
import os
import re
import shutil
import subprocess

import pytest

import streams
from _support import ROOT, module_source

SOURCES = os.path.join(ROOT, "src", "streams")
# From the primitive to the features built on it.
LAYERS = ["cudart", "_platform", "_cudart", "_nvtx", "_handle", "_args", "_device", "_foreign",
          "_stream", "_hostcall", "_asyncio", "_memory", "_launch", "_graph", "_green", "_semaphore",
          "_deadline"]
_IMPORT = re.compile(r"^(?:from streams\.(\w+) c?import|cimport streams\.(\w+)|"
                     r"from streams import (\w+))", re.M)


def _top_level_imports(path):
    # A module's .pyx with its parts (their top-level imports are its own).
    if path.endswith(".pyx"):
        text = module_source(os.path.basename(path)[:-4])
    else:
        text = open(path).read()
    found = set()
    for m in _IMPORT.finditer(text):
        name = next(g for g in m.groups() if g)
        if name in LAYERS:
            found.add(name)
    return found


@pytest.mark.skipif(not os.path.isfile(os.path.join(SOURCES, "_cudart.pyx")),
                    reason="needs the source tree")
@pytest.mark.parametrize("module", [m for m in LAYERS if not m.startswith("cudart")])
def test_imports_point_from_the_primitive_to_the_features(module):
    """A module imports only layers below it at top level; a later module
    is reached by a late import inside a function (a cold path)."""
    level = LAYERS.index(module)
    for suffix in (".pyx", ".pxd"):
        path = os.path.join(SOURCES, module + suffix)
        if not os.path.isfile(path):
            continue
        for name in _top_level_imports(path):
            assert LAYERS.index(name) < level, f"{module}{suffix} imports {name}, a later layer"


@pytest.mark.skipif(not os.path.isfile(os.path.join(SOURCES, "_cudart.pyx")),
                    reason="needs the source tree")
def test_only_the_call_layer_declares_calls_into_cuda():
    """cudart functions are called in _cudart.pyx (and its parts) alone: any
    other module that cimports the raw declarations uses them for types and
    constants."""
    call = re.compile(r"\bcuda[A-Z]\w*\(")
    for name in os.listdir(SOURCES):
        if name.endswith(".pyx") and name != "_cudart.pyx":
            calls = call.findall(module_source(name[:-4]))
            assert not calls, f"{name} calls CUDA directly: {sorted(set(calls))}"


_EXTERN = re.compile(r'^\s*cdef extern from "([^"]+)"', re.M)
_CIMPORT = re.compile(r"^\s*(?:from streams\.(\w+) cimport|cimport streams\.(\w+))", re.M)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
INCLUDE = os.path.join(ROOT, "include")
PRIVATE = os.path.join(ROOT, "src")
needs_sources = pytest.mark.skipif(not os.path.isdir(PRIVATE), reason="needs the source tree")


def _cimporter_headers():
    """The headers a project that cimports streams compiles: those named by
    the .pxd files streams/__init__.pxd reaches, and what they include."""
    seen, todo, headers = set(), ["__init__"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = open(os.path.join(SOURCES, name + ".pxd")).read()
        headers.update(_EXTERN.findall(text))
        todo += [next(g for g in m.groups() if g) for m in _CIMPORT.finditer(text)]
    todo = sorted(headers)
    while todo:
        path = os.path.join(INCLUDE, todo.pop())
        for inc in _INCLUDE.findall(open(path).read()):
            if inc not in headers:
                headers.add(inc)
                todo.append(inc)
    return headers


@needs_sources
def test_the_shipped_headers_are_exactly_what_cimporters_compile():
    """include/streams/ (what get_include() ships) holds the closure of
    streams/__init__.pxd, nothing more: the private headers (static state,
    Python.h, CUDA) are in src/."""
    shipped = {"streams/" + n for n in os.listdir(os.path.join(INCLUDE, "streams"))}
    assert shipped == _cimporter_headers()
    assert not [n for n in os.listdir(INCLUDE) if n != "streams"]


def _sources_naming(pattern):
    """The source files (package, private C, benchmarks) whose text matches."""
    found = []
    for top in ("src", "include", "benchmarks", "tests"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("build", "__pycache__", "_cimport_build")]
            for name in files:
                if name.endswith((".pyx", ".pxd", ".pxi", ".h", ".c")) and not (
                        folder == SOURCES and name.endswith(".c")):   # Cython's output
                    path = os.path.join(folder, name)
                    if re.search(pattern, open(path, errors="replace").read()):
                        found.append(os.path.relpath(path, ROOT))
    return sorted(found)


@needs_sources
def test_only_the_call_layer_includes_the_shim():
    """src/cudart/ keeps its state `static`: one translation unit
    (streams/_cudart.pyx and the parts it includes) includes it, or a second
    copy of the guard and the queues would silently exist.  The floor, which
    calls the same static cudart, is one of those parts."""
    assert _sources_naming(r'"cudart/\w+\.h"') == [
        "src/cudart/shim.h", "src/streams/_cudart.pyx", "src/streams/_cudart/cleanup.pxi"]
    assert _sources_naming(r'include "_cudart/floor\.pxi"') == ["src/streams/_cudart.pyx"]
    assert _sources_naming(r'extern from "floor\.h"') == ["src/streams/_cudart/floor.pxi"]


@needs_sources
def test_only_the_nvtx_module_includes_nvtx():
    """NVTX3 keeps its function table in each shared object that includes
    it: src/nvtx.h, the one includer of the NVTX3 headers, is included by
    streams/_nvtx.pyx alone."""
    assert _sources_naming(r'"nvtx\.h"') == ["src/streams/_nvtx.pyx"]
    assert _sources_naming(r'nvtx3/') == ["src/nvtx.h"]


# The parts each module includes (src/streams/<module>/<part>.pxi), in the
# order it includes them; a module not listed is one file.  _testing: the
# private hooks of the tests, last.  docs/architecture.rst, "Parts of a
# module", says when a concept gets a part.
PARTS = {
    "_cudart": ["machinery", "device", "stream", "event", "execution", "memory", "allocator",
                "peer", "graph", "library", "green", "kernel_nodes", "adopted", "cleanup",
                "floor", "_testing"],
    "_stream": ["tail", "pools", "_testing"],
    "_hostcall": ["_testing"],
    "_asyncio": ["_testing"],
    "_launch": ["_testing"],
    "_graph": ["capture", "kernel_nodes", "data", "_testing"],
    "_deadline": ["_testing"],
}
_INCLUDE_PART = re.compile(r'^\s*include\s+"([^"]+)"', re.M)


def _modules():
    return sorted(n[:-4] for n in os.listdir(SOURCES) if n.endswith(".pyx"))


@needs_sources
def test_each_module_includes_the_parts_it_is_pinned_to():
    """A module includes its parts from the folder named after it, in the
    order PARTS gives, its _testing part last; a part includes nothing."""
    for module in _modules():
        text = open(os.path.join(SOURCES, module + ".pyx")).read()
        wanted = [f"{module}/{part}.pxi" for part in PARTS.get(module, [])]
        assert _INCLUDE_PART.findall(text) == wanted, module
    for folder, _, files in os.walk(SOURCES):
        for name in files:
            if name.endswith(".pxi"):
                text = open(os.path.join(folder, name)).read()
                assert not _INCLUDE_PART.findall(text), os.path.join(folder, name)


@needs_sources
def test_each_part_is_included_by_exactly_one_module():
    """Every .pxi of the package is a part of one module: no stray part, no
    part shared by two modules (each would compile its own copy)."""
    included = {}
    for module in _modules():
        text = open(os.path.join(SOURCES, module + ".pyx")).read()
        for part in _INCLUDE_PART.findall(text):
            included.setdefault(os.path.normpath(part), []).append(module)
    parts = {os.path.relpath(os.path.join(folder, name), SOURCES)
             for folder, _, files in os.walk(SOURCES) for name in files
             if name.endswith(".pxi")}
    assert parts == set(included), "parts no module includes, or includes of no part"
    shared = {part: by for part, by in included.items() if len(by) != 1}
    assert not shared, shared


_DEF = re.compile(r"^def (_[A-Za-z0-9]\w*)\(", re.M)


def _code(text):
    # The text without comments: a hook named in a comment is not used.
    return re.sub(r"#[^\n]*", "", text)


def _package_code(skip_testing_parts):
    """The code of the package that may use a private function: its
    modules, their parts and its Python files, less the stubs, streams.
    testing (the public face of hooks) and, if asked, the _testing parts."""
    texts = []
    for folder, dirs, files in os.walk(SOURCES):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".pyx", ".pxi", ".py")) or name == "testing.py":
                continue
            if skip_testing_parts and name == "_testing.pxi":
                continue
            texts.append(_code(open(os.path.join(folder, name)).read()))
    return "\n".join(texts)


@needs_sources
def test_private_hooks_live_only_in_testing_parts():
    """A module-level `def _name` that no other code of the package uses (a
    hook of the tests, the probes or streams.testing) is in its module's
    _testing.pxi; one there is used by nothing else."""
    code = _package_code(skip_testing_parts=True)
    def used(name):
        uses = re.findall(rf"(?<!\w)(?:def )?{name}\b", code)
        return any(not u.startswith("def ") for u in uses)
    for folder, _, files in os.walk(SOURCES):
        for name in files:
            if not name.endswith((".pyx", ".pxi")):
                continue
            path = os.path.join(folder, name)
            for hook in _DEF.findall(open(path).read()):
                if name == "_testing.pxi":
                    assert not used(hook), f"{hook} in {path} is used by the package"
                else:
                    assert used(hook), (f"{hook} in {path} is used only by tests or probes: "
                                        "move it to the module's _testing.pxi")


# Ways up the layers (docs/architecture.rst, "How later modules are
# reached"): _later(module, name), an import of a later module inside a
# function, a registered set_* function.
_LATER = re.compile(r'_later\("(\w+)", "(\w+)"\)')
_LATE_IMPORT = re.compile(r"^[ \t]+from streams\.(\w+) import ([\w, ]+)$", re.M)
_REGISTERED = re.compile(r"^(?:\w+\.)?(set_\w+)\(", re.M)


def _upward_routes():
    routes = set()
    for module in _modules():
        text = _code(module_source(module))
        routes |= {f"{m}.{n}" for m, n in _LATER.findall(text)}
        for m, names in _LATE_IMPORT.findall(text):
            if m in LAYERS and module in LAYERS and LAYERS.index(m) > LAYERS.index(module):
                routes |= {f"{m}.{n.strip()}" for n in names.split(",")}
        routes |= set(_REGISTERED.findall(text))
    return routes


@needs_sources
def test_every_upward_route_is_named_in_the_architecture():
    """docs/architecture.rst is the map of the ways an early module reaches a
    later one: each _later target, late import of a later module and
    registered set_* function is named there, as ``module.name`` or
    ``set_name``."""
    doc = os.path.join(ROOT, "docs", "architecture.rst")
    if not os.path.isfile(doc):
        pytest.skip("needs docs/")
    text = open(doc).read()
    section = text.split("How later modules are reached", 1)[1].split("\nThe resource pattern")[0]
    routes = _upward_routes()
    assert {"_asyncio.wait_async", "_green._sm_resource", "set_dispatcher"} <= routes, routes
    missing = sorted(r for r in routes if f"``{r}``" not in section)
    assert not missing, f"not named in docs/architecture.rst, How later modules are reached: {missing}"


@needs_sources
def test_every_extension_is_built_layered_and_checked():
    """One list of extensions: setup.py builds them, LAYERS orders them,
    tools/build/check_wheel.py expects them, each from a .pyx."""
    import ast
    import importlib.util
    setup = open(os.path.join(ROOT, "setup.py")).read()
    built = ast.literal_eval(re.search(r"^MODULES = (\[.*?\])", setup, re.M | re.S).group(1))
    spec = importlib.util.spec_from_file_location("check_wheel_layout",
                                                  os.path.join(ROOT, "tools", "build", "check_wheel.py"))
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    layered = [m for m in LAYERS if m not in ("cudart", "_platform")]
    assert built == layered == check.MODULES
    assert sorted(built) == _modules()


@needs_sources
def test_the_sdist_carries_the_private_sources():
    """The wheel is built from the sdist: every private header and every
    part of a module (.pxi) must be in it (setuptools' manifest, as the
    sdist makes it), though the wheel ships none of them
    (tools/build/check_wheel.py)."""
    import sys
    import tempfile
    import setuptools
    if int(setuptools.__version__.split(".")[0]) < 77:
        # setup.py's metadata (an SPDX license string) needs the build's own
        # requirement; the test extra asks for it.
        pytest.skip(f"needs setuptools>=77 (the build requirement), not {setuptools.__version__}")
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "-e", scratch],
                       cwd=ROOT, check=True, capture_output=True)
        [info] = [n for n in os.listdir(scratch) if n.endswith(".egg-info")]
        listed = set(open(os.path.join(scratch, info, "SOURCES.txt")).read().split())
    wanted = {os.path.relpath(os.path.join(folder, n), ROOT)
              for top in (PRIVATE, INCLUDE) for folder, _, files in os.walk(top)
              for n in files if n.endswith(".h")}
    wanted |= {os.path.relpath(os.path.join(folder, n), ROOT)
               for folder, _, files in os.walk(SOURCES) for n in files if n.endswith(".pxi")}
    assert wanted - listed == set()


# The tests: one folder per concept, named after the module it tests
# (docs/contributing.rst); only the fixtures and the shared helpers stay at
# the top of tests/, where every folder imports them from.
TESTS = os.path.join(ROOT, "tests")
TEST_FOLDERS = {"cudart", "device", "handle", "stream", "hostcall", "asyncio", "memory", "launch",
                "graph", "green", "foreign", "compat", "package", "fuzz", "semaphore",
                "deadline", "nvtx", "racecheck"}
TEST_TOP = {"conftest.py", "_support.py"}


def _test_tree():
    """{folder relative to tests/: the .py files in it}, build output left out."""
    tree = {}
    for folder, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "_cimport_build")
                   and not d.startswith(".")]
        tree[os.path.relpath(folder, TESTS)] = sorted(n for n in files if n.endswith(".py"))
    return tree


@pytest.mark.skipif(not os.path.isfile(os.path.join(TESTS, "conftest.py")),
                    reason="needs the source tree")
def test_every_test_file_lives_in_a_concept_folder():
    """tests/ holds conftest.py, _support.py and the concept folders; every
    test file is in one of those folders, one level down, under a name no
    other test file has (pytest imports each by its name: no folder is a
    package)."""
    tree = _test_tree()
    assert set(tree.pop(".")) == TEST_TOP, "a file at the top of tests/: move it to its concept"
    folders = {path.split(os.sep)[0] for path in tree}
    assert folders == TEST_FOLDERS, (f"not a concept folder: {sorted(folders - TEST_FOLDERS)}; "
                                     f"missing: {sorted(TEST_FOLDERS - folders)}")
    nested = [path for path, files in tree.items() if os.sep in path and files]
    assert not nested, f"test files below a concept folder: {nested}"
    names = [n for files in tree.values() for n in files if n.startswith("test_")]
    assert all(tree[folder] for folder in TEST_FOLDERS)
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)
    assert not [path for path, files in tree.items() if "__init__.py" in files]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")
def test_one_static_cudart_in_the_package():
    """Only streams._cudart contains the runtime; the other extensions
    neither contain nor import a cuda* symbol."""
    pkg = os.path.dirname(streams.__file__)
    exts = [n for n in os.listdir(pkg) if n.endswith(".so")]
    assert any(n.startswith("_cudart.") for n in exts)
    for name in exts:
        out = subprocess.run(["readelf", "--dyn-syms", "-W", os.path.join(pkg, name)],
                             capture_output=True, text=True, check=True).stdout
        undefined = [ln.split()[-1] for ln in out.splitlines()
                     if " UND " in ln and re.search(r"\bcuda[A-Z]", ln)]
        assert not undefined, f"{name} needs {undefined}"
        syms = subprocess.run(["readelf", "-s", "-W", os.path.join(pkg, name)],
                              capture_output=True, text=True, check=True).stdout
        has_runtime = "cudaLaunchKernel" in syms
        assert has_runtime == name.startswith("_cudart."), name


@pytest.mark.parametrize("cls, hint", [
    (streams.Kernel, "Module.get_kernel"), (streams.PreparedLaunch, "Kernel.prepare"),
    (streams.GraphNode, "add_"), (streams.GraphExec, "Graph.instantiate"),
    (streams.Module, "Module.from_ptx"), (streams._hostcall.HostCall, "launch_host_func"),
])
def test_library_made_classes_refuse_direct_construction(cls, hint):
    with pytest.raises(TypeError, match=f"cannot be instantiated directly; .*{hint}"):
        cls()


def test_objects_made_with_new_are_inert():
    for cls in (streams.Kernel, streams.PreparedLaunch, streams.GraphExec, streams.Module):
        obj = cls.__new__(cls)
        assert repr(obj)
    with pytest.raises(ValueError, match="never initialised"):
        streams.PreparedLaunch.__new__(streams.PreparedLaunch).launch(streams.Stream.legacy)
    with pytest.raises(ValueError, match="closed GraphExec"):
        streams.GraphExec.__new__(streams.GraphExec).launch(streams.Stream.legacy)
    with pytest.raises(ValueError, match="never initialised"):
        streams.Stream.legacy.launch(streams.Kernel.__new__(streams.Kernel), 1, 1)
    with pytest.raises(ValueError, match="closed Module"):
        streams.Module.__new__(streams.Module).get_kernel("x")


@pytest.mark.parametrize("handle", [3, 4096, 65535, 65537, 1 << 60, (1 << 56) + 8])
def test_values_that_cannot_be_stream_handles_are_refused(handle):
    with pytest.raises(ValueError, match="cannot be a CUDA stream handle"):
        streams.Stream.from_handle(handle)


def test_enums_take_members_values_and_names():
    assert streams.CaptureMode("relaxed") is streams.CaptureMode.RELAXED
    assert streams.CaptureStatus.ACTIVE == "active" and streams.CaptureStatus.NONE != "active"
    assert streams.SyncPolicy.SPIN == int(streams.SyncPolicy.SPIN)
    with pytest.raises(ValueError, match="mode must be one of 'global', 'thread_local', "
                                         "'relaxed'"):
        streams.capture_mode("sideways")
    assert isinstance(hash(streams.NodeType.KERNEL), int)


def test_one_timeout_rule_everywhere():
    for bad, exc in ((True, TypeError), ("1", TypeError), (-1, ValueError),
                     (float("nan"), ValueError)):
        with pytest.raises(exc, match="timeout"):
            streams.Stream.legacy.synchronize(timeout=bad)
        with pytest.raises(exc, match="timeout"):
            streams.synchronize_device(timeout=bad)
