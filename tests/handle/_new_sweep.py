"""Child-process body of tests/handle/test_new_objects.py: every class reachable
from ``streams``, made with ``cls.__new__(cls)`` (no handle, no fields set),
and every public method, property and protocol of it called with plausible
arguments, and with objects made that way as the arguments of everything
else.  Each call may raise only a clean Python exception.

Before each call one line ``CALL <what>`` is printed and flushed, so that
when the interpreter dies the parent names the call that killed it.  At the
end one line ``DONE <n>`` says how many calls were made, and lines
``BAD <what> <exception>`` name calls that raised something other than
TypeError/ValueError/CudaError/NotImplementedError/AttributeError/
RuntimeError (or their subclasses)."""
import inspect
import os
import pickle
import sys
import tempfile
import types

import streams

# Dunder protocols worth calling on an instance; the rest are object's own.
PROTOCOLS = ["__repr__", "__str__", "__eq__", "__ne__", "__hash__", "__bool__", "__len__",
             "__iter__", "__index__", "__int__", "__enter__", "__exit__", "__dlpack__",
             "__dlpack_device__", "__cuda_array_interface__", "__cuda_stream__", "__await__",
             "__reduce__", "__reduce_cython__", "__setstate_cython__",
             "__getitem__", "__contains__", "__copy__", "__deepcopy__", "__buffer__",
             "__release_buffer__", "__lt__", "__le__", "__gt__", "__ge__", "__call__",
             "__next__", "__aenter__", "__aexit__", "__array_interface__"]

CLEAN = (TypeError, ValueError, streams.CudaError, NotImplementedError, AttributeError,
         RuntimeError, KeyError, IndexError, OSError, LookupError, pickle.PicklingError,
         StopIteration, BufferError)


def reachable_classes():
    mods = [streams] + [getattr(streams, m) for m in dir(streams)
                        if isinstance(getattr(streams, m), types.ModuleType)]
    import streams.compat as compat
    for name in ("cupy", "paddle", "torch", "mindspore"):
        try:
            mods.append(__import__(f"streams.compat.{name}", fromlist=["x"]))
        except Exception:
            pass
    mods.append(compat)
    seen = {}
    for mod in mods:
        for name in dir(mod):
            obj = getattr(mod, name)
            if (isinstance(obj, type) and obj.__module__.startswith("streams")
                    and not issubclass(obj, (BaseException, int, tuple))):
                seen.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return dict(sorted(seen.items()))


def new(cls):
    try:
        return cls.__new__(cls)
    except TypeError:
        return None   # a Python class that takes arguments in __new__


CLASSES = reachable_classes()
S = streams
INERT = {q: new(c) for q, c in CLASSES.items()}


def inert(cls):
    return INERT.get(f"{cls.__module__}.{cls.__qualname__}") or new(cls)


tmpdir = tempfile.mkdtemp()
# Candidate values by parameter name: round k takes the k-th (mod length).
BY_NAME = {
    "stream": [inert(S.Stream), S.Stream.legacy, None],
    "upload_stream": [inert(S.Stream)],
    "event": [inert(S.Event), None],
    "end": [inert(S.Event)],
    "start": [inert(S.Event)],
    "node": [inert(S.GraphNode), None],
    "kernel": [inert(S.Kernel), None],
    "graph": [inert(S.Graph), None],
    "child": [inert(S.Graph)],
    "callback": [lambda *a: None],
    "cond": [inert(S.ConditionHandle), None],
    "nbytes": [16, 0, 2 ** 64, -1],
    "num_bytes": [16, 0, 2 ** 64],
    "n": [2, 0, 2 ** 40],
    "value": [1, 0, 2 ** 64, -1],
    "ptr": [0, inert(S.DeviceBuffer), bytearray(16), 2 ** 64],
    "dst": [inert(S.PinnedBuffer), 0, bytearray(16)],
    "src": [inert(S.DeviceBuffer), 0, bytearray(16)],
    "address": [0, inert(S.DeviceBuffer)],
    "base_ptr": [0],
    "data": [bytearray(16), inert(S.PinnedBuffer)],
    "buffer": [inert(S.DeviceBuffer), bytearray(16)],
    "obj": [inert(S.Stream), inert(S.DeviceBuffer), None],
    "device": [0, None, -1],
    "device_id": [0, -1],
    "mode": ["global"],
    "attr": [1],
    "fd": [-1],
    "path": [os.path.join(tmpdir, "x.dot")],
    "text": ["x"],
    "name": ["x"],
    "descriptor": [None],
    "nodes": [[inert(S.GraphNode)], []],
    "dependencies": [[inert(S.GraphNode)], ()],
    "config": [inert(S.LaunchConfig)],
    "framework": ["torch"],
    "grid": [1, 2 ** 32],
    "block": [1, 2 ** 32],
    "shared_mem": [0, 2 ** 32 + 16],
    "handle": [0],
    "enabled": [True],
    "timeout": [0, None],
    "pool": [inert(S.MemoryPool)],
    "other": [None],
    "protocol": [2],
    "format_spec": [""],
    "state": [None],
    "flags": [0],
    "exc_type": [None], "exc": [None], "tb": [None],
}
GENERIC = [None, 0, 1, -1, 2 ** 64, "x", object()]


