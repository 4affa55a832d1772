"""The build's choice of CUDA major and distribution (tools/build/streams_build.py):
no compiler or GPU involved, only the rules that decide what gets built."""
import importlib.util

import pytest

from _support import ROOT

TOOLS = ROOT / "tools" / "build" / "streams_build.py"
if not TOOLS.is_file():
    pytest.skip("tools/build/streams_build.py is not in this checkout", allow_module_level=True)
pytest.importorskip("setuptools.build_meta")


@pytest.fixture
def build_config(monkeypatch):
    monkeypatch.delenv("STREAMS_CUDA_MAJOR", raising=False)
    spec = importlib.util.spec_from_file_location("streams_build_under_test", TOOLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_is_cuda_13(build_config, tmp_path):
    assert build_config.cuda_major(str(tmp_path)) == "13"
    assert build_config.DISTRIBUTION["13"] == "cuda-streams"


def test_variable_selects_cuda_12(build_config, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "12")
    assert build_config.cuda_major(str(tmp_path)) == "12"
    assert build_config.DISTRIBUTION["12"] == "cuda-streams-cu12"


@pytest.mark.parametrize("value", ["11", "13.0", "cu12", "twelve"])
def test_variable_out_of_range_is_refused_by_name(build_config, tmp_path, monkeypatch, value):
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", value)
    with pytest.raises(build_config.CudaMajorError, match="STREAMS_CUDA_MAJOR must be 12 or 13"):
        build_config.cuda_major(str(tmp_path))


def test_sdist_marker_wins_without_a_variable(build_config, tmp_path):
    (tmp_path / "CUDA_MAJOR").write_text("12\n")
    assert build_config.cuda_major(str(tmp_path)) == "12"


def test_marker_and_matching_variable_agree(build_config, tmp_path, monkeypatch):
    (tmp_path / "CUDA_MAJOR").write_text("12\n")
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "12")
    assert build_config.cuda_major(str(tmp_path)) == "12"


def test_variable_contradicting_the_sdist_is_refused(build_config, tmp_path, monkeypatch):
    (tmp_path / "CUDA_MAJOR").write_text("12\n")
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "13")
    with pytest.raises(build_config.CudaMajorError,
                       match=r"this source is cuda-streams-cu12 \(CUDA 12\).*cuda-streams"):
        build_config.cuda_major(str(tmp_path))


def test_corrupt_marker_is_refused(build_config, tmp_path):
    (tmp_path / "CUDA_MAJOR").write_text("14\n")
    with pytest.raises(build_config.CudaMajorError, match="holds '14'"):
        build_config.cuda_major(str(tmp_path))


def test_cuda_12_build_asks_for_the_cuda_12_wheels(build_config, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)   # no marker here: the variable decides
    base = set(build_config._setuptools.get_requires_for_build_wheel())
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "12")
    extra = set(build_config.get_requires_for_build_wheel()) - base
    assert extra == {"nvidia-cuda-runtime-cu12==12.*", "nvidia-cuda-nvcc-cu12==12.*",
                     "nvidia-nvtx-cu12==12.*"}
    extra = set(build_config.get_requires_for_build_editable()) - base
    assert extra == {"nvidia-cuda-runtime-cu12==12.*", "nvidia-cuda-nvcc-cu12==12.*",
                     "nvidia-nvtx-cu12==12.*"}
    monkeypatch.setenv("STREAMS_CUDA_MAJOR", "13")
    assert set(build_config.get_requires_for_build_wheel()) == base


def test_pyproject_points_at_this_backend():
    tomllib = pytest.importorskip("tomllib")
    with open(TOOLS.parents[2] / "pyproject.toml", "rb") as f:
        system = tomllib.load(f)["build-system"]
    assert system["build-backend"] == "streams_build"
    assert system["backend-path"] == ["tools/build"]
    # The CUDA 13 inputs stay declared statically.
    assert "nvidia-cuda-runtime==13.*" in system["requires"]
    assert "nvidia-cuda-crt==13.*" in system["requires"]
    assert "nvidia-nvtx==13.*" in system["requires"]


def _check_wheel():
    spec = importlib.util.spec_from_file_location("check_wheel_under_test",
                                                  TOOLS.parent / "check_wheel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, allowed", [
    ("libc.so.6", True), ("libm.so.6", True), ("ld-linux-x86-64.so.2", True),
    ("ld-linux-aarch64.so.1", True), ("libcudart.so.13", False), ("libcuda.so.1", False),
    ("libstdc++.so.6", False)])
def test_wheel_check_allows_only_libc_dependencies(name, allowed):
    assert bool(_check_wheel().ALLOWED_NEEDED.match(name)) is allowed


def test_wheel_check_refuses_stray_and_missing_files(tmp_path, capsys):
    import zipfile
    check = _check_wheel()
    wheel = tmp_path / "cuda_streams-0.1.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in check.REQUIRED:
            z.writestr(name, "")
        z.writestr("streams/_stream.c", "")
        z.writestr("tools/build/streams_build.py", "")
    assert check.main(str(wheel)) == 1
    out = capsys.readouterr().out
    assert "streams/_stream.c" in out and "tools/build/streams_build.py" in out
    assert "expected the compiled modules" in out


