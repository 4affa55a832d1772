import gc
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

# The package is in src/ (a src layout).  pytest tests the streams Python
# imports: an installed one (an editable install is one), else an in-place
# build in src/streams (`python setup.py build_ext --inplace` alone), which
# never goes before an installed package.  The header line says which.
_SRC = Path(__file__).resolve().parents[1] / "src"
if importlib.util.find_spec("streams") is None and any((_SRC / "streams").glob("_cudart.*.so")):
    sys.path.insert(0, str(_SRC))

import streams  # noqa: E402
from _support import FREE_THREADED  # noqa: E402


def pytest_report_header(config):
    where = Path(streams.__file__).resolve().parent
    how = ("the in-place build of this checkout" if where == _SRC / "streams"
           else "installed")
    return f"streams {streams.__version__}: {where} ({how})"

GPU_COUNT = streams.device_count()
NO_GPU_REASON = (
    "needs a machine with an NVIDIA GPU (here streams.device_count() == 0, driver version "
    f"{streams.driver_version()})"
)


def pytest_collection_modifyitems(config, items):
    if GPU_COUNT:
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# With tools/stackdump.c preloaded (ci/run-gpu-tests does it: tools/stackdump_env.sh),
# a test still running after STREAMS_TEST_STACKDUMP_AFTER seconds has the
# native stack of every thread of its process written to STACKDUMP_DIR: a
# hang in the driver then shows where, which faulthandler's Python frames
# cannot (the device machine has no debugger).
_STACKDUMP_AFTER = float(os.environ.get("STREAMS_TEST_STACKDUMP_AFTER") or 0)


def _stackdump_loaded():
    # Loaded in this process, not only named in LD_PRELOAD: without its
    # handler, SIGUSR2 would end the process.
    try:
        with open("/proc/self/maps") as maps:
            return "stackdump" in maps.read()
    except OSError:
        return False


_STACKDUMP = _STACKDUMP_AFTER > 0 and _stackdump_loaded()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _STACKDUMP:
        yield
        return
    timer = threading.Timer(_STACKDUMP_AFTER, os.kill, (os.getpid(), signal.SIGUSR2))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# STREAMS_RACECHECK=collect (ci/run-gpu-tests ... -- with it set): each GPU
# test runs with the race checker on, from a fresh start, and fails on a
# race it reports unless marked ``races`` (a test that races on purpose:
# a no-wait control, a hostile program).
_RACECHECK = os.environ.get("STREAMS_RACECHECK", "") not in ("", "0")


@pytest.fixture(autouse=True)
def no_reported_races(request):
    if not _RACECHECK or "gpu" not in request.keywords:
        yield
        return
    from streams import checker
    checker.enable("collect", stack_depth=4)
    yield
    found = checker.races()
    checker.enable("collect", stack_depth=4)        # the next test starts afresh
    if found and "races" not in request.keywords:
        pytest.fail(f"{len(found)} race(s) reported by streams.checker in "
                    f"{request.node.name}:\n" + "\n".join(str(r) for r in found[:5]))


@pytest.fixture(autouse=True)
def no_leaked_handles(request):
    """Every GPU test must give back the handles and callback payloads it made."""
    if "gpu" not in request.keywords:
        yield
        return
    gc.collect()
    before = streams.debug_counters()
    yield
    gc.collect()
    # Graph-owned callback payloads (and the user objects executables own)
    # are released by CUDA on its own thread and dropped shortly after on ours.
    deadline = time.monotonic() + 2.0
    settling = ["live_host_calls"] + (["live_payload_refs"] if before["debug_build"] else [])
    while True:
        streams._cudart._drain_deferred()
        if FREE_THREADED:
            # What CUDA's thread made and this one let go of waits for that
            # thread's next callback or a collection (biased reference
            # counting; src/cudart/hostfn.h).
            gc.collect()
        after = streams.debug_counters()
        if all(after[k] <= before[k] for k in settling) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    keys = ["live_streams", "live_events", "live_callbacks", "live_host_calls",
            "live_graphs", "live_graph_execs", "live_modules", "live_buffers",
            "live_mem_pools", "live_green_contexts"]
    if after["debug_build"]:
        # The debug build also counts each reference the C code takes and
        # drops, and each allocation and module: every one must be undone.
        keys += DEBUG_BALANCES
    changed = [key for key in keys if after[key] != before[key]]
    assert not changed, (
        f"{', '.join(f'{k} went from {before[k]} to {after[k]}' for k in changed)} "
        f"in {request.node.name}{_holders(changed)}{_gil_sites(changed)}")


def _gil_sites(changed):
    # Where CUDA was called with the GIL held (debug builds; the GIL rule of
    # streams/_stream.pyx).
    if "cuda_calls_with_gil" not in changed:
        return ""
    return "".join(f"\n  CUDA called with the GIL: {site}"
                   for site in streams._cudart._cuda_calls_with_gil())


# The classes whose live objects a leak report explains by their referrers.
_HELD = {"live_streams": "Stream", "live_events": "Event", "live_graphs": "Graph",
         "live_graph_execs": "GraphExec", "live_buffers": "DeviceBuffer"}


