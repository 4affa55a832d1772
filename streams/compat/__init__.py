"""Stream and event APIs shaped like those of other frameworks.

``streams.compat.cupy``, ``streams.compat.torch``, ``streams.compat.paddle``
and ``streams.compat.mindspore`` reproduce the stream and event API each
framework documents, on top of :class:`streams.Stream` and
:class:`streams.Event`.  Their classes are subclasses of the core ones, so
anything in ``streams`` that takes a Stream or an Event takes them too, and
the "current stream" they read and set is the one of ``streams``
(:func:`streams.current_stream`).  None of them imports the framework it
imitates, and importing them does no GPU work.

Wrappers of streams that the caller does not own (the default streams, or
another module's current stream) are built with ``Stream.from_handle`` on the
compat class, which returns an instance of that class.
"""
import streams as _streams
from streams import Event as _CoreEvent
from streams import Stream as _CoreStream

__all__ = []


def _wrap_default(cls, handle):
    """``cls`` wrapping default stream ``handle`` (0, 1 or 2), device -1."""
    return cls.from_handle(handle)


def _adopt(cls, stream):
    """``stream`` as a ``cls`` sharing its handle (``stream`` itself if it is one)."""
    if isinstance(stream, cls) or stream.closed:
        return stream
    if stream.device_id < 0:
        return cls.from_handle(stream.handle)
    # owner= keeps the stream that owns the handle alive as long as the wrapper.
    return cls.from_handle(stream.handle, owner=stream, device=stream.device_id)


def _device_index(device):
    """The index of a device argument already in the core's form (None: current)."""
    if device is None:
        return _streams.get_device()
    return _streams.Device(device).device_id


def _reject_kwargs(where, kwargs):
    # The frameworks take **kwargs for internal uses they do not document;
    # accepting and ignoring them would hide typos.
    if kwargs:
        names = ", ".join(sorted(kwargs))
        raise TypeError(f"{where} got unexpected keyword argument(s): {names}")


def _check_stream(stream, argname, allow_none=False):
    if stream is None and allow_none:
        return
    if not isinstance(stream, _CoreStream):
        expected = "a Stream or None" if allow_none else "a Stream"
        raise TypeError(f"{argname} must be {expected} (a streams.Stream or any "
                        f"streams.compat Stream), not {type(stream).__name__}")


def _check_event(event, argname, allow_none=False):
    if event is None and allow_none:
        return
    if not isinstance(event, _CoreEvent):
        expected = "an Event or None" if allow_none else "an Event"
        raise TypeError(f"{argname} must be {expected} (a streams.Event or any "
                        f"streams.compat Event), not {type(event).__name__}")


class _FrameworkEvent(_CoreEvent):
    """What the frameworks' Event classes share: ``elapsed_time(end_event)``
    names its argument as they do and accepts any streams Event."""

    def elapsed_time(self, end_event):
        """Milliseconds from this event to ``end_event`` (waits for both)."""
        _check_event(end_event, "end_event")
        return super().elapsed_time(end_event)


class _StreamGuard:
    """``with`` block that makes a stream current, and a no-op for None.

    Re-entrant: each entry remembers what it must undo.
    """

    __slots__ = ("stream", "_undo")

    def __init__(self, stream, argname="stream"):
        _check_stream(stream, argname, allow_none=True)
        self.stream = stream
        self._undo = []

    def __enter__(self):
        s = self.stream
        if s is None:
            self._undo.append(None)
            return None
        # A default stream has no device of its own (device_id -1); one that
        # was asked for a given device remembers it, and that device must
        # be current for the block, as with an owned stream.
        device = None
        index = getattr(s, "_device_index", None)
        if s.device_id < 0 and index is not None:
            device = _streams.Device(index)
            device.__enter__()
        try:
            s.__enter__()
        except BaseException:
            if device is not None:
                device.__exit__(None, None, None)
            raise
        self._undo.append(device)
        return s

    def __exit__(self, *exc):
        device = self._undo.pop()
        if self.stream is None:
            return False
        try:
            self.stream.__exit__(*exc)
        finally:
            if device is not None:
                device.__exit__(*exc)
        return False
