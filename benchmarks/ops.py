"""What is measured, and by whom: the operations with their targets, the
contenders, and the sizes of a full and a quick run."""

_PY_CY = {"streams-py": 1.25, "streams-cy": 1.05}
GRAPH_KERNELS = 10
PRODUCERS = 8       # threads of host_func_throughput_8threads
COPIES = 8          # copies of memcpy_loop_8 and memcpy_batch_8 (src/floor.h)
COPY_BYTES = 4096   # each copy's size, the pipelines' copies too
PIPELINE_KERNELS = 8    # kernels of a pipeline_inference step (src/floor.h)
HOST_FUNC_EVERY = 16    # pipeline_inference steps per host function
# The step of each HOST_FUNC_EVERY (from 0) that enqueues it: mid-period, so
# that the callback runs inside the batch in a quick run and a full one
# alike, never after the timing has stopped.
HOST_FUNC_AT = 7
LOADER_COPIES = 2       # host-to-device copies of a pipeline_data_loader step

#: Launches that CUDA keeps queued behind one busy stream before an enqueue
#: waits for room (docs/safety.rst: benchmarks/probes/queue_depth.py on an
#: H100, driver 580).  A pipeline batch queues at most a third of that on
#: either stream, so that a call never waits for the GPU even where the GPU
#: has run none of the batch yet.
QUEUE_DEPTH = 1021

#: A streams cell this far below its in-process floor, which makes the same
#: CUDA calls without any wrapper, measured something else: it is flagged
#: "suspect", never counted as a pass.
SUSPECT_BELOW = 0.95


def over(op, ns):
    """A target relative to another row (the JSON form): at most ``ns``
    nanoseconds more per call than the same contender's median on ``op``,
    measured in the same run."""
    return {"of": op, "plus_ns": ns}


def times(op, ratio):
    """A target relative to another row (the JSON form): a median at most
    ``ratio`` times the same contender's median on ``op``, measured in the
    same run (an overhead in percent: 1.05 is at most 5% more)."""
    return {"of": op, "times": ratio}


class Op:
    __slots__ = ("name", "label", "iters", "targets", "about", "only", "nodes", "period")

    def __init__(self, name, label, iters, targets, about, only=None, nodes=None, period=None):
        self.name = name
        self.label = label
        self.iters = iters          # calls per batch in a full run
        # Calls per batch are a whole number of these, at least one, at any
        # scale (pipeline_inference: its host function's period).
        self.period = period
        # contender -> the promise: a ratio to the floor, at most (a number),
        # or at most so many ns more than another row (over())
        self.targets = targets
        self.about = about
        self.only = only            # (contenders that run it, why the others do not)
        # The kernel nodes of the graph a graph-launch row launches: the rows
        # with nodes form the graph-size series, whose cells get a cost per
        # node (results.py: the slope from the smallest graph's row).
        self.nodes = nodes


