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


def test_siblings_of_one_type_are_not_pinned_but_their_join_is():
    # 0 -> (1, 2) -> 3 -> 4: 1 and 2 may be swapped; any swap keeps {1, 2},
    # so the join 3 and what follows it stay in place.
    assert _pinned([[], [0], [0], [1, 2], [3]], [K] * 5) == [True, False, False, True, True]


def test_two_symmetric_branches_stay_unpinned_down_their_length():
    # 0 -> 1 -> 3 and 0 -> 2 -> 4, joined by 5: the branches may swap whole.
    deps = [[], [0], [0], [1], [2], [3, 4]]
    assert _pinned(deps, [K] * 6) == [True, False, False, False, False, True]
    # Branches of different types are told apart, node by node.
    assert _pinned(deps, [K, K, H, K, K, K]) == [True] * 6


def test_nodes_told_apart_only_by_what_follows_them():
    # Two roots of one type, one with a successor: colour refinement pins
    # both (the induction from the roots alone pins neither).
    assert _pinned([[], [], [0]], [K, K, K]) == [True, True, True]


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


def test_refinement_of_a_large_symmetric_graph_is_bounded():
    # Two chains of one type, 50,000 nodes each: they may swap whole, so
    # nothing is pinned, and the refinement stops at its work bound.
    import time
    n = 50_000
    deps = [[]] + [[i - 1] for i in range(1, n)] + [[]] + [[n + i - 1] for i in range(1, n)]
    t0 = time.monotonic()
    assert not any(_pinned(deps, [K] * (2 * n)))
    assert time.monotonic() - t0 < 60


def test_refinement_runs_only_while_a_wanted_node_is_unknown():
    # 1 and 2 share type and dependencies; only 1 is followed by 3, which
    # tells them apart by colour.  Asked about 0 alone (pinned by induction)
    # the refinement is skipped, so 1, 2 and 3 stay unknown; asked about
    # all, it runs and pins them.
    deps, types = [[], [0], [0], [1]], [K, H, H, E]
    assert _pinned(deps, types) == [True] * 4
    assert _pinned(deps, types, wanted=[0]) == [True, False, False, False]
    assert _pinned(deps, types, wanted=[2]) == [True] * 4



def test_long_forked_chains_told_apart_at_their_ends_are_all_pinned():
    # Two chains of 300 kernels forked from one root, only one ending in a
    # host node: colour refinement tells every pair apart, ~300 rounds.
    n = 300
    deps, types = [[]], [K]
    for chain in range(2):
        prev = 0
        for i in range(n):
            deps.append([prev])
            types.append(K)
            prev = len(deps) - 1
        if chain == 0:
            deps.append([prev])
            types.append(H)
    assert all(_pinned(deps, types))


@pytest.mark.parametrize("deps, types, wanted, match", [
    ([[], [0], [0], [1]], [K, H, H, E], [-1], "wanted: -1 is not the index of a node"),
    ([[], [0], [0], [1]], [K, H, H, E], [4], "wanted: 4 is not the index of a node"),
    ([[], [0], [0]], [K], None, "types: 1 types for 3 nodes")])
def test_the_private_hook_refuses_what_would_index_past_its_lists(deps, types, wanted, match):
    with pytest.raises(ValueError, match=match):
        _pinned(deps, types, wanted)
