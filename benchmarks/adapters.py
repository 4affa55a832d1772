"""Each contender's operations, inside its own worker process.

An :class:`Adapter` says, for each operation, the Python statement that
does it once with that library; the "+ sync" and host-function operations
are derived from those statements the same way for every library.  Each
operation's in-process floor (``Adapter.floor``) is streams' C loop of the
same CUDA calls, run in the worker's own process.  Only the worker imports
the libraries themselves.
"""
import functools
import importlib.util
import os
import platform

from benchmarks.builders import CY_MODULE, read
from benchmarks.ops import (ARG_KERNELS, COPIES, COPY_BYTES, DEADLINE_OPS, ENQUEUES,
                            GRAPH_KERNELS, GRAPH_OPS, GRAPH_SIZES, HOST_FUNC_AT, HOST_FUNC_EVERY,
                            HOST_FUNC_OPS, KERNEL_OPS, LOADER_COPIES, NO_FLOOR, OP_BY_NAME,
                            PIPELINE_ARGS, PIPELINE_KERNELS, PIPELINE_OPS, PRODUCERS, floor_op,
                            graph_nodes, host_funcs)
from benchmarks.timing import (Case, NotAvailable, close_quietly, describe, make_loop,
                               make_stmt, producers)
from benchmarks.under_test import streams_facts


def _dist_version(name):
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None


def _int_handle(h):
    """An int out of a handle object of any of the libraries."""
    if isinstance(h, int):
        return h
    value = getattr(h, "value", None)      # ctypes.c_void_p
    if isinstance(value, int):
        return value
    try:
        return int(h)
    except TypeError:
        return int(h.getPtr())


def _spin_wrapper(handle):
    """A streams.Stream on another library's stream, only to hold it busy
    with streams' spin kernel (same context: the device's primary one)."""
    import streams
    return streams.Stream.from_handle(_int_handle(handle))


class Adapter:
    """A contender inside its worker: statements for each operation.

    ``stmts`` maps an operation to the Python statement that does it once,
    over names that ``env(op)`` makes; ``sync`` is the statement that
    synchronizes ``s``.  The "+ sync" operations and the host-function
    operations are derived from these, the same way for every library.
    ``{name}`` in a statement is filled from ``env(op)["_fill"]`` (the
    kernel or the arguments that set-up chose).  An adapter makes its names
    in ``make_env(op, closers)``, which puts on ``closers`` how to undo each
    thing it makes as soon as it is made.
    """

    stmts = {}
    sync = "s.synchronize()"
    notes = {}
    na = {}

    def __init__(self, ptx_path=None, cy_module=None):
        self.ptx_path = ptx_path
        self.cy_module = cy_module

    def setup(self):
        pass

    def info(self):
        return {}

    def env(self, op):
        """The names of ``op``'s statement (:meth:`make_env`), with
        ``_closers``: what undoes, newest last, what set-up made.  A set-up
        that fails part way has what it made so far undone here, before its
        error goes on."""
        closers = []
        try:
            env = self.make_env(op, closers)
        except BaseException:
            close_quietly(closers)
            raise
        env["_closers"] = closers
        return env

    def make_env(self, op, closers):
        raise NotImplementedError

    def busy_stream(self, env):
        """A streams.Stream on ``env['s']``, for the spin kernel."""
        raise NotAvailable("no way to hold this library's stream busy")

    def ptx(self, kernel="streams_empty"):
        """The shared PTX, where it has ``kernel``."""
        if not self.ptx_path:
            raise NotAvailable("the built-in PTX was not found (needs a source checkout)")
        ptx = read(self.ptx_path, "rb")
        if f".entry {kernel}(".encode() not in ptx:
            raise NotAvailable(f"streams' built-in PTX has no kernel {kernel} (yet)")
        return ptx

    def floor(self, op):
        """``floor(n) -> ns``: n of ``op``'s CUDA calls from C, in this process."""
        if op in NO_FLOOR:
            raise NotAvailable(NO_FLOOR[op])
        try:
            from streams._cudart import floor_batch
        except ImportError as exc:
            raise NotAvailable(f"no in-process floor here: {describe(exc)}") from None
        return functools.partial(floor_batch, floor_op(op))

    def make_case(self, op):
        if op in self.na:
            raise NotAvailable(self.na[op])
        base = {"kernel_launch_sync": "kernel_launch",
                "graph_launch_sync": "graph_launch",
                "graph_launch_sync_deadline": "graph_launch_deadline"}.get(op, op)
        if base in HOST_FUNC_OPS and base != "host_func_native_round_trip":
            base = "host_func_enqueue"
        # Every graph size is launched by graph_launch's statement.
        key = "graph_launch" if base in GRAPH_SIZES else base
        if key not in self.stmts:
            raise NotAvailable(f"no {OP_BY_NAME[op].label} in this library")
        if op in ARG_KERNELS or op in PIPELINE_OPS:
            # n/a before anything is set up
            self.ptx(ARG_KERNELS[PIPELINE_ARGS if op in PIPELINE_OPS else op][0])
        env = self.env(op)
        closers = env.pop("_closers", [])
        stmt = self.stmts[key]
        for name, text in env.pop("_fill", {}).items():
            stmt = stmt.replace("{" + name + "}", text)
        note = self.notes.get(op) or self.notes.get(base) or self.notes.get(key)
        try:
            if op in HOST_FUNC_OPS:
                case = _host_func_case(op, stmt, self.sync, env, self.busy_stream(env))
            elif op in PIPELINE_OPS:
                case = _pipeline_case(op, stmt, self.sync, env)
            elif base != op:
                case = Case(make_loop(stmt + "\n" + self.sync, **env))
            else:
                sync = make_stmt(self.sync, **env)
                after = (lambda n, ns: sync()) if op in ENQUEUES else None
                case = Case(make_loop(stmt, **env), after=after)
        except BaseException:
            close_quietly(closers)
            raise
        case.closers = closers
        case.note = note
        return case


def _kept(closers, obj, close=None):
    """``obj``, with ``close`` (by default its own ``close``) put on
    ``closers`` at once."""
    closers.append(close or obj.close)
    return obj


def _bind_args(op, env, values):
    """Bind a0, a1, ... in ``env`` to ``values[kind]`` for each parameter of
    ``op``'s kernel, and fill ``{args}`` with them."""
    kinds = ARG_KERNELS[op][1]
    for i, kind in enumerate(kinds):
        env[f"a{i}"] = values[kind]
    env.setdefault("_fill", {})["args"] = ", ".join(f"a{i}" for i in range(len(kinds)))


def _callbacks(env):
    """Callbacks that count their runs into env['box'][0] (0-, 1- and 3-arg)."""
    box = [0]

    def cb0():
        box[0] += 1

    def cb(arg):
        box[0] += 1

    def cb3(stream, status, arg):
        box[0] += 1

    env.update(box=box, cb0=cb0, cb=cb, cb3=cb3)
    return env


