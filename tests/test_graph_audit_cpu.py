"""Without a GPU: what GraphExec.set_kernel_node_args and GraphNode.set_args
write for each value (the packer of launches, so that a pointer is checked
as memory CUDA knows), and the forwarding of host-callback errors to the
slots of the graphs and executables that run a callback without sharing
its slot (a parent graph, an executable updated from another graph).  The
GPU side is in test_graph_audit_gpu.py."""
import struct
import sys

import pytest

import streams
from streams import ConditionHandle
from streams._graph import _error_forwarding, _pack_change


# ---- the packing of argument changes ------------------------------------------------------------

@pytest.mark.parametrize("value, size, type_name, expected", [
    (5, 4, "uint32", struct.pack("<I", 5)),
    (-2, 4, "int32", struct.pack("<i", -2)),
    (2.5, 8, "float64", struct.pack("<d", 2.5)),
    (3, 4, "float32", struct.pack("<f", 3.0)),       # an int for a float, as launches take it
    (0, 8, "pointer", bytes(8)),                       # NULL, as launches take it
    (None, 8, "pointer", bytes(8)),
    (7, 4, None, struct.pack("<I", 7)),                # untyped: packed to the size
    (-1, 8, None, b"\xff" * 8),
    (1.5, 4, None, struct.pack("<f", 1.5)),
    (b"\x01\x02\x03\x04", 4, None, b"\x01\x02\x03\x04"),
    (bytes(8), 8, "pointer", bytes(8)),                # raw bytes holding NULL
])
def test_a_value_is_packed_as_launches_pack_it(value, size, type_name, expected):
    assert _pack_change(value, size, type_name)[0] == expected


def test_numpy_scalars_say_their_type():
    np = pytest.importorskip("numpy")
    assert _pack_change(np.int32(-3), 4)[0] == struct.pack("<i", -3)
    assert _pack_change(np.float32(0.5), 4)[0] == struct.pack("<f", 0.5)
    with pytest.raises(TypeError, match=r"changes\[0\]: a int32 for a parameter of 8 bytes"):
        _pack_change(np.int32(1), 8)


@pytest.mark.parametrize("value", [0x10000, (0x10000).to_bytes(8, "little")])
def test_an_address_for_a_pointer_is_checked(value):
    """An int (or raw bytes) for a parameter typed "pointer" goes through
    the check every launch makes (resolve_span: memory CUDA knows); without
    a GPU, CUDA cannot describe any address.  Before: written as is, and the
    replay faulted on an address CUDA did not know."""
    with pytest.raises(ValueError, match=r"changes\[0\]=0x10000"):
        _pack_change(value, 8, "pointer")


@pytest.mark.parametrize("value, size, type_name, error, match", [
    (True, 4, None, TypeError, "a bool is not a kernel argument"),
    (True, 4, "uint32", TypeError, r"changes\[0\] must be an integer \(uint32\), not bool"),
    (2**32, 4, "uint32", ValueError, r"changes\[0\]: 4294967296 does not fit uint32"),
    (2**32, 4, None, ValueError, r"changes\[0\]: 4294967296 does not fit a parameter of 4"),
    (1.0, 4, "uint32", TypeError, "must be an integer"),
    (1.0, 2, None, ValueError, "a float for a parameter of 2 bytes"),
    (b"\x00" * 8, 4, None, ValueError, r"changes\[0\]: 8 bytes for a parameter of 4"),
    (object(), 8, None, TypeError, r"changes\[0\] must be a pointer to device memory"),
    (object(), 4, None, TypeError, r"changes\[0\] must be a pointer to device memory"),
    (bytes(8), 8, "condition", TypeError, "takes a streams.ConditionHandle"),
    (7, 8, "condition", TypeError, "must be a streams.ConditionHandle"),
    (1, 4, "no such type", ValueError, "unknown type"),
])
def test_a_value_the_parameter_cannot_take_is_refused(value, size, type_name, error, match):
    with pytest.raises(error, match=match):
        _pack_change(value, size, type_name)


def test_a_condition_of_no_graph_is_refused_naming_the_change():
    # A ConditionHandle made with __new__ belongs to no graph (before: a
    # TypeError from calling its missing weak reference).
    with pytest.raises(ValueError, match=r"changes\[0\] is a condition of a graph that is "
                                         "closed or gone"):
        _pack_change(ConditionHandle.__new__(ConditionHandle), 8, "condition")


# ---- host-callback errors forwarded ---------------------------------------------------------

@pytest.fixture
def unraisable(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    return seen


@pytest.mark.parametrize("links, source, expected", [
    ([], 0, [True, False, False]),                          # no forwarding: its own slot
    ([(0, 1)], 0, [True, True, False]),                     # a child's slot to its parent's
    ([(0, 1), (1, 2)], 0, [True, True, True]),              # a grandchild's, through its parent
    ([(0, 1), (1, 2)], 1, [False, True, True]),             # never backwards
    ([(0, 1), (1, 0)], 1, [True, True, False]),             # a cycle (two graphs updated
    ([(0, 1), (0, 1), (0, 2)], 0, [True, True, True]),      # from each other); a link twice
    ([(0, 0)], 0, [True, False, False]),                    # to itself: ignored
])
def test_an_error_reaches_every_slot_its_slot_forwards_to(links, source, expected, unraisable):
    """The error of a callback (run by the trampoline on a thread Python
    does not know, as CUDA runs a graph's host node) is kept by its slot and
    by every slot reachable through forward links (each once, cycles too):
    the slots of a graph that embeds the callback's graph as a child and of
    an executable updated from it, which its next launch raises."""
    assert _error_forwarding(3, links, source) == expected
    assert [type(e) for e in unraisable] == [ValueError]    # reported once, as before
