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
from streams.compat import (_check_event, _check_stream, _FrameworkEvent, _FrameworkStream,
                            _reject_kwargs, _StreamGuard)

__all__ = ["Event", "Stream", "StreamCtx", "current_stream", "synchronize"]

# The reference (mindspore-hal-Stream.zh.txt) documents ``kwargs`` only as
# "关键字参数字典" (a dictionary of keyword arguments) and names none.
# MindSpore's implementation reads one, ``stream_id``: an index into its
# runtime's own stream table, which has no CUDA counterpart.
_DOCUMENTED_KWARGS = ()


class Event(_FrameworkEvent):
    """A device event: ``Event(enable_timing=False, blocking=False)``.

    Reproduces ``mindspore.hal.Event``
    (https://www.mindspore.cn/docs/zh-CN/master/api_python/hal/mindspore.hal.Event.html):
    ``record``/``wait`` use "the current stream" when ``stream`` is None and
    raise "TypeError - If 'stream' is neither a mindspore.hal.Stream nor a None".
    """

    def __init__(self, enable_timing=False, blocking=False):
        super().__init__(enable_timing=enable_timing, blocking=blocking)


class Stream(_FrameworkStream):
    """A device stream on the current device: ``Stream(priority=0)``.

    Reproduces ``mindspore.hal.Stream`` (mindspore-hal-Stream.zh.txt):
    "较低的数字表示较高的优先级" (lower numbers are higher priorities), and
    TypeError when ``record_event``/``wait_event``/``wait_stream`` get
    something that is not an Event / Stream.
    """

    __slots__ = ()

    _event_class = Event

    def __init__(self, priority=0, **kwargs):
        _reject_kwargs("Stream()", kwargs, _DOCUMENTED_KWARGS)
        super().__init__(priority=priority)

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
    (None: do nothing).

    Reproduces ``mindspore.hal.StreamCtx``
    (https://www.mindspore.cn/docs/zh-CN/master/api_python/hal/mindspore.hal.StreamCtx.html):
    "This manager is a no-op if it's None"; TypeError "If 'stream' is
    neither a mindspore.hal.Stream nor a None".
    """

    __slots__ = ()

    def __init__(self, ctx_stream):
        super().__init__(ctx_stream, "ctx_stream")


def current_stream():
    """The current stream of the current device."""
    return Stream._current()


def synchronize():
    """Wait for all work on the current device, on every stream."""
    _streams.synchronize_device()