def _pipeline_env(env):
    """The names every pipeline step uses besides the library's: ``r8``
    (the inference step's kernels), ``step`` (the step's number in its
    period of ``every``: a local of the timed loop, 0 at each batch's
    start), ``at`` (the step of each period that enqueues the host
    function) and ``nb`` (each copy's size)."""
    env.update(r8=range(PIPELINE_KERNELS), step=0, every=HOST_FUNC_EVERY, at=HOST_FUNC_AT,
               nb=COPY_BYTES)
    return env


def _pipeline_case(op, stmt, sync_src, env):
    """A pipeline row: ``stmt``, one step, once per call.  After each batch,
    untimed, both streams are synchronized and pipeline_inference's host
    functions counted: those the batch enqueued (ops.host_funcs), all run
    by then."""
    syncs = [make_stmt(sync_src, **env), make_stmt(sync_src, **dict(env, s=env["other"]))]
    box = env.get("box")
    expected = [0]

    def after(n, ns):
        for sync in syncs:
            sync()
        if op == "pipeline_inference":
            expected[0] += host_funcs(n)
            if box[0] != expected[0]:
                raise RuntimeError(f"{expected[0]} host functions enqueued but {box[0]} ran "
                                   "by the synchronize")

    return Case(make_loop(stmt, **env), after=after)


def _native_callback(env, st):
    """A native host function that counts its runs into env['box'][0]: the
    C function streams.testing ships (an atomic add), given by address, on a
    counter in host memory (a ctypes array, read as box[0])."""
    import ctypes
    if not hasattr(st.testing, "native_increment"):
        raise NotAvailable("not available yet: streams has no native host functions")
    box = (ctypes.c_uint64 * 1)()
    env.update(box=box, native_fn=st.testing.native_increment,
               native_box=ctypes.addressof(box))
    return env


def _host_func_case(op, enqueue, sync_src, env, busy):
    box = env["box"]
    sync = make_stmt(sync_src, **env)
    expected = [0]

    def check(n):
        # A callback that did not run by the synchronize would make a
        # round trip look cheaper than it is.
        expected[0] += n
        if box[0] != expected[0]:
            raise RuntimeError(f"{expected[0]} host functions enqueued but {box[0]} ran "
                               "by the synchronize")

    if op == "host_func_enqueue":
        spin_us = [None]

        def before(n):
            import streams.testing
            streams.testing.spin(busy, spin_us[0] or n * 50.0 + 1000.0)

        def after(n, ns):
            drained = busy.query()
            sync()
            check(n)
            # Three times this batch: outlasts the next one without making
            # every batch wait long for the spin to end.
            spin_us[0] = max(1000.0, 3.0 * ns / 1000.0 + 500.0)
            return drained

        return Case(make_loop(enqueue, **env), before=before, after=after)

    if op in ("host_func_round_trip", "host_func_native_round_trip"):
        timed = make_loop(enqueue + "\n" + sync_src, **env)
    elif op == "host_func_throughput_8threads":
        timed = producers(make_loop(enqueue, **env), sync, PRODUCERS)
    else:
        timed = make_loop(enqueue, tail=sync_src, **env)

    def after(n, ns):
        sync()
        check(n)

    return Case(timed, after=after)