OPS = (
    Op("python_call", "Python call, no CUDA", 5000, {},
       "read a property of the library's stream object that makes no CUDA call "
       "(streams: Stream.closed; CuPy: Stream.ptr; PyTorch: Stream.cuda_stream; "
       "cuda.core and numba-cuda: Stream.handle): the Python part of every Python cell"),
    Op("stream_query", "stream query (idle)", 5000, _PY_CY,
       "cudaStreamQuery on a stream with no work"),
    Op("stream_synchronize", "stream synchronize (idle)", 5000, {},
       "cudaStreamSynchronize on a stream with no work"),
    Op("event_record", "event record", 1000, _PY_CY,
       "cudaEventRecord of one event on an idle stream"),
    Op("event_query", "event query (complete)", 5000, _PY_CY,
       "cudaEventQuery of an event that has completed"),
    Op("event_record_query", "event record + query", 1000, {},
       "cudaEventRecord on an idle stream, then cudaEventQuery of that event"),
    Op("stream_wait_event", "stream wait_event", 1000, _PY_CY,
       "cudaStreamWaitEvent on a completed event recorded on another stream"),
    Op("stream_wait_stream", "stream wait_stream", 1000, {},
       "make a stream wait for another (idle) one: cudaEventRecord of a marker event "
       "on the other, cudaStreamWaitEvent on it"),
    Op("event_create_destroy", "event create+destroy", 1000, {"streams-py": 2.0},
       "cudaEventCreateWithFlags(DisableTiming) + cudaEventDestroy"),
    Op("stream_create_destroy", "stream create+destroy", 200, {"streams-py": 2.0},
       "cudaStreamCreate + cudaStreamDestroy (what Stream() makes)"),
    Op("stream_pool_acquire", "stream from a pool", 1000, {},
       "take a stream from a pool and give it back (StreamPool.acquire + close; "
       "torch.cuda.Stream(), which takes one from torch's pool); no CUDA call, so no floor"),
    Op("event_pool_acquire", "event from a pool", 1000, {},
       "take an event from a pool and give it back (EventPool.acquire + close); no CUDA "
       "call, so no floor"),
    Op("kernel_launch", "empty-kernel launch", 200, {"streams-py": 1.10},
       "cudaLaunchKernel of an empty 1x1 kernel"),
    Op("kernel_launch_sync", "empty-kernel launch + sync", 100, {},
       "empty-kernel launch, then synchronize the stream"),
    Op("kernel_launch_args4", "4-argument launch", 200, {},
       "cudaLaunchKernel of an empty 1x1 kernel of 4 parameters (pointers and scalars), "
       "the arguments given at each call"),
    Op("kernel_launch_args16", "16-argument launch", 200, {"streams-py": 1.2},
       "cudaLaunchKernel of an empty 1x1 kernel of 16 parameters (pointers and "
       "scalars), the arguments given at each call"),
    Op("prepared_launch", "prepared launch", 200, {"streams-py": 1.03},
       "cudaLaunchKernel of an empty 1x1 kernel, configuration and arguments packed "
       "once (streams' PreparedLaunch)"),
    Op("host_func_enqueue", "host-func enqueue (busy)", 200, {},
       "cudaLaunchHostFunc while a spin kernel holds the stream, so no callback "
       "runs during the timing"),
    Op("host_func_round_trip", "host-func round trip", 100, {"streams-py": 1.15},
       "enqueue a host function, synchronize: the callback has run"),
    Op("host_func_native_round_trip", "native host-func round trip", 100,
       {"streams-py": 1.05},
       "enqueue a native host function (a C function, no Python, no GIL), synchronize: it "
       "has run (streams: Stream.launch_host_func of a C function's address); next to the "
       "Python callback's round trip above",
       only=(("streams-py", "streams-py-baseline"),
             "native host functions are streams' (other libraries' rows would time their "
             "own Python callbacks)")),
    Op("host_func_throughput", "host-func throughput", 500, {},
       "N host functions enqueued back to back while they run, then one "
       "synchronize; ns per callback"),
    Op("host_func_throughput_8threads", "host-func throughput, 8 threads", 800, {},
       f"N host functions enqueued on one stream by {PRODUCERS} threads at once, "
       "until all have run; ns per callback"),
    Op("graph_launch", "10-kernel graph launch", 50, {"streams-py": 1.05},
       "cudaGraphLaunch of a graph captured from 10 empty-kernel launches",
       nodes=GRAPH_KERNELS),
    Op("graph_launch_sync", "10-kernel graph launch + sync", 50, {},
       "graph launch, then synchronize the stream"),
    # Deadlines (docs/deadlines.rst): the same work with a progress marker
    # after it, against the row without; the watchdog's thread runs (it
    # wakes every tick while the markers are pending).
    Op("kernel_launch_deadline", "empty-kernel launch in a deadline scope", 200, {},
       "with streams.deadline(s, 60): one empty-kernel launch; the marker after it is a "
       "cuStreamWriteValue64; next to the empty-kernel launch row",
       only=(("streams-py", "streams-py-baseline"), "deadlines are streams'")),
    Op("graph_launch_deadline", "10-kernel graph launch, deadline=", 50,
       {"streams-py": times("graph_launch", 1.05)},
       "GraphExec.launch(s, deadline=60): the replay, a capture check and a marker after it; "
       "the target: at most 5% over streams' 10-kernel graph launch",
       only=(("streams-py", "streams-py-baseline"), "deadlines are streams'")),
    Op("graph_launch_sync_deadline", "10-kernel graph launch, deadline=, + sync", 50,
       {"streams-py": times("graph_launch_sync", 1.05)},
       "the graph launch with a deadline, then synchronize the stream (which checks its "
       "deadlines); the target: at most 5% over streams' launch + sync",
       only=(("streams-py", "streams-py-baseline"), "deadlines are streams'")),
    Op("graph_capture_instantiate", "10-kernel capture + instantiate", 20, {},
       "capture 10 empty-kernel launches (thread-local mode), instantiate the graph, "
       "destroy both"),
    # Graph launch against graph size: these and graph_launch launch graphs
    # of 1, 10, 100 and 1000 empty-kernel nodes (Op.nodes).
    Op("graph_launch_1", "1-kernel graph launch", 50, {},
       "cudaGraphLaunch of a graph captured from 1 empty-kernel launch", nodes=1),
    Op("graph_launch_100", "100-kernel graph launch", 50, {},
       "cudaGraphLaunch of a graph captured from 100 empty-kernel launches", nodes=100),
    Op("graph_launch_1000", "1000-kernel graph launch", 10, {},
       "cudaGraphLaunch of a graph captured from 1000 empty-kernel launches", nodes=1000),
    Op("memcpy_loop_8", "8 copies, a call each", 200, {},
       f"{COPIES} cudaMemcpyAsync of {COPY_BYTES // 1024} KiB device to device, one call each "
       "(streams: a Python loop of memcpy_async)"),
    Op("memcpy_batch_8", "8 copies, one batched call", 200, {},
       f"one cudaMemcpyBatchAsync of the same {COPIES} copies (CUDA 12.8 or newer; streams: "
       "memcpy_batch_async)"),
    # Steps of an application's loop, each a mix of the calls above, timed
    # as one: what a wrapper adds over a whole step (ns per step).
    # Steps a batch: whole periods of HOST_FUNC_EVERY at any scale, so that
    # every batch has its share of host functions; and few enough that a
    # batch never fills a stream's queue (QUEUE_DEPTH).
    Op("pipeline_inference", "inference step", 2 * HOST_FUNC_EVERY, {"streams-py": 1.10},
       f"one step of an inference loop on two streams: {PIPELINE_KERNELS} launches of a "
       f"4-parameter kernel and a {GRAPH_KERNELS}-kernel graph replay on the compute stream, "
       "an event recorded there that the output stream waits for, a "
       f"{COPY_BYTES // 1024} KiB device-to-host copy into pinned memory on the output "
       f"stream, and there a host function every {HOST_FUNC_EVERY} steps; ns per step",
       period=HOST_FUNC_EVERY),
    Op("pipeline_data_loader", "data-loader step", 50, {"streams-py": 1.10},
       f"one step of a data loader: {LOADER_COPIES} copies of {COPY_BYTES // 1024} KiB "
       "from pinned memory to the device on a copy stream, an event recorded there, the "
       "compute stream waiting for it, a 4-parameter kernel on the compute stream (its "
       "pointers: the copies' destinations); ns per step"),
    # The interop rule: another library's stream is taken at the boundary
    # without a wrapper, so it costs little more than streams' own.  Last: its
    # set-up imports torch into the streams worker, where it then stays, and
    # no other row should be timed next to that.
    Op("event_record_torch_stream", "event record on a PyTorch stream", 1000,
       {"streams-py": over("event_record", 100)},
       "Event.record(torch.cuda.Stream) on an idle stream: cudaEventRecord, as event_record; "
       "the target: at most 100 ns more than streams' event_record",
       only=(("streams-py", "streams-py-baseline"),
             "a row of streams' interop: a PyTorch stream given to streams' Event.record")),
)
OP_BY_NAME = {op.name: op for op in OPS}
# Operations that make no CUDA call at all: they have no floor.
NO_FLOOR = {"python_call": "no CUDA call, no floor: the Python part of a call",
            "stream_pool_acquire": "a pool hands out a kept handle: no CUDA call, no floor",
            "event_pool_acquire": "a pool hands out a kept handle: no CUDA call, no floor"}

