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

What it sees, what it does not, and what can make it report a race CUDA
orders: docs/checker.rst.  Off by default; off, each checked operation
costs one load and one branch.
"""
import collections as _collections
import os as _os
import threading as _threading
import warnings as _warnings
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
    """What streams' operations call while the switch is on (streams._nvtx).

    Each hook reads ``model`` once (an enable or disable in another thread
    meanwhile is harmless) and runs its operation through ``_run``: in a
    thread already inside a hook (the garbage collector freeing a buffer,
    or a finalizer or warning handler calling streams, during one) the
    operation is queued, since taking the model's lock again there would
    wait for itself; the next outermost hook of any thread applies the
    queue first, in order, from pop to model under one lock.  Warnings are
    issued once every lock is let go; a queued operation's race is kept
    and warned, never raised.  Streams and events are read when the hook
    is called, in its thread: a queued operation is applied with what they
    were then (tests/racecheck/test_checker_cpu.py)."""

    def __init__(self):
        self.model = None
        self._lock = _threading.Lock()
        self._tls = _threading.local()      # .depth: hooks running; .token: per-thread stream
        self._pending = _collections.deque()    # queued: (model, op, args)
        self._drain_lock = _threading.Lock()
        self._kernels = {}                  # kernel function handle -> written argument indices

    # ---- what an operation is heard with --------------------------------------------------
    # Taken when the hook is called, in its thread (a queued operation is
    # applied later, maybe by another thread, when the objects may have
    # changed: an event closed, a capture ended, a stream closed).

    def _snap(self, s):
        """A stream as heard now: (key, blocking, capturing)."""
        h = s.handle
        capturing = self._capturing(s)
        if h in (0, 1):
            return (LEGACY, True, capturing)
        if h == _PER_THREAD:
            # One per thread for the thread's life (a thread ident is reused).
            token = getattr(self._tls, "token", None)
            if token is None:
                token = self._tls.token = _PerThread()
            return (token, True, capturing)
        m = self.model
        # The run's cache, only outside any hook of this thread (its lock may
        # be held by the hook the garbage collector interrupted), and with
        # the depth raised while the lock is held: a free the collector makes
        # there (the cache's weak references allocate) is queued.
        outside = m is not None and not getattr(self._tls, "depth", 0)
        cached = None
        if outside:
            cached = self._cache(m, s, None)
        if cached is None:
            # cudaStreamGetId: one id per CUDA stream for the life of the
            # process, whatever wrapper, and never reused as handles are.
            try:
                cached = (_StreamKey(s.id, h), not s.non_blocking)
            except (ValueError, RuntimeError, CudaError):
                # Closed before the checker first saw it, or first seen
                # inside a host callback (no CUDA there): a stream of its own.
                return (("stream", h), False, capturing)
            if outside:
                self._cache(m, s, cached)
        return (cached[0], cached[1], capturing)

    def _cache(self, m, s, value):
        # The run's (key, blocking) of `s`: read (value None) or written.
        depth = getattr(self._tls, "depth", 0)
        self._tls.depth = depth + 1
        try:
            with self._lock:
                if value is None:
                    return m.stream_keys.get(s)
                m.stream_keys[s] = value
                return value
        finally:
            self._tls.depth = depth

    @staticmethod
    def _key(m, snap):
        # The model's key of a snapped stream, declared with its kind.
        key, blocking, _ = snap
        if key is not LEGACY:
            m.stream(key, blocking=blocking)
        return key

    @staticmethod
    def _event(ev):
        return ("event", ev.handle)

    @staticmethod
    def _capturing(s):
        # Work enqueued during a capture runs when (and where) the graph is
        # launched: not heard.
        try:
            return s.is_capturing()
        except (ValueError, RuntimeError, CudaError):
            return False

    # ---- running an operation -----------------------------------------------------------

    def _run(self, op, *args, raises=True):
        m = self.model
        if m is None:
            if self._pending and not getattr(self._tls, "depth", 0):
                _settle()       # what was queued before the switch went off
            return
        if getattr(self._tls, "depth", 0):
            self._pending.append((m, op, args))
            return
        self._tls.depth = 1
        try:
            queued = self._drain()
            found = op(m, *args) or []
        finally:
            self._tls.depth = 0
        # Every lock let go: a warning's handler may call streams again.
        _report(m, queued, raising=False)
        _report(m, found, raising=raises)

    def _drain(self):
        # The queued operations, each into the run it was heard in; their
        # races, to be reported once the lock is let go.  Never raises: an
        # operation that cannot be applied is dropped.
        found = []
        with self._drain_lock:
            while self._pending:
                m, op, args = self._pending.popleft()
                try:
                    found += [(m, r) for r in (op(m, *args) or [])]
                except Exception:               # noqa: BLE001 - a queued op, never raised
                    pass
        return found

    # ---- ordering -----------------------------------------------------------------------

    def record(self, ev, s):
        self._run(self._record, self._event(ev), self._snap(s))

    def _record(self, m, ev, s):
        if not s[2]:
            m.record(ev, self._key(m, s))

    def wait(self, s, ev):
        self._run(self._wait, self._snap(s), self._event(ev))

    def _wait(self, m, s, ev):
        if not s[2]:
            m.wait(self._key(m, s), ev)

    def wait_stream(self, s, other):
        self._run(self._wait_stream, self._snap(s), self._snap(other))

    def _wait_stream(self, m, s, other):
        if not s[2]:
            m.wait_stream(self._key(m, s), self._key(m, other))

    def sync_stream(self, s):
        self._run(self._sync_stream, self._snap(s))

    def _sync_stream(self, m, s):
        m.sync_stream(self._key(m, s))

    def sync_event(self, ev):
        self._run(self._sync_event, self._event(ev))

    @staticmethod
    def _sync_event(m, ev):
        m.sync_event(ev)

    def sync_device(self):
        self._run(_Hooks._sync_device)

    @staticmethod
    def _sync_device(m):
        m.sync_device()

    # ---- accesses -----------------------------------------------------------------------

    def accesses(self, s, items):
        """One operation on ``s``: ``items`` of (buffer address, nbytes or
        None, write, op).  All are recorded before a race is raised."""
        m = self.model
        if m is not None:
            self._run(self._accesses, self._snap(s), items, m._stack())

    def _accesses(self, m, s, items, stack):
        if s[2]:
            return []
        key = self._key(m, s)
        found = []
        for ptr, nbytes, write, op in items:
            if ptr:
                found += m._access(("buffer", ptr), key, write, op, 0, nbytes, defer=True,
                                   stack=stack)
        return found

    def launch(self, kernel, s, args):
        m = self.model
        if m is None:
            return
        from streams._memory import _Buffer
        written = self._kernels.get(_kernel_key(kernel))
        name = getattr(kernel, "name", None) or "kernel"
        items = []
        for i, a in enumerate(args):
            if isinstance(a, _Buffer):
                try:
                    ptr = a.ptr
                except ValueError:
                    continue    # closed since (a prepared launch keeps its memory)
                items.append((ptr, None, written is None or i in written,
                              f"launch of {name} (argument {i})"))
        if items:
            self.accesses(s, items)

    def alloc(self, ptr, s):
        m = self.model
        if m is not None and ptr:
            self._run(self._alloc, ptr, None if s is None else self._snap(s), m._stack())

    def _alloc(self, m, ptr, s, stack):
        if s is None:
            on = HOST
        elif s[2]:
            return []
        else:
            on = self._key(m, s)
        return m._access(("buffer", ptr), on, True, "allocation", fresh=True, defer=True,
                         stack=stack)

    def free(self, ptr, s, closed=False):
        """A free of ``ptr`` on ``s`` (None: on the host, once the device is
        idle, as cudaFree and cudaFreeHost wait for it); with ``closed``,
        ``s`` was closed and the free goes on the legacy stream after where
        ``s``'s work ended.  Its race is kept (and warned), never raised:
        a free runs in __dealloc__ too."""
        m = self.model
        if m is not None and ptr:
            self._run(self._free, ptr, None if s is None else self._snap(s), closed,
                      m._stack(), raises=False)

    def _free(self, m, ptr, s, closed, stack):
        if s is None:
            m.sync_device()
            on = HOST
        elif closed:
            m.wait_stream(LEGACY, self._key(m, s))
            on = LEGACY
        else:
            on = self._key(m, s)
        return m._access(("buffer", ptr), on, True, "free", defer=True, stack=stack)

    def declare(self, kernel, written):
        key = _kernel_key(kernel)       # outside the lock: nothing allocated under it
        with self._lock:
            if written is None:
                self._kernels.pop(key, None)
            else:
                self._kernels[key] = written


def _report(model, found, raising):
    """Warn of, or raise, the races of one operation (``found``: races, or
    (model, race) pairs of queued ones), by the mode of the run each was
    found in; called with no lock held.  ``raising`` False: never raised,
    not even as a warning turned into an error (a free, a queued
    operation: the race stays in races())."""
    for item in found:
        m, race = item if isinstance(item, tuple) else (model, item)
        if m.mode == "collect":
            continue
        if raising:
            if m.mode == "raise":
                raise RaceError(race)
            _warnings.warn(str(race), RaceWarning, stacklevel=4)
        else:
            # Warned in mode "raise" too.
            try:
                _warnings.warn(str(race), RaceWarning, stacklevel=4)
            except Exception:               # noqa: BLE001 - kept in races() all the same
                pass


def _kernel_key(kernel):
    # The kernel's function: every Kernel object of one module function
    # (Module.get_kernel makes a new one each call) is one kernel.
    return ("kernel", kernel.handle)


class _PerThread:
    __slots__ = ("__weakref__",)

    def __repr__(self):
        return f"<per-thread default stream 0x{id(self):x}>"


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
# Reentrant: the garbage collector may run a finalizer that turns the
# checker while this thread holds it.
_switch = _threading.RLock()


def _fresh(mode, stack_depth):
    if not isinstance(stack_depth, int) or isinstance(stack_depth, bool) or stack_depth < 0:
        raise ValueError(f"stack_depth must be an int >= 0, not {stack_depth!r}")
    model = Model(mode, stack_depth)        # ValueError for a bad mode
    model.stream_keys = _weakref.WeakKeyDictionary()    # Stream -> (key, blocking), this run
    return model


def _turn(model):
    # Under _switch: `model` on (None: off).
    _nvtx._set_checking(_hooks, model is not None)
    _hooks.model = model


def enable(mode="warn", *, stack_depth=8):
    """Start checking, with no history: from now on each race is kept
    (:func:`races`) and, by ``mode``, warned (``"warn"``: a
    :class:`RaceWarning`), raised at the second access (``"raise"``: a
    :class:`RaceError`, after that operation was enqueued) or only kept
    (``"collect"``).  ``stack_depth`` frames of where each operation was
    enqueued are kept (0: none).  Returns the races of a run still on."""
    model = _fresh(mode, stack_depth)
    try:
        _settle()
    finally:
        with _switch:
            old = _hooks.model
            _turn(model)
    return [] if old is None else list(old.races)


def disable():
    """Stop checking; returns the races found since :func:`enable`."""
    try:
        _settle()
    finally:
        with _switch:
            old = _hooks.model
            _turn(None)
        _settle()       # frees heard meanwhile: into their own run, nothing kept
    return [] if old is None else list(old.races)


def enabled():
    """Whether the checker is on."""
    return _hooks.model is not None


def _settle():
    # What was queued during a hook, applied now (each into the run it was
    # heard in; off or on).  Never raises.
    if _hooks._pending and not getattr(_hooks._tls, "depth", 0):
        _hooks._tls.depth = 1
        try:
            queued = _hooks._drain()
        finally:
            _hooks._tls.depth = 0
        _report(None, queued, raising=False)


def races():
    """The races found since :func:`enable` (empty while off)."""
    _settle()
    m = _hooks.model
    return [] if m is None else list(m.races)


def declare(kernel, *, writes):
    """Say which arguments of ``kernel`` (a :class:`streams.Kernel`; every
    Kernel object of the same function) it writes: ``writes``, their
    indices; its other buffer arguments are only read.  Undeclared (or
    ``writes=None``, which forgets a declaration), a kernel writes every
    buffer it is given.  A declaration holds until the process ends."""
    from streams._launch import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a streams.Kernel, not {type(kernel).__name__}")
    if writes is None:
        _hooks.declare(kernel, None)
        return
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
    at the end of the block.  Blocks nest in one thread; a block that
    another thread's ``enable`` or block replaced restores nothing."""

    def __init__(self, mode="raise", *, stack_depth=8):
        self._model = _fresh(mode, stack_depth)
        self.races = []

    def __enter__(self):
        with _switch:
            self._before = _hooks.model
            _turn(self._model)
        return self.races

    def __exit__(self, *exc):
        try:
            _settle()
        finally:
            self._restore()
        _settle()       # heard meanwhile: into their own run
        self.races.extend(self._model.races)
        return False

    def _restore(self):
        with _switch:
            before = self._before
            while before in _ended:         # a block that ended while replaced
                before = _ended.pop(before)
            if _hooks.model is self._model:
                _turn(before)
            else:
                # Replaced (another thread's block or enable): whoever would
                # restore this block's model restores what came before it.
                _ended[self._model] = before


# Models of checking blocks that ended while replaced -> what to restore
# instead (under _switch).
_ended = _weakref.WeakKeyDictionary()


_env = _os.environ.get("STREAMS_RACECHECK", "")
if _env not in ("", "0"):
    _mode = "warn" if _env == "1" else _env.lower()
    if _mode not in ("warn", "raise", "collect"):
        raise ValueError(f"STREAMS_RACECHECK={_env!r}: it must be warn (or 1), raise, collect, "
                         "or 0 (off)")
    enable(_mode)
