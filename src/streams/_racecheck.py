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

Each buffer keeps its last write and, per stream, its last read since.  A
write conflicts with that write and those reads, a read with that write,
where the accessing stream is not ordered after the other access's stream
position: the report names both operations, their streams and where each
was enqueued.  An allocation and a free count as writes (a stream-ordered
allocation used from another stream without a wait, a free on one stream
while another still reads).  Accesses on one stream never conflict.

The keys of streams, events and buffers are any hashable value (the
package's hooks will pass handles); ``HOST`` is the host's own accesses
(synchronous copies) and ``LEGACY`` the legacy default stream.  Not yet
fed by the package's operations: tests/racecheck/ drive it directly.
Thread-safe: one lock around the model (free-threaded CPython too).
"""
import threading
import traceback
import warnings

__all__ = ["HOST", "LEGACY", "Model", "Race", "RaceError", "RaceWarning"]


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
    __slots__ = ("op", "stream", "write", "stack")

    def __init__(self, op, stream, write, stack):
        self.op = op
        self.stream = stream
        self.write = write
        self.stack = stack

    def __repr__(self):
        where = self.stack[-1] if self.stack else None
        at = f" at {where.filename}:{where.lineno}" if where is not None else ""
        return f"{self.op} ({'write' if self.write else 'read'}) on {self.stream!r}{at}"


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


class _Uses:
    __slots__ = ("write", "reads")

    def __init__(self):
        self.write = None       # (stream, position, Access) of the last write
        self.reads = {}         # stream -> (position, Access): its last read since


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
        self.mode = mode
        self.stack_depth = stack_depth
        self.races = []
        self._lock = threading.Lock()
        self._clocks = {HOST: {}}   # stream -> vector clock (stream -> position)
        self._blocking = set()      # streams ordered with the legacy default stream
        self._events = {}           # event -> clock of its last record
        self._buffers = {}          # buffer -> _Uses

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

    def sync_stream(self, s):
        """The host waited for stream ``s``'s work so far."""
        with self._lock:
            _join(self._clocks[HOST], self._clocks.get(s, {}))

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
        # The caller's frames, the model's own left out.
        if not self.stack_depth:
            return []
        frames = traceback.extract_stack(limit=self.stack_depth + 4)
        return [f for f in frames if f.filename != __file__][-self.stack_depth:]

    def read(self, buffer, s, op="read"):
        """``op`` on stream ``s`` (or HOST) reads ``buffer``."""
        return self._access(buffer, s, False, op)

    def write(self, buffer, s, op="write"):
        """``op`` on stream ``s`` (or HOST) writes ``buffer``."""
        return self._access(buffer, s, True, op)

    def alloc(self, buffer, s, op="allocation"):
        """``buffer`` allocated in stream order on ``s`` (HOST: at once):
        what was known of an earlier buffer under the same key goes."""
        with self._lock:
            self._buffers.pop(buffer, None)
        return self._access(buffer, s, True, op)

    def free(self, buffer, s, op="free"):
        """``buffer`` freed in stream order on ``s`` (HOST: at once)."""
        found = self._access(buffer, s, True, op)
        with self._lock:
            self._buffers.pop(buffer, None)
        return found

    def _access(self, buffer, s, write, op):
        access = Access(op, s, write, self._stack())
        found = []
        with self._lock:
            vc = self._step(s)
            pos = vc[s]
            uses = self._buffers.get(buffer)
            if uses is None:
                uses = self._buffers[buffer] = _Uses()
            w = uses.write
            if w is not None and w[0] != s and vc.get(w[0], 0) < w[1]:
                found.append(Race(buffer, w[2], access))
            if write:
                for rs, (rpos, racc) in uses.reads.items():
                    if rs != s and vc.get(rs, 0) < rpos:
                        found.append(Race(buffer, racc, access))
                uses.write = (s, pos, access)
                uses.reads = {}
            else:
                uses.reads[s] = (pos, access)
            self.races.extend(found)
        for race in found:
            if self.mode == "warn":
                warnings.warn(str(race), RaceWarning, stacklevel=3)
            elif self.mode == "raise":
                raise RaceError(race)
        return found