@pytest.mark.parametrize("name", ["streams/bench.py", "benchmarks/__init__.py",
                                  "benchmarks/c_floor/bench.c"])
def test_wheel_check_refuses_the_benchmark_harness(tmp_path, capsys, name):
    import zipfile
    check = _check_wheel()
    wheel = tmp_path / "cuda_streams-0.1.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for required in check.REQUIRED:
            z.writestr(required, "")
        z.writestr(name, "")
    assert check.main(str(wheel)) == 1
    out = capsys.readouterr().out
    assert f"the benchmark harness is not part of the package: ['{name}']" in out


@pytest.mark.parametrize("value, compile_args, link_args", [
    (None, ["-g0"], ["-Wl,--strip-debug"]), ("", ["-g0"], ["-Wl,--strip-debug"]),
    ("0", ["-g0"], ["-Wl,--strip-debug"]), ("1", ["-g"], [])])
def test_debug_information_is_dropped_unless_asked_for(build_config, value, compile_args,
                                                       link_args):
    environ = {} if value is None else {"STREAMS_DEBUG_INFO": value}
    assert build_config.debug_info_flags(environ) == (compile_args, link_args)


@pytest.mark.parametrize("value", ["yes", "2", "true"])
def test_debug_information_variable_out_of_range_is_refused_by_name(build_config, value):
    with pytest.raises(ValueError, match="STREAMS_DEBUG_INFO must be 0 or 1"):
        build_config.debug_info_flags({"STREAMS_DEBUG_INFO": value})


def _fake_wheel(path, check, extra=(), metadata=None):
    """A wheel with every required file (empty) and ``extra`` (name, bytes)
    members; ``metadata``: the dist-info's METADATA text (None: no dist-info)."""
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        for name in check.REQUIRED:
            z.writestr(name, "")
        for name, data in extra:
            z.writestr(name, data)
        if metadata is not None:
            z.writestr("cuda_streams-0.1.0.dist-info/METADATA", metadata)
    return str(path)


GOOD_METADATA = ("Metadata-Version: 2.4\nName: cuda-streams\nVersion: 0.1.0\n"
                 "License-Expression: Apache-2.0\nLicense-File: LICENSE\n\nREADME\n")


def test_wheel_check_wants_the_license_file_and_its_metadata(tmp_path, capsys):
    check = _check_wheel()
    licence = [("cuda_streams-0.1.0.dist-info/licenses/LICENSE", "Apache License")]
    good = _fake_wheel(tmp_path / "good.whl", check, licence, GOOD_METADATA)
    assert check.license_problems(*_names_and_reader(good)) == []
    no_file = _fake_wheel(tmp_path / "no-file.whl", check, (), GOOD_METADATA)
    assert check.license_problems(*_names_and_reader(no_file)) == [
        "no LICENSE file in cuda_streams-0.1.0.dist-info"]
    unnamed = _fake_wheel(tmp_path / "unnamed.whl", check, licence,
                          GOOD_METADATA.replace("License-File: LICENSE\n", ""))
    assert check.license_problems(*_names_and_reader(unnamed)) == [
        "METADATA names no License-File: LICENSE"]
    assert check.main(unnamed) == 1
    assert "METADATA names no License-File: LICENSE" in capsys.readouterr().out


def _names_and_reader(path):
    import zipfile
    z = zipfile.ZipFile(path)
    return z.namelist(), z.read


@pytest.mark.parametrize("flag, kept", [("-g", True), ("-g0", False)])
def test_wheel_check_refuses_debug_information(tmp_path, flag, kept):
    import shutil
    import subprocess
    if shutil.which("cc") is None or shutil.which("readelf") is None:
        pytest.skip("needs a C compiler and readelf")
    check = _check_wheel()
    src = tmp_path / "m.c"
    src.write_text("int streams_probe(int x) { return x + 1; }\n")
    lib = tmp_path / "m.so"
    subprocess.run(["cc", flag, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    member = "streams/_cudart.cpython-311-x86_64-linux-gnu.so"
    wheel = _fake_wheel(tmp_path / "w.whl", check, [(member, lib.read_bytes())])
    found = check.debug_sections(wheel, member)
    assert bool(found) is kept, found
    if kept:
        assert ".debug_info" in found


def test_metadata_names_the_license_the_urls_and_the_status():
    tomllib = pytest.importorskip("tomllib")
    root = TOOLS.parents[2]
    with open(root / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (root / "LICENSE").read_text()[:200]
    assert "Version 2.0" in (root / "LICENSE").read_text()[:200]
    assert set(project["urls"]) == {"Source", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in project["urls"].values())
    assert project["authors"]
    status = [c for c in project["classifiers"] if c.startswith("Development Status :: ")]
    assert len(status) == 1, status
