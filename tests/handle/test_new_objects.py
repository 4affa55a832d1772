"""Objects made with ``cls.__new__(cls)`` refuse everything before touching
a field, nodes of a closed graph are refused before CUDA sees their handles,
and every size, count and dimension is range-checked against its C type
before anything is enqueued.

The CPU tests run everywhere; the GPU tests are marked ``gpu``."""
import os
import pickle
import sys
import textwrap

import pytest

import streams
from streams import LaunchConfig, Stream

from _support import UNDER_SANITIZER, N, run_python, run_python_args, to_host, uninitialised

HERE = os.path.dirname(os.path.abspath(__file__))
UINT_MAX = 2 ** 32 - 1
INT_MAX = 2 ** 31 - 1
INT_MIN = -2 ** 31
SIZE_MAX = 2 ** 64 - 1


# ---- objects made with __new__ ------------------------------------------------------

@pytest.mark.skipif(UNDER_SANITIZER, reason="the sweep runs in a child, which the sanitizer "
                    "rows do not follow (ci/run-gpu-tests); the matrix rows run it")
def test_every_method_of_every_new_made_object_raises_cleanly():
    """tests/handle/_new_sweep.py, in a child (a crash fails this test instead of
    killing pytest): every class reachable from streams, made with
    __new__, every public method, property and protocol called with
    plausible arguments (and those objects as the arguments of every
    method and function).  Only clean Python exceptions may come out, and
    the child must also get through its interpreter's teardown (a write
    through a None field shows up there)."""
    proc = run_python_args([os.path.join(HERE, "_new_sweep.py")], timeout=240)
    lines = proc.stdout.splitlines()
    calls = [ln for ln in lines if ln.startswith("CALL ")]
    bad = [ln for ln in lines if ln.startswith("BAD ")]
    last = calls[-1] if calls else "(none)"
    # A crash in teardown names the last call, though an earlier one did the damage.
    assert proc.returncode == 0, (f"the sweep died (rc={proc.returncode}); last call: {last}\n"
                                  f"{proc.stderr[-3000:]}")
    assert lines and lines[-1].startswith("DONE "), proc.stdout[-2000:]
    assert int(lines[-1].split()[1]) > 3000     # it did sweep, not skip
    assert not bad, "\n".join(bad)


def test_graph_add_host_node_on_a_new_made_graph_is_refused():
    """Refused: a host node there would write through the None error slot,
    then segfault at the latest at interpreter exit; in a child for that
    reason."""
    code = textwrap.dedent("""
        import streams
        g = streams.Graph.__new__(streams.Graph)
        for call in (lambda: g.add_host_node(print), lambda: g.instantiate(),
                     lambda: g.add_kernel_node("empty"), lambda: g.create_condition(),
                     lambda: g.add_mem_alloc(16), lambda: g.add_memset_node(0, 0, 0)):
            try:
                call()
            except ValueError as exc:
                assert "closed Graph" in str(exc), exc
            else:
                raise AssertionError("not refused")
        print("OK")
    """)
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.returncode, proc.stderr[-2000:])


LIBRARY_MADE = [
    (streams.Kernel, "Module.get_kernel"), (streams.PreparedLaunch, "Kernel.prepare"),
    (streams.GraphNode, "add_"), (streams.GraphExec, "Graph.instantiate"),
    (streams.Module, "Module.from_ptx"), (streams._hostcall.HostCall, "launch_host_func"),
    (streams.ConditionHandle, "Graph.create_condition"),
    (streams.GraphAllocation, "Graph.add_mem_alloc"), (streams._stream.ErrorSlot, "make their own"),
]


@pytest.mark.parametrize("cls, hint", LIBRARY_MADE, ids=[c.__name__ for c, _ in LIBRARY_MADE])
def test_every_library_made_class_refuses_direct_construction_alike(cls, hint):
    # A public class is named streams.<Name>, a private one by its module.
    with pytest.raises(TypeError, match=rf"^streams(\._\w+)?\.{cls.__name__} cannot be instantiated "
                                        rf"directly; .*{hint}"):
        cls()
    with pytest.raises(TypeError, match="cannot be instantiated directly"):
        cls(1, x=2)


