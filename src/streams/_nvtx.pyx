# cython: language_level=3
"""NVTX annotations for Nsight Systems and any other NVTX tool
(docs/nvtx.rst): ranges, marks, domains, the names of streams, events and
devices, and ranges around the package's own operations.

The one module that makes NVTX calls (``src/nvtx.h``): NVTX3 keeps its
function table in each shared object that includes it.  No CUDA call here.
Every call is safe from any thread, with or without the GIL; with no tool
attached each is a load and a branch (NVTX3's own check), and with no NVTX
headers at build time each does nothing (``available`` is False).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport uint32_t, uintptr_t

from streams._platform cimport streams_flag_get, streams_flag_set

import functools as _functools
import os as _os
import threading as _threading

cdef extern from "nvtx.h" nogil:
    const int STREAMS_NVTX_BUILT
    const int STREAMS_NVTX_NAMES
    void* streams_nvtx_domain_create(const char* name)
    void* streams_nvtx_register(void* domain, const char* s)
    int streams_nvtx_push(void* domain, const char* message, void* registered, uint32_t color,
                          uint32_t category)
    int streams_nvtx_pop(void* domain)
    void streams_nvtx_mark(void* domain, const char* message, void* registered, uint32_t color,
                           uint32_t category)
    void streams_nvtx_name_category(void* domain, uint32_t category, const char* name)
    void streams_nvtx_name_stream(void* stream, const char* name)
    void streams_nvtx_name_event(void* event, const char* name)
    void streams_nvtx_name_device(int device, const char* name)


#: Whether this build makes NVTX calls (NVTX headers were found when it was
#: built).  False: every function here still works and does nothing.
available = bool(STREAMS_NVTX_BUILT)

# ---- arguments ---------------------------------------------------------------------------------

_COLORS = {"red": 0xFF0000, "green": 0x00B050, "blue": 0x0070C0, "yellow": 0xFFD700,
           "orange": 0xFF8C00, "purple": 0x7030A0, "cyan": 0x00B0F0, "magenta": 0xFF00FF,
           "gray": 0x808080, "grey": 0x808080, "black": 0x000000, "white": 0xFFFFFF}


cdef uint32_t _color(object color) except? 0xFFFFFFFF:
    """0 for None (no color), else 0xAARRGGBB: an int 0xRRGGBB (opaque) or
    0xAARRGGBB with a non-zero alpha, "#RRGGBB", or a name of _COLORS."""
    cdef object value
    if color is None:
        return 0
    if isinstance(color, str):
        if color.startswith("#") and len(color) == 7:
            try:
                value = int(color[1:], 16)
            except ValueError:
                value = None
        else:
            value = _COLORS.get(color.lower())
        if value is None:
            raise ValueError(f"color must be 0xRRGGBB, 0xAARRGGBB, '#RRGGBB' or one of "
                             f"{', '.join(repr(n) for n in _COLORS)}, not {color!r}")
    elif isinstance(color, bool) or not isinstance(color, int):
        raise TypeError(f"color must be an int (0xRRGGBB or 0xAARRGGBB) or a str, not "
                        f"{type(color).__name__}")
    else:
        value = color
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"color must be in [0, 0xFFFFFFFF], not {color!r}")
    if value <= 0xFFFFFF:
        value |= 0xFF000000      # RGB: opaque
    return <uint32_t>value


cdef uint32_t _category(object category) except? 0xFFFFFFFF:
    if category is None:
        return 0
    if isinstance(category, bool) or not isinstance(category, int):
        raise TypeError(f"category must be None or an int, not {type(category).__name__}")
    if not 0 <= category <= 0xFFFFFFFE:
        raise ValueError(f"category must be in [0, 0xFFFFFFFE], not {category!r}")
    return <uint32_t>category


cdef bytes _text(object text, str argname):
    """``text`` (a str) as the NUL-terminated UTF-8 that NVTX takes."""
    cdef bytes b
    if not isinstance(text, str):
        raise TypeError(f"{argname} must be a str, not {type(text).__name__}")
    b = (<str>text).encode("utf-8", "surrogatepass")
    if b"\0" in b:
        raise ValueError(f"{argname} must not contain NUL characters")
    return b


# ---- domains -----------------------------------------------------------------------------------

# name -> handle (an int), made once under _lock: a domain is never destroyed
# (a tool keys what it recorded on it), so a handle stays valid.
_domains = {}
_lock = _threading.Lock()


cdef void* nvtx_domain(object name) except? NULL:
    cdef bytes b
    if name is None:
        return NULL
    found = _domains.get(name)
    if found is not None:
        return <void*><uintptr_t>found
    if not isinstance(name, str):
        raise TypeError(f"domain must be None or a str, not {type(name).__name__}")
    b = _text(name, "domain")
    with _lock:
        found = _domains.get(name)
        if found is None:
            found = <uintptr_t>streams_nvtx_domain_create(PyBytes_AS_STRING(b))
            _domains[name] = found
    return <void*><uintptr_t>found


def name_category(category, name, *, domain=None):
    """Name ``category`` (an int) in ``domain`` (None: the default domain),
    as the tool shows the ranges and marks given that category."""
    cdef uint32_t c = _category(category)
    cdef bytes b = _text(name, "name")
    cdef void* d = nvtx_domain(domain)
    streams_nvtx_name_category(d, c, PyBytes_AS_STRING(b))


# ---- ranges and marks --------------------------------------------------------------------------

cdef int nvtx_range_push(void* domain, const char* message, uint32_t color) noexcept nogil:
    return streams_nvtx_push(domain, message, NULL, color, 0)


cdef int nvtx_range_pop(void* domain) noexcept nogil:
    return streams_nvtx_pop(domain)


cdef void nvtx_mark(void* domain, const char* message, uint32_t color) noexcept nogil:
    streams_nvtx_mark(domain, message, NULL, color, 0)


@cython.final
cdef class Range:
    """Range(message=None, *, color=None, domain=None, category=None)

    ``streams.nvtx.range``: an NVTX range, as a context manager or a decorator.

    ``with range("decode"):`` pushes the range on entry and pops it on exit
    (an exception included); ``@range("decode")`` (or ``@range()``, named
    after the function) wraps each call of the function in it.  The object
    holds no state of a call: one may be used by many threads at once, each
    on its own range stack.  Its message is registered with the tool once,
    when it is made.
    """

    cdef bytes _message
    cdef void* _domain
    cdef void* _registered
    cdef uint32_t _color
    cdef uint32_t _category
    cdef readonly object message
    cdef readonly object domain

    # The signature is written in the class docstring: Cython's embedded one
    # puts the keyword-only marker one parameter late.
    @cython.embedsignature(False)
    def __init__(self, message=None, *, color=None, domain=None, category=None):
        self._color = _color(color)
        self._category = _category(category)
        self._domain = nvtx_domain(domain)
        self.domain = domain
        if message is not None:
            self._message = _text(message, "message")
            self.message = message
            self._registered = streams_nvtx_register(self._domain,
                                                     PyBytes_AS_STRING(self._message))

    cdef Range _named(self, str message):
        cdef Range r = Range.__new__(Range)
        r._color, r._category, r._domain, r.domain = (self._color, self._category,
                                                      self._domain, self.domain)
        r._message = _text(message, "message")
        r.message = message
        r._registered = streams_nvtx_register(r._domain, PyBytes_AS_STRING(r._message))
        return r

    def __enter__(self):
        if self._message is None:
            raise TypeError("a range used with `with` needs a message: range(message)")
        streams_nvtx_push(self._domain, PyBytes_AS_STRING(self._message), self._registered,
                          self._color, self._category)
        return self

    def __exit__(self, *exc):
        streams_nvtx_pop(self._domain)
        return False

    def __call__(self, func):
        """Decorate ``func``: each call runs inside this range (one named
        after ``func.__qualname__`` if this one has no message)."""
        if not callable(func):
            raise TypeError(f"range(...) decorates a callable, not {type(func).__name__}")
        r = self if self._message is not None else self._named(
            getattr(func, "__qualname__", None) or repr(func))

        @_functools.wraps(func)
        def wrapper(*args, **kwargs):
            with r:
                return func(*args, **kwargs)
        return wrapper

    def __repr__(self):
        return (f"streams.nvtx.range({self.message!r}"
                + (f", domain={self.domain!r}" if self.domain is not None else "") + ")")


def push(message, *, color=None, domain=None, category=None):
    """Push a range ``message`` on this thread (``pop`` ends it).  Returns its
    nesting level, 0 for the outermost, or a negative number where no tool
    is attached."""
    cdef uint32_t c = _color(color)
    cdef uint32_t cat = _category(category)
    cdef bytes b = _text(message, "message")
    cdef void* d = nvtx_domain(domain)
    return streams_nvtx_push(d, PyBytes_AS_STRING(b), NULL, c, cat)


def pop(*, domain=None):
    """End the innermost range of ``domain`` pushed on this thread.  Returns
    the level of the range ended, or a negative number (no tool, or no
    range open)."""
    cdef void* d = nvtx_domain(domain)
    return streams_nvtx_pop(d)


def mark(message, *, color=None, domain=None, category=None):
    """An instant ``message`` on the timeline."""
    cdef uint32_t c = _color(color)
    cdef uint32_t cat = _category(category)
    cdef bytes b = _text(message, "message")
    cdef void* d = nvtx_domain(domain)
    streams_nvtx_mark(d, PyBytes_AS_STRING(b), NULL, c, cat)


# ---- names of CUDA resources -------------------------------------------------------------------

cdef void name_stream(void* stream, const char* name) noexcept nogil:
    streams_nvtx_name_stream(stream, name)


cdef void name_event(void* event, const char* name) noexcept nogil:
    streams_nvtx_name_event(event, name)


def name_device(device, name):
    """Name CUDA device ``device`` (a Device or an ordinal) ``name`` in the
    tool's timeline (``nvtxNameCudaDeviceA``)."""
    cdef int ordinal
    if isinstance(device, bool):
        raise TypeError("device must be a Device or an int, not bool")
    try:
        ordinal = device.__index__()
    except (AttributeError, TypeError):
        raise TypeError(f"device must be a Device or an int, not {type(device).__name__}") from None
    if ordinal < 0:
        raise ValueError(f"device must be >= 0, not {ordinal}")
    cdef bytes b = _text(name, "name")
    streams_nvtx_name_device(ordinal, PyBytes_AS_STRING(b))


