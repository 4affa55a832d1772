"""A cross-stream race checker for tests and debugging (docs/checker.rst).

``streams.checker.enable()`` (or ``STREAMS_RACECHECK=warn|raise|collect``
in the environment at import) records, from then on, which stream each of
streams' own operations reads or writes each streams buffer on, and the
events, waits and synchronizations between streams, and reports an access
that is not ordered after a conflicting one on another stream, naming both
operations and where each was enqueued::

    with streams.checker.checking("raise"):
        fill(s1, buf)
        streams.memcpy_async(host, buf, stream=s2)     # RaceError: s2 never waited for s1

What it sees: ``memcpy_async``, ``memcpy_peer_async``, ``memcpy_batch_async``
and ``memset_async`` (the destination written, the source read), kernel
launches from Python (``Stream.launch``, ``PreparedLaunch.launch``: every
buffer argument counts as written unless :func:`declare` says which are
only read), ``DeviceBuffer`` and pool allocations and their stream-ordered
frees, ``record``/``wait_event``/``wait_stream``/``Event.wait``, and the
synchronizes of streams, events and devices.  Only streams buffers passed
as such are tracked, each over the bytes an operation touches from its
start.  Not seen: raw addresses and other libraries' arrays, host reads
through the buffer protocol (numpy views), graph launches, host functions,
stream memory operations, other libraries' streams and events, and the
``nogil`` C-level API.  The order of two threads' operations is the order
their hooks ran in.  Off by default; off, each checked operation costs one
load and one branch.
"""
import os as _os
import threading as _threading
import weakref as _weakref

from streams import _nvtx
from streams import _racecheck
from streams._cudart import CudaError
from streams._racecheck import HOST, LEGACY, Model, Race, RaceError, RaceWarning

_racecheck.SKIP_FILES.add(__file__)

__all__ = ["Race", "RaceError", "RaceWarning", "checking", "declare", "disable", "enable",
           "enabled", "races"]

_PER_THREAD = 2             # cudaStreamPerThread; 0 and 1 (cudaStreamLegacy): the legacy stream


class _Hooks:
    """What streams' operations call while the switch is on (streams._nvtx)."""

    def __init__(self):
        self.model = None
        self._lock = _threading.Lock()
        self._keys = _weakref.WeakKeyDictionary()      # Stream -> its key in the model
        self._kernels = _weakref.WeakKeyDictionary()   # Kernel -> indices of written arguments

    # ---- keys ---------------------------------------------------------------------------

    def _stream(self, model, s):
        h = s.handle
        if h in (0, 1):
            return LEGACY
        if h == _PER_THREAD:
            key = ("per-thread stream of thread", _threading.get_ident())
            model.stream(key, blocking=True)
            return key
        with self._lock:
            key = self._keys.get(s)
        if key is None:
            # cudaStreamGetId: one id per CUDA stream for the life of the
            # process, whatever wrapper, and never reused as handles are.
            try:
                key = _StreamKey(s.id, h)
                blocking = not s.non_blocking
            except (ValueError, CudaError):
                # Closed before the checker first saw it (a buffer's free on
                # its closed stream): a stream of its own, never waited for.
                return ("closed stream", h)
            model.stream(key, blocking=blocking)
            with self._lock:
                self._keys[s] = key
        return key

    @staticmethod
    def _event(ev):
        return ("event", ev.handle)

    # ---- ordering -----------------------------------------------------------------------

    def record(self, ev, s):
        m = self.model
        if m is not None:
            m.record(self._event(ev), self._stream(m, s))

    def wait(self, s, ev):
        m = self.model
        if m is not None:
            m.wait(self._stream(m, s), self._event(ev))

    def wait_stream(self, s, other):
        m = self.model
        if m is not None:
            m.wait_stream(self._stream(m, s), self._stream(m, other))

    def sync_stream(self, s):
        m = self.model
        if m is not None:
            m.sync_stream(self._stream(m, s))

    def sync_event(self, ev):
        m = self.model
        if m is not None:
            m.sync_event(self._event(ev))

    def sync_device(self):
        m = self.model
        if m is not None:
            m.sync_device()

    # ---- accesses -----------------------------------------------------------------------

    def access(self, buf, s, write, op, nbytes=None):
        """``op`` on ``s`` reads or writes the first ``nbytes`` (None: all)
        of streams buffer ``buf``."""
        m = self.model
        if m is not None and buf.ptr:
            m._access(("buffer", buf.ptr), self._stream(m, s), write, op, 0, nbytes)

    def launch(self, kernel, s, args):
        m = self.model
        if m is None:
            return
        from streams._memory import _Buffer
        with self._lock:
            written = self._kernels.get(kernel)
        key = self._stream(m, s)
        name = getattr(kernel, "name", None) or "kernel"
        for i, a in enumerate(args):
            if isinstance(a, _Buffer) and a.ptr:
                w = written is None or i in written
                m._access(("buffer", a.ptr), key, w, f"launch of {name} (argument {i})")

    def alloc(self, ptr, s):
        m = self.model
        if m is not None and ptr:
            m.alloc(("buffer", ptr), HOST if s is None else self._stream(m, s))

    def free(self, ptr, s):
        m = self.model
        if m is not None and ptr:
            m.free(("buffer", ptr), HOST if s is None else self._stream(m, s))

    def declare(self, kernel, written):
        with self._lock:
            self._kernels[kernel] = written