# Operations whose floor is another's: the same CUDA calls, so the same C
# loop (the C program runs that one for them too).
FLOOR_OF = {"event_record_torch_stream": "event_record",
            "kernel_launch_deadline": "kernel_launch", "graph_launch_deadline": "graph_launch",
            "graph_launch_sync_deadline": "graph_launch_sync"}


def floor_op(op):
    """The name of ``op``'s loop in the floor (src/floor.h)."""
    return FLOOR_OF.get(op, op)


# The graph-launch rows by size (Op.nodes): the same launch, of a graph of
# so many empty-kernel nodes.
GRAPH_SIZES = {op.name: op.nodes for op in OPS if op.nodes}
PIPELINE_OPS = ("pipeline_inference", "pipeline_data_loader")
#: The kernel of the pipelines' launches (its parameters: ARG_KERNELS).
PIPELINE_ARGS = "kernel_launch_args4"

#: The CUDA runtime calls of one step of each pipeline row: src/floor.h
#: makes them, and so does every contender's step (pipeline_inference's
#: host function: one every HOST_FUNC_EVERY steps).
STEP_CALLS = {
    "pipeline_inference": {"cudaLaunchKernel": PIPELINE_KERNELS, "cudaGraphLaunch": 1,
                           "cudaEventRecord": 1, "cudaStreamWaitEvent": 1,
                           "cudaMemcpyAsync": 1, "cudaLaunchHostFunc": 1 / HOST_FUNC_EVERY},
    "pipeline_data_loader": {"cudaMemcpyAsync": LOADER_COPIES, "cudaEventRecord": 1,
                             "cudaStreamWaitEvent": 1, "cudaLaunchKernel": 1},
}
#: The stream of each call of a step, in src/floor.h and every contender's
#: step: the inference step computes on ``s`` and copies out on ``other``,
#: the data loader copies in on ``other`` and computes on ``s``.
STEP_STREAMS = {
    "pipeline_inference": {"cudaLaunchKernel": "s", "cudaGraphLaunch": "s",
                           "cudaEventRecord": "s", "cudaStreamWaitEvent": "other",
                           "cudaMemcpyAsync": "other", "cudaLaunchHostFunc": "other"},
    "pipeline_data_loader": {"cudaMemcpyAsync": "other", "cudaEventRecord": "other",
                             "cudaStreamWaitEvent": "s", "cudaLaunchKernel": "s"},
}
#: The direction of a step's copies: device to pinned memory (D2H; the
#: first device buffer into the first pinned one) or pinned memory to the
#: device (H2D; each pinned buffer into the device buffer of its index).
STEP_COPIES = {"pipeline_inference": "D2H", "pipeline_data_loader": "H2D"}


