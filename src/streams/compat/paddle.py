"""``paddle.device.Stream``, ``paddle.device.Event`` and the
``paddle.device`` stream functions, on streams' core classes.

Follows Paddle 3.x as its documentation stands (``paddle.device.Stream``
and ``paddle.device.Event`` of Paddle 3.0-3.2, whose own tests pass
``Event(device=...)``).

``Stream(device=None, priority=None, blocking=False)``:

* ``device``: None (current device), an int (negative: current device),
  ``"gpu"``, ``"gpu:N"``, or a place object with ``get_device_id()``
  (``paddle.CUDAPlace``).  Other device types raise ValueError.
* ``priority``: Paddle numbers priorities 1 (high) and 2 (normal, the
  default, also what None means); its stream class also maps -1 to high
  and 0 to normal.  High becomes the device's greatest CUDA priority and
  normal its least; anything else raises ValueError (Paddle would fall
  back to normal silently).
* ``blocking``: False (the default) creates a ``cudaStreamNonBlocking``
  stream, which does not synchronize with the legacy default stream;
  True creates a default-flag stream, which does.  This is the mapping of
  Paddle's stream binding for custom devices (its CUDA binding always
  creates non-blocking streams).

``Event(device=None, enable_timing=False, blocking=False,
interprocess=False)``: ``device`` takes the forms ``Stream`` takes; the
event is created on that device (None: the current one).

See docs/compat/paddle.rst for the mapping.
"""
import operator

import streams as _streams
from streams.compat import _FrameworkEvent, _FrameworkStream, _StreamGuard

__all__ = ["Event", "Stream", "current_stream", "stream_guard", "synchronize"]

_HIGH, _NORMAL = 1, 2
# paddle.device.Stream._priority_map: -1 and 1 are high, 0 and 2 normal.
_PRIORITIES = {-1: _HIGH, 0: _NORMAL, 1: _HIGH, 2: _NORMAL}


def _requested_priority(priority):
    if priority is None:
        return _NORMAL
    try:
        value = None if isinstance(priority, bool) else operator.index(priority)
    except TypeError:
        value = None
    if value not in _PRIORITIES:
        raise ValueError("priority must be 1 or -1 (high), 2 or 0 (normal) or None, "
                         f"got {priority!r}")
    return _PRIORITIES[value]


class Event(_FrameworkEvent):
    """A CUDA event: ``Event(device=None, enable_timing=False, blocking=False, interprocess=False)``.

    Reproduces ``paddle.device.Event``
    (https://www.paddlepaddle.org.cn/documentation/docs/zh/api/paddle/device/Event_cn.html):
    "device (paddle.CUDAPlace|paddle.CustomPlace|str) - 希望分配 event 的设备或设备类型。
    如果为 None，则为当前期望的 place" (the device to create the event on;
    None: the current one); ``record(stream=None)`` marks the event on the
    current stream when ``stream`` is None, and returns None.
    """

    def __init__(self, device=None, enable_timing=False, blocking=False, interprocess=False):
        if isinstance(device, bool):
            # Event(True) meant enable_timing in Paddle releases without `device`.
            raise TypeError("device must be None, an int, 'gpu[:N]' or a CUDAPlace, not bool "
                            "(pass enable_timing= by keyword)")
        # Parsed as Stream's device is: a non-GPU place is a ValueError
        # before any CUDA call.
        index = None if device is None else Stream._device_index(device)
        super().__init__(enable_timing=enable_timing, blocking=blocking,
                         interprocess=interprocess, device=index)


class Stream(_FrameworkStream):
    """A CUDA stream: ``Stream(device=None, priority=None, blocking=False)``.

    Reproduces ``paddle.device.Stream``
    (https://www.paddlepaddle.org.cn/documentation/docs/zh/api/paddle/device/Stream_cn.html,
    paddle-device-Stream.zh.txt): "优先级
    可以为 1（高优先级）或者 2（正常优先级）。如果优先级为 None，优先级为 2"
    (priority 1 is high, 2 normal, None means 2).
    """

    __slots__ = ()

    _event_class = Event

    def __init__(self, device=None, priority=None, blocking=False):
        # Both checks come before any CUDA call, so that bad arguments are
        # reported as such even without a GPU.
        requested = _requested_priority(priority)
        index = self._device_index(device)
        least, greatest = _streams.stream_priority_range(index)
        super().__init__(device=index, priority=greatest if requested == _HIGH else least,
                         non_blocking=not blocking)

    @staticmethod
    def _parse_device(device):
        """A Paddle device: an int, ``"gpu[:N]"`` or a place with ``get_device_id()``."""
        if device is None or isinstance(device, (int, str)):
            return device
        get_type = getattr(device, "get_device_type", None)
        if callable(get_type):
            kind = get_type()
            if kind not in ("gpu", "cuda"):
                raise ValueError(f"device={device!r} is a {kind!r} place, not a CUDA GPU")
        get_id = getattr(device, "get_device_id", None)
        if callable(get_id):
            return get_id()
        return device


class stream_guard(_StreamGuard):  # noqa: N801  (Paddle's name)
    """``with stream_guard(s):`` makes ``s`` the current stream for the block
    (None: do nothing).

    Reproduces ``paddle.device.stream_guard``
    (https://www.paddlepaddle.org.cn/documentation/docs/zh/api/paddle/device/stream_guard_cn.html):
    "Notice: This API only supports dynamic graph mode"; the stream is the
    current one within the block and the previous one after it.
    """

    __slots__ = ()

    def __init__(self, stream=None):
        super().__init__(stream, "stream")


def current_stream(device=None):
    """The current stream of ``device`` (None: the current device)."""
    return Stream._current(device)


def synchronize(device=None):
    """Wait for all work on ``device`` (None: the current device)."""
    _streams.synchronize_device(Stream._device_index(device))
