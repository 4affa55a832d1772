"""Extended launches (LaunchConfig through cudaLaunchKernelExC): programmatic
dependent launch and the launch-completion event shown on the GPU with
%globaltimer stamps and a kernel held by a host-set flag; priority, memory
sync domain and prepared launches computing data."""
import time

import pytest

np = pytest.importorskip("numpy", reason="the launch tests check results with numpy")

from _support import BLOCK, GRID, N, to_host

import streams
from streams import DeviceBuffer, Event, LaunchConfig, Module, PinnedBuffer, Stream

pytestmark = pytest.mark.gpu

# sm_90: griddepcontrol (programmatic dependent launch) needs Hopper.
PDL_PTX = r"""
.version 7.8
.target sm_90
.address_size 64

// stamps[0] = start, then let dependents launch, spin spin_ns, stamps[1] = end
.visible .entry pdl_primary(.param .u64 stamps, .param .u64 spin_ns)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [stamps];
    ld.param.u64 %rd2, [spin_ns];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd3, %globaltimer;
    st.global.u64 [%rd1], %rd3;
    griddepcontrol.launch_dependents;
    add.u64 %rd4, %rd3, %rd2;
SPIN:
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p1, %rd5, %rd4;
    @%p1 bra SPIN;
    st.global.u64 [%rd1+8], %rd5;
    ret;
}

// stamps[2] = start, wait for the primary grid, stamps[3] = after the wait
.visible .entry pdl_secondary(.param .u64 stamps)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [stamps];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd2, %globaltimer;
    st.global.u64 [%rd1+16], %rd2;
    griddepcontrol.wait;
    mov.u64 %rd3, %globaltimer;
    st.global.u64 [%rd1+24], %rd3;
    ret;
}

// spins until *flag != 0 (out = 1) or timeout_ns passed (out = 2)
.visible .entry wait_flag(.param .u64 flag, .param .u64 out, .param .u64 timeout_ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    ld.param.u64 %rd3, [timeout_ns];
    mov.u64 %rd4, %globaltimer;
    add.u64 %rd4, %rd4, %rd3;
LOOP:
    ld.relaxed.sys.u32 %r1, [%rd1];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SEEN;
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p2, %rd5, %rd4;
    @%p2 bra LOOP;
    mov.u32 %r2, 2;
    st.relaxed.sys.u32 [%rd2], %r2;
    ret;
SEEN:
    mov.u32 %r2, 1;
    st.relaxed.sys.u32 [%rd2], %r2;
    ret;
}
"""


@pytest.fixture
def pdl():
    if streams.Device(streams.get_device()).compute_capability < (9, 0):
        pytest.skip("programmatic dependent launch needs compute capability 9.0")
    mod = Module.from_ptx(PDL_PTX)
    from types import SimpleNamespace
    yield SimpleNamespace(
        primary=mod.get_kernel("pdl_primary", signature="pointer, uint64"),
        secondary=mod.get_kernel("pdl_secondary", signature="pointer"),
        wait_flag=mod.get_kernel("wait_flag", signature="pointer, pointer, uint64"))
    streams.synchronize_device()
    mod.close()


def _stamps(stream, pdl, *, serialization, spin_ms=50):
    stamps = DeviceBuffer(32, stream)
    streams.memset_async(stamps, 0, stream=stream)
    stream.launch_ex(pdl.primary, LaunchConfig(1, 32), stamps, spin_ms * 1000 * 1000)
    stream.launch_ex(pdl.secondary,
                     LaunchConfig(1, 32, programmatic_stream_serialization=serialization),
                     stamps)
    host = np.zeros(4, dtype=np.uint64)
    streams.memcpy_async(host, stamps, stream=stream)
    stream.synchronize()
    stamps.close()
    assert host.all(), f"a kernel did not stamp: {host}"
    return [int(x) for x in host]


# Two kernels of one stream overlapping: compute-sanitizer serializes them.
@pytest.mark.concurrent
def test_pdl_dependent_kernel_starts_before_the_primary_ends(stream, pdl):
    p_start, p_end, s_start, s_after_wait = _stamps(stream, pdl, serialization=True)
    assert p_end - p_start >= 50 * 1000 * 1000
    # Started while the primary was still spinning ...
    assert s_start < p_end, (p_start, p_end, s_start, s_after_wait)
    # ... and griddepcontrol.wait held it until the primary had finished.
    assert s_after_wait >= p_end


def test_without_pdl_the_dependent_kernel_starts_after_the_primary(stream, pdl):
    p_start, p_end, s_start, s_after_wait = _stamps(stream, pdl, serialization=False)
    assert s_start >= p_end


