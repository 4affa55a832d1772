"""Check a built wheel: what cimporters and type checkers need is inside,
and no build leftovers are."""
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

# One extension per module, each with its declarations and stubs; the
# call layer alone holds the CUDA runtime.
MODULES = ["_cudart", "_handle", "_args", "_device", "_foreign", "_stream", "_hostcall",
           "_memory", "_launch", "_graph", "_green"]
CALL_LAYER = "_cudart"
REQUIRED = (
    ["streams/__init__.pxd", "streams/cudart.pxd", "streams/_platform.pxd",
     "streams/__init__.pyi", "streams/py.typed", "streams/kernels/builtin.ptx",
     "streams/kernels/conditional.ptx",
     "streams/include/streams/streams.h", "streams/include/streams/handle.h",
     "streams/include/streams/pool.h",
     "streams/include/streams/clock.h", "streams/compat/__init__.py"]
    + [f"streams/{m}.pxd" for m in MODULES] + [f"streams/{m}.pyi" for m in MODULES])
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


def main(path):
    names = zipfile.ZipFile(path).namelist()
    missing = [n for n in REQUIRED if n not in names]
    stray = [n for n in names if n.endswith(FORBIDDEN_SUFFIXES) or "/build/" in n]
    # Only the package and its metadata: the build backend (tools/) and the
    # sdist's CUDA_MAJOR marker stay out.
    stray += [n for n in names if not n.startswith("streams/")
              and not n.split("/", 1)[0].endswith(".dist-info")]
    built = {n.split("/")[1].split(".")[0]: n for n in names
             if n.startswith("streams/_") and n.count("/") == 1 and n.endswith(".so")}
    harness = [n for n in names if HARNESS.match(n)]
    headers = {n for n in names if n.endswith(".h")}
    problems = []
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
    if problems:
        print(f"{path}: " + "; ".join(problems))
        return 1
    print(f"{path}: {len(names)} files, contents OK")
    return 0


if __name__ == "__main__":
    sys.exit(max(main(p) for p in sys.argv[1:]))
