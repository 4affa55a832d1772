"""Stream and event APIs shaped like those of other frameworks.

``streams.compat.cupy``, ``streams.compat.torch``, ``streams.compat.paddle``
and ``streams.compat.mindspore`` reproduce the stream and event API each
framework documents, on top of :class:`streams.Stream` and
:class:`streams.Event`.  Their classes are subclasses of the core ones, so
anything in ``streams`` that takes a Stream or an Event takes them too, and
the "current stream" they read and set is the one of ``streams``
(:func:`streams.current_stream`).  None of them imports the framework it
imitates, and importing them does no GPU work.

What the frameworks share lives here: :class:`_FrameworkStream` (device
arguments, ``record_event``, the device a default-stream wrapper was asked
for, and the wrappers ``current_stream()`` hands out), :class:`_FrameworkEvent`
and :class:`_StreamGuard` (the ``with``-block managers).
"""
import threading
import weakref

import streams as _streams
from streams import Event as _CoreEvent
from streams import Stream as _CoreStream
from streams._foreign import _is_foreign_event, _is_foreign_stream

__all__ = []


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_kwargs(where, kwargs, documented=()):
    # The frameworks take **kwargs for internal uses they do not document;
    # accepting and ignoring them would hide typos.
    unknown = sorted(set(kwargs) - set(documented))
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s): {', '.join(unknown)}")


def _check_instance(value, core_class, a_name, argname, allow_none, foreign=None):
    # TypeError unless ``value`` is a ``core_class`` (``a_name``: "a Stream"),
    # a compat one included, None where ``allow_none``, or another
    # library's object where ``foreign(value)`` says so.
    if value is None and allow_none:
        return
    if isinstance(value, core_class) or (foreign is not None and foreign(value)):
        return
    name = core_class.__name__
    expected = f"{a_name} or None" if allow_none else a_name
    others = f", or another library's {name.lower()}" if foreign is not None else ""
    raise TypeError(f"{argname} must be {expected} (a streams.{name} or any streams.compat "
                    f"{name}{others}), not {type(value).__name__}")


def _check_stream(stream, argname, allow_none=False):
    """Any stream ``streams.as_stream`` takes (the frameworks' own included)."""
    _check_instance(stream, _CoreStream, "a Stream", argname, allow_none, _is_foreign_stream)


def _as_core_stream(stream, argname, allow_none=False):
    """``stream`` checked, another library's stream wrapped (its owner kept alive)."""
    _check_stream(stream, argname, allow_none)
    if stream is None or isinstance(stream, _CoreStream):
        return stream
    return _streams.as_stream(stream, argname)


def _check_event(event, argname, allow_none=False, waited=False):
    """An Event; where it is only waited for (``waited``), another library's too."""
    _check_instance(event, _CoreEvent, "an Event", argname, allow_none,
                    _is_foreign_event if waited else None)


def _device_hint(stream):
    """The device a device-less (default) stream wrapper was asked for, or None.

    None too for core streams, which have no such field, and for wrappers
    made by ``cls.__new__`` alone, whose field was never set.
    """
    return getattr(stream, "_device_hint", None)


def _root(stream):
    """The stream that holds ``stream``'s handle: a wrapper's owner of the same
    handle, followed to the end, so that wrappers never wrap wrappers."""
    while True:
        owner = stream.owner
        if not (isinstance(owner, _CoreStream) and not owner.closed
                and owner.handle == stream.handle):
            return stream
        stream = owner


_thread_state = threading.local()


def _thread_wrappers():
    """This thread's wrappers, by (class, device, stream): weak, so that a
    wrapper (and the stream it keeps alive) lives only as long as its users."""
    try:
        return _thread_state.wrappers
    except AttributeError:
        _thread_state.wrappers = weakref.WeakValueDictionary()
        return _thread_state.wrappers


class _FrameworkEvent(_CoreEvent):
    """What the frameworks' Event classes share, as all four document it:
    ``record(stream=None)`` and ``wait(stream=None)`` act on the current
    stream when given None and return None; ``elapsed_time(end_event)``
    names its argument as they do.  Any streams Stream or Event is accepted."""

    def record(self, stream=None, *, external=False):
        """Record this event on ``stream`` (None: the current stream)."""
        _check_stream(stream, "stream", allow_none=True)
        super().record(stream, external=external)

    def wait(self, stream=None):
        """Make future work on ``stream`` (None: the current stream) wait for this event."""
        _check_stream(stream, "stream", allow_none=True)
        super().wait(stream)

    def elapsed_time(self, end_event):
        """Milliseconds from this event to ``end_event`` (waits for both)."""
        _check_event(end_event, "end_event")
        return super().elapsed_time(end_event)


