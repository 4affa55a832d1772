"""Which CUDA major a build targets, and the PEP 517 backend that knows it.

One source tree gives two distributions: ``cuda-streams`` (CUDA 13, the
default) and ``cuda-streams-cu12``.  ``STREAMS_CUDA_MAJOR`` picks one when
building from a checkout; an sdist carries its choice in a ``CUDA_MAJOR``
file, so that ``pip install cuda-streams-cu12`` from source builds what its
name says without any variable.

The backend is setuptools' own, with one difference: a CUDA 12 build also
asks for the CUDA 12 runtime wheels.  ``build-system.requires`` is one
static list and keeps the CUDA 13 inputs; a CUDA 12 build environment gets
those too, unused (``setup.py`` looks only at the major it builds for).
"""
import os
import re

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (PEP 517 hooks, unchanged)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
    "get_requires_for_build_sdist", "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable", "prepare_metadata_for_build_wheel",
    "cuda_major", "CudaMajorError", "DISTRIBUTION", "MARKER", "debug_info_flags",
    "module_headers",
]

DEFAULT_MAJOR = "13"
DISTRIBUTION = {"13": "cuda-streams", "12": "cuda-streams-cu12"}
# The CUDA 13 inputs are in build-system.requires.  CUDA 12 has no
# nvidia-cuda-crt: crt/host_defines.h ships in the nvcc wheel.
EXTRA_BUILD_REQUIRES = {
    "13": [],
    "12": ["nvidia-cuda-runtime-cu12==12.*", "nvidia-cuda-nvcc-cu12==12.*",
           "nvidia-nvtx-cu12==12.*"],
}
MARKER = "CUDA_MAJOR"


class CudaMajorError(ValueError):
    pass


def cuda_major(source_dir="."):
    """The CUDA major to build for: the sdist's marker, else
    ``STREAMS_CUDA_MAJOR``, else 13.  A variable that contradicts the
    marker is refused rather than building a wheel under the wrong name."""
    asked = os.environ.get("STREAMS_CUDA_MAJOR", "").strip() or None
    if asked is not None and asked not in DISTRIBUTION:
        raise CudaMajorError(f"STREAMS_CUDA_MAJOR must be 12 or 13, not {asked!r}")
    marker = os.path.join(source_dir, MARKER)
    if os.path.isfile(marker):
        with open(marker) as f:
            fixed = f.read().strip()
        if fixed not in DISTRIBUTION:
            raise CudaMajorError(f"{marker} holds {fixed!r}, not 12 or 13")
        if asked is not None and asked != fixed:
            raise CudaMajorError(
                f"this source is {DISTRIBUTION[fixed]} (CUDA {fixed}), but "
                f"STREAMS_CUDA_MAJOR={asked} asks for CUDA {asked}: build "
                f"{DISTRIBUTION[asked]} from its own sdist or a checkout")
        return fixed
    return asked or DEFAULT_MAJOR


def debug_info_flags(environ=None):
    """(compile args, link args) for the debug information of the
    extensions.  By default none is kept: Python's own CFLAGS ask for
    ``-g``, which made the installed extensions four times their stripped
    size; ``-g0`` drops ours and ``-Wl,--strip-debug`` what the static CUDA
    runtime brings.  ``STREAMS_DEBUG_INFO=1`` keeps it all (for gdb or a
    sanitizer's stacks).  The symbol tables stay either way."""
    environ = os.environ if environ is None else environ
    value = environ.get("STREAMS_DEBUG_INFO", "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"STREAMS_DEBUG_INFO must be 0 or 1, not {value!r}")
    if value == "1":
        return ["-g"], []
    return ["-g0"], ["-Wl,--strip-debug"]


# What a module's Cython sources name: the parts it includes, the .pxd of
# each module of the package it cimports, the C headers it declares from.
_PXI = re.compile(r'^[ \t]*include[ \t]+"([^"]+)"', re.M)
_CIMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+streams\.(\w+)[ \t]+cimport\b|cimport[ \t]+streams\.(\w+))", re.M)
_CIMPORT_PACKAGE = re.compile(r"^[ \t]*from[ \t]+streams[ \t]+cimport\b", re.M)
_EXTERN = re.compile(r'^[ \t]*cdef[ \t]+extern[ \t]+from[ \t]+"([^"]+)"', re.M)
_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def module_headers(root, name):
    """The headers of the checkout (``src/``, ``include/``) that extension
    ``streams.<name>`` compiles, as paths relative to ``root``, sorted: those
    its Cython sources (its .pyx with the parts it includes, its .pxd, the
    .pxd of every package module it cimports, transitively) declare from
    with ``cdef extern from``, and every header those include in turn with
    ``#include "..."``.  The C compiler reads them, Cython does not: they
    are the extension's ``depends``, without which a build in place keeps a
    module compiled from an older header.  Headers found elsewhere (Python's,
    CUDA's) are not the checkout's and are left out."""
    package = os.path.join(root, "src", "streams")
    include_dirs = [os.path.join(root, "include"), os.path.join(root, "src")]
    sources, headers = set(), set()
    todo = [os.path.join(package, name + ".pyx"), os.path.join(package, name + ".pxd")]
    named = []
    while todo:
        path = os.path.normpath(todo.pop())
        if path in sources or not os.path.isfile(path):
            continue
        sources.add(path)
        text = _read(path)
        here = os.path.dirname(path)
        for part in _PXI.findall(text):
            beside = os.path.join(here, part)
            todo.append(beside if os.path.isfile(beside) else os.path.join(package, part))
        for m in _CIMPORT.finditer(text):
            todo.append(os.path.join(package, (m.group(1) or m.group(2)) + ".pxd"))
        if _CIMPORT_PACKAGE.search(text):
            todo.append(os.path.join(package, "__init__.pxd"))
        named += [(h, None) for h in _EXTERN.findall(text)]
    while named:
        header, beside = named.pop()
        # As the C compiler looks: beside the including header, then -I.
        for d in ([beside] if beside else []) + include_dirs:
            path = os.path.normpath(os.path.join(d, header))
            if os.path.isfile(path):
                break
        else:
            continue
        if path in headers:
            continue
        headers.add(path)
        named += [(h, os.path.dirname(path)) for h in _C_INCLUDE.findall(_read(path))]
    return sorted(os.path.relpath(h, root).replace(os.sep, "/") for h in headers)


def _extra(config_settings=None):
    return list(EXTRA_BUILD_REQUIRES[cuda_major()])


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _extra()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _extra()