def test_programmatic_event_orders_another_stream(pdl):
    # CUDA lets (but does not make) work waiting on a programmatic event
    # start before the primary kernel ends: on an H100 the secondary ran
    # after it.  Checked: the event orders the other stream after the
    # primary's trigger, everything completes and the event is reached.
    a, b = Stream(), Stream()
    ev = Event()
    stamps = None
    try:
        stamps = DeviceBuffer(32, a)
        streams.memset_async(stamps, 0, stream=a)
        a.synchronize()
        a.launch_ex(pdl.primary, LaunchConfig(1, 32, programmatic_event=ev), stamps,
                    50 * 1000 * 1000)
        b.wait_event(ev)
        b.launch_ex(pdl.secondary, LaunchConfig(1, 32), stamps)
        assert b.synchronize(timeout=20)
        assert a.synchronize(timeout=20)
        assert ev.query()
        host = np.zeros(4, dtype=np.uint64)
        streams.memcpy_async(host, stamps, stream=a)
        a.synchronize()
        assert host.all(), host
        assert host[1] - host[0] >= 50 * 1000 * 1000, host
        assert host[2] >= host[0], host     # not before the primary started
    finally:
        if stamps is not None:
            stamps.close()
            a.synchronize()
        for obj in (ev, a, b):
            obj.close()


def test_completion_event_fires_while_the_kernel_still_runs(stream, pdl):
    flag, out = PinnedBuffer(4), PinnedBuffer(4)
    flag_h = np.frombuffer(flag, dtype=np.uint32)
    out_h = np.frombuffer(out, dtype=np.uint32)
    flag_h[0] = 0
    out_h[0] = 0
    started = Event()
    try:
        stream.launch_ex(pdl.wait_flag, LaunchConfig(1, 1, completion_event=started), flag, out,
                         10 * 1000 * 1000 * 1000)
        deadline = time.monotonic() + 5
        while not started.query():
            assert time.monotonic() < deadline, "the launch-completion event never fired"
            time.sleep(0.001)
        # Every block has started, none can finish before the flag is set.
        time.sleep(0.05)
        assert not stream.query()
        assert out_h[0] == 0
        flag_h[0] = 1
        assert stream.synchronize(timeout=20)
        assert out_h[0] == 1, "the kernel timed out instead of seeing the flag"
    finally:
        flag_h[0] = 1
        stream.synchronize()
        del flag_h, out_h
        started.close()
        flag.close()
        out.close()


def test_priority_sync_domain_and_prepared_launch_compute(stream, kernels, device_buffer):
    buf = device_buffer()
    least, greatest = streams.stream_priority_range()
    fill = LaunchConfig(GRID, BLOCK, priority=greatest, mem_sync_domain="remote")
    stream.launch_ex(kernels.fill, fill, buf, 40, N)
    inc = kernels.increment.prepare(LaunchConfig(GRID, BLOCK, priority=least), buf, N)
    assert inc.config.priority == least
    inc.launch(stream)
    kernels.increment.prepare(buf, N, config=LaunchConfig(GRID, BLOCK)).launch(stream)
    assert (to_host(buf, stream) == 42).all()


def test_short_form_still_makes_the_config(stream, kernels, device_buffer):
    buf = device_buffer()
    stream.launch_ex(kernels.fill, GRID, BLOCK, buf, 7, N, cooperative=False)
    assert (to_host(buf, stream) == 7).all()
    with pytest.raises(TypeError, match="belong in the config"):
        stream.launch_ex(kernels.fill, LaunchConfig(GRID, BLOCK), buf, 7, N, shared_mem=0)
    with pytest.raises(TypeError, match="takes 3 argument"):
        stream.launch_ex(kernels.fill, LaunchConfig(GRID, BLOCK), buf)


def test_launch_events_are_checked(stream, kernels):
    timing = Event(enable_timing=True)
    try:
        with pytest.raises(ValueError, match="completion_event must be created with "
                                             "enable_timing=False"):
            LaunchConfig(1, 1, completion_event=timing)
        with pytest.raises(TypeError, match="programmatic_event must be a streams.Event"):
            LaunchConfig(1, 1, programmatic_event=stream)
        ev = Event()
        cfg = LaunchConfig(1, 1, completion_event=ev)
        ev.close()
        with pytest.raises(ValueError, match="closed"):
            stream.launch_ex(kernels.fill, cfg, None, 0, 0)
    finally:
        timing.close()
        streams.synchronize_device()
