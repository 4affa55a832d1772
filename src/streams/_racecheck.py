"""The model of the cross-stream race checker: which enqueued operations
CUDA orders before which, and the buffer accesses that no order separates.

Pure Python, no CUDA.  The happens-before relation of streams, events and
the host is kept with vector clocks (one per stream, one per event's last
record, one for what the host has seen complete):

* an operation enqueued on a stream comes after the operations before it on
  that stream, after everything the host had seen complete when it was
  enqueued (a synchronize, an event's synchronize, a host access), and,
  on a blocking stream, after the legacy default stream's work, which
  itself comes after every blocking stream's work (CUDA's legacy
  semantics);
* ``record(event, stream)`` takes the stream's position; ``wait(stream,
  event)`` puts the stream after the event's last record at the time of the
  wait (a later record does not move it), as ``cudaStreamWaitEvent`` does;
  an event never recorded orders nothing.

Each buffer keeps the accesses that a later one could still race with,
each with the byte range it touched (the whole buffer unless given).  An
access conflicts with an earlier one of an overlapping range, one of them a
write, where the accessing stream is not ordered after the other access's
stream position: the report names both operations, their streams and where
each was enqueued.  An allocation and a free count as writes of the whole
buffer (a stream-ordered allocation used from another stream without a
wait, a free on one stream while another still reads).  Accesses on one
stream never conflict.  An access the host has seen complete (a
synchronize) is forgotten: everything enqueued later is ordered after it.
So is one a later write covers, or a later read of the same stream.

The keys of streams, events and buffers are any hashable value (the
package's hooks pass stream ids, event handles and buffer addresses);
``HOST`` stands for the host's own accesses, complete when their call
returns (a ``cudaFree``), and ``LEGACY`` for the legacy default stream, one
for all devices (a program on several devices may then see more order
than CUDA gives: a race missed, never one made up).  Streams and events
are never forgotten: the clocks grow with the streams a program has used.
Fed by the package's operations through streams.checker, and driven
directly by tests/racecheck/.
Thread-safe: one lock around the model (free-threaded CPython too).
"""
import sys
import threading
import traceback
import warnings

__all__ = ["HOST", "LEGACY", "Model", "Race", "RaceError", "RaceWarning"]

# Files whose frames are left out of where an access was made: the model's
# own, and its callers' inside the package (streams.checker adds itself).
SKIP_FILES = {__file__}


class _Key:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


HOST = _Key("host")
LEGACY = _Key("legacy default stream")


class RaceError(RuntimeError):
    """Raised at the second access of a race in mode "raise"; ``race`` is the Race."""

    def __init__(self, race):
        super().__init__(str(race))
        self.race = race


class RaceWarning(RuntimeWarning):
    """Issued at the second access of a race in mode "warn"."""


class Access:
    """One operation on a buffer: what, on which stream, where enqueued."""
    __slots__ = ("op", "stream", "write", "_frames", "lo", "hi")

    def __init__(self, op, stream, write, frames, lo=0, hi=None):
        self.op = op
        self.stream = stream
        self.write = write
        self._frames = frames   # (filename, line, function), outermost first
        self.lo = lo            # the byte range touched: [lo, hi), hi None: to the end
        self.hi = hi

    @property
    def stack(self):
        """Where it was enqueued: traceback.FrameSummary list, innermost
        last (source lines read only when asked for)."""
        return [traceback.FrameSummary(f, n, name, lookup_line=False)
                for f, n, name in self._frames]

    def __repr__(self):
        where = self._frames[-1] if self._frames else None
        at = f" at {where[0]}:{where[1]}" if where is not None else ""
        part = "" if (self.lo, self.hi) == (0, None) else f" of bytes [{self.lo}, {self.hi})"
        return f"{self.op} ({'write' if self.write else 'read'}{part}) on {self.stream!r}{at}"