def args_for(fn, k, fill_optional, generic=None):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    pos, kw = [], {}
    for p in sig.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is p.empty
        if not required and not fill_optional:
            continue
        if generic is not None:
            if not required:
                continue
            v = generic
        elif p.name in BY_NAME:
            c = BY_NAME[p.name]
            v = c[k % len(c)]
        elif required:
            v = GENERIC[k % len(GENERIC)]
        else:
            continue
        if p.kind == p.KEYWORD_ONLY or (pos is None):
            kw[p.name] = v
        elif p.kind == p.POSITIONAL_ONLY or required and not kw:
            pos.append(v)
        else:
            kw[p.name] = v
    return pos, kw


calls = 0
bad = []


def call(what, fn, *args, **kwargs):
    global calls
    calls += 1
    print("CALL", what, flush=True)
    try:
        r = fn(*args, **kwargs)
        if what.endswith(".__iter__") and r is not None:
            for _ in zip(range(3), r):
                pass
        if what.endswith(".__buffer__") and r is not None:
            bytes(r)
    except CLEAN:
        pass
    except OverflowError as e:
        # CPython's own slot wrapper (Python 3.12+) converts __buffer__'s
        # flags to a C int before any code of ours runs.
        if not what.endswith(".__buffer__"):
            bad.append(f"BAD {what} OverflowError: {e}")
    except BaseException as e:   # noqa: B902 - reported, not swallowed
        bad.append(f"BAD {what} {type(e).__name__}: {e}")


def sweep_callable(what, fn):
    done = set()
    for k in range(4):
        for fill in (False, True):
            a = args_for(fn, k, fill)
            if a is None:
                a = ([], {})
            key = repr(a)
            if key in done:
                continue
            done.add(key)
            call(what, fn, *a[0], **a[1])
    for g in GENERIC:
        a = args_for(fn, 0, False, generic=g)
        if a is not None and (a[0] or a[1]):
            call(what, fn, *a[0], **a[1])


ONLY_MEMBER = os.environ.get("SWEEP_MEMBER")


def members(cls):
    for name in sorted(dir(cls)):
        if ONLY_MEMBER and name != ONLY_MEMBER:
            continue
        if name.startswith("__") and name not in PROTOCOLS:
            continue
        if name.startswith("_") and not name.startswith("__") and not name.startswith("_c"):
            continue
        yield name


def sweep_instance(qual, cls, make):
    for name in members(cls):
        obj = make()
        if obj is None:
            return
        what = f"{qual}.{name}"
        raw = inspect.getattr_static(cls, name, None)
        if isinstance(raw, (property, types.GetSetDescriptorType, types.MemberDescriptorType)) \
                or type(raw).__name__ == "getset_descriptor":
            call(what, getattr, obj, name)
            continue
        print("CALL", what, "(getattr)", flush=True)
        try:
            bound = getattr(obj, name)
        except CLEAN:
            continue
        except BaseException as e:   # noqa: B902
            bad.append(f"BAD {what} getattr {type(e).__name__}: {e}")
            continue
        if callable(bound):
            sweep_callable(what, bound)
        elif isinstance(raw, staticmethod) or isinstance(raw, classmethod):
            pass


def main():
    only = sys.argv[1:]
    for qual, cls in CLASSES.items():
        if only and not any((qual.endswith("." + o[1:]) if o.startswith("=") else o in qual) for o in only):
            continue
        if issubclass(cls, BaseException):
            continue
        sweep_instance(qual, cls, lambda cls=cls: new(cls))
        # The class's own static and class methods (factories) take inert
        # objects as arguments too.
        for name in members(cls):
            raw = inspect.getattr_static(cls, name, None)
            if isinstance(raw, (staticmethod, classmethod)) or type(raw).__name__ in (
                    "classmethod_descriptor", "builtin_function_or_method"):
                sweep_callable(f"{qual}.{name} (class)", getattr(cls, name))
        # pickle of an inert object: refused, or round-trips harmlessly.
        obj = new(cls)
        if obj is not None:
            call(f"{qual} pickle", lambda o=obj: pickle.loads(pickle.dumps(o)))
    # Module functions with inert objects as arguments.
    if not only or "functions" in only:
        for name in sorted(dir(streams)):
            fn = getattr(streams, name)
            if name.startswith("_") or isinstance(fn, type) or not callable(fn):
                continue
            if name in ("spin",):
                continue
            sweep_callable(f"streams.{name}", fn)
    for line in bad:
        print(line, flush=True)
    print("DONE", calls, flush=True)


if __name__ == "__main__":
    main()
