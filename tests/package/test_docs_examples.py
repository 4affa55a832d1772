"""The code examples of the documentation run as written.

* ``.. code-block:: python`` blocks named ``gpu-example-*`` are complete
  programs; each runs in its own interpreter (pytest marker ``gpu``; skipped
  without a GPU, and skipped when a library it imports is not installed).
* The README's quickstart, the ``python`` block after the comment
  ``<!-- gpu-example-readme-quickstart ...-->``, is one of them, and what it
  prints must be the ``text`` block that follows it (numbers within 10%).
* The downstream project of docs/cython.rst (blocks ``cimport-example-pyx``
  and ``cimport-example-setup``) is built against the ``streams`` under test
  (no GPU needed) and, where there is a GPU, run.

The examples run in subprocesses that import the same ``streams`` as this
interpreter (an in-place build or an installed wheel).
"""
import ast
import importlib.util
import re
import subprocess
import sys
import textwrap

import pytest

from _support import ROOT, env_importing_this_streams

import streams

DOCS = ROOT / "docs"

_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. code-block::\s*(?P<lang>\S+)\s*$")
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*?)\s*$")


def _named_blocks():
    """{name: (language, code, "file:line")} of every code block with a :name:."""
    blocks = {}
    for path in sorted(DOCS.glob("*.rst")):
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = _DIRECTIVE.match(lines[i])
            if not m:
                i += 1
                continue
            start, base = i + 1, len(m.group("indent"))
            i += 1
            options = {}
            while i < len(lines) and (opt := _OPTION.match(lines[i])) \
                    and len(lines[i]) - len(lines[i].lstrip()) > base:
                options[opt.group("key")] = opt.group("value")
                i += 1
            body = []
            while i < len(lines) and (not lines[i].strip()
                                      or len(lines[i]) - len(lines[i].lstrip()) > base):
                body.append(lines[i])
                i += 1
            name = options.get("name")
            if name:
                assert name not in blocks, f"duplicate code-block name {name!r}"
                code = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
                blocks[name] = (m.group("lang"), code, f"{path.name}:{start}")
    return blocks


README = ROOT / "README.md"
_FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")


def _readme_blocks():
    """{name: (language, code, "README.md:line")} of the README's named
    examples, and {name: the text block of the output that follows}."""
    blocks, outputs = {}, {}
    if not README.is_file():
        return blocks, outputs
    lines = README.read_text(encoding="utf-8").splitlines()
    fences = []      # (language, first line of the body, its lines)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m and m.group("lang"):
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            fences.append((m.group("lang"), i + 2, lines[i + 1:j], i))
            i = j
        i += 1
    for n, line in enumerate(lines):
        m = re.match(r"^<!-- (gpu-example-[\w-]+)\b", line)
        if not m:
            continue
        after = [f for f in fences if f[3] > n]
        lang, start, body, _ = after[0]
        blocks[m.group(1)] = (lang, "\n".join(body) + "\n", f"README.md:{start}")
        if len(after) > 1 and after[1][0] == "text":
            outputs[m.group(1)] = after[1][2]
    return blocks, outputs


def _same_output(expected, actual):
    """Whether ``actual`` lines are ``expected``'s, numbers within 10%.  A
    duration (a number before " ms") may also be longer: the GPU time of a
    spin stretches when other processes share the GPU, never shrinks."""
    if len(expected) != len(actual):
        return False
    number = r"(\d+(?:\.\d+)?)"
    for want, got in zip(expected, actual):
        parts = re.split(number, want)
        pattern = "".join(number if k % 2 else re.escape(p) for k, p in enumerate(parts))
        m = re.fullmatch(pattern, got)
        if not m:
            return False
        for k, (w, g) in enumerate(zip(parts[1::2], m.groups())):
            duration = parts[2 * k + 2].startswith(" ms")
            if float(g) < 0.9 * float(w) or (not duration and float(g) > 1.1 * float(w)):
                return False
    return True