# ---- ranges around the package's own operations ------------------------------------------------

_CALL_NAMES = ("Stream.synchronize", "Event.synchronize", "record", "wait_event",
               "Stream.wait_stream", "launch", "Stream.launch_host_func", "memcpy_async",
               "memset_async", "GraphExec.launch")
assert len(_CALL_NAMES) == CALL_COUNT

cdef int _tracing = 0                 # the switch (streams_flag_get/set)
# Set once, under _lock, before the switch is first turned on: a thread that
# sees the switch on (an acquire-load after the release-store) sees them.
cdef bint _calls_ready = False
cdef void* _call_domain = NULL        # "streams" (NULL where no tool is attached)
cdef void* _call_registered[CALL_COUNT]
cdef const char* _call_messages[CALL_COUNT]
cdef bytes _call_text = b"\0".join(n.encode() for n in _CALL_NAMES) + b"\0"


cdef int _prepare_calls() except -1:
    # Under _lock.
    global _calls_ready, _call_domain
    cdef const char* p = PyBytes_AS_STRING(_call_text)
    cdef int i
    if _calls_ready:
        return 0
    found = _domains.get("streams")
    if found is None:
        found = <uintptr_t>streams_nvtx_domain_create(b"streams")
        _domains["streams"] = found
    _call_domain = <void*><uintptr_t>found
    for i in range(<int>CALL_COUNT):
        _call_messages[i] = p
        _call_registered[i] = streams_nvtx_register(_call_domain, p)
        while p[0] != 0:
            p += 1
        p += 1
    _calls_ready = True
    return 0