def test_no_generated_pickling_sets_private_fields():
    """Cython's generated __setstate_cython__ set C fields directly: a
    module "in use" without a use (its count then underflows when the
    holder goes), a config's event flags without the events.  Gone; Device
    pickles by its index."""
    from streams._handle import HandleUse
    from streams._foreign import _Forget
    from streams._stream import ErrorSlot
    for cls in (HandleUse, _Forget, ErrorSlot, LaunchConfig,
                streams.GraphAllocation, streams.Device):
        assert not hasattr(cls, "__setstate_cython__"), cls
        if cls is not streams.Device:
            with pytest.raises(TypeError):
                pickle.dumps(cls.__new__(cls))
    assert streams.Device.__new__(streams.Device).__reduce__() == (streams.Device, (0,))


def test_launch_config_is_initialised_once_and_a_new_made_one_is_refused():
    cfg = LaunchConfig(2, 32)
    with pytest.raises(RuntimeError, match="already initialised"):
        cfg.__init__(4, 64)
    assert cfg.grid == (2, 1, 1) and cfg.block == (32, 1, 1)
    blank = LaunchConfig.__new__(LaunchConfig)
    kernel = streams.Kernel.__new__(streams.Kernel)
    with pytest.raises(ValueError, match="LaunchConfig was never initialised"):
        Stream.legacy.launch_ex(kernel, blank)
    with pytest.raises(ValueError, match="LaunchConfig was never initialised"):
        kernel.prepare(blank)
    # A failed __init__ leaves it uninitialised, and a later one may succeed.
    half = LaunchConfig.__new__(LaunchConfig)
    with pytest.raises(ValueError, match="mem_sync_domain"):
        half.__init__(1, 1, mem_sync_domain="sideways")
    with pytest.raises(ValueError, match="never initialised"):
        kernel.prepare(half)
    half.__init__(3, 1)
    assert half.grid == (3, 1, 1)


# ---- range checks against the C types ------------------------------------------------

def _refused(value, argname):
    """What a value out of its C range raises: ValueError naming the argument."""
    if value < 0:
        return pytest.raises(ValueError, match=rf"^{argname} must be >= 0, got {value}$")
    return pytest.raises(ValueError, match=rf"^{argname}={value} does not fit a C unsigned int")


@pytest.mark.parametrize("value", [UINT_MAX + 1, 2 ** 32 + 16, SIZE_MAX + 1, -1])
def test_shared_mem_past_unsigned_int_is_refused_everywhere(value):
    """CUDA's driver takes shared memory as an unsigned int: before, a
    larger size_t was accepted and wrapped (2**32 + 16 became 16 bytes)."""
    kernel = streams.Kernel.__new__(streams.Kernel)
    with _refused(value, "shared_mem"):
        LaunchConfig(1, 1, shared_mem=value)
    with _refused(value, "shared_mem"):
        Stream.legacy.launch(kernel, 1, 1, shared_mem=value)
    with _refused(value, "shared_mem"):
        kernel.prepare(1, 1, shared_mem=value)


def test_shared_mem_at_the_edge_passes_the_range_check():
    kernel = streams.Kernel.__new__(streams.Kernel)
    assert LaunchConfig(1, 1, shared_mem=UINT_MAX).shared_mem == UINT_MAX
    # Past the check, the never-initialised kernel is what is refused.
    with pytest.raises(ValueError, match="Kernel was never initialised"):
        Stream.legacy.launch(kernel, 1, 1, shared_mem=UINT_MAX)
    with pytest.raises(ValueError, match="Kernel was never initialised"):
        kernel.prepare(1, 1, shared_mem=UINT_MAX)


@pytest.mark.parametrize("argname", ["grid", "block", "cluster"])
@pytest.mark.parametrize("dims, ok", [
    (INT_MAX, True), ((1, INT_MAX), True), ((1, 1, INT_MAX), True),
    (INT_MAX + 1, False), ((1, INT_MAX + 1), False), (UINT_MAX + 1, False),
    (2 ** 64, False), (0, False), (-1, False), ((1, -1, 1), False)])