BLOCKS = _named_blocks() if DOCS.is_dir() else {}
_README_BLOCKS, OUTPUTS = _readme_blocks()
BLOCKS.update(_README_BLOCKS)
GPU_EXAMPLES = sorted(name for name in BLOCKS if name.startswith("gpu-example-"))


def _missing_imports(code):
    """Top-level modules the code imports that are not installed."""
    missing = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            try:
                found = importlib.util.find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                missing.append(name)
    return missing


def _run(args, cwd, timeout=300):
    proc = subprocess.run(args, cwd=cwd, env=env_importing_this_streams(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, args))} failed in {cwd} (exit {proc.returncode})\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def _require_gpu():
    if streams.device_count() == 0:
        pytest.skip("needs a machine with an NVIDIA GPU (here streams.device_count() == 0)")


# ---- CPU: the extraction itself -----------------------------------------------

@pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ is missing (not a source checkout)")
def test_examples_are_found():
    assert len(GPU_EXAMPLES) >= 5, GPU_EXAMPLES
    for name in GPU_EXAMPLES:
        lang, code, where = BLOCKS[name]
        assert lang == "python", f"{where}: {name} is a {lang} block"
        compile(code, where, "exec")  # at least valid Python everywhere
    assert BLOCKS["cimport-example-pyx"][0] == "cython"
    assert BLOCKS["cimport-example-setup"][0] == "python"


@pytest.mark.skipif(not README.is_file(), reason="README.md is missing (not a source checkout)")
def test_the_readme_quickstart_is_an_example_with_its_output():
    lang, code, where = BLOCKS["gpu-example-readme-quickstart"]
    assert lang == "python" and where.startswith("README.md:")
    assert "import streams" in code and "cap.graph" in code
    assert OUTPUTS["gpu-example-readme-quickstart"][-1] == "replayed"


@pytest.mark.parametrize("expected, actual, same", [
    (["kernel: 20 ms", "done"], ["kernel: 21 ms", "done"], True),
    (["kernel: 20 ms", "done"], ["kernel: 42 ms", "done"], True),
    (["kernel: 20 ms", "done"], ["kernel: 17 ms", "done"], False),
    (["items: 20", "done"], ["items: 23", "done"], False),
    (["kernel: 20 ms"], ["kernel: 20 ms", "extra"], False),
    (["a 1.5 b"], ["a 1.5 c"], False),
    (["replayed"], ["replayed"], True)])
def test_output_comparison(expected, actual, same):
    assert _same_output(expected, actual) is same

@pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ is missing (not a source checkout)")
def test_examples_type_check(tmp_path):
    """The named Python examples agree with the stubs (names, arguments).

    Catches examples that fall behind the API without a GPU.  Libraries
    that are not installed type as Any.
    """
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    files = []
    for name, (lang, code, where) in sorted(BLOCKS.items()):
        if lang == "python":
            path = tmp_path / (name.replace("-", "_") + ".py")
            path.write_text(f"# {where}\n{code}", encoding="utf-8")
            files.append(str(path))
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n", encoding="utf-8")
    env = env_importing_this_streams()
    env.pop("MYPYPATH", None)
    if "PYTHONPATH" in env:  # an in-place build: mypy reads its stubs from there
        env["MYPYPATH"] = env["PYTHONPATH"]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--no-incremental",
         "--python-version", "3.11", "--ignore-missing-imports", "--check-untyped-defs",
         "--disable-error-code", "var-annotated", *files],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


# ---- GPU: every gpu-example-* block -------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_gpu_example(name, tmp_path):
    _require_gpu()
    _, code, where = BLOCKS[name]
    missing = _missing_imports(code)
    if missing:
        pytest.skip(f"{where}: needs {', '.join(missing)}, not installed")
    script = tmp_path / f"{name}.py"
    script.write_text(f"# {where}\n{code}", encoding="utf-8")
    proc = _run([sys.executable, str(script)], cwd=tmp_path)
    if name in OUTPUTS:
        assert _same_output(OUTPUTS[name], proc.stdout.splitlines()), (
            f"{where} printed\n{proc.stdout}\nnot what the README shows:\n"
            + "\n".join(OUTPUTS[name]))


