"""Hostile use: races with close(), misuse from callbacks, foreign memory, leaks.

Each numbered section is one failure mode of the design, numbered in the
order the reliability audit found them.  Scenarios that could crash the
process run in a child Python, so that the suite reports a crash instead of
dying with it.
"""
import gc
import os
import sys
import textwrap
import threading
import time

import pytest

from _support import CLOSE_RACE_HARNESS, MS, N, in_thread, run_python, run_threads, to_host

import streams
from streams import DeviceBuffer, Event, Graph, Stream
from streams.testing import builtin_module, fill_u32, spin

np = pytest.importorskip("numpy", reason="the hostile tests check results with numpy")

pytestmark = pytest.mark.gpu


def _child(code, timeout=120):
    result = run_python(textwrap.dedent(code), timeout=timeout)
    assert result.returncode == 0, (
        f"child exited with {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    return result.stdout


# ---- 1. close() while another thread uses the handle ------------------------------------------

@pytest.mark.slow   # a stress test: minutes under compute-sanitizer
def test_close_races_with_users_in_eight_threads():
    out = _child(CLOSE_RACE_HARNESS + textwrap.dedent("""
        import streams
        from streams.testing import spin
        ROUNDS, THREADS = 200, 8
        closed_errors = other_errors = 0
        for r in range(ROUNDS):
            s = streams.Stream(non_blocking=True)
            ev = streams.Event()
            other = streams.Stream(non_blocking=True)
            g = streams.Graph(); g.add_empty_node(); exe = g.instantiate()
            spin(s, 200)
            ops = [s.synchronize, lambda: ev.record(s), lambda: other.wait_event(ev),
                   lambda: exe.launch(s), lambda: spin(s, 1), ev.synchronize]
            closed, unexpected = race_close(ops, [s, ev, exe], THREADS, 20)
            closed_errors += closed; other_errors += unexpected
            other.synchronize(); other.close(); g.close()
        streams.synchronize_device()
        c = streams.debug_counters()
        assert c["live_streams"] == 0 and c["live_events"] == 0 and c["live_graph_execs"] == 0, c
        print("OK", other_errors)
    """), timeout=240)
    assert out.split() == ["OK", "0"], out


@pytest.mark.slow   # a stress test: minutes under compute-sanitizer
def test_close_races_with_calls_that_keep_the_gil():
    # Queries, records, waits, launches and graph launches that keep the GIL
    # check only the closed flag (HandleOwner._hold): a close() in another
    # thread must land before such a call (ValueError naming the closed
    # object) or after it, never inside.  The switch interval makes Python
    # hand the GIL over as often as it can; the foreign stream takes the
    # raw-handle paths of Event.record and Event.wait.
    out = _child(CLOSE_RACE_HARNESS + textwrap.dedent("""
        import sys, streams
        from streams.testing import builtin_module
        sys.setswitchinterval(1e-6)
        ROUNDS, THREADS = 150, 6
        class Foreign:
            def __init__(self, s): self.s = s
            def __cuda_stream__(self): return (0, self.s.handle)
        empty = builtin_module().get_kernel("streams_empty")
        closed_errors = other_errors = 0
        for r in range(ROUNDS):
            s, other = streams.Stream(non_blocking=True), streams.Stream(non_blocking=True)
            ev, done = streams.Event(), streams.Event()
            other.record(done)
            foreign = Foreign(other)
            prepared = empty.prepare(1, 1)
            g = streams.Graph(); g.add_empty_node(); exe = g.instantiate()
            # An executable that holds its kernel's module marks each launch.
            g2 = streams.Graph(); g2.add_kernel_node("empty", 1, 1); marked = g2.instantiate()
            ops = [s.query, done.query, lambda: s.record(ev), lambda: s.wait_event(done),
                   lambda: ev.record(foreign), lambda: ev.wait(foreign), ev.query,
                   lambda: s.launch(empty, 1, 1), lambda: prepared.launch(s),
                   lambda: exe.launch(s), lambda: marked.launch(s), s.synchronize]
            closed, unexpected = race_close(ops, [s, ev, done, exe, marked], THREADS, 60)
            closed_errors += closed; other_errors += unexpected
            other.synchronize(); other.close(); g.close(); g2.close()
            del marked
        streams.synchronize_device()
        c = streams.debug_counters()
        assert c["live_streams"] == 0 and c["live_events"] == 0 and c["live_graph_execs"] == 0, c
        assert streams._cudart._parked_count() == 0, streams._cudart._parked_count()
        print("OK", other_errors, closed_errors > 0)
    """), timeout=240)
    assert out.split()[-3:] == ["OK", "0", "True"], out


def test_close_waits_for_a_synchronize_in_flight(stream):
    s = Stream()
    spin(s, 300 * MS)
    result = []
    t = threading.Thread(target=lambda: result.append(s.synchronize()))
    t.start()
    time.sleep(0.05)
    s.close()                      # the waiter still holds the handle
    assert s.closed
    t.join(5)
    assert result == [True]
    with pytest.raises(ValueError, match="closed Stream"):
        s.query()


# ---- 2. argument counts are checked against the kernel -----------------------------------------

def test_kernel_without_signature_refuses_too_few_arguments(stream):
    mod = builtin_module()
    try:
        fill = mod.get_kernel("streams_fill_u32")
        assert fill.num_params == 3 and fill.param_sizes == (8, 4, 8)
        with pytest.raises(TypeError, match=r"takes 3 argument\(s\), got 1"):
            stream.launch(fill, 1, 1, np.uint64(0))
        with pytest.raises(TypeError, match=r"takes 3 argument\(s\), got 1"):
            fill.prepare(1, 1, np.uint64(0))
        with pytest.raises(TypeError, match=r"takes 3 argument\(s\)"):
            Graph().add_kernel_node(fill, 1, 1)
        with pytest.raises(TypeError, match=r"a int64 \(8 bytes\) for a 4-byte parameter"):
            stream.launch(fill, 1, 1, np.uint64(0), np.int64(1), np.uint64(0))
        with pytest.raises(ValueError, match=r"names 2 parameter\(s\), but the kernel takes 3"):
            mod.get_kernel("streams_fill_u32", signature="pointer, uint32")
        with pytest.raises(ValueError, match=r"signature\[1\] .* is uint64 \(8 bytes\)"):
            mod.get_kernel("streams_fill_u32", signature="pointer, uint64, uint64")
        stream.synchronize()
    finally:
        mod.close()


# ---- 3. a buffer outliving its stream is freed after that stream's work -----------------------

def test_buffer_freed_after_its_closed_streams_work(device_buffer):
    s = Stream(non_blocking=True)
    t = Stream(non_blocking=True)
    buf = DeviceBuffer(N * 4, s)
    spin(s, 200 * MS)
    fill_u32(s, buf, 1, N)          # runs after the spin
    s.close()
    buf.close()                     # must not be reused before the fill ran
    fresh = DeviceBuffer(N * 4, t)
    streams.memset_async(fresh, 0, stream=t)
    t.synchronize()
    streams.synchronize_device()
    assert (to_host(fresh, t) == 0).all(), "the new buffer aliased memory the old fill wrote"
    fresh.close()
    t.synchronize()
    t.close()


# ---- 4. DLPack consumers keep the memory -------------------------------------------------------

def test_dlpack_export_defers_the_free():
    torch = pytest.importorskip("torch")
    s = Stream()
    buf = DeviceBuffer(N * 4, s)
    fill_u32(s, buf, 5, N)
    s.synchronize()
    tensor = torch.from_dlpack(buf)
    before = streams.debug_counters()["live_buffers"]
    buf.close()
    assert buf.closed
    assert streams.debug_counters()["live_buffers"] == before, "freed under a live tensor"
    other = DeviceBuffer(N * 4, s)
    fill_u32(s, other, 7, N)
    s.synchronize()
    assert int(tensor.view(torch.int32).sum()) == 5 * N, "the tensor's memory was reused"
    del tensor
    gc.collect()
    # `other` came, the exported buffer went with the tensor
    assert streams.debug_counters()["live_buffers"] == before
    other.close()
    s.synchronize()
    s.close()


# ---- 5. the consuming side honours CAI's stream and hands DLPack its stream ---------------------

class _CAI:
    def __init__(self, buf, stream):
        self.__cuda_array_interface__ = {
            "shape": (N,), "typestr": "<u4", "data": (buf.ptr, False), "strides": None,
            "version": 3, "stream": stream.handle}


def test_cai_stream_is_waited_for_when_consuming(device_buffer):
    producer = Stream(non_blocking=True)
    consumer = Stream(non_blocking=True)
    buf = device_buffer()
    spin(producer, 200 * MS)
    fill_u32(producer, buf, 9, N)
    host = np.zeros(N, np.uint32)
    streams.memcpy_async(host, _CAI(buf, producer), stream=consumer)
    consumer.synchronize()
    assert (host == 9).all(), "the copy ran before the producer's work"
    # and as a kernel argument
    out = device_buffer()
    spin(producer, 200 * MS)
    fill_u32(producer, buf, 11, N)
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    consumer.launch(inc, 4, 256, _CAI(buf, producer), N)
    streams.memcpy_async(out, buf, stream=consumer)
    assert (to_host(out, consumer) == 12).all()
    producer.synchronize()
    mod.close()
    producer.close()
    consumer.close()


def test_dlpack_producer_is_handed_the_consuming_stream(device_buffer):
    consumer = Stream(non_blocking=True)
    buf = device_buffer()
    seen = []

    class Producer:
        def __dlpack_device__(self):
            return buf.__dlpack_device__()

        def __dlpack__(self, stream=None):
            seen.append(stream)
            return buf.__dlpack__(stream=stream)

    streams.memset_async(Producer(), 3, stream=consumer)
    host = to_host(buf, consumer)
    assert seen == [consumer.handle]
    assert (host == 0x03030303).all()
    consumer.close()


# ---- 6. resources dropped on CUDA's callback thread are released, not leaked --------------------

def _made_by_an_exited_thread(make):
    """``make()`` (a list) run in a thread that has exited when this returns.

    So that a callback that clears the list frees its items on CUDA's
    callback thread whatever the build.  With a GIL the last drop frees an
    object wherever it happens.  On a free-threaded CPython an object belongs
    to the thread that made it (biased reference counting): a drop to zero
    on another thread is handed back to that thread, which frees it the next
    time it runs Python -- items made by the test's own thread would be freed
    there, outside any callback, and the deferred releases these tests are
    about would never be taken.  An object whose owner has exited is merged
    and freed by the thread that drops it (CPython's Python/brc.c)."""
    return in_thread(make)


def test_buffers_dropped_in_callbacks_are_freed(stream):
    # 40 x 4 GiB: leaking them would exhaust any GPU long before the end.
    before = streams.debug_counters()
    for _ in range(40):
        held = _made_by_an_exited_thread(lambda: [DeviceBuffer(4 << 30, stream)])
        stream.launch_host_func(lambda objs: objs.clear(), held)
        del held
        stream.synchronize()
        streams._cudart._drain_deferred()
    after = streams.debug_counters()
    assert after["live_buffers"] == before["live_buffers"]
    # Each buffer was deallocated on CUDA's callback thread, where CUDA may
    # not be called: its free must have gone through the deferred queue.
    assert after["deferred_releases"] - before["deferred_releases"] >= 40, (before, after)


def test_every_handle_owner_dropped_in_a_callback_is_released(stream):
    before = streams.debug_counters()
    keep = []

    def make():
        mod = builtin_module()
        g = Graph()
        g.add_empty_node()
        return [Stream(), Event(), g, g.instantiate(), mod, mod.get_kernel("streams_empty"),
                streams.PinnedBuffer(4096), streams.ManagedBuffer(4096)]

    # All made by one thread: a later maker could reuse an earlier one's
    # thread id while that one's objects wait for their callback.
    for objs in _made_by_an_exited_thread(lambda: [make() for _ in range(3)]):
        stream.launch_host_func(lambda objs: objs.clear(), objs)
    del objs
    stream.synchronize()
    deadline = time.monotonic() + 5
    while True:
        streams._cudart._drain_deferred()
        after = streams.debug_counters()
        live = {k: after[k] - before[k] for k in after if k.startswith("live_")}
        if not any(live.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not any(live.values()), live
    assert after["deferred_releases"] > before["deferred_releases"]


# ---- 7. wait_stream on the per-thread stream, from many threads -----------------------------------

@pytest.mark.slow   # a stress test: minutes under compute-sanitizer
def test_wait_stream_on_per_thread_streams_from_16_threads():
    errors = []
    other_streams = [Stream(non_blocking=True) for _ in range(16)]

    def work(i):
        other = other_streams[i]
        try:
            for _ in range(10):
                spin(Stream.per_thread, 30 * MS)
                other.wait_stream(Stream.per_thread)
                # Done while the spin it waits for still runs: out of order.
                # (Both done is timing, not order: a thread can sleep 30 ms.)
                if other.query() and not Stream.per_thread.query():
                    errors.append("a wait finished before its thread's spin")
                other.synchronize()
            Stream.per_thread.synchronize()
        except Exception as exc:
            errors.append(repr(exc))

    run_threads(work, 16)
    for s in other_streams:
        s.close()
    assert errors == []


# ---- 8. a failed capture leaves nothing behind ------------------------------------------------------

def test_failed_capture_to_graph_is_forgotten(stream):
    target = Graph()
    other = Stream()
    stream.begin_capture()
    with pytest.raises(streams.CudaError):
        stream.begin_capture_to_graph(target)   # already capturing
    stream.end_capture().close()
    # an invalidated capture into `target`
    other.begin_capture_to_graph(target)
    with pytest.raises(streams.CudaError):
        other.synchronize()        # not allowed during capture: invalidates it
    with pytest.raises(streams.CudaError):
        other.end_capture()
    # CUDA destroyed the graph of the invalidated capture: the Graph says so
    # and has nothing left to release.
    assert target.closed
    target.close()
    with other.capture() as cap:
        spin(other, 1)
    assert cap.graph is not target
    cap.graph.close()
    other.close()


# ---- 9. host memory is not a kernel pointer ------------------------------------------------------------

def test_host_array_refused_as_kernel_pointer(stream, device_buffer):
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    host = np.zeros(N, np.uint32)
    with pytest.raises(TypeError, match="argument 0 is CPU memory"):
        stream.launch(inc, 1, 1, host, N)
    with pytest.raises(ValueError, match="argument 0=0x.* is not memory CUDA knows"):
        stream.launch(inc, 1, 1, host.ctypes.data, N)
    buf = device_buffer()
    stream.launch(inc, 4, 256, buf, N)          # the context is healthy
    assert (to_host(buf, stream) == 1).all()
    mod.close()


# ---- 10. no dead stream handle is exported --------------------------------------------------------------

def test_exports_after_the_stream_closed_name_no_dead_handle():
    s = Stream()
    buf = DeviceBuffer(4096, s)
    dead = s.handle
    s.close()
    replacement = Stream()         # CUDA may hand out the same handle again
    cai = buf.__cuda_array_interface__
    assert cai["stream"] == 1
    capsule = buf.__dlpack__(stream=replacement.handle)
    del capsule
    buf.close()
    replacement.synchronize()
    replacement.close()
    assert dead   # (the handle value itself is not exported any more)


# ---- 11. per-thread save stacks ----------------------------------------------------------------------------

def test_one_capture_mode_object_in_eight_threads():
    mode = streams.capture_mode("relaxed")
    modes = ["global", "thread_local"]
    errors = []
    barrier = threading.Barrier(8)

    def work(i):
        mine = modes[i % 2]
        streams.exchange_capture_mode(mine)
        barrier.wait()
        for _ in range(50):
            with mode:
                time.sleep(0)
            got = streams.exchange_capture_mode(mine)
            if got != mine:
                errors.append((i, mine, got))

    run_threads(work, 8)
    assert errors == []


# ---- 12. everything that reaches CUDA is guarded inside callbacks -------------------------------------------

def test_every_cuda_path_refuses_inside_a_callback(stream):
    mod = builtin_module()
    victims = {
        "Stream.close": Stream(), "Event.close": Event(), "Graph.close": Graph(),
        "Module.close": mod, "DeviceBuffer.close": DeviceBuffer(64, stream),
    }
    g = Graph()
    g.add_empty_node()
    victims["GraphExec.close"] = g.instantiate()
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    start.record(stream)
    end.record(stream)
    outcomes = {}

    def inside(_):
        for name, obj in victims.items():
            outcomes[name] = _outcome(obj.close)
        outcomes["elapsed_time"] = _outcome(lambda: start.elapsed_time(end))
        outcomes["set_device"] = _outcome(lambda: streams.set_device(0))
        outcomes["Device.name"] = _outcome(lambda: streams.Device(0).name)
        outcomes["Graph.add_empty_node"] = _outcome(g.add_empty_node)
        outcomes["Graph()"] = _outcome(Graph)
        outcomes["synchronize_device"] = _outcome(streams.synchronize_device)

    stream.launch_host_func(inside, None)
    assert stream.synchronize(timeout=10) is True, "a wait inside the callback wedged the stream"
    assert outcomes and all(v == "refused" for v in outcomes.values()), outcomes
    for name, obj in victims.items():
        assert not obj.closed, f"{name} marked closed although CUDA refused"
        obj.close()
    g.close()
    start.close()
    end.close()


def _outcome(fn):
    try:
        fn()
    except RuntimeError as exc:
        return "refused" if "inside a host callback" in str(exc) else repr(exc)
    except BaseException as exc:
        return repr(exc)
    return "ran"


# ---- 13. device synchronization with timeouts reuses one helper thread ----------------------------------------

def _threads():
    return len(os.listdir("/proc/self/task"))


def test_synchronize_device_timeouts_leave_no_threads(stream):
    streams.synchronize_device()
    assert streams.synchronize_device(timeout=0) is True, "an idle device is synchronized"
    base = _threads()
    spin(stream, 2000 * MS)
    for _ in range(40):
        assert streams.synchronize_device(timeout=0.005) is False
    assert _threads() <= base + 1
    assert streams.synchronize_device() is True


# ---- 14. events made for a stream live on the stream's device ------------------------------------------------

def test_record_makes_its_event_on_the_streams_device(stream):
    ev = stream.record()
    assert ev.device_id == stream.device_id
    ev.close()


# ---- 15. synchronize lets the memory pool release what was freed ----------------------------------------------

def _reserved_in_default_pool(runtime):
    # This process's stream-ordered pool, not the device's free memory:
    # other processes (parallel test workers) allocate meanwhile.
    err, pool = runtime.cudaDeviceGetDefaultMemPool(streams.get_device())
    assert err == runtime.cudaError_t.cudaSuccess, err
    err, value = runtime.cudaMemPoolGetAttribute(
        pool, runtime.cudaMemPoolAttr.cudaMemPoolAttrReservedMemCurrent)
    assert err == runtime.cudaError_t.cudaSuccess, err
    return int(value)


def test_synchronize_releases_freed_pool_memory(stream):
    runtime = pytest.importorskip("cuda.bindings.runtime",
                                  reason="reads the pool's reserved memory through cuda.bindings")
    stream.synchronize()
    before = _reserved_in_default_pool(runtime)
    buf = DeviceBuffer(8 << 30, stream)
    assert _reserved_in_default_pool(runtime) >= before + (8 << 30)
    spin(stream, 20 * MS)      # the polling wait, not the idle fast path
    buf.close()
    stream.synchronize()
    after = _reserved_in_default_pool(runtime)
    assert after < before + (512 << 20), (before, after)


# ---- narrower risks ------------------------------------------------------------------------------------------------

def test_add_callback_during_capture_is_refused_and_the_capture_survives(stream):
    stream.begin_capture()
    with pytest.raises(RuntimeError, match="add_callback cannot be captured"):
        stream.add_callback(lambda *a: None)
    assert stream.capture_status == "active"
    stream.end_capture().close()


def test_infinite_timeout_means_no_limit(stream):
    spin(stream, 10 * MS)
    assert stream.synchronize(timeout=float("inf")) is True
    assert streams.synchronize_device(timeout=1e300) is True


def test_memset_node_refuses_values_above_a_byte(device_buffer):
    g = Graph()
    with pytest.raises(ValueError, match="value must be a byte"):
        g.add_memset_node(device_buffer(), 256, 4)
    g.close()


def test_host_buffers_export_dlpack_and_managed_cai_names_a_stream(stream):
    managed = streams.ManagedBuffer(4096, stream=stream)
    assert managed.__cuda_array_interface__["stream"] == stream.handle
    assert streams.ManagedBuffer(16).__cuda_array_interface__["stream"] == 1
    streams.memset_async(managed, 4, stream=stream)
    stream.synchronize()
    assert managed.__dlpack_device__()[0] == 13   # kDLCUDAManaged
    before = streams.debug_counters()["live_buffers"]
    capsule = managed.__dlpack__(stream=stream.handle)
    managed.close()                               # the capsule still holds it
    assert streams.debug_counters()["live_buffers"] == before
    del capsule
    assert streams.debug_counters()["live_buffers"] == before - 1
    pinned = streams.PinnedBuffer(64)
    capsule = pinned.__dlpack__()
    del capsule
    pinned.close()


def test_module_close_waits_for_its_queued_kernels(stream):
    mod = builtin_module()
    spin_k = mod.get_kernel("streams_spin", signature="uint64")
    stream.launch(spin_k, 1, 1, 300 * MS * 1000)
    t0 = time.perf_counter()
    mod.close()
    assert time.perf_counter() - t0 > 0.2, "unloaded under a running kernel"
    assert stream.synchronize(timeout=5) is True
    with pytest.raises(ValueError, match="closed Module"):
        stream.launch(spin_k, 1, 1, 1)


def test_prepared_launch_keeps_a_closed_buffer_until_it_goes(stream, device_buffer):
    mod = builtin_module()
    inc = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    buf = DeviceBuffer(N * 4, stream)
    streams.memset_async(buf, 0, stream=stream)
    launch = inc.prepare(4, 256, buf, N)
    buf.close()
    launch.launch(stream)          # still valid memory: the prepared launch holds it
    stream.synchronize()
    live = streams.debug_counters()["live_buffers"]
    del launch
    gc.collect()
    assert streams.debug_counters()["live_buffers"] == live - 1
    stream.synchronize()
    mod.close()
