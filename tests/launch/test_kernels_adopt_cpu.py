"""Kernel.from_handle, Module.from_source and the cleanup warnings without a
GPU: argument checks, refusals of uninitialised objects, NVRTC's loading and
compilation (NVRTC needs no GPU when the architecture is given), and the
reporting of failed releases (streams.CudaWarning)."""
import ctypes
import gc
import os
import warnings

import pytest

import streams
import streams.testing
from streams import CompileError, CudaWarning, Kernel, Module
from streams import _cudart, _launch

from _support import ROOT, run_python


# ---- Kernel.from_handle: what a handle may be ---------------------------------------------------

@pytest.mark.parametrize("handle, error, message", [
    (0, ValueError, "handle is NULL"),
    (ctypes.c_void_p(None), ValueError, "handle is NULL"),
    (-1, ValueError, "handle=-1 does not fit in a pointer"),
    (-(2**70), ValueError, "does not fit in a pointer"),
    (2**64, ValueError, "does not fit in a pointer"),
    (2**80, ValueError, "does not fit in a pointer"),
    (0x10, ValueError, "cannot be a CUDA kernel or function handle"),
    (0x10001, ValueError, "cannot be a CUDA kernel or function handle"),   # unaligned
    (2**64 - 8, ValueError, "cannot be a CUDA kernel or function handle"),
    ("0x7f0000001000", TypeError, "handle must be an int handle"),
    (1.0, TypeError, "handle must be an int handle"),
    (True, TypeError, "handle must be an int handle"),
    (None, TypeError, "handle must be an int handle"),
    (object(), TypeError, "handle must be an int handle"),
])
def test_from_handle_refuses_what_cannot_be_a_handle(handle, error, message):
    with pytest.raises(error, match=message):
        Kernel.from_handle(handle, kind="function")


class _IntHandle:
    """A cuda-bindings-like object: int() gives the handle."""

    def __init__(self, value):
        self.value_ = value

    def __int__(self):
        return self.value_


class CUfunction(_IntHandle):
    pass


class CUkernel(_IntHandle):
    pass


def test_an_object_with_int_is_read_like_an_int():
    with pytest.raises(ValueError, match="handle is NULL"):
        Kernel.from_handle(_IntHandle(0), kind="kernel")
    with pytest.raises(ValueError, match="cannot be a CUDA kernel"):
        Kernel.from_handle(_IntHandle(0x11), kind="kernel")


@pytest.mark.parametrize("kind", ["x", "CUfunction", 1, b"kernel"])
def test_kind_must_be_kernel_or_function(kind):
    with pytest.raises(ValueError, match="kind must be 'kernel', 'function' or None"):
        Kernel.from_handle(0x7F0000001000, kind=kind)


@pytest.mark.parametrize("handle", [0x7F0000001000, ctypes.c_void_p(0x7F0000001000),
                                    _IntHandle(0x7F0000001000)])
def test_a_handle_that_does_not_say_its_kind_needs_kind(handle):
    with pytest.raises(ValueError, match="kind= is needed"):
        Kernel.from_handle(handle)


def test_a_cuda_bindings_type_says_its_kind():
    assert _launch._handle_kind_for_tests(CUfunction(0x7F0000001000)) == "function"
    assert _launch._handle_kind_for_tests(CUkernel(0x7F0000001000)) == "kernel"


@pytest.mark.parametrize("signature, error, message", [
    ("int99", ValueError, r"signature\[0\]: unknown C type 'int99'"),
    (("pointer", 4), ValueError, r"signature\[1\]: unknown C type 4"),
    (5, TypeError, "signature must be a sequence of C type names"),
    (("int32",) * 65, ValueError, "signature has more than 64 parameters"),
])
def test_from_handle_checks_the_signature_first(signature, error, message):
    # Before any CUDA call: no GPU needed to see it.
    with pytest.raises(error, match=message):
        Kernel.from_handle(0x7F0000001000, signature=signature, kind="kernel")


def test_an_uninitialised_kernel_refuses_everything():
    k = Kernel.__new__(Kernel)
    for call in (lambda: k.prepare(1, 1), lambda: k.num_regs, lambda: k.max_threads_per_block,
                 lambda: setattr(k, "max_dynamic_shared_size_bytes", 0)):
        with pytest.raises(ValueError, match="never initialised"):
            call()
    assert k.owner is None and k.kind is None and k.module is None
    with pytest.raises(TypeError, match="Kernel.from_handle"):
        Kernel()


# ---- Module.from_source --------------------------------------------------------------------------

TEMPLATE_SOURCE = r"""
template <typename T>
__global__ void add(T* out, T value, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += value;
}
"""


def _nvrtc_or_skip():
    try:
        return _launch.nvrtc_info()
    except RuntimeError as exc:
        pytest.skip(f"no NVRTC here ({exc})")


