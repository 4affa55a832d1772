"""On the GPU: a consumer never joins a capture of its producer's stream (and
a capture is never broken by a DeviceBuffer's DLPack export), a green
context let go with work still queued in it, Stream.sm_count of wrapped
green and ordinary streams, and a native host function's data given as
ctypes.byref.  The CPU halves are in test_audit_misc_cpu.py."""
import ctypes
import json
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy", reason="the audit tests check results with numpy")

from _support import MS, N, closing, run_python, run_python_args, wait_for_refcount

import streams
from streams import DeviceBuffer, GreenContext, Stream
from streams.testing import fill_u32, native_increment, spin

pytestmark = pytest.mark.gpu


def _child_result(result):
    lines = [line[7:] for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"rc={result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return json.loads(lines[-1])


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
    out = _child_result(result)
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
    out = _child_result(run_python(_CONSUMER_CAPTURING_EXPORT, timeout=120))
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


# ---- a green context let go with work queued in it -----------------------------------------------

_GREEN_RELEASED_WITH_WORK = textwrap.dedent(r"""
    import gc, json, struct, sys, time, warnings
    import streams
    from streams import Device, DeviceBuffer, GreenContext, Stream
    from streams.testing import fill_u32, spin
    try:
        dev = Device(streams.get_device())
        parts, rest = dev.split_sm(dev.sm_resource().min_partition_size, groups=1)
        ctx = GreenContext(parts[0])
    except NotImplementedError as exc:
        print("RESULT " + json.dumps({"skip": str(exc)}), flush=True)
        sys.exit(0)
    mode = sys.argv[1]
    warnings.simplefilter("always")
    got = []
    warnings.showwarning = lambda m, *a, **k: got.append(str(m))
    base = Stream(non_blocking=True)
    buf = DeviceBuffer(4096, base)
    fill_u32(base, buf.ptr, 0, 1024)
    base.synchronize()
    gs = ctx.create_stream()
    parked0 = streams._cudart._parked_count()
    live0 = streams.debug_counters()["live_green_contexts"]
    spin(gs, 500000)                    # 0.5 s on the partition
    fill_u32(gs, buf.ptr, 7, 1024)      # queued behind the spin
    t0 = time.monotonic()
    if mode == "close":
        ctx.close()
        gs.close()                      # the last holder: the context is let go here
    else:                               # the last holder goes inside a host callback
        holder = [gs.owner]
        ctx.close()
        gs.close()
        base.launch_host_func(lambda _: holder.clear())
        base.synchronize()
        gc.collect()        # free-threaded: merges the callback thread's drop
        streams._cudart._drain_deferred()
    close_s = time.monotonic() - t0
    res = {"close_s": close_s,
           "parked_at_close": streams._cudart._parked_count() - parked0,
           "live_after_close": streams.debug_counters()["live_green_contexts"] - live0}
    streams.synchronize_device()
    streams._cudart._drain_deferred()
    gc.collect()
    res["parked_after_work"] = streams._cudart._parked_count() - parked0
    host = bytearray(4096)
    streams.memcpy_async(host, buf, stream=base)
    base.synchronize()
    res["value"] = struct.unpack_from("<I", host, 0)[0]
    streams._cudart._flush_cleanup_warnings()
    res["warnings"] = got
    # A new context on the same partition works after the old one went.
    ctx2 = GreenContext(parts[0])
    s2 = ctx2.create_stream()
    fill_u32(s2, buf.ptr, 11, 1024)
    s2.synchronize()
    s2.close(); ctx2.close()
    print("RESULT " + json.dumps(res), flush=True)
""")


@pytest.mark.parametrize("mode", ["close", "in-callback"])
def test_a_green_context_let_go_with_work_queued_waits_for_it_without_blocking(mode):
    """A 0.5 s spin and a fill queued on a green context's stream, then the
    stream and the context closed at once (or the last holder dropped
    inside a host callback, where the release is deferred): the close
    returns at once, the context is parked (an event of the whole context,
    cuGreenCtxRecordEvent, still pending because the spin runs), the fill
    happens, and once the work is done the next drain destroys the context
    without a CudaWarning, never with work still queued in the context
    (cuGreenCtxDestroy is not documented to let it run)."""
    out = _child_result(run_python_args(["-c", _GREEN_RELEASED_WITH_WORK, mode], timeout=120))
    if "skip" in out:
        pytest.skip(out["skip"])
    assert out["close_s"] < 0.25, out          # never waited for the 0.5 s spin
    assert out["parked_at_close"] == 1, out     # the context waits for its work
    assert out["live_after_close"] == -1, out   # counted let go at the release
    assert out["parked_after_work"] == 0, out
    assert out["value"] == 7, out
    assert out["warnings"] == [], out


# ---- Stream.sm_count of wrapped streams -----------------------------------------------------------

def test_sm_count_of_wrapped_green_and_ordinary_streams(device):
    """A green stream wrapped with its GreenContext (or its partition) as
    owner answers the partition's SMs; an ordinary stream wrapped with a
    green context's handle as owner answers the device's.  The failure it
    catches: the first two raise AttributeError, the last reports the
    partition's."""
    try:
        r = device.sm_resource()
        (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    except NotImplementedError as exc:
        pytest.skip(str(exc))
    with closing(GreenContext(part)) as ctx, closing(ctx.create_stream(),
                                                    Stream(non_blocking=True)) as (gs, plain):
        assert gs.sm_count == part.sm_count
        for owner in (ctx, part, gs.owner):
            with closing(Stream.from_handle(gs.handle, owner=owner)) as wrapped:
                assert wrapped.sm_count == part.sm_count
        assert plain.sm_count == r.sm_count
        with closing(Stream.from_handle(plain.handle, owner=gs.owner)) as wrapped:
            assert wrapped.sm_count == r.sm_count


@pytest.fixture
def device():
    return streams.Device(streams.get_device())


# ---- native host function data through ctypes.byref ----------------------------------------

def test_byref_data_is_written_where_it_points_and_kept_until_run():
    """native_increment adds 1 to the word its data points to: given
    ctypes.byref(words, 8), the second word counts the calls and the first
    stays 0; a byref of an object nobody else holds keeps it until the
    function has run (its reference count)."""
    words = (ctypes.c_uint64 * 2)()
    with closing(Stream(non_blocking=True)) as s:
        for _ in range(3):
            s.launch_host_func(native_increment, ctypes.byref(words, 8))
        s.synchronize()
        assert (words[0], words[1]) == (0, 3)
        lone = ctypes.c_uint64(0)
        base = sys.getrefcount(lone)
        spin(s, 200 * MS)
        s.launch_host_func(native_increment, ctypes.byref(lone))
        assert sys.getrefcount(lone) > base, "the byref object (holding lone) is kept"
        s.synchronize()
        assert wait_for_refcount(lone, base), "the byref object is let go once it has run"
        assert lone.value == 1


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
    lines = [ln[7:] for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, r.stdout + r.stderr
    out = json.loads(lines[-1])
    assert out == {"export": export, "q_status": "ACTIVE", "end_capture": "ok"}, out