class StreamsPy(Adapter):
    stmts = {
        "python_call": "s.closed",
        "stream_query": "s.query()",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record(ev)",
        "event_record_torch_stream": "ev.record(ts)",
        "event_query": "done.query()",
        "event_record_query": "s.record(ev)\nev.query()",
        "stream_wait_event": "s.wait_event(done)",
        "stream_wait_stream": "s.wait_stream(other)",
        "event_create_destroy": "Event().close()",
        "stream_create_destroy": "Stream().close()",
        "stream_pool_acquire": "spool.acquire().close()",
        "event_pool_acquire": "epool.acquire().close()",
        "kernel_launch": "{kernel}",
        "kernel_launch_args4": "s.launch(kx, 1, 1, {args})",
        "kernel_launch_args16": "s.launch(kx, 1, 1, {args})",
        "prepared_launch": "p.launch(s)",
        "host_func_enqueue": "s.launch_host_func(cb, None)",
        "host_func_native_round_trip": "s.launch_host_func(native_fn, native_box)",
        "graph_launch": "ex.launch(s)",
        "graph_launch_deadline": "ex.launch(s, deadline=60.0)",
        "kernel_launch_deadline": "with deadline(s, 60.0):\n    {kernel}",
        "graph_capture_instantiate": ('s.begin_capture("thread_local")\n'
                                      "for _ in r10:\n    {kernel}\n"
                                      "cg = s.end_capture()\ncx = cg.instantiate()\n"
                                      "cx.close()\ncg.close()"),
        "memcpy_loop_8": "for d, src in pairs:\n    memcpy_async(d, src, nb, s)",
        "memcpy_batch_8": "memcpy_batch_async(batch, s)",
        "pipeline_inference": ("for _ in r8:\n    s.launch(kx, 1, 1, {args})\nex.launch(s)\n"
                               "s.record(ev)\nother.wait_event(ev)\n"
                               "memcpy_async(host, dev, nb, other)\n"
                               "if step == at:\n    other.launch_host_func(cb, None)\n"
                               "step += 1\nif step == every:\n    step = 0"),
        "pipeline_data_loader": ("for dst, src in loads:\n    memcpy_async(dst, src, nb, other)\n"
                                 "other.record(ev)\ns.wait_event(ev)\n"
                                 "s.launch(kx, 1, 1, {args})"),
    }
    notes = {
        "kernel_launch_args4": "Stream.launch(k, 1, 1, *args) of Module.from_ptx, with "
                               "get_kernel(signature=...); pointers: DeviceBuffers",
        "kernel_launch_args16": "Stream.launch(k, 1, 1, *args) of Module.from_ptx, with "
                                "get_kernel(signature=...); pointers: DeviceBuffers",
        "prepared_launch": "PreparedLaunch.launch(s) of Kernel.prepare(1, 1)",
        "pipeline_inference": "Stream.launch(k, 1, 1, *args) (DeviceBuffers, int, float), "
                              "GraphExec.launch, Stream.record, wait_event, memcpy_async "
                              "into a PinnedBuffer, launch_host_func of a Python callback",
        "pipeline_data_loader": "memcpy_async from PinnedBuffers into DeviceBuffers, "
                                "Stream.record, wait_event, Stream.launch(k, 1, 1, *args)",
        "event_record_torch_stream": "Event.record(torch.cuda.Stream()); its target is "
                                     "to event record's Stream.record(Event): both record "
                                     "through the same code once the stream is known",
    }

    def setup(self):
        import streams
        import streams.testing
        self.streams = streams
        streams.synchronize_device()    # creates the context now, and fails if it can't
        # The kernel and graph APIs are newer than the rest: use them where
        # this build has them, and say so in the cell's note.
        self.has_launch = hasattr(streams.Stream, "launch") and hasattr(streams, "Module")
        self.has_graphs = (hasattr(streams.Stream, "begin_capture")
                           and hasattr(streams.Stream, "end_capture")
                           and hasattr(streams, "Graph"))
        na = {}
        if not self.has_launch:
            na.update(dict.fromkeys(("prepared_launch", *ARG_KERNELS),
                                    "not available yet: streams has no Module/Stream.launch"))
        if not self.has_graphs:
            na.update(dict.fromkeys(GRAPH_OPS, "not available yet: streams has no Graph API"))
        if not hasattr(streams, "deadline"):
            na.update(dict.fromkeys(DEADLINE_OPS, "not available yet: streams has no deadlines"))
        if not hasattr(streams, "PinnedBuffer"):
            na.update(dict.fromkeys(PIPELINE_OPS, "not available yet: streams has no PinnedBuffer"))
        if not self.has_launch:
            na.update(dict.fromkeys(PIPELINE_OPS,
                                    "not available yet: streams has no Module/Stream.launch"))
        if not self.has_graphs:
            na["pipeline_inference"] = "not available yet: streams has no Graph API"
        if not hasattr(streams, "memcpy_batch_async"):
            na["memcpy_batch_8"] = "not available yet: streams has no memcpy_batch_async"
        elif streams.runtime_version() < 12080:
            na["memcpy_batch_8"] = ("cudaMemcpyBatchAsync needs CUDA 12.8; this build uses "
                                    f"{streams.runtime_version()}")
        self.na = na

    def info(self):
        return {"versions": {"streams": streams_facts()},
                "apis": {"Stream.launch": self.has_launch, "graphs": self.has_graphs}}

    def _module(self, env, kernel="streams_empty"):
        """A Module of the shared PTX, closed with the case."""
        mod = self.streams.Module.from_ptx(self.ptx(kernel).decode("ascii"))
        env["_closers"].append(mod.close)
        return mod

    def _launcher(self, s, env):
        """Set ``env`` up for an empty-kernel launch on ``s``; returns the
        statement, a set-up-only launch function, and the cell's note."""
        st = self.streams
        fallback = ""
        if self.has_launch:
            try:
                k = env["k"] = self._module(env).get_kernel("streams_empty")
                s.launch(k, 1, 1)
                s.synchronize()
                return ("s.launch(k, 1, 1)", lambda stream: stream.launch(k, 1, 1),
                        "Stream.launch(k, 1, 1) of Module.from_ptx (the shared PTX)")
            except Exception as exc:
                env.pop("k", None)
                fallback = f"Stream.launch failed ({describe(exc)}), so: "
        launch = env["launch"] = st.testing.launch_empty
        launch(s)           # loads the kernels now: never inside a capture
        s.synchronize()
        return "launch(s)", launch, fallback + "streams.testing.launch_empty(s)"

    def make_env(self, op, closers):
        st = self.streams
        s, other, ev, done = (_kept(closers, make())
                              for make in (st.Stream, st.Stream, st.Event, st.Event))
        other.record(done)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "Event": st.Event,
               "Stream": st.Stream, "r10": range(GRAPH_KERNELS),
               "deadline": getattr(st, "deadline", None), "_closers": closers}
        if op in ("stream_pool_acquire", "event_pool_acquire"):
            pool = _kept(closers, st.StreamPool() if op == "stream_pool_acquire"
                         else st.EventPool())
            env["spool" if op == "stream_pool_acquire" else "epool"] = pool
        if op == "event_record_torch_stream":
            self._torch_stream(env)
        if op in ("memcpy_loop_8", "memcpy_batch_8"):
            bufs = [_kept(closers, st.DeviceBuffer(COPY_BYTES, s)) for _ in range(2 * COPIES)]
            env["pairs"] = list(zip(bufs[COPIES:], bufs[:COPIES]))
            env["batch"] = [(d, src, COPY_BYTES) for d, src in env["pairs"]]
            env.update(nb=COPY_BYTES, memcpy_async=st.memcpy_async,
                       memcpy_batch_async=getattr(st, "memcpy_batch_async", None))
            s.synchronize()
        elif op in ARG_KERNELS:
            name, signature = ARG_KERNELS[op]
            env["kx"] = self._module(env, name).get_kernel(name, signature=signature)
            buf = _kept(closers, st.DeviceBuffer(64, s))
            _bind_args(op, env, {"pointer": buf, "uint64": 1, "uint32": 1, "float32": 1.0,
                                 "float64": 1.0})
        elif op == "prepared_launch":
            p = env["p"] = self._module(env).get_kernel("streams_empty").prepare(1, 1)
            p.launch(s)
            s.synchronize()
        elif op in PIPELINE_OPS:
            name, signature = ARG_KERNELS[PIPELINE_ARGS]
            env["kx"] = self._module(env, name).get_kernel(name, signature=signature)
            devs = [_kept(closers, st.DeviceBuffer(COPY_BYTES, s))
                    for _ in range(LOADER_COPIES)]
            hosts = [_kept(closers, st.PinnedBuffer(COPY_BYTES)) for _ in range(LOADER_COPIES)]
            _bind_args(PIPELINE_ARGS, env, {"pointer": devs[0], "uint64": 1, "uint32": 1,
                                            "float32": 1.0, "float64": 1.0})
            env.update(a1=devs[1], dev=devs[0], host=hosts[0], loads=list(zip(devs, hosts)),
                       memcpy_async=st.memcpy_async)
            _pipeline_env(env)
            if op == "pipeline_inference":
                _, launch, _ = self._launcher(s, env)
                env["ex"] = self._graph(s, env, launch, GRAPH_KERNELS)
            s.synchronize()
        elif op in KERNEL_OPS or op in GRAPH_OPS:
            stmt, launch, note = self._launcher(s, env)
            env["_fill"] = {"kernel": stmt}
            self.notes = dict(self.notes, kernel_launch=note, graph_capture_instantiate=(
                f"begin_capture('thread_local'), end_capture, instantiate, close; kernels: {note}"))
            if op in ("graph_launch", "graph_launch_sync", "graph_launch_deadline",
                      "graph_launch_sync_deadline", *GRAPH_SIZES):
                env["ex"] = self._graph(s, env, launch, graph_nodes(op))
                self.notes["graph_launch"] = ("GraphExec.launch(s) of Stream.begin_capture/"
                                              f"end_capture + Graph.instantiate; kernels: {note}")
        if op == "host_func_native_round_trip":
            return _native_callback(env, st)
        return _callbacks(env)

    def _graph(self, s, env, launch, nodes):
        """The executable graph of ``nodes`` captured launches of ``launch``
        on ``s``, uploaded; closed with the case."""
        s.begin_capture()
        try:
            for _ in range(nodes):
                launch(s)
        finally:
            g = s.end_capture()
        env["_closers"].append(getattr(g, "close", lambda: None))
        ex = g.instantiate()
        env["_closers"].append(getattr(ex, "close", lambda: None))
        if hasattr(ex, "upload"):
            ex.upload(s)
        s.synchronize()
        return ex

    def _torch_stream(self, env):
        """Bind ``ts`` to a PyTorch stream (on device 0, where ``ev`` is), and
        ``s`` to a streams.Stream on its handle, which the untimed
        synchronize after each batch waits for."""
        try:
            import torch
        except Exception as exc:
            raise NotAvailable(f"PyTorch is not importable in this worker: {describe(exc)}")
        if not torch.cuda.is_available():
            raise NotAvailable("torch.cuda.is_available() is False in this worker")
        ts = env["ts"] = torch.cuda.Stream(device=0)
        try:
            env["ev"].record(ts)
        except (TypeError, ValueError) as exc:
            raise NotAvailable("this build of streams does not take a PyTorch stream in "
                               f"Event.record: {describe(exc)}") from None
        s = env["s"] = self.streams.Stream.from_handle(ts.cuda_stream, owner=ts)
        env["_closers"].append(s.close)
        s.synchronize()

    def busy_stream(self, env):
        return env["s"]


