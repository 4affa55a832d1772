"""Green contexts on the GPU: a partition's streams run on its SMs only
(%smid read by every block), disjoint partitions run at once while one
small partition serialises (%globaltimer stamps), and every stream
operation (launch, events both ways, memory ops, host functions, capture
and graph launch) works on a green context's streams."""
import gc

import pytest

np = pytest.importorskip("numpy", reason="the green-context tests check results with numpy")

import streams
from _support import run_python
from streams import DeviceBuffer, Event, GreenContext, Module, Stream

pytestmark = pytest.mark.gpu

GREEN_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

// out[blockIdx.x] = %smid (thread 0), then every thread spins spin_ns
.visible .entry smid_spin(.param .u64 out, .param .u64 spin_ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [spin_ns];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra START;
    mov.u32 %r2, %smid;
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd1, %rd3;
    st.global.u32 [%rd4], %r2;
START:
    mov.u64 %rd5, %globaltimer;
    add.u64 %rd6, %rd5, %rd2;
SPIN:
    mov.u64 %rd7, %globaltimer;
    setp.lt.u64 %p2, %rd7, %rd6;
    @%p2 bra SPIN;
    ret;
}

// every thread spins spin_ns; stamps[0] = min start, stamps[1] = max end
// over the blocks (thread 0 of each)
.visible .entry busy(.param .u64 stamps, .param .u64 spin_ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [stamps];
    ld.param.u64 %rd2, [spin_ns];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd3, %globaltimer;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra START;
    atom.global.min.u64 %rd8, [%rd1], %rd3;
START:
    add.u64 %rd4, %rd3, %rd2;
SPIN:
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p2, %rd5, %rd4;
    @%p2 bra SPIN;
    @%p1 bra DONE;
    atom.global.max.u64 %rd9, [%rd1+8], %rd5;
DONE:
    ret;
}
"""

MS = 1000 * 1000    # ns
MAX_THREADS_PER_SM = 39     # cudaDevAttrMaxThreadsPerMultiProcessor


@pytest.fixture
def kernels():
    mod = Module.from_ptx(GREEN_PTX)
    from types import SimpleNamespace
    yield SimpleNamespace(smid=mod.get_kernel("smid_spin", signature="pointer, uint64"),
                          busy=mod.get_kernel("busy", signature="pointer, uint64"))
    streams.synchronize_device()
    mod.close()


@pytest.fixture
def device():
    dev = streams.Device(streams.get_device())
    try:
        dev.sm_resource()
    except NotImplementedError as exc:
        pytest.skip(f"no green contexts here: {exc}")
    return dev


def _smids(stream, kernel, blocks):
    # The buffer comes from an ordinary stream, so that only the launch
    # and the copies run on `stream`.
    setup = Stream()
    out = DeviceBuffer(4 * blocks, setup)
    setup.synchronize()
    streams.memset_async(out, 0xFF, stream=stream)
    stream.launch(kernel, blocks, 128, out, 2 * MS)
    host = np.empty(blocks, dtype=np.uint32)
    streams.memcpy_async(host, out, stream=stream)
    stream.synchronize()
    out.close()
    setup.close()
    assert (host != 0xFFFFFFFF).all(), "a block did not run"
    return set(host.tolist())


def test_sm_resource_describes_the_device(device):
    r = device.sm_resource()
    assert r.device == device.index
    assert r.sm_count == device.attribute(16)     # cudaDevAttrMultiProcessorCount
    assert 1 <= r.min_partition_size <= r.sm_count
    assert 1 <= r.alignment <= r.sm_count


def test_split_gives_disjoint_partitions_of_at_least_count(device):
    r = device.sm_resource()
    parts, rest = device.split_sm(r.min_partition_size, groups=2)
    assert len(parts) == 2
    for p in parts:
        assert p.device == device.index and not p.remainder
        assert p.sm_count >= r.min_partition_size
    left = rest.sm_count if rest is not None else 0
    assert sum(p.sm_count for p in parts) + left == r.sm_count
    if rest is not None:
        assert rest.remainder
    every, _ = device.split_sm(r.min_partition_size)
    assert len(every) >= 2 and all(p.sm_count >= r.min_partition_size for p in every)


def test_work_on_a_partition_runs_on_at_most_its_sms(device, kernels):
    r = device.sm_resource()
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    n = part.sm_count
    assert n < r.sm_count, "the test needs a partition smaller than the device"
    blocks = 8 * r.sm_count
    plain = Stream()
    # The same launch on an ordinary stream spreads beyond n SMs: the
    # check below can fail.
    assert len(_smids(plain, kernels.smid, blocks)) > n
    with GreenContext(part) as ctx:
        assert ctx.sm_count == n and ctx.device == device.index
        s = ctx.create_stream()
        assert s.sm_count == n
        assert s.device.index == device.index
        seen = _smids(s, kernels.smid, blocks)
        assert 1 <= len(seen) <= n, (seen, n)
        s.close()
    assert plain.sm_count == r.sm_count
    plain.close()


def _busy_pair(kernels, first, second, blocks, spin_ns):
    # Both kernels fill every thread slot of `blocks` blocks of 1024; each
    # reports [min start, max end] of its blocks.
    setup = Stream()
    stamps = []
    for _ in range(2):
        buf = DeviceBuffer(16, setup)
        streams.memcpy_async(buf, np.array([2**64 - 1, 0], dtype=np.uint64), stream=setup)
        stamps.append(buf)
    setup.synchronize()
    first.launch(kernels.busy, blocks, 1024, stamps[0], spin_ns)
    second.launch(kernels.busy, blocks, 1024, stamps[1], spin_ns)
    out = []
    for s, buf in zip((first, second), stamps):
        host = np.empty(2, dtype=np.uint64)
        streams.memcpy_async(host, buf, stream=s)
        s.synchronize()
        out.append((int(host[0]), int(host[1])))
        buf.close()
    setup.close()
    return out


def _overlap(a, b):
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


# Kernels of two streams at once: compute-sanitizer serializes them.
@pytest.mark.concurrent
def test_disjoint_partitions_run_at_once_one_small_partition_serialises(device, kernels):
    r = device.sm_resource()
    per_sm = max(1, device.attribute(MAX_THREADS_PER_SM) // 1024)
    parts, _ = device.split_sm(r.min_partition_size, groups=2)
    n = min(p.sm_count for p in parts)
    blocks = per_sm * n
    spin = 100 * MS
    one, two = GreenContext(parts[0]), GreenContext(parts[1])
    s1, s2 = one.create_stream(), two.create_stream()
    a, b = _busy_pair(kernels, s1, s2, blocks, spin)
    assert _overlap(a, b) > spin // 2, (a, b)
    # The same two kernels on two streams of one partition: each fills it,
    # so the second starts only as the first ends.
    s3 = one.create_stream()
    a, b = _busy_pair(kernels, s1, s3, blocks, spin)
    assert _overlap(a, b) < spin // 5, (a, b)
    for s in (s1, s2, s3):
        s.close()
    one.close()
    two.close()


def test_events_order_green_and_ordinary_streams_both_ways(device, kernels):
    r = device.sm_resource()
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    ctx = GreenContext(part)
    g = ctx.create_stream()
    plain = Stream(non_blocking=True)
    buf = DeviceBuffer(4 * 1024, plain)
    plain.synchronize()
    # green -> ordinary: the ordinary stream's copy sees the green memset
    # queued behind 50 ms of spin.
    g.launch(kernels.busy, 1, 32, DeviceBuffer(16, g), 50 * MS)
    streams.memset_async(buf, 0x11, stream=g)
    ev = Event()
    ev.record(g)
    plain.wait_event(ev)
    host = np.zeros(1024, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=plain)
    plain.synchronize()
    assert (host == 0x11111111).all()
    # ordinary -> green, through an event recorded on the ordinary stream
    # and through wait_stream.
    plain.launch(kernels.busy, 1, 32, DeviceBuffer(16, plain), 50 * MS)
    streams.memset_async(buf, 0x22, stream=plain)
    g.wait_event(plain.record())
    streams.memcpy_async(host, buf, stream=g)
    g.synchronize()
    assert (host == 0x22222222).all()
    streams.memset_async(buf, 0x33, stream=plain)
    g.wait_stream(plain)
    streams.memcpy_async(host, buf, stream=g)
    g.synchronize()
    assert (host == 0x33333333).all()
    # timing events recorded on the green stream
    t0, t1 = Event(enable_timing=True), Event(enable_timing=True)
    t0.record(g)
    g.launch(kernels.busy, 1, 32, DeviceBuffer(16, g), 20 * MS)
    t1.record(g)
    t1.synchronize()
    assert t0.elapsed_time(t1) >= 15.0
    assert g.query()
    buf.close()
    g.close()
    plain.close()
    ctx.close()


def test_host_function_and_capture_on_a_green_stream(device, kernels):
    r = device.sm_resource()
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    ctx = GreenContext(part)
    g = ctx.create_stream()
    ran = []
    g.launch_host_func(ran.append, 1)
    g.synchronize()
    assert ran == [1]
    blocks = 4 * r.sm_count
    out = DeviceBuffer(4 * blocks, g)
    g.synchronize()
    with g.capture() as cap:
        streams.memset_async(out, 0xFF, stream=g)
        g.launch(kernels.smid, blocks, 128, out, 1 * MS)
    graph = cap.graph
    exec_ = graph.instantiate()
    # Closing the context and the graph leaves the stream (and so the
    # context) working: the executable launches there still.
    ctx.close()
    graph.close()
    gc.collect()
    exec_.launch(g)
    host = np.empty(blocks, dtype=np.uint32)
    streams.memcpy_async(host, out, stream=g)
    g.synchronize()
    assert (host != 0xFFFFFFFF).all()
    assert len(set(host.tolist())) <= part.sm_count
    exec_.close()
    out.close()
    g.close()


def test_the_context_lives_while_its_streams_do(device):
    r = device.sm_resource()
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    before = streams.debug_counters()["live_green_contexts"]
    ctx = GreenContext(part)
    assert streams.debug_counters()["live_green_contexts"] == before + 1
    s = ctx.create_stream(priority=-1)
    ctx.close()
    ctx.close()      # idempotent
    assert ctx.closed
    with pytest.raises(ValueError, match="closed GreenContext"):
        ctx.create_stream()
    with pytest.raises(ValueError, match="closed GreenContext"):
        ctx.sm_count
    # the stream still works: the driver's context is alive
    assert streams.debug_counters()["live_green_contexts"] == before + 1
    assert s.sm_count == part.sm_count
    streams.memset_async(DeviceBuffer(64, s), 0, stream=s)
    s.synchronize()
    s.close()
    gc.collect()
    assert streams.debug_counters()["live_green_contexts"] == before


@pytest.mark.parametrize("how", ["dropped", "cycle"])
def test_a_dropped_stream_goes_before_its_context(device, how):
    """A green context's stream dropped (not closed) after its context was
    closed: its handle is destroyed before the context it holds.  The
    failure it catches: the stream's fields, its hold on the context among
    them, cleared first, so that cudaStreamDestroy finds the context
    destroyed (a CudaWarning, and a leaked stream)."""
    import warnings
    r = device.sm_resource()
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    base = streams.debug_counters()
    ctx = GreenContext(part)
    s = ctx.create_stream()
    streams.memset_async(DeviceBuffer(64, s), 0, stream=s)
    s.synchronize()
    ctx.close()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        if how == "cycle":
            box = [s]
            box.append(box)
            del box
        del s
        gc.collect()
        streams._cudart._drain_deferred()
        streams._cudart._flush_cleanup_warnings()
    assert not [w for w in got if issubclass(w.category, streams.CudaWarning)], \
        [str(w.message) for w in got]
    c = streams.debug_counters()
    assert c["live_green_contexts"] == base["live_green_contexts"]
    assert c["live_streams"] == base["live_streams"]


def test_misuse_raises(device):
    r = device.sm_resource()
    with pytest.raises(ValueError, match="count"):
        device.split_sm(0)
    with pytest.raises(ValueError, match="count"):
        device.split_sm(r.sm_count + 1)
    with pytest.raises(ValueError, match="groups"):
        device.split_sm(r.min_partition_size, groups=r.sm_count + 1)
    with pytest.raises(ValueError, match="groups"):
        device.split_sm(r.min_partition_size, groups=0)
    with pytest.raises(TypeError, match="count"):
        device.split_sm(1.5)
    (part,), _ = device.split_sm(r.min_partition_size, groups=1)
    other = (device.index + 1) % max(2, streams.device_count())
    with pytest.raises(ValueError, match="partition|device"):
        GreenContext(part, device=other)
    ctx = GreenContext(part)
    with pytest.raises(ValueError, match="non_blocking"):
        ctx.create_stream(non_blocking=False)
    with pytest.raises(TypeError, match="priority"):
        ctx.create_stream(priority="high")
    with pytest.raises(RuntimeError, match="once"):
        ctx.__init__(part)
    ctx.close()


_CAPTURED_ON_A_DROPPED_GREEN_STREAM = r"""
import gc
import numpy as np
import streams
import streams.testing
from streams import DeviceBuffer, GreenContext, Stream

