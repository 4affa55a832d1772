"""The pipeline and graph-size rows inside the workers, checked without a
GPU: each contender's adapter sets its case up with its own env() over a
stand-in of its library (objects that record what is asked of them), and
each step it times makes the CUDA calls of one step of ops.STEP_CALLS (the
floor's, test_floor.py), each on the stream of ops.STEP_STREAMS, its copies
from and to the buffers of ops.STEP_COPIES and its kernel given the device
buffers; after a batch both streams are synchronized and the host
functions counted; the graph-size rows capture a graph of their size and
launch it with graph_launch's statement.  The libraries themselves are not
here: what each call costs, and that it is the CUDA call named here, needs
a GPU.
"""
import ctypes
import functools
import itertools
from unittest import mock

import pytest

from benchmarks import adapters, ops, render, results
from benchmarks.timing import NotAvailable
from benchmarks.under_test import builtin_ptx

K, G, R, W, C, H = ("cudaLaunchKernel", "cudaGraphLaunch", "cudaEventRecord",
                    "cudaStreamWaitEvent", "cudaMemcpyAsync", "cudaLaunchHostFunc")
SYNC, CURRENT = "synchronize", "current stream"

# Per contender: which CUDA call each call of its step is.  A call is named
# by the function called (memcpy_async, cuda.bindings' cudaEventRecord) or
# by the kind of object and the method (stream.record); any other call in a
# step fails the test.
CALLS = {
    "streams-py": {"stream.launch": K, "graph_exec.launch": G, "stream.record": R,
                   "stream.wait_event": W, "memcpy_async": C, "stream.launch_host_func": H,
                   "stream.synchronize": SYNC},
    "cupy": {"kernel()": K, "graph.launch": G, "stream.record": R, "stream.wait_event": W,
             "memptr.copy_to_host_async": C, "memptr.copy_from_host_async": C,
             "stream.launch_host_func": H, "stream.synchronize": SYNC},
    "torch": {"_sleep": K, "graph.replay": G, "stream.record_event": R, "stream.wait_event": W,
              "tensor.copy_": C, "stream.synchronize": SYNC, "set_stream": CURRENT},
    "cuda-core": {"launch": K, "graph.launch": G, "stream.record": R, "stream.wait": W,
                  "buffer.copy_from": C, "host_launch": H, "stream.sync": SYNC},
    "cuda-bindings": {"cuLaunchKernel": K, "cudaGraphLaunch": G, "cudaEventRecord": R,
                      "cudaStreamWaitEvent": W, "cudaMemcpyAsync": C, "cudaLaunchHostFunc": H,
                      "cudaStreamSynchronize": SYNC},
}
# Where a copy's destination and source are: an argument's index, or "self"
# (the object whose method copies).
COPY_ENDS = {"memcpy_async": (0, 1), "memptr.copy_to_host_async": (0, "self"),
             "memptr.copy_from_host_async": ("self", 0), "tensor.copy_": ("self", 0),
             "buffer.copy_from": ("self", 0), "cudaMemcpyAsync": (0, 1)}
# The calls that open and close a capture (or a graph builder's building).
CAPTURE = {"stream.begin_capture": True, "stream.end_capture": False,
           "graph_builder.begin_building": True, "graph_builder.end_building": False,
           "cudaStreamBeginCapture": True, "cudaStreamEndCapture": False}


