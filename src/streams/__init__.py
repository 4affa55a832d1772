"""CUDA streams, events and graphs for Python, at the speed of C.

``Stream``, ``Event`` and friends wrap the CUDA runtime (linked statically:
only the NVIDIA driver is needed).  Blocking calls release the GIL; waits
can be interrupted with Ctrl-C; other Cython projects can ``cimport streams``
(see ``get_include()``).
"""
import atexit as _atexit
import os as _os

# The layers, each built on the ones before it (see docs/architecture.rst).
# Every public name imported here is exported (__all__, at the end).
from streams._cudart import (CudaError, CudaWarning, HostCallbackError, debug_build, debug_counters,
                             driver_version, runtime_version)
from streams import _args
from streams._args import StreamsEnum
from streams._device import (Device, can_access_peer, device_count, disable_peer_access,
                             enable_peer_access, get_device, set_device,
                             stream_priority_range, synchronize_device)
from streams._stream import (AccessPolicyWindow, AccessProperty, CaptureMode, CaptureStatus,
                             Event, EventPool, MemAttach, Stream, StreamAttribute, StreamPool,
                             HostFuncSyncMode, SyncPolicy, as_stream, current_stream,
                             reset_persisting_l2_cache)
from streams import _hostcall  # noqa: F401  (registers the host-callback paths)
from streams._memory import (DeviceBuffer, IpcBufferDescriptor, ManagedBuffer, MemoryPool,
                             PinnedBuffer, advise, discard, discard_and_prefetch,
                             managed_range_info, memcpy_async, memcpy_batch_async,
                             memcpy_peer_async, memset_async, prefetch)
from streams._launch import (CompileError, ConditionHandle, Kernel, LaunchConfig, Module,
                             PreparedLaunch, builtin_kernel, builtin_ptx)
from streams._graph import (CaptureInfo, Graph, GraphAllocation, GraphExec,
                            GraphMemoryInfo, GraphNode, KernelNodeParams, NodeType, UpdateResult,
                            capture_mode,
                            exchange_capture_mode, graph_memory_info, reset_graph_memory_high,
                            trim_graph_memory)
from streams._green import GreenContext, SmPartition, SmResource
from streams._semaphore import SemaphoreAbandoned, SemaphoreDescriptor, TimelineSemaphore
from streams._deadline import Deadline, DeadlineExceeded, Watchdog, deadline, watchdog
from streams._interop import current_in, follow_current_stream
from streams import nvtx
from streams import checker
from streams import _cudart

__version__ = "0.1.0"

# Registered at import, so it runs after atexit hooks registered later
# (user code that still synchronizes), and before the interpreter finalizes.
_atexit.register(_cudart._shutdown)


def show_config(file=None):
    """Print what this build is and sees: package, Python, the Cython and CUDA
    runtime it was built with, the driver, and the devices (the same report
    as ``python -m streams --info``)."""
    import sys

    from streams._info import info_lines, streams_info

    print("\n".join(info_lines(streams_info(__version__))), file=file or sys.stdout)


def get_include():
    """Folder to add to ``include_dirs`` of an extension that cimports streams.

    It holds ``streams/streams.h``, the handle types the ``.pxd`` files use.
    """
    here = _os.path.dirname(_os.path.abspath(__file__))
    installed = _os.path.join(here, "include")
    if _os.path.isfile(_os.path.join(installed, "streams", "streams.h")):
        return installed
    # Editable install / source checkout: the headers live at the top level.
    return _os.path.join(_os.path.dirname(_os.path.dirname(here)), "include")


def get_cython_include():
    """Folder to add to Cython's ``include_path``, so that ``cimport streams``
    finds the ``.pxd`` files: the folder that holds the ``streams`` package.

    Cython looks for ``.pxd`` files on ``include_path`` and ``sys.path``.
    A regular install puts the package on ``sys.path``; an editable install
    (``pip install -e``) does not: setuptools' import hook finds the package
    for Python, but Cython does not ask it.  Passing this folder works for
    both::

        cythonize(extensions, include_path=[streams.get_cython_include()])
    """
    return _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))


# The public API: every public name above (what the layers export, then
# show_config and get_include).  streams/__init__.pyi spells the list out for
# type checkers; tests/package/test_stubs.py checks that the two agree.
__all__ = sorted(name for name in globals() if not name.startswith("_"))

# Each public class says it is streams.<Name> (tracebacks, reprs, pickles)
# and has a signature (streams._args._make_public; tests/package/test_public_face.py).
for _name in __all__:
    if isinstance(globals()[_name], type):
        _args._make_public(globals()[_name], __name__)
del _name
