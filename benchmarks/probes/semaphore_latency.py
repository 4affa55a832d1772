"""Signal-to-wait latency between two processes on one GPU: a
TimelineSemaphore against an interprocess event and against a host
callback, as ratios in one run.

Two processes play ping-pong; each hop is "one side signals from its
stream, the other sees it on the host and answers the same way".  The
per-hop time is a round of N round trips over 2N, the median of the
rounds; the modes take turns within each round, so they share the
machine's minutes.

* ``semaphore``: ``sem.signal(stream, i)``; the peer's ``sem.wait_host(i)``.
* ``ipc event``: ``event.record(stream)`` of an interprocess event, then a
  shared-memory counter says which record it is; the peer spins on the
  counter, then on ``event.query()``.  The counter is what an event cannot
  say: whether the record it sees done is the new one.
* ``host callback``: ``stream.launch_host_func(f)``, f stores the counter;
  the peer spins on it.
* ``semaphore host side``: ``signal_host`` and ``wait_host``: no GPU, the
  floor of the semaphore's host side.

    python -m benchmarks.probes.semaphore_latency [--trips 2000] [--rounds 5] [--modes M,...]
"""
import argparse
import multiprocessing as mp
import statistics
import time
from multiprocessing import shared_memory

HOST_ONLY = "semaphore host side"   # the one mode without a GPU
MODES = ("semaphore", "ipc event", "host callback", HOST_ONLY)
TIMEOUT_S = 20.0


class Timeout(RuntimeError):
    pass


def _spin(pred, what):
    end = time.monotonic() + TIMEOUT_S
    k = 0
    while not pred():
        k += 1
        if not k & 1023 and time.monotonic() > end:
            raise Timeout(f"no {what} within {TIMEOUT_S} s")


def _wait(sem, v):
    if not sem.wait_host(v, timeout=TIMEOUT_S):
        raise Timeout(f"semaphore value {v} not reached within {TIMEOUT_S} s")


class Side:
    """One process's half: ``me`` 0 (parent) or 1 (child).  Index ``me``
    of the pairs is what this side signals, ``1 - me`` what it waits for."""

    def __init__(self, me, sems, events, flags, gpu):
        import streams
        self.me, self.sems, self.events, self.flags = me, sems, events, flags
        self.stream = streams.Stream(non_blocking=True) if gpu else None

    def _set_flag(self, arg):
        self.flags[arg[0]] = arg[1]

    def hop_out(self, mode, i):
        me, s, flags = self.me, self.stream, self.flags
        if mode == "semaphore":
            self.sems[me].signal(s, i)
        elif mode == "ipc event":
            self.events[me].record(s)
            flags[me] = i
        elif mode == "host callback":
            s.launch_host_func(self._set_flag, (me, i))
        else:
            self.sems[me].signal_host(i)

    def hop_in(self, mode, i):
        other, flags = 1 - self.me, self.flags
        if mode in ("semaphore", HOST_ONLY):
            _wait(self.sems[other], i)
        elif mode == "ipc event":
            _spin(lambda: flags[other] == i, "counter")
            ev = self.events[other]
            _spin(ev.query, "event")
        else:
            _spin(lambda: flags[other] == i, "callback")

    def close(self):
        if self.stream is not None:
            self.stream.synchronize()
            self.stream.close()


def _gpu(modes):
    return any(m != HOST_ONLY for m in modes)


def child(conn, sem_descs, ev_handles, shm_name):
    import numpy as np

    import streams
    shm = shared_memory.SharedMemory(name=shm_name)
    try:
        flags = np.ndarray(2, dtype=np.int64, buffer=shm.buf)
        sems = [streams.TimelineSemaphore.import_(d) for d in sem_descs]
        events = [streams.Event.from_ipc_handle(h) for h in ev_handles]
        side = Side(1, sems, events, flags, bool(ev_handles))
        try:
            while True:
                msg = conn.recv()
                if msg is None:
                    break
                mode, base, n = msg
                conn.send("ready")
                for i in range(base + 1, base + n + 1):
                    side.hop_in(mode, i)
                    side.hop_out(mode, i)
                if side.stream is not None:
                    side.stream.synchronize()
                conn.send("done")
        finally:
            side.close()
            for e in events:
                e.close()
            for sem in sems:
                sem.close()
            del flags
    except BaseException as exc:   # the parent reports it and stops
        conn.send(f"child failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        shm.close()


def run(trips, rounds, modes=MODES):
    import numpy as np

    import streams
    shm = shared_memory.SharedMemory(create=True, size=64)
    flags = np.ndarray(2, dtype=np.int64, buffer=shm.buf)
    flags[:] = 0
    sems = [streams.TimelineSemaphore(), streams.TimelineSemaphore()]
    gpu = _gpu(modes)
    events = [streams.Event(interprocess=True) for _ in range(2)] if gpu else []
    side = Side(0, sems, events, flags, gpu)
    if gpu:
        for sem in sems:     # register the page before any wait can depend on it
            sem.wait(side.stream, 0)
        side.stream.synchronize()
    ctx = mp.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=child, args=(child_conn, [x.export() for x in sems],
                                           [e.ipc_handle() for e in events], shm.name))
    proc.start()
    base = 0
    times = {m: [] for m in modes}

    def one(mode, n):
        nonlocal base
        conn.send((mode, base, n))
        if not conn.poll(60):
            raise Timeout("the child did not start")
        msg = conn.recv()
        if msg != "ready":
            raise RuntimeError(msg)
        t0 = time.perf_counter_ns()
        for i in range(base + 1, base + n + 1):
            side.hop_out(mode, i)
            side.hop_in(mode, i)
        t1 = time.perf_counter_ns()
        if not conn.poll(60):
            raise Timeout("the child did not finish")
        msg = conn.recv()
        if msg != "done":
            raise RuntimeError(msg)
        base += n
        return (t1 - t0) / (2 * n)

    try:
        for mode in modes:       # warm-up: the first GPU ops, the callback thread
            one(mode, 50)
        for r in range(rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for mode in order:
                times[mode].append(one(mode, trips))
        conn.send(None)
        proc.join(60)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        side.close()
        path = sems[0].path if gpu else None
        for e in events:
            e.close()
        for sem in sems:
            sem.close()
        del flags
        shm.close()
        shm.unlink()
    med = {m: statistics.median(v) for m, v in times.items()}
    where = f"device: {streams.Device().name}; semaphore GPU path: {path}" if gpu else "host only"
    print(f"{where}; {trips} round trips x {rounds} rounds, median per hop")
    ref = "semaphore" if "semaphore" in med else modes[0]
    print(f"{'mode':24s} {'us per hop':>11s} {'min':>8s} {'max':>8s} {'vs ' + ref:>13s}")
    for m in modes:
        v = times[m]
        print(f"{m:24s} {med[m] / 1e3:11.2f} {min(v) / 1e3:8.2f} {max(v) / 1e3:8.2f} "
              f"{med[m] / med[ref]:12.2f}x")
    print(f"child exit code: {proc.exitcode}")
    return med


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes.semaphore_latency",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trips", type=int, default=2000, help="round trips per round (2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (5)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="a comma-separated subset of: " + ", ".join(MODES))
    a = ap.parse_args(argv)
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"unknown mode(s) {bad}; choose from: {', '.join(MODES)}")
    return run(a.trips, a.rounds, modes)


if __name__ == "__main__":
    main()
