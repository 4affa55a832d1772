"""``torch.cuda.Stream``, ``torch.cuda.Event`` and the ``torch.cuda`` stream
functions, on streams' core classes.

``Stream(device=None, priority=0, **kwargs)``: ``device`` None or negative
means the current device; ``priority`` outside the device's range is mapped
to the nearest valid one (the core clamps exactly as PyTorch documents).
The default stream is reported with ``cuda_stream`` 0, as in PyTorch.
``device`` is a :class:`streams.Device` (PyTorch returns a ``torch.device``).
See docs/compat/torch.rst for the mapping.
"""
import streams as _streams
from streams.compat import _device_index as _core_device_index
from streams.compat import (_FrameworkEvent, _StreamGuard, _adopt, _check_event, _check_stream,
                            _reject_kwargs, _wrap_default)

__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream",
           "set_stream", "stream", "synchronize"]


def _device_arg(device):
    # PyTorch reads a negative index as "the current device"; the core
    # rejects it as out of range.
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        return None
    return device


def _device_index(device):
    return _core_device_index(_device_arg(device))


class Event(_FrameworkEvent):
    """A CUDA event: ``Event(enable_timing=False, blocking=False, interprocess=False)``."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        super().__init__(enable_timing=enable_timing, blocking=blocking,
                         interprocess=interprocess)


class Stream(_streams.Stream):
    """A CUDA stream: ``Stream(device=None, priority=0)``.

    Lower ``priority`` numbers run first; values outside the device's range
    are clamped into it.  No keyword arguments beyond these are accepted.
    """

    # Set on default-stream wrappers, which have no device of their own
    # (device_id -1) but were asked for on a given device.
    _device_index = None

    def __init__(self, device=None, priority=0, **kwargs):
        _reject_kwargs("Stream()", kwargs)
        super().__init__(device=_device_arg(device), priority=priority)

    def record_event(self, event=None):
        """Record ``event`` (a new Event if None) on this stream and return it."""
        _check_event(event, "event", allow_none=True)
        return super().record(Event() if event is None else event)

    @property
    def cuda_stream(self):
        """The ``cudaStream_t`` as an int (0 for the default stream)."""
        return self.handle

    @property
    def device_index(self):
        if self.device_id >= 0:
            return self.device_id
        if self._device_index is not None:
            return self._device_index
        return _streams.get_device()

    @property
    def device(self):
        """The stream's :class:`streams.Device`."""
        return _streams.Device(self.device_index)

    def __repr__(self):
        # No CUDA call here: a repr must not fail.
        device = self._device_index if self.device_id < 0 else self.device_id
        state = " closed" if self.closed else ""
        return (f"<streams.compat.torch.Stream device={device} "
                f"cuda_stream=0x{self.handle:x}{state}>")


class StreamContext(_StreamGuard):
    """``with StreamContext(s):`` makes ``s`` the current stream (and its
    device the current device) for the block; a no-op when ``s`` is None."""

    __slots__ = ()


def stream(stream):
    """Context manager selecting ``stream`` (None: do nothing), like ``torch.cuda.stream``."""
    return StreamContext(stream)


def default_stream(device=None):
    """The default stream of ``device`` (None or negative: the current device)."""
    index = _device_index(device)
    s = _wrap_default(Stream, 0)
    if isinstance(s, Stream):
        s._device_index = index
    return s


def current_stream(device=None):
    """The current stream of ``device`` (None or negative: the current device)."""
    index = _device_index(device)
    current = _streams.current_stream(index)
    if isinstance(current, Stream):
        return current
    if current.device_id < 0 and current.handle in (0, 1):
        # Unset, the core reports the legacy stream (handle 1); PyTorch
        # reports that stream as the default stream, cuda_stream 0.
        return default_stream(index)
    s = _adopt(Stream, current)
    if isinstance(s, Stream) and s.device_id < 0:
        s._device_index = index
    return s


def set_stream(stream):
    """Make ``stream`` current, and its device the current device (None: do nothing).

    Prefer ``with stream(s):``, which restores what it replaced.
    """
    if stream is None:
        return
    _check_stream(stream, "stream")
    index = stream.device_id
    if index < 0:
        index = getattr(stream, "_device_index", None)
    if index is not None and index != _streams.get_device():
        _streams.set_device(index)
    stream.use()


def synchronize(device=None):
    """Wait for all work on ``device`` (None or negative: the current device)."""
    _streams.synchronize_device(_device_index(device))
