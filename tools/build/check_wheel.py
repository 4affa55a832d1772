"""Check a built wheel: what cimporters and type checkers need is inside,
and no build leftovers are."""
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

# One extension per module, each with its stubs and, where later modules
# cimport it, its declarations; the call layer alone holds the CUDA runtime.
MODULES = ["_cudart", "_nvtx", "_handle", "_args", "_device", "_foreign", "_stream", "_hostcall",
           "_asyncio", "_memory", "_launch", "_graph", "_green", "_semaphore", "_deadline"]
WITHOUT_PXD = {"_asyncio", "_deadline"}       # no module cimports them
CALL_LAYER = "_cudart"
REQUIRED = (
    ["streams/__init__.pxd", "streams/cudart.pxd", "streams/_platform.pxd",
     "streams/__init__.pyi", "streams/py.typed", "streams/kernels/builtin.ptx",
     "streams/kernels/conditional.ptx",
     "streams/include/streams/streams.h", "streams/include/streams/handle.h",
     "streams/include/streams/pool.h",
     "streams/include/streams/clock.h", "streams/compat/__init__.py"]
    + [f"streams/{m}.pxd" for m in MODULES if m not in WITHOUT_PXD]
    + [f"streams/{m}.pyi" for m in MODULES])
FORBIDDEN_SUFFIXES = (".c", ".o", ".pyx", ".pxi", ".html")
# The headers shipped: exactly the closure of streams/__init__.pxd (the
# private ones, src/, are built with the package, never shipped).
SHIPPED_HEADERS = {"streams/include/streams/streams.h", "streams/include/streams/handle.h",
                   "streams/include/streams/pool.h", "streams/include/streams/clock.h"}
# The benchmark harness runs from a source checkout (python -m benchmarks.run):
# neither it nor the module it used to be is part of the package.
HARNESS = re.compile(r"(streams/bench\.py|benchmarks/.*)$")
# cudart is linked statically: the extension may need the C library and the
# loader, nothing of CUDA (the driver, libcuda, is opened by cudart at run time).
ALLOWED_NEEDED = re.compile(r"(libc|libm|libdl|libpthread|librt|ld-linux[-\w]*)\.so(\.\d+)*$")


def needed_libraries(wheel, member):
    """DT_NEEDED of ``member`` (via readelf), or None where readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        path = zipfile.ZipFile(wheel).extract(member, scratch)
        out = subprocess.run([readelf, "-d", path], capture_output=True, text=True,
                             check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def debug_sections(wheel, member):
    """The DWARF sections of ``member`` (via readelf), or None where readelf
    is missing.  A wheel carries none: setup.py builds without debug
    information unless STREAMS_DEBUG_INFO=1 asks for it."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        path = zipfile.ZipFile(wheel).extract(member, scratch)
        out = subprocess.run([readelf, "-S", "-W", path], capture_output=True, text=True,
                             check=True).stdout
    return sorted(set(re.findall(r"\s(\.debug_\w+)\s", out)))


def license_problems(names, read):
    """What is wrong with the wheel's license: the LICENSE file must be in
    its .dist-info (metadata 2.4 puts it under licenses/) and METADATA must
    name it (License-File)."""
    info = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(info) != 1:
        return [f"expected one .dist-info folder, found {info}"]
    problems = []
    if not any(n.startswith(info[0] + "/") and n.rsplit("/", 1)[-1] == "LICENSE" for n in names):
        problems.append(f"no LICENSE file in {info[0]}")
    metadata = info[0] + "/METADATA"
    if metadata not in names:
        problems.append(f"no {metadata}")
    else:
        fields = read(metadata).decode("utf-8", "replace").split("\n\n", 1)[0].splitlines()
        if "License-File: LICENSE" not in fields:
            problems.append("METADATA names no License-File: LICENSE")
        if "License-Expression: Apache-2.0" not in fields:
            problems.append("METADATA says no License-Expression: Apache-2.0")
    return problems


def main(path):
    wheel = zipfile.ZipFile(path)
    names = wheel.namelist()
    missing = [n for n in REQUIRED if n not in names]
    stray = [n for n in names if n.endswith(FORBIDDEN_SUFFIXES) or "/build/" in n]
    # Only the package and its metadata: the build backend (tools/build/) and the
    # sdist's CUDA_MAJOR marker stay out.
    stray += [n for n in names if not n.startswith("streams/")
              and not n.split("/", 1)[0].endswith(".dist-info")]
    built = {n.split("/")[1].split(".")[0]: n for n in names
             if n.startswith("streams/_") and n.count("/") == 1 and n.endswith(".so")}
    harness = [n for n in names if HARNESS.match(n)]
    headers = {n for n in names if n.endswith(".h")}
    problems = license_problems(names, wheel.read)
    if missing:
        problems.append(f"missing: {missing}")
    if harness:
        problems.append(f"the benchmark harness is not part of the package: {harness}")
    if stray:
        problems.append(f"stray build files: {stray}")
    if headers != SHIPPED_HEADERS:
        problems.append(f"the headers shipped must be {sorted(SHIPPED_HEADERS)}, are "
                        f"{sorted(headers)}")
    if sorted(built) != sorted(MODULES):
        problems.append(f"expected the compiled modules {MODULES}, got {sorted(built)}")
    for name, member in sorted(built.items()):
        needed = needed_libraries(path, member)
        if needed is None:
            print(f"{path}: readelf not found, shared-library dependencies not checked")
            break
        foreign = [n for n in needed if not ALLOWED_NEEDED.match(n)]
        if foreign:
            problems.append(f"streams.{name} needs shared libraries beyond libc: {foreign}")
        debug = debug_sections(path, member)
        if debug:
            problems.append(f"streams.{name} carries debug information ({', '.join(debug)}): "
                            "wheels are built without it")
    if problems:
        print(f"{path}: " + "; ".join(problems))
        return 1
    print(f"{path}: {len(names)} files, contents OK")
    return 0


if __name__ == "__main__":
    sys.exit(max(main(p) for p in sys.argv[1:]))