def test_launch_dimensions_are_range_checked(argname, dims, ok):
    kwargs = {"grid": 1, "block": 1, argname: dims}
    grid, block = kwargs.pop("grid"), kwargs.pop("block")
    if ok:
        cfg = LaunchConfig(grid, block, **kwargs)
        assert max(getattr(cfg, argname)) == INT_MAX
        return
    with pytest.raises(ValueError, match=rf"^{argname} dimensions must be >= 1 and < 2\*\*31"):
        LaunchConfig(grid, block, **kwargs)
    if argname != "cluster":
        kernel = streams.Kernel.__new__(streams.Kernel)
        with pytest.raises(ValueError, match=rf"^{argname} dimensions"):
            Stream.legacy.launch(kernel, grid, block)
        with pytest.raises(ValueError, match=rf"^{argname} dimensions"):
            kernel.prepare(grid, block)


@pytest.mark.parametrize("value, ok", [(INT_MAX, True), (INT_MIN, True), (INT_MAX + 1, False),
                                       (INT_MIN - 1, False), (2 ** 64, False)])
def test_launch_priority_is_a_c_int(value, ok):
    if ok:
        assert LaunchConfig(1, 1, priority=value).priority == value
    else:
        with pytest.raises(ValueError, match=rf"^priority={value} does not fit a C int$"):
            LaunchConfig(1, 1, priority=value)


@pytest.mark.parametrize("field, value, message", [
    ("num_bytes", SIZE_MAX + 1, "value.num_bytes=18446744073709551616 is larger than memory"),
    ("num_bytes", -1, "value.num_bytes must be >= 0"),
    ("base_ptr", -1, "value.base_ptr=-1 does not fit in a pointer"),
    ("base_ptr", SIZE_MAX + 1, "does not fit in a pointer"),
    ("hit_ratio", 1.5, "value.hit_ratio must be a number in"),
    ("hit_prop", 7, "value.hit_prop must be one of")])
def test_an_access_policy_window_changed_after_init_is_checked_again(field, value, message):
    """Its fields are plain attributes: before, a num_bytes past size_t gave
    an OverflowError (a negative one too), unnamed, at the conversion."""
    window = streams.AccessPolicyWindow(0x10000, 4096)
    setattr(window, field, value)
    with pytest.raises(ValueError, match=message):
        uninitialised(Stream).set_attribute("access_policy_window", window)


def test_an_access_policy_window_at_the_edges_passes_the_checks():
    window = streams.AccessPolicyWindow(SIZE_MAX, SIZE_MAX, 0.0)
    # Past the checks: the stream that was never initialised is refused.
    with pytest.raises(ValueError, match="never initialised"):
        uninitialised(Stream).set_attribute("access_policy_window", window)


@pytest.mark.parametrize("value", [UINT_MAX + 1, -1])
def test_c_kernel_launch_refuses_shared_mem_past_unsigned_int(value):
    """The C-level Kernel.c_launch takes a size_t: the check is there too
    (through the Python launch, since a cimporter would need a compiler)."""
    with _refused(value, "shared_mem"):
        Stream.legacy.launch(streams.Kernel.__new__(streams.Kernel), 1, 1, shared_mem=value)


# ---- GPU: refusals before anything is enqueued, and the edges that work ---------------------

@pytest.mark.gpu
@pytest.mark.parametrize("value", [2 ** 32 + 16, 2 ** 32])
def test_gpu_launch_with_shared_mem_past_unsigned_int_enqueues_nothing(stream, kernels,
                                                                       device_buffer, value):
    """Refused before the launch: taken, the fill would run with (value mod
    2**32) bytes of shared memory, the buffer filled and no error."""
    buf = device_buffer()
    with pytest.raises(ValueError, match="shared_mem="):
        stream.launch(kernels.fill, 4, 256, buf, 7, N, shared_mem=value)
    with pytest.raises(ValueError, match="shared_mem="):
        stream.launch_ex(kernels.fill, LaunchConfig(4, 256, shared_mem=value), buf, 7, N)
    with pytest.raises(ValueError, match="shared_mem="):
        kernels.fill.prepare(4, 256, buf, 7, N, shared_mem=value)
    stream.synchronize()
    assert not to_host(buf, stream).any()
    # The largest accepted value reaches CUDA whole, which refuses it (far
    # more than a block has): no wrap to a small size that would run.
    with pytest.raises(streams.CudaError):
        stream.launch(kernels.fill, 4, 256, buf, 7, N, shared_mem=UINT_MAX)
    stream.synchronize()
    assert not to_host(buf, stream).any()
    stream.launch(kernels.fill, 4, 256, buf, 7, N, shared_mem=1024)   # a real size works
    assert (to_host(buf, stream) == 7).all()