def test_compile_with_name_expressions_gives_lowered_names():
    _nvrtc_or_skip()
    image, is_ptx, lowered = _launch._compile(TEMPLATE_SOURCE, (), ("add<float>", "add<int>"),
                                              "sm_80")
    assert image.startswith(b"\x7fELF") and not is_ptx
    assert set(lowered) == {"add<float>", "add<int>"}
    assert lowered["add<float>"] != lowered["add<int>"]
    assert all(name.startswith("_Z") for name in lowered.values())


def test_compile_to_ptx_for_a_virtual_arch():
    _nvrtc_or_skip()
    image, is_ptx, _ = _launch._compile(TEMPLATE_SOURCE, ("-std=c++17",), ("add<double>",),
                                        "compute_80")
    assert is_ptx and image.endswith(b"\0") and b".entry" in image


def test_a_second_compile_comes_from_the_cache():
    _nvrtc_or_skip()
    source = TEMPLATE_SOURCE + "\n// cache test\n"
    before = Module.source_cache_info()
    first = _launch._compile(source, ("-DX=1",), ("add<float>",), "sm_80")
    middle = Module.source_cache_info()
    second = _launch._compile(source, ("-DX=1",), ("add<float>",), "sm_80")
    after = Module.source_cache_info()
    assert middle["misses"] == before["misses"] + 1
    assert after["hits"] == middle["hits"] + 1 and after["misses"] == middle["misses"]
    assert second[0] is first[0]
    # Another option, arch or expression list is another compilation.
    _launch._compile(source, ("-DX=2",), ("add<float>",), "sm_80")
    assert Module.source_cache_info()["misses"] == after["misses"] + 1
    Module.clear_source_cache()
    assert Module.source_cache_info()["entries"] == 0


def test_a_syntax_error_raises_compile_error_with_the_log():
    _nvrtc_or_skip()
    with pytest.raises(CompileError) as info:
        _launch._compile("__global__ void broken(int* p) { p[0] = ; }", (), (), "sm_80")
    assert isinstance(info.value, RuntimeError)
    assert "expected an expression" in info.value.log
    assert "streams_source.cu(1)" in info.value.log
    assert info.value.log in str(info.value)


def test_an_unknown_name_expression_is_refused():
    _nvrtc_or_skip()
    with pytest.raises((ValueError, CompileError)):
        _launch._compile(TEMPLATE_SOURCE, (), ("nothing<float>",), "sm_80")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"source": 5}, TypeError, "source must be a str"),
    ({"source": "a\0b"}, ValueError, "NUL"),
    ({"options": "-DX=1"}, TypeError, "options must be a sequence of str"),
    ({"options": (1,)}, TypeError, r"options\[0\] must be a str"),
    ({"options": ("-arch=sm_80",)}, ValueError, "arch="),
    ({"name_expressions": "add<int>"}, TypeError, "name_expressions must be a sequence"),
    ({"arch": 90}, TypeError, "arch must be a str"),
    ({"arch": "sm90"}, ValueError, "arch must look like"),
    ({"arch": "sm_x"}, ValueError, "arch must look like"),
])
def test_from_source_arguments(kwargs, error, message):
    args = {"source": TEMPLATE_SOURCE}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        Module.from_source(**args)


def test_missing_nvrtc_is_a_clear_error():
    # A child: NVRTC, once loaded, stays loaded in a process.
    proc = run_python(
        "import streams\n"
        "try:\n"
        "    streams.Module.from_source('__global__ void f() {}', arch='sm_80')\n"
        "except RuntimeError as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n",
        timeout=60, extra_env={"STREAMS_NVRTC": "/nonexistent/libnvrtc.so.13"})
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED RuntimeError" in proc.stdout
    assert "/nonexistent/libnvrtc.so.13 (no such file)" in proc.stdout
    assert "STREAMS_NVRTC" in proc.stdout


def test_missing_nvrtc_names_an_install_command_that_works():
    # No "cuda-streams[nvrtc]": that distribution is not published.  NVIDIA's
    # wheel of the build's CUDA major is, and it is what the nvrtc extra of a
    # source install asks for (pyproject.toml; setup.py's for CUDA 12).
    major = streams.runtime_version() // 1000
    wheel = _launch._nvrtc_wheel()
    assert wheel == ('"nvidia-cuda-nvrtc-cu12==12.*"' if major == 12
                     else f'"nvidia-cuda-nvrtc=={major}.*"')
    pyproject = os.path.join(ROOT, "pyproject.toml")
    tomllib = pytest.importorskip("tomllib")
    if major == 13 and os.path.isfile(pyproject):
        with open(pyproject, "rb") as f:
            extra = tomllib.load(f)["project"]["optional-dependencies"]["nvrtc"]
        assert extra == [wheel.strip('"')]