class StreamsCy(Adapter):
    """The nogil C-level methods, timed by benchmarks/cy_bench.pyx itself."""

    na = dict.fromkeys(PIPELINE_OPS, "streams has no C-level (cimport) copy: the step's "
                                     "memcpy_async is Python-level")

    def setup(self):
        import streams
        if not self.cy_module:
            raise RuntimeError("no compiled Cython benchmark module was given")
        spec = importlib.util.spec_from_file_location(CY_MODULE, self.cy_module)
        self.mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mod)
        self.streams = streams
        streams.synchronize_device()

    def info(self):
        import Cython
        return {"versions": {"streams": streams_facts(), "cython_bench_module": self.cy_module,
                             "cython_installed": Cython.__version__}}

    def make_case(self, op):
        if op in self.na:
            raise NotAvailable(self.na[op])
        if op not in self.mod.OPS:
            raise NotAvailable(self.mod.NA.get(op, "no C-level (cimport) API for this operation"))
        kernel_name, signature = ARG_KERNELS.get(op, ("streams_empty", None))
        ptx = self.ptx(kernel_name) if op in KERNEL_OPS or op in GRAPH_OPS else None
        st = self.streams
        s, other, ev, done = st.Stream(), st.Stream(), st.Event(), st.Event()
        other.record(done)
        other.synchronize()
        closers = [s.close, other.close, ev.close, done.close]
        prepared = graph = kernel = None
        note = None
        try:
            if ptx is not None:
                mod = st.Module.from_ptx(ptx.decode("ascii"))
                closers.append(mod.close)
                kernel = mod.get_kernel(kernel_name, signature=signature)
                prepared = kernel.prepare(1, 1) if signature is None else None
                note = ("PreparedLaunch.c_launch of Kernel.prepare(1, 1)" if signature is None
                        else "Kernel.c_launch with the arguments packed by the caller")
            if op in ("graph_launch", "graph_launch_sync", *GRAPH_SIZES):
                s.begin_capture()
                try:
                    for _ in range(graph_nodes(op)):
                        prepared.launch(s)
                finally:
                    g = s.end_capture()
                closers.append(g.close)
                graph = g.instantiate()
                closers.append(graph.close)
                graph.upload(s)
                note = f"GraphExec.c_launch; {graph_nodes(op)} captured PreparedLaunch kernels"
            elif prepared is not None:
                prepared.launch(s)
            s.synchronize()
        except BaseException:
            close_quietly(closers)
            raise
        run, mod_op = self.mod.run_batch, op

        def timed(n):
            return run(mod_op, s, ev, done, n, prepared, graph, other, kernel)

        def after(n, ns):
            s.synchronize()     # its True is no "disturbed"

        return Case(timed, after=after if op in ENQUEUES else None, closers=closers, note=note)


class Cupy(Adapter):
    stmts = {
        "python_call": "s.ptr",
        "stream_query": "s.done",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record(ev)",
        "event_query": "done.done",
        "event_record_query": "s.record(ev)\nev.done",
        "stream_wait_event": "s.wait_event(done)",
        "event_create_destroy": "E(disable_timing=True)",
        "stream_create_destroy": "S()",
        "kernel_launch": "k(g1, g1, (), 0, s)",
        "kernel_launch_args4": "kx(g1, g1, ({args}), 0, s)",
        "kernel_launch_args16": "kx(g1, g1, ({args}), 0, s)",
        "host_func_enqueue": "s.launch_host_func(cb, None)",
        "graph_launch": "g.launch(s)",
        "graph_capture_instantiate": ("s.begin_capture(tl)\nfor _ in r10:\n"
                                      "    k(g1, g1, (), 0, s)\ns.end_capture()"),
        "pipeline_inference": ("for _ in r8:\n    kx(g1, g1, ({args}), 0, s)\ng.launch(s)\n"
                               "s.record(ev)\nother.wait_event(ev)\n"
                               "dev.copy_to_host_async(host, nb, other)\n"
                               "if step == at:\n    other.launch_host_func(cb, None)\n"
                               "step += 1\nif step == every:\n    step = 0"),
        "pipeline_data_loader": ("for dst, src in loads:\n"
                                 "    dst.copy_from_host_async(src, nb, other)\n"
                                 "other.record(ev)\ns.wait_event(ev)\n"
                                 "kx(g1, g1, ({args}), 0, s)"),
    }
    na = {"stream_wait_stream": "CuPy streams have no wait_stream (only wait_event)"}
    notes = {
        "stream_query": "Stream.done",
        "event_create_destroy": "destroyed when the Event is dropped (no close())",
        "stream_create_destroy": "destroyed when the Stream is dropped (no close())",
        "kernel_launch": "cupy.cuda.function.Function of the shared PTX",
        "kernel_launch_args4": "Function of the shared PTX; cupy arrays and numpy scalars",
        "kernel_launch_args16": "Function of the shared PTX; cupy arrays and numpy scalars",
        "graph_launch": "begin_capture/end_capture, Graph.launch(s)",
        "graph_capture_instantiate": "begin_capture(thread-local mode), end_capture (which "
                                     "instantiates); the Graph is destroyed when dropped",
        "pipeline_inference": "Function of the shared PTX (cupy arrays, numpy scalars), "
                              "Graph.launch, Stream.record, wait_event, "
                              "MemoryPointer.copy_to_host_async into alloc_pinned_memory, "
                              "launch_host_func of a Python callback",
        "pipeline_data_loader": "MemoryPointer.copy_from_host_async from alloc_pinned_memory, "
                                "Stream.record, wait_event, Function of the shared PTX",
    }

    def setup(self):
        import cupy
        self.cp = cupy
        cupy.cuda.Device(0).use()
        cupy.cuda.Stream().synchronize()

    def info(self):
        cp = self.cp
        rt = cp.cuda.runtime
        return {"versions": {"cupy": cp.__version__,
                             "cuda_runtime": rt.runtimeGetVersion(),
                             "driver": rt.driverGetVersion()},
                "device": _decode(rt.getDeviceProperties(0).get("name"))}

    def make_env(self, op, closers):
        # CuPy's objects are destroyed when dropped: nothing on closers.
        cp = self.cp
        s, other = cp.cuda.Stream(), cp.cuda.Stream()
        ev, done = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": cp.cuda.Event,
               "S": cp.cuda.Stream, "g1": (1,), "r10": range(GRAPH_KERNELS),
               # cudaStreamCaptureModeThreadLocal, where cupy does not name it
               "tl": getattr(cp.cuda.runtime, "streamCaptureModeThreadLocal", 1)}
        if op in KERNEL_OPS or op in GRAPH_OPS or op in PIPELINE_OPS:
            name = ARG_KERNELS.get(PIPELINE_ARGS if op in PIPELINE_OPS else op,
                                   ("streams_empty",))[0]
            mod = cp.cuda.function.Module()
            mod.load(self.ptx(name))
            env["kx"] = mod.get_function(name)
            k = env["k"] = mod.get_function("streams_empty")
            env["mod"] = mod
            if op in ARG_KERNELS or op in PIPELINE_OPS:
                import numpy
                devs = [cp.empty(COPY_BYTES, cp.uint8) for _ in range(LOADER_COPIES)]
                _bind_args(PIPELINE_ARGS if op in PIPELINE_OPS else op, env,
                           {"pointer": devs[0], "uint64": numpy.uint64(1),
                            "uint32": numpy.uint32(1), "float32": numpy.float32(1),
                            "float64": numpy.float64(1)})
            if op in PIPELINE_OPS:
                import ctypes
                pins = [cp.cuda.alloc_pinned_memory(COPY_BYTES) for _ in range(LOADER_COPIES)]
                hosts = [ctypes.c_void_p(p.ptr) for p in pins]
                env.update(a1=devs[1], pins=pins, dev=devs[0].data, host=hosts[0],
                           loads=[(d.data, h) for d, h in zip(devs, hosts)])
                _pipeline_env(env)
            if op in ("graph_launch", "graph_launch_sync", "pipeline_inference", *GRAPH_SIZES):
                s.begin_capture()
                try:
                    for _ in range(graph_nodes(op)):
                        k((1,), (1,), (), 0, s)
                finally:
                    g = s.end_capture()
                g.upload(s)
                env["g"] = g
            s.synchronize()
        return _callbacks(env)

    def busy_stream(self, env):
        return _spin_wrapper(env["s"].ptr)


