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
    meanwhile is harmless).  A free heard while this thread is inside a
    hook (the garbage collector freeing a buffer during one) is queued and
    applied by the next hook: taking the model's lock again there would
    wait for itself (tests/racecheck/test_checker_cpu.py)."""

    def __init__(self):
        self.model = None
        self._lock = _threading.Lock()
        self._tls = _threading.local()      # .depth: hooks running; .token: per-thread stream
        self._pending = _collections.deque()    # queued frees: (model, ptr, stream, closed, stack)
        self._drain_lock = _threading.Lock()
        self._kernels = {}                  # kernel function handle -> written argument indices

    # ---- keys ---------------------------------------------------------------------------

    def _stream(self, model, s):
        h = s.handle
        if h in (0, 1):
            return LEGACY
        if h == _PER_THREAD:
            # One per thread for the thread's life (a thread ident is reused).
            token = getattr(self._tls, "token", None)
            if token is None:
                token = self._tls.token = _PerThread()
            model.stream(token, blocking=True)
            return token
        keys = model.stream_keys
        with self._lock:
            key = keys.get(s)
        if key is None:
            # cudaStreamGetId: one id per CUDA stream for the life of the
            # process, whatever wrapper, and never reused as handles are.
            try:
                key = _StreamKey(s.id, h)
                blocking = not s.non_blocking
            except (ValueError, RuntimeError, CudaError):
                # Closed before the checker first saw it, or first seen
                # inside a host callback (no CUDA there): a stream of its own.
                return ("stream", h)
            model.stream(key, blocking=blocking)
            with self._lock:
                keys[s] = key
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

    def _enter(self):
        m = self.model
        if m is None:
            return None
        self._tls.depth = getattr(self._tls, "depth", 0) + 1
        try:
            self._drain()
        except BaseException:
            self._tls.depth -= 1
            raise
        return m

    def _leave(self):
        self._tls.depth -= 1

    def _drain(self):
        # With this thread's depth raised: the queued frees, each in the
        # model it was heard in, in the order they were heard.  Under one
        # lock from pop to model, so that a hook of another thread (an
        # allocation at the same address) waits for a free already popped.
        # A free's race is kept (and warned), never raised.  Only the
        # outermost hook of a thread drains (a nested one, from a warning's
        # handler say, would wait for its own lock).
        if self._tls.depth > 1:
            return
        with self._drain_lock:
            while self._pending:
                m, ptr, s, closed, stack = self._pending.popleft()
                self._free_now(m, ptr, s, closed, stack)

    # ---- ordering -----------------------------------------------------------------------

    def record(self, ev, s):
        m = self._enter()
        if m is None:
            return
        try:
            if not self._capturing(s):
                m.record(self._event(ev), self._stream(m, s))
        finally:
            self._leave()

    def wait(self, s, ev):
        m = self._enter()
        if m is None:
            return
        try:
            if not self._capturing(s):
                m.wait(self._stream(m, s), self._event(ev))
        finally:
            self._leave()

    def wait_stream(self, s, other):
        m = self._enter()
        if m is None:
            return
        try:
            if not self._capturing(s):
                m.wait_stream(self._stream(m, s), self._stream(m, other))
        finally:
            self._leave()

    def sync_stream(self, s):
        m = self._enter()
        if m is None:
            return
        try:
            m.sync_stream(self._stream(m, s))
        finally:
            self._leave()

    def sync_event(self, ev):
        m = self._enter()
        if m is None:
            return
        try:
            m.sync_event(self._event(ev))
        finally:
            self._leave()

    def sync_device(self):
        m = self._enter()
        if m is None:
            return
        try:
            m.sync_device()
        finally:
            self._leave()

    # ---- accesses -----------------------------------------------------------------------

    def accesses(self, s, items):
        """One operation on ``s``: ``items`` of (buffer address, nbytes or
        None, write, op).  All are recorded before a race is raised."""
        m = self._enter()
        if m is None:
            return
        try:
            if self._capturing(s):
                return
            key = self._stream(m, s)
            found = []
            for ptr, nbytes, write, op in items:
                if ptr:
                    found += m._access(("buffer", ptr), key, write, op, 0, nbytes, defer=True)
            if found and m.mode == "raise":
                raise RaceError(found[0])
        finally:
            self._leave()

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
        m = self._enter()
        if m is None:
            return
        try:
            if ptr and (s is None or not self._capturing(s)):
                m.alloc(("buffer", ptr), HOST if s is None else self._stream(m, s))
        finally:
            self._leave()

    def free(self, ptr, s, closed=False):
        """A free of ``ptr`` on ``s`` (None: on the host, once the device is
        idle, as cudaFree and cudaFreeHost wait for it); with ``closed``,
        ``s`` was closed and the free goes on the legacy stream after where
        ``s``'s work ended.  Its race is kept (and warned), never raised:
        a free runs in __dealloc__ too."""
        m = self.model
        if m is None or not ptr:
            return
        stack = m._stack()
        self._pending.append((m, ptr, s, closed, stack))
        if getattr(self._tls, "depth", 0):
            return      # inside a hook (the GC freed it there): the next hook applies it
        self._tls.depth = getattr(self._tls, "depth", 0) + 1
        try:
            self._drain()
        finally:
            self._tls.depth -= 1

    def _free_now(self, m, ptr, s, closed, stack):
        if s is None:
            m.sync_device()
            on = HOST
        elif closed:
            m.wait_stream(LEGACY, self._stream(m, s))
            on = LEGACY
        else:
            on = self._stream(m, s)
        m._access(("buffer", ptr), on, True, "free", defer=True, stack=stack)

    def declare(self, kernel, written):
        key = _kernel_key(kernel)       # outside the lock: nothing allocated under it
        with self._lock:
            if written is None:
                self._kernels.pop(key, None)
            else:
                self._kernels[key] = written


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
_switch = _threading.Lock()


def _fresh(mode, stack_depth):
    if not isinstance(stack_depth, int) or isinstance(stack_depth, bool) or stack_depth < 0:
        raise ValueError(f"stack_depth must be an int >= 0, not {stack_depth!r}")
    model = Model(mode, stack_depth)        # ValueError for a bad mode
    model.stream_keys = _weakref.WeakKeyDictionary()    # Stream -> its key, for this model
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
    # Frees the garbage collector queued during a hook, applied now (each
    # into the run it was heard in; off or on).
    if _hooks._pending and not getattr(_hooks._tls, "depth", 0):
        _hooks._tls.depth = getattr(_hooks._tls, "depth", 0) + 1
        try:
            _hooks._drain()
        finally:
            _hooks._tls.depth -= 1


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