class Lib:
    """A stand-in library: makes objects (:class:`Rec`), and records what
    they are asked.  While ``recording`` (a timed batch and what follows
    it), every call must be one of ``table`` and is logged as (CUDA call,
    stream, detail): a copy's detail is (destination, source), a kernel
    launch's (kernel, the device buffers given to it), by the names of the
    buffers (dev0, dev1, ... and pin0, pin1, ... in the order made).  A host
    function runs at its stream's next synchronize, as CUDA runs it once the
    stream gets there; torch's calls go to the current stream.  Set-up is
    not logged but counted: the kernels launched while a capture is open,
    and what was made and not yet closed (``live``)."""

    def __init__(self, contender):
        self.table = CALLS[contender]
        self.recording = False
        self.calls = []
        self.queued = {}
        self.current = None
        self.live = {}
        self.ever = 0           # things made that need closing
        self.count = itertools.count(0x7F00_0000_0000, 0x10000)
        self.made = {}
        self.ptrs = {}
        self.results = {}
        self.fail = None        # a function name whose call raises (a failed set-up)
        self.capturing = False
        self.captured = 0
        self.env = None         # what the adapter's env() gave

    def make(self, kind, closable=True, name=None, **attrs):
        obj = Rec(self, kind, name)
        for k, v in attrs.items():
            setattr(obj, k, v)
        if closable:
            self.live[obj] = kind
            self.ever += 1
        return obj

    def buffer(self, where, kind, closable=True):
        """A buffer of device or pinned memory, named by kind and order."""
        prefix = "dev" if where == "device" else "pin"
        index = self.made.setdefault(prefix, itertools.count())
        name = f"{prefix}{next(index)}"
        ptr = next(self.count)
        self.ptrs[ptr] = name
        return self.make(kind, closable, _buffer=name, ptr=ptr)

    def pointer(self, where):
        """An address of device or pinned memory (cuda.bindings' ints)."""
        prefix = "dev" if where == "device" else "pin"
        index = self.made.setdefault(prefix, itertools.count())
        ptr = next(self.count)
        self.ptrs[ptr] = f"{prefix}{next(index)}"
        self.live[ptr] = prefix
        self.ever += 1
        return ptr

    def close(self, obj):
        assert obj in self.live, f"closed twice, or never made: {obj!r}"
        del self.live[obj]

    def function(self, name):
        return Rec(self, "function", name)

    def buffer_of(self, x):
        if isinstance(x, Rec):
            return x.__dict__.get("_buffer")
        if isinstance(x, ctypes.c_void_p):
            x = x.value
        return self.ptrs.get(x) if isinstance(x, int) and not isinstance(x, bool) else None

    def _flat(self, xs):
        for x in xs:
            if isinstance(x, (tuple, list)):
                yield from self._flat(x)
            else:
                yield x

    def call(self, path, receiver, args, kwargs):
        if path == self.fail:
            raise RuntimeError(f"asked to fail {path}")
        everything = [x for x in (receiver, *args, *kwargs.values())]
        streams = [x for x in everything if isinstance(x, Rec) and x.kind == "stream"]
        stream = streams[0] if streams else self.current
        what = self.table.get(path)
        if what == CURRENT:
            self.current = stream
        elif path in CAPTURE:
            self.capturing = CAPTURE[path]
        elif what == K and self.capturing and not self.recording:
            self.captured += 1
        if self.recording:
            if what is None:
                raise KeyError(f"{path}: a call the step must not make")
            if what != CURRENT:
                self.calls.append((what, stream, self._detail(what, path, receiver, args)))
            if what == H:
                # The callback: the first plain callable, given what follows it.
                i = next(i for i, x in enumerate(args) if callable(x) and not isinstance(x, Rec))
                self.queued.setdefault(stream, []).append(
                    functools.partial(args[i], *args[i + 1:]))
            elif what == SYNC:
                for fn in self.queued.pop(stream, []):
                    fn()
        result = self.results.get(path)
        return result(receiver, *args, **kwargs) if result else None

    def _detail(self, what, path, receiver, args):
        if what == C:
            ends = [receiver if at == "self" else args[at] for at in COPY_ENDS[path]]
            return tuple(self.buffer_of(x) for x in ends)
        if what == K:
            everything = list(self._flat((receiver, *args)))
            kernels = [x.name for x in everything if isinstance(x, Rec) and x.kind == "kernel"]
            buffers = tuple(b for b in map(self.buffer_of, everything) if b)
            return (kernels[0] if kernels else None, buffers)
        return None


class Rec:
    """A stand-in for one object of a library: ``kind`` says what it is
    (stream, event, graph, kernel, buffer, function, ...).  Any method may
    be called on it; what the call returns is its library's ``results``."""

    def __init__(self, lib, kind, name=None):
        self.lib, self.kind, self.name = lib, kind, name

    def __call__(self, *args, **kwargs):
        path = self.name if self.kind == "function" else f"{self.kind}()"
        return self.lib.call(path, self, args, kwargs)

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return lambda *args, **kwargs: self.lib.call(f"{self.kind}.{attr}", self, args, kwargs)

    def __repr__(self):
        return f"<{self.kind} {self.name or hex(id(self))}>"


def _closes(lib):
    """``close()`` of an object: it is no longer alive."""
    return lambda obj, *a, **k: lib.close(obj)