cdef const int* trace_switch() noexcept nogil:
    return &_tracing


cdef void trace_push(int call) noexcept nogil:
    streams_nvtx_push(_call_domain, _call_messages[call], _call_registered[call], 0, 0)


cdef void trace_pop() noexcept nogil:
    streams_nvtx_pop(_call_domain)


def trace_calls(enabled):
    """Turn the ranges around the package's own operations on (True) or off
    (False); returns whether they were on.  Each traced call (a stream's or
    an event's synchronize, record and wait, launches, host functions,
    ``memcpy_async``, ``memset_async``, ``GraphExec.launch``) then runs in
    a range named after it, in the ``"streams"`` domain.  Off by default, or
    on from import with ``STREAMS_NVTX_TRACE=1``; off, each of those calls
    costs one branch."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, not {type(enabled).__name__}")
    with _lock:
        was = streams_flag_get(&_tracing) != 0
        if enabled:
            _prepare_calls()
        streams_flag_set(&_tracing, 1 if enabled else 0)
    return was


cdef int _checking = 0                # the race checker's switch
# Set once, under _lock, before the switch first goes on, never replaced: a
# thread that sees the switch on sees it, and it is never freed under one.
cdef object _check_hooks = None


cdef const int* check_switch() noexcept nogil:
    return &_checking


cdef object check_hooks():
    return _check_hooks


def _set_checking(hooks, bint on):
    """streams.checker's switch: ``hooks`` (the first one given stays) and on or off."""
    global _check_hooks
    if hooks is None:
        raise TypeError("hooks must be the race checker's hooks, not None")
    with _lock:
        if _check_hooks is None:
            _check_hooks = hooks
        elif hooks is not _check_hooks:
            raise RuntimeError("the race checker's hooks are set already")
        streams_flag_set(&_checking, 1 if on else 0)


def tracing_calls():
    """Whether ``trace_calls`` is on."""
    return streams_flag_get(&_tracing) != 0


if _os.environ.get("STREAMS_NVTX_TRACE", "") not in ("", "0"):
    trace_calls(True)
