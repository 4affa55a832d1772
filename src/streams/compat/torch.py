"""``torch.cuda.Stream``, ``torch.cuda.Event`` and the ``torch.cuda`` stream
functions, on streams' core classes.

Follows PyTorch 2.11 (``torch.cuda.Stream`` / ``torch.cuda.Event``).

``Stream(device=None, priority=0, **kwargs)``: ``device`` None or negative
means the current device; ``priority`` outside the device's range is mapped
to the nearest valid one (the core clamps exactly as PyTorch documents).
The default stream is reported with ``cuda_stream`` 0, as in PyTorch.
``Event(enable_timing=False, blocking=False, interprocess=False,
external=False)``: an ``external`` event becomes event-record and
event-wait nodes when recorded or waited for during a stream capture
(``cudaEventRecordExternal`` / ``cudaEventWaitExternal``), and acts as a
plain event outside one.
``device`` is a :class:`streams.Device` (PyTorch returns a ``torch.device``).
See docs/compat/torch.rst for the mapping.
"""
import streams as _streams
from streams.compat import (_as_core_stream, _check_event, _check_stream, _device_hint,
                            _FrameworkEvent, _FrameworkStream, _reject_kwargs, _StreamGuard)

# PyTorch's stream pools have this many priority levels
# (c10::cuda::max_compile_time_stream_priorities): its priority_range() and
# its streams' priorities stop at -3 even where CUDA offers -5.
_TORCH_PRIORITIES = 4

__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream",
           "set_stream", "stream", "synchronize"]


def _capturing(stream):
    """Whether ``stream`` (None: the current stream) is being captured."""
    return _streams.as_stream(stream, "stream").is_capturing()


class Event(_FrameworkEvent):
    """A CUDA event: ``Event(enable_timing=False, blocking=False, interprocess=False, external=False)``.

    Reproduces ``torch.cuda.Event`` of PyTorch 2.11
    (https://pytorch.org/docs/stable/generated/torch.cuda.Event.html):
    "record(stream=None): Record the event in a given stream. Uses
    torch.cuda.current_stream() if no stream is specified" (returns None, as
    does ``wait``); "external (bool, optional) - indicates whether this event
    should create event record and event wait nodes, or create an internal
    cross-stream dependency, when captured in a cuda graph".

    CUDA refuses the external flags outside a capture, so an ``external``
    event uses them only on a stream that is capturing.
    """

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        super().__init__(enable_timing=enable_timing, blocking=blocking,
                         interprocess=interprocess)
        self._external = bool(external)

    @property
    def external(self):
        """Whether recording and waiting make event nodes in a capture."""
        return getattr(self, "_external", False)    # False for __new__-made events

    def record(self, stream=None, *, external=None):
        """Record on ``stream`` (None: the current stream); an ``external``
        event, during a capture, as an event-record node."""
        _check_stream(stream, "stream", allow_none=True)
        if external is None:
            external = self.external and _capturing(stream)
        super().record(stream, external=external)

    def __repr__(self):
        # The core's description, under PyTorch's class name.
        core = super().__repr__()
        return "<streams.compat.torch.Event" + core[len("<streams.Event"):]

    def wait(self, stream=None):
        """Make ``stream`` (None: the current stream) wait for this event; an
        ``external`` event, during a capture, as an event-wait node."""
        _check_stream(stream, "stream", allow_none=True)
        if self.external and _capturing(stream):
            _streams.as_stream(stream, "stream").wait_event(self, external=True)
        else:
            super().wait(stream)


