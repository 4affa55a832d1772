"""The race checker's hooks inside a capture: with the checker collecting
from import (STREAMS_RACECHECK=collect), a capture in global mode with a
kernel node added through capture_info, an increment and a copy captured
after it, must stay valid at every step and replay what was captured; the
same program with the checker off is the control.  Each case runs in a
fresh child: the first use of each stream and kernel is what the checker's
hooks look up."""
import textwrap

import pytest

from _support import child_result, run_python

pytestmark = pytest.mark.gpu

CHILD = textwrap.dedent("""
    import json
    import numpy as np
    import streams
    from streams import DeviceBuffer, Stream
    N = 1024
    steps = []
    # As the fuzzer's example began: a compiled module, its kernel looked up
    # and never launched (NVRTC missing: left out).
    SOURCE = (r"template <typename T> __global__ void fuzz_fill(T* p, T v, unsigned long long n)"
              r"{ unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x"
              r" + threadIdx.x; if (i < n) p[i] = v; }")
    try:
        compiled = streams.Module.from_source(SOURCE, name_expressions=("fuzz_fill<unsigned int>",))
        compiled.get_kernel("fuzz_fill<unsigned int>", signature="pointer, uint32, uint64")
    except Exception:
        compiled = None
    home, s = Stream(non_blocking=True), Stream(non_blocking=True)
    mod = streams.testing.builtin_module()
    k = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    tgt, out = DeviceBuffer(4 * N, stream=home), DeviceBuffer(4 * N, stream=home)
    home.launch(k, 1, N, tgt, 0, N)
    streams.testing.increment_u32(home, tgt, N)
    streams.memset_async(out, 0, stream=home)
    home.synchronize()
    s.begin_capture(MODE)
    def step(name):
        steps.append([name, s.capture_status.name.lower()])
    error = None
    try:
        info = s.capture_info()
        step("capture_info")
        node = info.graph.add_kernel_node(k, 1, N, tgt, 5, N, dependencies=info.dependencies)
        step("add_kernel_node")
        s.update_capture_dependencies([node], "set")
        step("update_capture_dependencies")
        streams.testing.increment_u32(s, tgt, N)
        step("increment_u32")
        streams.memcpy_async(out, tgt, stream=s)
        step("memcpy_async")
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    try:
        g = s.end_capture()
    except Exception as exc:
        error = error or f"end_capture: {type(exc).__name__}: {exc}"
        g = None
    got = None
    if g is not None and error is None:
        with g.instantiate() as ex:
            ex.launch(s)
            s.synchronize()
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, out, stream=s)
        s.synchronize()
        got = int(host[0]) if (host == host[0]).all() else -1
        g.close()
    races = len(streams.checker.races()) if streams.checker.enabled() else None
    print("RESULT " + json.dumps({"steps": steps, "error": error, "got": got, "races": races}))
""")


@pytest.mark.parametrize("mode", ["global", "relaxed"])
@pytest.mark.parametrize("checking", [True, False], ids=["checker", "control"])
def test_a_capture_info_node_capture_stays_valid_with_the_checker(mode, checking):
    env = {"STREAMS_RACECHECK": "collect" if checking else "0"}
    result = child_result(run_python(CHILD.replace("MODE", repr(mode)), timeout=120,
                                     extra_env=env))
    bad = [name for name, status in result["steps"] if status != "active"]
    assert result["error"] is None and not bad, result
    assert result["got"] == 6, result           # the node's 5, then the increment
    assert result["races"] in (None, 0), result
