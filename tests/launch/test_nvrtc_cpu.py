"""NVRTC's library, without a GPU: a shared object that STREAMS_NVRTC names
but that is not NVRTC is refused, naming it, and closed again."""
import importlib
import shutil
import textwrap

import pytest

from _support import run_python


# ---- NVRTC: a library that is not NVRTC is closed again -----------------------------------

def _some_shared_object():
    for name in ("_ctypes", "_json", "array", "select", "math", "_struct"):
        try:
            path = getattr(importlib.import_module(name), "__file__", None)
        except ImportError:
            continue
        if path and path.endswith(".so"):
            return path
    pytest.skip("no extension module of the standard library is a shared object here")


_NOT_NVRTC = textwrap.dedent(r"""
    import ctypes, os, sys
    from streams._launch import nvrtc_info
    path = os.environ["STREAMS_NVRTC"]
    for attempt in range(3):
        try:
            nvrtc_info()
            print("LOADED AS NVRTC")
        except RuntimeError as exc:
            print("REFUSED", "not an NVRTC library" in str(exc))
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        print("STILL MAPPED")
    except OSError:
        print("CLOSED")
""")


def test_a_library_that_is_not_nvrtc_is_closed_again(tmp_path):
    """STREAMS_NVRTC names a shared object without NVRTC's symbols (a copy
    of one, so that nothing else has it open): each attempt is refused
    naming it, and the library is closed again, not left loaded (dlopen
    without dlclose, one more reference each attempt)."""
    lib = tmp_path / "libnot_nvrtc.so"
    shutil.copyfile(_some_shared_object(), lib)
    result = run_python(_NOT_NVRTC, timeout=60, extra_env={"STREAMS_NVRTC": str(lib)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:4] == ["REFUSED True"] * 3 + ["CLOSED"], result.stdout