class _StreamKey:
    __slots__ = ("id", "handle")

    def __init__(self, sid, handle):
        self.id = sid
        self.handle = handle

    def __eq__(self, other):
        return isinstance(other, _StreamKey) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<stream id={self.id} handle=0x{self.handle:x}>"


_hooks = _Hooks()
_switch = _threading.Lock()


def enable(mode="warn", *, stack_depth=8):
    """Start checking, with no history: from now on each race is kept
    (:func:`races`) and, by ``mode``, warned (``"warn"``: a
    :class:`RaceWarning`), raised at the second access (``"raise"``: a
    :class:`RaceError`, after that operation was enqueued) or only kept
    (``"collect"``).  ``stack_depth`` frames of where each operation was
    enqueued are kept (0: none).  Returns the races of a run still on."""
    if not isinstance(stack_depth, int) or isinstance(stack_depth, bool) or stack_depth < 0:
        raise ValueError(f"stack_depth must be an int >= 0, not {stack_depth!r}")
    model = Model(mode, stack_depth)        # ValueError for a bad mode
    with _switch:
        old, _hooks.model = _hooks.model, model
        _nvtx._set_checking(_hooks, True)
    return [] if old is None else list(old.races)


def disable():
    """Stop checking; returns the races found since :func:`enable`."""
    with _switch:
        old, _hooks.model = _hooks.model, None
        _nvtx._set_checking(_hooks, False)
    return [] if old is None else list(old.races)


def enabled():
    """Whether the checker is on."""
    return _hooks.model is not None


def races():
    """The races found since :func:`enable` (empty while off)."""
    m = _hooks.model
    return [] if m is None else list(m.races)


def declare(kernel, *, writes):
    """Say which arguments of ``kernel`` (a :class:`streams.Kernel`) it
    writes: ``writes``, their indices; its other buffer arguments are only
    read.  Undeclared, a kernel writes every buffer it is given."""
    from streams._launch import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
    try:
        written = frozenset(writes)
    except TypeError:
        raise TypeError(f"writes must be argument indices, not {type(writes).__name__}") from None
    for i in written:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ValueError(f"writes: {i!r} is not an argument index (an int >= 0)")
    _hooks.declare(kernel, written)


class checking:
    """``with checking(mode="raise"):`` checks the block, then restores
    what was on before; ``as`` gives the list the races found are added to
    at the end of the block."""

    def __init__(self, mode="raise", *, stack_depth=8):
        self._args = (mode, stack_depth)
        self.races = []

    def __enter__(self):
        with _switch:
            self._before = _hooks.model
        enable(*self._args[:1], stack_depth=self._args[1])
        return self.races

    def __exit__(self, *exc):
        with _switch:
            mine, _hooks.model = _hooks.model, self._before
            _nvtx._set_checking(_hooks, self._before is not None)
        if mine is not None:
            self.races.extend(mine.races)
        return False


_env = _os.environ.get("STREAMS_RACECHECK", "")
if _env not in ("", "0"):
    enable("warn" if _env == "1" else _env)