def contexts():
    gc.collect()
    streams._cudart._drain_deferred()
    return streams.debug_counters()["live_green_contexts"]

dev = streams.Device(streams.get_device())
r = dev.sm_resource()
(part,), _ = dev.split_sm(r.min_partition_size, groups=1)
base = contexts()
out = DeviceBuffer(4 * 256, Stream.legacy)
Stream.legacy.synchronize()
ctx = GreenContext(part)
g = ctx.create_stream()
ctx.close()                       # only the stream holds the context now
if MODE == "capture":
    g.begin_capture("thread_local")
    streams.testing.fill_u32(g, out, 7, 256)
    graph = g.end_capture()
else:                             # into a graph of the user's
    graph = streams.Graph()
    g.begin_capture_to_graph(graph)
    streams.testing.fill_u32(g, out, 7, 256)
    g.end_capture()
del g, ctx                        # the stream goes: the graph holds the context
print("held", contexts() - base)
ex = graph.instantiate()          # SIGSEGV in the driver if the context is gone
graph.close()
print("exec holds", contexts() - base)
g2 = GreenContext(part).create_stream()
ex.launch(g2)
host = np.zeros(256, dtype=np.uint32)
streams.memcpy_async(host, out, stream=g2)
g2.synchronize()
print("values", sorted(set(host.tolist())))
ex.close()
g2.close()
del g2
print("after", contexts() - base)
"""


@pytest.mark.parametrize("mode", ["capture", "capture_to_graph"])
def test_a_graph_captured_on_a_green_stream_keeps_its_context(device, mode):
    """A graph captured on a green context's stream keeps the context (its
    kernel nodes name the context's functions) for as long as it and its
    executables live, after the stream that captured it is dropped:
    instantiating a graph whose green context is destroyed crashes in the
    driver.  In a child: the failure mode is a crash."""
    result = run_python(f"MODE = {mode!r}\n" + _CAPTURED_ON_A_DROPPED_GREEN_STREAM, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-3000:])
    lines = result.stdout.split("\n")
    assert "held 1" in lines and "exec holds 1" in lines, result.stdout
    assert "values [7]" in lines, result.stdout
    assert "after 0" in lines, result.stdout


_CHANGING_A_GREEN_CAPTURE = r"""
import numpy as np
import streams
import streams.testing
from streams import DeviceBuffer, GreenContext, Stream

