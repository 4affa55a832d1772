"""Modules, kernel launches, prepared launches and argument packing on a real GPU."""
import pytest

np = pytest.importorskip("numpy", reason="the kernel tests check results with numpy")

import streams
from streams import DeviceBuffer, Module, Stream
from streams.testing import BUILTIN_PTX, builtin_module, spin

pytestmark = pytest.mark.gpu

MS = 1000

AXPY_PTX = r"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry axpy(.param .f32 a, .param .u64 x, .param .u64 y, .param .u64 n)
{
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;
    ld.param.f32 %f1, [a];
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u64 %rd3, [n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.wide.u32 %rd4, %r1, %r2, 0;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    setp.ge.u64 %p, %rd4, %rd3;
    @%p bra DONE;
    shl.b64 %rd6, %rd4, 2;
    add.u64 %rd7, %rd1, %rd6;
    add.u64 %rd8, %rd2, %rd6;
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd8];
    fma.rn.f32 %f3, %f1, %f2, %f3;
    st.global.f32 [%rd8], %f3;
DONE:
    ret;
}
"""


@pytest.fixture(scope="module")
def builtins():
    m = builtin_module()
    yield m
    m.close()


def to_device(array, stream):
    buf = DeviceBuffer(array.nbytes, stream)
    streams.memcpy_async(buf, array, stream=stream)
    return buf


def to_host(buf, dtype, stream):
    out = np.empty(buf.nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    streams.memcpy_async(out, buf, stream=stream)
    stream.synchronize()
    return out


def test_axpy_matches_numpy_on_random_data(stream):
    rng = np.random.default_rng()
    n = 1_000_003
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    a = float(rng.standard_normal())
    mod = Module.from_ptx(AXPY_PTX)
    axpy = mod.get_kernel("axpy", signature=("float32", "pointer", "pointer", "int64"))
    assert axpy.signature == ("float32", "pointer", "pointer", "int64")
    dx, dy = to_device(x, stream), to_device(y, stream)
    stream.launch(axpy, (n + 255) // 256, 256, a, dx, dy, n)
    got = to_host(dy, np.float32, stream)
    ref = np.float32(a) * x + y
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-6
    # numpy scalars work without a signature
    plain = mod.get_kernel("axpy")
    stream.launch(plain, (n + 255) // 256, 256, np.float32(1.0), dx, dy, np.int64(n))
    got2 = to_host(dy, np.float32, stream)
    assert np.allclose(got2, ref + x, rtol=1e-5, atol=1e-5)
    dx.close()
    dy.close()
    mod.close()


def test_fill_and_increment_and_prepared_launch(stream, builtins):
    n = 1 << 20
    buf = DeviceBuffer(n * 4, stream)
    value = int(np.random.default_rng().integers(1, 1 << 30))
    fill = builtins.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    inc = builtins.get_kernel("streams_increment_u32", signature=("pointer", "uint64"))
    stream.launch(fill, 256, 256, buf, value, n)
    prepared = inc.prepare(256, 256, buf, n)
    for _ in range(5):
        prepared.launch(stream)
    out = to_host(buf, np.uint32, stream)
    assert (out == value + 5).all()
    buf.close()


def test_ordering_across_streams_sees_writes(builtins):
    a, b = Stream(), Stream()
    n = 1 << 16
    buf = DeviceBuffer(n * 4, a)
    fill = builtins.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    inc = builtins.get_kernel("streams_increment_u32", signature="pointer, uint64")
    spin(a, 100 * MS)
    a.launch(fill, 64, 256, buf, 41, n)
    ev = a.record()
    b.wait_event(ev)
    b.launch(inc, 64, 256, buf, n)
    out = to_host(buf, np.uint32, b)
    assert (out == 42).all(), "b's increment must see a's fill"
    buf.close()
    ev.close()
    a.synchronize()
    a.close()
    b.close()


def test_launch_argument_errors(stream, builtins):
    fill = builtins.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    with pytest.raises(TypeError, match=r"takes 3 argument\(s\)"):
        stream.launch(fill, 1, 1, 0, 1)
    with pytest.raises(TypeError, match="argument 1 must be an integer \\(uint32\\), not str"):
        stream.launch(fill, 1, 1, 0, "1", 4)
    with pytest.raises(ValueError, match="argument 1: -1 does not fit uint32"):
        stream.launch(fill, 1, 1, 0, -1, 4)
    with pytest.raises(TypeError, match="argument 0 must be a pointer"):
        stream.launch(fill, 1, 1, object(), 1, 4)
    with pytest.raises(TypeError, match="kernel must be a streams.Kernel"):
        stream.launch("fill", 1, 1)
    with pytest.raises(ValueError, match="grid dimensions must be >= 1"):
        stream.launch(fill, 0, 1, 0, 1, 4)
    with pytest.raises(TypeError, match="block must be an int or a tuple of up to 3 ints"):
        stream.launch(fill, 1, (1, 1, 1, 1), 0, 1, 4)
    plain = builtins.get_kernel("streams_fill_u32")
    with pytest.raises(TypeError, match="argument 1: a Python int is ambiguous"):
        stream.launch(plain, 1, 1, np.uint64(0), 1, np.uint64(4))
    with pytest.raises(ValueError, match=r"signature\[1\]: unknown C type 'float16'"):
        builtins.get_kernel("streams_fill_u32", signature=("pointer", "float16", "uint64"))
    with pytest.raises(streams.CudaError) as info:
        builtins.get_kernel("no_such_kernel")
    assert info.value.name in ("cudaErrorSymbolNotFound", "cudaErrorInvalidDeviceFunction")
    with pytest.raises(ValueError, match="does not look like PTX"):
        Module.from_ptx("hello")
    with pytest.raises(ValueError, match="not a cubin"):
        Module.from_cubin(b"garbage")
    with pytest.raises(FileNotFoundError):
        Module.from_file("/no/such/file.ptx")


def test_kernel_attributes_and_dynamic_shared_memory(builtins):
    k = builtins.get_kernel("streams_spin")
    assert k.max_threads_per_block >= 256
    assert k.num_regs > 0
    assert k.shared_size_bytes == 0
    k.max_dynamic_shared_size_bytes = 64 * 1024
    assert k.max_dynamic_shared_size_bytes == 64 * 1024
    with pytest.raises(ValueError, match="must be >= 0"):
        k.max_dynamic_shared_size_bytes = -1


def test_launch_ex_cluster_and_cooperative(stream, builtins):
    empty = builtins.get_kernel("streams_empty")
    stream.launch_ex(empty, 4, 32, cluster=2)
    stream.launch_ex(empty, 2, 32, cooperative=True)
    stream.synchronize()
    with pytest.raises(streams.CudaError):
        stream.launch_ex(empty, 3, 32, cluster=2)  # grid must be a multiple of the cluster
        stream.synchronize()


def test_module_from_file(tmp_path, stream):
    path = tmp_path / "k.ptx"
    path.write_text(BUILTIN_PTX)
    mod = Module.from_file(str(path))
    k = mod.get_kernel("streams_empty")
    stream.launch(k, 1, 1)
    stream.synchronize()
    mod.close()


# One parameter of each type the packer writes; the kernel stores each,
# widened to 64 bits (the floats as they are), in its own 8-byte slot.
STORE_PTX = r"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry store_params(.param .u64 out, .param .s8 a, .param .s16 b, .param .s32 c,
    .param .s64 d, .param .u8 e, .param .u16 f, .param .u32 g, .param .u64 h,
    .param .f32 x, .param .f64 y)
{
    .reg .b16 %rs<5>;
    .reg .b32 %r<3>;
    .reg .f32 %f<2>;
    .reg .f64 %fd<2>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.s8 %rs1, [a];
    cvt.s64.s16 %rd3, %rs1;
    st.global.u64 [%rd2], %rd3;
    ld.param.s16 %rs2, [b];
    cvt.s64.s16 %rd4, %rs2;
    st.global.u64 [%rd2+8], %rd4;
    ld.param.s32 %r1, [c];
    cvt.s64.s32 %rd5, %r1;
    st.global.u64 [%rd2+16], %rd5;
    ld.param.s64 %rd6, [d];
    st.global.u64 [%rd2+24], %rd6;
    ld.param.u8 %rs3, [e];
    cvt.u64.u16 %rd7, %rs3;
    st.global.u64 [%rd2+32], %rd7;
    ld.param.u16 %rs4, [f];
    cvt.u64.u16 %rd8, %rs4;
    st.global.u64 [%rd2+40], %rd8;
    ld.param.u32 %r2, [g];
    cvt.u64.u32 %rd9, %r2;
    st.global.u64 [%rd2+48], %rd9;
    ld.param.u64 %rd10, [h];
    st.global.u64 [%rd2+56], %rd10;
    ld.param.f32 %f1, [x];
    st.global.f32 [%rd2+64], %f1;
    ld.param.f64 %fd1, [y];
    st.global.f64 [%rd2+72], %fd1;
    ret;
}
"""
STORE_KINDS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float32", "float64")
LOWEST = (-(1 << 7), -(1 << 15), -(1 << 31), -(1 << 63), 0, 0, 0, 0)
HIGHEST = ((1 << 7) - 1, (1 << 15) - 1, (1 << 31) - 1, (1 << 63) - 1,
           (1 << 8) - 1, (1 << 16) - 1, (1 << 32) - 1, (1 << 64) - 1)


