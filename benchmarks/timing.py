"""The timed loops and batches, as every worker runs them.

A contender's operation becomes a :class:`Case`: a ``timed(n)`` function
(the same generated loop for every Python contender) and untimed steps
around each batch.  :func:`run_batches` times one request of batches.
"""
import gc
import time


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


def run_batches(case, iters, batches, warmup):
    """``(per-batch ns/call, batches disturbed)`` for one request."""
    out = []
    drained = 0
    # A collection in the middle of a batch would be charged to the call.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for b in range(warmup + batches):
            if case.before is not None:
                case.before(iters)
            ns = case.timed(iters)
            disturbed = case.after(iters, ns) if case.after is not None else False
            if b >= warmup:
                out.append(ns / iters)
                drained += bool(disturbed)
    finally:
        if was_enabled:
            gc.enable()
    return out, drained