N = 256
dev = streams.Device(streams.get_device())
(part,), _ = dev.split_sm(dev.sm_resource().min_partition_size, groups=1)
for kind in ("green", "ordinary"):
    ctx = GreenContext(part) if kind == "green" else None
    s = ctx.create_stream() if ctx is not None else Stream(non_blocking=True)
    out, other = DeviceBuffer(4 * N, s), DeviceBuffer(4 * N, s)
    streams.memset_async(out, 0, stream=s)
    streams.memset_async(other, 0, stream=s)
    s.begin_capture("global")
    streams.testing.fill_u32(s, out, 7, N)
    graph = s.end_capture()
    ex = graph.instantiate()
    (node,) = [n for n in graph.nodes if n.type == streams.NodeType.KERNEL]
    results = []
    for name, change in (
            ("args", lambda: ex.set_kernel_node_args(node, {0: other, 1: 9})),
            ("kernel", lambda: ex.set_kernel_node(node, "fill_u32", 1, N, other, 9, N)),
            ("node", lambda: node.set_args({1: 5}))):
        try:
            change()
            results.append(name + "=ok")
        except ValueError as exc:
            assert "green context" in str(exc) and str(exc).startswith("node:"), exc
            results.append(name + "=refused")
    ex.launch(s)
    a, b = np.zeros(N, np.uint32), np.zeros(N, np.uint32)
    streams.memcpy_async(a, out, stream=s)
    streams.memcpy_async(b, other, stream=s)
    s.synchronize()
    print(kind, *results, "out", sorted(set(a.tolist())), "other", sorted(set(b.tolist())))
    ex.close()
    graph.close()
    out.close()
    other.close()
    s.close()
    if ctx is not None:
        ctx.close()
print("done")
"""


def test_changing_a_node_of_a_green_capture_is_refused_before_cuda(device):
    """Every in-place change of a kernel node captured on a green context's
    stream is refused with ValueError naming ``node``, before CUDA is
    called: the 580 driver answers the argument change with invalid
    argument and crashes on the whole-kernel change
    (benchmarks/probes/probe_green_kernel_args.py shows both).  The executable keeps what was
    captured; the same changes on an ordinary stream's capture take effect
    (the control).  In a child: the failure mode is a crash."""
    result = run_python(_CHANGING_A_GREEN_CAPTURE, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr[-3000:])
    lines = result.stdout.splitlines()
    assert "green args=refused kernel=refused node=refused out [7] other [0]" in lines, lines
    assert "ordinary args=ok kernel=ok node=ok out [0] other [9]" in lines, lines
    assert lines[-1] == "done", lines