def host_funcs(steps):
    """The host functions that a batch of ``steps`` pipeline_inference steps
    enqueues (the step count starts from 0 at each batch)."""
    return steps // HOST_FUNC_EVERY + (steps % HOST_FUNC_EVERY > HOST_FUNC_AT)


def graph_nodes(op):
    """The kernel nodes of the graph that ``op`` launches, replays or captures."""
    return GRAPH_SIZES.get(op, GRAPH_KERNELS)


# Operations that leave work on the stream: each batch is followed by an
# untimed synchronize, so that no batch waits for a full launch queue
# (which would time the GPU, not the call).
ENQUEUES = {"event_record", "event_record_torch_stream", "event_record_query", "stream_wait_event", "stream_wait_stream",
            "kernel_launch", "kernel_launch_args4", "kernel_launch_args16", "prepared_launch",
            "graph_launch", "memcpy_loop_8", "memcpy_batch_8", "kernel_launch_deadline",
            "graph_launch_deadline", *GRAPH_SIZES, *PIPELINE_OPS}
HOST_FUNC_OPS = ("host_func_enqueue", "host_func_round_trip", "host_func_native_round_trip",
                 "host_func_throughput", "host_func_throughput_8threads")
KERNEL_OPS = ("kernel_launch", "kernel_launch_sync", "kernel_launch_args4",
              "kernel_launch_args16", "prepared_launch", "kernel_launch_deadline")
GRAPH_OPS = ("graph_launch", "graph_launch_sync", "graph_capture_instantiate",
             "graph_launch_deadline", "graph_launch_sync_deadline", "graph_launch_1",
             "graph_launch_100", "graph_launch_1000")
DEADLINE_OPS = ("kernel_launch_deadline", "graph_launch_deadline", "graph_launch_sync_deadline")