def _streams(lib, adapter):
    st = mock.MagicMock(name="streams")
    st.Stream.side_effect = lambda *a, **k: lib.make("stream")
    st.Event.side_effect = lambda *a, **k: lib.make("event")
    st.Module.from_ptx.side_effect = lambda ptx: lib.make("module")
    st.DeviceBuffer.side_effect = lambda n, stream=None: lib.buffer("device", "buffer")
    st.PinnedBuffer.side_effect = lambda n: lib.buffer("pinned", "buffer")
    st.memcpy_async = lib.function("memcpy_async")
    lib.results.update({
        "module.get_kernel": lambda m, name, **k: lib.make("kernel", False, name),
        "stream.end_capture": lambda s: lib.make("graph"),
        "graph.instantiate": lambda g: lib.make("graph_exec"),
        **{f"{kind}.close": _closes(lib)
           for kind in ("stream", "event", "module", "buffer", "graph", "graph_exec")}})
    adapter.streams, adapter.has_launch, adapter.has_graphs = st, True, True


def _cupy(lib, adapter):
    cp = mock.MagicMock(name="cupy")
    cp.cuda.Stream.side_effect = lambda *a, **k: lib.make("stream", False)
    cp.cuda.Event.side_effect = lambda *a, **k: lib.make("event", False)
    cp.cuda.function.Module.side_effect = lambda: lib.make("module", False)
    cp.cuda.runtime.streamCaptureModeThreadLocal = 1

    def empty(n, dtype):
        array = lib.buffer("device", "array", False)
        array.data = lib.make("memptr", False, _buffer=array._buffer)
        return array

    cp.empty.side_effect = empty
    cp.cuda.alloc_pinned_memory.side_effect = lambda n: lib.buffer("pinned", "pinned_memory",
                                                                     False)
    lib.results.update({
        "module.get_function": lambda m, name: lib.make("kernel", False, name),
        "stream.end_capture": lambda s: lib.make("graph", False)})
    adapter.cp = cp


def _torch(lib, adapter):
    t = mock.MagicMock(name="torch")
    t.cuda.Stream.side_effect = lambda *a, **k: lib.make("stream", False)
    t.cuda.Event.side_effect = lambda *a, **k: lib.make("event", False)
    t.cuda.set_stream = lib.function("set_stream")
    t.cuda._sleep = lib.function("_sleep")
    t.cuda.CUDAGraph.side_effect = lambda: lib.make("graph", False)
    t.empty.side_effect = lambda n, dtype=None, device=None, pin_memory=False: lib.buffer(
        "pinned" if pin_memory else "device", "tensor", False)
    adapter.torch = t


def _cuda_core(lib, adapter):
    cc = mock.MagicMock(name="cuda.core")
    cc.ObjectCode.from_ptx.side_effect = lambda ptx: lib.make("object_code", False)
    cc.LegacyPinnedMemoryResource.side_effect = lambda: lib.make("pinned_resource", False)
    cc.launch = lib.function("launch")
    cc.host_launch = lib.function("host_launch")
    lib.results.update({
        "device.create_stream": lambda d: lib.make("stream"),
        "device.create_event": lambda d: lib.make("event"),
        "device.allocate": lambda d, n, stream=None: lib.buffer("device", "buffer"),
        "pinned_resource.allocate": lambda r, n: lib.buffer("pinned", "buffer"),
        # Stream.record(event=None): the event given, else a new one.
        "stream.record": lambda s, ev=None: ev if ev is not None else lib.make("event"),
        "object_code.get_kernel": lambda oc, name: lib.make("kernel", False, name),
        "stream.create_graph_builder": lambda s: lib.make("graph_builder"),
        "graph_builder.complete": lambda gb: lib.make("graph"),
        **{f"{kind}.close": _closes(lib)
           for kind in ("stream", "event", "buffer", "graph_builder", "graph")}})
    adapter.cc, adapter.dev = cc, lib.make("device", False)


class _Module:
    """cuda.bindings' runtime or driver: every name a function stand-in."""

    def __init__(self, lib):
        self._lib, self._functions = lib, {}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._functions.setdefault(name, self._lib.function(name))


