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
# "关键字参数字典" (a dictionary of keyword arguments).  MindSpore's
# implementation reads two: ``stream``, an existing stream to wrap (here:
# any stream streams.as_stream takes), and ``stream_id``, an index into its
# runtime's own stream table, which has no CUDA counterpart.
_DOCUMENTED_KWARGS = ("stream", "stream_id")


def _check_priority(priority):
    # MindSpore checks with Validator.check_is_int: an int, not a bool.
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")


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
    """A device stream on the current device: ``Stream(priority=0, **kwargs)``.

    Reproduces ``mindspore.hal.Stream``
    (https://www.mindspore.cn/docs/zh-CN/master/api_python/hal/mindspore.hal.Stream.html,
    mindspore-hal-Stream.zh.txt): "较低的数字表示较高的优先级" (lower numbers
    are higher priorities), and TypeError when
    ``record_event``/``wait_event``/``wait_stream`` get something that is
    not an Event / Stream (another library's stream or waited event is
    accepted too).

    Keyword arguments, as MindSpore reads them: ``stream=`` wraps an
    existing stream (anything :func:`streams.as_stream` takes; the new
    object owns nothing and keeps it alive) instead of creating one;
    ``stream_id=`` (an index into MindSpore's own stream table) has no CUDA
    counterpart and raises NotImplementedError.  Others raise TypeError.
    """

    __slots__ = ()

    _event_class = Event

    def __new__(cls, priority=0, **kwargs):
        existing = kwargs.get("stream")
        if existing is None:
            return super().__new__(cls)
        _reject_kwargs("Stream()", kwargs, _DOCUMENTED_KWARGS)
        _check_priority(priority)
        core = _streams.as_stream(existing, "stream")
        device = core.device_id if core.device_id >= 0 else None
        return cls._wrap(core.handle, core, device, None)

    def __init__(self, priority=0, **kwargs):
        if kwargs.get("stream") is not None:
            return  # __new__ wrapped it: there is nothing to create
        _reject_kwargs("Stream()", kwargs, _DOCUMENTED_KWARGS)
        _check_priority(priority)
        if "stream_id" in kwargs:
            stream_id = kwargs["stream_id"]
            if isinstance(stream_id, bool) or not isinstance(stream_id, int):
                raise TypeError(f"stream_id must be an int, not {type(stream_id).__name__}")
            raise NotImplementedError(
                "stream_id indexes MindSpore's own runtime stream table, which has no CUDA "
                "counterpart: pass stream= an existing stream object instead")
        super().__init__(priority=priority)

    def wait_event(self, event, *, external=False):
        """Make future work on this stream wait for ``event`` (returns at once)."""
        _check_event(event, "event", waited=True)
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
