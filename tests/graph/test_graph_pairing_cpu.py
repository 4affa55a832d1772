"""Which kernel nodes streams still knows after ``GraphExec.update(other)``.

CUDA pairs the executable's nodes with ``other``'s by their edges, in an
order it does not document: streams takes a pair only where no other node
could be its partner (``_pinned_pairs``, src/streams/_graph/kernel_nodes.pxi);
a change of arguments of any other node is refused
(tests/graph/test_graph_update_pairing_gpu.py shows CUDA pairing two
siblings against their creation order)."""
import pytest

pytest.importorskip("streams._graph")
from streams._graph import _pinned  # noqa: E402

K, H, E = 1, 2, 3        # three node types


def test_a_chain_is_pinned_node_by_node():
    assert _pinned([[], [0], [1], [2]], [K, K, K, K]) == [True] * 4


def test_siblings_of_one_type_are_not_pinned_nor_what_depends_on_them():
    # 0 -> (1, 2) -> 3: 1 and 2 may be swapped, so 3's dependencies are not
    # pinned either; 0 is.
    assert _pinned([[], [0], [0], [1, 2]], [K, K, K, K]) == [True, False, False, False]


def test_siblings_of_different_types_are_pinned():
    assert _pinned([[], [0], [0], [1, 2]], [E, K, H, K]) == [True] * 4


def test_independent_roots_of_one_type_are_not_pinned():
    assert _pinned([[], [], []], [K, K, K]) == [False] * 3
    assert _pinned([[], [], []], [K, H, E]) == [True] * 3


def test_a_dependency_outside_the_graph_or_a_later_index_is_handled():
    # Dependencies may name later indices (an edge added afterwards).
    assert _pinned([[2], [2], []], [K, H, E]) == [True, True, True]
    assert _pinned([[-1], []], [K, K]) == [False, True]


def test_a_deep_chain_does_not_recurse():
    n = 100_000
    deps = [[]] + [[i - 1] for i in range(1, n)]
    assert all(_pinned(deps, [K] * n))


def test_an_index_past_the_graph_is_not_pinned():
    assert _pinned([[7], []], [K, K]) == [False, True]
