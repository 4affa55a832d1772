"""streams.nvtx without a GPU: the arguments each call takes, the calls
being harmless with no tool attached, and, with the recording tool of
tests/_support.py attached to a child Python, every call the tool receives:
ranges (pushed and popped, messages, colors, categories, domains made
once, registered strings), marks, category and device names, the name of
the legacy stream (an NVTX call on a handle that needs no GPU), the ranges
of Cython code, and the per-call ranges of streams' own operations, there
with the switch on and absent with it off; and a build of the module
without the NVTX headers, which keeps the API and calls nothing."""
import subprocess
import sys
import sysconfig

import pytest

import streams
from streams import nvtx

from _support import C_COMPILER, ROOT, build_nvtx_tool, run_with_nvtx_tool


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nvtx_tool")
    return str(folder), build_nvtx_tool(str(folder))


def calls_of(lines, *kinds):
    return [line for line in lines if line[0] in kinds]


# ---- arguments ----------------------------------------------------------------------------------

def test_the_public_face():
    assert isinstance(nvtx.available, bool)
    assert nvtx.range is nvtx.Range
    assert nvtx.Range.__module__ == "streams.nvtx"
    assert streams.nvtx is nvtx


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"color": 1.5}, TypeError, "color must be an int"),
    ({"color": True}, TypeError, "color must be an int"),
    ({"color": -1}, ValueError, "color must be in"),
    ({"color": 1 << 32}, ValueError, "color must be in"),
    ({"color": "mauve"}, ValueError, "color must be 0xRRGGBB"),
    ({"color": "#12345"}, ValueError, "color must be 0xRRGGBB"),
    ({"color": "#zzzzzz"}, ValueError, "color must be 0xRRGGBB"),
    ({"domain": 3}, TypeError, "domain must be None or a str"),
    ({"domain": "a\0b"}, ValueError, "domain must not contain NUL"),
    ({"category": "x"}, TypeError, "category must be None or an int"),
    ({"category": -1}, ValueError, "category must be in"),
])
def test_bad_arguments_are_named(kwargs, exc, match):
    for call in (lambda: nvtx.range("x", **kwargs), lambda: nvtx.mark("x", **kwargs),
                 lambda: nvtx.push("x", **kwargs)):
        with pytest.raises(exc, match=match):
            call()


def test_bad_messages_and_names_are_named():
    for call in (nvtx.mark, nvtx.push, nvtx.range):
        with pytest.raises(TypeError, match="message must be a str"):
            call(b"bytes")
        with pytest.raises(ValueError, match="message must not contain NUL"):
            call("a\0b")
    with pytest.raises(TypeError, match="a range used with `with` needs a message"):
        with nvtx.range():
            pass
    with pytest.raises(TypeError, match="decorates a callable"):
        nvtx.range("x")(3)
    with pytest.raises(TypeError, match="enabled must be a bool"):
        nvtx.trace_calls(1)
    with pytest.raises(TypeError, match="device must be a Device or an int"):
        nvtx.name_device("0", "gpu")
    with pytest.raises(TypeError, match="device must be a Device or an int"):
        nvtx.name_device(True, "gpu")
    with pytest.raises(ValueError, match="device must be >= 0"):
        nvtx.name_device(-1, "gpu")
    with pytest.raises(TypeError, match="name must be a str"):
        nvtx.name_device(0, None)
    with pytest.raises(TypeError, match="name must be a str"):
        streams.Stream.legacy.name = 3
    with pytest.raises(ValueError, match="name must not contain NUL"):
        streams.Stream.legacy.name = "a\0b"
    with pytest.raises(TypeError, match="name must be None or a str"):
        streams.Stream(name=3)
    with pytest.raises(TypeError, match="name must be None or a str"):
        streams.Event(name=b"x")
    assert streams.Stream.legacy.name is None


def test_without_a_tool_the_calls_do_nothing_and_say_so():
    # No NVTX_INJECTION64_PATH in this process (conftest does not set one).
    assert nvtx.push("x", color="red", domain="streams-tests") < 0
    assert nvtx.pop(domain="streams-tests") < 0
    nvtx.mark("x", color=0x112233, category=2)
    nvtx.name_category(2, "two")
    nvtx.name_device(0, "gpu0")

    @nvtx.range()
    def work(a, b=2):
        """Doc."""
        return a + b

    assert work(1, b=3) == 4
    assert work.__name__ == "work" and work.__doc__ == "Doc."
    with nvtx.range("r", color="#00ff00") as r:
        assert r.message == "r" and r.domain is None
    assert repr(nvtx.range("m", domain="d")) == "streams.nvtx.range('m', domain='d')"


