"""Kernels of other libraries adopted with Kernel.from_handle, on a real GPU.

Each library's kernel runs through every launch path streams has
(Stream.launch, launch_ex with a LaunchConfig, a prepared launch, a graph
kernel node, a kernel node updated in an executable), and the data it wrote
is checked.  A library that is not installed skips its test, saying which.
"""
import gc
import weakref

import pytest

np = pytest.importorskip("numpy", reason="the adopted-kernel tests check results with numpy")

import streams
import streams.testing
from streams import DeviceBuffer, Graph, Kernel, LaunchConfig, Module

pytestmark = pytest.mark.gpu

N = 4099          # not a multiple of the block: the bound check matters
BLOCK = 128
GRID = (N + BLOCK - 1) // BLOCK

# out[i] = value + i, for i < n.
FILL_SOURCE = r"""
extern "C" __global__ void adopt_fill(unsigned int* out, unsigned int value,
                                      unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value + (unsigned int)i;
}
"""

FILL_PTX = r"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry adopt_fill(.param .u64 out, .param .u32 value, .param .u64 n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r5, [value];
    ld.param.u64 %rd2, [n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.wide.u32 %rd3, %r1, %r2, 0;
    cvt.u64.u32 %rd4, %r3;
    add.u64 %rd3, %rd3, %rd4;
    setp.ge.u64 %p, %rd3, %rd2;
    @%p bra DONE;
    cvt.u32.u64 %r4, %rd3;
    add.u32 %r4, %r4, %r5;
    shl.b64 %rd5, %rd3, 2;
    add.u64 %rd6, %rd1, %rd5;
    st.global.u32 [%rd6], %r4;
DONE:
    ret;
}
"""


def to_host(buf, stream):
    out = np.empty(buf.nbytes // 4, dtype=np.uint32)
    streams.memcpy_async(out, buf, stream=stream)
    stream.synchronize()
    return out


def expected(value):
    return (value + np.arange(N, dtype=np.uint64)).astype(np.uint32)


def run_every_path(kernel, stream):
    """Launch ``kernel`` (adopt_fill's parameters) each way streams can, and
    check what each launch wrote."""
    bufs = [DeviceBuffer(4 * N, stream) for _ in range(5)]
    try:
        for b in bufs:
            streams.memset_async(b, 0, 4 * N, stream=stream)
        stream.launch(kernel, GRID, BLOCK, bufs[0], np.uint32(3), np.uint64(N))
        assert (to_host(bufs[0], stream) == expected(3)).all()

        stream.launch_ex(kernel, LaunchConfig(GRID, BLOCK, priority=0), bufs[1], np.uint32(5),
                         np.uint64(N))
        assert (to_host(bufs[1], stream) == expected(5)).all()

        prepared = kernel.prepare(GRID, BLOCK, bufs[2], np.uint32(7), np.uint64(N))
        prepared.launch(stream)
        assert (to_host(bufs[2], stream) == expected(7)).all()

        g = Graph()
        try:
            node = g.add_kernel_node(kernel, GRID, BLOCK, bufs[3], np.uint32(9), np.uint64(N))
            with g.instantiate() as ex:
                ex.launch(stream)
                assert (to_host(bufs[3], stream) == expected(9)).all()
                ex.set_kernel_node(node, kernel, GRID, BLOCK, bufs[4], np.uint32(11),
                                   np.uint64(N))
                ex.launch(stream)
                assert (to_host(bufs[4], stream) == expected(11)).all()
        finally:
            g.close()
        del prepared
    finally:
        stream.synchronize()
        for b in bufs:
            b.close()


def check_adopted(kernel, kind, owner):
    assert kernel.kind == kind
    assert kernel.owner is owner
    assert kernel.module is None
    assert kernel.num_params in (None, 3)
    if kernel.num_params is not None:
        assert kernel.param_sizes == (8, 4, 8)
    assert kernel.max_threads_per_block >= BLOCK
    assert "adopt" in repr(kernel)


# ---- the package's own kernels, adopted by handle -------------------------------------------

def test_adopt_a_streams_kernel_by_int_handle(stream):
    mod = Module.from_ptx(FILL_PTX)
    try:
        own = mod.get_kernel("adopt_fill")
        k = Kernel.from_handle(own.handle, kind="kernel", owner=mod)
        check_adopted(k, "kernel", mod)
        assert k.handle == own.handle
        run_every_path(k, stream)
        del k
    finally:
        mod.close()


def test_signature_given_to_from_handle(stream):
    mod = Module.from_ptx(FILL_PTX)
    try:
        h = mod.get_kernel("adopt_fill").handle
        k = Kernel.from_handle(h, signature="pointer, uint32, uint64", kind="kernel")
        assert k.signature == ("pointer", "uint32", "uint64")
        run_every_path(k, stream)
        with pytest.raises(ValueError, match="signature"):
            Kernel.from_handle(h, signature=("pointer", "uint32"), kind="kernel")
        with pytest.raises(ValueError, match="signature"):
            Kernel.from_handle(h, signature=("pointer", "uint64", "uint64"), kind="kernel")
        del k
    finally:
        mod.close()


# ---- CuPy ---------------------------------------------------------------------------------------

def test_adopt_cupy_raw_kernel(stream):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed: its RawKernel cannot "
                                              "be adopted here")
    raw = cupy.RawKernel(FILL_SOURCE, "adopt_fill")
    handle = raw.kernel.ptr          # a CUfunction, as an int
    k = Kernel.from_handle(handle, kind="function", owner=raw)
    check_adopted(k, "function", raw)
    assert k.name == "adopt_fill" or k.name.startswith("function 0x")
    run_every_path(k, stream)
    del k


# ---- cuda.core -----------------------------------------------------------------------------------

def _cuda_core():
    try:
        from cuda.core import Device, Program, ProgramOptions
    except ImportError:
        try:
            from cuda.core.experimental import Device, Program, ProgramOptions
        except ImportError:
            pytest.skip("cuda.core is not installed: its Kernel cannot be adopted here")
    return Device, Program, ProgramOptions


def test_adopt_cuda_core_kernel(stream):
    Device, Program, ProgramOptions = _cuda_core()
    dev = Device(streams.get_device())
    dev.set_current()
    prog = Program(FILL_SOURCE, code_type="c++",
                   options=ProgramOptions(arch=f"sm_{dev.arch}"))
    code = prog.compile("cubin")
    ker = code.get_kernel("adopt_fill")
    # A cuda-bindings CUkernel: its type says which kind it is.
    k = Kernel.from_handle(ker.handle, owner=code)
    check_adopted(k, "kernel", code)
    assert int(ker.handle) == k.handle
    run_every_path(k, stream)
    del k


# ---- numba-cuda ----------------------------------------------------------------------------------

def test_adopt_numba_kernel(stream):
    cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: its kernels "
                                                    "cannot be adopted here")
    from numba import types

    if not cuda.is_available():
        pytest.skip("numba-cuda sees no GPU here")
    sig = types.void(types.CPointer(types.uint32), types.uint32, types.uint64)

    def numba_fill(out, value, n):
        i = cuda.grid(1)
        if i < n:
            out[i] = value + types.uint32(i)

    # Only numba's own compile and load may turn the test into a skip: a
    # numba-cuda that is out of step with the installed numpy (numpy 2 removed
    # names such as np.row_stack that some numba-cuda releases still import)
    # cannot build a kernel at all, and that is not ours to test. Everything
    # from Kernel.from_handle on runs outside this guard and fails normally.
    try:
        numba_fill = cuda.jit(sig)(numba_fill)
        compiled = numba_fill.overloads[sig.args]
        handle = compiled._codelibrary.get_cufunc().handle
    except Exception as exc:
        pytest.skip(f"numba-cuda cannot compile a kernel in this environment "
                    f"({type(exc).__name__}: {exc})")
    # numba's handle is a cuda-bindings CUfunction or a ctypes pointer.
    k = Kernel.from_handle(handle, kind="function", owner=numba_fill)
    assert k.kind == "function" and k.owner is numba_fill and k.module is None
    assert k.num_params in (None, 3)
    run_every_path(k, stream)
    del k


# ---- the owner's lifetime -----------------------------------------------------------------------

class Owner:
    """Stands for another library's code object: it unloads the code when
    it goes, as CuPy's and cuda.core's do."""

    def __init__(self):
        self.module = Module.from_ptx(FILL_PTX)
        self.handle = self.module.get_kernel("adopt_fill").handle

    def __del__(self):
        self.module.close()


def test_owner_dropped_early_stays_alive_while_the_kernel_is_used(stream):
    owner = Owner()
    alive = weakref.ref(owner)
    k = Kernel.from_handle(owner.handle, kind="kernel", owner=owner)
    del owner
    gc.collect()
    assert alive() is not None, "the adopted kernel must keep its owner"
    run_every_path(k, stream)

    buf = DeviceBuffer(4 * N, stream)
    try:
        g = Graph()
        g.add_kernel_node(k, GRID, BLOCK, buf, np.uint32(21), np.uint64(N))
        ex = g.instantiate()
        g.close()
        del g, k
        gc.collect()
        assert alive() is not None, "a graph executable that holds the kernel keeps its owner"
        ex.launch(stream)
        assert (to_host(buf, stream) == expected(21)).all()
        ex.close()
        del ex
        gc.collect()
        streams._cudart._drain_deferred()
        assert alive() is None, "the owner must go once nothing uses the kernel"
    finally:
        buf.close()


def test_owner_released_only_after_the_launched_work(stream):
    """The owner goes with the last user, but only once the kernel's work is
    done: the devices it ran on are synchronized first."""
    owner = Owner()
    alive = weakref.ref(owner)
    k = Kernel.from_handle(owner.handle, kind="kernel", owner=owner)
    del owner
    buf = DeviceBuffer(4 * N, stream)
    try:
        streams.testing.spin(stream, 100_000)      # 100 ms ahead of the kernel
        stream.launch(k, GRID, BLOCK, buf, np.uint32(31), np.uint64(N))
        del k
        gc.collect()
        assert alive() is None
        # Let go after a synchronize: the kernel finished before the owner
        # unloaded its code.
        assert stream.query()
        assert (to_host(buf, stream) == expected(31)).all()
    finally:
        buf.close()


def test_owner_in_a_reference_cycle(stream):
    owner = Owner()
    k = Kernel.from_handle(owner.handle, kind="kernel", owner=owner)
    owner.kernel = k           # owner -> kernel -> stand-in module -> owner
    alive = weakref.ref(owner)
    prepared = k.prepare(GRID, BLOCK, DeviceBuffer(4 * N, stream), np.uint32(1),
                         np.uint64(N))
    del owner, k
    gc.collect()
    assert alive() is not None
    prepared.launch(stream)
    stream.synchronize()
    del prepared
    gc.collect()
    gc.collect()
    assert alive() is None


def _green_stream_or_none():
    """A stream of a green context on a partition of the current device, and
    the context; (None, None) where the driver has no green contexts."""
    dev = streams.Device(streams.get_device())
    try:
        whole = dev.sm_resource()
        parts, _ = dev.split_sm(whole.min_partition_size, groups=1)
        ctx = streams.GreenContext(parts[0])
    except NotImplementedError:
        return None, None
    return ctx.create_stream(priority=0), ctx


def test_owners_go_once_launches_and_executables_are_gone(stream):
    """The fuzzer's case, step by step: with a green context's stream open,
    an owner in a cycle with its kernel, launched directly and from an
    executable, and a second adopted kernel never launched.  Once the kernels
    and the (closed) executable are dropped and the device is settled, both
    owners are gone; the executable keeps the first while it lives."""
    green, ctx = _green_stream_or_none()
    side = streams.Stream(non_blocking=True)
    buf = DeviceBuffer(4 * N, stream)
    try:
        if green is not None:
            green.synchronize()
        first = Owner()
        k1 = Kernel.from_handle(first.handle, kind="kernel", owner=first)
        first.kernel = k1          # owner -> kernel -> stand-in module -> owner
        first_alive = weakref.ref(first)
        del first
        stream.launch(k1, GRID, BLOCK, buf, np.uint32(41), np.uint64(N))
        assert (to_host(buf, stream) == expected(41)).all()

        second = Owner()
        k2 = Kernel.from_handle(second.handle, kind="kernel", owner=second)
        second_alive = weakref.ref(second)
        del second

        g = Graph()
        try:
            g.add_kernel_node(k1, GRID, BLOCK, buf, np.uint32(43), np.uint64(N))
            ex = g.instantiate()
        finally:
            g.close()
        del g
        ex.launch(side)
        assert (to_host(buf, side) == expected(43)).all()

        del k1, k2
        gc.collect()
        assert first_alive() is not None, "a graph executable that holds the kernel keeps its owner"
        assert second_alive() is None, "an owner whose kernel was never launched goes with it"
        ex.close()
        del ex
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        gc.collect()
        assert first_alive() is None, "the owner must go once nothing uses the kernel"
    finally:
        side.synchronize()
        buf.close()
        side.close()
        if green is not None:
            green.close()
            ctx.close()
