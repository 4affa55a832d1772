"""Helpers for tests and benchmarks that need real work on a stream."""
from streams import _cudart, _launch
from streams._stream import Stream

__all__ = ["spin", "launch_empty", "fill_u32", "increment_u32", "BUILTIN_PTX",
           "builtin_module", "native_increment", "inject_cleanup_failure",
           "CLEANUP_KINDS"]

#: What inject_cleanup_failure can make fail: each kind of release.
CLEANUP_KINDS = ("stream", "event", "graph", "graph_exec", "host_memory", "managed_memory",
                 "mem_pool", "green_context", "module", "device_memory", "device_sync",
                 "marker_event", "host_registration")

#: The address of a native host function, ``void fn(void* data)``, compiled
#: into the package: it adds 1 to the unsigned 64-bit counter ``data``
#: points to (atomically; nothing when ``data`` is NULL), with no Python,
#: no GIL and no CUDA call.  For tests and examples of
#: ``Stream.launch_host_func`` and ``Graph.add_host_node`` with native
#: functions.
native_increment = _cudart._testing_native_increment_address()

#: PTX of the built-in kernels: streams_empty(), streams_spin(u64 ns),
#: streams_fill_u32(u32* p, u32 v, u64 n), streams_increment_u32(u32* p, u64 n).
BUILTIN_PTX = _launch.builtin_ptx()


def builtin_module():
    """A new ``streams.Module`` holding the built-in kernels."""
    from streams import Module
    return Module.from_ptx(BUILTIN_PTX)


def spin(stream, microseconds):
    """Hold ``stream`` busy for ``microseconds`` with a one-thread kernel.

    The kernel busy-waits on the GPU's global timer, so the stream is busy for
    that long whatever the clocks do.  It is compiled from PTX shipped in the
    package on first use (no nvcc needed).
    """
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a streams.Stream, not {type(stream).__name__}")
    if isinstance(microseconds, bool) or not isinstance(microseconds, (int, float)):
        raise TypeError(f"microseconds must be a number, not {type(microseconds).__name__}")
    _launch._spin(stream, microseconds)


def launch_empty(stream):
    """Launch an empty 1x1 kernel on ``stream``."""
    _launch._launch_empty(stream)


def fill_u32(stream, ptr, value, count):
    """Fill ``count`` uint32 at device pointer ``ptr`` with ``value``."""
    _launch._fill_u32(stream, ptr, value, count)


def increment_u32(stream, ptr, count):
    """Add 1 to ``count`` uint32 at device pointer ``ptr``."""
    _launch._increment_u32(stream, ptr, count)


def inject_cleanup_failure(kind, error, count=1):
    """Make the next ``count`` releases of ``kind`` (one of
    :data:`CLEANUP_KINDS`) report CUDA error ``error`` (a ``cudaError_t``
    value, or a :class:`streams.CudaError`) instead of their own.

    The real release still runs (nothing leaks); only its report changes:
    a release where no exception can be raised (``__dealloc__``, the last
    user of a closed object leaving, a deferred release) then issues a
    :class:`streams.CudaWarning`.  ``count=0`` cancels what is left.  For
    tests of that reporting: available in every build, only from here.
    """
    if isinstance(error, _cudart.CudaError):
        error = error.code
    if isinstance(error, bool) or not isinstance(error, int):
        raise TypeError(f"error must be an int cudaError_t or a CudaError, not "
                        f"{type(error).__name__}")
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an int, not {type(count).__name__}")
    if count > 2**31 - 1:
        raise ValueError(f"count must fit a C int, got {count}")
    _cudart._inject_cleanup_failure(kind, error, count)
