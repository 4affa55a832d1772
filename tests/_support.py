"""Helpers shared by the tests: sizes and host copies for GPU tests that
compute on device buffers, objects that never reached CUDA, and the
environment of child processes."""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import streams

MS = 1000   # spin() takes microseconds
N = 1024    # uint32 elements per device buffer
GRID, BLOCK = 4, 256


def to_host(buf, stream):
    """The N uint32 of ``buf`` on the host, once ``stream`` has written them."""
    np = pytest.importorskip("numpy")
    host = np.empty(N, dtype=np.uint32)
    streams.memcpy_async(host, buf, stream=stream)
    stream.synchronize()
    return host


# For the checks of what happens without a GPU (CUDA errors, not argument errors).
needs_no_gpu = pytest.mark.skipif(streams.device_count() > 0,
                                  reason="checks the no-GPU error path; a GPU is present")


def uninitialised(cls):
    """A ``cls`` (a Stream or Event class) that never got a CUDA handle:
    argument checks that come before any CUDA call can be observed on it
    without a GPU."""
    return cls.__new__(cls)


def env_importing_this_streams(extra=None):
    """``os.environ`` (plus ``extra``) for a child Python that imports the
    same ``streams`` as this process: an in-place build's folder goes first
    on PYTHONPATH; an installed package needs nothing."""
    parent = Path(streams.__file__).resolve().parent.parent
    site_dirs = {Path(p).resolve() for p in
                 (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    env = dict(os.environ)
    env.update(extra or {})
    if parent not in site_dirs:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_python_args(args, *, timeout, cwd=None, input=None, extra_env=None):
    """Run ``python ARGS`` in a child that imports the same ``streams`` as
    this process.  By default its working directory is the folder that
    holds that package: ``-c`` and ``-m`` put the cwd first on sys.path,
    and a source checkout there (no compiled module) would otherwise
    shadow an installed wheel."""
    where = cwd if cwd is not None else Path(streams.__file__).resolve().parent.parent
    return subprocess.run([sys.executable] + list(args), cwd=str(where), input=input,
                          env=env_importing_this_streams(extra_env),
                          capture_output=True, text=True, timeout=timeout)


def run_python(code, **kwargs):
    """``python -c code`` in a child, as :func:`run_python_args` runs it."""
    return run_python_args(["-c", code], **kwargs)
