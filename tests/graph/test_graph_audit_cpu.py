"""Without a GPU: what GraphExec.set_kernel_node_args and GraphNode.set_args
write for each value (the packer of launches, so that a pointer is checked
as memory CUDA knows, and exactly the parameter's size), the forwarding of
host-callback errors from the slots of graphs to the slots of the
executables that run their callbacks, and the bound of the registry of
captures.  The GPU side is in test_graph_audit_gpu.py."""
import struct
import sys

import pytest

import streams
from streams import ConditionHandle, Stream
from streams._graph import _change_args, _error_forwarding, _pack_change
from streams._hostcall import _capture_registry, _register_capture


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
    a GPU, CUDA cannot describe any address.  Written as is, such a
    pointer makes the replay fault on an address CUDA does not know."""
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


@pytest.mark.parametrize("links, unlinks, relays, source, expected", [
    # A graph's slot (a relay) keeps nothing: its executables' slots do.
    ([(0, 1), (0, 2)], [], [0], 0, [False, True, True]),
    # An executable updated to another graph: the slot of the graph it ran
    # no longer reaches it, that of the graph it runs now does.
    ([(0, 2), (1, 2)], [(0, 2)], [0, 1], 0, [False, False, False]),
    ([(0, 2), (1, 2)], [(0, 2)], [0, 1], 1, [False, False, True]),
    # Unlinking one target leaves the others; unlinking what is not linked
    # changes nothing.
    ([(0, 1), (0, 2)], [(0, 1), (1, 2)], [0], 0, [False, False, True]),
    # A child's relay, through its parent's relay, to the parent's executable.
    ([(0, 1), (1, 2)], [], [0, 1], 0, [False, False, True]),
])
def test_an_error_reaches_only_the_slots_still_linked(links, unlinks, relays, source,
                                                      expected, unraisable):
    """What GraphExec.update and set_child_graph_node do to error slots:
    each executable has a slot of its own, linked to the (relay) slots of
    the graphs whose callbacks it runs, and unlinked from those it no longer
    runs.  The failure it catches: an update links the new graph's slot,
    for good, to the slot that the old graph shares with all its
    executables, so that an executable that never ran a callback raises
    its error."""
    assert _error_forwarding(3, links, source, relays=relays, unlinks=unlinks) == expected
    assert [type(e) for e in unraisable] == [ValueError]


# ---- exactly the parameter's size ------------------------------------------------------------

class _ShortInt(int):
    def to_bytes(self, *args, **kwargs):
        return b"\x01"

    def __lt__(self, other):
        return True


class _OddFloat(float):
    def __float__(self):
        return 1.0


@pytest.mark.parametrize("size", [4, 8, 256])
def test_an_int_subclass_is_packed_by_its_value(size):
    """An untyped parameter (a kernel streams has no signature for) takes an
    int as its value, packed to the parameter's size whatever a subclass's
    methods say.  The failure it catches: the subclass's to_bytes gives 1
    byte, kept as the argument, and CUDA copies `size` bytes from a slot of
    16: a heap over-read for a large by-value parameter."""
    b, kept = _pack_change(_ShortInt(5), size)
    assert b == (5).to_bytes(size, "little") and kept == ()
    assert _change_args((size,), (bytes(size),), {0: _ShortInt(5)})[0] == (b,)


def test_a_float_subclass_is_packed_by_its_value():
    assert _pack_change(_OddFloat(2.5), 8)[0] == struct.pack("<d", 2.5)


def test_an_argument_change_keeps_the_other_arguments():
    args = (b"\x01" * 8, b"\x02" * 4, b"\x03" * 8)
    new, kept = _change_args((8, 4, 8), args, {1: 7})
    assert new == (args[0], struct.pack("<I", 7), args[2]) and kept == ()
    with pytest.raises(IndexError, match="parameter 3 of a kernel with 3 parameters"):
        _change_args((8, 4, 8), args, {3: 1})
    with pytest.raises(TypeError, match="changes must be a dict"):
        _change_args((8, 4, 8), args, [(1, 7)])


@pytest.mark.parametrize("make", [list, tuple, iter, lambda names: (n for n in names),
                                  lambda names: ", ".join(names)])
def test_a_signature_is_read_once(make):
    """A signature may be any iterable of type names, an iterator too: it
    is read once: read a second time to name a parameter the kernel
    declares a pointer, an iterator is empty, and the change would raise
    IndexError instead of naming the parameter."""
    sizes, args = (8, 4, 8), (bytes(8), bytes(4), bytes(8))
    own = ("pointer", "uint32", "uint64")
    with pytest.raises(ValueError, match="parameter 0 of the kernel is a pointer, not a uint64"):
        _change_args(sizes, args, {1: 3}, make(["uint64", "uint32", "uint64"]), own)
    new, _ = _change_args(sizes, args, {2: 3}, make(["pointer", "uint32", "uint64"]), own)
    assert new[2] == struct.pack("<Q", 3)


# ---- the registry of captures ---------------------------------------------------------------

def test_the_capture_registry_stays_bounded():
    """Captures that streams' end_capture never ends (another library ends
    them; their stream is closed during them: here streams that were never
    opened) are found ended and forgotten once the registry grows, so it
    stays bounded: no capture that a callback was enqueued into, or that
    capture_info() was asked about, stays registered for good with what
    its graph's nodes needed."""
    streams_ = [Stream.__new__(Stream) for _ in range(4)]
    base = _capture_registry()[0]
    for i in range(500):
        assert _register_capture(2**60 + i, streams_[i % 4])
        assert _capture_registry()[0] <= max(64, 2 * base + 2), (i, _capture_registry())
    del streams_
    for i in range(40):                                          # their streams gone
        _register_capture(2**61 + i, Stream.__new__(Stream))
    assert _capture_registry()[0] <= max(64, 2 * base + 2), _capture_registry()
