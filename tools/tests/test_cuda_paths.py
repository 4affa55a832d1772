"""The CUDA search that setup.py and the benchmark's C floor share
(tools/build/cuda_paths.py), on fake toolkits and wheel layouts: no CUDA needed."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "build"


@pytest.fixture
def cuda_paths(monkeypatch):
    for var in ("CUDA_HOME", "CUDA_PATH", "STREAMS_CUDA_MAJOR"):
        monkeypatch.delenv(var, raising=False)
    spec = importlib.util.spec_from_file_location("cuda_paths_under_test",
                                                  TOOLS / "cuda_paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_cuda(root, version=13000, crt=True, lib="lib64"):
    """A folder laid out like a CUDA toolkit (or, with lib="lib", a wheel)."""
    inc = root / "include"
    inc.mkdir(parents=True)
    (inc / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION  {version}\n")
    if crt:
        (inc / "crt").mkdir()
        (inc / "crt" / "host_defines.h").write_text("")
    if lib:
        (root / lib).mkdir()
        (root / lib / "libcudart_static.a").write_text("")
    return root


def test_cuda_home_is_used(cuda_paths, tmp_path, monkeypatch):
    root = fake_cuda(tmp_path / "cuda")
    monkeypatch.setenv("CUDA_HOME", str(root))
    incs, lib = cuda_paths.find_cuda()
    assert incs == [str(root / "include")]
    assert lib == str(root / "lib64" / "libcudart_static.a")


def test_explicit_cuda_home_is_never_second_guessed(cuda_paths, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(cuda_paths.CudaNotFound) as exc:
        cuda_paths.find_cuda("13")
    text = str(exc.value)
    assert text.startswith("cannot find the CUDA runtime headers and static library.\n")
    assert ("  $CUDA_HOME: cuda_runtime_api.h missing, crt/host_defines.h missing, "
            "libcudart_static.a missing") in text
    assert "/usr/local/cuda" not in text
    assert "`pip install nvidia-cuda-runtime==13.* nvidia-cuda-crt==13.*`" in text


def test_headers_of_another_major_are_refused(cuda_paths, tmp_path, monkeypatch):
    root = fake_cuda(tmp_path / "cuda12", version=12080)
    monkeypatch.setenv("CUDA_PATH", str(root))
    with pytest.raises(cuda_paths.CudaNotFound,
                       match=r"\$CUDA_PATH has CUDA 12 headers, but STREAMS_CUDA_MAJOR is 13; "
                             r"point CUDA_HOME at a CUDA 13 toolkit or set STREAMS_CUDA_MAJOR=12"):
        cuda_paths.find_cuda()


def test_streams_cuda_major_is_honoured(cuda_paths, tmp_path, monkeypatch):
    root = fake_cuda(tmp_path / "cuda12", version=12080)
    monkeypatch.setenv("CUDA_HOME", str(root))
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "12")
    assert cuda_paths.find_cuda()[1] == str(root / "lib64" / "libcudart_static.a")
    # An explicit major wins over the variable.
    with pytest.raises(cuda_paths.CudaNotFound, match="STREAMS_CUDA_MAJOR is 13"):
        cuda_paths.find_cuda("13")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(cuda_paths.CudaNotFound, match=r"nvidia-cuda-nvcc-cu12==12\.\*"):
        cuda_paths.find_cuda()


def test_unknown_major_is_refused(cuda_paths, monkeypatch):
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "11")
    with pytest.raises(cuda_paths.CudaNotFound, match="must be 12 or 13, not '11'"):
        cuda_paths.find_cuda()


@pytest.mark.parametrize("major, runtime, crt", [("13", "cu13", "cu13"),
                                                 ("12", "cuda_runtime", "cuda_nvcc")])
def test_wheels_on_sys_path(cuda_paths, tmp_path, monkeypatch, major, runtime, crt):
    """The runtime wheel without crt/, which another wheel under another
    sys.path entry provides (nvidia-cuda-crt, or CUDA 12's nvcc wheel)."""
    site_a, site_b = tmp_path / "a", tmp_path / "b"
    rt = fake_cuda(site_a / "nvidia" / runtime, version=int(major) * 1000, crt=False, lib="lib")
    crt_root = fake_cuda(site_b / "nvidia" / crt, version=int(major) * 1000, lib=None)
    monkeypatch.setattr(sys, "path", [str(site_a), str(site_b)])
    incs, lib = cuda_paths.find_cuda(major)
    assert incs == [str(rt / "include"), str(crt_root / "include")]
    assert lib == str(rt / "lib" / "libcudart_static.a")


def test_runtime_wheel_without_any_crt_is_passed_over(cuda_paths, tmp_path, monkeypatch):
    site = tmp_path / "site"
    fake_cuda(site / "nvidia" / "cu13", crt=False, lib="lib")
    monkeypatch.setattr(sys, "path", [str(site)])
    try:
        incs, _ = cuda_paths.find_cuda("13")
    except cuda_paths.CudaNotFound as exc:
        text = str(exc)
    else:
        # /usr/local/cuda, the last place tried, has a toolkit here.
        assert incs == ["/usr/local/cuda/include"]
        return
    assert (f"  the nvidia-cuda-runtime wheel ({site / 'nvidia' / 'cu13'}): cuda_runtime_api.h "
            "found, crt/host_defines.h missing, libcudart_static.a found") in text
    assert "  /usr/local/cuda: " in text


def test_setup_py_stops_with_the_search_result(tmp_path):
    """setup.py reports a failed search in its own words, prefixed `streams: `."""
    setuptools = pytest.importorskip("setuptools")
    pytest.importorskip("Cython")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setup.py needs setuptools >= 77 (the license expression)")
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "nowhere")}
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib",
                           str(tmp_path / "lib"), "--build-temp", str(tmp_path / "tmp")],
                          cwd=TOOLS.parents[1], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("streams: cannot find the CUDA runtime headers and static library.\n"
            "Looked for cuda_runtime_api.h, crt/host_defines.h and libcudart_static.a in:\n"
            "  $CUDA_HOME: cuda_runtime_api.h missing") in proc.stderr