def test_trace_calls_is_a_switch():
    was = nvtx.trace_calls(True)
    try:
        assert nvtx.tracing_calls()
        assert nvtx.trace_calls(True) is True
    finally:
        nvtx.trace_calls(was)
    assert nvtx.tracing_calls() is was


# ---- what a tool receives ----------------------------------------------------------------------

RANGES = """
    import threading
    from streams import nvtx

    assert nvtx.push("pushed", color=0x123456, category=7) == 0
    with nvtx.range("outer", color="red", domain="lib"):
        with nvtx.range("inner", domain="lib"):
            nvtx.mark("tick", color=0x80FF0000, domain="lib")
    assert nvtx.pop() == 0
    nvtx.mark("plain")
    nvtx.name_category(7, "seven")
    nvtx.name_category(1, "one", domain="lib")
    nvtx.name_device(0, "gpu zero")

    @nvtx.range(color="blue")
    def decorated():
        return 5

    def failing():
        with nvtx.range("failing", domain="lib"):
            raise KeyError("x")

    assert decorated() == 5 and decorated() == 5
    try:
        failing()
    except KeyError:
        pass
    def in_thread(i):
        nvtx.mark(f"thread {i}")
        decorated()

    threads = [threading.Thread(target=in_thread, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("RESULT", "ok")
"""


def test_ranges_marks_domains_and_names_reach_the_tool(tool):
    folder, lib = tool
    lines, result = run_with_nvtx_tool(lib, RANGES, folder)
    assert "RESULT ok" in result.stdout
    assert lines[0] == ["init"]
    assert calls_of(lines, "domain") == [["domain", "lib"]], "a domain is made once"
    pushes = calls_of(lines, "push")
    assert pushes[0] == ["push", "-", "pushed", "ff123456", "7"]
    # Messages of range objects are registered once, in their domain.
    assert ["register", "lib", "outer"] in lines and ["register", "lib", "inner"] in lines
    assert ["push", "lib", "reg:outer", "ffff0000", "-"] in pushes
    assert ["push", "lib", "reg:inner", "-", "-"] in pushes
    assert ["mark", "lib", "tick", "80ff0000", "-"] in lines
    assert ["mark", "-", "plain", "-", "-"] in lines
    assert ["category", "-", "7", "seven"] in lines
    assert ["category", "lib", "1", "one"] in lines
    assert ["name_device", "0", "gpu zero"] in lines
    # The decorator's range is named after the function, registered once
    # for all its calls (2 here, 4 in threads).
    assert calls_of(lines, "register").count(["register", "-", "decorated"]) == 1
    assert pushes.count(["push", "-", "reg:decorated", "ff0070c0", "-"]) == 6
    assert ["push", "lib", "reg:failing", "-", "-"] in pushes, "the range of a failing call"
    # Every push is popped, in its own domain.
    for domain in ("-", "lib"):
        assert (len([p for p in pushes if p[1] == domain])
                == len([p for p in calls_of(lines, "pop") if p[1] == domain])), domain
    assert sorted(m[2] for m in calls_of(lines, "mark") if m[2].startswith("thread")) == [
        f"thread {i}" for i in range(4)]
    assert not [line for line in lines if line[1:2] == ["streams"]], \
        "no per-call ranges without trace_calls"


TRACED = """
    import streams
    from streams import nvtx

    def operations():
        try:
            streams.Stream.legacy.synchronize()
        except streams.CudaError:
            pass                      # no GPU: the range is there all the same
        try:
            streams.memset_async(0, 0, 0)
        except ValueError:
            pass

    operations()
    nvtx.mark("switch")
    assert nvtx.trace_calls(True) is {was}
    operations()
    nvtx.trace_calls(False)
    nvtx.mark("off")
    operations()
    print("RESULT", "ok")
"""