def _decode(x):
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else x


class Torch(Adapter):
    stmts = {
        "python_call": "s.cuda_stream",
        "stream_query": "s.query()",
        "stream_synchronize": "s.synchronize()",
        "event_record": "s.record_event(ev)",
        "event_query": "done.query()",
        "event_record_query": "s.record_event(ev)\nev.query()",
        "stream_wait_event": "s.wait_event(done)",
        "stream_wait_stream": "s.wait_stream(other)",
        "event_create_destroy": "E().record(s)",
        "stream_create_destroy": "S()",
        "stream_pool_acquire": "S()",
        "kernel_launch": "k(a)",
        "graph_launch": "g.replay()",
        "graph_capture_instantiate": ("cg = G()\n"
                                      'cg.capture_begin(capture_error_mode="thread_local")\n'
                                      "for _ in r10:\n    k(a)\ncg.capture_end()\ncg.reset()"),
        # Copies and kernels go to the current stream.
        "pipeline_data_loader": ("set_stream(other)\nfor dst, src in loads:\n"
                                 "    dst.copy_(src, non_blocking=True)\n"
                                 "other.record_event(ev)\ns.wait_event(ev)\nset_stream(s)\nk(a)"),
    }
    na = dict({op: "PyTorch has no host-function API" for op in HOST_FUNC_OPS},
              **{op: "PyTorch launches only its own kernels" for op in ARG_KERNELS},
              prepared_launch="PyTorch has no prepared launches",
              pipeline_inference="PyTorch has no host-function API (the step's host function)")
    notes = {
        "event_create_destroy": "Event() + record(s) + drop: torch creates the CUDA "
                                "event lazily, at the first record",
        "stream_wait_stream": "Stream.wait_stream: a new Event recorded on the other "
                              "stream at each call",
        "stream_pool_acquire": "torch.cuda.Stream() takes a stream from torch's pool "
                               "(round-robin over 32 streams per priority, never given back)",
        "stream_create_destroy": "torch.cuda.Stream() takes a stream from torch's pool: "
                                 "no cudaStreamCreate/Destroy",
        "pipeline_data_loader": "Tensor.copy_(pinned, non_blocking=True) with the copy stream "
                                "current (torch.cuda.set_stream), Stream.record_event, "
                                "wait_event; a kernel of torch's with the compute stream current",
    }

    def setup(self):
        import torch
        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch.cuda.set_device(0)
        torch.cuda.synchronize()

    def info(self):
        t = self.torch
        return {"versions": {"torch": t.__version__, "cuda": t.version.cuda},
                "device": t.cuda.get_device_name(0)}

    def make_env(self, op, closers):
        # PyTorch's objects are given back when dropped: nothing on closers.
        t = self.torch
        s, other = t.cuda.Stream(), t.cuda.Stream()
        t.cuda.set_stream(s)    # kernels and graph replays go to the current stream
        ev, done = t.cuda.Event(), t.cuda.Event()
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": t.cuda.Event,
               "S": t.cuda.Stream, "G": t.cuda.CUDAGraph, "r10": range(GRAPH_KERNELS)}
        if op in KERNEL_OPS or op in GRAPH_OPS or op == "pipeline_data_loader":
            sleep = getattr(t.cuda, "_sleep", None)
            if sleep is not None:
                env["k"], env["a"] = sleep, 0
                label = "torch.cuda._sleep(0), a 1-thread kernel (private API)"
            else:
                env["k"], env["a"] = t.Tensor.zero_, t.zeros(1, device="cuda")
                label = "x.zero_() on a 1-element tensor (not an empty kernel)"
            env["k"](env["a"])
            s.synchronize()
            if op == "graph_capture_instantiate":
                label = ("CUDAGraph capture_begin (thread-local mode), capture_end (which "
                         f"instantiates), reset(); kernels: {label}")
            elif op == "pipeline_data_loader":
                devs = [t.empty(COPY_BYTES, dtype=t.uint8, device="cuda")
                        for _ in range(LOADER_COPIES)]
                hosts = [t.empty(COPY_BYTES, dtype=t.uint8, pin_memory=True)
                         for _ in range(LOADER_COPIES)]
                env.update(loads=list(zip(devs, hosts)), set_stream=t.cuda.set_stream)
                t.cuda.synchronize()
                label = ("Tensor.copy_(pinned, non_blocking=True) with the copy stream "
                         "current (torch.cuda.set_stream), Stream.record_event, wait_event; "
                         f"the kernel: {label}, with the compute stream current")
            elif op.startswith("graph"):
                g = t.cuda.CUDAGraph()
                with t.cuda.graph(g):
                    for _ in range(graph_nodes(op)):
                        env["k"](env["a"])
                t.cuda.set_stream(s)
                env["g"] = g
                label = f"CUDAGraph.replay() of {graph_nodes(op)} captured {label}"
            self.notes = dict(self.notes, **{op: label})
        return env