class Race:
    """Two accesses of one buffer, at least one a write, on two streams, the
    second not ordered after the first."""
    __slots__ = ("buffer", "first", "second")

    def __init__(self, buffer, first, second):
        self.buffer = buffer
        self.first = first
        self.second = second

    @property
    def kind(self):
        a = "write" if self.second.write else "read"
        b = "write" if self.first.write else "read"
        return f"{a} after {b}"

    def __str__(self):
        return (f"race on {self.buffer!r} ({self.kind}): {self.second!r} is not ordered after "
                f"{self.first!r}; make {self.second.stream!r} wait for an event recorded on "
                f"{self.first.stream!r} after it, or synchronize")

    __repr__ = __str__


# At most this many accesses are kept per buffer (the oldest go first, so a
# race with one of them is then missed): a program of many small disjoint
# accesses between synchronizations.
MAX_ACCESSES = 256


def _overlap(a, b):
    return ((a.hi is None or b.lo < a.hi) and (b.hi is None or a.lo < b.hi))


def _covers(outer, inner):
    return outer.lo <= inner.lo and (outer.hi is None or (inner.hi is not None
                                                          and inner.hi <= outer.hi))


def _join(into, other):
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class Model:
    """The happens-before model and the buffers' last accesses.

    ``mode``: "collect" (races are appended to ``races``), "warn" (also a
    RaceWarning) or "raise" (also a RaceError at the second access).
    ``stack_depth``: frames kept per access (0: none)."""

    def __init__(self, mode="collect", stack_depth=8):
        if mode not in ("collect", "warn", "raise"):
            raise ValueError(f"mode must be 'collect', 'warn' or 'raise', not {mode!r}")
        if not isinstance(stack_depth, int) or isinstance(stack_depth, bool) or stack_depth < 0:
            raise ValueError(f"stack_depth must be an int >= 0, not {stack_depth!r}")
        self.mode = mode
        self.stack_depth = stack_depth
        self.races = []
        self._lock = threading.Lock()
        self._clocks = {HOST: {}}   # stream -> vector clock (stream -> position)
        self._blocking = set()      # streams ordered with the legacy default stream
        self._events = {}           # event -> clock of its last record
        self._buffers = {}          # buffer -> [(position, Access)] a later access may race

    # ---- ordering -------------------------------------------------------------------------

    def stream(self, s, *, blocking=True):
        """Declare a stream: ``blocking`` (the default for a stream made
        without cudaStreamNonBlocking) orders it with the legacy default
        stream.  A stream never declared is taken as non-blocking."""
        with self._lock:
            self._clocks.setdefault(s, {})
            if blocking:
                self._blocking.add(s)
            else:
                self._blocking.discard(s)

    def _step(self, s):
        # The stream's clock once one more operation is enqueued on it.
        vc = self._clocks.setdefault(s, {})
        if s is not HOST:
            _join(vc, self._clocks[HOST])
            if s is LEGACY:
                for t in self._blocking:
                    _join(vc, self._clocks.get(t, {}))
            elif s in self._blocking and LEGACY in self._clocks:
                _join(vc, self._clocks[LEGACY])
        vc[s] = vc.get(s, 0) + 1
        return vc

    def record(self, event, s):
        """``event`` recorded on stream ``s``."""
        with self._lock:
            self._events[event] = dict(self._step(s))

    def wait(self, s, event):
        """Stream ``s`` waits for ``event``'s last record (none: nothing)."""
        with self._lock:
            vc = self._step(s)
            _join(vc, self._events.get(event, {}))

    def wait_stream(self, s, other):
        """Stream ``s`` waits for the work enqueued on ``other`` so far
        (``cudaStreamWaitEvent`` of an event recorded there now)."""
        with self._lock:
            at = dict(self._step(other))
            _join(self._step(s), at)

    def sync_stream(self, s):
        """The host waited for stream ``s``'s work so far (the legacy
        stream's: also every blocking stream's)."""
        with self._lock:
            host = self._clocks[HOST]
            _join(host, self._clocks.get(s, {}))
            if s is LEGACY:
                for t in self._blocking:
                    _join(host, self._clocks.get(t, {}))

    def sync_event(self, event):
        """The host waited for ``event``'s last record."""
        with self._lock:
            _join(self._clocks[HOST], self._events.get(event, {}))

    def sync_device(self):
        """The host waited for every stream's work so far."""
        with self._lock:
            host = self._clocks[HOST]
            for vc in list(self._clocks.values()):
                _join(host, vc)

    # ---- accesses -------------------------------------------------------------------------

    def _stack(self):
        # The caller's innermost frames, the checker's own left out: plain
        # tuples (traceback.extract_stack reads each source line, about
        # 10 us; benchmarks/probes/checker_cost.py).
        frames = []
        f = sys._getframe(1) if self.stack_depth else None
        while f is not None and len(frames) < self.stack_depth:
            code = f.f_code
            if code.co_filename not in SKIP_FILES:
                frames.append((code.co_filename, f.f_lineno, code.co_name))
            f = f.f_back
        frames.reverse()
        return tuple(frames)

    def read(self, buffer, s, op="read", lo=0, hi=None):
        """``op`` on stream ``s`` (or HOST) reads bytes [lo, hi) of
        ``buffer`` (hi None: to its end)."""
        return self._access(buffer, s, False, op, lo, hi)

    def write(self, buffer, s, op="write", lo=0, hi=None):
        """``op`` on stream ``s`` (or HOST) writes bytes [lo, hi) of ``buffer``."""
        return self._access(buffer, s, True, op, lo, hi)

    def alloc(self, buffer, s, op="allocation"):
        """``buffer`` allocated in stream order on ``s`` (HOST: at once):
        what was known of an earlier buffer under the same key goes, in
        the same step."""
        return self._access(buffer, s, True, op, fresh=True)

    def free(self, buffer, s, op="free"):
        """``buffer`` freed in stream order on ``s`` (HOST: at once).  The
        free stays, as a write of the whole buffer, until an allocation
        under the same key: a use after it not ordered after it is a race."""
        return self._access(buffer, s, True, op)

    def _access(self, buffer, s, write, op, lo=0, hi=None, fresh=False, defer=False,
                stack=None):
        # fresh: an allocation (what was known under the key goes); defer:
        # found races are returned, neither warned nor raised (the caller
        # reports them once it has recorded the rest of its operation and
        # let go of its locks); stack: where it was enqueued, when taken
        # earlier.
        if lo < 0 or (hi is not None and hi < lo):
            raise ValueError(f"the byte range [{lo}, {hi}) is not a range")
        try:
            hash(buffer)
        except TypeError:
            raise TypeError(f"buffer must be a hashable key, not {type(buffer).__name__}") from None
        access = Access(op, s, write, self._stack() if stack is None else stack, lo, hi)
        found = []
        with self._lock:
            vc = self._step(s)
            host = self._clocks[HOST]
            kept = []
            for pos, acc in (() if fresh else self._buffers.get(buffer, ())):
                if host.get(acc.stream, 0) >= pos:
                    continue        # the host saw it complete: ordered before all to come
                if (acc.stream != s and (write or acc.write) and _overlap(acc, access)
                        and vc.get(acc.stream, 0) < pos):
                    found.append(Race(buffer, acc, access))
                if _covers(access, acc) and (write or (acc.stream == s and not acc.write)):
                    continue        # anything racing with it races with this one too
                kept.append((pos, acc))
            kept.append((vc[s], access))
            self._buffers[buffer] = kept[-MAX_ACCESSES:]
            self.races.extend(found)
        if defer:
            return found
        for race in found:
            if self.mode == "warn":
                warnings.warn(str(race), RaceWarning, stacklevel=3)
            elif self.mode == "raise":
                raise RaceError(race)
        return found