@pytest.fixture
def store_params():
    mod = Module.from_ptx(STORE_PTX)
    yield mod.get_kernel("store_params", signature=("pointer",) + STORE_KINDS)
    streams.synchronize_device()
    mod.close()


@pytest.mark.parametrize("values", [
    LOWEST + (-0.5, -1e300),
    HIGHEST + (3.25, 1e300),
    # numpy scalars, an int subclass and an int where a float goes
    (np.int8(-5), np.int16(7), np.int32(-9), np.int64(11), np.uint8(13), np.uint16(15),
     np.uint32(17), streams.CaptureMode.RELAXED, np.float32(1.5), 2),
], ids=["lowest", "highest", "numpy-and-subclasses"])
def test_every_argument_type_reaches_the_kernel_intact(stream, store_params, values):
    out = DeviceBuffer(80, stream)
    try:
        streams.memset_async(out, 0, stream=stream)
        stream.launch(store_params, 1, 1, out, *values)
        host = np.zeros(10, dtype=np.uint64)
        streams.memcpy_async(host, out, stream=stream)
        stream.synchronize()
    finally:
        out.close()
    assert [int(v) for v in host[:4].view(np.int64)] == [int(v) for v in values[:4]]
    assert [int(v) for v in host[4:8]] == [int(v) for v in values[4:8]]
    assert host[8:9].view(np.float32)[0] == np.float32(values[8])
    assert host[9:10].view(np.float64)[0] == float(values[9])


def test_integers_out_of_range_are_refused_by_name(stream, store_params):
    out = DeviceBuffer(80, stream)      # a real target, should a launch slip through
    args = [out] + list(LOWEST) + [0.0, 0.0]
    try:
        for i, kind in enumerate(STORE_KINDS[:8]):
            for bad in (LOWEST[i] - 1, HIGHEST[i] + 1):
                wrong = list(args)
                wrong[i + 1] = bad
                with pytest.raises(ValueError,
                                   match=f"^argument {i + 1}: {bad} does not fit {kind}$"):
                    stream.launch(store_params, 1, 1, *wrong)
        with pytest.raises(TypeError, match="argument 1 must be an integer \\(int8\\), not bool"):
            stream.launch(store_params, 1, 1, out, True, *args[2:])
        with pytest.raises(TypeError, match="argument 9 must be a number \\(float32\\), not str"):
            stream.launch(store_params, 1, 1, *args[:9], "1.0", 0.0)
        stream.synchronize()
    finally:
        out.close()
