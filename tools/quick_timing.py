"""Rough per-call timings of the hot paths (a probe; the real numbers come
from `python -m benchmarks.run`, which also runs the C floor)."""
import time

from streams import Event, Stream
from streams.testing import launch_empty


def per_call(fn, n=200_000):
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


s = Stream()
ev = Event()
s.synchronize()
rows = {
    "stream.query": per_call(s.query),
    "stream.synchronize": per_call(s.synchronize),
    "event.record": per_call(lambda: s.record(ev)),
    "event.query": per_call(ev.query),
    "stream.wait_event": per_call(lambda: s.wait_event(ev)),
    "event create+close": per_call(lambda: Event().close(), 50_000),
    "stream create+close": per_call(lambda: Stream().close(), 20_000),
    "launch_empty": per_call(lambda: launch_empty(s), 50_000),
}
s.synchronize()
for k, v in rows.items():
    print(f"{k:24s} {v:8.0f} ns")
