"""Green contexts let go, and streams wrapping theirs, on the GPU: a context
closed (or dropped in a callback) with work still queued in it waits for
that work without blocking the caller, and Stream.sm_count of a wrapped
green or ordinary stream is decided by the stream, not by its owner."""
import textwrap

import pytest

from _support import child_result, closing, run_python_args

import streams
from streams import GreenContext, Stream


np = pytest.importorskip("numpy", reason="the audit tests check results with numpy")

pytestmark = pytest.mark.gpu


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
    out = child_result(run_python_args(["-c", _GREEN_RELEASED_WITH_WORK, mode], timeout=120))
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
