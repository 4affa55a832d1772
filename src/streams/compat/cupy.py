"""``cupy.cuda.Stream`` and ``cupy.cuda.Event``, on streams' core classes.

Follows CuPy 14.2 (``cupy.cuda.Stream`` / ``cupy.cuda.Event`` of CuPy 14.x).

``Stream(null=False, non_blocking=False, ptds=False, priority=None)``
creates a new stream (``priority`` None: 0), or wraps the null stream
(handle 0) or the per-thread default stream (handle 2); ``Stream.null`` and
``Stream.ptds`` are those wrappers as singletons, with ``device_id`` -1.
``is_non_blocking`` and ``priority`` read the stream's flags and priority
back from CUDA; ``Stream.from_external(obj)`` wraps a stream of the CUDA
stream protocol as a CuPy Stream.  ``Event(block=False,
disable_timing=False, interprocess=False)`` takes CuPy's flags: unlike
``streams.Event``, timing is on unless ``disable_timing`` is given.
``add_callback`` hands its callback the CUDA status as an int, as CuPy does.

Everything else (``ptr``, ``device_id``, ``done``, ``synchronize``, ``use``,
``wait_event``, ``launch_host_func``, ``begin_capture``, ``end_capture``,
``is_capturing``, ``__cuda_stream__``, ``with stream:``; ``Event.done`` and
``Event.synchronize``) is the core's.  See
docs/compat/cupy.rst for the mapping.
"""
import functools

import streams as _streams
from streams.compat import _check_event, _FrameworkEvent, _FrameworkStream

__all__ = ["Event", "Stream", "get_current_stream", "get_elapsed_time"]


class Event(_FrameworkEvent):
    """A CUDA event with CuPy's constructor (timing on by default).

    Reproduces ``cupy.cuda.Event`` (https://docs.cupy.dev/en/stable/reference/generated/cupy.cuda.Event.html):
    "disable_timing (bool) - If True, the event does not prepare the timing data";
    ``record(stream=None)`` records on the current stream and returns None.
    ``ptr`` is the ``cudaEvent_t`` as an int.
    """

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        # Checked here so that the message names CuPy's arguments.
        if interprocess and not disable_timing:
            raise ValueError("interprocess=True requires disable_timing=True (CUDA cannot "
                             "time interprocess events)")
        super().__init__(enable_timing=not disable_timing, blocking=bool(block),
                         interprocess=bool(interprocess))

    @property
    def ptr(self):
        return self.handle


class Stream(_FrameworkStream):
    """A CUDA stream with CuPy's constructor, singletons and ordering.

    Reproduces ``cupy.cuda.Stream`` of CuPy 14.2
    (https://docs.cupy.dev/en/stable/reference/generated/cupy.cuda.Stream.html,
    cupy-cuda-Stream.txt): "Note that if both
    null and ptds are False, a plain new stream is created"; ``device_id`` is
    "-1 ... for the singleton stream objects"; "priority (int) - Priority of
    the stream. Lower numbers represent higher priorities."

    ``null=True`` wraps the null stream and ``ptds=True`` (with ``null``
    False) the per-thread default stream; neither owns a handle.
    ``non_blocking`` and ``priority`` (None: 0; clamped by CUDA into the
    device's range) apply only to a new stream.  Streams order by ``ptr``,
    and compare equal when they wrap the same handle.
    """

    __slots__ = ()

    _event_class = Event

    def __new__(cls, null=False, non_blocking=False, ptds=False, priority=None):
        if null:
            return cls.from_handle(0)
        if ptds:
            return cls.from_handle(2)
        return super().__new__(cls)

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        if null or ptds:
            return  # __new__ returned a wrapper: there is nothing to create
        # CuPy: "if priority is None: priority = 0"; the core checks the type
        # (an int, not a bool) before any CUDA call.
        super().__init__(priority=0 if priority is None else priority,
                         non_blocking=bool(non_blocking))

    @classmethod
    def from_external(cls, obj):
        """A CuPy Stream wrapping ``obj``'s stream (the ``__cuda_stream__``
        protocol, or any stream :func:`streams.as_stream` takes); it keeps
        ``obj`` alive and owns nothing."""
        if isinstance(obj, cls):
            return obj
        core = _streams.Stream.from_external(obj)
        device = core.device_id if core.device_id >= 0 else None
        return cls._wrap(core.handle, core, device, None)

    @property
    def is_non_blocking(self):
        """True for a ``cudaStreamNonBlocking`` stream (``cudaStreamGetFlags``)."""
        return self.non_blocking

    @classmethod
    def _present(cls, stream, index):
        if not isinstance(stream, cls) and stream.device_id < 0:
            # Unset, the core reports the legacy stream (handle 1): CuPy calls
            # that same stream the null stream, handle 0.
            return cls.ptds if stream.handle == 2 else cls.null
        return super()._present(stream, index)

    def record(self, event=None):
        """Record ``event`` (a new timing Event if None) on this stream; return it."""
        return self.record_event(event)

    def add_callback(self, callback, arg=None):
        """Run ``callback(stream, status, arg)`` once the work enqueued so far is done.

        ``status`` is 0, or the ``cudaError_t`` code CUDA reported, as an int.
        Prefer ``launch_host_func``.
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, not {type(callback).__name__}")

        # The core reports the status as None or a CudaError; CuPy callbacks
        # expect the raw code.  wraps() keeps the user's callback's name in
        # error reports.
        @functools.wraps(callback)
        def with_int_status(stream, status, user_arg):
            callback(stream, 0 if status is None else status.code, user_arg)

        super().add_callback(with_int_status, arg)

    def __lt__(self, other):
        if not isinstance(other, _streams.Stream):
            return NotImplemented
        return self.ptr < other.ptr

    def __le__(self, other):
        if not isinstance(other, _streams.Stream):
            return NotImplemented
        return self.ptr <= other.ptr

    def __gt__(self, other):
        if not isinstance(other, _streams.Stream):
            return NotImplemented
        return self.ptr > other.ptr

    def __ge__(self, other):
        if not isinstance(other, _streams.Stream):
            return NotImplemented
        return self.ptr >= other.ptr

    def __repr__(self):
        state = " closed" if self.closed else ""
        return f"<streams.compat.cupy.Stream {self.ptr} (device {self.device_id}){state}>"


Stream.null = Stream.from_handle(0)
Stream.ptds = Stream.from_handle(2)


def get_current_stream(device_id=-1):
    """The current stream of ``device_id`` (-1 or None: the current device).

    ``Stream.null`` when no stream was made current, as in CuPy.
    """
    return Stream._current(device_id)


def get_elapsed_time(start_event, end_event):
    """Milliseconds between two recorded timing events (waits for both)."""
    _check_event(start_event, "start_event")
    _check_event(end_event, "end_event")
    return start_event.elapsed_time(end_event)
