"""Graphs without a GPU: the node objects only graphs make, and a condition's
default refused before CUDA where it would be dropped."""
import pytest

import streams


def test_graph_node_objects_are_made_by_graphs_only():
    for cls, how in ((streams.ConditionHandle, "Graph.create_condition"),
                     (streams.GraphAllocation, "Graph.add_mem_alloc")):
        with pytest.raises(TypeError, match=how):
            cls()


def test_condition_default_without_reset_is_refused_before_cuda():
    # CUDA applies a condition's default at every launch
    # (cudaGraphCondAssignDefault, reset=True) or never: a default that
    # reset=False would silently drop is a ValueError, before any CUDA call.
    g = streams.Graph.__new__(streams.Graph)
    with pytest.raises(ValueError, match="default=3 needs reset=True"):
        g.create_condition(3, reset=False)
    with pytest.raises(ValueError, match="never initialised|closed"):
        g.create_condition(0, reset=False)
