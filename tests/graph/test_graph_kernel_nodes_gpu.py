"""Kernel nodes of captured graphs, read and changed: what a captured launch
records (name, grid, block, arguments), an executable's arguments changed
one at a time (a pointer aimed at another buffer, a scalar) with the data
computed on the GPU, the graph's own node changed, CuPy's kernels beside
ours, and the changes CUDA's parameter layout cannot take refused; each
node's kernel as a streams.Kernel (ours given back, another library's
adopted, launched with new arguments)."""
import gc
import weakref

import pytest

np = pytest.importorskip("numpy", reason="the kernel-node tests check results with numpy")

from _support import closing

import streams
from streams import DeviceBuffer, Stream

pytestmark = pytest.mark.gpu

N = 4096
FILL_SIG = "pointer, uint32, uint64"


@pytest.fixture
def fill():
    return streams.builtin_kernel("fill_u32")


def _host(buf, stream, n=N):
    out = np.empty(n, dtype=np.uint32)
    streams.memcpy_async(out, buf, stream=stream)
    stream.synchronize()
    return out


def _kernel_nodes(graph):
    return [nd for nd in graph.nodes if nd.type == "kernel"]


def _capture_two_fills(s, fill, a, c):
    with s.capture() as cap:
        s.launch(fill, 16, 256, a, 5, N)
        s.launch(fill, 8, 128, c, 7, N)
    return cap.graph


def _by_first_arg(graph, buf):
    for nd in _kernel_nodes(graph):
        if nd.kernel_params().values(FILL_SIG)[0] == buf.ptr:
            return nd
    raise AssertionError(f"no kernel node writes {buf}")


def test_a_captured_launch_tells_what_it_launches(fill):
    with closing(Stream(non_blocking=True)) as s:
        a, c = DeviceBuffer(4 * N, s), DeviceBuffer(4 * N, s)
        s.synchronize()
        graph = _capture_two_fills(s, fill, a, c)
        nodes = _kernel_nodes(graph)
        assert len(nodes) == 2
        p = _by_first_arg(graph, a).kernel_params()
        assert p.name == "streams_fill_u32"
        assert p.grid == (16, 1, 1) and p.block == (256, 1, 1) and p.shared_mem == 0
        assert p.param_sizes == (8, 4, 8)
        assert len(p.args) == 3 and [len(x) for x in p.args] == [8, 4, 8]
        assert p.values(FILL_SIG) == (a.ptr, 5, N)
        assert p.values(fill) == (a.ptr, 5, N)          # a Kernel's signature
        assert p.function or p.kernel_handle
        # what CUDA tells of the kernel, as the Kernel itself reports it
        assert p.attributes["num_regs"] == fill.num_regs
        assert p.attributes["max_threads_per_block"] == fill.max_threads_per_block
        assert set(p.attributes) == {"max_threads_per_block", "shared_size_bytes",
                                     "const_size_bytes", "local_size_bytes", "num_regs"}
        q = _by_first_arg(graph, c).kernel_params()
        assert q.grid == (8, 1, 1) and q.block == (128, 1, 1)
        assert q.values(FILL_SIG) == (c.ptr, 7, N)
        assert "streams_fill_u32" in repr(p)
        graph.close()
        a.close()
        c.close()


def test_an_executables_arguments_change_one_at_a_time(fill):
    with closing(Stream(non_blocking=True)) as s:
        a, b, c = (DeviceBuffer(4 * N, s) for _ in range(3))
        for buf in (a, b, c):
            streams.memset_async(buf, 0, stream=s)
        s.synchronize()
        graph = _capture_two_fills(s, fill, a, c)
        na, nc = _by_first_arg(graph, a), _by_first_arg(graph, c)
        exe = graph.instantiate()
        exe.set_kernel_node_args(na, {0: b})            # point it at another buffer
        exe.set_kernel_node_args(nc, {1: 11})           # change a scalar
        exe.set_kernel_node_args(na, {1: 6})            # builds on the earlier change
        exe.launch(s)
        assert (_host(b, s) == 6).all()
        assert (_host(a, s) == 0).all()
        assert (_host(c, s) == 11).all()
        # The graph's nodes keep what was captured.
        assert na.kernel_params().values(FILL_SIG) == (a.ptr, 5, N)
        # Raw bytes and typed values through a signature work too.
        exe.set_kernel_node_args(nc, {1: (13).to_bytes(4, "little")})
        exe.set_kernel_node_args(na, {1: 21}, signature=FILL_SIG)
        exe.launch(s)
        assert (_host(c, s) == 13).all()
        assert (_host(b, s) == 21).all()
        # GraphExec.update takes the graph's arguments back.
        assert exe.update(graph).ok
        exe.launch(s)
        assert (_host(a, s) == 5).all() and (_host(c, s) == 7).all()
        exe.close()
        graph.close()
        for buf in (a, b, c):
            buf.close()