class CudaCore(Adapter):
    stmts = {
        "python_call": "s.handle",
        "stream_synchronize": "s.sync()",
        "event_record": "s.record(ev)",
        "event_query": "done.is_done",
        "event_record_query": "s.record(ev)\nev.is_done",
        "stream_wait_event": "s.wait(done)",
        "stream_wait_stream": "s.wait(other)",
        "event_create_destroy": "d.create_event().close()",
        "stream_create_destroy": "d.create_stream().close()",
        "kernel_launch": "L(s, cfg, k)",
        "kernel_launch_args4": "L(s, cfg, kx, {args})",
        "kernel_launch_args16": "L(s, cfg, kx, {args})",
        "graph_launch": "g.launch(s)",
        "graph_capture_instantiate": ("gb = s.create_graph_builder()\n"
                                      'gb.begin_building("thread_local")\n'
                                      "for _ in r10:\n    L(gb, cfg, k)\n"
                                      "gb.end_building()\ncg = gb.complete()\n"
                                      "cg.close()\ngb.close()"),
        "pipeline_inference": ("for _ in r8:\n    L(s, cfg, kx, {args})\ng.launch(s)\n"
                               "s.record(ev)\nother.wait(ev)\nhost.copy_from(dev, stream=other)\n"
                               "if step == at:\n    HL(other, cb0)\n"
                               "step += 1\nif step == every:\n    step = 0"),
        "pipeline_data_loader": ("for dst, src in loads:\n    dst.copy_from(src, stream=other)\n"
                                 "other.record(ev)\ns.wait(ev)\nL(s, cfg, kx, {args})"),
    }
    sync = "s.sync()"
    na = {op: "cuda.core has no host-function API on streams" for op in HOST_FUNC_OPS}
    notes = {
        "stream_wait_stream": "Stream.wait(stream): an event made and recorded on the other "
                              "stream at each call",
        "stream_create_destroy": "Device.create_stream() with its default options",
        "kernel_launch": "launch() of ObjectCode.from_ptx (the shared PTX)",
        "kernel_launch_args4": "launch() of ObjectCode.from_ptx; Buffers and numpy scalars",
        "kernel_launch_args16": "launch() of ObjectCode.from_ptx; Buffers and numpy scalars",
        "graph_launch": "GraphBuilder capture, Graph.launch(s)",
        "graph_capture_instantiate": "GraphBuilder begin_building (thread-local mode), "
                                     "end_building, complete (instantiates), close",
        "pipeline_inference": "launch() (Buffers, numpy scalars), Graph.launch of a "
                              "GraphBuilder capture, Stream.record, wait, Buffer.copy_from "
                              "into LegacyPinnedMemoryResource memory, host_launch of a "
                              "Python callable",
        "pipeline_data_loader": "Buffer.copy_from of LegacyPinnedMemoryResource memory, "
                                "Stream.record, wait, launch() (Buffers, numpy scalars)",
    }

    def setup(self):
        try:
            import cuda.core as cc
            if not hasattr(cc, "Device"):      # older versions: only .experimental
                raise ImportError
        except ImportError:
            import cuda.core.experimental as cc
        self.cc = cc
        self.dev = cc.Device(0)
        self.dev.set_current()
        # Newer versions may grow a query; older ones have none.
        if hasattr(cc.Stream, "is_done"):
            self.stmts = dict(self.stmts, stream_query="s.is_done")
        else:
            self.na = dict(self.na, stream_query="cuda.core.Stream has no query")
        # Pinned memory (LegacyPinnedMemoryResource) is in newer versions
        # only; host functions on a stream (host_launch) in no released one
        # (pre-release documentation only): a row that needs a missing one
        # is n/a.
        if not hasattr(cc, "LegacyPinnedMemoryResource"):
            self.na = dict(self.na, **dict.fromkeys(
                PIPELINE_OPS, "this cuda.core has no LegacyPinnedMemoryResource (pinned memory)"))
        if not hasattr(cc, "host_launch"):
            self.na = dict(self.na, pipeline_inference="this cuda.core has no host-function API "
                                                       "on streams (no cuda.core.host_launch)")

    def info(self):
        ver = getattr(self.cc, "__version__", None) or _dist_version("cuda-core")
        return {"versions": {"cuda.core": ver}, "device": getattr(self.dev, "name", None)}

    def make_env(self, op, closers):
        d = self.dev
        s = _kept(closers, d.create_stream())
        other = _kept(closers, d.create_stream())
        ev = _kept(closers, d.create_event())
        done = _kept(closers, other.record())
        other.sync()
        env = {"s": s, "other": other, "ev": ev, "done": done, "d": d,
               "r10": range(GRAPH_KERNELS)}
        if op in KERNEL_OPS or op in GRAPH_OPS or op in PIPELINE_OPS:
            name = ARG_KERNELS.get(PIPELINE_ARGS if op in PIPELINE_OPS else op,
                                   ("streams_empty",))[0]
            oc_cls = self.cc.ObjectCode
            ptx = self.ptx(name)
            oc = oc_cls.from_ptx(ptx) if hasattr(oc_cls, "from_ptx") else oc_cls(ptx, "ptx")
            kx = oc.get_kernel(name)
            k = oc.get_kernel("streams_empty") if op in PIPELINE_OPS else kx
            cfg = self.cc.LaunchConfig(grid=1, block=1)
            env.update(L=self.cc.launch, cfg=cfg, k=k, kx=kx, oc=oc)
            if op in ARG_KERNELS or op in PIPELINE_OPS:
                import numpy
                devs = [_kept(closers, d.allocate(COPY_BYTES, stream=s))
                        for _ in range(LOADER_COPIES)]
                _bind_args(PIPELINE_ARGS if op in PIPELINE_OPS else op, env,
                           {"pointer": devs[0], "uint64": numpy.uint64(1),
                            "uint32": numpy.uint32(1), "float32": numpy.float32(1),
                            "float64": numpy.float64(1)})
            if op in PIPELINE_OPS:
                pinned = self.cc.LegacyPinnedMemoryResource()
                hosts = [_kept(closers, pinned.allocate(COPY_BYTES))
                         for _ in range(LOADER_COPIES)]
                env.update(a1=devs[1], dev=devs[0], host=hosts[0], loads=list(zip(devs, hosts)),
                           HL=getattr(self.cc, "host_launch", None))
                _callbacks(_pipeline_env(env))
                s.sync()
            if op in ("graph_launch", "graph_launch_sync", "pipeline_inference", *GRAPH_SIZES):
                gb = _kept(closers, s.create_graph_builder())
                gb.begin_building()
                try:
                    for _ in range(graph_nodes(op)):
                        self.cc.launch(gb, cfg, k)
                finally:
                    gb.end_building()
                g = env["g"] = _kept(closers, gb.complete())
                g.upload(s)
                s.sync()
        return env


