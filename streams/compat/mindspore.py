"""``mindspore.hal.Stream``, ``mindspore.hal.Event`` and the
``mindspore.hal`` stream functions, on streams' core classes.

``Stream(priority=0, **kwargs)`` creates a stream on the current device;
lower ``priority`` numbers run first (CUDA's numbering, clamped into the
device's range).  Arguments that must be a Stream or an Event raise
TypeError otherwise; streams and events of ``streams`` itself and of the
other compat modules are accepted.  See docs/compat/mindspore.rst for the
mapping.
"""
import streams as _streams
from streams.compat import (_FrameworkEvent, _StreamGuard, _adopt, _check_event, _check_stream,
                            _reject_kwargs)

__all__ = ["Event", "Stream", "StreamCtx", "current_stream", "synchronize"]


class Event(_FrameworkEvent):
    """A device event: ``Event(enable_timing=False, blocking=False)``."""

    def __init__(self, enable_timing=False, blocking=False):
        super().__init__(enable_timing=enable_timing, blocking=blocking)

    def record(self, stream=None, *, external=False):
        """Record this event on ``stream`` (None: the current stream)."""
        _check_stream(stream, "stream", allow_none=True)
        return super().record(stream, external=external)

    def wait(self, stream=None):
        """Make future work on ``stream`` (None: the current stream) wait for this event."""
        _check_stream(stream, "stream", allow_none=True)
        return super().wait(stream)


class Stream(_streams.Stream):
    """A device stream on the current device: ``Stream(priority=0)``."""

    def __init__(self, priority=0, **kwargs):
        _reject_kwargs("Stream()", kwargs)
        super().__init__(priority=priority)

    def record_event(self, event=None):
        """Record ``event`` (a new Event if None) on this stream and return it."""
        _check_event(event, "event", allow_none=True)
        return super().record(Event() if event is None else event)

    def wait_event(self, event, *, external=False):
        """Make future work on this stream wait for ``event`` (returns at once)."""
        _check_event(event, "event")
        super().wait_event(event, external=external)

    def wait_stream(self, stream):
        """Make future work on this stream wait for the work now enqueued on ``stream``."""
        _check_stream(stream, "stream")
        super().wait_stream(stream)


class StreamCtx(_StreamGuard):
    """``with StreamCtx(s):`` runs the block with ``s`` as the current stream
    (None: do nothing)."""

    __slots__ = ()

    def __init__(self, ctx_stream):
        super().__init__(ctx_stream, "ctx_stream")


def current_stream():
    """The current stream of the current device."""
    return _adopt(Stream, _streams.current_stream())


def synchronize():
    """Wait for all work on the current device, on every stream."""
    _streams.synchronize_device()
