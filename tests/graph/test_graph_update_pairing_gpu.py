"""After ``GraphExec.update(other)``, an argument change of one kernel node
lands in the node CUDA paired with it, or is refused: never rebuilt from
another node of ``other``.

Every kernel fills a buffer of its own with a value of its own.  After the
update a first replay shows which buffer each of the executable's nodes
writes (CUDA's pairing); then, one node at a time on a fresh executable,
``set_kernel_node_args(node, {1: 777})`` must leave every buffer as that
replay wrote it but one, which holds 777; or raise ValueError.  The
pairing rule itself is checked without a GPU in test_graph_pairing_cpu.py.
"""
import pytest

np = pytest.importorskip("numpy", reason="these tests check results with numpy")

from _support import closing

import streams
from streams import DeviceBuffer, Graph, Stream

pytestmark = pytest.mark.gpu

N = 256
V1 = {i: 10 + i for i in range(4)}
V2 = {i: 50 + i for i in range(4)}


@pytest.fixture
def env():
    with closing(Stream(non_blocking=True), Stream(non_blocking=True)) as (s, t):
        bufs = [DeviceBuffer(4 * N, s) for _ in range(4)]
        yield s, t, bufs, streams.builtin_kernel("fill_u32")
        s.synchronize()
        for b in bufs:
            b.close()


def _snapshot(s, bufs):
    out = []
    for b in bufs:
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, b, stream=s)
        s.synchronize()
        vals = set(host.tolist())
        out.append(vals.pop() if len(vals) == 1 else tuple(sorted(vals)))
    return out


def _replay(exe, s, bufs):
    for b in bufs:
        streams.memset_async(b, 0, stream=s)
    exe.launch(s)
    s.synchronize()
    return _snapshot(s, bufs)


def _independent(env, order, vals):
    s, t, bufs, fill = env
    g = Graph()
    for i in order:
        g.add_kernel_node(fill, 1, N, bufs[i], vals[i], N)
    return g


def _forked(env, swap, vals):
    # Two kernels on two streams forked from s and joined back: siblings.
    s, t, bufs, fill = env
    s.begin_capture()
    t.wait_event(s.record())
    launches = [(s, 0), (t, 1)]
    for stream, i in (reversed(launches) if swap else launches):
        stream.launch(fill, 1, N, bufs[i], vals[i], N)
    s.wait_event(t.record())
    return s.end_capture()


def _fork_join_between(env, swap, vals):
    # buf 2 before the fork, bufs 0 and 1 on the branches, buf 3 after the
    # join: the nodes before and after are pinned, the branches are not.
    s, t, bufs, fill = env
    s.begin_capture()
    s.launch(fill, 1, N, bufs[2], vals[2], N)
    t.wait_event(s.record())
    launches = [(s, 0), (t, 1)]
    for stream, i in (reversed(launches) if swap else launches):
        stream.launch(fill, 1, N, bufs[i], vals[i], N)
    s.wait_event(t.record())
    s.launch(fill, 1, N, bufs[3], vals[3], N)
    return s.end_capture()


def _chain(env, order, vals):
    s, t, bufs, fill = env
    s.begin_capture()
    for i in order:
        s.launch(fill, 1, N, bufs[i], vals[i], N)
    return s.end_capture()


def _check_changes(env, g1, g2):
    """(landed, refused): the nodes whose change landed where CUDA paired
    them, the nodes whose change was refused; fails on a change that
    landed anywhere else."""
    s, t, bufs, fill = env
    nodes = [n for n in g1.nodes if n.type == "kernel"]
    with g1.instantiate() as exe:
        assert exe.update(g2).ok
        truth = _replay(exe, s, bufs)
    landed, refused = [], []
    for k, node in enumerate(nodes):
        with g1.instantiate() as exe:
            assert exe.update(g2).ok
            try:
                exe.set_kernel_node_args(node, {1: 777})
            except ValueError as exc:
                assert "updated from another graph" in str(exc)
                refused.append(k)
                continue
            got = _replay(exe, s, bufs)
        changed = [i for i in range(len(bufs)) if got[i] != truth[i]]
        assert len(changed) == 1 and got[changed[0]] == 777, (
            f"node {k}: CUDA's pairing wrote {truth}, the change gave {got}")
        landed.append(k)
    return landed, refused


def test_forked_siblings_captured_in_the_other_order_are_refused(env):
    """The case CUDA pairs against creation order (the audit's): both
    siblings refused, none rebuilt from the other."""
    g1, g2 = _forked(env, False, V1), _forked(env, True, V2)
    landed, refused = _check_changes(env, g1, g2)
    assert landed == [] and refused == [0, 1]
    g1.close()
    g2.close()


def test_forked_siblings_captured_in_the_same_order_are_refused_too(env):
    g1, g2 = _forked(env, False, V1), _forked(env, False, V2)
    landed, refused = _check_changes(env, g1, g2)
    assert landed == [] and refused == [0, 1]
    g1.close()
    g2.close()


def test_the_nodes_around_a_fork_stay_known(env):
    """Before the fork and after the join CUDA has one choice: those changes
    land; the two branches are refused."""
    g1, g2 = _fork_join_between(env, False, V1), _fork_join_between(env, True, V2)
    landed, refused = _check_changes(env, g1, g2)
    assert sorted(landed + refused) == [0, 1, 2, 3]
    kinds = {k: n for k, n in enumerate([n for n in g1.nodes if n.type == "kernel"])}
    first_args = {k: n.kernel_params().values("pointer, uint32, uint64")[0]
                  for k, n in kinds.items()}
    ptrs = [b.ptr for b in env[2]]
    outer = sorted(k for k in kinds if first_args[k] in (ptrs[2], ptrs[3]))
    assert landed == outer and len(refused) == 2
    g1.close()
    g2.close()


def test_independent_nodes_of_one_kernel_are_refused(env):
    g1, g2 = _independent(env, [0, 1, 3], V1), _independent(env, [3, 1, 0], V2)
    landed, refused = _check_changes(env, g1, g2)
    assert landed == [] and refused == [0, 1, 2]
    g1.close()
    g2.close()


def test_a_chain_is_paired_node_by_node_and_every_change_lands(env):
    """A chain leaves CUDA one pairing: every change is taken, and lands in
    the node CUDA paired (the control: the rule refuses only where it must)."""
    g1, g2 = _chain(env, [0, 1, 2, 3], V1), _chain(env, [3, 2, 1, 0], V2)
    landed, refused = _check_changes(env, g1, g2)
    assert landed == [0, 1, 2, 3] and refused == []
    g1.close()
    g2.close()


def test_a_change_is_refused_after_update_but_taken_after_update_back(env):
    """Back on the graph it was instantiated from, streams knows every node
    again."""
    s, t, bufs, fill = env
    g1, g2 = _forked(env, False, V1), _forked(env, True, V2)
    node = [n for n in g1.nodes if n.type == "kernel"][0]
    with g1.instantiate() as exe:
        assert exe.update(g2).ok
        with pytest.raises(ValueError, match="another node has this node's type"):
            exe.set_kernel_node_args(node, {1: 777})
        assert exe.update(g1).ok
        exe.set_kernel_node_args(node, {1: 777})
        got = _replay(exe, s, bufs)
    first = node.kernel_params().values("pointer, uint32, uint64")[0]
    which = [b.ptr for b in bufs].index(first)
    assert got[which] == 777
    assert sorted(v for i, v in enumerate(got) if i != which and v) == [V1[1 - which]]
    g1.close()
    g2.close()
