"""The timed loops and batches, as every worker runs them.

A contender's operation becomes a :class:`Case`: a ``timed(n)`` function
(the same generated loop for every Python contender) and untimed steps
around each batch.  :func:`run_batches` times one request of batches, each
next to a batch of the in-process floor.  The probes (``benchmarks/probes``)
time with :func:`median_ns` and :func:`batches_ns`: the same loop, batches
and garbage-collector rule, so that their numbers compare.
"""
import gc
import statistics
import threading
import time


def describe(exc):
    """An exception as one line of reasonable length, for a cell's reason."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def close_quietly(closers):
    """Undo what a set-up made, newest first; the error that ended it is the
    one to report, not a later one from cleaning up."""
    for fn in reversed(closers):
        try:
            fn()
        except Exception:
            pass


class NotAvailable(Exception):
    """The contender has no such operation (the cell says n/a, with why)."""


_LOOP = """\
def timed(n, *, {params}):
    r = range(n)
    t0 = _clock()
    for _ in r:
{body}
{tail}    return _clock() - t0
"""


def _indent(src, spaces):
    return "\n".join(" " * spaces + line for line in src.strip().splitlines())


def make_loop(body, tail=None, **env):
    """A ``timed(n) -> ns`` function running ``body`` n times.

    Every contender gets the same generated loop, its names bound as
    keyword defaults (fast locals), so the loop costs each column the same
    and a cell differs from another only by the library call in it.
    ``tail`` runs once after the loop, inside the timing.
    """
    env = dict(env, _clock=time.perf_counter_ns)
    src = _LOOP.format(params=", ".join(f"{k}={k}" for k in env),
                       body=_indent(body, 8),
                       tail=_indent(tail, 4) + "\n" if tail else "")
    ns = dict(env)
    exec(compile(src, f"<{body.strip().splitlines()[0]}>", "exec"), ns)
    return ns["timed"]


def make_stmt(body, **env):
    """A zero-argument function running ``body`` once (untimed helpers)."""
    src = "def run(*, {}):\n{}\n".format(", ".join(f"{k}={k}" for k in env), _indent(body, 4))
    ns = dict(env)
    exec(compile(src, f"<{body.strip().splitlines()[0]}>", "exec"), ns)
    return ns["run"]


def batches_ns(timed, n, reps, *, warmup=0, before=None, after=None):
    """ns per call of each of ``reps`` batches of ``n`` calls, sorted.

    ``timed(n) -> ns`` makes n calls (:func:`make_loop`'s shape, or a C
    loop such as ``floor_batch``).  A first batch of ``warmup`` calls is
    made and left out.  ``before()`` runs untimed before each batch, the
    warm-up's included, and ``after(k)`` after each, given its number of
    calls.  The garbage collector is off meanwhile, as in
    :func:`run_batches`.
    """
    sizes = ([warmup] if warmup else []) + [n] * reps
    out = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for k in sizes:
            if before is not None:
                before()
            ns = timed(k)
            if after is not None:
                after(k)
            out.append(ns / k)
    finally:
        if was_enabled:
            gc.enable()
    return sorted(out[1:] if warmup else out)


def calls(fn):
    """``timed(n) -> ns``: n calls of ``fn()`` in :func:`make_loop`'s loop."""
    return make_loop("fn()", fn=fn)


def median_ns(fn, n, reps, **batching):
    """The median ns per call of ``fn()`` over ``reps`` batches of ``n``
    calls (:func:`batches_ns`, which takes the same keywords)."""
    return statistics.median(batches_ns(calls(fn), n, reps, **batching))


class Case:
    """One contender's set-up for one operation.

    ``timed(n)`` returns the ns that n calls took; ``before(n)`` and
    ``after(n, ns)`` run untimed around each batch (``after`` returns True
    when the batch was disturbed: host_func_enqueue's stream drained);
    ``close()`` frees what the set-up made.
    """

    def __init__(self, timed, before=None, after=None, closers=(), note=None):
        self.timed = timed
        self.before = before
        self.after = after
        self.closers = list(closers)
        self.note = note

    def close(self):
        close_quietly(self.closers)
        self.closers = []


def run_producers(work, n, threads):
    """``work(k)`` in ``threads`` threads, k calls each and n in all, all
    started first and let go together: (when they were let go, when the
    last one finished) in ns, and the first exception one raised, or None."""
    go = threading.Event()
    errors = []

    def produce(k):
        go.wait()
        try:
            work(k)
        except BaseException as exc:     # noqa: BLE001 - returned to the caller
            errors.append(exc)

    shares = [n // threads + (i < n % threads) for i in range(threads)]
    pool = [threading.Thread(target=produce, args=(k,)) for k in shares]
    for t in pool:
        t.start()
    t0 = time.perf_counter_ns()
    go.set()
    for t in pool:
        t.join()
    return t0, time.perf_counter_ns(), (errors[0] if errors else None)


def producers(work, sync, threads):
    """``timed(n)``: ``work(k)`` in ``threads`` threads at once, k calls each
    and n in all, then ``sync()``; the timing starts when the threads, all
    started and waiting, are let go, and ends when ``sync`` returns."""
    def timed(n):
        t0, _, error = run_producers(work, n, threads)
        sync()
        ns = time.perf_counter_ns() - t0
        if error is not None:
            raise error
        return ns

    return timed


def _case_batch(case, iters):
    if case.before is not None:
        case.before(iters)
    ns = case.timed(iters)
    disturbed = case.after(iters, ns) if case.after is not None else False
    return ns, disturbed


def run_batches(case, iters, batches, warmup, floor=None):
    """One request: ``{"ns": [...], "drained": k, "floor_ns": [...],
    "floor_error": why or None}``, values in ns per call.

    ``floor(n) -> ns``, the in-process floor of the operation, times a batch
    of the same size next to each of the case's, first every other time so
    that drift falls on both alike.  Once it fails it is not called again:
    ``floor_error`` says why.  ``drained`` counts the batches disturbed
    (host_func_enqueue's stream drained).
    """
    out, floor_out = [], []
    drained = 0
    floor_error = None
    # A collection in the middle of a batch would be charged to the call.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for b in range(warmup + batches):
            for column in ("case", "floor") if b % 2 == 0 else ("floor", "case"):
                if column == "case":
                    ns, disturbed = _case_batch(case, iters)
                    if b >= warmup:
                        out.append(ns / iters)
                        drained += bool(disturbed)
                elif floor is not None and floor_error is None:
                    try:
                        ns = floor(iters)
                    except Exception as exc:
                        floor_error = describe(exc)
                        continue
                    if b >= warmup:
                        floor_out.append(ns / iters)
    finally:
        if was_enabled:
            gc.enable()
    return {"ns": out, "drained": drained, "floor_ns": floor_out, "floor_error": floor_error}