class _FrameworkStream(_CoreStream):
    """What the frameworks' Stream classes share.

    * Device arguments: a negative index means the current device (PyTorch
      and Paddle document it, CuPy uses -1); each framework may parse its
      own device forms first (:meth:`_parse_device`).
    * ``record_event(event=None)``: records ``event``, or a new Event of the
      framework (:attr:`_event_class`), and returns it.
    * CUDA's default streams have no device (``device_id`` -1).  A wrapper of
      one that was asked for on a given device keeps that device in
      ``_device_hint``: the frameworks' guards make it current, and
      wrappers of two devices compare unequal.  A core default stream
      (no hint) equals the wrappers of its handle on every device.
    * ``current_stream()``: within a thread, the same wrapper object for the
      same stream and device, never a wrapper of a wrapper.
    """

    __slots__ = ("_device_hint",)

    _event_class = _FrameworkEvent

    def __init__(self, device=None, priority=0, non_blocking=False):
        self._device_hint = None
        super().__init__(device=device, priority=priority, non_blocking=non_blocking)

    @classmethod
    def from_handle(cls, ptr, owner=None, device=None):
        """Wrap a foreign handle, as :meth:`streams.Stream.from_handle`; a
        default stream (handle 0, 1 or 2) wrapped with ``device`` remembers it."""
        s = cls._wrap(ptr, owner, device, None)
        if device is not None and s.device_id < 0:
            s._device_hint = cls._device_index(device)
        return s

    @classmethod
    def _wrap(cls, ptr, owner, device, hint):
        # The core's from_handle, with a hint its caller already resolved:
        # _adopt must not look the device up a second time.
        s = super().from_handle(ptr, owner=owner, device=device)
        s._device_hint = hint if s.device_id < 0 else None
        return s

    # ---- devices -------------------------------------------------------------
    @staticmethod
    def _parse_device(device):
        """A framework's device argument in a form the core reads (hook)."""
        return device

    @classmethod
    def _device_arg(cls, device):
        """``device`` for the core, None meaning the current device; no CUDA call."""
        device = cls._parse_device(device)
        if _is_int(device) and device < 0:
            return None     # the core rejects negative indices as out of range
        return device

    @classmethod
    def _device_index(cls, device):
        """The index of the device ``device`` names (None, negative: the current one)."""
        device = cls._device_arg(device)
        if device is None:
            return _streams.get_device()
        return _streams.Device(device).device_id

    # ---- current-stream wrappers ------------------------------------------
    @classmethod
    def _current(cls, device=None):
        """The current stream of ``device``, as this framework presents it."""
        index = cls._device_index(device)
        return cls._present(_streams.current_stream(index), index)

    @classmethod
    def _present(cls, stream, index):
        """``stream``, the core's current stream of device ``index``, as this
        framework reports it (hook: the frameworks name default streams
        differently)."""
        return cls._adopt(stream, index)

    @classmethod
    def _adopt(cls, stream, index):
        """``stream`` as a ``cls`` of device ``index``: ``stream`` itself when it
        is one, else a wrapper of its handle, the same one while it is in use."""
        if stream.closed or (isinstance(stream, cls) and _device_hint(stream) in (None, index)):
            return stream
        if stream.device_id < 0:
            key, owner, device = (cls, index, stream.handle), None, None
        else:
            stream = _root(stream)
            if isinstance(stream, cls):
                return stream
            # id() is safe as a key: a live wrapper keeps its owner alive,
            # and an entry whose owner changed is checked below.
            key, owner, device = (cls, index, id(stream)), stream, stream.device_id
        cache = _thread_wrappers()
        wrapper = cache.get(key)
        if wrapper is None or wrapper.owner is not owner or wrapper.closed:
            # owner= keeps the stream that holds the handle alive as long as
            # the wrapper; default streams are never destroyed and need none.
            wrapper = cls._wrap(stream.handle, owner, device, index)
            cache[key] = wrapper
        return wrapper

    # ---- shared methods ------------------------------------------------------
    def record_event(self, event=None):
        """Record ``event`` (a new Event if None) on this stream and return it."""
        _check_event(event, "event", allow_none=True)
        return super().record(self._event_class() if event is None else event)

    def __eq__(self, other):
        same = super().__eq__(other)
        if same is not True:
            return same
        mine, theirs = _device_hint(self), _device_hint(other)
        return mine is None or theirs is None or mine == theirs

    def __ne__(self, other):
        # Defined too: the core's != does not call a subclass's __eq__.
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    # Equal streams must hash alike: the hint is left out (wrappers of one
    # handle on two devices only collide).
    __hash__ = _CoreStream.__hash__


class _StreamGuard:
    """``with`` block that makes a stream current, and a no-op for None.

    A default-stream wrapper asked for on a device makes that device current
    for the block too.  Re-entrant, and usable from several threads at
    once: each thread's entries are undone from its own stack.
    """

    __slots__ = ("stream", "_undo")

    def __init__(self, stream, argname="stream"):
        self.stream = _as_core_stream(stream, argname, allow_none=True)
        self._undo = threading.local()

    def _stack(self):
        try:
            return self._undo.stack
        except AttributeError:
            self._undo.stack = []
            return self._undo.stack

    def __enter__(self):
        s = self.stream
        if s is None:
            return None
        device = None
        hint = _device_hint(s)
        if s.device_id < 0 and hint is not None:
            device = _streams.Device(hint)
            device.__enter__()
        try:
            s.__enter__()
        except BaseException:
            if device is not None:
                device.__exit__(None, None, None)
            raise
        self._stack().append(device)
        return s

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        stack = self._stack()
        if not stack:
            raise RuntimeError(f"{type(self).__name__} exited in a thread that did not enter it")
        device = stack.pop()
        try:
            self.stream.__exit__(*exc)
        finally:
            if device is not None:
                device.__exit__(*exc)
        return False
