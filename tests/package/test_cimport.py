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

from _support import build_nvtx_tool, env_importing_this_streams, run_with_nvtx_tool

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


def test_cimport_nvtx_ranges_without_the_gil(ext, tmp_path):
    """nvtx_range_push/pop and nvtx_mark of streams/_nvtx.pxd, called by the
    downstream module without the GIL: no tool here (negative levels); with
    the recording NVTX tool of tests/_support.py attached, the calls reach it."""
    assert all(level < 0 for level in ext.nvtx_nested())
    assert all(level < 0 for level in ext.nvtx_nested("downstream"))
    tool = build_nvtx_tool(str(tmp_path))
    code = f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("cimport_ext", {ext.__file__!r})
        ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ext)
        print("RESULT", list(ext.nvtx_nested("downstream")))
    """
    lines, result = run_with_nvtx_tool(tool, code, str(tmp_path))
    assert "RESULT [0, 1, 1, 0]" in result.stdout
    assert [line for line in lines if line[0] in ("push", "pop", "mark")] == [
        ["push", "downstream", "outer", "ff00ff00", "-"],
        ["push", "downstream", "inner", "-", "-"],
        ["mark", "downstream", "tick", "-", "-"],
        ["pop", "downstream"], ["pop", "downstream"]]


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


# ---- an editable install ------------------------------------------------------

_EDITABLE_CHILD = r'''
import os, site, sys
MODE, SITE, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
# What `pip install -e` leaves in site-packages: a .pth that installs
# setuptools' import hook for "streams", and no sys.path entry for the
# checkout.  Where streams is also installed normally (CI tests the
# installed wheel), the hook goes first, as if it were the only copy.
site.addsitedir(SITE)
hooks = [f for f in sys.meta_path if getattr(f, "__module__", "").startswith("__editable__")]
assert hooks, sys.meta_path
sys.meta_path.remove(hooks[0])
sys.meta_path.insert(0, hooks[0])
import streams
assert streams.__file__ == os.path.join(ROOT, "src", "streams", "__init__.py"), streams.__file__
from Cython.Build import cythonize
from setuptools import Extension, setup
ext = Extension("cimport_ext", ["cimport_ext.pyx"], include_dirs=[streams.get_include()])
if MODE == "cython_only":
    # Without include_path, as a setup.py written before get_cython_include.
    on_path = [p for p in sys.path if os.path.isfile(os.path.join(p, "streams", "__init__.pxd"))]
    try:
        cythonize([ext], compiler_directives={"language_level": 3}, quiet=True)
    except Exception as exc:
        print("FAILED", type(exc).__name__, on_path)
    else:
        print("BUILT", on_path)
    sys.exit(0)
sys.argv = ["setup.py", "build_ext", "--inplace"]
setup(ext_modules=cythonize([ext], include_path=[streams.get_cython_include()],
                            compiler_directives={"language_level": 3}, quiet=True))
import cimport_ext
assert cimport_ext.handle_of(streams.Stream.legacy) == 1
assert cimport_ext.handle_of(streams.Stream.null) == 0
print("IMPORTED", cimport_ext.__file__)
'''


def test_cimport_against_an_editable_install(tmp_path):
    # `pip install -e .` (setuptools' default editable mode) reaches the
    # package through an import hook, which Cython does not ask: `cimport
    # streams` then fails with "'streams.pxd' not found".  With
    # include_path=[streams.get_cython_include()] it builds.  The editable
    # install is set up as pip does it (setuptools' own finder module and
    # .pth), around a folder linking to the streams under test, so that no
    # build of streams itself is needed.
    editable = pytest.importorskip("setuptools.command.editable_wheel")
    template = getattr(editable, "_finder_template", None)
    if template is None:
        pytest.skip("this setuptools has no _finder_template to make the editable hook with")
    root = tmp_path / "checkout"
    root.mkdir()
    package = os.path.dirname(os.path.abspath(streams.__file__))
    (root / "src").mkdir()
    os.symlink(package, root / "src" / "streams")     # a src layout
    headers = os.path.join(os.path.dirname(os.path.dirname(package)), "include")
    if not os.path.isdir(os.path.join(package, "include")) and os.path.isdir(headers):
        os.symlink(headers, root / "include")   # a checkout's headers (streams.get_include())
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    name = "__editable___cuda_streams_0_1_0_finder"
    (site_dir / f"{name}.py").write_text(template(name, {"streams": str(root / "src" / "streams")},
                                                     {}))
    (site_dir / "__editable__.cuda_streams-0.1.0.pth").write_text(
        f"import {name}; {name}.install()\n")
    build = tmp_path / "build"
    build.mkdir()
    shutil.copy(os.path.join(HERE, "cython_ext", "cimport_ext.pyx"), build)
    (build / "child.py").write_text(_EDITABLE_CHILD)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CUDA_HOME", "CUDA_PATH", "CPATH", "C_INCLUDE_PATH")}

    def child(mode):
        result = subprocess.run([sys.executable, "child.py", mode, str(site_dir), str(root)],
                                cwd=build, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout

    before = child("cython_only")
    if "[]" in before:
        # No other copy of streams on sys.path: Cython cannot find the .pxd
        # files without include_path (where CI's installed wheel is on
        # sys.path, Cython finds that one instead, and this part says nothing).
        assert "FAILED CompileError" in before, before
    assert "IMPORTED" in child("build")