def _holders(changed):
    """What keeps the open objects of each leaked kind alive: chains of
    referrers up to a module's globals or a class (a frame by its function
    and line), so that a leak seen only on the device machine (under a
    sanitizer, say) says where to look."""
    lines = []
    for key in changed:
        cls = getattr(streams, _HELD.get(key, ""), None)
        if cls is None:
            continue
        live = [o for o in gc.get_objects() if isinstance(o, cls) and not o.closed]
        last = live[-2:]
        for obj in last:
            lines.append(f"\n  open {type(obj).__name__}: "
                         + "; ".join(_chains(obj, {id(live), id(last)})))
    return "".join(lines)


def _describe(r):
    if hasattr(r, "f_code"):
        return f"frame {r.f_code.co_name}:{r.f_lineno}"
    if hasattr(r, "tb_frame"):
        return f"traceback@{r.tb_frame.f_code.co_name}:{r.tb_lineno}"
    if isinstance(r, BaseException):
        return f"{type(r).__name__}({str(r)[:60]!r})"
    if isinstance(r, dict):
        if "__loader__" in r and "__name__" in r:
            return f"globals of {r['__name__']}"
        return f"dict{list(r)[:4]}"
    if callable(r) and hasattr(r, "__qualname__"):
        return f"{type(r).__name__} {r.__qualname__}"
    if isinstance(r, tuple):
        return f"tuple{tuple(type(x).__name__ for x in r[:4])}"
    return type(r).__name__


def _chains(obj, skip, depth=6, width=4):
    """Referrer chains of ``obj``, each as 'a <- b <- c', breadth first;
    the containers of this search (ids in ``skip``) and its own frames are
    not referrers."""
    here = __file__
    nodes, paths = [obj], [""]
    out = []
    for _ in range(depth):
        next_nodes, next_paths = [], []
        mine = skip | {id(nodes), id(paths), id(next_nodes), id(next_paths)}
        for i in range(len(nodes)):
            found = gc.get_referrers(nodes[i])
            mine.add(id(found))
            kept = 0
            for r in found:
                if id(r) in mine or (hasattr(r, "f_code") and r.f_code.co_filename == here):
                    continue
                kept += 1
                if kept > width:
                    break
                step = f"{paths[i]} <- {_describe(r)}"
                if type(r).__name__ in ("module", "type") or (isinstance(r, dict)
                                                               and "__loader__" in r):
                    out.append(step.lstrip(" <-"))
                else:
                    next_nodes.append(r)
                    next_paths.append(step)
            if not kept:
                out.append(paths[i].lstrip(" <-") or "nothing")
            del found
        nodes, paths = next_nodes, next_paths
        if not nodes:
            break
    out.extend(p.lstrip(" <-") for p in paths)
    return list(dict.fromkeys(out))[:16]


# What a debug build (STREAMS_DEBUG_REFCOUNTS=1) adds to the leak check.
DEBUG_BALANCES = ["live_payload_refs", "live_dlpack_refs", "live_allocations",
                  "live_module_loads", "cuda_calls_with_gil"]


@pytest.fixture
def kernels():
    """The built-in fill and increment kernels, with their signatures."""
    from types import SimpleNamespace

    from streams.testing import builtin_module

    mod = builtin_module()
    yield SimpleNamespace(
        fill=mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64"),
        increment=mod.get_kernel("streams_increment_u32", signature="pointer, uint64"))
    streams.synchronize_device()
    mod.close()


@pytest.fixture
def device_buffer():
    """A factory of zeroed device buffers of N uint32, closed after the test."""
    from _support import N

    made = []

    def new():
        buf = streams.DeviceBuffer(N * 4, stream=streams.Stream.legacy)
        streams.memset_async(buf, 0, stream=streams.Stream.legacy)
        # Ready before any stream uses it: non-blocking streams are not
        # ordered after the legacy stream.
        streams.Stream.legacy.synchronize()
        made.append(buf)
        return buf

    yield new
    streams.synchronize_device()
    for buf in made:
        buf.close()
    streams.synchronize_device()


@pytest.fixture
def closer():
    """``closer(obj, ...)`` returns ``obj`` (the first) and closes each one
    after the test, last registered first, whether the test passed or not:
    a failing test leaves nothing for the next test's leak check."""
    made = []

    def register(*objs):
        made.extend(objs)
        return objs[0]

    yield register
    errors = []
    for step in [streams.synchronize_device] + [obj.close for obj in reversed(made)]:
        try:
            step()
        except Exception as exc:    # close the rest, then report the first
            errors.append(exc)
    made.clear()
    if errors:
        raise errors[0]


@pytest.fixture
def stream():
    s = streams.Stream()
    yield s
    s.synchronize()
    s.close()


@pytest.fixture
def restore_current():
    """Put back this thread's current device and current stream after the test."""
    from streams._stream import _thread_currents
    device = streams.get_device()
    before = _thread_currents()
    yield
    streams.set_device(device)
    # Exactly as before: a stream made current now would also hide a
    # framework that follow_current_stream follows.
    _thread_currents(before)