class Stream(_FrameworkStream):
    """A CUDA stream: ``Stream(device=None, priority=0)``.

    Reproduces ``torch.cuda.Stream``
    (https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html,
    torch-cuda-Stream.txt): "If device is None (default) or a negative
    integer, this will use the current device"; a priority outside the
    range "will automatically be mapped to the nearest valid priority" (the
    range of :meth:`priority_range`).  No keyword arguments beyond these are
    accepted.
    """

    __slots__ = ()

    _event_class = Event

    def __init__(self, device=None, priority=0, **kwargs):
        _reject_kwargs("Stream()", kwargs)
        device = self._device_arg(device)
        if isinstance(priority, int) and not isinstance(priority, bool):
            least, greatest = _torch_priority_range(device)
            priority = min(max(priority, greatest), least)
        super().__init__(device=device, priority=priority)

    @staticmethod
    def priority_range():
        """``(least, greatest)`` of the current device as
        ``torch.cuda.Stream.priority_range()`` returns it: lower numbers run
        first, and PyTorch offers 4 levels at most (0 to -3), whatever the
        device has."""
        return _torch_priority_range(None)

    def record_event(self, event=None):
        """Record ``event`` (a new Event if None) on this stream and return it,
        as ``event.record(self)`` (an ``external`` event's flag applies)."""
        _check_event(event, "event", allow_none=True)
        if event is None:
            event = Event()
        event.record(self)
        return event

    def wait_event(self, event, *, external=None):
        """Make future work on this stream wait for ``event``, as
        ``event.wait(self)`` (an ``external`` event's flag applies)."""
        if external is None:
            external = getattr(event, "external", False) is True and self.is_capturing()
        super().wait_event(event, external=external)

    @classmethod
    def _present(cls, stream, index):
        if not isinstance(stream, cls) and stream.device_id < 0 and stream.handle == 1:
            # Unset, the core reports the legacy stream (handle 1); PyTorch
            # reports that stream as the default stream, cuda_stream 0.
            stream = _streams.Stream.null
        return super()._present(stream, index)

    @property
    def cuda_stream(self):
        """The ``cudaStream_t`` as an int (0 for the default stream)."""
        return self.handle

    @property
    def device_index(self):
        if self.device_id >= 0:
            return self.device_id
        hint = _device_hint(self)
        return _streams.get_device() if hint is None else hint

    @property
    def device(self):
        """The stream's :class:`streams.Device`."""
        return _streams.Device(self.device_index)

    def __repr__(self):
        # No CUDA call here: a repr must not fail.
        device = _device_hint(self) if self.device_id < 0 else self.device_id
        state = " closed" if self.closed else ""
        return (f"<streams.compat.torch.Stream device={device} "
                f"cuda_stream=0x{self.handle:x}{state}>")


def _torch_priority_range(device):
    least, greatest = _streams.stream_priority_range(device)
    return least, max(greatest, least - _TORCH_PRIORITIES + 1)


class StreamContext(_StreamGuard):
    """``with StreamContext(s):`` makes ``s`` the current stream (and its
    device the current device) for the block; a no-op when ``s`` is None.

    Reproduces ``torch.cuda.StreamContext``
    (https://pytorch.org/docs/stable/generated/torch.cuda.StreamContext.html):
    "All CUDA kernels queued within its context will be enqueued on a
    selected stream"; "This manager is a no-op if it's None".
    """

    __slots__ = ()


def stream(stream):
    """Context manager selecting ``stream`` (None: do nothing), like ``torch.cuda.stream``."""
    return StreamContext(stream)


def default_stream(device=None):
    """The default stream of ``device`` (None or negative: the current device)."""
    return Stream._adopt(_streams.Stream.null, Stream._device_index(device))


def current_stream(device=None):
    """The current stream of ``device`` (None or negative: the current device)."""
    return Stream._current(device)


def set_stream(stream):
    """Make ``stream`` current, and its device the current device (None: do nothing).

    Prefer ``with stream(s):``, which restores what it replaced.
    """
    if stream is None:
        return
    stream = _as_core_stream(stream, "stream")
    index = stream.device_id if stream.device_id >= 0 else _device_hint(stream)
    if index is not None and index != _streams.get_device():
        _streams.set_device(index)
    stream.use()


def synchronize(device=None):
    """Wait for all work on ``device`` (None or negative: the current device)."""
    _streams.synchronize_device(Stream._device_index(device))