@pytest.mark.parametrize("env", [False, True])
def test_per_call_ranges_appear_only_with_the_switch(tool, env):
    """Off (the default), streams' own operations make no NVTX call; on
    (trace_calls(True), or STREAMS_NVTX_TRACE=1 from import), each is a
    range in the "streams" domain, its failure included."""
    folder, lib = tool
    code = TRACED.format(was=env)
    if env:
        code = code.replace("operations()\n    nvtx.mark(\"switch\")",
                            "nvtx.mark(\"switch\")", 1)
    lines, _ = run_with_nvtx_tool(lib, code, folder,
                             extra_env={"STREAMS_NVTX_TRACE": "1" if env else None})
    marks = [line[2] for line in calls_of(lines, "mark")]
    assert marks == ["switch", "off"]
    at = {m: lines.index(["mark", "-", m, "-", "-"]) for m in marks}
    traced = [(i, line) for i, line in enumerate(lines)
              if line[0] in ("push", "pop") and line[1] == "streams"]
    assert traced, "no per-call ranges with the switch on"
    assert all(i < at["off"] for i, _ in traced), "a per-call range after the switch went off"
    assert all(i > at["switch"] for i, _ in traced), "a per-call range while off"
    on = [line for _, line in traced]
    assert on == [["push", "streams", "reg:Stream.synchronize", "-", "-"], ["pop", "streams"],
                  ["push", "streams", "reg:memset_async", "-", "-"], ["pop", "streams"]]
    assert ["domain", "streams"] in lines
    assert ["register", "streams", "GraphExec.launch"] in lines


def test_the_legacy_stream_takes_a_name(tool):
    folder, lib = tool
    lines, _ = run_with_nvtx_tool(lib, """
        import streams
        streams.Stream.legacy.name = "default stream"
        assert streams.Stream.legacy.name == "default stream"
        print("RESULT", "ok")
    """, folder)
    [named] = calls_of(lines, "name_stream")
    assert int(named[1], 16) == 1 and named[2] == "default stream"


def test_a_process_without_the_tool_records_nothing(tool):
    folder, lib = tool
    lines, result = run_with_nvtx_tool(lib, """
        import streams
        from streams import nvtx
        nvtx.trace_calls(True)
        with nvtx.range("r", domain="lib"):
            nvtx.mark("m")
        try:
            streams.Stream.legacy.synchronize()
        except streams.CudaError:
            pass
        print("RESULT", nvtx.push("x"), nvtx.pop())
    """, folder, extra_env={"NVTX_INJECTION64_PATH": None})
    assert lines == []
    [levels] = [line.split()[1:] for line in result.stdout.splitlines()
                if line.startswith("RESULT")]
    assert all(int(level) < 0 for level in levels), "no tool counts the levels"


def test_a_build_without_the_nvtx_headers_keeps_the_api(tmp_path):
    """streams/_nvtx.pyx compiled without STREAMS_HAVE_NVTX (no headers, or
    STREAMS_NVTX=0): available is False, no NVTX symbol is in the module,
    and every call works and does nothing, a tool attached or not."""
    pytest.importorskip("Cython")
    if not nvtx.available:
        pytest.skip("this build of streams has NVTX compiled out itself")
    source = ROOT / "src" / "streams" / "_nvtx.pyx"
    if C_COMPILER is None or not source.is_file():
        pytest.skip("needs the source tree and a C compiler")
    c_file = tmp_path / "_nvtx.c"
    subprocess.run([sys.executable, "-m", "cython", "-3", "-I", str(ROOT / "src"),
                    "--directive", "binding=True,freethreading_compatible=True",
                    str(source), "-o", str(c_file)], check=True, capture_output=True)
    so = tmp_path / ("_nvtx" + sysconfig.get_config_var("EXT_SUFFIX"))
    flags = ["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wno-unused-function",
             "-std=gnu11", "-I", str(ROOT / "include"), "-I", str(ROOT / "src"),
             "-I", sysconfig.get_paths()["include"]]
    result = subprocess.run([C_COMPILER, *flags, str(c_file), "-o", str(so)], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    # NVTX3's loader reads this variable: in the package's build, not in this one.
    assert b"NVTX_INJECTION64_PATH" in open(streams._nvtx.__file__, "rb").read()
    assert b"NVTX_INJECTION64_PATH" not in so.read_bytes()
    folder = str(tmp_path)
    lines, result = run_with_nvtx_tool(build_nvtx_tool(folder), f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("streams._nvtx", {str(so)!r})
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        assert m.available is False
        with m.Range("r", color="red", domain="lib"):
            m.mark("m")
        m.name_device(0, "gpu")
        assert m.trace_calls(True) is False and m.tracing_calls()
        print("RESULT", m.push("x"), m.pop())
    """, folder)
    assert lines == []
    assert "RESULT -1 -1" in result.stdout