def test_nvrtc_is_not_loaded_at_import():
    proc = run_python(
        "import sys, streams\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('LOADED' if 'libnvrtc' in maps else 'NOT LOADED')\n", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "NOT LOADED" in proc.stdout


def test_nvrtc_candidates_follow_the_build():
    env = os.environ.pop("STREAMS_NVRTC", None)
    try:
        found = _launch._nvrtc_candidates()
    finally:
        if env is not None:
            os.environ["STREAMS_NVRTC"] = env
    major = streams.runtime_version() // 1000
    first_wheel = next(p for p in found if "/nvidia/" in p or "libnvrtc.so." in p)
    assert first_wheel.endswith(f"libnvrtc.so.{major}")
    assert any(p.startswith("/usr/local/cuda/lib64/") for p in found)
    assert found[-1] == "libnvrtc.so"


# ---- failed releases: streams.CudaWarning -------------------------------------------------------

def test_cuda_warning_is_exported_and_a_runtime_warning():
    assert issubclass(CudaWarning, RuntimeWarning)
    assert streams.CudaWarning is _cudart.CudaWarning
    assert "CudaWarning" in streams.__all__ and "CompileError" in streams.__all__


def test_a_queued_release_failure_is_warned_with_the_object_and_the_error():
    _cudart._queue_cleanup_failure("event", 0x7F00DEAD0000, 400)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _cudart._flush_cleanup_warnings()
    assert len(got) == 1 and got[0].category is CudaWarning
    text = str(got[0].message)
    assert "event 0x7f00dead0000" in text and "cudaEventDestroy" in text
    assert "cudaErrorInvalidResourceHandle" in text
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        _cudart._flush_cleanup_warnings()
    assert again == []      # reported once


@pytest.mark.parametrize("kind, names", [
    ("stream", "stream 0x"), ("graph", "graph 0x"), ("graph_exec", "graph executable 0x"),
    ("host_memory", "pinned host memory 0x"), ("managed_memory", "managed memory 0x"),
    ("mem_pool", "memory pool 0x"), ("module", "module 0x"), ("device_memory", "device memory 0x"),
    ("device_sync", "adopted kernel's owner"), ("green_context", "green context 0x"),
    ("marker_event", "marker event 0x10000 failed (cudaEventDestroy)"),
])
def test_each_kind_of_release_is_named(kind, names):
    _cudart._queue_cleanup_failure(kind, 0x10000, 999)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _cudart._flush_cleanup_warnings()
    assert [w.category for w in got] == [CudaWarning]
    assert names in str(got[0].message)


def test_every_kind_of_release_has_its_words():
    # A handle kind added later must be named in warnings, not mislabelled.
    assert sorted(_cudart._CLEANUP_WHAT) == list(range(len(_cudart._CLEANUP_WHAT)))
    assert set(_cudart._CLEANUP_KIND_NAMES.values()) == set(_cudart._CLEANUP_WHAT)


def test_a_warning_turned_into_an_error_goes_to_unraisablehook(monkeypatch):
    seen = []
    monkeypatch.setattr("sys.unraisablehook", seen.append)
    _cudart._queue_cleanup_failure("stream", 0x20000, 400)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CudaWarning)
        _cudart._flush_cleanup_warnings()      # must not raise
    assert len(seen) == 1 and isinstance(seen[0].exc_value, CudaWarning)
    assert "stream 0x20000" in str(seen[0].exc_value)


def test_an_exception_in_flight_survives_a_flush():
    # A __dealloc__ during unwinding flushes with an exception set.
    class Boom(Exception):
        pass

    class Releases:
        def __del__(self):
            _cudart._queue_cleanup_failure("event", 0x30000, 400)
            _cudart._flush_cleanup_warnings()

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with pytest.raises(Boom):
            try:
                r = Releases()
                raise Boom()
            finally:
                del r
                gc.collect()
    assert any(w.category is CudaWarning for w in got)


def test_inject_cleanup_failure_arguments():
    assert set(streams.testing.CLEANUP_KINDS) == set(_cudart._cleanup_kind_names())
    with pytest.raises(ValueError, match="kind must be one of"):
        streams.testing.inject_cleanup_failure("texture", 400)
    with pytest.raises(TypeError, match="error must be an int"):
        streams.testing.inject_cleanup_failure("event", "bad")
    with pytest.raises(ValueError, match="error must be a positive"):
        streams.testing.inject_cleanup_failure("event", 0)
    with pytest.raises(ValueError, match="count must be >= 0"):
        streams.testing.inject_cleanup_failure("event", 400, -1)
    streams.testing.inject_cleanup_failure("event", streams.CudaError(400), 0)   # cancels


def test_a_failure_queued_before_exit_is_warned_at_exit():
    # Queued as a release on a thread without the GIL would leave it; the
    # atexit hook reports it while warnings can still be shown.
    proc = run_python(
        "import streams\n"
        "streams._cudart._queue_cleanup_failure('graph', 0x40000, 400)\n", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "CudaWarning" in proc.stderr and "graph 0x40000" in proc.stderr
