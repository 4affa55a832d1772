"""Arrays and captures, on the GPU: a consumer never joins a capture of its
producer's stream (another library's array, a DLPack producer, a
DeviceBuffer), and a capture is never broken by a DeviceBuffer's DLPack or
array-interface export, even of a buffer whose stream is closed.  Each
scenario runs in a child: a broken capture must fail the test, not the
suite."""
import textwrap

import pytest

from _support import MS, N, child_result, closing, run_python, run_python_args

import streams
from streams import DeviceBuffer, Stream
from streams.testing import fill_u32, spin


np = pytest.importorskip("numpy", reason="the audit tests check results with numpy")

pytestmark = pytest.mark.gpu


# ---- a consumer and its producer's capture ------------------------------------------------------

_PRODUCER_CAPTURING = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    import streams
    from streams import CudaError, DeviceBuffer, Stream
    from streams.testing import builtin_module, fill_u32

    N = 1024
    mode = sys.argv[1]
    P, q = Stream(non_blocking=True), Stream(non_blocking=True)
    src, dst = DeviceBuffer(4 * N, P), DeviceBuffer(4 * N, q)
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    q.launch(inc, 4, 256, dst, N)       # loaded before any capture (lazy loading)
    fill_u32(P, src.ptr, 7, N)
    fill_u32(q, dst.ptr, 0, N)
    P.synchronize(); q.synchronize()

    class Foreign:       # another library's array of src, produced on P
        @property
        def __cuda_array_interface__(self):
            return {"shape": (N,), "typestr": "<u4", "version": 3, "strides": None,
                    "data": (src.ptr, False), "stream": P.handle}

    class DLPackOnly:    # a DLPack producer: its __dlpack__ is src's
        def __dlpack_device__(self):
            return src.__dlpack_device__()
        def __dlpack__(self, stream=None):
            return src.__dlpack__(stream=stream)

    def values(buf):
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, buf, stream=q)
        q.synchronize()
        return sorted(set(host.tolist()))

    res = {}
    P.begin_capture()
    fill_u32(P, src.ptr, 9, N)          # captured: runs at replays only
    try:
        if mode == "cai":
            streams.memcpy_async(dst, Foreign(), stream=q)
        elif mode == "cai-no-wait":
            streams.memcpy_async(dst, Foreign(), stream=q, wait_producers=False)
        elif mode == "kernel-argument":
            q.launch(inc, 4, 256, Foreign(), N)
        elif mode == "dlpack-producer":
            streams.memcpy_async(dst, DLPackOnly(), stream=q)
        elif mode == "dlpack-export":
            capsule = src.__dlpack__(stream=q.handle)
            del capsule
            streams.memcpy_async(dst, src, stream=q)
        res["consume"] = "enqueued"
    except Exception as exc:
        res["consume"] = f"{type(exc).__name__}: {exc}"[:200]
    res["q_status"] = q.capture_status.name
    graph = None
    try:
        graph = P.end_capture()
        res["end_capture"] = "ok"
    except CudaError as exc:
        res["end_capture"] = exc.name
    try:
        res["dst"] = values(dst)
        res["src"] = values(src)
        if graph is not None:
            exe = graph.instantiate()
            exe.launch(P)
            P.synchronize()
            exe.close()
            graph.close()
            res["src_after_replay"] = values(src)
    except CudaError as exc:
        res["after"] = exc.name
    print("RESULT " + json.dumps(res), flush=True)
""")


@pytest.mark.parametrize("mode, dst, src", [
    ("cai", [7], [7]),
    ("cai-no-wait", [7], [7]),
    ("kernel-argument", [0], [8]),
    ("dlpack-producer", [7], [7]),
    ("dlpack-export", [7], [7]),
])
def test_a_consumer_never_joins_its_producers_capture(mode, dst, src):
    """The stream an array's producer works on (P) is being captured; a
    stream outside any capture (q) consumes the array, by each path that
    orders a consumer after a producer: the interface's stream, a kernel
    argument, a DLPack producer handed q, DeviceBuffer.__dlpack__(stream=q).
    q does not wait (P's captured work is a graph being built, not work
    that will run) and stays outside the capture; the capture ends well, its
    graph holds P's fill alone, and q's work ran now on what P held before
    its capture (the kernel incremented 7 to 8; the replay then fills 9).
    The failure it catches: q waits for an event recorded inside P's
    capture, joins it, and end_capture raises
    cudaErrorStreamCaptureUnjoined; the copy goes into P's graph.  ``cai-no-wait`` (wait_producers=False) is the control
    that the harness itself keeps q out."""
    result = run_python_args(["-c", _PRODUCER_CAPTURING, mode], timeout=120)
    out = child_result(result)
    assert out["consume"] == "enqueued", out
    assert out["q_status"] == "NONE", out
    assert out["end_capture"] == "ok", out
    assert (out.get("dst"), out.get("src")) == (dst, src), out
    assert out.get("src_after_replay") == [9], out


_CONSUMER_CAPTURING_EXPORT = textwrap.dedent(r"""
    import json
    import streams
    from streams import CudaError, DeviceBuffer, Stream
    from streams.testing import fill_u32

    P, q = Stream(non_blocking=True), Stream(non_blocking=True)
    buf = DeviceBuffer(4096, P)
    fill_u32(P, buf.ptr, 7, 1024)
    P.synchronize()
    res = {}
    q.begin_capture()
    try:
        capsule = buf.__dlpack__(stream=q.handle)
        del capsule
        res["export"] = "exported"
    except BufferError as exc:
        res["export"] = "BufferError: " + str(exc)
    except CudaError as exc:
        res["export"] = "CudaError: " + exc.name
    res["q_status"] = q.capture_status.name
    try:
        q.end_capture().close()
        res["end_capture"] = "ok"
    except CudaError as exc:
        res["end_capture"] = exc.name
    # Exported with stream=-1 instead: no ordering, no capture touched.
    q.begin_capture()
    capsule = buf.__dlpack__(stream=-1)
    del capsule
    q.end_capture().close()
    res["no_sync_export"] = "ok"
    print("RESULT " + json.dumps(res), flush=True)