class CudaBindings(Adapter):
    # Every call's error code is checked, as streams and the floor check theirs.
    stmts = {
        "stream_query": "e, = q(s)\nif e: fail(e)",
        "stream_synchronize": "e, = sy(s)\nif e: fail(e)",
        "event_record": "e, = rec(ev, s)\nif e: fail(e)",
        "event_query": "e, = eq(done)\nif e: fail(e)",
        "event_record_query": ("e, = rec(ev, s)\nif e: fail(e)\n"
                               "e, = eq(ev)\nif e and e != nr: fail(e)"),
        "stream_wait_event": "e, = w(s, done, 0)\nif e: fail(e)",
        "stream_wait_stream": "e, = rec(ev, other)\nif e: fail(e)\ne, = w(s, ev, 0)\nif e: fail(e)",
        "event_create_destroy": "e, x = ec(fl)\nif e: fail(e)\ne, = ed(x)\nif e: fail(e)",
        "stream_create_destroy": "e, x = sc(sf)\nif e: fail(e)\ne, = sd(x)\nif e: fail(e)",
        "kernel_launch": "e, = L(k, 1, 1, 1, 1, 1, 1, 0, s, None, 0)\nif e: fail(e)",
        "kernel_launch_args4": "e, = L(kx, 1, 1, 1, 1, 1, 1, 0, s, kp, 0)\nif e: fail(e)",
        "kernel_launch_args16": "e, = L(kx, 1, 1, 1, 1, 1, 1, 0, s, kp, 0)\nif e: fail(e)",
        "host_func_enqueue": "e, = LH(s, h, None)\nif e: fail(e)",
        "graph_launch": "e, = GL(ex, s)\nif e: fail(e)",
        "graph_capture_instantiate": (
            "e, = bc(s, tl)\nif e: fail(e)\nfor _ in r10:\n"
            "    e, = L(k, 1, 1, 1, 1, 1, 1, 0, s, None, 0)\n    if e: fail(e)\n"
            "e, cg = endc(s)\nif e: fail(e)\ne, cx = gi(cg, 0)\nif e: fail(e)\n"
            "e, = gxd(cx)\nif e: fail(e)\ne, = gd(cg)\nif e: fail(e)"),
        "pipeline_inference": (
            "for _ in r8:\n    e, = L(kx, 1, 1, 1, 1, 1, 1, 0, s, kp, 0)\n    if e: fail(e)\n"
            "e, = GL(ex, s)\nif e: fail(e)\ne, = rec(ev, s)\nif e: fail(e)\n"
            "e, = w(other, ev, 0)\nif e: fail(e)\n"
            "e, = cp(host, dev, nb, dflt, other)\nif e: fail(e)\n"
            "if step == at:\n    e, = LH(other, h, None)\n    if e: fail(e)\n"
            "step += 1\nif step == every:\n    step = 0"),
        "pipeline_data_loader": (
            "for dst, src in loads:\n    e, = cp(dst, src, nb, dflt, other)\n    if e: fail(e)\n"
            "e, = rec(ev, other)\nif e: fail(e)\ne, = w(s, ev, 0)\nif e: fail(e)\n"
            "e, = L(kx, 1, 1, 1, 1, 1, 1, 0, s, kp, 0)\nif e: fail(e)"),
    }
    sync = "e, = sy(s)\nif e: fail(e)"
    notes = {
        "stream_wait_stream": "cudaEventRecord of an event on the other stream, "
                              "cudaStreamWaitEvent",
        "kernel_launch": "driver cuLaunchKernel of cuLibraryGetKernel (the runtime "
                         "bindings have no cudaLaunchKernel)",
        "kernel_launch_args4": "driver cuLaunchKernel, kernelParams as (values, ctypes types)",
        "kernel_launch_args16": "driver cuLaunchKernel, kernelParams as (values, ctypes types)",
        "host_func_enqueue": "cudaLaunchHostFunc of a ctypes CFUNCTYPE callback",
        "graph_launch": "cudaGraphLaunch of cudaStreamBeginCapture + cuLaunchKernel launches",
        "graph_capture_instantiate": "cudaStreamBeginCapture (thread-local mode), 10 "
                                     "cuLaunchKernel, cudaStreamEndCapture, "
                                     "cudaGraphInstantiateWithFlags, both destroys",
        "pipeline_inference": "driver cuLaunchKernel, cudaGraphLaunch, cudaEventRecord, "
                              "cudaStreamWaitEvent, cudaMemcpyAsync into cudaMallocHost "
                              "memory, cudaLaunchHostFunc of a ctypes callback",
        "pipeline_data_loader": "cudaMemcpyAsync from cudaMallocHost memory, cudaEventRecord, "
                                "cudaStreamWaitEvent, driver cuLaunchKernel",
    }

    def setup(self):
        try:
            from cuda.bindings import driver, runtime
        except ImportError:
            from cuda import cuda as driver, cudart as runtime
        self.rt, self.drv = runtime, driver
        self.ck(runtime.cudaSetDevice(0))
        self.ck(runtime.cudaFree(0))

    @staticmethod
    def ck(result):
        err = result[0]
        if err:
            raise RuntimeError(f"CUDA error {err!r}")
        return result[1] if len(result) == 2 else result[1:]

    def info(self):
        import cuda.bindings
        rt = self.rt
        return {"versions": {"cuda.bindings": getattr(cuda.bindings, "__version__", None)
                             or _dist_version("cuda-bindings"),
                             "cuda_runtime": self.ck(rt.cudaRuntimeGetVersion()),
                             "driver": self.ck(rt.cudaDriverGetVersion())}}

    def make_env(self, op, closers):
        rt, drv, ck = self.rt, self.drv, self.ck

        def made(result, destroy):
            """What a creating call made, its destroy put on closers."""
            x = ck(result)
            closers.append(functools.partial(destroy, x))
            return x

        s = made(rt.cudaStreamCreateWithFlags(rt.cudaStreamDefault), rt.cudaStreamDestroy)
        other = made(rt.cudaStreamCreateWithFlags(rt.cudaStreamDefault), rt.cudaStreamDestroy)
        ev = made(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming), rt.cudaEventDestroy)
        done = made(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming), rt.cudaEventDestroy)
        ck(rt.cudaEventRecord(done, other))
        ck(rt.cudaStreamSynchronize(other))

        def fail(e):
            raise RuntimeError(f"CUDA error {e!r}")

        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        env = {"s": s, "other": other, "ev": ev, "done": done, "fail": fail,
               "r10": range(GRAPH_KERNELS), "tl": mode,
               "nr": rt.cudaError_t.cudaErrorNotReady,
               "bc": rt.cudaStreamBeginCapture, "endc": rt.cudaStreamEndCapture,
               "gi": rt.cudaGraphInstantiateWithFlags, "gxd": rt.cudaGraphExecDestroy,
               "gd": rt.cudaGraphDestroy,
               "q": rt.cudaStreamQuery, "sy": rt.cudaStreamSynchronize,
               "rec": rt.cudaEventRecord, "eq": rt.cudaEventQuery, "w": rt.cudaStreamWaitEvent,
               "ec": rt.cudaEventCreateWithFlags, "ed": rt.cudaEventDestroy,
               "fl": rt.cudaEventDisableTiming, "sc": rt.cudaStreamCreateWithFlags,
               "sd": rt.cudaStreamDestroy, "sf": rt.cudaStreamDefault,
               "GL": rt.cudaGraphLaunch, "LH": rt.cudaLaunchHostFunc,
               "L": drv.cuLaunchKernel, "cp": rt.cudaMemcpyAsync,
               "dflt": rt.cudaMemcpyKind.cudaMemcpyDefault}
        if op in KERNEL_OPS or op in GRAPH_OPS or op in PIPELINE_OPS:
            args_op = PIPELINE_ARGS if op in PIPELINE_OPS else op
            name = ARG_KERNELS.get(args_op, ("streams_empty",))[0]
            lib = made(drv.cuLibraryLoadData(self.ptx(name), None, None, 0, None, None, 0),
                       drv.cuLibraryUnload)
            # As a CUfunction, which cuLaunchKernel accepts for a CUkernel: the
            # binding then takes its fast path instead of converting per call.
            k = env["k"] = env["kx"] = drv.CUfunction(
                int(ck(drv.cuLibraryGetKernel(lib, name.encode()))))
            if op in PIPELINE_OPS:
                k = env["k"] = drv.CUfunction(
                    int(ck(drv.cuLibraryGetKernel(lib, b"streams_empty"))))
            if args_op in ARG_KERNELS:
                import ctypes
                devs = [int(made(rt.cudaMalloc(COPY_BYTES), rt.cudaFree))
                        for _ in range(LOADER_COPIES)]
                types = {"pointer": ctypes.c_void_p, "uint64": ctypes.c_uint64,
                         "uint32": ctypes.c_uint32, "float32": ctypes.c_float,
                         "float64": ctypes.c_double}
                values = {"pointer": devs[0], "uint64": 1, "uint32": 1, "float32": 1.0,
                          "float64": 1.0}
                kinds = ARG_KERNELS[args_op][1]
                env["kp"] = (tuple(values[t] for t in kinds), tuple(types[t] for t in kinds))
            if op in PIPELINE_OPS:
                hosts = [int(made(rt.cudaMallocHost(COPY_BYTES), rt.cudaFreeHost))
                         for _ in range(LOADER_COPIES)]
                env["kp"] = ((devs[0], devs[1]) + env["kp"][0][2:], env["kp"][1])
                env.update(dev=devs[0], host=hosts[0], loads=list(zip(devs, hosts)))
                _pipeline_env(env)
            if op in ("graph_launch", "graph_launch_sync", "pipeline_inference", *GRAPH_SIZES):
                ck(rt.cudaStreamBeginCapture(s, mode))
                try:
                    for _ in range(graph_nodes(op)):
                        ck(drv.cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s, None, 0))
                finally:
                    graph = made(rt.cudaStreamEndCapture(s), rt.cudaGraphDestroy)
                ex = env["ex"] = made(rt.cudaGraphInstantiate(graph, 0), rt.cudaGraphExecDestroy)
                ck(rt.cudaGraphUpload(ex, s))
                ck(rt.cudaStreamSynchronize(s))
        if op in HOST_FUNC_OPS or op == "pipeline_inference":
            import ctypes
            _callbacks(env)
            box = env["box"]

            def count(_):
                box[0] += 1

            cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(count)
            env["cfn"] = cfn    # the C thunk must outlive every enqueued call
            env["h"] = rt.cudaHostFn_t(ctypes.cast(cfn, ctypes.c_void_p).value)
        return env

    def busy_stream(self, env):
        return _spin_wrapper(env["s"])