@pytest.mark.gpu
def test_gpu_graph_kernel_node_with_shared_mem_past_unsigned_int_adds_nothing(kernels, closer,
                                                                              device_buffer,
                                                                              stream):
    """Refused: taken, the node would be added with 16 bytes of shared
    memory."""
    buf = device_buffer()
    g = closer(streams.Graph())
    with pytest.raises(ValueError, match="shared_mem=4294967312 does not fit"):
        g.add_kernel_node(kernels.fill, 4, 256, buf, 7, N, shared_mem=2 ** 32 + 16)
    assert g.nodes == []
    node = g.add_kernel_node(kernels.fill, 4, 256, buf, 7, N, shared_mem=1024)
    with g.instantiate() as ex:
        with pytest.raises(ValueError, match="shared_mem=4294967312 does not fit"):
            ex.set_kernel_node(node, kernels.fill, 4, 256, buf, 9, N, shared_mem=2 ** 32 + 16)
        ex.launch(stream)
        assert (to_host(buf, stream) == 7).all()    # the node kept its parameters
    with pytest.raises(ValueError, match="n must be >= 1"):
        g.add_switch(g.create_condition(), 0)
    with pytest.raises(ValueError, match=r"n=4294967296 does not fit"):
        g.add_switch(g.create_condition(), 2 ** 32)
    with pytest.raises(ValueError, match=r"default=4294967296 does not fit"):
        g.create_condition(2 ** 32)
    assert g.create_condition(UINT_MAX).default == UINT_MAX
    assert len(g.nodes) == 1


# ---- nodes of a closed graph ----------------------------------------------------------

_CLOSED_GRAPH_NODES = textwrap.dedent("""
    import streams
    from streams import Graph

    k = streams._launch.builtin_kernel("empty")
    a = Graph()
    node_a = a.add_kernel_node(k, 1, 1)
    exec_a = a.instantiate()
    old = a.handle
    a.close()
    # CUDA often gives the next graph the freed address: look for it, but
    # assert the refusals either way.
    made = []
    for _ in range(64):
        b = Graph()
        if b.handle == old:
            break
        made.append(b)
    reused = b.handle == old
    node_b = b.add_kernel_node(k, 1, 1)
    exec_b = b.instantiate()
    refused = 0
    for call in (lambda: b.add_empty_node(dependencies=[node_a]),
                 lambda: b.add_kernel_node(k, 1, 1, dependencies=node_a),
                 lambda: exec_b.set_kernel_node(node_a, k, 1, 1),
                 lambda: exec_b.set_enabled(node_a, False),
                 lambda: exec_b.is_enabled(node_a),
                 lambda: exec_a.set_kernel_node(node_b, k, 1, 1),
                 lambda: exec_a.set_enabled(node_b, False)):
        try:
            call()
        except ValueError as exc:
            assert "closed" in str(exc), exc
            refused += 1
    assert refused == 7, refused
    assert node_a != node_b     # also when CUDA gave both the same address
    # The open graph's own node still works with its own executable.
    exec_b.set_enabled(node_b, False)
    assert exec_b.is_enabled(node_b) is False
    exec_a.launch(streams.Stream.legacy)   # the executable itself outlives its graph
    streams.synchronize_device()
    for g in made:
        g.close()
    exec_a.close(); exec_b.close(); b.close()
    print("OK reused" if reused else "OK not-reused")
""")


@pytest.mark.gpu
def test_gpu_a_node_of_a_closed_graph_is_refused_before_cuda():
    """Once CUDA gives graph B the closed graph A's address, a check of raw
    addresses would let A's node pass as B's ("node of another graph") and
    its freed handle reach CUDA (a CudaError at best, a crash at worst);
    in a child for that reason.  The refusals are asserted whether or not
    the address was reused."""
    proc = run_python(_CLOSED_GRAPH_NODES, timeout=90)
    assert proc.returncode == 0 and "OK" in proc.stdout, (proc.returncode, proc.stdout[-2000:],
                                                          proc.stderr[-3000:])
    print(proc.stdout.strip().splitlines()[-1], file=sys.stderr)
