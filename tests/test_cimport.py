"""A downstream Cython module cimports streams and calls its nogil C-level API."""
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import streams
from streams.testing import spin

from _support import env_importing_this_streams

HERE = os.path.dirname(os.path.abspath(__file__))

pytest.importorskip("Cython", reason="the cimport test needs Cython to build the extension")


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    build = tmp_path_factory.mktemp("cimport_build")
    shutil.copy(os.path.join(HERE, "cython_ext", "cimport_ext.pyx"), build)
    (build / "setup.py").write_text(textwrap.dedent("""
        from setuptools import Extension, setup
        from Cython.Build import cythonize
        import streams
        setup(ext_modules=cythonize(
            [Extension("cimport_ext", ["cimport_ext.pyx"],
                       include_dirs=[streams.get_include()])],
            compiler_directives={"language_level": 3}))
    """))
    env = env_importing_this_streams()
    # Prove that no CUDA headers are needed downstream.
    for var in ("CUDA_HOME", "CUDA_PATH", "CPATH", "C_INCLUDE_PATH"):
        env.pop(var, None)
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                            cwd=build, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    path = next(p for p in build.iterdir() if p.name.startswith("cimport_ext") and
                p.suffix in (".so", ".pyd"))
    spec = importlib.util.spec_from_file_location("cimport_ext", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_c_does_not_include_cuda_headers(ext, tmp_path_factory):
    c_file = os.path.join(os.path.dirname(ext.__file__), "cimport_ext.c")
    text = open(c_file).read()
    assert '#include "streams/streams.h"' in text
    assert "cuda_runtime_api.h" not in text


def test_cimport_on_cpu(ext):
    assert ext.handle_of(streams.Stream.legacy) == 1
    assert ext.handle_of(streams.Stream.null) == 0

    class Lazy(streams.Stream):
        def __init__(self):
            pass

    # Errors raised inside `with nogil` in the downstream module propagate.
    with pytest.raises(ValueError, match="closed"):
        ext.query_nogil(Lazy())
    with pytest.raises(TypeError):
        ext.query_nogil(object())
    # Library-made objects that were never initialised refuse, never crash.
    with pytest.raises(ValueError, match="never initialised"):
        ext.prepared_nogil(streams.PreparedLaunch.__new__(streams.PreparedLaunch),
                           streams.Stream.legacy, 1)
    with pytest.raises(ValueError, match="never initialised"):
        ext.fill_nogil(streams.Kernel.__new__(streams.Kernel), streams.Stream.legacy, 0, 0, 0)
    with pytest.raises(ValueError, match="closed GraphExec"):
        ext.graph_launch_nogil(streams.GraphExec.__new__(streams.GraphExec),
                               streams.Stream.legacy, 1)
    # Native host functions from Cython: refused before CUDA is touched.
    with pytest.raises(ValueError, match="closed"):
        ext.host_func_nogil(Lazy(), 0, 1)
    with pytest.raises(ValueError, match="fn must not be NULL"):
        ext.null_host_func_nogil(streams.Stream.legacy)
    with pytest.raises(ValueError, match="closed Graph"):
        ext.graph_host_node_nogil(streams.Graph.__new__(streams.Graph), 0)


@pytest.mark.gpu
def test_cimport_native_host_func_and_node_on_gpu(ext):
    import ctypes
    counter = streams.PinnedBuffer(8)
    value = ctypes.c_uint64.from_address(counter.ptr)
    value.value = 0
    s = streams.Stream()
    try:
        spin(s, 100_000)
        ext.host_func_nogil(s, counter.ptr, 3)
        assert value.value == 0, "the host functions must wait for the spin"
        s.synchronize()
        assert value.value == 3
        g = streams.Graph()
        node = ext.graph_host_node_nogil(g, counter.ptr)
        assert [n.handle for n in g.nodes] == [node]
        with g.instantiate() as ex:
            for _ in range(4):
                ex.launch(s)
            s.synchronize()
        assert value.value == 7, "every replay calls the native function"
        g.close()
    finally:
        s.synchronize()
        s.close()
        counter.close()


@pytest.mark.gpu
def test_cimport_nogil_methods_on_gpu(ext):
    a = streams.Stream()
    b = streams.Stream()
    ev = streams.Event()
    try:
        spin(a, 200_000)
        assert ext.query_nogil(a) == 0
        ext.order_nogil(a, b, ev)
        assert ext.query_nogil(b) == 0, "b must wait for a's spin"
        assert ext.query_nogil(ev) == 0
        ext.synchronize_nogil(b)
        assert ext.query_nogil(a) == 1, "b finished, so a must have finished"
        assert ext.query_nogil(ev) == 1
        assert ext.handle_of(a) == a.handle
        assert ext.device_of(a) == a.device_id
        assert ext.event_nogil(ev, b) == (ev.handle, 1)
    finally:
        a.synchronize()
        a.close()
        b.close()
        ev.close()


@pytest.mark.gpu
def test_cimport_kernel_graph_and_prepared_launch_on_gpu(ext):
    np = pytest.importorskip("numpy")
    from streams.testing import builtin_module

    n = 1024
    s = streams.Stream()
    mod = builtin_module()
    fill = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
    increment = mod.get_kernel("streams_increment_u32", signature="pointer, uint64")
    buf = streams.DeviceBuffer(n * 4, s)
    host = np.zeros(n, np.uint32)
    try:
        assert ext.fill_nogil(fill, s, buf.ptr, 40, n) == fill.handle
        ext.prepared_nogil(increment.prepare(4, 256, buf, n), s, 1)
        g = streams.Graph()
        first = g.add_kernel_node(increment, 4, 256, buf, n)
        second = g.add_kernel_node(increment, 4, 256, buf, n, dependencies=[first])
        assert ext.graph_handle(g) == g.handle
        with g.instantiate() as ex:
            ext.graph_set_enabled_nogil(ex, second.handle, False)
            assert ex.is_enabled(second) is False
            assert ext.graph_launch_nogil(ex, s, 1) == ex.handle
        streams.memcpy_async(host, buf, stream=s)
        s.synchronize()
        assert (host == 42).all(), "fill 40, then one prepared and one graph increment"
        g.close()
    finally:
        s.synchronize()
        buf.close()
        mod.close()
        s.close()