def _cuda_bindings(lib, adapter):
    kernels = {}

    def get_kernel(_, library, name):
        handle = next(lib.count)
        kernels[handle] = name.decode()
        return (0, handle)

    def destroy(_, obj):
        lib.close(obj)
        return (0,)

    def make(kind):
        return lambda *a: (0, lib.make(kind))

    lib.results.update({
        "cudaStreamCreateWithFlags": make("stream"), "cudaEventCreateWithFlags": make("event"),
        "cudaStreamEndCapture": make("graph"), "cudaGraphInstantiate": make("graph_exec"),
        "cuLibraryLoadData": make("library"), "cuLibraryGetKernel": get_kernel,
        "CUfunction": lambda _, handle: lib.make("kernel", False, kernels[handle]),
        "cudaMalloc": lambda _, n: (0, lib.pointer("device")),
        "cudaMallocHost": lambda _, n: (0, lib.pointer("pinned")),
        # The callback from its address: what the driver would call.
        "cudaHostFn_t": lambda _, address: ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address),
        **dict.fromkeys(("cudaStreamDestroy", "cudaEventDestroy", "cuLibraryUnload",
                         "cudaFree", "cudaFreeHost", "cudaGraphDestroy",
                         "cudaGraphExecDestroy"), destroy)})
    default = lambda *a, **k: (0,)      # noqa: E731  (no error, nothing made)
    lib.results = _Default(lib.results, default)
    adapter.rt = adapter.drv = _Module(lib)


class _Default(dict):
    def __init__(self, table, default):
        super().__init__(table)
        self.default = default

    def get(self, key, _=None):
        return super().get(key, self.default)


LIBRARIES = {"streams-py": _streams, "cupy": _cupy, "torch": _torch, "cuda-core": _cuda_core,
             "cuda-bindings": _cuda_bindings}


def _adapter(contender, tmp_path):
    """``contender``'s adapter as its setup() leaves it, over a stand-in
    of its library: its env() is its own."""
    ptx = tmp_path / "builtin.ptx"
    ptx.write_text(builtin_ptx())
    lib = Lib(contender)
    adapter = adapters.ADAPTERS[contender](str(ptx))
    LIBRARIES[contender](lib, adapter)
    env = adapter.env

    def keep(op):
        lib.env = env(op)
        return lib.env

    adapter.env = keep
    return adapter, lib


def _names(lib, calls):
    """``calls`` with each stream named by the env's name for it."""
    names = {id(lib.env[name]): name for name in ("s", "other")}
    return [(what, names.get(id(stream), stream), detail) for what, stream, detail in calls]


STEPS = [(c, op) for c in CALLS for op in ops.PIPELINE_OPS
         if not (c == "torch" and op == "pipeline_inference")]


def _expected_copies(op):
    if ops.STEP_COPIES[op] == "D2H":
        return [("pin0", "dev0")]
    return [(f"dev{i}", f"pin{i}") for i in range(ops.LOADER_COPIES)]


@pytest.mark.parametrize("contender, op", STEPS)
def test_each_step_makes_the_calls_of_the_floor(contender, op, tmp_path):
    adapter, lib = _adapter(contender, tmp_path)
    case = adapter.make_case(op)
    assert case.note, "the cell says what the library's step is made of"
    n = 2 * ops.HOST_FUNC_EVERY
    lib.recording = True
    for batch in range(2):
        lib.calls.clear()
        ns = case.timed(n)
        steps = [c for c in _names(lib, lib.calls) if c[0] != SYNC]
        counts = {what: sum(1 for w, _, _ in steps if w == what) / n for what, _, _ in steps}
        assert counts == ops.STEP_CALLS[op]
        assert {what: stream for what, stream, _ in steps} == ops.STEP_STREAMS[op]
        assert all(stream == ops.STEP_STREAMS[op][what] for what, stream, _ in steps)
        # The copies, between the buffers of ops.STEP_COPIES, and the kernel,
        # given the device buffers (the data loader's: the copies'
        # destinations), in order.
        assert [d for what, _, d in steps if what == C] == _expected_copies(op) * n
        kernel = ((None, ()) if contender == "torch"
                  else ("streams_args4", tuple(f"dev{i}" for i in range(ops.LOADER_COPIES))))
        assert {d for what, _, d in steps if what == K} == {kernel}
        # Untimed after the batch: both streams drained, and every host
        # function (one each HOST_FUNC_EVERY steps of the batch) run by then.
        lib.calls.clear()
        case.after(n, ns)
        assert sorted(_names(lib, lib.calls)) == [(SYNC, "other", None), (SYNC, "s", None)]
    assert not lib.queued
    lib.recording = False
    for close in case.closers:
        close()
    assert not lib.live, "what the set-up made is closed with the case"


