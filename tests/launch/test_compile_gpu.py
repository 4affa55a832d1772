"""Module.from_source (NVRTC at run time) on a real GPU: a templated kernel
compiled for the current device, found by its name expressions, launched,
and its data checked; errors carry NVRTC's log."""
import threading

import pytest

np = pytest.importorskip("numpy", reason="the compilation tests check results with numpy")

import streams
from streams import CompileError, DeviceBuffer, Graph, Module

pytestmark = pytest.mark.gpu

N = 3001

SOURCE = r"""
template <typename T>
__global__ void axpb(T* out, const T* x, T a, T b, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + b;
}
"""


@pytest.fixture(autouse=True)
def nvrtc():
    try:
        return streams._launch.nvrtc_info()
    except RuntimeError as exc:
        pytest.fail(f"the GPU machine must have an NVRTC (CUDA 13 toolkit in /usr/local/cuda): "
                    f"{exc}")


def roundtrip(kernel, dtype, stream, graph=False):
    x = np.arange(N, dtype=dtype)
    dx, dout = DeviceBuffer(x.nbytes, stream), DeviceBuffer(x.nbytes, stream)
    try:
        streams.memcpy_async(dx, x, stream=stream)
        if graph:
            g = Graph()
            g.add_kernel_node(kernel, (N + 127) // 128, 128, dout, dx, dtype(3), dtype(2),
                              np.uint64(N))
            with g.instantiate() as ex:
                ex.launch(stream)
            g.close()
        else:
            stream.launch(kernel, (N + 127) // 128, 128, dout, dx, dtype(3), dtype(2), np.uint64(N))
        out = np.empty_like(x)
        streams.memcpy_async(out, dout, stream=stream)
        stream.synchronize()
        return x, out
    finally:
        dx.close()
        dout.close()


def test_templated_kernel_by_name_expression(stream):
    mod = Module.from_source(SOURCE, name_expressions=("axpb<float>", "axpb<double>"))
    try:
        for name, dtype in (("axpb<float>", np.float32), ("axpb<double>", np.float64)):
            k = mod.get_kernel(name)
            assert k.name == name and k.num_params == 5
            x, out = roundtrip(k, dtype, stream)
            np.testing.assert_array_equal(out, 3 * x + 2)
            x, out = roundtrip(k, dtype, stream, graph=True)
            np.testing.assert_array_equal(out, 3 * x + 2)
        # prepare, as with any module
        k = mod.get_kernel("axpb<float>")
        x = np.arange(N, dtype=np.float32)
        dx, dout = DeviceBuffer(x.nbytes, stream), DeviceBuffer(x.nbytes, stream)
        streams.memcpy_async(dx, x, stream=stream)
        p = k.prepare((N + 127) // 128, 128, dout, dx, np.float32(5), np.float32(-1), np.uint64(N))
        p.launch(stream)
        out = np.empty_like(x)
        streams.memcpy_async(out, dout, stream=stream)
        stream.synchronize()
        np.testing.assert_array_equal(out, 5 * x - 1)
        del p
        dx.close()
        dout.close()
    finally:
        mod.close()


def test_default_arch_is_the_current_devices():
    Module.clear_source_cache()
    mod = Module.from_source(SOURCE, name_expressions=("axpb<float>",))
    mod.close()
    dev = streams.Device(streams.get_device())
    major, minor = dev.compute_capability
    image, is_ptx, _ = streams._launch._compile(SOURCE, (), ("axpb<float>",),
                                                f"sm_{major}{minor}")
    assert not is_ptx and image.startswith(b"\x7fELF")
    # Same key as the default: it came from the cache.
    assert Module.source_cache_info()["hits"] >= 1


def test_a_second_from_source_does_not_compile_again():
    Module.clear_source_cache()
    before = Module.source_cache_info()
    a = Module.from_source(SOURCE, name_expressions=("axpb<float>",))
    b = Module.from_source(SOURCE, name_expressions=("axpb<float>",))
    after = Module.source_cache_info()
    try:
        assert after["misses"] == before["misses"] + 1
        assert after["hits"] == before["hits"] + 1
        assert a is not b and a.handle != b.handle      # each call loads its own module
    finally:
        a.close()
        b.close()


def test_ptx_arch_is_compiled_by_the_driver(stream):
    major, minor = streams.Device(streams.get_device()).compute_capability
    mod = Module.from_source(SOURCE, name_expressions=("axpb<float>",),
                             arch=f"compute_{major}{minor}")
    try:
        x, out = roundtrip(mod.get_kernel("axpb<float>"), np.float32, stream)
        np.testing.assert_array_equal(out, 3 * x + 2)
    finally:
        mod.close()


def test_a_syntax_error_raises_with_the_log():
    with pytest.raises(CompileError) as info:
        Module.from_source("__global__ void broken(int* p) { p[0] = ; }")
    assert "expected an expression" in info.value.log
    assert "expected an expression" in str(info.value)


def test_compiled_modules_from_other_threads(stream):
    errors, mods = [], []

    def work(i):
        try:
            mods.append(Module.from_source(SOURCE + f"\n// thread {i % 2}\n",
                                           name_expressions=("axpb<float>",)))
        except BaseException as exc:     # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        for m in mods:
            x, out = roundtrip(m.get_kernel("axpb<float>"), np.float32, stream)
            np.testing.assert_array_equal(out, 3 * x + 2)
    finally:
        for m in mods:
            m.close()
