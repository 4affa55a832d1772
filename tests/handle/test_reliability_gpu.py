"""Loads, faults and shutdown: nothing lost, nothing leaked, nothing crashed."""
import gc
import os
import signal
import textwrap
import threading
import time

import pytest

from _support import run_python

import streams
from streams import Event, Stream
from streams.testing import spin

pytestmark = pytest.mark.gpu

MS = 1000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.parametrize("cls, cycles", [(Event, 1_000_000), (Stream, 1_000_000)])
def test_million_create_destroy_cycles(cls, cycles):
    for _ in range(20_000):  # let allocators and the driver reach steady state
        cls().close()
    gc.collect()
    before_rss = rss_bytes()
    before = streams.debug_counters()
    t0 = time.perf_counter()
    for _ in range(cycles // 2):
        cls().close()
    for _ in range(cycles // 2):
        cls()  # destroyed by refcounting, through __dealloc__
    elapsed = time.perf_counter() - t0
    gc.collect()
    growth = rss_bytes() - before_rss
    after = streams.debug_counters()
    print(f"\n{cls.__name__}: {cycles} cycles in {elapsed:.2f} s "
          f"({elapsed / cycles * 1e9:.0f} ns each), RSS growth {growth / 1024:.0f} KiB")
    assert growth < 2 * 1024 * 1024
    key = "live_streams" if cls is Stream else "live_events"
    assert after[key] == before[key]


@pytest.mark.slow
def test_sixteen_threads_mixed_operations():
    code = textwrap.dedent("""
        import threading, streams
        from streams.testing import spin
        THREADS, OPS = 16, 10_000
        errors, totals = [], [0] * THREADS
        def work(t):
            try:
                s, other = streams.Stream(), streams.Stream(non_blocking=True)
                ev = streams.Event()
                ran = [0]
                def cb(_):
                    ran[0] += 1
                expected = 0
                for i in range(OPS):
                    op = i % 10
                    if op == 0:
                        tmp = streams.Stream(); tmp.close()
                    elif op == 1:
                        ev.record(s)
                    elif op == 2:
                        other.wait_event(ev)
                    elif op == 3:
                        s.query(); ev.query()
                    elif op == 4:
                        s.launch_host_func(cb, None); expected += 1
                    elif op == 5:
                        other.wait_stream(s)
                    elif op == 6:
                        spin(s, 5)
                    elif op == 7 and i % 100 == 7:
                        with s.capture(mode="thread_local") as cap:
                            spin(s, 1)
                        exe = cap.graph.instantiate(); exe.launch(s)
                        exe.close(); cap.graph.close()
                    elif op == 8 and i % 50 == 8:
                        s.synchronize()
                    elif op == 9:
                        tmp = streams.Event(); tmp.record(other); tmp.close()
                s.synchronize(); other.synchronize()
                assert ran[0] == expected, (ran[0], expected)
                totals[t] = ran[0]
                ev.close(); s.close(); other.close()
            except BaseException as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors[:3]
        c = streams.debug_counters()
        assert c["live_streams"] == 0 and c["live_events"] == 0, c
        print("OK", sum(totals))
    """)
    t0 = time.perf_counter()
    result = run_python(code, timeout=300)
    elapsed = time.perf_counter() - t0
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.split() == ["OK", str(16 * 1000)]
    print(f"\n16 threads x 10,000 mixed operations: {elapsed:.1f} s")


@pytest.mark.timing
@pytest.mark.parametrize("what", ["stream", "event", "device"])
def test_ctrl_c_interrupts_every_wait(stream, what):
    spin(stream, 3000 * MS)
    ev = stream.record()
    waits = {"stream": stream.synchronize, "event": ev.synchronize,
             "device": streams.synchronize_device}
    timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
    t0 = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        waits[what]()
    latency = time.perf_counter() - t0 - 0.2
    timer.join()
    print(f"\n{what}: KeyboardInterrupt {latency * 1e3:.1f} ms after SIGINT")
    assert latency < 0.1
    assert stream.query() is False
    assert waits[what](timeout=0.01) is False
    assert waits[what]() is True
    ev.close()


@pytest.mark.timing
def test_wait_latency_when_work_finishes(stream):
    """The interruptible wait wakes as fast as a plain cudaStreamSynchronize.

    Both waits run on the same kind of work (a 2 ms spin enqueued just
    before), in pairs, one of each, taken back to back so that both see the
    same load (the other test workers share the GPU), with the order
    alternating; the median of the pairs' differences is compared.  CuPy's
    Stream.synchronize is a plain cudaStreamSynchronize.  A wait that polls
    would add half its period on average.
    """
    cupy = pytest.importorskip("cupy", reason="the reference wait is CuPy's synchronize")
    plain = cupy.cuda.ExternalStream(stream.handle)

    def timed(wait):
        spin(stream, 2 * MS)
        t0 = time.perf_counter()
        wait()
        return time.perf_counter() - t0

    diffs, ours = [], []
    for i in range(60):
        if i % 2:
            o = timed(stream.synchronize)
            t = timed(plain.synchronize)
        else:
            t = timed(plain.synchronize)
            o = timed(stream.synchronize)
        diffs.append(o - t)
        ours.append(o)
    diffs.sort()
    ours.sort()
    extra_us = diffs[len(diffs) // 2] * 1e6
    print(f"\nsynchronize(): median wait {ours[len(ours) // 2] * 1e6:.0f} us, "
          f"{extra_us:+.1f} us (median of pairs) vs cudaStreamSynchronize")
    assert extra_us < 20


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_child_gets_clear_error():
    Stream().close()  # CUDA is initialised in this (parent) process
    pid = os.fork()
    if pid == 0:  # child: report through the exit code only
        code = 5
        try:
            streams.Stream()
            code = 3
        except RuntimeError as exc:
            code = 0 if "forked after CUDA was initialised" in str(exc) else 4
        except BaseException:
            code = 6
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    s = Stream()  # the parent goes on
    spin(s, 1)
    s.synchronize()
    s.close()


@pytest.mark.timing
def test_interpreter_exit_with_everything_live():
    code = textwrap.dedent("""
        import streams
        from streams.testing import spin
        s = streams.Stream()
        other = streams.Stream(non_blocking=True)
        events = [streams.Event(enable_timing=True) for _ in range(10)]
        g = streams.Graph()
        g.add_host_node(print, "graph host node")
        exe = g.instantiate()
        spin(s, 2_000_000)
        for e in events:
            e.record(s)
        exe.launch(s)
        for i in range(1000):
            s.launch_host_func(print, i)
        other.wait_stream(s)
        buf = streams.DeviceBuffer(1 << 20, s)
        Keep = (s, other, events, g, exe, buf)
    """)
    t0 = time.perf_counter()
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "" and result.stderr == ""
    assert time.perf_counter() - t0 < 10


def test_debug_counters_see_graph_payloads():
    def fn(arg):
        pass

    before = streams.debug_counters()
    g = streams.Graph()
    g.add_host_node(fn)
    exe = g.instantiate()
    g.close()
    assert streams.debug_counters()["live_host_calls"] == before["live_host_calls"] + 1
    exe.close()
    deadline = time.monotonic() + 2
    while streams.debug_counters()["live_host_calls"] != before["live_host_calls"]:
        assert time.monotonic() < deadline, streams.debug_counters()
        streams._cudart._drain_deferred()
        time.sleep(0.01)
