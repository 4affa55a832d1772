"""How the cyclic GC may clear each extension type (no GPU needed).

The types whose teardown reads their object fields have no tp_clear
(``@cython.no_gc_clear``) and still a tp_traverse (the GC sees the cycles
through them); the types the GC may clear are named too, so that a new
field or a new __dealloc__ gets a decision.  Cycles through the protected
types are still collected: the GC breaks them at a list, a dict or an
instance.  tests/handle/test_gc_gpu.py collects such cycles while the GPU works."""
import ctypes
import gc
import sys
import weakref

import pytest

import streams
from streams import _asyncio, _handle, _hostcall, _launch, _memory, _stream

Py_tp_clear, Py_tp_traverse = 51, 71     # Include/typeslots.h

# Their __dealloc__ (or the free or parking it does) needs their object fields.
NO_GC_CLEAR = [_stream.Waitable, streams.Stream, streams.Event, streams.DeviceBuffer,
               streams.GraphExec, _handle.HandleUse, _memory._PendingFree,
               streams.Module, _launch._BufferUses]
# Object fields that nothing reads in teardown: the GC may clear them, and
# ErrorSlot (an exception and its traceback) and HostCall (a callable and
# its argument) are where user code closes cycles.
CLEARABLE = [streams.Graph, streams.ManagedBuffer, streams.GraphNode, streams.ConditionHandle,
             streams.GraphAllocation, streams.Kernel, streams.LaunchConfig,
             streams.PreparedLaunch, _stream.ErrorSlot, _hostcall.HostCall,
             _asyncio._Doorbell]


def slot(cls, which):
    if sys.version_info < (3, 10) or sys.implementation.name != "cpython":
        pytest.skip("PyType_GetSlot on a static type needs CPython 3.10+")
    get = ctypes.pythonapi.PyType_GetSlot
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_int]
    return get(cls, which)


@pytest.mark.parametrize("cls", NO_GC_CLEAR, ids=lambda c: c.__name__)
def test_types_whose_teardown_needs_their_fields_are_never_cleared(cls):
    assert slot(cls, Py_tp_clear) is None
    assert slot(cls, Py_tp_traverse) is not None     # the GC still sees their references


@pytest.mark.parametrize("cls", CLEARABLE, ids=lambda c: c.__name__)
def test_types_the_gc_may_clear(cls):
    assert slot(cls, Py_tp_clear) is not None


@pytest.fixture
def unraisable(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    return seen


def _collected(make):
    """Make a cycle with ``make()`` (which returns the streams object in it),
    drop it, collect: whether the object is gone."""
    obj = make()
    ref = weakref.ref(obj)
    del obj
    gc.collect()
    return ref() is None


def test_foreign_stream_in_a_cycle_through_its_owner_is_collected(unraisable):
    def make():
        owner = []
        s = streams.Stream.from_handle(1, owner=owner)     # needs no GPU
        owner.append(s)
        return s
    assert _collected(make)
    assert unraisable == []


def test_foreign_event_in_a_cycle_through_its_owner_is_collected(unraisable):
    def make():
        owner = {}
        ev = streams.Event.from_handle(0x10000, owner=owner)    # never used: no CUDA call
        owner["event"] = ev
        return ev
    assert _collected(make)
    assert unraisable == []


@pytest.mark.parametrize("base", [streams.Stream, streams.Event], ids=lambda c: c.__name__)
def test_subclass_instance_referring_to_itself_is_collected(base, unraisable):
    # A Python subclass's __dict__ is cleared by the GC: the cycle breaks there.
    class Sub(base):
        pass

    def make():
        obj = Sub.__new__(Sub)      # inert: owns nothing
        obj.me = obj
        return obj
    assert _collected(make)
    assert unraisable == []


def test_inert_objects_in_cycles_through_a_list_are_collected(unraisable):
    def make():
        items = [cls.__new__(cls) for cls in (streams.Stream, streams.Event,
                                              streams.DeviceBuffer, streams.Graph,
                                              streams.GraphExec)]
        items.append(items)
        return items[0]
    assert _collected(make)
    assert unraisable == []
