"""A stateful fuzzer of the object graph on the GPU.

Hypothesis' ``RuleBasedStateMachine`` makes, uses, closes and drops streams
(own, default, foreign wrappers), events, buffers (default pool, a
``MemoryPool``, pinned, managed), modules and kernels, prepared launches,
graphs (explicit nodes, captured, conditional if/while, memory nodes) and
their executables (launched, updated per node), host callbacks and asyncio
awaits, in any order, from a second thread too, with reference cycles and
``gc.collect()``, ``__new__``-made objects and arguments at the edges of
their C types.

After every step: no crash, no exception outside the documented ones, and
no unraisable exception but the fuzzer's own callback errors.  At check
points: every live buffer holds what a host-side model says (each buffer is
filled with known values, and every use is ordered after the previous one
with a per-buffer event), and host callbacks ran as often as they were
enqueued or replayed.  At the end of each example: every handle, callback
payload and allocation is given back (``streams.debug_counters()``, with the
debug build's balances), and the default pool holds what it held before; at
the end of the run the device's free memory is back where it started.

Some rules play a whole scenario in one step, with its own model, where a
class of fault needs one: a capture of 1,000+ counted enqueues beside
counted work not yet done (long_capture); kernel nodes added through
``capture_info()`` whose module and buffer are closed while the captured
graph lives (capture_info_node_keeps, capture_info_node); sequences of
kernel-node changes on an executable and its graphs (kernel_node_changes,
against NodeChangeModel); arrays whose producer stream is being captured,
used outside the capture (foreign_producer_capturing); closes while
another thread is inside the object (close_with_user_inside); green
contexts closed with work queued (green_close_under_work); and a
host-released ``wait_value`` behind enqueues of every kind, where a hang
ends the run as a finding (host_released_wait, hang_watchdog); a timeline
semaphore between two streams, released by the GPU, the host or abandon()
(semaphore_handoff); and deadlines met and missed on a scope and a graph
replay (deadline_round).  Each runs
a bounded number of times per example; one that cannot run here (no green
contexts, launches that wait for their kernel) says so at the end.

The model keeps the caller's side of every documented contract (docs/
safety.rst, graphs.rst): work on another stream is ordered before a
buffer's free; captured work and memset/memcpy nodes hold nothing, so what
they use stays open while they live; a foreign wrapper is not used once its
owner is closed.  What the fuzzer asserts is what the docs promise.

The machine runs in a child process (a crash must not kill pytest): the
package's command line runs it (``python tests/fuzz --help``; cli.py), and
test_fuzz_gpu.py runs that command in a child.  Each option sets one of the
variables the pytest test passes on to the child:
``--seconds``/``STREAMS_FUZZ_SECONDS`` (default 60) bounds the run,
``--seed``/``STREAMS_FUZZ_SEED`` starts from a seed, ``--replay SEED`` runs
a failing round's seed without shrinking, ``--report``/``STREAMS_FUZZ_REPORT``
names a file for the "N examples, M steps in S seconds" line, and
``--trace``/``STREAMS_FUZZ_TRACE=1`` prints the steps that say what they
built or dropped as they run, ``2`` also every rule with its arguments,
before it runs (for a crash, which leaves no falsifying example).  Under
compute-sanitizer: ``compute-sanitizer --tool memcheck --report-api-errors
no python tests/fuzz --seconds 60`` (docs/contributing.rst).
"""
import asyncio
import collections
import contextlib
import copy
import ctypes
import faulthandler
import gc
import math
import os
import random
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis")
from hypothesis import HealthCheck, Phase, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test)

from _support import in_thread  # noqa: E402

import streams  # noqa: E402
from streams import (  # noqa: E402
    CudaError, DeviceBuffer, Event, Graph, GraphExec, HostCallbackError, Kernel, LaunchConfig,
    ManagedBuffer, MemoryPool, Module, PinnedBuffer, Stream)

BUDGET = float(os.environ.get("STREAMS_FUZZ_SECONDS", "60"))
CHECK_DEVICE_MEMORY = os.environ.get("STREAMS_FUZZ_DEVICE_MEMORY") == "1"
# Arguments at the edges must be refused with a message naming them (the
# house rule); STREAMS_FUZZ_STRICT_NAMES=0 checks only the exception type.
STRICT_NAMES = os.environ.get("STREAMS_FUZZ_STRICT_NAMES", "1") != "0"
TRACE = os.environ.get("STREAMS_FUZZ_TRACE", "") not in ("", "0")
TRACE_RULES = os.environ.get("STREAMS_FUZZ_TRACE", "") == "2"

N = 256                 # uint32 per buffer: one block of N threads fills it
NBYTES = N * 4
SPIN_US = (0, 200, 2000)   # short spins: the fuzzer also runs under compute-sanitizer
EXAMPLES_PER_ROUND = 3
STEPS_PER_EXAMPLE = 30

# What a refused argument may raise, and what a use of a closed or
# never-initialised object may raise.
ARG_ERRORS = (ValueError, TypeError, OverflowError)
CLOSED_ERRORS = (ValueError,)
NEW_OBJECT_ERRORS = (ValueError, TypeError, BufferError)
UINT32_MAX = 2**32 - 1
EDGE_INTS = (-2**64, -2**63, -2**31 - 1, -1, 2**31, 2**32 - 1, 2**32, 2**32 + 16,
             2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1)


def _cond_nodes_supported():
    # if/while nodes need CUDA 12.4 in both the runtime and the driver.
    return streams.runtime_version() >= 12040 and streams.driver_version() >= 12040


# ---- host callbacks: what ran, what was expected ------------------------------------------------

class FuzzCallbackError(Exception):
    """Raised on purpose by a host callback: the one unraisable allowed."""


RAN = collections.Counter()       # callback key -> times it ran
RAN_LOCK = threading.Lock()
STATUSES = []                     # the statuses add_callback callbacks saw
UNRAISABLE = []                   # (exception type, message) of every unraisable


def _ran(key):
    with RAN_LOCK:
        RAN[key] += 1


def count_cb(key):
    _ran(key)


def raising_cb(key):
    _ran(key)
    raise FuzzCallbackError(key)


def status_cb(stream, status, key):
    STATUSES.append(status)
    _ran(key)


def holding_cb(pair):
    # The buffer in `pair` loses its last reference here, on CUDA's thread:
    # its release must be deferred to a safe thread (architecture.rst).
    _ran(pair[0])


# ---- native host functions: what they counted, as their owner saw it ----------------------------

NATIVE_SEEN = {}                  # native cell key -> the count its owner read when it went
HOST_FN = None                    # ctypes.CFUNCTYPE(None, c_void_p), made on first use


class _NativeCell:
    """Memory that a native host function counts in, owned as another
    library's object would own it: when it goes, it reads the count into
    NATIVE_SEEN and unmaps the memory (a call that ran after that would
    fault, not write somewhere quietly).  Passed as ``owner``: the library
    must keep it, and so the memory, until every call that writes there has
    run.  A page of its own rather than a PinnedBuffer: its release must not
    move the library's counters that other rules compare around a collect."""

    def __init__(self, key):
        import ctypes
        import mmap
        self.key = key
        self.page = mmap.mmap(-1, mmap.PAGESIZE)
        self.cell = ctypes.c_uint64.from_buffer(self.page)
        self.ptr = ctypes.addressof(self.cell)
        self.cycle = None

    def __del__(self):
        NATIVE_SEEN[self.key] = self.cell.value
        del self.cell               # the page's last export: it can be unmapped
        try:
            self.page.close()
        except BufferError:
            # Free-threaded CPython, inside a collection: the collector still
            # holds the cell until the finalizers have run, so the page is
            # still exported; it is unmapped when the page goes, right after.
            pass


def _unraisable_hook(u):
    UNRAISABLE.append((type(u.exc_value), str(u.exc_value)[:200]))


# ---- the model ----------------------------------------------------------------------------------

class StreamM:
    def __init__(self, obj, kind, non_blocking=False, owner=None):
        self.obj, self.kind, self.non_blocking, self.owner = obj, kind, non_blocking, owner
        self.closed = False
        self.expect_error = False   # a host callback raised: the next synchronize() raises
        self.own_green = False      # a green context's stream

    @property
    def green(self):
        # A foreign wrapper of a green context's stream captures there too.
        return self.own_green or (self.owner is not None and self.owner.green)

    @property
    def pending_error(self):
        # A host callback raised on it (or on the stream it wraps): its next
        # synchronize() raises HostCallbackError.
        return self.expect_error or (self.owner is not None and self.owner.expect_error)

    @property
    def usable(self):
        # A foreign wrapper dangles once its owner is closed (safety.rst:
        # "after close() it dangles"): never used again.
        return not self.closed and (self.owner is None or not self.owner.closed)

    def __repr__(self):
        return f"<{self.kind} stream{' closed' if self.closed else ''}>"


class BufM:
    def __init__(self, obj, kind, stream, data, ready):
        self.obj, self.kind, self.stream = obj, kind, stream   # stream: StreamM or None
        self.data = data            # what the memory must hold (numpy uint32[N])
        self.ready = ready          # an Event after every use so far: the next use waits for it
        self.last_user = None       # the holder (exec, prepared launch) that used it last
        self.closed = False         # closed by the fuzzer; a "zombie" while holders keep it

    def __repr__(self):
        return f"<{self.kind} buffer{' closed' if self.closed else ''}>"


class ModM:
    def __init__(self, obj):
        self.obj = obj
        self.fill = obj.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
        self.inc = obj.get_kernel("streams_increment_u32", signature="pointer, uint64")
        self.empty = obj.get_kernel("streams_empty")
        self.closed = False


class HolderM:
    """A graph, an executable or a prepared launch: what it holds in use
    (kernel-node and prepared-launch buffers: they survive a close) and what
    it refers to only by address (captured work, memset/memcpy nodes: those
    must stay open while it lives)."""

    def __init__(self, obj, kind):
        self.obj, self.kind = obj, kind
        self.ops = []               # [op, enabled]; op: ("fill", buf, v), ("inc", buf), ...
        self.held, self.raw = [], []
        self.raw_mods = []
        self.nodes = []             # explicit graphs: (GraphNode, op index) that updates may name
        self.bodies = []            # conditional bodies (Graphs) to close with it
        self.graph = None           # an executable's GraphM
        self.mem_nodes = False      # a graph with memory nodes is instantiated once
        self.conditional = False    # so is one with conditional nodes
        self.instantiated = 0
        self.green = False          # captured on a green context's stream
        self.made = ""              # what built it, for the trace
        self.closed = False
        self.how = None             # "close" or "drop" once gone

    def refs(self):
        return self.held + self.raw

    def __repr__(self):
        return f"<{self.kind}{' closed' if self.closed else ''}>"


def apply_ops(ops):
    """What running ``ops`` does to the buffers' models."""
    for op, enabled in ops:
        if not enabled:
            continue
        kind = op[0]
        if kind == "fill":
            op[1].data[:] = op[2]
        elif kind == "inc":
            op[1].data[:] += 1
        elif kind == "memset":
            op[1].data[:] = op[2] * 0x01010101
        elif kind == "copy":
            op[1].data[:] = op[2].data
        elif kind == "host":
            EXPECTED[op[1]] += 1
        elif kind == "if":
            if op[1].data[0] != 0:
                apply_ops([(sub, True) for sub in op[2]])
        elif kind == "while":
            op[1].data[0] = max(int(op[1].data[0]), op[2])


def op_bufs(op):
    if op[0] in ("fill", "inc", "memset"):
        return [op[1]]
    if op[0] == "copy":
        return [op[1], op[2]]
    if op[0] == "if":
        return [op[1]] + [b for sub in op[2] for b in op_bufs(sub)]
    if op[0] == "while":
        return [op[1]]
    return []


EXPECTED = collections.Counter()   # callback key -> times it must have run


def expect_refusal(fn, argname, errors=ARG_ERRORS, what=""):
    """``fn()`` must raise one of ``errors``, naming ``argname``."""
    names = (argname,) if isinstance(argname, str) else argname
    try:
        result = fn()
    except errors as exc:
        if STRICT_NAMES and all(names) and not any(n in str(exc) for n in names):
            raise AssertionError(f"{what}: {type(exc).__name__} does not name {argname!r}: "
                                 f"{exc}") from exc
        return exc
    raise AssertionError(f"{what}: accepted (returned {result!r}), must be refused")


def expect_clean(fn, errors, what=""):
    """``fn()`` works or raises one of ``errors``; anything else is a finding."""
    try:
        return True, fn()
    except errors as exc:
        return False, exc
    except Exception as exc:
        raise AssertionError(f"{what}: undocumented {type(exc).__name__}: {exc}") from exc


def expect_closed(fn, what=""):
    try:
        fn()
    except CLOSED_ERRORS as exc:
        assert "closed" in str(exc), f"{what}: ValueError without 'closed': {exc}"
        return
    raise AssertionError(f"{what}: a closed object was used without an error")


STATS = {"examples": 0, "steps": 0}
TORCH = {}      # {"module": torch} when STREAMS_FUZZ_TORCH=1 and PyTorch has CUDA
RUN_BUDGET = {"end": None}      # monotonic time at which the run's budget is spent

np = None    # numpy, imported by the machine (the CPU checks of this file need none)

LEAK_KEYS = ["live_streams", "live_events", "live_callbacks", "live_host_calls", "live_graphs",
             "live_graph_execs", "live_modules", "live_buffers", "live_mem_pools",
             "live_native_calls"]
DEBUG_KEYS = ["live_payload_refs", "live_dlpack_refs", "live_allocations", "live_module_loads"]


# ---- what the audit's faults needed: models and guards the rules below share -----------------

NOTES = {}      # rule -> why it did nothing in this run (printed at the end of the run)
ROUND = {"seed": None, "announced": None}     # the round running now, for the watchdog's line


def note(rule, why):
    """``rule`` could not run here (no green contexts, launches that wait
    for their kernel): said once, at the end of the run."""
    NOTES.setdefault(rule, why)