class NumbaCuda(Adapter):
    stmts = {
        "python_call": "s.handle",
        "stream_synchronize": "s.synchronize()",
        "event_record": "ev.record(s)",
        "event_query": "done.query()",
        "event_record_query": "ev.record(s)\nev.query()",
        "stream_wait_event": "done.wait(s)",
        "event_create_destroy": "E(timing=False)",
        "stream_create_destroy": "S()",
        "kernel_launch": "k[1, 1, s]()",
        "host_func_enqueue": "s.add_callback(cb3, None)",
    }
    na = dict({op: "numba.cuda has no graph API" for op in GRAPH_OPS},
              **{op: "numba.cuda launches the kernels it compiles, whose array arguments "
                     "are several parameters each" for op in ARG_KERNELS},
              pipeline_inference="numba.cuda has no graph API (the step's graph replay)",
              pipeline_data_loader="numba.cuda launches the kernels it compiles, whose array "
                                   "arguments are several parameters each (the step's "
                                   "kernel takes two pointers and two scalars)",
              stream_query="numba.cuda streams have no query",
              stream_wait_stream="numba.cuda streams have no wait_stream")
    notes = {
        "event_create_destroy": "numba defers the destroy to its deallocation queue",
        "stream_create_destroy": "numba defers the destroy to its deallocation queue",
        "kernel_launch": "@cuda.jit empty kernel (numba's own compile, not the shared PTX)",
        "host_func_enqueue": "Stream.add_callback (cuStreamAddCallback)",
    }

    def setup(self):
        from numba import cuda
        self.cuda = cuda
        if not cuda.is_available():
            raise RuntimeError("numba.cuda.is_available() is False")
        cuda.select_device(0)
        self.kernel = None

    def info(self):
        import numba
        cuda = self.cuda
        rt = None
        try:
            rt = cuda.runtime.get_version()
        except Exception:
            pass
        return {"versions": {"numba": numba.__version__,
                             "numba-cuda": _dist_version("numba-cuda"),
                             "cuda_runtime": list(rt) if rt else None},
                "device": _decode(getattr(cuda.get_current_device(), "name", None))}

    def make_env(self, op, closers):
        # numba's objects go to its deallocation queue when dropped.
        cuda = self.cuda
        s, other = cuda.stream(), cuda.stream()
        ev, done = cuda.event(timing=False), cuda.event(timing=False)
        done.record(other)
        other.synchronize()
        env = {"s": s, "other": other, "ev": ev, "done": done, "E": cuda.event,
               "S": cuda.stream}
        if op in ("kernel_launch", "kernel_launch_sync"):
            if self.kernel is None:
                @cuda.jit
                def streams_empty():
                    pass
                self.kernel = streams_empty
            env["k"] = self.kernel
            self.kernel[1, 1, s]()      # compiles now, not in the first batch
            s.synchronize()
        return _callbacks(env)

    def busy_stream(self, env):
        return _spin_wrapper(env["s"].handle)


class Noop(Adapter):
    """Times empty Python calls, next to a floor of empty loop turns;
    STREAMS_BENCH_NOOP_FAIL / _CRASH / _FLOOR_FAIL name an operation that
    raises / kills the worker / has a failing floor, to test those paths."""

    na = {op: "no graphs here (self-test of the n/a path)" for op in GRAPH_OPS}

    def info(self):
        return {"versions": {"python": platform.python_version()}, "device": None,
                "pid": os.getpid()}

    def floor(self, op):
        if op == os.environ.get("STREAMS_BENCH_NOOP_FLOOR_FAIL"):
            def fail(n):
                raise RuntimeError(f"asked to fail the floor of {op}")
            return fail
        return make_loop("pass")

    def make_case(self, op):
        if op in self.na:
            raise NotAvailable(self.na[op])
        if op == os.environ.get("STREAMS_BENCH_NOOP_CRASH"):
            os._exit(3)
        if op == os.environ.get("STREAMS_BENCH_NOOP_FAIL"):
            raise RuntimeError(f"asked to fail {op}")

        def f():
            pass

        return Case(make_loop("f()", f=f), note="self-test" if op == "stream_query" else None)


ADAPTERS = {"streams-py": StreamsPy, "streams-py-baseline": StreamsPy, "streams-cy": StreamsCy,
            "streams-cy-baseline": StreamsCy, "cupy": Cupy, "torch": Torch,
            "cuda-core": CudaCore, "cuda-bindings": CudaBindings, "numba-cuda": NumbaCuda,
            "noop": Noop, "noop-2": Noop}
