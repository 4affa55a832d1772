# cython: language_level=3
"""Argument checks shared by every module, and the enum base class.

One place decides what a timeout, a byte count, a raw handle, a launch
dimension or an enum argument may be, so that every API takes the same
values and says the same thing about the wrong ones.
"""
import enum as _enum

from libc.stdint cimport uintptr_t

from streams.cudart cimport dim3

# The longest wait a timeout can ask for: about 31 years, far from the end
# of a 64-bit count of nanoseconds, so that deadline arithmetic cannot wrap.
cdef long long _MAX_TIMEOUT_NS = 1000000000000000000


cdef long long as_timeout_ns(object timeout) except -2:
    cdef double seconds
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be None or a number of seconds, not "
                        f"{type(timeout).__name__}")
    seconds = timeout
    if seconds != seconds or seconds < 0:
        raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
    if seconds * 1e9 >= <double>_MAX_TIMEOUT_NS:
        return -1   # inf, or longer than any process lives: no limit
    return <long long>(seconds * 1e9)


cdef unsigned long long as_unsigned(object value, str argname, unsigned long long most,
                                    str too_big) except? 0xFFFFFFFFFFFFFFFF:
    """The one range check of an unsigned C value: ``value`` as an int in
    [0, ``most``], or TypeError/ValueError naming ``argname``.  ``too_big``
    ends the message for a value above ``most`` (what it does not fit)."""
    if type(value) is int:
        # The common case, without the __index__ call.
        if 0 <= value <= most:
            return <unsigned long long>value
        n = value
    else:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{argname} must be an int, not {type(value).__name__}")
        n = value.__index__()
    if n < 0:
        raise ValueError(f"{argname} must be >= 0, got {n}")
    if n > most:
        raise ValueError(f"{argname}={n} {too_big}")
    return <unsigned long long>n


cdef size_t as_nbytes(object value, str argname) except? 0:
    return <size_t>as_unsigned(value, argname, <size_t>-1, "is larger than memory can be")


cdef unsigned int as_uint(object value, str argname) except? 0:
    return <unsigned int>as_unsigned(value, argname, 0xFFFFFFFF,
                                     "does not fit a C unsigned int (at most 4294967295)")


cdef uintptr_t as_pointer_int(object value, str argname) except? 0:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{argname} must be an int handle, not {type(value).__name__}")
    v = value.__index__()
    if v < 0 or v > <uintptr_t>-1:
        raise ValueError(f"{argname}={v} does not fit in a pointer")
    return <uintptr_t>v


cdef bint as_bool_other(object value, str argname) except -1:
    # numpy's bool (numpy.bool, numpy.bool_ before numpy 2) is no int
    # subclass, and what a numpy comparison gives: taken as what it says.
    cls = type(value)
    if cls.__name__ in ("bool", "bool_") and cls.__module__ == "numpy":
        return value.__bool__()
    raise TypeError(f"{argname} must be a bool, not {cls.__name__}")


cdef int as_int(object value, str argname) except? -1:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{argname} must be an int, not {type(value).__name__}")
    v = value.__index__()
    if v < -0x80000000 or v > 0x7FFFFFFF:
        raise ValueError(f"{argname}={v} does not fit a C int")
    return <int>v


cdef object as_enum(object cls, object value, str argname):
    """A member of IntEnum ``cls`` from a member, its int value or its name
    (any case)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        member = cls.__members__.get(value.upper())
        if member is not None:
            return member
    elif not isinstance(value, bool) and isinstance(value, int):
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(repr(m.name.lower()) for m in cls)
    raise ValueError(f"{argname} must be one of {names} (or a {cls.__name__}), got {value!r}")


cdef int as_dim3(object value, dim3* out, str argname) except -1:
    if type(value) is int and 1 <= value <= 0x7FFFFFFF:   # the common 1-D case, no tuple
        out.x, out.y, out.z = <unsigned int>value, 1, 1
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, not bool")
    if isinstance(value, int):
        value = (value,)
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, got {value!r}")
    dims = [1, 1, 1]
    for i, d in enumerate(value):
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"{argname} must be an int or a tuple of up to 3 ints, got {value!r}")
        if d < 1 or d > 0x7FFFFFFF:
            raise ValueError(f"{argname} dimensions must be >= 1 and < 2**31, got {value!r}")
        dims[i] = d
    out.x, out.y, out.z = dims[0], dims[1], dims[2]
    return 0


class StreamsEnum(_enum.IntEnum):
    """Base of the package's enums: ``IntEnum`` members that are also found
    by name (``CaptureMode("relaxed")``) and compare equal to their
    lower-case name (``stream.capture_status == "active"``)."""

    @classmethod
    def _missing_(cls, value):
        if isinstance(value, str):
            return cls.__members__.get(value.upper())
        return None

    def __eq__(self, other):
        if isinstance(other, str):
            return self.name.lower() == other.lower()
        return int.__eq__(self, other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = int.__hash__


# ---- the public face of the classes -----------------------------------------------------------

from cpython.object cimport PyTypeObject

# Declared here, not cimported: cpython.type's PyType_Modified takes a
# `type` object, and _make_public holds the static type as a PyTypeObject*.
cdef extern from "Python.h":
    void PyType_Modified(PyTypeObject* t)
    unsigned long Py_TPFLAGS_HEAPTYPE

# The C strings that static types' tp_name and tp_doc point to after
# _make_public: kept for the life of the process, as the types are.
cdef list _kept_names = []


def _make_public(cls, str module):
    """Report the class ``cls`` as ``module.<its name>``, as streams/__init__.py
    does for every public class: ``__module__``, reprs, tracebacks
    (``streams.CudaError``), pickles and Cython's argument errors then name
    the package, not the extension that defines the class.

    A Cython class (a static type) reads ``__module__`` and ``__name__``
    from ``tp_name``, so that is rewritten; its ``__text_signature__``
    comes from ``tp_doc``, whose first line is the signature Cython
    embeds (or the docstring states): the marker that makes it one is
    added, and ``inspect.signature(cls)`` then works (IDEs, ``help``).
    A Python class just gets ``__module__``.  tests/package/test_public_face.py
    checks every name of ``streams.__all__``."""
    cdef PyTypeObject* t = <PyTypeObject*>cls
    cdef bytes name, doc
    if not isinstance(cls, type):
        raise TypeError(f"cls must be a class, not {type(cls).__name__}")
    short = cls.__name__
    if t.tp_flags & Py_TPFLAGS_HEAPTYPE:
        cls.__module__ = module
        return cls
    name = f"{module}.{short}".encode("utf-8")
    text = cls.__doc__ or ""
    first, sep, rest = text.partition("\n")
    if (first.startswith(short + "(") and first.endswith(")")
            and (not sep or rest.startswith("\n")) and not rest.startswith("\n--\n")):
        # "Name(args)\n--\n\n" then the docstring: CPython's convention for
        # a built-in's signature; __doc__ then leaves the line out.
        doc = (first + "\n--\n" + rest).encode("utf-8")
        _kept_names.append(doc)
        t.tp_doc = doc
    _kept_names.append(name)
    t.tp_name = name
    PyType_Modified(t)
    return cls
