"""streams.nvtx on a GPU, through the recording tool of tests/_support.py in a
child Python: the names of streams, events and devices reach the tool with
the handles CUDA gave, and with trace_calls(True) each of streams' own
operations on a real stream (launch, record, wait, copy, memset, host
function, graph launch, synchronize) is one range in the "streams" domain,
in the order the program made them; with it off there is none."""
import pytest

from _support import build_nvtx_tool, child_result, run_with_nvtx_tool

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nvtx_tool_gpu")
    return str(folder), build_nvtx_tool(str(folder))


def test_streams_events_and_devices_take_names(tool):
    folder, lib = tool
    lines, result = run_with_nvtx_tool(lib, """
        import json
        import streams
        s = streams.Stream(name="copy stream")
        e = streams.Event(name="ready")
        t = streams.Stream()
        assert t.name is None and s.name == "copy stream"
        s.name = "renamed"
        t.name = "second"
        e.name = "ready again"
        streams.nvtx.name_device(streams.Device(0), "gpu zero")
        assert (s.name, t.name, e.name) == ("renamed", "second", "ready again")
        closed = streams.Stream()
        closed.close()
        try:
            closed.name = "late"
        except ValueError as exc:
            late = str(exc)
        print("RESULT", json.dumps({"s": s.handle, "t": t.handle, "e": e.handle,
                                    "late": late}))
    """, folder)
    out = child_result(result)
    streams_named = [(int(h, 16), n) for _, h, n in (x for x in lines if x[0] == "name_stream")]
    assert streams_named == [(out["s"], "copy stream"), (out["s"], "renamed"),
                             (out["t"], "second")]
    events_named = [(int(h, 16), n) for _, h, n in (x for x in lines if x[0] == "name_event")]
    assert events_named == [(out["e"], "ready"), (out["e"], "ready again")]
    assert ["name_device", "0", "gpu zero"] in lines
    assert "closed" in out["late"]
    assert not [x for x in lines if x[2:3] == ["late"]]


OPERATIONS = """
    import streams
    from streams import nvtx
    from streams.testing import builtin_module

    mod = builtin_module()
    fill = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    s, t = streams.Stream(), streams.Stream()
    buf = streams.DeviceBuffer(4096, s)
    host = streams.PinnedBuffer(4096)
    with s.capture() as cap:
        s.launch(fill, 1, 32, buf, 1, 1024)
    exe = cap.graph.instantiate()
    s.synchronize()

    def work():
        s.launch(fill, 1, 32, buf, 2, 1024)
        ev = s.record()
        t.wait_event(ev)
        t.wait_stream(s)
        streams.memset_async(buf, 0, stream=t)
        streams.memcpy_async(host, buf, stream=t)
        t.launch_host_func(print, "host")
        exe.launch(t)
        ev.record(t)
        ev.synchronize()
        t.synchronize()

    work()
    nvtx.mark("on")
    nvtx.trace_calls(True)
    work()
    nvtx.trace_calls(False)
    nvtx.mark("off")
    work()
    exe.close()
    print("RESULT", "{}")
"""


def test_trace_calls_ranges_the_operations_in_order(tool):
    folder, lib = tool
    lines, result = run_with_nvtx_tool(lib, OPERATIONS, folder)
    child_result(result)
    start = lines.index(["mark", "-", "on", "-", "-"])
    end = lines.index(["mark", "-", "off", "-", "-"])
    traced = [(i, x) for i, x in enumerate(lines) if x[0] in ("push", "pop") and x[1] == "streams"]
    assert traced and all(start < i < end for i, _ in traced), "ranges only while on"
    pushes = [x[2] for _, x in traced if x[0] == "push"]
    assert pushes == ["reg:launch", "reg:record", "reg:wait_event", "reg:Stream.wait_stream",
                      "reg:memset_async", "reg:memcpy_async", "reg:Stream.launch_host_func",
                      "reg:GraphExec.launch", "reg:record", "reg:Event.synchronize",
                      "reg:Stream.synchronize"]
    # Each range is closed before the next opens: none nests in another.
    kinds = [x[0] for _, x in traced]
    assert kinds == ["push", "pop"] * len(pushes)