@pytest.mark.parametrize("contender, op, fail", [
    ("streams-py", "pipeline_inference", "stream.record"),
    ("streams-py", "pipeline_inference", "graph.instantiate"),
    ("streams-py", "graph_launch_100", "graph_exec.upload"),
    ("cuda-core", "pipeline_inference", "graph.upload"),
    ("cuda-core", "pipeline_data_loader", "pinned_resource.allocate"),
    ("cuda-bindings", "pipeline_inference", "cudaGraphUpload"),
    ("cuda-bindings", "pipeline_data_loader", "cudaMallocHost"),
])
def test_a_set_up_that_fails_part_way_closes_what_it_made(contender, op, fail, tmp_path):
    """The cell is an error, and what env() had made by then (streams,
    events, modules, buffers, graphs) is closed, not left for the rest of
    the run."""
    adapter, lib = _adapter(contender, tmp_path)
    lib.fail = fail
    with pytest.raises(RuntimeError, match=f"asked to fail {fail}"):
        adapter.make_case(op)
    assert lib.ever >= 4
    assert not lib.live


@pytest.mark.parametrize("contender", [c for c, op in STEPS if op == "pipeline_inference"])
def test_the_host_function_is_enqueued_mid_period(contender, tmp_path):
    """As the floor's (test_floor.py): by the step numbered HOST_FUNC_AT of
    each HOST_FUNC_EVERY, from 0 at each batch's start, after that step's
    copy; so a batch's last step never leaves one to run after the timing,
    and a batch of part of a period is counted right."""
    adapter, lib = _adapter(contender, tmp_path)
    case = adapter.make_case("pipeline_inference")
    every, at = ops.HOST_FUNC_EVERY, ops.HOST_FUNC_AT
    lib.recording = True
    for n in (at, at + 1, every + at, every + at + 1, 2 * every):
        lib.calls.clear()
        ns = case.timed(n)
        whats = [what for what, _, _ in lib.calls]
        # Each host function's step: the copies before it (one a step).
        steps = [whats[:i].count(C) - 1 for i, what in enumerate(whats) if what == H]
        assert steps == [k * every + at for k in range(ops.host_funcs(n))]
        case.after(n, ns)       # every one of them ran by the synchronize
    assert not lib.queued


def test_a_host_function_that_did_not_run_fails_the_batch(tmp_path):
    adapter, lib = _adapter("streams-py", tmp_path)
    case = adapter.make_case("pipeline_inference")
    lib.table = dict(lib.table, **{"stream.synchronize": "not a synchronize"})
    lib.recording = True
    ns = case.timed(ops.HOST_FUNC_EVERY)
    with pytest.raises(RuntimeError, match="1 host functions enqueued but 0 ran"):
        case.after(ops.HOST_FUNC_EVERY, ns)


@pytest.mark.parametrize("contender, why", [
    ("torch", "PyTorch has no host-function API"),
    ("numba-cuda", "no graph API"),
    ("streams-cy", r"no C-level \(cimport\) copy"),
])
def test_a_step_a_library_cannot_make_is_na_with_why(contender, why):
    with pytest.raises(NotAvailable, match=why):
        adapters.ADAPTERS[contender]().make_case("pipeline_inference")


def test_a_cuda_core_without_host_launch_has_no_inference_step(monkeypatch):
    """No released cuda.core has cuda.core.host_launch (benchmarks/README.md):
    there, the inference cell is n/a, saying why; the data loader is not."""
    import sys
    import types
    cc = types.ModuleType("cuda.core")
    cc.Device = mock.MagicMock(name="Device")
    cc.Stream = type("Stream", (), {})
    cc.LegacyPinnedMemoryResource = mock.MagicMock(name="LegacyPinnedMemoryResource")
    cuda = types.ModuleType("cuda")
    cuda.core = cc
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.core", cc)
    adapter = adapters.CudaCore()
    adapter.setup()
    with pytest.raises(NotAvailable, match=r"no cuda\.core\.host_launch"):
        adapter.make_case("pipeline_inference")
    assert "pipeline_data_loader" not in adapter.na


@pytest.mark.parametrize("contender", sorted(CALLS))
@pytest.mark.parametrize("op", sorted(ops.GRAPH_SIZES))
def test_every_graph_size_is_a_graph_of_its_size_launched_by_one_statement(contender, op,
                                                                            tmp_path):
    """env(op) captures graph_nodes(op) launches (PyTorch's capture is a
    context manager the stand-in does not follow), and the row's step is
    graph_launch's statement: one launch on s."""
    adapter, lib = _adapter(contender, tmp_path)
    case = adapter.make_case(op)
    if contender != "torch":
        assert lib.captured == ops.GRAPH_SIZES[op] == ops.graph_nodes(op)
    lib.recording = True
    ns = case.timed(5)
    assert _names(lib, lib.calls) == [(G, "s", None)] * 5
    case.after(5, ns)       # a graph launch leaves work: drained after the batch
    assert _names(lib, lib.calls[5:]) == [(SYNC, "s", None)]