def test_the_buffer_given_to_an_executable_stays_alive(fill):
    with closing(Stream(non_blocking=True)) as s:
        a = DeviceBuffer(4 * N, s)
        s.synchronize()
        with s.capture() as cap:
            s.launch(fill, 16, 256, a, 5, N)
        graph = cap.graph
        (node,) = _kernel_nodes(graph)
        exe = graph.instantiate()
        b = DeviceBuffer(4 * N, s)
        exe.set_kernel_node_args(node, {0: b, 1: 9})
        ptr = b.ptr
        del b                     # the executable holds it
        exe.launch(s)
        out = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(out, ptr, nbytes=4 * N, stream=s)
        s.synchronize()
        assert (out == 9).all()
        exe.close()
        graph.close()
        a.close()


def test_the_graphs_own_node_changes(fill):
    with closing(Stream(non_blocking=True)) as s:
        a, b = DeviceBuffer(4 * N, s), DeviceBuffer(4 * N, s)
        s.synchronize()
        with s.capture() as cap:
            s.launch(fill, 16, 256, a, 5, N)
        graph = cap.graph
        (node,) = _kernel_nodes(graph)
        node.set_args({0: b, 2: N // 2})
        assert node.kernel_params().values(FILL_SIG) == (b.ptr, 5, N // 2)
        streams.memset_async(b, 0, stream=s)
        with graph.instantiate() as exe:
            exe.launch(s)
            host = _host(b, s)
        assert (host[:N // 2] == 5).all() and (host[N // 2:] == 0).all()
        graph.close()
        a.close()
        b.close()


def test_changes_the_layout_cannot_take_are_refused(fill):
    with closing(Stream(non_blocking=True)) as s:
        a = DeviceBuffer(4 * N, s)
        s.synchronize()
        with s.capture() as cap:
            streams.memset_async(a, 0, stream=s)
            s.launch(fill, 16, 256, a, 5, N)
        graph = cap.graph
        (node,) = _kernel_nodes(graph)
        memset_node = next(nd for nd in graph.nodes if nd.type == "memset")
        with graph.instantiate() as exe:
            with pytest.raises(ValueError, match="memset node, not a kernel node"):
                memset_node.kernel_params()
            with pytest.raises(ValueError, match="memset node, not a kernel node"):
                exe.set_kernel_node_args(memset_node, {0: 1})
            with pytest.raises(IndexError, match="parameter 3 of a kernel with 3 parameters"):
                exe.set_kernel_node_args(node, {3: 1})
            with pytest.raises(ValueError, match=r"changes\[1\]: 8 bytes for a parameter of 4"):
                exe.set_kernel_node_args(node, {1: bytes(8)})
            with pytest.raises(ValueError, match=r"changes\[1\]: 4294967296 does not fit"):
                exe.set_kernel_node_args(node, {1: 2**32})
            with pytest.raises(ValueError, match="signature names 2 parameters"):
                exe.set_kernel_node_args(node, {1: 1}, signature="pointer, uint32")
            with pytest.raises(ValueError, match="parameter 1 is 4 bytes, not a float64"):
                exe.set_kernel_node_args(node, {1: 1.0},
                                         signature="pointer, float64, uint64")
            with pytest.raises(TypeError, match="changes must be a dict"):
                exe.set_kernel_node_args(node, [(0, 1)])
            with pytest.raises(TypeError, match="bool"):
                exe.set_kernel_node_args(node, {1: True})
            # nothing above changed the executable
            exe.launch(s)
            assert (_host(a, s) == 5).all()
        graph.close()
        a.close()


def test_recapture_is_refused_naming_the_versions():
    runtime, driver = streams.runtime_version(), streams.driver_version()
    with closing(Stream(non_blocking=True)) as s:
        graph = streams.Graph()
        with pytest.raises(NotImplementedError, match=r"recapture.*CUDA 13\.3|13\.3.*recapture") \
                as info:
            graph.recapture(s)
        if driver < 13030:
            # A driver before 13.3 (580 is 13.0): the versions are named.
            assert "needs CUDA 13.3 or newer" in str(info.value)
            assert f"the driver supports CUDA {driver // 1000}.{driver % 1000 // 10}" \
                in str(info.value)
            assert f"CUDA {runtime // 1000}.{runtime % 1000 // 10} runtime" in str(info.value)
        graph.close()


CUPY_SCALE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


def _capture_cupy_and_streams(fill):
    """CuPy's ``scale`` (x *= 2) then streams' ``fill`` (a = 5), captured
    on a streams stream: (cupy, scale, x, y, grid, the stream, a, the
    graph, its kernel nodes by name).  x and y start at 1 and 4."""
    cupy = pytest.importorskip("cupy")
    scale = cupy.RawKernel(CUPY_SCALE, "scale")
    x = cupy.ones(N, dtype=cupy.float32)
    y = cupy.full(N, 4.0, dtype=cupy.float32)
    grid = ((N + 255) // 256,)
    scale(grid, (256,), (x, cupy.float32(1.0), cupy.int32(N)))     # compiled and loaded now
    cupy.cuda.Device().synchronize()
    s = Stream(non_blocking=True)
    a = DeviceBuffer(4 * N, s)
    s.synchronize()
    with s.capture() as cap:
        with cupy.cuda.ExternalStream(s.handle):
            scale(grid, (256,), (x, cupy.float32(2.0), cupy.int32(N)))
        s.launch(fill, 16, 256, a, 5, N)
    graph = cap.graph
    nodes = {nd.kernel_params().name: nd for nd in _kernel_nodes(graph)}
    return cupy, scale, x, y, grid, s, a, graph, nodes


def test_a_captured_cupy_kernel_and_a_streams_kernel_change(fill):
    cupy, scale, x, y, grid, s, a, graph, nodes = _capture_cupy_and_streams(fill)
    with closing(s):
        assert set(nodes) == {"scale", "streams_fill_u32"}
        p = nodes["scale"].kernel_params()
        assert p.param_sizes == (8, 4, 4)
        ptr, factor, n = p.values("pointer, float32, int32")
        assert ptr == x.data.ptr and factor == 2.0 and n == N
        with graph.instantiate() as exe:
            exe.set_kernel_node_args(nodes["scale"], {0: y, 1: 3.0})   # CuPy's: another array
            exe.set_kernel_node_args(nodes["streams_fill_u32"], {1: 17})   # ours: a scalar
            exe.launch(s)
            s.synchronize()
        assert cupy.asnumpy(y).tolist() == [12.0] * N
        assert cupy.asnumpy(x).tolist() == [1.0] * N      # the captured target, untouched
        assert (_host(a, s) == 17).all()
        graph.close()
        a.close()


# ---- each node's kernel as a streams.Kernel --------------------------------------------------

def test_a_node_streams_built_gives_its_kernel_back(fill):
    """Captured or added, a node of a streams kernel gives that Kernel
    itself, the same one on every access, and refuses once its graph is
    closed."""
    with closing(Stream(non_blocking=True)) as s:
        a = DeviceBuffer(4 * N, s)
        s.synchronize()
        with s.capture() as cap:
            s.launch(fill, 16, 256, a, 5, N)
        graph = cap.graph
        (node,) = _kernel_nodes(graph)
        p = node.kernel_params()
        assert p.kernel is fill
        assert p.kernel is p.kernel
        built = streams.Graph()
        added = built.add_kernel_node(fill, 4, 64, a, 3, N)
        assert added.kernel_params().kernel is fill
        stale = added.kernel_params()
        built.close()
        with pytest.raises(ValueError, match="graph this kernel node was read from is closed or gone"):
            stale.kernel
        graph.close()
        a.close()


def test_a_kernel_no_longer_held_is_adopted_and_launches():
    """A node whose streams Kernel object is gone (its module still open):
    the handle adopted with the graph as owner, named by the driver, its
    attributes read, launched directly and prepared with new arguments (the
    data computed on the GPU); it keeps its graph alive until it goes."""
    module = streams.Module.from_ptx(streams.builtin_ptx())
    k = module.get_kernel("streams_fill_u32")
    with closing(Stream(non_blocking=True)) as s:
        a, b, c = (DeviceBuffer(4 * N, s) for _ in range(3))
        for buf in (a, b, c):
            streams.memset_async(buf, 0, stream=s)
        s.synchronize()
        with s.capture() as cap:
            s.launch(k, 16, 256, a, np.uint32(5), np.uint64(N))
        graph = cap.graph
        del cap
        (node,) = _kernel_nodes(graph)
        del k
        gc.collect()
        p = node.kernel_params()
        adopted = p.kernel
        assert isinstance(adopted, streams.Kernel)
        assert adopted.owner is graph
        assert adopted.module is None                   # adopted, not a Module's
        assert adopted.kind in ("function", "kernel")
        if streams.driver_version() >= 12030:           # cuFuncGetName / cuKernelGetName
            assert adopted.name == "streams_fill_u32" == p.name
        assert adopted.param_sizes == (8, 4, 8)
        assert adopted.num_params == 3
        assert adopted.max_threads_per_block == p.attributes["max_threads_per_block"] > 0
        assert adopted.num_regs == p.attributes["num_regs"]
        assert adopted.signature is None
        s.launch(adopted, 16, 256, b, np.uint32(9), np.uint64(N))
        assert (_host(b, s) == 9).all()
        prepared = adopted.prepare(8, 128, c, np.uint32(4), np.uint64(N // 2))
        prepared.launch(s)
        host = _host(c, s)
        assert (host[:N // 2] == 4).all() and (host[N // 2:] == 0).all()
        assert (_host(a, s) == 0).all()                 # the captured target, untouched
        # The adopted Kernel keeps its owner, the graph, alive.
        ref = weakref.ref(graph)
        del graph, node, p, prepared
        gc.collect()
        assert ref() is not None
        del adopted
        gc.collect()
        assert ref() is None
        for buf in (a, b, c):
            buf.close()
    module.close()


def test_a_captured_cupy_kernel_is_adopted_and_launches(fill):
    """CuPy's RawKernel, captured beside a streams kernel: its node gives an
    adopted Kernel named "scale" that launches on a streams stream with new
    arguments; the streams node gives the streams Kernel back."""
    cupy, scale, x, y, grid, s, a, graph, nodes = _capture_cupy_and_streams(fill)
    with closing(s):
        assert nodes["streams_fill_u32"].kernel_params().kernel is fill
        p = nodes["scale"].kernel_params()
        k = p.kernel
        assert k.module is None and k.owner is graph
        # CuPy loads modules (cuModuleLoadData): the node records a CUfunction.
        assert k.kind == "function"
        if streams.driver_version() >= 12030:
            assert k.name == "scale"
        assert k.param_sizes == (8, 4, 4)
        assert k.max_threads_per_block >= 256 and k.num_regs > 0
        s.launch(k, grid, 256, y, np.float32(5.0), np.int32(N))
        s.synchronize()
        assert cupy.asnumpy(y).tolist() == [20.0] * N
        k.prepare(grid, 256, y, np.float32(0.5), np.int32(N)).launch(s)
        s.synchronize()
        assert cupy.asnumpy(y).tolist() == [10.0] * N
        assert cupy.asnumpy(x).tolist() == [1.0] * N       # the captured target, untouched
        del k, p
        graph.close()
        a.close()
    del scale                      # the library's kernel outlived every use of it