# The kernels of the argument rows, with their parameters as
# streams.Module.get_kernel's signature names them.  Not in streams' built-in
# PTX yet: until they are, those rows are n/a.
ARG_KERNELS = {
    "kernel_launch_args4": ("streams_args4", ("pointer", "pointer", "uint64", "float32")),
    "kernel_launch_args16": ("streams_args16", ("pointer",) * 4 + ("uint64",) * 4
                             + ("uint32",) * 4 + ("float32",) * 2 + ("float64",) * 2),
}


class Contender:
    __slots__ = ("name", "label", "module", "hidden", "about")

    def __init__(self, name, label, module, about, hidden=False):
        self.name = name
        self.label = label
        self.module = module        # probed with importlib.util.find_spec
        self.about = about
        self.hidden = hidden


CONTENDERS = (
    Contender("c", "C program", None,
              "benchmarks/c_floor/bench.c: the floor's C loops (src/floor.h) in a "
              "process of their own (gcc, static cudart), a second reference"),
    Contender("streams-py", "streams (Py)", "streams", "streams from Python"),
    # Before/after in one run: another build of streams (an in-place build of
    # another commit, given with --baseline DIR) timed next to this one.
    Contender("streams-py-baseline", "streams (Py, baseline)", "streams",
              "streams from Python, the build in --baseline DIR", hidden=True),
    Contender("streams-cy", "streams (Cy)", "streams",
              "benchmarks/cy_bench.pyx: `from streams cimport Stream, Event`, nogil C-level "
              "calls (c_query, c_record, ..., Kernel/PreparedLaunch/GraphExec.c_launch)"),
    # The same, compiled against the --baseline build's .pxd files and run
    # with its streams: the C-level API before and after, in one run.
    Contender("streams-cy-baseline", "streams (Cy, baseline)", "streams",
              "benchmarks/cy_bench.pyx compiled against the build in --baseline DIR",
              hidden=True),
    Contender("cupy", "CuPy", "cupy", "cupy.cuda.Stream/Event, Function from the same PTX"),
    Contender("torch", "PyTorch", "torch", "torch.cuda.Stream/Event, torch.cuda._sleep(0)"),
    Contender("cuda-core", "cuda.core", "cuda.core",
              "cuda.core Device/Stream/Event, launch() of ObjectCode from the same PTX"),
    Contender("cuda-bindings", "cuda.bindings", "cuda.bindings",
              "cuda.bindings.runtime calls (driver cuLaunchKernel for kernels)"),
    Contender("numba-cuda", "numba-cuda", "numba", "numba.cuda.stream()/event(), @cuda.jit"),
    # Calls nothing: it lets the harness be tested end to end without a GPU.
    Contender("noop", "no-op (self-test)", None,
              "a pure-Python stand-in that times empty calls (no GPU needed)", hidden=True),
    # A second one: --one-process is tested with two members in one process.
    Contender("noop-2", "no-op 2 (self-test)", None,
              "the no-op stand-in again (no GPU needed)", hidden=True),
)
CONTENDER_BY_NAME = {c.name: c for c in CONTENDERS}
DEFAULT_CONTENDERS = tuple(c.name for c in CONTENDERS if not c.hidden)
GPU_FREE = {"noop", "noop-2"}

#: The hidden contenders that --baseline adds, each after the one it is the
#: baseline of.
BASELINE_OF = {"streams-py-baseline": "streams-py", "streams-cy-baseline": "streams-cy"}

FULL = {"rounds": 6, "batches": 15, "scale": 1.0}
QUICK = {"rounds": 2, "batches": 5, "scale": 0.2}


def short_name(contender):
    """Py / Cy for the two streams columns, else the contender's name."""
    return {"streams-py": "Py", "streams-cy": "Cy"}.get(contender, contender)


def target_text(target):
    """``<=1.25`` (a ratio to the floor) or ``<=event_record+100ns`` (over())."""
    if isinstance(target, dict) and "times" in target:
        return f"<={target['of']}*{target['times']:g}"
    if isinstance(target, dict):
        return f"<={target['of']}+{target['plus_ns']:g}ns"
    return f"<={target:g}"


def targets_text(targets):
    """``Py<=1.3 Cy<=1.05``: an operation's targets, as the table and --list show them."""
    return " ".join(short_name(c) + target_text(t) for c, t in targets.items())
