"""Kernel nodes without a GPU: the snapshot class refused, objects made with
__new__ refusing the new methods, the recapture refusal before CUDA, and what
KernelNodeParams.kernel relies on."""
import gc
import weakref

import pytest

import streams
from streams import Graph, GraphExec, GraphNode, KernelNodeParams, Stream


def test_kernel_node_params_are_made_by_nodes_only():
    with pytest.raises(TypeError, match="cannot be instantiated directly; GraphNode.kernel_params"):
        KernelNodeParams()
    p = KernelNodeParams.__new__(KernelNodeParams)
    assert "never initialised" in repr(p)
    assert p.function == 0 and p.kernel_handle == 0 and p.args is None
    assert p.attributes is None
    with pytest.raises(ValueError, match="not read from a node"):
        p.values("pointer")
    with pytest.raises(ValueError, match="not read from a node"):
        p.kernel


def test_a_node_made_with_new_refuses_the_kernel_methods():
    nd = GraphNode.__new__(GraphNode)
    with pytest.raises(ValueError, match="never initialised"):
        nd.kernel_params()
    with pytest.raises(ValueError, match="never initialised"):
        nd.set_args({0: 1})


def test_an_executable_made_with_new_refuses_argument_changes():
    exe = GraphExec.__new__(GraphExec)
    with pytest.raises(TypeError, match="node must be a GraphNode"):
        exe.set_kernel_node_args(3, {})
    with pytest.raises(ValueError, match="closed GraphExec"):
        exe.set_kernel_node_args(GraphNode.__new__(GraphNode), {})


def test_recapture_of_a_closed_graph_is_refused():
    g = Graph.__new__(Graph)
    with pytest.raises(ValueError, match="closed Graph"):
        g.recapture(Stream.legacy)


def test_recapture_names_the_versions_it_needs():
    from streams._graph import _recapture_refusal
    err = _recapture_refusal(13050, 13000)           # a 13.5 build on driver 580 (13.0)
    assert isinstance(err, NotImplementedError)
    assert "Graph.recapture needs CUDA 13.3 or newer" in str(err)
    assert "cudaStreamBeginRecaptureToGraph" in str(err)
    assert "CUDA 13.5 runtime" in str(err) and "driver supports CUDA 13.0" in str(err)
    err = _recapture_refusal(12080, 13030)           # a CUDA 12 build on a new driver
    assert "needs CUDA 13.3 or newer" in str(err) and "CUDA 12.8 runtime" in str(err)
    err = _recapture_refusal(13030, 0)               # no driver
    assert "needs CUDA 13.3 or newer" in str(err) and "driver supports CUDA 0.0" in str(err)
    # Both new enough: still refused, saying what to do instead.
    err = _recapture_refusal(13030, 13050)
    assert "not implemented by this version of streams" in str(err)
    assert "GraphExec.update" in str(err)


def test_a_kernel_can_be_weakly_referenced():
    # KernelNodeParams.kernel finds streams' own kernels in a registry of
    # weak references: one must not keep a Kernel (and its module) alive.
    k = streams.Kernel.__new__(streams.Kernel)
    ref = weakref.ref(k)
    del k
    gc.collect()
    assert ref() is None
