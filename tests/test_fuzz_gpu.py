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

The model keeps the caller's side of every documented contract (docs/
safety.rst, graphs.rst): work on another stream is ordered before a
buffer's free; captured work and memset/memcpy nodes hold nothing, so what
they use stays open while they live; a foreign wrapper is not used once its
owner is closed.  What the fuzzer asserts is what the docs promise.

The machine runs in a child process (a crash must not kill pytest): this
file is also the child's script.  ``STREAMS_FUZZ_SECONDS`` (default 60)
bounds the run, ``STREAMS_FUZZ_SEED`` replays one, ``STREAMS_FUZZ_REPORT``
names a file for the "N examples, M steps in S seconds" line, and
``STREAMS_FUZZ_TRACE=1`` prints the steps that say what they built or
dropped as they run, ``=2`` also every rule with its arguments, before it
runs (for a crash, which leaves no falsifying example).  Under
compute-sanitizer: ``compute-sanitizer --tool memcheck --report-api-errors
no python tests/test_fuzz_gpu.py`` (docs/safety.rst).
"""
import asyncio
import collections
import faulthandler
import gc
import importlib.util
import math
import os
import random
import sys
import threading
import time
import traceback
import weakref
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="fuzzing needs hypothesis")
from hypothesis import HealthCheck, Phase, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test)

from _support import in_thread, run_python_args  # noqa: E402

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
        # Settled first: releases parked by earlier steps happen now, not
        # inside the count below.
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
            # The other thread's per-thread default stream, not this one's
            # (seed 1442): only a device-wide synchronize waits for it.
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
        # in use, so their memory was never freed while the check looked
        # (seed 206: "live_buffers 16 -> 17", the last holder a graph with a
        # fill node).  Likewise the last adopted kernel's executable, closed
        # but still bound to the loop variable, held its graph's holds, the
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
    # (tools/gpu_all.sh STEPS=replay).
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


def main():
    seed = int(os.environ.get("STREAMS_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    report = os.environ.get("STREAMS_FUZZ_REPORT")
    faulthandler.enable()
    sys.unraisablehook = _unraisable_hook
    print(f"fuzz: seed {seed} (STREAMS_FUZZ_SEED={seed} replays it), budget {BUDGET:g} s",
          flush=True)
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

            def factory():
                return GpuObjectGraph()

            factory = hypothesis.seed(round_seed)(factory)
            rounds += 1
            try:
                run_state_machine_as_test(factory, settings=fuzz_settings())
            except BaseException:
                print(f"fuzz: FAILED in round {rounds} (STREAMS_FUZZ_SEED={round_seed} "
                      "replays it)", flush=True)
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
        if report:
            Path(report).write_text(line + "\n")
    return 0


# ---- the tests ----------------------------------------------------------------------------------

def test_fuzzer_is_well_formed():
    """The state machine builds without a GPU: its rules, their strategies,
    and the TestCase hypothesis makes of it."""
    rules = GpuObjectGraph.setup_state().rules
    names = {r.function.__name__ for r in rules}
    for expected in ("new_stream", "close_buffer_on_closed_stream", "capture_graph",
                     "thread_captures_while_main_enqueues", "cycle_through_foreign_stream",
                     "new_object", "edge_launch_args", "raw_stream_ints", "foreign_node",
                     "await_work", "update_exec_node", "native_host_func", "adopt_kernel",
                     "compile_module", "new_green_stream", "change_captured_kernel_args"):
        assert expected in names, expected
    for r in rules:
        for strategy in r.arguments_strategies.values():
            strategy.validate()
    assert issubclass(GpuObjectGraph.TestCase, __import__("unittest").TestCase)
    assert fuzz_settings().max_examples == EXAMPLES_PER_ROUND
    for cls in ("Stream", "Event", "DeviceBuffer", "PinnedBuffer", "ManagedBuffer", "MemoryPool",
                "Graph", "GraphExec", "Module", "Kernel", "PreparedLaunch", "GraphNode",
                "ConditionHandle", "GraphAllocation", "StreamPool", "EventPool"):
        assert hasattr(streams, cls), cls


def test_teardown_checks_with_no_model_object_left(monkeypatch):
    """teardown() checks what was given back only once nothing of the model
    refers to a library object: a holder's model keeps its GraphNodes, a
    node its Graph, and the graph its kernel nodes' buffers in use (seed
    206 reported "live_buffers 16 -> 17" for the last holder the teardown's
    loop had left bound).  CPU only: stand-ins for the graph and its node."""
    import weakref

    class FakeGraph:
        def close(self):
            pass

    class FakeNode:     # as a streams.GraphNode keeps its graph
        def __init__(self, graph):
            self.graph = graph

    machine = GpuObjectGraph.__new__(GpuObjectGraph)
    for name in ("streams", "bufs", "zombies", "events", "mods", "execs", "preps", "pools",
                 "graveyard", "dropped_mods", "old_nodes", "defaults", "adopted", "compiled", "natives"):
        setattr(machine, name, [])
    machine.rng = random.Random(25)
    graph = FakeGraph()
    h = HolderM(graph, "graph")
    h.nodes.append((FakeNode(graph), 0, "fill"))
    machine.graphs = [h]
    alive_at_check = []
    machine.check_given_back = lambda: alive_at_check.append(graph_ref() is not None)
    graph_ref = weakref.ref(graph)
    del graph, h
    monkeypatch.setattr(streams, "synchronize_device", lambda: None)
    monkeypatch.setitem(STATS, "steps", 0)
    monkeypatch.setattr(sys.modules[__name__], "EXPECTED", collections.Counter())
    machine.teardown()
    assert alive_at_check == [False], "the model still held the graph when teardown checked"


def test_fuzzer_child_reports_and_seeds(tmp_path):
    """With no time budget the child runs nothing, and still says so."""
    report = tmp_path / "report.txt"
    result = run_python_args([str(Path(__file__).resolve())], timeout=120, extra_env={
        "STREAMS_FUZZ_SECONDS": "0", "STREAMS_FUZZ_SEED": "1234",
        "STREAMS_FUZZ_REPORT": str(report)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seed 1234" in result.stdout
    assert report.read_text().startswith("fuzz: 0 examples, 0 steps in ")


# The run is longer than the suite's 120 s per test when asked to be
# (pytest-timeout's marker; without the plugin there is nothing to extend).
_long_timeout = (pytest.mark.timeout(int(BUDGET) + 400)
                 if importlib.util.find_spec("pytest_timeout") else (lambda f: f))


@pytest.mark.gpu
# slow: sanitizer runs deselect it, as their pytest workers do not follow
# its child (tools/gpu_all.sh runs the fuzzer under memcheck on its own).
@pytest.mark.slow
@_long_timeout
def test_fuzz_object_graph():
    """The fuzzer, for STREAMS_FUZZ_SECONDS, in a child Python."""
    pytest.importorskip("numpy")
    try:
        result = run_python_args([str(Path(__file__).resolve())], timeout=BUDGET + 300,
                                 extra_env={"PYTHONUNBUFFERED": "1"})
    except __import__("subprocess").TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"the fuzzer hung\n{out[-6000:]}\n{err[-6000:]}")
    print(result.stdout[-3000:])
    assert result.returncode == 0, (
        f"the fuzzer failed (exit {result.returncode}):\n{result.stdout[-12000:]}\n"
        f"{result.stderr[-8000:]}")
    summary = [line for line in result.stdout.splitlines() if " examples, " in line]
    assert summary and not summary[-1].startswith("fuzz: 0 examples"), result.stdout[-3000:]


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.exit(code)
