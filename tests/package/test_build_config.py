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


def _setup_extensions():
    """{extension name: its depends}, as setup.py declares them (read in a
    child: setup.py puts tools/build on sys.path)."""
    import json
    import subprocess
    import sys
    code = ("import json, sys\nfrom setuptools import distutils\n"
            "from distutils.core import run_setup\n"
            "dist = run_setup(sys.argv[1], stop_after='init')\n"
            "print(json.dumps({e.name: e.depends for e in dist.ext_modules}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "setup.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _compiled_headers(c_file):
    """The checkout's headers that the C compiler reads for ``c_file``: its
    ``#include "..."`` lines and theirs, looked up as the compiler does
    (beside the including file, then -I include/ and src/)."""
    import re
    include = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
    dirs = [ROOT / "include", ROOT / "src"]
    found, todo = set(), [(name, c_file.parent) for name in include.findall(c_file.read_text())]
    while todo:
        name, beside = todo.pop()
        path = next((d / name for d in [beside, *dirs] if (d / name).is_file()), None)
        if path is None or path.resolve() in found:
            continue
        found.add(path.resolve())
        todo += [(n, path.parent) for n in include.findall(path.read_text())]
    return sorted(str(p.relative_to(ROOT)) for p in found)


def test_every_extension_depends_on_the_headers_it_compiles():
    """A build in place recompiles a module whose header changed only where
    the header is in its depends: each module's are exactly the checkout's
    headers its generated C includes (the in-place build's .c files)."""
    depends = _setup_extensions()
    assert "src/floor.h" in depends["streams._cudart"]
    assert "src/cuda_versions.h" in depends["streams._cudart"]
    checked = 0
    for name, declared in depends.items():
        c_file = ROOT / "src" / "streams" / (name.split(".")[1] + ".c")
        if not c_file.is_file():
            continue
        assert declared == _compiled_headers(c_file), name
        checked += 1
    if not checked:
        pytest.skip("no generated C here (build in place first)")


def test_a_modules_headers_are_found_through_its_parts_and_cimports(build_config, tmp_path):
    """module_headers follows what Cython follows (included parts, the .pxd
    of cimported package modules) to the headers declared there, and then
    the C includes of those headers; other headers are not the checkout's."""
    pkg = tmp_path / "src" / "streams"
    (pkg / "_a").mkdir(parents=True)
    (tmp_path / "include" / "streams").mkdir(parents=True)
    (pkg / "_a.pyx").write_text('from streams._b cimport x\ninclude "_a/part.pxi"\n'
                                'cdef extern from "Python.h":\n    pass\n')
    (pkg / "_a" / "part.pxi").write_text('cdef extern from "one.h" nogil:\n    pass\n')
    (pkg / "_b.pxd").write_text('cimport streams._c\ncdef extern from "streams/pub.h":\n'
                                '    int x\n')
    (pkg / "_c.pxd").write_text('cdef extern from "sub/two.h":\n    pass\n')
    (tmp_path / "src" / "one.h").write_text('#include "streams/pub.h"\n#include <stdio.h>\n')
    (tmp_path / "src" / "sub").mkdir()
    (tmp_path / "src" / "sub" / "two.h").write_text('#include "three.h"\n')
    (tmp_path / "src" / "sub" / "three.h").write_text("\n")
    (tmp_path / "src" / "unused.h").write_text("\n")
    (tmp_path / "include" / "streams" / "pub.h").write_text('#include "cuda_runtime_api.h"\n')
    assert build_config.module_headers(str(tmp_path), "_a") == [
        "include/streams/pub.h", "src/one.h", "src/sub/three.h", "src/sub/two.h"]
    assert build_config.module_headers(str(tmp_path), "_c") == [
        "src/sub/three.h", "src/sub/two.h"]
