"""Check a built wheel: what cimporters and type checkers need is inside,
and no build leftovers are."""
import sys
import zipfile

REQUIRED = [
    "streams/__init__.pxd", "streams/_core.pxd", "streams/cudart.pxd",
    "streams/__init__.pyi", "streams/_core.pyi", "streams/py.typed",
    "streams/include/streams/streams.h", "streams/include/streams/shim.h",
    "streams/include/streams/compat.h", "streams/compat/__init__.py",
]
FORBIDDEN_SUFFIXES = (".c", ".o", ".pyx", ".pxi", ".html")


def main(path):
    names = zipfile.ZipFile(path).namelist()
    missing = [n for n in REQUIRED if n not in names]
    stray = [n for n in names if n.endswith(FORBIDDEN_SUFFIXES) or "/build/" in n]
    # Only the package and its metadata: the build backend (tools/) and the
    # sdist's CUDA_MAJOR marker stay out.
    stray += [n for n in names if not n.startswith("streams/")
              and not n.split("/", 1)[0].endswith(".dist-info")]
    modules = [n for n in names if n.startswith("streams/_core.") and n.endswith(".so")]
    problems = []
    if missing:
        problems.append(f"missing: {missing}")
    if stray:
        problems.append(f"stray build files: {stray}")
    if len(modules) != 1:
        problems.append(f"expected exactly one compiled streams._core, got {modules}")
    if problems:
        print(f"{path}: " + "; ".join(problems))
        return 1
    print(f"{path}: {len(names)} files, contents OK")
    return 0


if __name__ == "__main__":
    sys.exit(max(main(p) for p in sys.argv[1:]))