""")


def test_a_dlpack_export_to_a_capturing_consumer_is_refused_before_the_capture_breaks():
    """DeviceBuffer.__dlpack__(stream=q) while q is being captured and the
    buffer's stream is not part of that capture: BufferError naming both,
    nothing enqueued, the capture goes on (the rule of the array paths).
    The failure it catches: q waits for the uncaptured stream, CUDA
    invalidates q's capture (cudaErrorStreamCaptureIsolation), and
    torch.from_dlpack(buf) inside torch.cuda.graph breaks the graph."""
    out = child_result(run_python(_CONSUMER_CAPTURING_EXPORT, timeout=120))
    assert out["export"].startswith("BufferError: stream=0x"), out
    assert "is not part of that capture" in out["export"], out
    assert out["q_status"] == "ACTIVE" and out["end_capture"] == "ok", out
    assert out["no_sync_export"] == "ok", out


@pytest.mark.parametrize("wait", [True, False], ids=["ordered", "no-wait-control"])
def test_dlpack_export_still_orders_after_an_uncaptured_producer(wait, device_buffer):
    """Neither stream is being captured: the consumer waits for the
    buffer's stream (a spin, then a fill of 5); the control exports with
    stream=-1 and reads what was there before (0), which shows the test sees
    misordering."""
    with closing(Stream(non_blocking=True), Stream(non_blocking=True)) as (P, q):
        buf = DeviceBuffer(4 * N, P)
        fill_u32(P, buf.ptr, 0, N)
        P.synchronize()
        spin(P, 200 * MS)
        fill_u32(P, buf.ptr, 5, N)
        capsule = buf.__dlpack__(stream=q.handle if wait else -1)
        del capsule
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, buf, stream=q)
        q.synchronize()
        P.synchronize()
        buf.close()
    assert (host == (5 if wait else 0)).all(), host[:8]


CLOSED_STREAM_EXPORT = textwrap.dedent(r"""
    import json, sys
    import streams
    from streams import CudaError, DeviceBuffer, Stream
    from streams.testing import fill_u32
    variant = sys.argv[1]
    P = Stream(non_blocking=True)
    q = Stream()                     # blocking: the default kind
    buf = DeviceBuffer(4096, P)
    fill_u32(P, buf.ptr, 7, 1024)
    P.synchronize()
    P.close()                        # buf still open: P's close recorded a tail
    res = {}
    q.begin_capture()
    try:
        if variant == "dlpack":
            cap = buf.__dlpack__(stream=q.handle)
            del cap
        else:
            buf.__cuda_array_interface__
        res["export"] = "exported"
    except BufferError:
        res["export"] = "BufferError"
    except CudaError as exc:
        res["export"] = "CudaError: " + exc.name
    res["q_status"] = q.capture_status.name
    try:
        q.end_capture().close()
        res["end_capture"] = "ok"
    except CudaError as exc:
        res["end_capture"] = exc.name
    buf.close()
    print("RESULT " + json.dumps(res), flush=True)
""")


@pytest.mark.parametrize("variant, export", [("dlpack", "BufferError"), ("cai", "exported")])
def test_a_closed_streams_buffer_exported_during_a_capture_leaves_it_intact(variant, export):
    """A buffer whose stream is closed is ordered after that stream's work
    through the legacy stream; while a blocking stream is being captured
    that would join or break the capture.  An export to the capturing
    stream is refused first (nothing enqueued); a plain interface read waits
    for the tail on the host instead.  The capture goes on and ends."""
    r = run_python_args(["-c", CLOSED_STREAM_EXPORT, variant], timeout=120)
    out = child_result(r)
    assert out == {"export": export, "q_status": "ACTIVE", "end_capture": "ok"}, out
