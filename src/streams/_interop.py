"""Current-stream bridges between ``streams`` and PyTorch or CuPy.

``follow_current_stream(framework)``: while on, :func:`streams.current_stream`
(and so every call given no stream) answers the framework's current stream
where this thread made no ``streams`` stream current.  ``current_in(framework,
stream)``: the reverse, a ``with`` block in which ``stream`` is the
framework's current stream.  The frameworks are imported on first use only.
"""
import contextlib
import importlib
import threading

from streams._device import get_device
from streams._stream import Stream, _set_current_source, as_stream

__all__ = ["FRAMEWORKS", "current_in", "follow_current_stream"]

#: The frameworks the bridges know.
FRAMEWORKS = ("torch", "cupy")

# Wrappers of the framework streams that were current, by (framework,
# device, handle).  A wrapper keeps its framework object alive, so a handle
# in here cannot be destroyed and reused by another stream meanwhile.  Kept
# small: a framework has few current streams at a time.
_MAX_WRAPPERS = 16
_wrappers = {}
_lock = threading.Lock()
_following = [None]      # the framework followed now, or None


def _framework(name):
    if name not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(map(repr, FRAMEWORKS))}, "
                         f"got {name!r}")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(f"framework {name!r} is not installed ({exc})") from exc


def _wrapper(framework, device, obj, handle):
    key = (framework, device, handle)
    w = _wrappers.get(key)
    if w is not None and not w.closed:
        return w
    w = Stream.from_handle(handle, owner=obj, device=device if handle > 2 else None)
    with _lock:
        if len(_wrappers) >= _MAX_WRAPPERS:
            _wrappers.clear()
        _wrappers[key] = w
    return w


# Each framework's current stream for a device, and where its handle is.
_CURRENT = {"torch": (lambda mod: mod.cuda.current_stream, "cuda_stream"),
            "cupy": (lambda mod: mod.cuda.get_current_stream, "ptr")}


def _current_stream_source(framework, mod):
    get_current, handle_attr = _CURRENT[framework]
    current = get_current(mod)

    def source(device):
        theirs = current(device)
        return _wrapper(framework, device, theirs, getattr(theirs, handle_attr))

    return source


class follow_current_stream:  # noqa: N801  (a function to its users)
    """Make :func:`streams.current_stream` follow ``framework``'s current stream.

    ``framework`` is ``"torch"`` or ``"cupy"``; None turns following off.
    While on, in every thread, ``streams.current_stream(device)`` is
    ``torch.cuda.current_stream(device)`` (or
    ``cupy.cuda.get_current_stream(device)``), wrapped, wherever that
    thread made no ``streams`` stream current (``with s:`` and ``s.use()``
    still win), instead of ``Stream.legacy``.  So work enqueued through
    ``streams`` with no stream argument lands on the framework's stream.

    Takes effect at once and returns an object that, used as a context
    manager, puts back what was followed before on exit::

        with streams.follow_current_stream("torch"):
            ev = streams.Event().record()     # on torch's current stream
    """

    __slots__ = ("framework", "previous")

    def __init__(self, framework):
        if framework is None:
            source = None
        else:
            mod = _framework(framework)
            source = _current_stream_source(framework, mod)
        self.framework = framework
        with _lock:
            self.previous = (_following[0], _set_current_source(source))
            _following[0] = framework

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        framework, source = self.previous
        with _lock:
            _set_current_source(source)
            _following[0] = framework
        return False

    def __repr__(self):
        return f"<streams.follow_current_stream {self.framework!r}>"


@contextlib.contextmanager
def current_in(framework, stream=None):
    """``with streams.current_in("torch", s):`` makes ``s`` the framework's
    current stream (and its device the framework's current device) for the
    block; ``framework`` is ``"torch"`` or ``"cupy"``.

    ``stream`` is anything :func:`streams.as_stream` takes (None: streams'
    current stream).  The block gets the framework's stream object, a
    ``torch.cuda.ExternalStream`` / ``cupy.cuda.ExternalStream`` of the same
    handle (the default streams: the framework's own; PyTorch's default
    stream stands for ``Stream.null`` and ``Stream.legacy``, and PyTorch has
    none for ``Stream.per_thread``: ValueError), and ``stream`` is
    kept alive until the block ends: keep it alive while the framework
    still has work of the block to enqueue.
    """
    mod = _framework(framework)
    s = as_stream(stream, "stream")
    if framework == "torch" and s.handle == 2:
        # Checked before the framework's state changes.
        raise ValueError("current_in('torch', ...): PyTorch has no stream object for the "
                         "per-thread default stream (torch.cuda.ExternalStream cannot take "
                         "handle 2); use a streams.Stream, or Stream.legacy for torch's "
                         "default stream")
    device = s.device_id if s.device_id >= 0 else get_device()
    if framework == "torch":
        with mod.cuda.device(device):
            theirs = _torch_stream(mod, s, device)
            with mod.cuda.stream(theirs):
                yield theirs
    else:
        with mod.cuda.Device(device):
            theirs = _cupy_stream(mod, s, device)
            with theirs:
                yield theirs


def _torch_stream(torch, s, device):
    # torch's default stream is CUDA's null stream, which acts as the
    # legacy default stream (PyTorch is built without per-thread default
    # streams): it stands for handles 0 and 1.  ExternalStream cannot take
    # a special handle (torch refuses the stream id at its first use).
    if s.handle in (0, 1):
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(s.handle, device=torch.device("cuda", device))


def _cupy_stream(cupy, s, device):
    if s.handle == 0:
        return cupy.cuda.Stream.null
    if s.handle == 2:
        return cupy.cuda.Stream.ptds
    return cupy.cuda.ExternalStream(s.handle, device if s.device_id >= 0 else -1)
