"""Graphs without a GPU: the node objects only graphs make, a condition's
default refused before CUDA where it would be dropped, and the arguments of
the graph data calls."""
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


def test_graph_data_refuses_before_cuda():
    """debug_dot's flags are checked before the graph is used; to_dict of a
    graph or an executable that is not open says so."""
    g = streams.Graph.__new__(streams.Graph)
    for flags, exc, match in (("bogus", ValueError, "flags: 'bogus' is not one of 'verbose'"),
                              (["kernel_params", 3], ValueError, "flags: 3 is not one of"),
                              (1.5, TypeError, "flags must be None, an int, a flag name"),
                              (-1, ValueError, "flags")):
        with pytest.raises(exc, match=match):
            g.debug_dot(flags=flags)
    with pytest.raises(ValueError, match="never initialised|closed"):
        g.debug_dot(flags=["kernel_params", "handles"])
    with pytest.raises(ValueError, match="never initialised|closed"):
        g.to_dict()
    with pytest.raises(ValueError, match="closed GraphExec"):
        streams.GraphExec.__new__(streams.GraphExec).to_dict()
    assert streams._graph.GRAPH_DATA_SCHEMA == "streams.graph/1"