def _series(example):
    """The synthetic fixture's graph-size rows, with made-up medians."""
    doc = dict(example)
    for op, median in (("graph_launch_1", 2000.0), ("graph_launch", 2600.0),
                       ("graph_launch_100", 8000.0), ("graph_launch_1000", 62000.0)):
        for c in ("c", "streams-py"):
            doc["results"][op][c].update(status="ok", ns=[median] * 3, iters=10)
        doc["results"][op]["streams-py"]["floor_ns"] = [median * 0.9] * 3
    return doc


def test_graph_size_rows_get_a_cost_per_node(example):
    doc = results.finalize(_series(example))
    res = doc["results"]
    assert "per_node_ns" not in res["graph_launch_1"]["streams-py"]
    assert res["graph_launch"]["c"]["per_node_ns"] == pytest.approx(600 / 9)
    assert res["graph_launch_100"]["streams-py"]["per_node_ns"] == pytest.approx(6000 / 99)
    assert res["graph_launch_1000"]["streams-py"]["per_node_ns"] == pytest.approx(60000 / 999)
    assert res["graph_launch_1000"]["streams-py"]["floor_per_node_ns"] == pytest.approx(
        0.9 * 60000 / 999)
    assert "floor_per_node_ns" not in res["graph_launch_1000"]["c"]   # the C program has none
    text = render.render_table(doc, ops=list(ops.GRAPH_SIZES))
    row = next(ln for ln in text.splitlines() if ln.startswith("1000-kernel graph launch"))
    assert f" {60000 / 999:.1f}/node" in row
    assert ("N/node: a graph of more nodes costs N ns per launch and node more than the "
            "same column's 1-kernel graph launch") in text
    # Without the 1-node row, the slope is from the smallest graph there is.
    doc = results.finalize(dict(doc, results={op: row for op, row in doc["results"].items()
                                              if op != "graph_launch_1"}))
    assert doc["results"]["graph_launch_1000"]["c"]["per_node_ns"] == pytest.approx(
        (62000 - 2600) / 990)
    assert "per_node_ns" not in doc["results"]["graph_launch"]["c"]


def test_a_graph_size_must_be_a_count(example):
    example["ops"]["graph_launch_100"]["nodes"] = 0
    with pytest.raises(results.ResultError, match="ops.graph_launch_100.nodes"):
        results.validate_result(example)


def test_every_inference_batch_has_its_share_of_host_functions():
    """Whole periods of the host function at any scale: two in a full run,
    one in a quick one."""
    from benchmarks import harness
    assert harness.Config().iters("pipeline_inference") == 2 * ops.HOST_FUNC_EVERY
    assert harness.Config(quick=True).iters("pipeline_inference") == ops.HOST_FUNC_EVERY
    for scale in (0.01, 0.2, 0.3, 0.7, 1.0, 1.3, 2.0, 10.0):
        steps = harness.Config(scale=scale).iters("pipeline_inference")
        assert steps >= ops.HOST_FUNC_EVERY and steps % ops.HOST_FUNC_EVERY == 0, scale


@pytest.mark.parametrize("op", ops.PIPELINE_OPS)
def test_no_pipeline_batch_fills_a_streams_queue(op):
    """A full run's batch queues at most a third of ops.QUEUE_DEPTH on
    either stream (a graph launch counts one, as the probe counted it), so
    that no call waits for the GPU to make room, however far behind it is."""
    from benchmarks import harness
    steps = harness.Config().iters(op)
    for stream in ("s", "other"):
        per_step = sum(n for call, n in ops.STEP_CALLS[op].items()
                       if ops.STEP_STREAMS[op][call] == stream)
        assert per_step * steps <= ops.QUEUE_DEPTH / 3, (stream, per_step, steps)


def test_a_result_says_each_graph_rows_size():
    from benchmarks import harness
    doc = results.new_doc(harness.Config(ops=["graph_launch_1000", "pipeline_inference"]))
    assert doc["ops"]["graph_launch_1000"]["nodes"] == 1000
    assert "nodes" not in doc["ops"]["pipeline_inference"]
    assert doc["ops"]["pipeline_inference"]["targets"] == {"streams-py": 1.10}