@contextlib.contextmanager
def hang_watchdog(seconds, what):
    """A hang inside the block ends the run as a finding instead of hanging
    it: past ``seconds`` faulthandler's own thread, which needs no GIL (the
    block may hold it while it blocks in the driver), dumps every thread's
    stack and exits the process with status 1.  The round's seed is said
    once per round, before the first block, so that the hang replays
    (test_hang_watchdog_turns_a_hang_into_a_failure)."""
    if ROUND["announced"] != ROUND["seed"]:
        ROUND["announced"] = ROUND["seed"]
        print(f"fuzz: a hang past {seconds:g} s in {what} exits 1; this round replays with "
              f"STREAMS_FUZZ_SEED={ROUND['seed']}", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def chain_order(nodes):
    """The nodes of a captured chain (each launch after the previous one) in
    the order they were captured: each after its dependencies."""
    placed, rest = [], list(nodes)
    while rest:
        for n in rest:
            if all(d in placed for d in n.dependencies):
                placed.append(n)
                rest.remove(n)
                break
        else:
            raise AssertionError(f"not a chain: {len(rest)} nodes wait for nodes outside it")
    return placed


# A kernel node of the change sequences: {"kind": "fill" | "inc", "buf": the
# index of the rule's buffer, "value": fill's value, "count", "grid",
# "block"}.  fill_u32(pointer, uint32 value, uint64 count) writes value to
# the first min(count, grid * block) words; increment_u32(pointer, uint64
# count) adds 1 to them.

def node_effect(state, words):
    """What running one kernel node of ``state`` does to ``words`` (uint32
    arrays, one per buffer): the built-in fill and increment kernels loop
    over the grid's stride, so the first ``count`` words whatever the
    configuration (src/streams/kernels/builtin.cu)."""
    n = state["count"]
    if state["kind"] == "fill":
        words[state["buf"]][:n] = state["value"]
    else:
        words[state["buf"]][:n] += 1


def node_changed(state, changes):
    """``state`` with the arguments ``changes`` names (index -> new value;
    a buffer's index for the pointer) changed and the rest kept."""
    new = dict(state)
    for index, value in changes.items():
        if index == 0:
            new["buf"] = value
        elif state["kind"] == "fill":
            new["value" if index == 1 else "count"] = value
        else:
            new["count"] = value
    return new


class NodeChangeModel:
    """What an executable's kernel nodes compute after changes
    (docs/graphs.rst, "Updating an executable" and "Changing captured
    graphs"): an executable takes its graph's nodes when it is made and
    when ``update(graph)`` brings that graph's; ``set_kernel_node`` replaces
    a node's kernel, configuration and arguments; ``set_kernel_node_args``
    changes the arguments it names on top of what the last change left (not
    on the graph's); ``GraphNode.set_args`` changes the graph's node only,
    for later instantiations and updates (test_node_change_model_follows_the_docs)."""

    def __init__(self, graphs):
        self.graphs = {name: [dict(s) for s in states] for name, states in graphs.items()}
        self.exec = None

    def instantiate(self, name):
        self.exec = copy.deepcopy(self.graphs[name])

    def update(self, name):
        self.exec = copy.deepcopy(self.graphs[name])

    def set_kernel_node(self, i, state):
        self.exec[i] = dict(state)

    def set_kernel_node_args(self, i, changes):
        self.exec[i] = node_changed(self.exec[i], changes)

    def set_args(self, name, i, changes):
        self.graphs[name][i] = node_changed(self.graphs[name][i], changes)

    def launch(self, words):
        for state in self.exec:
            node_effect(state, words)


class _DL:
    """Another library's array that only speaks DLPack: the producer is a
    streams DeviceBuffer, which orders its own stream before the consumer's
    (``__dlpack__(stream=)``)."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.buf.__dlpack__(**kwargs)


_PROBES = {}


def semaphore_memops():
    """Whether a TimelineSemaphore here takes the memops path (64-bit stream
    memory operations), asked once."""
    if "sem_memops" not in _PROBES:
        with streams.TimelineSemaphore() as t:
            _PROBES["sem_memops"] = t.path == "memops"
    return _PROBES["sem_memops"]


def launches_wait_for_kernels():
    """Whether a kernel launch returns only once its kernel has run (as
    under compute-sanitizer memcheck): then any launch behind a wait for the
    host blocks, whatever the library does."""
    if "sync_launch" not in _PROBES:
        s = Stream(non_blocking=True)
        try:
            t0 = time.monotonic()
            streams.testing.spin(s, 50_000)
            _PROBES["sync_launch"] = time.monotonic() - t0 > 0.025
            s.synchronize()
        finally:
            s.close()
    return _PROBES["sync_launch"]


def memset_queue_depth():
    """How many 4-byte memsets go into a stream behind a busy kernel before
    one blocks (the driver's queue depth for them), or None if none blocked
    within the kernel's second (measured once)."""
    if "depth" not in _PROBES:
        s = Stream(non_blocking=True)
        buf = DeviceBuffer(64, stream=s)
        depth = None
        try:
            s.synchronize()
            streams.memset_async(buf, 0, 4, stream=s)
            s.synchronize()
            start = time.monotonic()
            streams.testing.spin(s, 1_000_000)
            for i in range(20000):
                t0 = time.monotonic()
                streams.memset_async(buf, 0, 4, stream=s)
                if time.monotonic() - t0 > 0.1:
                    depth = i
                    break
                if time.monotonic() - start > 0.8:
                    break
            s.synchronize()
        finally:
            buf.close()
            s.close()
        _PROBES["depth"] = depth
    return _PROBES["depth"]


def graph_launch_capturable():
    """Whether CUDA captures a graph launch into a stream capture here (an
    executable that holds nothing, so nothing of streams but the launch is
    asked): None if it does, else why not."""
    if "graph_in_capture" not in _PROBES:
        s = Stream(non_blocking=True)
        g = Graph()
        g.add_empty_node()
        ex = g.instantiate()
        g.close()
        why = None
        try:
            s.begin_capture("thread_local")
            try:
                ex.launch(s)
            except CudaError as exc:
                why = f"CUDA refused a graph launch into a capture: {exc}"
            finally:
                try:
                    s.end_capture().close()
                except CudaError as exc:
                    why = why or f"the capture of a graph launch failed: {exc}"
        finally:
            ex.close()
            s.synchronize()
            s.close()
        _PROBES["graph_in_capture"] = why
    return _PROBES["graph_in_capture"]


def settled_counters():
    """``debug_counters()`` once nothing earlier is pending: what later
    steps release is their own."""
    streams.synchronize_device()
    streams._cudart._drain_deferred()
    gc.collect()
    streams._cudart._drain_deferred()
    return streams.debug_counters()


def wait_counters(expected, keys, timeout=3.0):
    """Poll ``debug_counters()`` (synchronizing, draining what is deferred
    and collecting) until ``keys`` equal ``expected``'s or ``timeout``
    passes; return the last counters."""
    deadline = time.monotonic() + timeout
    while True:
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        after = streams.debug_counters()
        if all(after[k] == expected[k] for k in keys) or time.monotonic() > deadline:
            return after
        time.sleep(0.02)
        gc.collect()


HANDLE_KEYS = ("live_streams", "live_events", "live_graphs", "live_graph_execs",
               "live_modules", "live_buffers")


class _CAI:
    """Another library's array over a buffer's memory, naming ``stream``."""

    def __init__(self, buf, stream):
        self.__cuda_array_interface__ = {
            "shape": (N,), "typestr": "<u4", "data": (buf.ptr, False), "strides": None,
            "version": 3, "stream": stream}


class _FuzzOwner:
    """Another library's code object, as far as an adopted kernel can tell:
    it unloads its module when it goes (as CuPy's and cuda.core's do)."""

    def __init__(self):
        self.module = streams.testing.builtin_module()
        self.handle = self.module.get_kernel("streams_fill_u32").handle

    def __del__(self):
        # A failure goes to sys.unraisablehook: the invariant reports it.
        self.module.close()


class AdoptM:
    """A kernel adopted with Kernel.from_handle: the model holds the kernel,
    and its owner only until the fuzzer drops it early."""

    def __init__(self, kernel, owner, cycle):
        self.kernel, self.owner, self.cycle = kernel, owner, cycle
        self.owner_ref = weakref.ref(owner)
        self.execs = []             # graph executables that hold the kernel

    def __repr__(self):
        return f"<adopted kernel{' in a cycle' if self.cycle else ''}>"


# Module.from_source: a template instance found by its name expression.
FUZZ_SOURCE = r"""
template <typename T>
__global__ void fuzz_fill(T* p, T value, unsigned long long n)
{
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = value;
}
"""
FUZZ_EXPR = "fuzz_fill<unsigned int>"
_NVRTC = []


def have_nvrtc():
    if not _NVRTC:
        try:
            streams._launch.nvrtc_info()
            _NVRTC.append(True)
        except RuntimeError:
            _NVRTC.append(False)
    return _NVRTC[0]


class CompM:
    def __init__(self, module):
        self.obj = module
        self.kernel = module.get_kernel(FUZZ_EXPR, signature="pointer, uint32, uint64")
        self.closed = False


def fill_and_read(kernel, value, via, holders=None):
    """Fill a fresh buffer with ``kernel`` (pointer, uint32, uint64) through
    ``via`` on a fresh stream and return what the GPU wrote.  An executable
    that must outlive the call goes to ``holders``."""
    s = Stream(non_blocking=True)
    buf = DeviceBuffer(NBYTES, stream=s)
    try:
        if via == "launch":
            s.launch(kernel, 1, N, buf, value, N)
        elif via == "launch_ex":
            s.launch_ex(kernel, LaunchConfig(1, N), buf, value, N)
        elif via == "prepare":
            kernel.prepare(1, N, buf, value, N).launch(s)
        else:
            g = Graph()
            try:
                g.add_kernel_node(kernel, 1, N, buf, value, N)
                ex = g.instantiate()
            finally:
                g.close()
            ex.launch(s)
            if via == "exec" and holders is not None:
                holders.append(ex)
            else:
                s.synchronize()
                ex.close()
        got = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(got, buf, stream=s)
        s.synchronize()
        return got
    finally:
        s.synchronize()
        buf.close()
        s.close()


class GpuObjectGraph(RuleBasedStateMachine):
    # Objects are kept in plain lists (not Bundles): hypothesis must hold no
    # reference that would outlive a drop or the teardown's leak check.

    def __init__(self):
        super().__init__()
        global np
        import numpy
        np = numpy
        STATS["examples"] += 1
        if TRACE_RULES:
            print(f"  example {STATS['examples']} starts", file=sys.stderr, flush=True)
        RAN.clear()
        EXPECTED.clear()
        STATUSES.clear()
        del UNRAISABLE[:]
        self.streams, self.bufs, self.zombies, self.events = [], [], [], []
        self.mods, self.graphs, self.execs, self.preps, self.pools = [], [], [], [], []
        self.graveyard = []          # closed objects: every use must raise ValueError
        self.dropped_mods = []
        self.adopted, self.compiled = [], []     # Kernel.from_handle, Module.from_source
        self.natives = []            # (key, weak ref to its _NativeCell, calls expected)
        NATIVE_SEEN.clear()
        self.old_nodes = []          # nodes of closed graphs
        self.keys = 0
        # Rules that cost more than a step (long captures, spins, threads):
        # each runs at most a few times per example.
        self.heavy = collections.Counter()
        # The model's own choices (fill values, close orders): the same for
        # every replay of a rule sequence, so that a failure replays.
        self.rng = random.Random(25)
        gc.collect()
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        self.before = streams.debug_counters()
        self.pool_before = MemoryPool.default().used_current
        self.defaults = [StreamM(Stream.legacy, "legacy"), StreamM(Stream.per_thread, "per_thread"),
                         StreamM(Stream.null, "null")]
        # One own stream to start with: most rules need one.
        self.streams.append(StreamM(Stream(non_blocking=True), "own", True))

    # ---- helpers -------------------------------------------------------------------------------

    def trace(self, msg):
        if TRACE:
            print(f"  step {STATS['steps']}: {msg}", file=sys.stderr, flush=True)

    def new_key(self):
        self.keys += 1
        return f"k{STATS['examples']}.{self.keys}"

    def usable_streams(self):
        return [s for s in self.streams if s.usable] + self.defaults

    def own_streams(self):
        return [s for s in self.streams if s.kind == "own" and not s.closed]

    def pick(self, items, i):
        return items[i % len(items)]

    def live(self, holders):
        return [h for h in holders if not h.closed]

    def sync(self, sm):
        """``sm.synchronize()``, which raises HostCallbackError once after a
        callback on it raised (safety.rst: "Errors are delivered")."""
        if sm.expect_error:
            sm.expect_error = False
            try:
                sm.obj.synchronize()
            except HostCallbackError as exc:
                assert isinstance(exc.__cause__, FuzzCallbackError), exc
                return
            raise AssertionError(f"{sm}: a host callback raised, synchronize() did not")
        try:
            assert sm.obj.synchronize() is True
        except HostCallbackError:
            # A foreign wrapper of a stream may share that stream's errors.
            if sm.owner is None or not sm.owner.expect_error:
                raise
            sm.owner.expect_error = False

    def use_on(self, sm, bufs, enqueue, user=None):
        """Enqueue on ``sm`` after every earlier use of ``bufs``, and make the
        next use wait for this one."""
        for b in bufs:
            sm.obj.wait_event(b.ready)
        enqueue()
        for b in bufs:
            b.ready.record(sm.obj)
            b.last_user = user

    def new_buffer(self, kind, sm, pool=None):
        if kind == "device":
            obj = DeviceBuffer(NBYTES, stream=sm.obj)
        elif kind == "pool":
            obj = pool.allocate(NBYTES, sm.obj)
        elif kind == "pinned":
            obj = PinnedBuffer(NBYTES)
        else:
            obj = ManagedBuffer(NBYTES)
        value = self.rng.getrandbits(32)
        b = BufM(obj, kind, sm if kind in ("device", "pool") else None,
                 np.full(N, value, dtype=np.uint32), Event())
        # Filled on the stream it was allocated on: its content is known from
        # the start, and the ready event orders every later use after it.
        streams.testing.fill_u32(sm.obj, obj, value, N)
        b.ready.record(sm.obj)
        self.bufs.append(b)
        return b

    def holders(self):
        return self.live(self.graphs) + self.live(self.execs) + self.live(self.preps)

    def order_free(self, b, free_on=None):
        """Order every use of ``b`` before the free (safety.rst, "Buffers and
        stream order"): the stream that frees waits for its ready event; once
        that stream is closed the free runs on the legacy stream, which does
        not wait for non-blocking streams, so the host waits instead."""
        target = free_on if free_on is not None else b.stream
        if target is not None and target.usable:
            target.obj.wait_event(b.ready)
        else:
            b.ready.synchronize()

    def retire_buffer(self, b):
        """``b`` was closed or dropped: a zombie while a holder holds it."""
        b.closed = True
        self.bufs.remove(b)
        if any(b in h.held for h in self.holders()):
            self.zombies.append(b)
        else:
            b.ready.close()

    def release_holder(self, h, how):
        """Close or drop a graph, an executable or a prepared launch; the
        zombies only it held are freed then, in their stream's order, so the
        host waits for their uses unless its own marked launch was the last
        (graphs.rst: kept until every marked launch has ended)."""
        h.closed, h.how = True, how
        others = [o for o in self.holders() if o is not h]
        for z in list(h.held):
            if z in self.zombies and not any(z in o.held for o in others):
                if not (h.kind == "exec" and z.last_user is h):
                    z.ready.synchronize()
        if h.kind == "graph":
            self.old_nodes.extend(node for node, _, _ in h.nodes)
            bodies = list(h.bodies)
            self.rng.shuffle(bodies)
            if how == "close" and self.rng.random() < 0.5:
                h.obj.close()               # the parent first: its bodies keep it
                for body in bodies:
                    body.close()
            else:
                for body in bodies:
                    body.close()
                if how == "close":
                    h.obj.close()
            h.bodies = []
        elif how == "close" and h.kind == "exec":
            h.obj.close()
        if how == "close" and h.kind != "prepared":
            self.graveyard.append(h.obj)
        h.obj = None
        for z in list(self.zombies):
            if not any(z in o.held for o in self.holders()):
                self.zombies.remove(z)
                z.ready.close()

    def release_raw_users(self, pred, how="close"):
        # What refers to memory or a module only by address goes first.
        for h in self.holders():
            if h.kind != "prepared" and pred(h):
                self.release_holder(h, how)

    def close_buffer(self, b, mode, other=None):
        self.release_raw_users(lambda h: b in h.raw)
        if mode == "other" and other.owner is not None:
            # The free may run later (a holder keeps the buffer, a replay
            # runs), on `other`'s handle; a wrapper's handle dies with its
            # owner (safety.rst), which may be closed by then: the owner.
            other = other.owner
        if mode == "other":
            self.order_free(b, other)
            b.obj.close(stream=other.obj)
        elif mode == "drop":
            self.order_free(b)
        else:
            self.order_free(b)
            b.obj.close()
        if mode != "drop":
            self.graveyard.append(b.obj)
        b.obj = None
        self.retire_buffer(b)

    def close_stream(self, sm, how):
        if sm not in self.streams:
            return            # a wrapper closed with its owner
        if how != "drop" and sm.kind == "own":
            # Foreign wrappers of it would dangle now: closed and forgotten
            # (closed first, while the handle they name is alive: a close
            # orders the frees of its buffers after its work).
            for w in [w for w in self.streams if w.owner is sm]:
                w.obj.close()
                w.closed = True
                self.streams.remove(w)
        if how == "close":
            sm.obj.close()
            self.graveyard.append(sm.obj)
        sm.closed = True
        sm.expect_error = False   # delivered to sys.unraisablehook; no synchronize to raise it
        self.streams.remove(sm)
        # The buffers on it keep a reference to it (their free is ordered
        # after its work); the model keeps its StreamM for them.

    def check_buffer(self, b, sm):
        if b.kind in ("pinned", "managed") and self.rng.random() < 0.5:
            b.ready.synchronize()
            view = np.frombuffer(memoryview(b.obj), dtype=np.uint32)
            try:
                got = view.copy()
            finally:
                del view
        else:
            got = np.empty(N, dtype=np.uint32)
            self.use_on(sm, [b], lambda: streams.memcpy_async(got, b.obj, stream=sm.obj))
            self.sync(sm)
        if not np.array_equal(got, b.data):
            bad = np.flatnonzero(got != b.data)
            raise AssertionError(f"{b} holds {got[bad[0]]:#x} at [{bad[0]}] ({len(bad)} wrong), "
                                 f"the model says {b.data[bad[0]]:#x}")

    def check_callbacks(self):
        with RAN_LOCK:
            ran = dict(RAN)
        wrong = {k: (ran.get(k, 0), n) for k, n in EXPECTED.items() if ran.get(k, 0) != n}
        assert not wrong, f"host callbacks ran (times, expected): {wrong}"
        assert all(s is None for s in STATUSES), STATUSES

    # ---- invariants ----------------------------------------------------------------------------

    @invariant()
    def only_our_callbacks_raised(self):
        STATS["steps"] += 1
        bad = [u for u in UNRAISABLE if u[0] is not FuzzCallbackError]
        assert not bad, f"unraisable exceptions: {bad}"

    # ---- streams -------------------------------------------------------------------------------

    @rule(non_blocking=st.booleans(), priority=st.sampled_from([0, -1, -5, 7, 2**40]))
    def new_stream(self, non_blocking, priority):
        ok, s = expect_clean(lambda: Stream(priority=priority, non_blocking=non_blocking),
                             ARG_ERRORS, "Stream(priority=)")
        if ok:
            least, greatest = streams.stream_priority_range()
            assert greatest <= s.priority <= least, (priority, s.priority)
            self.streams.append(StreamM(s, "own", non_blocking))

    @rule(priority=st.sampled_from([0, -1, 7]), keep_context=st.booleans())
    def new_green_stream(self, priority, keep_context):
        # A stream of a green context: every other rule then runs on it too.
        # The context closed at once must live on through its stream.
        dev = streams.Device(streams.get_device())
        try:
            whole = dev.sm_resource()
            parts, _ = dev.split_sm(whole.min_partition_size, groups=1)
        except NotImplementedError:
            return
        ctx = streams.GreenContext(parts[0])
        s = ctx.create_stream(priority=priority)
        assert s.sm_count == parts[0].sm_count
        if not keep_context:
            ctx.close()
        sm = StreamM(s, "own", True)
        sm.own_green = True
        self.streams.append(sm)

    @precondition(lambda self: self.own_streams())
    @rule(i=st.integers(0, 64), via=st.sampled_from(["from_handle", "cuda_stream", "torch"]))
    def wrap_foreign_stream(self, i, via):
        owner = self.pick(self.own_streams(), i)
        if via == "from_handle":
            obj = Stream.from_handle(owner.obj.handle, owner=owner.obj)
        elif via == "cuda_stream":
            obj = Stream.from_external(_Proto(owner.obj))
        else:
            torch = TORCH.get("module")     # STREAMS_FUZZ_TORCH=1
            if torch is None:
                return
            ts = torch.cuda.ExternalStream(owner.obj.handle)
            obj = Stream.from_external(ts)
        assert obj == owner.obj and obj is not owner.obj
        self.streams.append(StreamM(obj, "foreign", owner.non_blocking, owner=owner))

    @precondition(lambda self: self.streams)
    @rule(i=st.integers(0, 64), how=st.sampled_from(["close", "drop"]))
    def close_stream_rule(self, i, how):
        # Pending work completes (cudaStreamDestroy); buffers on it are freed
        # later after its work (safety.rst, "Closed streams").
        sm = self.pick(self.streams, i)
        self.trace(f"{how} {sm}")
        self.close_stream(sm, how)

    @rule(i=st.integers(0, 64), us=st.sampled_from(SPIN_US))
    def spin(self, i, us):
        sm = self.pick(self.usable_streams(), i)
        streams.testing.spin(sm.obj, us)

    @rule(i=st.integers(0, 64), timeout=st.sampled_from([None, 10.0, math.inf, 1e300]))
    def synchronize_stream(self, i, timeout):
        sm = self.pick(self.usable_streams(), i)
        if timeout is None:
            self.sync(sm)
        elif not sm.pending_error:
            assert sm.obj.synchronize(timeout=timeout) is True

    @rule(i=st.integers(0, 64), j=st.integers(0, 64))
    def wait_stream(self, i, j):
        a, b = self.pick(self.usable_streams(), i), self.pick(self.usable_streams(), j)
        a.obj.wait_stream(b.obj)

    # ---- events --------------------------------------------------------------------------------

    @rule(blocking=st.booleans(), i=st.integers(0, 64))
    def new_event_and_record(self, blocking, i):
        ev = Event(blocking=blocking)
        ev.record(self.pick(self.usable_streams(), i).obj)
        self.events.append(ev)

    @precondition(lambda self: self.events)
    @rule(e=st.integers(0, 64), i=st.integers(0, 64),
          op=st.sampled_from(["record", "wait", "synchronize", "query", "wait_event"]))
    def use_event(self, e, i, op):
        ev, sm = self.pick(self.events, e), self.pick(self.usable_streams(), i)
        if op == "record":
            sm.obj.record(ev)
        elif op == "wait":
            ev.wait(sm.obj)
        elif op == "wait_event":
            sm.obj.wait_event(ev)
        elif op == "synchronize":
            assert ev.synchronize(timeout=10) is True
            assert ev.query()
        else:
            ev.query()

    @precondition(lambda self: self.events)
    @rule(e=st.integers(0, 64), how=st.sampled_from(["close", "drop"]))
    def close_event(self, e, how):
        ev = self.pick(self.events, e)
        self.events.remove(ev)
        if how == "close":
            ev.close()
            self.graveyard.append(ev)

    # ---- buffers -------------------------------------------------------------------------------

    @rule(kind=st.sampled_from(["device", "device", "pool", "pinned", "managed"]),
          i=st.integers(0, 64))
    def new_buffer_rule(self, kind, i):
        # Not on foreign wrappers: their handle dies with their owner, and a
        # buffer's free would then run on a dead handle (the caller's fault).
        # Nor on the per-thread stream: a release run on another thread would
        # free on that thread's per-thread stream.
        choices = self.own_streams() + [d for d in self.defaults if d.kind != "per_thread"]
        sm = self.pick(choices, i)
        pool = None
        if kind == "pool":
            if not self.pools:
                self.pools.append(MemoryPool())
            pool = self.pools[-1]
        self.new_buffer(kind, sm, pool)

    @precondition(lambda self: self.pools)
    @rule(how=st.sampled_from(["close", "drop"]))
    def close_pool(self, how):
        # Allowed while buffers are out: CUDA releases it once they are freed.
        pool = self.pools.pop()
        if how == "close":
            pool.close()

    @precondition(lambda self: self.bufs)
    @rule(b=st.integers(0, 64), i=st.integers(0, 64),
          op=st.sampled_from(["fill", "fill_mod", "inc", "memset", "copy"]),
          value=st.integers(0, UINT32_MAX), c=st.integers(0, 64))
    def write_buffer(self, b, i, op, value, c):
        buf, sm = self.pick(self.bufs, b), self.pick(self.usable_streams(), i)
        if op == "fill":
            self.use_on(sm, [buf], lambda: streams.testing.fill_u32(sm.obj, buf.obj, value, N))
            buf.data[:] = value
        elif op == "fill_mod":
            mods = [m for m in self.mods if not m.closed]
            if not mods:
                return
            k = self.pick(mods, c).fill
            self.use_on(sm, [buf], lambda: sm.obj.launch(k, 1, N, buf.obj, value, N))
            buf.data[:] = value
        elif op == "inc":
            self.use_on(sm, [buf], lambda: streams.testing.increment_u32(sm.obj, buf.obj, N))
            buf.data[:] += 1
        elif op == "memset" and buf.kind != "pinned":
            byte = value & 0xFF
            self.use_on(sm, [buf], lambda: streams.memset_async(buf.obj, byte, stream=sm.obj))
            buf.data[:] = byte * 0x01010101
        elif op == "copy":
            src = self.pick(self.bufs, c)
            if src is buf:
                return
            self.use_on(sm, [buf, src],
                        lambda: streams.memcpy_async(buf.obj, src.obj, stream=sm.obj))
            buf.data[:] = src.data

    @precondition(lambda self: self.bufs)
    @rule(b=st.integers(0, 64), i=st.integers(0, 64))
    def check_buffer_rule(self, b, i):
        self.check_buffer(self.pick(self.bufs, b), self.pick(self.usable_streams(), i))

    @precondition(lambda self: self.bufs)
    @rule(b=st.integers(0, 64), mode=st.sampled_from(["own", "other", "drop"]),
          i=st.integers(0, 64))
    def close_buffer_rule(self, b, mode, i):
        buf = self.pick(self.bufs, b)
        if mode == "other" and buf.kind not in ("device", "pool"):
            mode = "own"
        other = self.pick(self.usable_streams(), i)
        self.trace(f"close {buf} ({mode})")
        self.close_buffer(buf, mode, other)

    @precondition(lambda self: any(b.kind in ("device", "pool") for b in self.bufs))
    @rule(b=st.integers(0, 64), dead=st.sampled_from(["closed own", "closed new"]))
    def close_buffer_on_closed_stream(self, b, dead):
        """``close(stream=a closed stream)``: refused, or freed after the
        buffer's own work; never at once (a buffer freed under its own work).  Slow
        work then a fill on its own stream, a fresh buffer on another stream
        right after: the fill must not land in the fresh buffer."""
        buf = self.pick([x for x in self.bufs if x.kind in ("device", "pool")], b)
        closed = [s for s in self.graveyard if isinstance(s, Stream)]
        if dead == "closed new" or not closed:
            gone = Stream(non_blocking=True)
            gone.close()
        else:
            gone = closed[-1]
        self.release_raw_users(lambda h: buf in h.raw)
        own = buf.stream
        value = self.rng.getrandbits(32) | 1
        if own.usable:
            self.use_on(own, [buf], lambda: (streams.testing.spin(own.obj, 2000),
                                            streams.testing.fill_u32(own.obj, buf.obj, value, N)))
            buf.data[:] = value
            own.obj.wait_event(buf.ready)
        else:
            buf.ready.synchronize()
        ok, _ = expect_clean(lambda: buf.obj.close(stream=gone), ARG_ERRORS,
                             "DeviceBuffer.close(stream=closed)")
        if not buf.obj.closed:
            assert not ok
            return
        self.graveyard.append(buf.obj)
        buf.obj = None
        self.retire_buffer(buf)
        probe_stream = Stream(non_blocking=True)
        probe = DeviceBuffer(NBYTES, stream=probe_stream)
        streams.memset_async(probe, 0, stream=probe_stream)
        probe_stream.synchronize()
        streams.synchronize_device()
        host = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(host, probe, stream=probe_stream)
        probe_stream.synchronize()
        probe.close()
        probe_stream.synchronize()
        probe_stream.close()
        assert (host == 0).all(), "a buffer closed with stream=<closed> was freed under its work"

    @precondition(lambda self: any(b.kind in ("device", "pool") for b in self.bufs))
    @rule(b=st.integers(0, 64), i=st.integers(0, 64), close_first=st.booleans())
    def dlpack_export(self, b, i, close_first):
        # A DLPack consumer keeps the memory: close() marks it closed at once
        # and the capsule's deleter frees it (safety.rst, "DLPack consumers").
        buf = self.pick([x for x in self.bufs if x.kind in ("device", "pool")], b)
        sm = self.pick(self.usable_streams(), i)
        sm.obj.wait_event(buf.ready)
        capsule = buf.obj.__dlpack__(stream=sm.obj.handle if sm.obj.handle else 1)
        buf.ready.record(sm.obj)
        if close_first:
            self.close_buffer(buf, "own")
        del capsule

    @precondition(lambda self: any(b.kind in ("device", "pool") for b in self.bufs))
    @rule(b=st.integers(0, 64), i=st.integers(0, 64), key_stream=st.integers(0, 64))
    def drop_buffer_in_callback(self, b, i, key_stream):
        # The last reference goes on CUDA's callback thread: the free is
        # deferred to a safe thread (architecture.rst, deferred releases).
        buf = self.pick([x for x in self.bufs if x.kind in ("device", "pool")], b)
        sm = self.pick(self.usable_streams(), i)
        self.release_raw_users(lambda h: buf in h.raw)
        self.order_free(buf)
        key = self.new_key()
        EXPECTED[key] += 1
        obj, buf.obj = buf.obj, None
        self.retire_buffer(buf)
        sm.obj.launch_host_func(holding_cb, (key, obj))
        del obj

    # ---- host callbacks and asyncio ------------------------------------------------------------

    @rule(i=st.integers(0, 64), kind=st.sampled_from(["count", "count", "raise", "status"]))
    def host_callback(self, i, kind):
        sm = self.pick(self.usable_streams(), i)
        key = self.new_key()
        EXPECTED[key] += 1
        if kind == "status":
            sm.obj.add_callback(status_cb, key)
        elif kind == "raise" and sm.kind == "own":
            sm.obj.launch_host_func(raising_cb, key)
            sm.expect_error = True
        else:
            sm.obj.launch_host_func(count_cb, key)

    @rule(i=st.integers(0, 64), what=st.sampled_from(["event", "stream", "cancel"]),
          us=st.sampled_from(SPIN_US))
    def await_work(self, i, what, us):
        # Awaits complete once the work is done; a cancelled await leaves
        # nothing behind (memory.rst, asyncio).
        sm = self.pick(self.usable_streams(), i)
        if sm.pending_error:
            return
        streams.testing.spin(sm.obj, us)
        ev = sm.obj.record()

        async def main():
            if what == "event":
                await ev
                assert ev.query(), "await returned before the event's work was done"
            elif what == "stream":
                await sm.obj
            else:
                try:
                    await asyncio.wait_for(sm.obj.wait_async(), 0.0002)
                except asyncio.TimeoutError:
                    pass

        asyncio.run(main())
        ev.close()

    # ---- modules, kernels, prepared launches ---------------------------------------------------

    @precondition(lambda self: len([m for m in self.mods if not m.closed]) < 2)
    @rule()
    def new_module(self):
        m = ModM(streams.testing.builtin_module())
        # Its kernels run once now: no lazy loading inside a capture later.
        scratch = DeviceBuffer(NBYTES, stream=Stream.legacy)
        Stream.legacy.launch(m.fill, 1, N, scratch, 0, N)
        Stream.legacy.launch(m.inc, 1, N, scratch, N)
        Stream.legacy.launch(m.empty, 1, 1)
        scratch.close()
        Stream.legacy.synchronize()
        self.mods.append(m)

    @precondition(lambda self: [m for m in self.mods if not m.closed])
    @rule(m=st.integers(0, 64), how=st.sampled_from(["close", "drop"]))
    def close_module(self, m, how):
        # Captured kernels do not keep their module loaded: what captured
        # them goes first.  Kernel nodes keep it (graphs.rst).
        mod = self.pick([x for x in self.mods if not x.closed], m)
        if how == "close":
            self.release_raw_users(lambda h: mod in h.raw_mods)
            mod.closed = True
            mod.obj.close()
            self.graveyard.append(mod.fill)    # launching it raises ValueError
        else:
            # Forgotten: its kernels (prepared launches, the model's captured
            # graphs) keep it loaded; closed in the teardown.
            self.mods.remove(mod)
            self.dropped_mods.append(mod)

    @precondition(lambda self: self.bufs and [m for m in self.mods if not m.closed])
    @rule(m=st.integers(0, 64), b=st.integers(0, 64))
    def prepare_launch(self, m, b):
        mod = self.pick([x for x in self.mods if not x.closed], m)
        buf = self.pick(self.bufs, b)
        h = HolderM(mod.inc.prepare(1, N, buf.obj, N), "prepared")
        h.held.append(buf)
        h.ops.append([("inc", buf), True])
        h.mod = mod
        self.preps.append(h)

    @precondition(lambda self: self.live(self.preps))
    @rule(p=st.integers(0, 64), i=st.integers(0, 64))
    def launch_prepared(self, p, i):
        # A prepared launch holds its buffers (closed ones too), not its module.
        h = self.pick(self.live(self.preps), p)
        sm = self.pick(self.usable_streams(), i)
        if h.mod.closed:
            expect_closed(lambda: h.obj.launch(sm.obj), "prepared launch of a closed module")
            return
        self.use_on(sm, h.held, lambda: h.obj.launch(sm.obj), user=h)
        apply_ops(h.ops)

    @precondition(lambda self: self.live(self.preps))
    @rule(p=st.integers(0, 64))
    def drop_prepared(self, p):
        h = self.pick(self.live(self.preps), p)
        self.preps.remove(h)
        self.release_holder(h, "drop")

    # ---- graphs --------------------------------------------------------------------------------

    def _graph_op(self, g, h, kind, rnd, deps):
        """Add one node (or a few, for conditionals and memory) of ``kind``
        to ``g`` after ``deps``; return the last node."""
        bufs = self.bufs
        value = rnd.getrandbits(32)
        b = rnd.choice(bufs)
        dev = [x for x in bufs if x.kind in ("device", "pool")]
        if kind == "fill":
            node = g.add_kernel_node("fill_u32", 1, N, b.obj, value, N, dependencies=deps)
            h.ops.append([("fill", b, value), True])
            h.held.append(b)
            h.nodes.append((node, len(h.ops) - 1, "fill"))
        elif kind == "fill_mod":
            mods = [m for m in self.mods if not m.closed]
            if not mods:
                return deps
            node = g.add_kernel_node(rnd.choice(mods).fill, 1, N, b.obj, value, N,
                                     dependencies=deps)
            h.ops.append([("fill", b, value), True])
            h.held.append(b)
            h.nodes.append((node, len(h.ops) - 1, "fill_mod"))
        elif kind == "inc":
            node = g.add_kernel_node("increment_u32", 1, N, b.obj, N, dependencies=deps)
            h.ops.append([("inc", b), True])
            h.held.append(b)
            h.nodes.append((node, len(h.ops) - 1, "inc"))
        elif kind == "memset" and dev:
            b = rnd.choice(dev)
            node = g.add_memset_node(b.obj, value & 0xFF, NBYTES, dependencies=deps)
            h.ops.append([("memset", b, value & 0xFF), True])
            h.raw.append(b)      # documented: memset nodes do not hold their memory in use
            h.nodes.append((node, len(h.ops) - 1, "memset"))
        elif kind == "copy" and len(dev) > 1:
            d, s = rnd.sample(dev, 2)
            node = g.add_memcpy_node(d.obj, s.obj, NBYTES, dependencies=deps)
            h.ops.append([("copy", d, s), True])
            h.raw += [d, s]
        elif kind == "host":
            key = self.new_key()
            node = g.add_host_node(count_cb, key, dependencies=deps)
            h.ops.append([("host", key), True])
        elif kind == "if" and _cond_nodes_supported():
            cond = g.create_condition()
            flag, target = rnd.choice(bufs), rnd.choice(bufs)
            setter = g.add_kernel_node("set_condition", 1, 1, cond, flag.obj, dependencies=deps)
            node, body = g.add_if(cond, dependencies=[setter])
            h.bodies.append(body)
            body.add_kernel_node("fill_u32", 1, N, target.obj, value, N)
            h.ops.append([("if", flag, [("fill", target, value)]), True])
            h.held += [flag, target]
            h.conditional = True
        elif kind == "while" and _cond_nodes_supported():
            cond = g.create_condition()
            start, n = rnd.randrange(4), rnd.randrange(1, 6)
            fill = g.add_kernel_node("fill_u32", 1, N, b.obj, start, N, dependencies=deps)
            check = g.add_kernel_node("set_condition_lt", 1, 1, cond, b.obj, n,
                                      dependencies=[fill])
            node, body = g.add_while(cond, dependencies=[check])
            h.bodies.append(body)
            step = body.add_kernel_node("increment_u32", 1, 1, b.obj, 1)
            body.add_kernel_node("set_condition_lt", 1, 1, cond, b.obj, n, dependencies=[step])
            h.ops.append([("fill", b, start), True])
            h.ops.append([("while", b, n), True])
            h.held.append(b)
            h.conditional = True
        elif kind == "mem":
            # Graph memory: allocated, filled, copied out and freed by the graph.
            alloc = g.add_mem_alloc(NBYTES, dependencies=deps)
            fill = g.add_kernel_node("fill_u32", 1, N, alloc, value, N, dependencies=[alloc.node])
            copy = g.add_memcpy_node(b.obj, alloc, NBYTES, dependencies=[fill])
            node = g.add_mem_free(alloc, dependencies=[copy])
            h.ops.append([("fill", b, value), True])
            h.raw.append(b)
            h.mem_nodes = True
        else:
            node = g.add_empty_node(dependencies=deps)
        return [node]

    @precondition(lambda self: self.bufs)
    @rule(rnd=st.randoms(use_true_random=False),
          kinds=st.lists(st.sampled_from(["fill", "fill_mod", "inc", "memset", "copy", "host",
                                          "if", "while", "mem", "empty"]),
                         min_size=1, max_size=4))
    def build_graph(self, rnd, kinds):
        g = Graph()
        h = HolderM(g, "graph")
        self.graphs.append(h)
        deps = ()
        for kind in kinds:
            deps = self._graph_op(g, h, kind, rnd, deps)
        h.made = f"step {STATS['steps']}: built {kinds}"
        self.trace(f"graph {[op[0][0] for op in h.ops]}")

    @precondition(lambda self: self.bufs and [s for s in self.own_streams() if s.non_blocking])
    @rule(rnd=st.randoms(use_true_random=False), i=st.integers(0, 64),
          mode=st.sampled_from(["global", "thread_local", "relaxed"]),
          kinds=st.lists(st.sampled_from(["fill", "fill_mod", "inc", "memset", "copy", "host",
                                          "callback"]), min_size=1, max_size=4))
    def capture_graph(self, rnd, i, mode, kinds):
        # Captured work holds nothing (safety.rst, Capture): its buffers and
        # modules are raw references.  A non-blocking stream: the legacy
        # stream never joins the capture.
        sm = self.pick([s for s in self.own_streams() if s.non_blocking], i)
        h = HolderM(None, "graph")
        s = sm.obj
        s.begin_capture(mode)
        try:
            for kind in kinds:
                b, value = rnd.choice(self.bufs), rnd.getrandbits(32)
                dev = [x for x in self.bufs if x.kind in ("device", "pool")]
                mods = [m for m in self.mods if not m.closed]
                if kind == "fill":
                    streams.testing.fill_u32(s, b.obj, value, N)
                    h.ops.append([("fill", b, value), True])
                elif kind == "fill_mod" and mods:
                    mod = rnd.choice(mods)
                    s.launch(mod.fill, 1, N, b.obj, value, N)
                    h.ops.append([("fill", b, value), True])
                    h.raw_mods.append(mod)
                elif kind == "inc":
                    streams.testing.increment_u32(s, b.obj, N)
                    h.ops.append([("inc", b), True])
                elif kind == "memset" and b.kind != "pinned":
                    streams.memset_async(b.obj, value & 0xFF, stream=s)
                    h.ops.append([("memset", b, value & 0xFF), True])
                elif kind == "copy" and len(dev) > 1:
                    d, src = rnd.sample(dev, 2)
                    streams.memcpy_async(d.obj, src.obj, stream=s)
                    h.ops.append([("copy", d, src), True])
                elif kind == "host":
                    key = self.new_key()
                    s.launch_host_func(count_cb, key)   # a graph-owned host node
                    h.ops.append([("host", key), True])
                elif kind == "callback":
                    # Refused during a capture; the capture survives.
                    with pytest.raises(RuntimeError):
                        s.add_callback(status_cb, "never")
                    assert s.is_capturing()
                    continue
                else:
                    continue
                h.raw += op_bufs(h.ops[-1][0])
        finally:
            if s.capture_status != streams.CaptureStatus.NONE:
                g = s.end_capture()
        h.obj = g
        h.green = sm.green
        h.made = f"step {STATS['steps']}: captured {kinds} ({mode}) on {s!r}"
        self.graphs.append(h)

    @precondition(lambda self: self.live(self.graphs))
    @rule(gi=st.integers(0, 64), auto_free=st.booleans(), upload=st.integers(-1, 64))
    def instantiate(self, gi, auto_free, upload):
        gm = self.pick(self.live(self.graphs), gi)
        up = None if upload < 0 else self.pick(self.usable_streams(), upload).obj
        if (gm.mem_nodes or gm.conditional) and gm.instantiated:
            # One executable at a time for such a graph (CUDA's rule); one
            # closed may still be running its replays, so only a live one
            # makes the refusal certain.
            if [e for e in self.live(self.execs) if e.graph is gm]:
                with pytest.raises(CudaError, match="one executable at a time"):
                    gm.obj.instantiate(auto_free_on_launch=auto_free, upload_stream=up)
            return
        if TRACE_RULES:
            self.trace(f"instantiate the graph of {gm.made}, {len(self.live(self.graphs))} live, "
                       f"{gm.instantiated} executables before; upload to {up!r}")
            for node in gm.obj.nodes:
                self.trace(f"  node {node.type.name}")
                if node.type == streams.NodeType.KERNEL:
                    p = node.kernel_params()
                    self.trace(f"    function {p.function:#x} kernel {p.kernel_handle:#x} "
                               f"name {p.name}")
        ex = gm.obj.instantiate(auto_free_on_launch=auto_free, upload_stream=up)
        gm.instantiated += 1
        h = HolderM(ex, "exec")
        h.graph = gm
        h.ops = [[op, on] for op, on in gm.ops]
        h.held, h.raw, h.raw_mods = list(gm.held), list(gm.raw), list(gm.raw_mods)
        self.execs.append(h)

    @precondition(lambda self: self.live(self.execs))
    @rule(e=st.integers(0, 64), i=st.integers(0, 64), times=st.integers(1, 3))
    def launch_exec(self, e, i, times):
        h = self.pick(self.live(self.execs), e)
        sm = self.pick(self.usable_streams(), i)
        bufs = list(dict.fromkeys(h.refs()))
        for _ in range(times):
            self.use_on(sm, bufs, lambda: h.obj.launch(sm.obj), user=h)
            apply_ops(h.ops)

    @precondition(lambda self: [h for h in self.live(self.execs) if h.graph.nodes] and self.bufs)
    @rule(e=st.integers(0, 64), n=st.integers(0, 64), b=st.integers(0, 64),
          value=st.integers(0, UINT32_MAX), what=st.sampled_from(["kernel", "enable", "disable",
                                                                  "memset"]))
    def update_exec_node(self, e, n, b, value, what):
        # Per-node updates take effect from the next launch; they name the
        # node by the graph's node, and that graph must be open (graphs.rst).
        h = self.pick([x for x in self.live(self.execs) if x.graph.nodes], e)
        node, index, tag = self.pick(h.graph.nodes, n)
        buf = self.pick(self.bufs, b)
        if h.graph.how == "close":
            # (A dropped graph lives on: its nodes hold it.)
            expect_refusal(lambda: h.obj.set_enabled(node, True), "", (ValueError, TypeError),
                           "update naming a node of a closed graph")
            return
        if what in ("enable", "disable"):
            h.obj.set_enabled(node, what == "enable")
            h.ops[index][1] = what == "enable"
            assert h.obj.is_enabled(node) == (what == "enable")
        elif what == "kernel" and tag == "fill":
            # The same kernel, new arguments; what they bring is held.
            h.obj.set_kernel_node(node, "fill_u32", 1, N, buf.obj, value, N)
            h.ops[index][0] = ("fill", buf, value)
            h.held.append(buf)
        elif what == "kernel" and tag == "inc":
            h.obj.set_kernel_node(node, "increment_u32", 1, N, buf.obj, N)
            h.ops[index][0] = ("inc", buf)
            h.held.append(buf)
        elif what == "memset" and tag == "memset" and buf.kind in ("device", "pool"):
            h.obj.set_memset_node(node, buf.obj, value & 0xFF, NBYTES)
            h.ops[index][0] = ("memset", buf, value & 0xFF)
            h.raw.append(buf)

    @precondition(lambda self: [h for h in self.live(self.execs) if not h.graph.nodes]
                  and self.bufs)
    @rule(e=st.integers(0, 64), n=st.integers(0, 64), b=st.integers(0, 64),
          value=st.integers(0, UINT32_MAX), what=st.sampled_from(["pointer", "value", "both"]))
    def change_captured_kernel_args(self, e, n, b, value, what):
        # A node of a captured graph, found by what it launches, gets some of
        # its arguments changed in the executable (graphs.rst, "Changing
        # captured graphs"); the graph's node keeps what was captured.
        h = self.pick([x for x in self.live(self.execs) if not x.graph.nodes], e)
        gm = h.graph
        if gm.closed or gm.obj is None or gm.obj.closed:
            return
        sig = "pointer, uint32, uint64"
        fills = []
        for nd in gm.obj.nodes:
            if nd.type != "kernel":
                continue
            p = nd.kernel_params()
            if p.param_sizes == (8, 4, 8):
                fills.append((nd, p.values(sig)))
        if not fills:
            return
        node, (ptr, old, count) = self.pick(fills, n)
        # The op this node is: one fill of that buffer with that value, and
        # no other node that looks the same (else which one is unknown).
        same = [f for f in fills if f[1] == (ptr, old, count)]
        index = [i for i, (op, _) in enumerate(gm.ops)
                 if op[0] == "fill" and getattr(op[1].obj, "ptr", None) == ptr and op[2] == old]
        if len(same) != 1 or len(index) != 1 or count != N:
            return
        i = index[0]
        buf = self.pick(self.bufs, b)
        target, new = h.ops[i][0][1], h.ops[i][0][2]
        changes = {}
        if what in ("pointer", "both"):
            changes[0] = buf.obj
            target = buf
        if what in ("value", "both"):
            changes[1] = value
            new = value
        self.trace(f"change captured fill {i}: {changes}")
        if gm.green:
            # Nodes of a green context's capture cannot be changed in place
            # (graphs.rst): refused before CUDA, the executable unchanged.
            exc = expect_refusal(lambda: h.obj.set_kernel_node_args(node, changes), "node",
                                 ValueError, "set_kernel_node_args(node of a green capture)")
            assert "green context" in str(exc), exc
            # The whole-kernel setter (the runtime's path, which crashed
            # the driver) and the graph's own node too.
            for fn in (lambda: h.obj.set_kernel_node(node, "fill_u32", 1, N, buf.obj, value, N),
                       lambda: node.set_args(changes)):
                exc = expect_refusal(fn, "node", ValueError, "change of a green capture's node")
                assert "green context" in str(exc), exc
            assert node.kernel_params().values(sig) == (ptr, old, count)
            return
        h.obj.set_kernel_node_args(node, changes)
        h.ops[i][0] = ("fill", target, new)
        if what != "value":
            h.held.append(buf)
        assert node.kernel_params().values(sig) == (ptr, old, count)

    @precondition(lambda self: self.holders())
    @rule(x=st.integers(0, 64), how=st.sampled_from(["close", "drop"]))
    def close_graph_or_exec(self, x, how):
        h = self.pick([y for y in self.holders() if y.kind != "prepared"], x) \
            if [y for y in self.holders() if y.kind != "prepared"] else None
        if h is None:
            return
        self.trace(f"{how} {h}")
        self.release_holder(h, how)

    @precondition(lambda self: self.old_nodes or len(self.live(self.graphs)) > 1)
    @rule(n=st.integers(0, 64), where=st.sampled_from(["new graph", "open graph", "exec"]))
    def foreign_node(self, n, where):
        # A node belongs to one graph: a node of a closed graph (whose handle
        # a new graph may get) or of another graph is refused.
        nodes = self.old_nodes or [nd for nd, _, _ in self.live(self.graphs)[0].nodes]
        if not nodes:
            return
        node = self.pick(nodes, n)
        if where == "exec":
            execs = [h for h in self.live(self.execs)
                     if node not in [x for x, _, _ in h.graph.nodes]]
            if not execs:
                return
            expect_refusal(lambda: execs[0].obj.set_enabled(node, True), ("node", "closed"),
                           (ValueError, TypeError), "GraphExec.set_enabled(foreign node)")
            return
        if where == "open graph":
            others = [h for h in self.live(self.graphs)
                      if node not in [x for x, _, _ in h.nodes]]
            target = others[0].obj if others else None
        else:
            target = None
        made = target is None
        g = Graph() if made else target
        try:
            expect_refusal(lambda: g.add_empty_node(dependencies=[node]),
                           ("dependencies", "closed"),
                           (ValueError, TypeError), "add_empty_node(dependencies=[foreign])")
        finally:
            if made:
                g.close()

    # ---- threads -------------------------------------------------------------------------------

    @precondition(lambda self: self.own_streams())
    @rule(i=st.integers(0, 64), mode=st.sampled_from(["thread_local", "relaxed"]),
          main_ops=st.lists(st.sampled_from(["host_func", "callback", "await", "record"]),
                            min_size=1, max_size=6))
    def thread_captures_while_main_enqueues(self, i, mode, main_ops):
        """A second thread captures host functions on its own stream while
        this thread enqueues on another: each lands where it was enqueued
        (host functions racing captures)."""
        other = self.pick(self.own_streams(), i)
        private = Stream(non_blocking=True)
        key_graph = self.new_key()
        started, result = threading.Event(), {}

        def capture():
            try:
                private.begin_capture(mode)
                started.set()
                for _ in range(3):
                    private.launch_host_func(count_cb, key_graph)
                    time.sleep(0.0005)
                result["graph"] = private.end_capture()
            except BaseException as exc:   # reported below, on the main thread
                result["error"] = exc
            finally:
                started.set()

        t = threading.Thread(target=capture)
        t.start()
        started.wait(10)
        key_main = self.new_key()
        for op in main_ops:
            if op == "host_func":
                other.obj.launch_host_func(count_cb, key_main)
                EXPECTED[key_main] += 1
            elif op == "callback":
                other.obj.add_callback(status_cb, key_main)
                EXPECTED[key_main] += 1
            elif op == "await" and not other.pending_error:
                asyncio.run(other.obj.wait_async())
            else:
                other.obj.record().close()
        t.join(30)
        assert not t.is_alive(), "the capturing thread hangs"
        if "error" in result:
            raise result["error"]
        g = result.pop("graph")
        ex = g.instantiate()
        for _ in range(2):     # a one-shot payload would be used after free by the 2nd replay
            ex.launch(private)
            EXPECTED[key_graph] += 3
        private.synchronize()
        ex.close()
        g.close()
        private.close()

    @precondition(lambda self: [s for s in self.own_streams() if not s.expect_error])
    @rule(i=st.integers(0, 64), op=st.sampled_from(["synchronize", "query", "record", "spin"]),
          victim=st.sampled_from(["stream", "event"]))
    def thread_closes_while_main_uses(self, i, op, victim):
        # close() on another thread: calls inside finish, later ones raise
        # ValueError naming the closed object (safety.rst).
        sm = self.pick([s for s in self.own_streams() if not s.expect_error], i)
        ev = Event()
        ev.record(sm.obj)
        closing = sm.obj if victim == "stream" else ev
        go = threading.Barrier(2)

        def closer():
            go.wait()
            closing.close()

        t = threading.Thread(target=closer)
        t.start()
        go.wait()
        for _ in range(20):
            try:
                if op == "synchronize":
                    (sm.obj if victim == "stream" else ev).synchronize()
                elif op == "query":
                    (sm.obj if victim == "stream" else ev).query()
                elif op == "record":
                    ev.record(sm.obj)
                else:
                    streams.testing.spin(sm.obj, 10)
            except ValueError as exc:
                assert "closed" in str(exc), exc
                break
        t.join(30)
        ev.close()
        if victim == "stream":
            self.close_stream(sm, "closed by a thread")
            self.graveyard.append(sm.obj)

    @precondition(lambda self: self.bufs)
    @rule(b=st.integers(0, 64), value=st.integers(0, UINT32_MAX), launch=st.booleans(),
          e=st.integers(0, 64))
    def thread_enqueues(self, b, value, launch, e):
        # Work from another thread on its own per-thread default stream,
        # ordered by the same events.
        buf = self.pick(self.bufs, b)
        execs = self.live(self.execs)
        errors = []

        def work():
            try:
                pt = StreamM(Stream.per_thread, "per_thread")
                if launch and execs:
                    h = self.pick(execs, e)
                    bufs = list(dict.fromkeys(h.refs()))
                    self.use_on(pt, bufs, lambda: h.obj.launch(pt.obj), user=h)
                    apply_ops(h.ops)
                else:
                    self.use_on(pt, [buf],
                                lambda: streams.testing.fill_u32(pt.obj, buf.obj, value, N))
                    buf.data[:] = value
                pt.obj.synchronize()
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=work)
        t.start()
        t.join(30)
        assert not t.is_alive()
        if errors:
            raise errors[0]

    # ---- garbage collection --------------------------------------------------------------------

    @rule()
    def collect(self):
        gc.collect()

    @precondition(lambda self: self.own_streams())
    @rule(i=st.integers(0, 64), with_exec=st.booleans())
    def cycle_through_foreign_stream(self, i, with_exec):
        """A buffer (and an executable holding it) in a reference cycle
        through a foreign wrapper's owner, collected by the cyclic GC: no
        field may be cleared under a release that still needs it (a cyclic-GC
        use-after-free in GraphExec/DeviceBuffer)."""
        sm = self.pick(self.own_streams(), i)
        # Settled first: garbage and releases parked by earlier steps go
        # now, not inside the count below.
        gc.collect()
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        before = streams.debug_counters()
        box = []
        w = Stream.from_handle(sm.obj.handle, owner=box)
        buf = DeviceBuffer(NBYTES, stream=w)
        streams.testing.fill_u32(w, buf, 7, N)
        box.append(buf)
        if with_exec:
            g = Graph()
            g.add_kernel_node("increment_u32", 1, N, buf, N)
            ex = g.instantiate()
            box += [g, ex]
            ex.launch(sm.obj)          # on the same stream: ordered before the free
            del g, ex
        del w, buf, box
        gc.collect()                   # while the owner stream is open
        # Collected, and (after the executable's marked launch) released;
        # one left would free on the wrapper's handle after its owner closed.
        deadline = time.monotonic() + 3.0
        keys = ("live_buffers", "live_graphs", "live_graph_execs")
        while True:
            streams.synchronize_device()
            streams._cudart._drain_deferred()
            after = streams.debug_counters()
            if all(after[k] == before[k] for k in keys) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
            gc.collect()
        assert all(after[k] == before[k] for k in keys), (
            "a reference cycle of streams objects was not collected: "
            + ", ".join(f"{k} {before[k]} -> {after[k]}" for k in keys))

    # ---- __new__ objects, edges, raw stream handles --------------------------------------------

    @rule(cls=st.sampled_from(["Stream", "Event", "DeviceBuffer", "PinnedBuffer", "ManagedBuffer",
                               "MemoryPool", "Graph", "GraphExec", "Module", "Kernel",
                               "PreparedLaunch", "GraphNode", "ConditionHandle",
                               "GraphAllocation", "StreamPool", "EventPool"]),
          call=st.integers(0, 64), i=st.integers(0, 64))
    def new_object(self, cls, call, i):
        """An object made with ``__new__`` owns nothing: every use, as self or
        as an argument, raises ValueError/TypeError (architecture.rst), never
        writes through a missing field."""
        klass = getattr(streams, cls)
        ok, obj = expect_clean(lambda: klass.__new__(klass), (TypeError,), f"{cls}.__new__")
        if not ok:
            return
        sm = self.pick(self.usable_streams(), i)
        scratch_graph = Graph()
        uses = _new_object_uses(cls, obj, sm.obj, scratch_graph)
        try:
            name, fn = uses[call % len(uses)]
            self.trace(f"{cls}.__new__ -> {name}")
            if cls == "GraphAllocation":
                # Not a handle owner: an address (0) and a size (0), which
                # CUDA may refuse; it must not crash.
                expect_clean(fn, NEW_OBJECT_ERRORS + (CudaError,), f"{cls}.__new__: {name}")
            else:
                ok, _ = expect_clean(fn, NEW_OBJECT_ERRORS, f"{cls}.__new__: {name}")
                assert not ok or name in _MAY_WORK, f"{cls}.__new__: {name} worked"
        finally:
            scratch_graph.close()
        del obj, uses
        gc.collect()

    @rule(api=st.sampled_from(["launch", "launch_ex", "prepare", "graph"]),
          which=st.sampled_from(["shared_mem", "grid", "block"]),
          value=st.sampled_from(EDGE_INTS + (0, 16, 1025, 48 * 1024 + 1)),
          i=st.integers(0, 64))
    def edge_launch_args(self, api, which, value, i):
        """Values beyond the C type (unsigned int) are refused naming the
        argument, never truncated (shared_mem=2**32+16 was); values the
        C type holds but the device cannot run fail with ValueError or CUDA's
        error."""
        sm = self.pick(self.usable_streams(), i)
        empty = streams._launch.builtin_kernel("empty")
        cfg = {"grid": 1, "block": 1, "shared_mem": 0}
        cfg[which] = value
        g = Graph() if api == "graph" else None

        def call():
            if api == "launch":
                sm.obj.launch(empty, cfg["grid"], cfg["block"], shared_mem=cfg["shared_mem"])
            elif api == "launch_ex":
                sm.obj.launch_ex(empty, streams.LaunchConfig(cfg["grid"], cfg["block"],
                                                             cfg["shared_mem"]))
            elif api == "prepare":
                empty.prepare(cfg["grid"], cfg["block"], shared_mem=cfg["shared_mem"])
            else:
                g.add_kernel_node(empty, cfg["grid"], cfg["block"],
                                  shared_mem=cfg["shared_mem"])
        try:
            lowest = 0 if which == "shared_mem" else 1
            if value < lowest or value > UINT32_MAX:
                expect_refusal(call, which, ARG_ERRORS, f"{api}({which}={value})")
            elif (which == "shared_mem" and value <= 16) or (which != "shared_mem"
                                                              and value == 1):
                call()
            else:
                expect_clean(call, ARG_ERRORS + (CudaError,), f"{api}({which}={value})")
        finally:
            if g is not None:
                g.close()

    @rule(what=st.sampled_from(["nbytes", "memset value", "kernel value", "timeout",
                                "pool nbytes", "device", "priority"]),
          value=st.sampled_from(EDGE_INTS + (0, 256, float("nan"), -1.5, "1")),
          i=st.integers(0, 64))
    def edge_other_args(self, what, value, i):
        sm = self.pick(self.usable_streams(), i)
        is_int = isinstance(value, int)
        if what in ("nbytes", "pool nbytes"):
            make = (lambda: DeviceBuffer(value, stream=sm.obj)) if what == "nbytes" else \
                (lambda: MemoryPool.default().allocate(value, sm.obj))
            if not is_int or value < 0 or value >= 2**64:
                expect_refusal(make, "nbytes", ARG_ERRORS, f"{what}={value!r}")
            elif 1 << 20 <= value < 1 << 40:
                pass    # gigabytes that would be allocated: no edge of a C type here
            else:
                # In range: works, or CUDA cannot allocate that much.
                ok, buf = expect_clean(make, (CudaError, ValueError, MemoryError), what)
                if ok:
                    buf.close()
        elif what == "memset value" and self.bufs:
            b = self.pick(self.bufs, i)
            if is_int and 0 <= value <= 255 and b.kind != "pinned":
                byte = value
                self.use_on(sm, [b], lambda: streams.memset_async(b.obj, byte, stream=sm.obj))
                b.data[:] = byte * 0x01010101
            elif not (is_int and 0 <= value <= 255):
                expect_refusal(lambda: streams.memset_async(b.obj, value, stream=sm.obj),
                               "value", ARG_ERRORS, f"memset_async(value={value!r})")
        elif what == "kernel value" and self.bufs and is_int:
            b = self.pick(self.bufs, i)
            fill = streams._launch.builtin_kernel("fill_u32")
            if -2**31 <= value <= UINT32_MAX:
                # Fits 32 bits: a negative one may be taken as its bit pattern
                # (CUDA reports sizes, not types: safety.rst).
                ok, _ = expect_clean(lambda: self.use_on(sm, [b], lambda: sm.obj.launch(
                    fill, 1, N, b.obj, value, N)), ARG_ERRORS, f"fill_u32 value={value}")
                if ok:
                    b.data[:] = value & UINT32_MAX
            else:
                # Kernel arguments are named by position, not by keyword.
                expect_refusal(lambda: sm.obj.launch(fill, 1, N, b.obj, value, N), "",
                               ARG_ERRORS, f"fill_u32 value={value!r}")
        elif what == "timeout":
            if sm.pending_error:
                return
            if isinstance(value, str):
                expect_refusal(lambda: sm.obj.synchronize(timeout=value), "", (TypeError,))
            elif value != value or value < 0:
                expect_refusal(lambda: sm.obj.synchronize(timeout=value), "", (ValueError,))
            else:
                # Any nonnegative timeout works; huge ones mean no limit.
                assert isinstance(sm.obj.synchronize(timeout=value), bool)
        elif what == "device":
            ok, s = expect_clean(lambda: Stream(device=value), ARG_ERRORS + (CudaError,),
                                 f"Stream(device={value!r})")
            if ok:
                s.close()
                assert not is_int or 0 <= value < streams.device_count(), (
                    f"Stream(device={value!r}) made a stream on device {s.device_id}")
        elif what == "priority":
            ok, s = expect_clean(lambda: Stream(priority=value), ARG_ERRORS,
                                 f"Stream(priority={value!r})")
            if ok:
                least, greatest = streams.stream_priority_range()
                assert greatest <= s.priority <= least
                s.close()

    @precondition(lambda self: any(b.kind in ("device", "pool") for b in self.bufs))
    @rule(b=st.integers(0, 64), c=st.integers(0, 64), i=st.integers(0, 64),
          value=st.sampled_from([0x10, 3, 0xFFFF, 0x10003, -2, 2**64, 0, 1, 2, -1]),
          where=st.sampled_from(["dlpack", "cai", "from_handle"]))
    def raw_stream_ints(self, b, c, i, value, where):
        """A raw stream int that cannot be a handle (0x10, 3, unaligned,
        negative, too large) is refused before CUDA sees it (``__dlpack__(stream=)`` and
        ``__cuda_array_interface__['stream']``)."""
        dev = [x for x in self.bufs if x.kind in ("device", "pool")]
        buf, src = self.pick(dev, b), self.pick(dev, c)
        sm = self.pick(self.usable_streams(), i)
        valid = value in (1, 2) or (value == -1 and where == "dlpack")
        if where == "from_handle":
            if value in (0, 1, 2):
                assert Stream.from_handle(value).handle == value
            else:
                expect_refusal(lambda: Stream.from_handle(value), "ptr", ARG_ERRORS,
                               f"Stream.from_handle({value:#x})")
        elif where == "dlpack":
            if valid:
                # The consumer (legacy/per-thread stream, or none) is ordered
                # after the buffer's stream; this one is ordered after ready.
                buf.obj.__dlpack__(stream=value)
            else:
                expect_refusal(lambda: buf.obj.__dlpack__(stream=value), "stream",
                               ARG_ERRORS + (BufferError,), f"__dlpack__(stream={value:#x})")
        else:
            if src is buf:
                return
            if valid:
                # The copy waits for the named (default) stream; the model's
                # own ordering covers the buffers' earlier uses.
                self.use_on(sm, [buf, src], lambda: streams.memcpy_async(
                    buf.obj, _CAI(src.obj, value), NBYTES, stream=sm.obj))
                buf.data[:] = src.data
            else:
                expect_refusal(lambda: streams.memcpy_async(buf.obj, _CAI(src.obj, value),
                                                            NBYTES, stream=sm.obj),
                               ("src", "stream"), ARG_ERRORS, f"CAI stream {value:#x}")

    @precondition(lambda self: self.graveyard)
    @rule(x=st.integers(0, 64), i=st.integers(0, 64))
    def use_closed_object(self, x, i):
        # Any later use of a closed object raises ValueError (streams-and-events.rst).
        obj = self.pick(self.graveyard, x)
        sm = self.pick(self.usable_streams(), i)
        if isinstance(obj, Stream):
            expect_closed(lambda: streams.testing.spin(obj, 1), "spin on a closed Stream")
            expect_closed(obj.synchronize, "Stream.synchronize")
        elif isinstance(obj, Event):
            expect_closed(lambda: obj.record(sm.obj), "Event.record")
            expect_closed(lambda: sm.obj.wait_event(obj), "Stream.wait_event(closed)")
        elif isinstance(obj, DeviceBuffer):
            expect_closed(lambda: streams.memset_async(obj, 0, stream=sm.obj), "memset(closed)")
            expect_closed(lambda: obj.__dlpack__(), "__dlpack__ of a closed buffer")
        elif isinstance(obj, (PinnedBuffer, ManagedBuffer)):
            expect_closed(lambda: obj.ptr, "ptr of a closed buffer")
        elif isinstance(obj, Graph):
            expect_closed(obj.instantiate, "Graph.instantiate")
        elif isinstance(obj, GraphExec):
            expect_closed(lambda: obj.launch(sm.obj), "GraphExec.launch")
        elif isinstance(obj, streams.Kernel):
            expect_closed(lambda: sm.obj.launch(obj, 1, 1, None, 0, 0),
                          "kernel of a closed Module")

    # ---- adopted kernels (Kernel.from_handle) ---------------------------------------------------

    @precondition(lambda self: len(self.adopted) < 3)
    @rule(owner_early=st.booleans(), cycle=st.booleans())
    def adopt_kernel(self, owner_early, cycle):
        owner = _FuzzOwner()
        k = Kernel.from_handle(owner.handle, kind="kernel", owner=owner,
                               signature="pointer, uint32, uint64")
        assert k.owner is owner and k.module is None and k.kind == "kernel"
        a = AdoptM(k, owner, cycle)
        if cycle:
            owner.kernel = k        # owner -> kernel -> stand-in module -> owner
        if owner_early:
            a.owner = None          # only the kernel keeps it now
        del owner, k
        gc.collect()
        assert a.owner_ref() is not None, "an adopted kernel lost its owner"
        self.adopted.append(a)

    @precondition(lambda self: self.adopted)
    @rule(a=st.integers(0, 64), via=st.sampled_from(["launch", "launch_ex", "prepare", "graph",
                                                     "exec"]),
          value=st.integers(0, UINT32_MAX), threaded=st.booleans())
    def launch_adopted(self, a, via, value, threaded):
        am = self.pick(self.adopted, a)
        assert am.owner_ref() is not None, f"{am}: the owner went while the kernel lives"
        run = lambda: fill_and_read(am.kernel, value, via, am.execs)   # noqa: E731
        got = in_thread(run) if threaded else run()
        assert (got == value).all(), f"{am} via {via}: wrote {got[0]:#x}, not {value:#x}"

    @precondition(lambda self: [a for a in self.adopted if a.execs])
    @rule(a=st.integers(0, 64), value=st.integers(0, UINT32_MAX))
    def relaunch_adopted_exec(self, a, value):
        # An executable keeps the kernel (and so its owner) after the
        # kernel object itself may be gone.
        am = self.pick([x for x in self.adopted if x.execs], a)
        s = Stream(non_blocking=True)
        try:
            am.execs[-1].launch(s)
            s.synchronize()
        finally:
            s.close()

    @precondition(lambda self: self.adopted)
    @rule(a=st.integers(0, 64), keep_execs=st.booleans())
    def drop_adopted(self, a, keep_execs):
        am = self.adopted.pop(a % len(self.adopted))
        ref, execs = am.owner_ref, am.execs
        am.kernel = am.owner = None
        am.execs = []
        gc.collect()
        if keep_execs and execs:
            assert ref() is not None, "a graph executable that holds the kernel lost its owner"
            s = Stream(non_blocking=True)
            try:
                execs[-1].launch(s)
                s.synchronize()
            finally:
                s.close()
        for ex in execs:
            ex.close()
        # The loop variable would keep the last (closed) executable, and with
        # it what its graph's nodes held: the kernel's owner among them.
        del execs
        ex = None
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        gc.collect()
        assert ref() is None, f"{am}: its owner outlived every user of the kernel"

    # ---- compiled modules (Module.from_source) ----------------------------------------------

    @precondition(lambda self: have_nvrtc() and len([c for c in self.compiled if not c.closed]) < 2)
    @rule(variant=st.integers(0, 2), threaded=st.booleans())
    def compile_module(self, variant, threaded):
        source = FUZZ_SOURCE + f"\n// variant {variant}\n"
        make = lambda: Module.from_source(source, name_expressions=(FUZZ_EXPR,))  # noqa: E731
        self.compiled.append(CompM(in_thread(make) if threaded else make()))

    @precondition(lambda self: self.compiled)
    @rule(c=st.integers(0, 64), via=st.sampled_from(["launch", "launch_ex", "prepare", "graph"]),
          value=st.integers(0, UINT32_MAX), threaded=st.booleans())
    def launch_compiled(self, c, via, value, threaded):
        cm = self.pick(self.compiled, c)
        run = lambda: fill_and_read(cm.kernel, value, via)   # noqa: E731
        if cm.closed:
            expect_closed(run, "kernel of a closed compiled module")
            return
        got = in_thread(run) if threaded else run()
        assert (got == value).all(), f"compiled kernel via {via}: wrote {got[0]:#x}"

    @precondition(lambda self: [c for c in self.compiled if not c.closed])
    @rule(c=st.integers(0, 64), how=st.sampled_from(["close", "drop"]))
    def close_compiled(self, c, how):
        cm = self.pick([x for x in self.compiled if not x.closed], c)
        if how == "close":
            cm.obj.close()
            cm.closed = True         # its kernel stays in the model: using it must raise
        else:
            self.compiled.remove(cm)
            cm.obj = cm.kernel = None
            gc.collect()

    # ---- native host functions (no Python on CUDA's thread) ------------------------------------

    @precondition(lambda self: len(self.natives) < 8)
    @rule(i=st.integers(0, 64), form=st.sampled_from(["address", "ctypes", "ctypes_data"]),
          via=st.sampled_from(["stream", "graph", "capture"]), us=st.sampled_from(SPIN_US),
          times=st.integers(1, 3), threaded=st.booleans(), owner_early=st.booleans(),
          cycle=st.booleans(), end=st.sampled_from(["close", "drop"]))
    def native_host_func(self, i, form, via, us, times, threaded, owner_early, cycle, end):
        """A C function counts into memory its owner holds; the owner is
        dropped early or kept, in a reference cycle or not, the enqueue made
        on another thread or not.  Every call runs (its owner reads the count
        when it goes) and the owner goes once nothing can call the function
        again (checked at teardown, with NATIVE_SEEN)."""
        global HOST_FN
        import ctypes
        if HOST_FN is None:
            HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        sm = self.pick(self.usable_streams(), i)
        key = self.new_key()
        cell = _NativeCell(key)
        native = streams.testing.native_increment
        fn = native if form == "address" else HOST_FN(native)
        data = ctypes.c_void_p(cell.ptr) if form == "ctypes_data" else cell.ptr
        if cycle:
            cell.cycle = (cell, fn, data)      # owner -> itself (and the code, the data)
        replays = times if via != "stream" else 1
        calls = times if via == "stream" else 1
        self.natives.append((key, weakref.ref(cell), calls * replays))
        self.trace(f"native {form} via {via} x{times} on {sm}")

        def enqueue():
            if via == "stream":
                streams.testing.spin(sm.obj, us)
                for _ in range(times):
                    sm.obj.launch_host_func(fn, data, owner=cell)
                return None
            if via == "graph":
                g = Graph()
                try:
                    g.add_host_node(fn, data, owner=cell)
                    return g.instantiate()
                finally:
                    g.close()
            cap = Stream(non_blocking=True)
            try:
                cap.begin_capture("thread_local")
                try:
                    cap.launch_host_func(fn, data, owner=cell)
                finally:
                    g = cap.end_capture()
                try:
                    return g.instantiate()
                finally:
                    g.close()
            finally:
                cap.close()

        ex = in_thread(enqueue) if threaded else enqueue()
        if owner_early:
            # Only the library holds the owner now (the calls, the graph's
            # node, the executable).
            del cell, fn, data
            gc.collect()
        if ex is not None:
            streams.testing.spin(sm.obj, us)
            for _ in range(replays):
                ex.launch(sm.obj)
            if end == "close":
                ex.close()
            del ex                 # dropped: the executable goes with its last reference
            gc.collect()
        self.sync(sm)
        if threaded and via == "stream" and sm.kind == "per_thread":
            # The call went to the other thread's per-thread default stream,
            # not this one's: only a device-wide synchronize waits for it.
            streams.synchronize_device()
        if not owner_early:
            assert cell.cell.value == calls * replays, \
                f"native {form} via {via}: counted {cell.cell.value}, not {calls * replays}"

    def check_natives(self, errors):
        """Every native call ran, and every owner went once nothing could
        call its function again."""
        deadline = time.monotonic() + 5.0
        while any(ref() is not None for _, ref, _ in self.natives) and time.monotonic() < deadline:
            streams.synchronize_device()
            streams._cudart._drain_deferred()
            gc.collect()
            time.sleep(0.01)
        for key, ref, expected in self.natives:
            if ref() is not None:
                errors.append(AssertionError(f"native cell {key}: its owner outlived every call"))
            elif NATIVE_SEEN.get(key) != expected:
                errors.append(AssertionError(
                    f"native cell {key}: counted {NATIVE_SEEN.get(key)}, not {expected}"))
        self.natives = []

    # ---- long captures: the keep-the-GIL budget must never touch a capture ---------------------

    @precondition(lambda self: self.heavy["long_capture"] < 1)
    @rule(seed=st.integers(0, 2**32 - 1), n_ops=st.sampled_from([1000, 1300, 2000]),
          mode=st.sampled_from(["global", "thread_local", "relaxed"]),
          busy=st.sampled_from([0, 300]), fresh=st.booleans(), i=st.integers(0, 64),
          replays=st.integers(1, 2))
    def long_capture(self, seed, n_ops, mode, busy, fresh, i, replays):
        """A capture of ``n_ops`` counted enqueues (kernel launches by every
        path, prepared and graph launches, records, waits, a fork to a second
        stream and its joins) while another stream holds counted work not yet
        done (behind a spin) and gets more during the capture: every enqueue
        is captured, the capture ends, and each replay of the graph computes
        what the model says.  Fails where an enqueue past the keep-the-GIL
        budget (256) queries a stream while a capture runs, which CUDA
        refuses by invalidating the capture: the enqueue raises CudaError,
        or end_capture does."""
        # The rule's own draws (up to thousands) come from one seed: a
        # hypothesis Random would take each from the example's bounded data.
        rnd = random.Random(seed)
        self.heavy["long_capture"] += 1
        inc = streams._launch.builtin_kernel("increment_u32")
        fill = streams._launch.builtin_kernel("fill_u32")
        empty = streams._launch.builtin_kernel("empty")
        # A green stream's capture is left to capture_graph: graph launches
        # of the primary context into it are not what this rule is about.
        own = [x for x in self.own_streams() if x.non_blocking and not x.green]
        private = fresh or not own
        s = Stream(non_blocking=True) if private else self.pick(own, i).obj
        r, t = Stream(non_blocking=True), Stream(non_blocking=True)
        u = Stream(non_blocking=True) if busy else None
        a, b = DeviceBuffer(NBYTES, stream=r), DeviceBuffer(NBYTES, stream=r)
        start = {"a": self.rng.getrandbits(31), "b": self.rng.getrandbits(31)}
        streams.testing.fill_u32(r, a, start["a"], N)
        streams.testing.fill_u32(r, b, start["b"], N)
        # Two graphs of one increment of a: a capture of a kernel (holds
        # nothing) and a kernel node (holds its buffer).  Launched into the
        # capture as executables where CUDA captures graph launches, else
        # embedded as child graph nodes (capture_info), the documented way.
        tmp = Stream(non_blocking=True)
        tmp.begin_capture("thread_local")
        try:
            streams.testing.increment_u32(tmp, a, N)
        finally:
            g0 = tmp.end_capture()
        tmp.close()
        g1 = Graph()
        g1.add_kernel_node("increment_u32", 1, N, a, N)
        execs, children = [], [g0, g1]
        if graph_launch_capturable() is None:
            execs = [g.instantiate() for g in children]
            for g in children:
                g.close()
            children = []
        preps = {"a": inc.prepare(1, N, a, N), "b": inc.prepare(1, N, b, N)}
        events = [Event() for _ in range(4)]
        r.synchronize()
        if busy:
            streams.testing.spin(u, rnd.choice([2000, 50_000]))
            for _ in range(busy):
                u.launch(empty, 1, 1)       # counted, not seen done
        ops = {"a": [], "b": []}            # per replay: ("inc",) or ("fill", v)
        counted = 0
        forked = unjoined = False
        recorded = None                     # an event recorded in this capture on s
        self.trace(f"long capture of {n_ops} on {'a new stream' if private else s!r} ({mode}), "
                   f"{busy} counted on another stream")
        s.begin_capture(mode)
        try:
            while counted < n_ops or unjoined:
                if counted >= n_ops:
                    kind = "join"
                else:
                    kind = rnd.choices(
                        ["inc", "launch", "launch_ex", "prepared", "graph", "fill", "record",
                         "wait", "fork", "t", "join", "busy"],
                        [20, 20, 10, 10, 6, 2, 8, 6, 2, 10, 3, 4])[0]
                if kind == "inc":
                    streams.testing.increment_u32(s, a, N)
                    ops["a"].append(("inc",))
                elif kind == "launch":
                    s.launch(inc, 1, N, a, N)
                    ops["a"].append(("inc",))
                elif kind == "launch_ex":
                    s.launch_ex(inc, LaunchConfig(1, N), a, N)
                    ops["a"].append(("inc",))
                elif kind == "prepared":
                    preps["a"].launch(s)
                    ops["a"].append(("inc",))
                elif kind == "graph" and execs:
                    rnd.choice(execs).launch(s)
                    ops["a"].append(("inc",))
                elif kind == "graph" and children:
                    # A graph embedded where the capture stands; the child
                    # node is a copy: its graph closes while the capture goes on.
                    info = s.capture_info()
                    node = info.graph.add_child_graph_node(rnd.choice(children),
                                                           dependencies=info.dependencies)
                    s.update_capture_dependencies([node], "set")
                    del info, node
                    if rnd.random() < 0.1:
                        children.pop(rnd.randrange(len(children))).close()
                    ops["a"].append(("inc",))
                elif kind == "fill":
                    v = rnd.getrandbits(32)
                    s.launch(fill, 1, N, a, v, N)
                    ops["a"].append(("fill", v))
                elif kind == "record":
                    recorded = rnd.choice(events[:2])
                    s.record(recorded)
                elif kind == "wait" and recorded is not None:
                    s.wait_event(recorded)
                elif kind == "fork" and not forked:
                    s.record(events[2])
                    t.wait_event(events[2])           # t joins the capture
                    forked = True
                elif kind == "t" and forked:
                    if rnd.random() < 0.5:
                        t.launch(inc, 1, N, b, N)
                    else:
                        preps["b"].launch(t)
                    ops["b"].append(("inc",))
                    unjoined = True
                elif kind == "join" and unjoined:
                    t.record(events[3])
                    s.wait_event(events[3])
                    unjoined = False
                elif kind == "busy" and busy:
                    u.launch(empty, 1, 1)             # not captured: u is not in it
                    continue
                else:
                    continue
                counted += 1
        except BaseException:
            if s.capture_status != streams.CaptureStatus.NONE:
                try:
                    s.end_capture().close()
                except CudaError:
                    pass
            raise
        g = s.end_capture()
        assert s.capture_status == streams.CaptureStatus.NONE
        assert t.capture_status == streams.CaptureStatus.NONE, "the forked stream stays captured"
        ex = g.instantiate()
        g.close()
        want = {k: np.full(N, start[k], dtype=np.uint32) for k in start}
        for _ in range(replays):
            ex.launch(r)
            for k in want:
                for op in ops[k]:
                    if op[0] == "inc":
                        want[k] += 1
                    else:
                        want[k][:] = op[1]
        for k, buf in (("a", a), ("b", b)):
            got = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(got, buf, stream=r)
            r.synchronize()
            assert np.array_equal(got, want[k]), (
                f"a capture of {counted} enqueues ({len(ops[k])} on {k}), replayed {replays} "
                f"times, left {got[0]} in {k}, the model says {want[k][0]}")
        ex.close()
        for x in execs + events + children:
            x.close()
        preps.clear()
        r.synchronize()
        a.close()
        b.close()
        for x in (r, t, u) + ((s,) if private else ()):
            if x is not None:
                x.close()

    # ---- kernel nodes added to a capture through capture_info ----------------------------------

    @precondition(lambda self: self.heavy["capture_info"] < 2)
    @rule(value=st.integers(0, UINT32_MAX - 1), keep=st.sampled_from(["graph", "exec", "both"]),
          deps=st.sampled_from(["set", "add"]), before=st.booleans(), replays=st.integers(1, 3),
          mode=st.sampled_from(["global", "thread_local", "relaxed"]))
    def capture_info_node_keeps(self, value, keep, deps, before, replays, mode):
        """A kernel node added to a capture's graph through
        ``capture_info().graph`` (CUDA's pattern, with
        ``update_capture_dependencies``) holds its module and buffer as
        every ``add_kernel_node`` node does (docs/safety.rst): closed by
        their owner while the captured graph or its executable lives, both
        stay (debug counters), a buffer allocated then cannot get the node's
        memory, and every replay computes what the model says; once the
        graph and the executable are gone, both are let go.  Fails where
        the node's holds stay with the temporary Graph that capture_info
        made instead of the captured graph: the counters drop at the
        closes, or the replays run unloaded code and write freed memory."""
        self.heavy["capture_info"] += 1
        home, s = Stream(non_blocking=True), Stream(non_blocking=True)
        mod = streams.testing.builtin_module()
        k = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
        tgt, out = DeviceBuffer(NBYTES, stream=home), DeviceBuffer(NBYTES, stream=home)
        home.launch(k, 1, N, tgt, 0, N)      # loaded and run once: no lazy loading in the capture
        streams.memset_async(out, 0, stream=home)
        home.synchronize()
        s.begin_capture(mode)
        try:
            if before:
                streams.testing.launch_empty(s)
            info = s.capture_info()
            assert info.status == streams.CaptureStatus.ACTIVE and info.graph is not None, info
            node = info.graph.add_kernel_node(k, 1, N, tgt, value, N,
                                              dependencies=info.dependencies)
            s.update_capture_dependencies([node], deps)
            # Captured after the node, by address: the node holds tgt.
            streams.testing.increment_u32(s, tgt, N)
            streams.memcpy_async(out, tgt, stream=s)
        except BaseException:
            if s.capture_status != streams.CaptureStatus.NONE:
                s.end_capture().close()
            raise
        g = s.end_capture()
        del info, node
        kernels = [n for n in g.nodes if n.type == "kernel"]
        assert len(kernels) == 2 + before, f"{len(kernels)} kernel nodes, not {2 + before}"
        ex = None
        if keep != "graph":
            ex = g.instantiate()
        if keep == "exec":
            g.close()
        base = settled_counters()
        mod.close()
        tgt.close(stream=home)
        gc.collect()
        streams._cudart._drain_deferred()
        after = streams.debug_counters()
        lost = [key for key in ("live_modules", "live_buffers") if after[key] != base[key]]
        assert not lost, (
            f"the {keep} of a capture kept not the module and buffer of a node added through "
            "capture_info: " + ", ".join(f"{key} {base[key]} -> {after[key]}" for key in lost))
        # Memory allocated now must not be the node's.
        probe = DeviceBuffer(NBYTES, stream=home)
        sentinel = (value + 0x5A5A5A5A) & UINT32_MAX
        streams.testing.fill_u32(home, probe, sentinel, N)
        home.synchronize()
        if ex is None:
            ex = g.instantiate()
        for _ in range(replays):
            ex.launch(s)
        s.synchronize()
        for buf, want, what in ((out, value + 1, "the copy of the node's buffer"),
                                (probe, sentinel, "a buffer allocated after the close")):
            got = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(got, buf, stream=s)
            s.synchronize()
            assert (got == want).all(), f"{what} holds {got[0]:#x}, not {want:#x}"
        ex.close()
        g.close()
        del ex, g, kernels
        expected = dict(base)           # tgt gone, the probe open: as many buffers as then
        expected["live_modules"] -= 1
        after = wait_counters(expected, ("live_modules", "live_buffers"))
        assert after["live_modules"] == expected["live_modules"] and \
            after["live_buffers"] == expected["live_buffers"], (
                "the node's module and buffer outlived the graph and executable: "
                f"live_modules {base['live_modules']} -> {after['live_modules']}, "
                f"live_buffers {base['live_buffers']} -> {after['live_buffers']}")
        probe.close()
        out.close()
        home.synchronize()
        s.close()
        home.close()

    @precondition(lambda self: self.bufs and [m for m in self.mods if not m.closed])
    @rule(b=st.integers(0, 64), m=st.integers(0, 64), value=st.integers(0, UINT32_MAX),
          mode=st.sampled_from(["global", "thread_local", "relaxed"]), exec_first=st.booleans())
    def capture_info_node(self, b, m, value, mode, exec_first):
        """A capture whose only work is a kernel node added through
        ``capture_info().graph`` with a module and a buffer of the model's:
        the graph joins the model as one whose kernel node holds them, so
        the model's own rules close that module and buffer while it, and
        its executables, live and replay."""
        buf = self.pick(self.bufs, b)
        mod = self.pick([x for x in self.mods if not x.closed], m)
        s = Stream(non_blocking=True)
        s.begin_capture(mode)
        try:
            streams.testing.launch_empty(s)
            info = s.capture_info()
            node = info.graph.add_kernel_node(mod.fill, 1, N, buf.obj, value, N,
                                              dependencies=info.dependencies)
            s.update_capture_dependencies([node], "set")
            streams.testing.launch_empty(s)
        finally:
            g = s.end_capture()
        del info, node
        s.close()
        h = HolderM(g, "graph")
        h.ops.append([("fill", buf, value), True])
        h.held.append(buf)              # and the module: not a raw use, unlike a captured launch
        h.made = f"step {STATS['steps']}: a capture_info node ({mode})"
        self.graphs.append(h)
        if exec_first:
            self.instantiate(len(self.live(self.graphs)) - 1, False, -1)

    # ---- kernel-node change sequences against a model -----------------------------------------

    @precondition(lambda self: self.heavy["node_changes"] < 2)
    @rule(seed=st.integers(0, 2**32 - 1), n_nodes=st.integers(1, 3),
          steps=st.lists(st.sampled_from(["set_kernel_node", "set_kernel_node_args",
                                          "set_kernel_node_args", "update", "node_set_args",
                                          "launch", "instantiate"]),
                         min_size=4, max_size=16))
    def kernel_node_changes(self, seed, n_nodes, steps):
        """Random sequences of ``GraphExec.set_kernel_node``,
        ``set_kernel_node_args``, ``update(graph)``, ``GraphNode.set_args``
        on the source graph and on the update's graph, new executables and
        launches, checked after every launch against NodeChangeModel (the
        documented semantics), and the graphs' nodes against theirs after
        every step.  Fails where set_kernel_node_args builds on the source
        graph's node rather than the executable's: after set_kernel_node,
        after update(graph2) or after the graph's own set_args, a launch
        then runs the graph's kernel and arguments (or the graph's change)."""
        # The rule's own draws (up to thousands) come from one seed: a
        # hypothesis Random would take each from the example's bounded data.
        rnd = random.Random(seed)
        self.heavy["node_changes"] += 1
        kernels = {"fill": streams._launch.builtin_kernel("fill_u32"),
                   "inc": streams._launch.builtin_kernel("increment_u32")}
        sigs = {"fill": "pointer, uint32, uint64", "inc": "pointer, uint64"}
        configs = [(1, N), (2, N // 2), (4, N // 4), (1, N // 2), (3, 64)]
        s = Stream(non_blocking=True)
        bufs = [DeviceBuffer(NBYTES, stream=s) for _ in range(3)]
        words = [np.full(N, rnd.getrandbits(32), dtype=np.uint32) for _ in bufs]
        for buf, w in zip(bufs, words):
            streams.testing.fill_u32(s, buf, int(w[0]), N)

        def state(kind):
            grid, block = rnd.choice(configs)
            return {"kind": kind, "buf": rnd.randrange(len(bufs)), "value": rnd.getrandbits(32),
                    "count": rnd.choice([N, N // 2, N // 4 + 1, 1]), "grid": grid, "block": block}

        def args_of(st_):
            tail = (st_["value"], st_["count"]) if st_["kind"] == "fill" else (st_["count"],)
            return (kernels[st_["kind"]], st_["grid"], st_["block"], bufs[st_["buf"]]) + tail

        def capture(states):
            s.begin_capture("thread_local")
            try:
                for st_ in states:
                    k, grid, block, *args = args_of(st_)
                    s.launch(k, grid, block, *args)
            finally:
                g = s.end_capture()
            return g, chain_order([n for n in g.nodes if n.type == "kernel"])

        def changes_for(st_, same_layout):
            # A pointer has one size in both kernels; the other arguments
            # are changed only where the layout is the one captured.
            choices = [0] + ([1, 2] if st_["kind"] == "fill" else [1]) * same_layout
            picked = rnd.sample(choices, rnd.randint(1, len(choices)))
            model, real = {}, {}
            for index in picked:
                if index == 0:
                    j = rnd.randrange(len(bufs))
                    model[0], real[0] = j, bufs[j]
                elif index == 1 and st_["kind"] == "fill":
                    model[1] = real[1] = rnd.getrandbits(32)
                else:
                    model[index] = real[index] = rnd.choice([N, N // 2, 3])
            return model, real

        kinds = [rnd.choice(["fill", "inc"]) for _ in range(n_nodes)]
        graphs = {}
        for name in ("g1", "g2"):
            states = [state(kind) for kind in kinds]
            g, nodes = capture(states)
            assert len(nodes) == n_nodes, f"{len(nodes)} kernel nodes, not {n_nodes}"
            graphs[name] = (g, nodes, states)
        model = NodeChangeModel({name: v[2] for name, v in graphs.items()})
        source = "g1"
        ex = graphs[source][0].instantiate()
        model.instantiate(source)
        done = []

        def check_data(what):
            s.synchronize()
            for j, buf in enumerate(bufs):
                got = np.empty(N, dtype=np.uint32)
                streams.memcpy_async(got, buf, stream=s)
                s.synchronize()
                if not np.array_equal(got, words[j]):
                    bad = np.flatnonzero(got != words[j])
                    raise AssertionError(
                        f"after {done} ({what}): buffer {j} holds {got[bad[0]]:#x} at "
                        f"[{bad[0]}] ({len(bad)} wrong), the model says {words[j][bad[0]]:#x}; "
                        f"executable {model.exec}")

        def check_graphs():
            for name, (g, nodes, _) in graphs.items():
                for i, node in enumerate(nodes):
                    st_ = model.graphs[name][i]
                    p = node.kernel_params()
                    want = args_of(st_)
                    got = (p.grid[0], p.block[0]) + tuple(p.values(sigs[st_["kind"]]))
                    expect = (want[1], want[2], want[3].ptr) + want[4:]
                    assert got == expect, (f"after {done}: node {i} of {name} is {got}, "
                                           f"the graph's model says {expect}")

        try:
            for step in steps:
                i = rnd.randrange(n_nodes)
                nodes = graphs[source][1]
                if step == "set_kernel_node":
                    new = state(rnd.choice(["fill", "inc"]))
                    ex.set_kernel_node(nodes[i], *args_of(new))
                    model.set_kernel_node(i, new)
                    done.append(f"set_kernel_node({i}, {new})")
                elif step == "set_kernel_node_args":
                    st_ = model.exec[i]
                    m, real = changes_for(st_, st_["kind"] == kinds[i])
                    ex.set_kernel_node_args(nodes[i], real)
                    model.set_kernel_node_args(i, m)
                    done.append(f"set_kernel_node_args({i}, {m})")
                elif step == "update":
                    name = rnd.choice(list(graphs))
                    result = ex.update(graphs[name][0])
                    assert result.ok, f"after {done}: update({name}) refused: {result}"
                    model.update(name)
                    done.append(f"update({name})")
                elif step == "node_set_args":
                    name = rnd.choice(list(graphs))
                    m, real = changes_for(model.graphs[name][i], True)
                    graphs[name][1][i].set_args(real)
                    model.set_args(name, i, m)
                    done.append(f"{name}.node[{i}].set_args({m})")
                elif step == "instantiate":
                    ex.close()
                    source = rnd.choice(list(graphs))
                    ex = graphs[source][0].instantiate()
                    model.instantiate(source)
                    done.append(f"instantiate({source})")
                else:
                    for _ in range(rnd.randint(1, 2)):
                        ex.launch(s)
                        model.launch(words)
                        done.append("launch")
                    check_data("launch")
                check_graphs()
            ex.launch(s)
            model.launch(words)
            done.append("launch")
            check_data("the last launch")
        finally:
            ex.close()
            for g, _, _ in graphs.values():
                g.close()
            s.synchronize()
            for buf in bufs:
                buf.close()
            s.close()

    # ---- foreign producers on a stream that is being captured ---------------------------------

    @precondition(lambda self: self.bufs)
    @rule(b=st.integers(0, 64), i=st.integers(0, 64), value=st.integers(0, UINT32_MAX),
          mode=st.sampled_from(["global", "thread_local", "relaxed"]),
          via=st.sampled_from(["cai copy", "cai launch", "dlpack copy", "dlpack launch",
                               "dlpack export"]))
    def foreign_producer_capturing(self, b, i, value, mode, via):
        """An array whose producer stream is being captured (its
        ``__cuda_array_interface__`` v3 names it, or a DLPack producer whose
        stream it is), used by a stream outside the capture: "a capture is
        never broken by a foreign array" (docs/safety.rst).  The use is
        refused (RuntimeError or BufferError, nothing enqueued) or runs with
        the right data; either way the consumer stays out of the capture
        and the capture ends cleanly.  Fails where the consumer waits for
        the capturing stream: that makes it join the capture, its work is
        captured instead of run, and end_capture fails (unjoined)."""
        dst = self.pick(self.bufs, b)
        q = self.pick(self.usable_streams(), i)
        P = Stream(non_blocking=True)
        src = DeviceBuffer(NBYTES, stream=P)
        src_value = self.rng.getrandbits(32)
        streams.testing.fill_u32(P, src, src_value, N)
        made = P.record()
        fill = streams._launch.builtin_kernel("fill_u32")
        capsule = None
        refused = None
        ended = None
        P.begin_capture(mode)
        try:
            streams.testing.launch_empty(P)
            # The consumer is ordered after src's fill by the model: the
            # capture's wait (if any) runs nothing.
            q.obj.wait_event(made)
            try:
                if via == "cai copy":
                    self.use_on(q, [dst], lambda: streams.memcpy_async(
                        dst.obj, _CAI(src, P.handle), NBYTES, stream=q.obj))
                elif via == "cai launch":
                    self.use_on(q, [dst], lambda: q.obj.launch(
                        fill, 1, N, _CAI(dst.obj, P.handle), value, N))
                elif via == "dlpack copy":
                    self.use_on(q, [dst], lambda: streams.memcpy_async(
                        dst.obj, _DL(src), NBYTES, stream=q.obj))
                elif via == "dlpack launch":
                    self.use_on(q, [dst], lambda: q.obj.launch(
                        streams._launch.builtin_kernel("increment_u32"), 1, N, _DL(src), N))
                else:
                    capsule = src.__dlpack__(stream=q.obj.handle or 1)
            except (RuntimeError, BufferError) as exc:
                refused = exc
            status = q.obj.capture_status
            streams.testing.launch_empty(P)
        finally:
            if P.capture_status != streams.CaptureStatus.NONE:
                try:
                    P.end_capture().close()
                except CudaError as exc:
                    ended = exc
        self.trace(f"{via} on {q} of an array of a capturing stream: "
                   f"{'refused' if refused else 'ran'}, consumer {status}")
        assert status == streams.CaptureStatus.NONE, (
            f"{via} on {q}: the consumer joined the capture of the array's producer ({status})")
        assert ended is None, f"{via} on {q}: the producer's capture was broken: {ended}"
        if refused is None:
            if via in ("cai copy", "dlpack copy"):
                dst.data[:] = src_value
            elif via == "cai launch":
                dst.data[:] = value
            elif via == "dlpack launch":
                src_value = (src_value + 1) & UINT32_MAX
            if via in ("cai copy", "dlpack copy", "cai launch"):
                self.check_buffer(dst, q)
        del capsule
        # src's last user is q (or nobody): its free on P comes after.
        P.wait_stream(q.obj)
        got = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(got, src, stream=P)
        P.synchronize()
        assert (got == src_value).all(), (
            f"{via}: the producer's array holds {got[0]:#x}, not {src_value:#x}")
        src.close()
        made.close()
        P.close()

    # ---- closes while another thread is inside a call on the object ---------------------------

    @precondition(lambda self: self.heavy["close_inside"] < 2)
    @rule(what=st.sampled_from(["capture into graph", "capture into graph on a thread",
                                "add_kernel_node", "exec launch", "stream enqueue",
                                "stream synchronize"]),
          delay=st.sampled_from([0.0, 0.0005, 0.003]), value=st.integers(1, 2**31),
          mode=st.sampled_from(["thread_local", "relaxed"]))
    def close_with_user_inside(self, what, delay, value, mode):
        """``close()`` while another call is inside the object (docs/safety.rst,
        "Closing from another thread"): calls inside finish with a valid
        handle, later ones raise ValueError naming the closed object, the
        work that was enqueued runs (the data says so), and what the object
        held is let go: a closed Graph lets go of its nodes' modules and
        buffers even while the object is still referenced (its docstring),
        and once everything is closed the debug counters are back where
        they were.  Fails where a Graph closed while a capture into it is in
        progress, or a node is being added, keeps its nodes' module and
        buffers for as long as the closed object is referenced."""
        self.heavy["close_inside"] += 1
        before = settled_counters()
        errors = []

        def on_thread(fn):
            def run():
                try:
                    fn()
                except BaseException as exc:    # raised on the main thread below
                    errors.append(exc)
            t = threading.Thread(target=run)
            t.start()
            return t

        def joined(t):
            t.join(30)
            assert not t.is_alive(), f"{what}: the thread inside the call hangs"
            if errors:
                raise errors[0]

        def closed_error(exc):
            assert isinstance(exc, ValueError) and "closed" in str(exc), (
                f"{what}: a call after close() raised {type(exc).__name__}: {exc}")

        s = Stream(non_blocking=True)
        buf = DeviceBuffer(NBYTES, stream=s)
        streams.memset_async(buf, 0, stream=s)
        if what in ("capture into graph", "capture into graph on a thread", "add_kernel_node"):
            # The graph's kernel nodes hold a module of their own and buf.
            mod = streams.testing.builtin_module()
            k = mod.get_kernel("streams_fill_u32", signature="pointer, uint32, uint64")
            s.launch(k, 1, N, buf, 0, N)
            s.synchronize()
            g = Graph()
            g.add_kernel_node(k, 1, N, buf, value, N)
            if what == "capture into graph":
                s.begin_capture_to_graph(g, mode=mode)   # the graph is in use until the end
                streams.testing.launch_empty(s)
                g.close()
                assert g.closed
                try:
                    s.end_capture()                      # the last user: destroys the handle
                except ValueError as exc:
                    assert "closed during the capture" in str(exc), exc
                else:
                    raise AssertionError("end_capture returned a graph closed during it")
                assert s.capture_status == "none"
            elif what == "capture into graph on a thread":
                begun, closed = threading.Event(), threading.Event()

                def capture():
                    s.begin_capture_to_graph(g, mode=mode)
                    begun.set()
                    try:
                        closed.wait(10)
                        streams.testing.launch_empty(s)
                    finally:
                        try:
                            s.end_capture()
                        except ValueError as exc:       # closed during the capture
                            assert "closed during the capture" in str(exc), exc

                t = on_thread(capture)
                begun.wait(10)
                g.close()
                closed.set()
                joined(t)
            else:
                def add_nodes():
                    for _ in range(100_000):
                        try:
                            g.add_kernel_node(k, 1, N, buf, value, N)
                        except ValueError as exc:
                            closed_error(exc)
                            return
                    raise AssertionError("add_kernel_node on a closed Graph never raised")

                t = on_thread(add_nodes)
                time.sleep(delay)
                g.close()
                joined(t)
            # The closed graph is still referenced (g): what its nodes held
            # goes with the close.
            s.synchronize()
            base = settled_counters()
            assert base["live_graphs"] == before["live_graphs"], (
                f"{what}: the closed graph's handle was never destroyed")
            mod.close()
            buf.close()
            after = wait_counters({**base, "live_modules": base["live_modules"] - 1,
                                   "live_buffers": base["live_buffers"] - 1},
                                  ("live_modules", "live_buffers"))
            assert after["live_modules"] == base["live_modules"] - 1 and \
                after["live_buffers"] == base["live_buffers"] - 1, (
                    f"{what}: a closed Graph, still referenced, keeps what its nodes held: "
                    f"live_modules {base['live_modules']} -> {after['live_modules']}, "
                    f"live_buffers {base['live_buffers']} -> {after['live_buffers']}")
            del g, k, mod
        elif what == "exec launch":
            g = Graph()
            g.add_kernel_node("increment_u32", 1, N, buf, N)
            ex = g.instantiate()
            g.close()
            ran = [0]

            def launches():
                for _ in range(100_000):
                    try:
                        ex.launch(s)
                    except ValueError as exc:
                        closed_error(exc)
                        return
                    ran[0] += 1
                raise AssertionError("launch of a closed GraphExec never raised")

            t = on_thread(launches)
            time.sleep(delay)
            ex.close()
            joined(t)
            got = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(got, buf, stream=s)
            s.synchronize()
            assert (got == ran[0] % 2**32).all(), (
                f"{what}: {ran[0]} launches returned, the buffer counted {got[0]}")
            del ex, g
            buf.close()
        else:
            home = Stream(non_blocking=True)
            data = DeviceBuffer(NBYTES, stream=home)
            streams.memset_async(data, 0, stream=home)
            home.synchronize()
            s.synchronize()
            last = [0]
            if what == "stream enqueue":
                def fills():
                    for n in range(1, 100_000):
                        try:
                            streams.testing.fill_u32(s, data, n, N)
                        except ValueError as exc:
                            closed_error(exc)
                            return
                        last[0] = n
                    raise AssertionError("an enqueue on a closed Stream never raised")
            else:
                streams.testing.spin(s, 20_000)
                streams.testing.fill_u32(s, data, value, N)

                def fills():
                    try:
                        assert s.synchronize() is True
                        last[0] = value
                    except ValueError as exc:
                        closed_error(exc)     # it started after the close
                        last[0] = value                 # the fill still runs
            t = on_thread(fills)
            time.sleep(delay or 0.002)
            buf.close()                 # on s, before it closes
            s.close()
            joined(t)
            streams.synchronize_device()
            got = np.empty(N, dtype=np.uint32)
            streams.memcpy_async(got, data, stream=home)
            home.synchronize()
            assert (got == last[0]).all(), (
                f"{what}: the last enqueue that returned wrote {last[0]}, the buffer holds "
                f"{got[0]}")
            data.close()
            home.close()
        s.close()
        keys = HANDLE_KEYS + (("live_allocations", "live_module_loads")
                              if before["debug_build"] else ())
        after = wait_counters(before, keys)
        changed = [key for key in keys if after[key] != before[key]]
        assert not changed, f"{what}: not given back: " + ", ".join(
            f"{key} {before[key]} -> {after[key]}" for key in changed)

    # ---- green contexts closed with work still queued -------------------------------------------

    @precondition(lambda self: self.bufs and self.heavy["green_close"] < 1)
    @rule(b=st.integers(0, 64), value=st.integers(0, UINT32_MAX),
          order=st.sampled_from(["context first", "stream first", "drop both"]),
          spin_ms=st.sampled_from([0, 200]))
    def green_close_under_work(self, b, value, order, spin_ms):
        """A spin then a fill of a model buffer on a green context's stream,
        then the stream and the context closed (or dropped) at once: the
        close does not wait for the spin (docs/safety.rst: closing a stream
        waits for a driver lock, never for the GPU), the fill runs and the
        buffer holds its value, and the context is destroyed once its work
        is done (debug counters).  A no-op where the device has no green
        contexts (said at the end of the run).  Fails where the stream's
        close destroys the context under its queued work (the fill is lost,
        an error, a crash) or waits for that work."""
        dev = streams.Device(streams.get_device())
        try:
            whole = dev.sm_resource()
            parts, _ = dev.split_sm(whole.min_partition_size, groups=1)
            ctx = streams.GreenContext(parts[0])
        except NotImplementedError as exc:
            note("green_close_under_work", f"no green contexts here: {exc}")
            return
        self.heavy["green_close"] += 1
        buf = self.pick(self.bufs, b)
        # Counted with the context: it must be gone once its work is done.
        before = settled_counters()["live_green_contexts"] - 1
        gs = ctx.create_stream()
        gs.wait_event(buf.ready)
        t_spin = time.monotonic()
        streams.testing.spin(gs, spin_ms * 1000)
        streams.testing.fill_u32(gs, buf.obj, value, N)
        t0 = time.monotonic()
        if order == "context first":
            ctx.close()
            gs.close()
        elif order == "stream first":
            gs.close()
            ctx.close()
        else:
            del gs, ctx
            gc.collect()
        close_s = time.monotonic() - t0
        # Under compute-sanitizer the spin's launch itself waits for it.
        if spin_ms and t0 - t_spin < spin_ms / 2000:
            assert close_s < spin_ms / 2000, (
                f"closing a green stream and its context ({order}) took {close_s:.3f} s: "
                f"it waited for the {spin_ms} ms spin")
        streams.synchronize_device()
        buf.data[:] = value
        buf.last_user = None
        self.check_buffer(buf, self.defaults[0])
        streams._cudart._drain_deferred()
        after = wait_counters({"live_green_contexts": before}, ("live_green_contexts",))
        assert after["live_green_contexts"] == before, (
            f"the green context outlived its closed stream's work ({order}): "
            f"live_green_contexts {before} -> {after['live_green_contexts']}")

    # ---- host-released waits behind enqueues of every kind -------------------------------------

    @precondition(lambda self: self.heavy["host_wait"] < 1)
    @rule(seed=st.integers(0, 2**32 - 1), delay=st.sampled_from([0.0, 0.05, 0.3]),
          counted=st.integers(0, 250), callback=st.booleans())
    def host_released_wait(self, seed, delay, counted, callback):
        """``wait_value`` on a pinned word that a Python thread writes later,
        then enqueues of every kind from this thread: uncounted ones
        (memset, memcpy, native host functions) to just below the queue
        depth the driver showed for memsets, then up to 250 counted ones
        (kernel, launch_ex, prepared and graph launches, records, waits),
        with a Python callback alive or not.  It must complete: an enqueue
        that keeps the GIL may not block, since the writer needs it
        (docs/safety.rst).  A hang ends the run as a finding
        (hang_watchdog).  Fails where the budget counts only some enqueues:
        a counted launch keeps the GIL and blocks on the queue the uncounted
        ones filled, and the writer never runs."""
        # The rule's own draws (up to thousands) come from one seed: a
        # hypothesis Random would take each from the example's bounded data.
        rnd = random.Random(seed)
        if launches_wait_for_kernels():
            note("host_released_wait", "kernel launches wait for their kernel here "
                 "(compute-sanitizer): any launch behind a wait for the host blocks")
            return
        self.heavy["host_wait"] += 1
        depth = memset_queue_depth()
        uncounted = depth - rnd.randint(8, 240) if depth else rnd.randint(600, 2000)
        inc = streams._launch.builtin_kernel("increment_u32")
        s, other = Stream(non_blocking=True), Stream(non_blocking=True)
        work = DeviceBuffer(NBYTES, stream=s)
        small = [DeviceBuffer(256, stream=s) for _ in range(2)]
        streams.memset_async(work, 0, stream=s)
        prep = inc.prepare(1, N, work, N)
        g = Graph()
        g.add_kernel_node(inc, 1, N, work, N)
        ex = g.instantiate()
        g.close()
        ex.launch(s)                            # its first launch before the wait
        streams.memset_async(work, 0, stream=s)
        ev_mine, ev_other = Event(), Event()
        other.record(ev_other)
        counter = ctypes.c_uint64(0)
        flag = PinnedBuffer(8)
        word = ctypes.c_uint32.from_address(flag.ptr)
        word.value = 0
        key = self.new_key()
        s.synchronize()
        other.synchronize()
        # Nothing that may synchronize the device implicitly between the
        # wait and the write (wait_value's docstring): everything above was
        # made and loaded first, what earlier steps released is released
        # now, and no collection runs in between.
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        gc.collect()
        incs = natives = 0
        kinds = ("memset", "memcpy", "native")
        writer = threading.Thread(target=lambda: (time.sleep(delay), setattr(word, "value", 1)))
        gc.disable()
        try:
            with hang_watchdog(30, "host_released_wait"):
                try:
                    s.wait_value(flag, 1, "geq")
                    writer.start()
                    for n in range(uncounted + counted):
                        if n < uncounted or rnd.random() < 0.2:
                            kind = rnd.choices(kinds, [80, 10, 10])[0]
                        else:
                            kind = rnd.choice(["launch", "launch_ex", "prepared", "graph",
                                               "record", "wait"])
                        if n == uncounted and callback:
                            s.launch_host_func(count_cb, key)
                            EXPECTED[key] += 1
                        if kind == "memset":
                            streams.memset_async(small[0], n & 0xFF, 4, stream=s)
                        elif kind == "memcpy":
                            streams.memcpy_async(small[1], small[0], 256, stream=s)
                        elif kind == "native":
                            s.launch_host_func(streams.testing.native_increment,
                                               ctypes.addressof(counter))
                            natives += 1
                        elif kind == "launch":
                            s.launch(inc, 1, N, work, N)
                        elif kind == "launch_ex":
                            s.launch_ex(inc, LaunchConfig(1, N), work, N)
                        elif kind == "prepared":
                            prep.launch(s)
                        elif kind == "graph":
                            ex.launch(s)
                        elif kind == "record":
                            s.record(ev_mine)
                        else:
                            s.wait_event(ev_other)
                        incs += kind in ("launch", "launch_ex", "prepared", "graph")
                finally:
                    word.value = 1
                    if writer.ident is not None:
                        writer.join()
                assert s.synchronize() is True
        finally:
            gc.enable()
        got = np.empty(N, dtype=np.uint32)
        streams.memcpy_async(got, work, stream=s)
        s.synchronize()
        assert (got == incs).all(), f"{incs} launches behind the wait, the buffer counted {got[0]}"
        assert counter.value == natives, f"{natives} native calls, {counter.value} ran"
        self.trace(f"host-released wait: {uncounted} uncounted (depth {depth}), {counted} more, "
                   f"{incs} launches, callback {callback}")
        ex.close()
        del prep
        for x in [work] + small:
            x.close()
        for x in (ev_mine, ev_other):
            x.close()
        s.synchronize()
        s.close()
        other.close()
        flag.close()

    # ---- timeline semaphores and deadlines ---------------------------------------------------

    @precondition(lambda self: self.heavy["semaphore"] < 2)
    @rule(path=st.sampled_from(["memops", "kernel"]), how=st.sampled_from(["gpu", "host", "abandon"]),
          value=st.integers(1, 2**40))
    def semaphore_handoff(self, path, how, value):
        """A TimelineSemaphore between two streams: a fill waits on one for
        ``value``, which the other signals after a spin (or the host
        signals, or abandon() releases).  The fill does not run before; its
        data is then on the GPU; value and host waits agree; a wait for a
        value already reached passes at once; after abandon() a host wait
        raises SemaphoreAbandoned."""
        if launches_wait_for_kernels():
            note("semaphore_handoff", "kernel launches wait for their kernel here "
                 "(compute-sanitizer): a launch behind a semaphore wait would block")
            return
        if path == "memops" and not semaphore_memops():
            note("semaphore_handoff", "no 64-bit stream memory operations here: "
                 "the memops path is not drawn")
            return
        self.heavy["semaphore"] += 1
        prod, cons = Stream(non_blocking=True), Stream(non_blocking=True)
        buf = DeviceBuffer(NBYTES, stream=cons)
        sem = streams.TimelineSemaphore(0, path=path)
        # Nothing may synchronize the device implicitly while `cons` waits
        # for a signal this thread sends (a collected pinned buffer's free,
        # a module's unload: docs/coordinating-processes.rst): everything
        # released earlier is released now, and no collection runs until
        # the rule ends.
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        gc.collect()
        gc.disable()
        try:
            with hang_watchdog(30, "semaphore_handoff"):
                streams.memset_async(buf, 0, stream=cons)
                sem.wait(cons, value)
                streams.testing.fill_u32(cons, buf, 5, N)
                assert cons.query() is False, "a fill behind an unsignalled semaphore wait ran"
                if how == "gpu":
                    streams.testing.spin(prod, 2000)
                    sem.signal(prod, value)
                elif how == "host":
                    sem.signal_host(value)
                else:
                    sem.abandon("fuzz")
                assert cons.synchronize(timeout=30) is True
                got = np.empty(N, dtype=np.uint32)
                streams.memcpy_async(got, buf, stream=cons)
                assert cons.synchronize(timeout=30) is True
                assert (got == 5).all(), f"the fill behind the semaphore wait wrote {got[0]}"
                if how == "abandon":
                    try:
                        sem.wait_host(value, timeout=5)
                    except streams.SemaphoreAbandoned:
                        pass
                    else:
                        raise AssertionError("wait_host after abandon() did not raise")
                else:
                    assert sem.wait_host(value, timeout=5) is True
                    assert sem.value == value, (sem.value, value)
                    sem.wait(cons, max(1, value - 1))       # reached: passes at once
                    assert cons.synchronize(timeout=30) is True
            self.trace(f"semaphore {path}: {how} to {value}")
        finally:
            gc.enable()
            if sem.abandoned is None:
                sem.abandon("rule end")     # nothing may stay blocked past the rule
            prod.synchronize(timeout=30)
            cons.synchronize(timeout=30)
            buf.close()
            sem.close()
            prod.close()
            cons.close()

    @precondition(lambda self: self.heavy["deadline"] < 2)
    @rule(miss=st.sampled_from([False, False, False, True]), replay=st.booleans())
    def deadline_round(self, miss, replay):
        """A deadline on a stream's work (a scope) or on a graph replay
        (``deadline=``): met when the work is quick, and the wait after it
        returns True; missed when a spin outlasts it, and the next
        synchronize raises DeadlineExceeded naming the stream while the
        spin still runs, the one after returns True."""
        if launches_wait_for_kernels():
            note("deadline_round", "kernel launches wait for their kernel here "
                 "(compute-sanitizer): a missed deadline is missed on the host")
            return
        self.heavy["deadline"] += 1
        s = Stream(non_blocking=True)
        g = ex = None
        try:
            with hang_watchdog(30, "deadline_round"):
                seconds = 0.05 if miss else 30.0
                # A miss: 20x the deadline, enqueued just before the replay
                # or inside the scope (the clock starts there), so the
                # watchdog (5 ms ticks) sees it long before the spin ends.
                spin_us = 1_000_000 if miss else 0
                if replay:
                    g = Graph()
                    g.add_kernel_node(streams._launch.builtin_kernel("empty"), 1, 1)
                    ex = g.instantiate()
                    streams.testing.spin(s, spin_us)
                    ex.launch(s, deadline=seconds)
                else:
                    with streams.deadline(s, seconds, what="fuzz"):
                        streams.testing.spin(s, spin_us)
                        streams.testing.launch_empty(s)
                if miss:
                    try:
                        s.synchronize(timeout=30)
                    except streams.DeadlineExceeded as e:
                        assert e.stream is s, (e.stream, s)
                    else:
                        raise AssertionError("a missed deadline did not raise in synchronize")
                assert s.synchronize(timeout=30) is True
            self.trace(f"deadline: {'missed' if miss else 'met'}, "
                       f"{'replay' if replay else 'scope'}")
        finally:
            try:
                s.synchronize(timeout=30)
            except streams.DeadlineExceeded:
                s.synchronize(timeout=30)
            for x in (ex, g):
                if x is not None:
                    x.close()
            s.close()

    @rule()
    def sync_all(self):
        """A check point: everything done, every buffer as the model says,
        every callback run as often as enqueued."""
        for sm in self.streams:
            if sm.usable and sm.expect_error:
                self.sync(sm)
        streams.synchronize_device()
        self.check_callbacks()
        for b in list(self.bufs):
            self.check_buffer(b, self.defaults[0])

    # ---- teardown ------------------------------------------------------------------------------

    def teardown(self):
        """Check, close everything, and check that everything was given back."""
        errors = []
        owners = self.check_and_close_all(errors)
        # The checks run only once check_and_close_all has returned: its loop
        # variables (the last holder, buffer, stream, module, executable),
        # left bound after their loops, would keep model objects alive through
        # the check.  A holder's model keeps its GraphNodes, each node its
        # Graph (closed or not), and a graph keeps its kernel nodes' buffers
        # in use, so their memory is not freed while the check looks
        # ("live_buffers 16 -> 17" when the last holder is a graph with a
        # fill node).  Likewise the last adopted kernel's executable, closed
        # but still bound to the loop variable, holds its graph's holds, the
        # stand-in module and so the owner ("1 adopted kernel owner(s)
        # outlived every user of their kernel").
        streams.synchronize_device()
        streams._cudart._drain_deferred()
        gc.collect()
        self.check_natives(errors)
        left = [ref for ref in owners if ref() is not None]
        if left:
            errors.append(AssertionError(f"{len(left)} adopted kernel owner(s) outlived "
                                         "every user of their kernel"))
        try:
            self.check_given_back()
        except BaseException as exc:
            errors.append(exc)
        STATS["steps"] -= 1      # the invariant's run before the first step
        if errors:
            raise errors[0]

    def check_and_close_all(self, errors):
        """Check what the model says, then close everything and forget the
        model; what fails goes to ``errors`` and the rest is still closed.
        Returns weak references to the adopted kernels' owners, which must
        be gone once the caller has settled what the library defers."""

        def step(fn):
            try:
                fn()
            except BaseException as exc:   # close the rest, then report the first
                errors.append(exc)

        for sm in list(self.streams):
            if sm.usable and sm.expect_error:
                step(lambda: self.sync(sm))
        step(streams.synchronize_device)
        step(self.check_callbacks)
        for b in list(self.bufs):
            step(lambda: self.check_buffer(b, self.defaults[0]))
        step(streams.synchronize_device)
        for h in self.holders():
            step(lambda: self.release_holder(h, "close"))
        for b in list(self.bufs):
            step(lambda: self.close_buffer(b, "own"))
        for ev in self.events:
            step(ev.close)
        for m in self.mods + self.dropped_mods:
            if not m.closed:
                step(m.obj.close)
        for am in self.adopted:
            for ex in am.execs:
                step(ex.close)
            am.kernel = am.owner = None
            am.execs = []
        for cm in self.compiled:
            if not cm.closed:
                step(cm.obj.close)
        owners = [am.owner_ref for am in self.adopted]
        self.adopted, self.compiled = [], []
        for pool in self.pools:
            step(pool.close)
        for sm in list(self.streams):
            step(lambda: self.close_stream(sm, "close"))
        for z in self.zombies:
            step(z.ready.close)
        self.streams, self.bufs, self.zombies, self.events = [], [], [], []
        self.mods, self.graphs, self.execs, self.preps, self.pools = [], [], [], [], []
        self.graveyard, self.old_nodes, self.dropped_mods = [], [], []
        return owners

    def check_given_back(self):
        keys = LEAK_KEYS + (DEBUG_KEYS if self.before["debug_build"] else [])
        deadline = time.monotonic() + 3.0
        while True:
            streams.synchronize_device()
            streams._cudart._drain_deferred()
            after = streams.debug_counters()
            pool = MemoryPool.default().used_current
            changed = [k for k in keys if after[k] != self.before[k]]
            if (not changed and pool == self.pool_before) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
            gc.collect()
        assert not changed, "not given back: " + ", ".join(
            f"{k} {self.before[k]} -> {after[k]}" for k in changed)
        assert pool == self.pool_before, (
            f"the default pool has {pool - self.pool_before} bytes more in use")


class _Proto:
    """Another library's stream: the ``__cuda_stream__`` protocol only."""

    def __init__(self, s):
        self.s = s

    def __cuda_stream__(self):
        return (0, self.s.handle)


# Uses of a __new__ object that may succeed: reading a flag, or closing (idempotent).
_MAY_WORK = {"close", "closed", "repr", "drop", "nbytes", "eq", "hash", "graph", "close(stream)",
             "name", "stream"}


def _new_object_uses(cls, obj, s, g):
    """(name, call) pairs that use the never-initialised ``obj`` as self or as
    an argument of live objects ``s`` (a Stream) and ``g`` (a Graph)."""
    fill = streams._launch.builtin_kernel("fill_u32")
    uses = [("close", lambda: obj.close() if hasattr(obj, "close") else None),
            ("repr", lambda: repr(obj)), ("drop", lambda: None)]
    if cls == "Stream":
        uses += [("synchronize", obj.synchronize), ("query", obj.query),
                 ("record", obj.record), ("spin", lambda: streams.testing.spin(obj, 1)),
                 ("wait_stream", lambda: s.wait_stream(obj)),
                 ("waited", lambda: obj.wait_stream(s)),
                 ("buffer on it", lambda: DeviceBuffer(16, stream=obj)),
                 ("begin_capture", obj.begin_capture), ("handle", lambda: obj.handle),
                 ("launch_host_func", lambda: obj.launch_host_func(count_cb, "never")),
                 ("exec launch", lambda: g.instantiate().launch(obj))]
    elif cls == "Event":
        uses += [("record", lambda: obj.record(s)), ("wait_event", lambda: s.wait_event(obj)),
                 ("synchronize", obj.synchronize), ("query", obj.query),
                 ("elapsed_time", lambda: obj.elapsed_time(obj)),
                 ("event node", lambda: g.add_event_record_node(obj))]
    elif cls in ("DeviceBuffer", "PinnedBuffer", "ManagedBuffer"):
        uses += [("ptr", lambda: obj.ptr), ("memset", lambda: streams.memset_async(obj, 0, 16, s)),
                 ("copy from", lambda: streams.memcpy_async(bytearray(16), obj, 16, s)),
                 ("kernel arg", lambda: s.launch(fill, 1, 1, obj, 1, 1)),
                 ("kernel node", lambda: g.add_kernel_node("fill_u32", 1, 1, obj, 1, 1)),
                 ("memset node", lambda: g.add_memset_node(obj, 0, 4)),
                 ("dlpack", lambda: obj.__dlpack__()), ("memoryview", lambda: memoryview(obj))]
        if cls == "DeviceBuffer":
            uses += [("close(stream)", lambda: obj.close(stream=s)),
                     ("cai", lambda: obj.__cuda_array_interface__),
                     ("export", obj.export), ("stream", lambda: obj.stream)]
    elif cls == "MemoryPool":
        uses += [("allocate", lambda: obj.allocate(16, s)), ("trim", obj.trim),
                 ("used_current", lambda: obj.used_current)]
    elif cls == "Graph":
        uses += [("add_empty_node", obj.add_empty_node), ("instantiate", obj.instantiate),
                 ("nodes", lambda: obj.nodes), ("child", lambda: g.add_child_graph_node(obj)),
                 ("kernel node", lambda: obj.add_kernel_node("empty"))]
    elif cls == "GraphExec":
        uses += [("launch", lambda: obj.launch(s)), ("upload", lambda: obj.upload(s)),
                 ("update", lambda: obj.update(g))]
    elif cls == "Module":
        uses += [("get_kernel", lambda: obj.get_kernel("streams_empty"))]
    elif cls == "Kernel":
        uses += [("launch", lambda: s.launch(obj, 1, 1)), ("prepare", lambda: obj.prepare(1, 1)),
                 ("kernel node", lambda: g.add_kernel_node(obj)), ("name", lambda: obj.name)]
    elif cls == "PreparedLaunch":
        uses += [("launch", lambda: obj.launch(s))]
    elif cls == "GraphNode":
        uses += [("dependency", lambda: g.add_empty_node(dependencies=[obj])),
                 ("type", lambda: obj.type), ("eq", lambda: obj == obj),
                 ("graph", lambda: obj.graph),
                 ("set_enabled", lambda: g.instantiate().set_enabled(obj, True))]
    elif cls == "ConditionHandle":
        uses += [("add_if", lambda: g.add_if(obj)),
                 ("set_condition", lambda: g.add_kernel_node("set_condition", 1, 1, obj, None))]
    elif cls == "GraphAllocation":
        uses += [("kernel node", lambda: g.add_kernel_node("fill_u32", 1, 1, obj, 1, 1)),
                 ("mem free", lambda: g.add_mem_free(obj)),
                 ("memset node", lambda: g.add_memset_node(obj, 0, 4))]
    elif cls in ("StreamPool", "EventPool"):
        uses += [("acquire", obj.acquire)]
    return uses


# ---- the run: rounds of examples within a time budget, in a child process --------------------

def trace_every_rule(machine):
    """Each rule's name and arguments on stderr as it starts, on this thread
    (a profile hook: the rules themselves stay as hypothesis made them)."""
    import inspect
    codes = {}
    for name, value in vars(machine).items():
        if getattr(value, "hypothesis_stateful_rule", None) is not None:
            codes[inspect.unwrap(value).__code__] = name

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            args = {k: v for k, v in frame.f_locals.items() if k != "self"}
            print(f"  rule {STATS['steps']}: {codes[frame.f_code]} {args}", file=sys.stderr,
                  flush=True)
    sys.setprofile(hook)


def fuzz_settings():
    # Shrinking a failure replays examples on the GPU: bounded too.
    engine = sys.modules.get("hypothesis.internal.conjecture.engine")
    shrink_seconds = int(os.environ.get("STREAMS_FUZZ_SHRINK_SECONDS", "60"))
    if engine is not None and hasattr(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = shrink_seconds
    # 0: no shrinking at all, the first failing example as it was found
    # (--replay).
    phases = [p for p in Phase if p != Phase.shrink or shrink_seconds > 0]
    return settings(max_examples=EXAMPLES_PER_ROUND, stateful_step_count=STEPS_PER_EXAMPLE,
                    deadline=None, database=None, print_blob=True, phases=phases,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False)


def warm_up():
    """Load the built-in kernels once: loaded during an example, they would
    count as that example's module (the leak check) and load in a capture."""
    s = Stream.legacy
    buf = DeviceBuffer(NBYTES, stream=s)
    streams.testing.fill_u32(s, buf, 0, N)
    streams.testing.increment_u32(s, buf, N)
    streams.testing.spin(s, 1)
    streams.testing.launch_empty(s)
    for name in ("empty", "spin", "fill_u32", "increment_u32", "set_condition",
                 "set_condition_lt"):
        try:
            streams._launch.builtin_kernel(name)
        except Exception:     # the conditional kernels need CUDA 12.4; rules check too
            pass
    buf.close()
    streams.synchronize_device()
    # What some rules ask CUDA once, asked before any count of the library's
    # moves (a graph launch into a capture is a counted enqueue).
    launches_wait_for_kernels()
    graph_launch_capturable()
    semaphore_memops()
    # The deadline markers' first page lives as long as the process: made
    # here, before any example's leak check counts it.
    s = Stream(non_blocking=True)
    with streams.deadline(s, 30.0):
        streams.testing.launch_empty(s)
    s.synchronize(timeout=30)
    s.close()
    streams.synchronize_device()


def device_free_memory():
    """The device's free memory from the driver (cuMemGetInfo), or None."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
        return None
    return free.value


def settle_memory():
    streams.synchronize_device()
    gc.collect()
    streams._cudart._drain_deferred()
    MemoryPool.default().trim(0)
    streams.trim_graph_memory()
    streams.synchronize_device()


def _print_checker_races():
    # STREAMS_RACECHECK=collect: what streams.checker reported over the run,
    # by kind and pair of operations, each with where its second access was
    # enqueued.  Not asserted here: the machine also orders work in ways the
    # checker does not see (docs/checker.rst), which a reader sorts out.
    from streams import checker
    if not checker.enabled():
        return
    found = checker.races()
    groups = collections.Counter()
    where = {}
    for r in found:
        key = (r.kind, r.first.op, r.second.op)
        groups[key] += 1
        frames = r.second.stack
        where.setdefault(key, f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?")
    print(f"fuzz: checker: {len(found)} race(s) reported", flush=True)
    for (kind, a, b), n in groups.most_common(12):
        print(f"fuzz: checker: {n} x {kind}: {b} after {a} (at {where[kind, a, b]})", flush=True)


def main():
    seed = int(os.environ.get("STREAMS_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    report = os.environ.get("STREAMS_FUZZ_REPORT")
    faulthandler.enable()
    sys.unraisablehook = _unraisable_hook
    print(f"fuzz: seed {seed} (--seed {seed} or STREAMS_FUZZ_SEED={seed} repeats the run), "
          f"budget {BUDGET:g} s", flush=True)
    rounds = 0
    start = time.monotonic()
    free_before = free_after = graph_before = None
    free_by_round = []
    shown = [time.monotonic()]
    if BUDGET > 0:
        if streams.device_count() == 0:
            print("fuzz: no GPU here")
            return 2
        if os.environ.get("STREAMS_FUZZ_TORCH") == "1":
            try:
                import torch
                if torch.cuda.is_available():
                    TORCH["module"] = torch
            except ImportError:
                pass
        warm_up()
        settle_memory()
        free_before = device_free_memory()
        graph_before = streams.graph_memory_info()
        start = time.monotonic()
        RUN_BUDGET["end"] = start + BUDGET
    if TRACE_RULES:
        trace_every_rule(GpuObjectGraph)
    try:
        while BUDGET > 0 and time.monotonic() < RUN_BUDGET["end"]:
            round_seed = (seed + rounds) % 2**32
            ROUND["seed"] = round_seed

            def factory():
                return GpuObjectGraph()

            factory = hypothesis.seed(round_seed)(factory)
            rounds += 1
            try:
                run_state_machine_as_test(factory, settings=fuzz_settings())
            except BaseException:
                print(f"fuzz: FAILED in round {rounds} (--replay {round_seed} or "
                      f"STREAMS_FUZZ_SEED={round_seed} replays it)", flush=True)
                raise
            if CHECK_DEVICE_MEMORY:
                settle_memory()
                free_by_round.append(device_free_memory())
            if time.monotonic() - shown[0] > 30:
                # Progress for long or slow runs (under compute-sanitizer a
                # round takes minutes): what a timeout kill leaves behind.
                shown[0] = time.monotonic()
                print(f"fuzz: round {rounds}: {STATS['examples']} examples, {STATS['steps']} "
                      f"steps in {shown[0] - start:.0f} s", flush=True)
        if BUDGET > 0:
            settle_memory()
            free_after = device_free_memory()
            graph_after = streams.graph_memory_info()
            assert graph_after.used == graph_before.used, (graph_before, graph_after)
            # Allow what CUDA itself may keep (module code, local memory).
            # The device's free memory is every process's: asserted only
            # when the fuzzer has the GPU to itself (STREAMS_FUZZ_DEVICE_MEMORY=1);
            # beside other suites it moved by their allocations, not ours.
            # CUDA allocates for itself on the first use of a feature (a
            # rule first drawn in a later round: local memory, a conditional
            # node's machinery), and keeps it: the free memory drops in
            # steps early, then stays.  What streams leaked would grow with
            # the rounds, so the second half of the run must not lose any
            # (one 2 MiB page of slack), and the whole run no more than
            # CUDA's own first uses.
            if CHECK_DEVICE_MEMORY and free_before is not None and free_after is not None:
                lost = free_before - free_after
                assert lost <= 64 << 20, f"the device has {lost >> 20} MiB less free memory"
                if len(free_by_round) >= 4 and None not in free_by_round:
                    half = free_by_round[len(free_by_round) // 2]
                    assert half - free_after <= 2 << 20, (
                        f"the device lost {(half - free_after) >> 20} MiB in the run's second half: "
                        f"{[f >> 20 for f in free_by_round]} MiB free after each round")
    finally:
        elapsed = time.monotonic() - start
        line = (f"fuzz: {STATS['examples']} examples, {STATS['steps']} steps in {elapsed:.1f} s "
                f"({rounds} rounds, seed {seed})")
        if free_before is not None and free_after is not None:
            line += f"; device free memory {free_before >> 20} -> {free_after >> 20} MiB"
            if free_by_round and None not in free_by_round:
                line += f" (by round: {sorted(set(f >> 20 for f in free_by_round))[:8]} MiB)"
        print(line, flush=True)
        for rule_name, why in NOTES.items():
            print(f"fuzz: {rule_name} did nothing: {why}", flush=True)
        _print_checker_races()
        if report:
            Path(report).write_text(line + "\n")
    return 0