# ---- the downstream Cython project of docs/cython.rst ----------------------------

@pytest.fixture(scope="module")
def fastwait_dir(tmp_path_factory):
    pytest.importorskip("Cython", reason="Cython is not installed")
    pytest.importorskip("setuptools", reason="setuptools is not installed")
    if "cimport-example-pyx" not in BLOCKS:
        pytest.skip("docs/ is missing (not a source checkout)")
    where = tmp_path_factory.mktemp("fastwait")
    (where / "fastwait.pyx").write_text(BLOCKS["cimport-example-pyx"][1], encoding="utf-8")
    (where / "setup.py").write_text(BLOCKS["cimport-example-setup"][1], encoding="utf-8")
    _run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=where, timeout=600)
    return where


def test_cimport_example_builds_and_imports(fastwait_dir):
    """Every function reaches its class's C-level method: on objects that
    own no handle (made with __new__) each refuses before calling CUDA."""
    _run([sys.executable, "-c", textwrap.dedent("""
        import streams
        import fastwait
        from streams import Event, Graph, GraphExec, Kernel, PreparedLaunch, Stream

        assert fastwait.all_done([]) is True
        try:
            fastwait.all_done([None])
        except TypeError:
            pass
        else:
            raise AssertionError("all_done([None]) did not raise TypeError")
        legacy = Stream.legacy
        calls = {
            "all_done": lambda: fastwait.all_done([Stream.__new__(Stream)]),
            "drain": lambda: fastwait.drain(Stream.__new__(Stream), legacy),
            "hand_off": lambda: fastwait.hand_off(legacy, legacy, Event.__new__(Event)),
            "is_done": lambda: fastwait.is_done(Event.__new__(Event)),
            "replay": lambda: fastwait.replay(GraphExec.__new__(GraphExec), legacy, 1),
            "fill": lambda: fastwait.fill(Kernel.__new__(Kernel), legacy, 0, 0, 0),
            "launch_many": lambda: fastwait.launch_many(
                PreparedLaunch.__new__(PreparedLaunch), legacy, 1),
        }
        for name, call in calls.items():
            try:
                call()
            except ValueError as exc:
                assert "closed" in str(exc) or "never initialised" in str(exc), (name, exc)
            else:
                raise AssertionError(f"{name} did not raise ValueError")
        assert fastwait.graph_handle(Graph.__new__(Graph)) == 0
        """)], cwd=fastwait_dir)


@pytest.mark.gpu
def test_cimport_example_runs(fastwait_dir):
    _require_gpu()
    _run([sys.executable, "-c", textwrap.dedent("""
        import streams
        import fastwait
        from streams.testing import builtin_module, spin

        a, b = streams.Stream(), streams.Stream()
        spin(a, 200_000)
        assert fastwait.all_done([a, b]) is False
        fastwait.drain(a, b)
        assert fastwait.all_done([a, b]) is True

        # Event: b waits for a's spin through the event
        ready = streams.Event()
        spin(a, 100_000)
        fastwait.hand_off(a, b, ready)
        spin(b, 10)
        b.synchronize()
        assert fastwait.is_done(ready) is True

        # Kernel, PreparedLaunch, Graph, GraphExec on the built-in kernels
        n = 1024
        buf = streams.DeviceBuffer(n * 4, b)
        kernels = builtin_module()
        fastwait.fill(kernels.get_kernel("streams_fill_u32"), b, buf.ptr, 7, n)
        inc = kernels.get_kernel("streams_increment_u32", signature="pointer, uint64")
        fastwait.launch_many(inc.prepare(4, 256, buf, n), b, 3)
        g = streams.Graph()
        g.add_kernel_node(inc, 4, 256, buf, n)
        assert fastwait.graph_handle(g) == g.handle
        exe = g.instantiate()
        fastwait.replay(exe, b, 2)
        host = bytearray(n * 4)
        streams.memcpy_async(host, buf, stream=b)
        b.synchronize()
        assert host == (12).to_bytes(4, "little") * n, host[:16]
        """)], cwd=fastwait_dir)
