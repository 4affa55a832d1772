"""Probe: how fast CUDA's thread runs Python host callbacks, how many the
driver queues behind a busy stream before an enqueue blocks, and how far
several producer threads get ahead of the callback thread, under the build
and interpreter it runs in (compare a GIL build with a free-threaded one).

    python -m benchmarks.probes.probe_callback_backlog    (on a GPU machine)

Rows:
  depth      enqueues behind a spinning stream that return before one blocks
             (Python callbacks, native no-op functions)
  drain      ns per callback while CUDA's thread works through a queue of
             them (first to last call, single producer, stream held busy
             while they were enqueued)
  producers  P threads enqueue Python callbacks on one stream for 2 s: the
             backlog (issued - ran) sampled every 0.25 s, the latency of a
             marker callback enqueued by the main thread at each sample,
             and the time to drain once they stop

What it shows on an H200 (driver 580.159.04):
  * CUDA queued 200,000 host functions behind a busy stream, Python or
    native, without one enqueue blocking: nothing in CUDA bounds a backlog.
  * Python 3.12 (GIL): 1.7-2.1 us per callback; 4 producer threads were
    481,000 callbacks ahead 1.3 s after they started (a callback enqueued
    then ran 4.7 s later), 8 threads 733,000.
  * Python 3.13t (no GIL), CUDA's thread deleting its thread state after
    each callback: 394-431 us per callback, so a test that races captures
    with callbacks waits minutes.  Keeping it (src/cudart/hostfn.h): 2.3-2.6 us,
    and 1, 4 and 8 producers (180,000-200,000 callbacks a second in all)
    stayed 1,000-16,000 callbacks ahead, a marker callback running 5-90 ms
    after its enqueue.
"""
import argparse
import sys
import threading
import time

import streams
from streams.testing import launch_empty, native_increment, spin

BLOCKED_S = 0.05
SPIN_US = 2_000_000


def gil_state():
    enabled = getattr(sys, "_is_gil_enabled", lambda: True)()
    return f"{sys.version.split()[0]} {'GIL' if enabled else 'no GIL'}"


def depth(s, native, counter):
    spin(s, SPIN_US)
    end = time.perf_counter() + SPIN_US / 1e6 - 0.4
    n = 0
    noop = (lambda _: None)
    while time.perf_counter() < end and n < 200_000:
        t0 = time.perf_counter()
        if native:
            s.launch_host_func(native_increment, counter.ptr)
        else:
            s.launch_host_func(noop, None)
        if time.perf_counter() - t0 > BLOCKED_S:
            break
        n += 1
    s.synchronize()
    return n


def drain(s, count):
    stamps = []

    def cb(_):
        stamps.append(time.perf_counter_ns())

    spin(s, 300_000)
    t0 = time.perf_counter()
    for _ in range(count):
        s.launch_host_func(cb, None)
    enq = (time.perf_counter() - t0) / count * 1e9
    s.synchronize()
    per = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    return enq, per


def producers(s, threads, seconds=2.0):
    ran = [0]
    lock = threading.Lock()
    issued = [0] * threads
    stop = threading.Event()

    def cb(_):
        with lock:
            ran[0] += 1

    def work(k):
        n = 0
        while not stop.is_set():
            s.launch_host_func(cb, None)
            n += 1
            issued[k] = n

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    started = time.monotonic()
    for t in ts:
        t.start()
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.25)
        marker = threading.Event()
        t0 = time.perf_counter()
        s.launch_host_func(lambda _: marker.set(), None)
        got = marker.wait(5.0)
        lat = (time.perf_counter() - t0) * 1e3 if got else float("inf")
        samples.append((sum(issued) - ran[0], lat))
    stop.set()
    elapsed = time.monotonic() - started     # past `seconds` while a marker waited
    for t in ts:
        t.join()
    t0 = time.perf_counter()
    backlog = sum(issued) - ran[0]
    s.synchronize()
    drain_s = time.perf_counter() - t0
    return sum(issued), elapsed, backlog, drain_s, samples


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.probe_callback_backlog",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    print("==", gil_state(), "streams", streams.__version__, flush=True)
    s = streams.Stream(non_blocking=True)
    launch_empty(s)
    s.synchronize()
    counter = streams.PinnedBuffer(8)
    for native in (False, True):
        n = depth(s, native, counter)
        print(f"depth {'native' if native else 'python'}: {n} enqueues before one blocked",
              flush=True)
    for count in (2000, 8000):
        enq, per = drain(s, count)
        print(f"drain {count}: enqueue {enq:.0f} ns/call, callbacks {per:.0f} ns each",
              flush=True)
    for threads in (1, 4, 8):
        total, elapsed, backlog, drain_s, samples = producers(s, threads)
        rows = " ".join(f"{b}/{lat:.1f}ms" for b, lat in samples)
        print(f"producers {threads}: issued {total} in {elapsed:.1f} s "
              f"({total / elapsed / 1e3:.0f}k/s), backlog at stop "
              f"{backlog}, drained in {drain_s:.2f} s; samples backlog/marker latency: {rows}",
              flush=True)
    counter.close()
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
