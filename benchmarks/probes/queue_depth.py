"""How many enqueues the driver takes behind a busy stream before one blocks.

Why every enqueue releases the GIL (streams/_stream.pyx, the GIL rule):
past this depth an enqueue blocks in the driver until the GPU drains the
queue.  A stream is held busy by a spin kernel (GPU-timed, so nothing on the host is
needed for it to end: no deadlock whatever the GIL does), then one kind of
enqueue is repeated until a call takes longer than ``BLOCKED_S``.

Also answers: does a full queue on one stream block enqueues on other streams
(streams share the driver's hardware channels), and does a status call block
while another thread is stuck in an enqueue?

    python -m benchmarks.probes.queue_depth    (on a GPU machine; prints a table)
"""
import argparse
import sys
import threading
import time

import streams
from streams.testing import launch_empty, spin

BLOCKED_S = 0.05        # an enqueue slower than this waited for queue room
SPIN_US = 3_000_000     # how long the spin holds the stream
LIMIT = 200_000


def depth(kind, stream, other):
    """Enqueues of ``kind`` on ``stream`` that return before one blocks."""
    spin(stream, SPIN_US)
    ev = streams.Event()
    other_ev = streams.Event()
    other_ev.record(other)
    graph_exec = None
    if kind == "graph":
        with other.capture() as cap:
            for _ in range(10):
                launch_empty(other)
        graph_exec = cap.graph.instantiate()
    t_end = time.perf_counter() + SPIN_US / 1e6
    n = 0
    while n < LIMIT and time.perf_counter() < t_end - 0.5:
        t0 = time.perf_counter()
        if kind == "launch":
            launch_empty(stream)
        elif kind == "record":
            ev.record(stream)
        elif kind == "wait_event":
            stream.wait_event(other_ev)
        elif kind == "graph":
            graph_exec.launch(stream)
        if time.perf_counter() - t0 > BLOCKED_S:
            break
        n += 1
    stream.synchronize()
    if graph_exec is not None:
        graph_exec.close()
    return n


def shared_queue(full_at):
    """Fill one stream's queue to just below ``full_at``, then time one launch
    on each of 40 other streams: slow ones share the full queue."""
    busy = streams.Stream(non_blocking=True)
    others = [streams.Stream(non_blocking=True) for _ in range(40)]
    spin(busy, SPIN_US)
    for _ in range(max(full_at - 8, 0)):
        launch_empty(busy)
    slow = []
    for i, s in enumerate(others):
        t0 = time.perf_counter()
        launch_empty(s)
        if time.perf_counter() - t0 > BLOCKED_S:
            slow.append(i)
    busy.synchronize()
    for s in others:
        s.synchronize()
    return slow


def query_while_blocked(full_at):
    """A thread blocks in a launch on a full queue (GIL released by the
    build under test only if its rule says so); meanwhile the main thread
    times ``query()`` of an idle stream."""
    busy = streams.Stream(non_blocking=True)
    idle = streams.Stream(non_blocking=True)
    spin(busy, SPIN_US)
    started = threading.Event()

    def fill():
        started.set()
        for _ in range(full_at + 200):
            launch_empty(busy)

    t = threading.Thread(target=fill)
    t.start()
    started.wait()
    time.sleep(0.3)
    worst = 0.0
    for _ in range(200):
        t0 = time.perf_counter()
        idle.query()
        worst = max(worst, time.perf_counter() - t0)
    t.join()
    busy.synchronize()
    return worst


def main(argv=None):
    argparse.ArgumentParser(prog="python -m benchmarks.probes.queue_depth", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    s = streams.Stream(non_blocking=True)
    other = streams.Stream(non_blocking=True)
    launch_empty(s)
    s.synchronize()
    rows = {}
    for kind in ("launch", "record", "wait_event", "graph"):
        rows[kind] = depth(kind, s, other)
        print(f"{kind:12s} enqueues before one blocked: {rows[kind]}", flush=True)
    slow = shared_queue(rows["launch"])
    print(f"other streams slowed by one full stream: {len(slow)} of 40 {slow}", flush=True)
    worst = query_while_blocked(rows["launch"])
    print(f"worst idle-stream query while another thread is blocked: {worst * 1e6:.1f} us",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
