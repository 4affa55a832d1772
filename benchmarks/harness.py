"""The harness: one worker process per contender, requests in rounds over
them, and the result document.

The C program (``bench_c --serve``) and the Python workers
(``python -m benchmarks.run --worker NAME``) answer the same request lines;
a Python worker's answer carries the in-process floor too, measured in
that worker batch by batch next to the contender's own batches.
"""
import importlib.util
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import CHECKOUT
from benchmarks.builders import (build_c_floor, build_cython_bench, compiler, compiler_version,
                                 default_cache_dir, find_cuda)
from benchmarks.ops import (BASELINE_OF, CONTENDER_BY_NAME, DEFAULT_CONTENDERS, FULL, OP_BY_NAME,
                            OPS, QUICK, floor_op)
from benchmarks.results import finalize, new_doc
from benchmarks.under_test import (baseline_problem, builtin_ptx, child_pythonpath,
                                   streams_facts, streams_parent)


class WorkerDied(Exception):
    pass


class Worker:
    """A contender's process: one request line in, one JSON line out.

    Requests: ``info``, ``run OP ITERS BATCHES WARMUP``, ``quit``.  The C
    program (bench_c --serve) and the Python workers speak the same lines.
    A run's answer: ``{"ok": true, "ns": [...], "drained": k}`` with, from a
    Python worker, ``floor_ns`` (the in-process floor's batches) and/or
    ``floor_error``; or ``{"ok": false, "na"|"error": why}``.
    """

    def __init__(self, name, argv, env=None, cwd=None, cpus=None):
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.cpus = cpus
        self.proc = None
        self.errlog = None
        self.starts = 0
        self._buf = b""

    def start(self):
        if self.proc is not None:      # a restart: let go of the dead one's files
            self.kill()
            self._close_files()
        self.errlog = tempfile.TemporaryFile()
        self._buf = b""
        self.starts += 1
        # Its own session: Ctrl-C reaches the harness only, which then
        # stops the workers in order.
        # Every worker on the same CPUs (--cpus): the floors of different
        # contenders then come from the same cores, so that cells can be
        # compared across columns, not only to their own floor.
        pin = None
        if self.cpus:
            cpus = set(self.cpus)
            pin = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errlog, env=self.env, cwd=self.cwd,
                                     bufsize=0, start_new_session=True, preexec_fn=pin)

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_tail(self, limit=800):
        if self.errlog is None:
            return ""
        try:
            self.errlog.seek(0)
            text = self.errlog.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text[-limit:]

    def _died(self, why):
        rc = self.proc.poll() if self.proc else None
        if rc is None and self.proc is not None:
            self.kill()
            rc = self.proc.poll()
        if rc is not None and rc < 0:
            import signal
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = str(-rc)
            why = f"{why} (killed by {sig})"
        elif rc is not None:
            why = f"{why} (exit status {rc})"
        tail = self.stderr_tail()
        return WorkerDied(why + (f"; its stderr ends: {tail}" if tail else ""))

    def ask(self, line, timeout):
        if not self.alive:
            raise self._died("worker is not running")
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            raise self._died("worker exited") from None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise self._died(f"no answer within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise self._died("worker exited")
                self._buf += chunk
        raw, _, self._buf = self._buf.partition(b"\n")
        try:
            answer = json.loads(raw)
        except ValueError:
            self.kill()
            raise self._died(f"garbled answer {raw[:200]!r}") from None
        if not isinstance(answer, dict):
            self.kill()
            raise self._died(f"garbled answer {raw[:200]!r}")
        return answer

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_files()

    def _close_files(self):
        for f in (self.proc.stdin, self.proc.stdout, self.errlog):
            try:
                f.close()
            except (OSError, AttributeError):
                pass


class Member:
    """One contender served by a shared worker process (``--one-process``):
    it answers what a Worker answers, its requests carrying its name
    (``info NAME``, ``run NAME OP ...``).  Starting a member starts the
    shared process only where it is not running (a restart after a crash
    restarts it once for all of its members)."""

    def __init__(self, name, shared):
        self.name = name
        self.shared = shared

    @property
    def alive(self):
        return self.shared.alive

    @property
    def starts(self):
        return self.shared.starts

    def start(self):
        if not self.shared.alive:
            self.shared.start()

    def ask(self, line, timeout):
        verb, _, rest = line.partition(" ")
        return self.shared.ask(f"{verb} {self.name} {rest}".rstrip(), timeout)

    def stderr_tail(self, limit=800):
        return self.shared.stderr_tail(limit)

    def kill(self):
        self.shared.kill()

    def stop(self):
        self.shared.stop()


class Progress:
    """One status line on stderr (rewritten on a terminal, appended otherwise)."""

    def __init__(self, total, stream=None, enabled=True):
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_key = None
        self._width = 0

    def step(self, op, rnd, rounds, contender):
        self.done += 1
        if not self.enabled:
            return
        text = f"[{self.done:>4}/{self.total}] {op} round {rnd + 1}/{rounds}: {contender}"
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            self.stream.flush()
        elif (op, rnd) != self._last_key:
            self._last_key = (op, rnd)
            self.stream.write(f"[{self.done:>4}/{self.total}] {op} round {rnd + 1}/{rounds}\n")
            self.stream.flush()

    def skip(self, n=1):
        self.done += n

    def message(self, text):
        if not self.enabled:
            return
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


class Config:
    def __init__(self, ops=None, contenders=None, quick=False, rounds=None, batches=None,
                 warmup=1, scale=None, cache_dir=None, timeout=180.0, progress=True,
                 source_dir=None, baseline=None, cpus=None, one_process=False):
        base = QUICK if quick else FULL
        self.ops = list(ops or [op.name for op in OPS])
        self.contenders = list(contenders or DEFAULT_CONTENDERS)
        self.quick = quick
        self.rounds = rounds or base["rounds"]
        self.batches = batches or base["batches"]
        self.warmup = warmup
        self.scale = scale if scale is not None else base["scale"]
        self.cache_dir = os.path.abspath(cache_dir or default_cache_dir())
        self.timeout = timeout
        self.progress = progress
        self.source_dir = source_dir or CHECKOUT
        self.baseline = os.path.abspath(baseline) if baseline else None
        self.cpus = sorted(cpus) if cpus else None
        self.one_process = bool(one_process)
        if self.baseline and contenders is None:
            for name, of in BASELINE_OF.items():
                self.contenders.insert(self.contenders.index(of) + 1, name)

    def iters(self, op):
        spec = OP_BY_NAME[op]
        n = max(1, int(round(spec.iters * self.scale)))
        if spec.period:
            n = max(1, int(round(n / spec.period))) * spec.period
        return n

    def as_dict(self):
        return {"quick": self.quick, "rounds": self.rounds, "batches": self.batches,
                "warmup": self.warmup, "scale": self.scale, "ops": self.ops,
                "contenders": self.contenders, "baseline": self.baseline, "cpus": self.cpus,
                "one_process": self.one_process,
                "iters": {op: self.iters(op) for op in self.ops}}


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    fields = "name,driver_version,memory.total,clocks.max.sm,pstate,persistence_mode"
    try:
        proc = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(","))))
            for line in proc.stdout.strip().splitlines()]


def machine_info():
    return {"hostname": platform.node(), "os": platform.platform(), "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
            "python_implementation": platform.python_implementation(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "nvidia_smi": _nvidia_smi()}


def _module_present(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _build(builder, spec, entry, config, progress, **kwargs):
    """A compiled contender's product, or None: its column is then
    unavailable, with the builder's reason."""
    progress.message(f"building {spec.label} ...")
    product, why = builder(config.cache_dir, root=config.source_dir, **kwargs)
    if product is None:
        entry.update(status="unavailable", reason=why)
        progress.message(f"{spec.label}: unavailable ({why})")
    return product


def _baseline_folder(config):
    """A folder whose only entry is the baseline's ``streams`` package (a
    link): first on a worker's path, it gives that streams while
    ``benchmarks`` still comes from this checkout, even where the baseline
    is a checkout with a ``benchmarks`` of its own."""
    folder = os.path.join(config.cache_dir, "baseline")
    link = os.path.join(folder, "streams")
    os.makedirs(folder, exist_ok=True)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(os.path.join(config.baseline, "streams"), link)
    return folder


def _prepare(config, doc, progress):
    """Build what is needed and start one worker per usable contender."""
    ptx_path, ptx_error = None, None
    try:
        ptx = builtin_ptx()
        d = os.path.join(config.cache_dir, "ptx")
        os.makedirs(d, exist_ok=True)
        ptx_path = os.path.join(d, "streams_builtin.ptx")
        with open(ptx_path, "w") as f:
            f.write(ptx)
    except (OSError, ImportError, ValueError) as exc:
        ptx_error = str(exc)
    workers = {}
    members, shared = [], None
    for name in config.contenders:
        entry = doc["contenders"][name]
        spec = CONTENDER_BY_NAME[name]
        if name == "c":
            exe = _build(build_c_floor, spec, entry, config, progress)
            if exe is None:
                continue
            cc = compiler()
            entry["versions"] = {"compiler": compiler_version(cc) if cc else None,
                                 "cuda": find_cuda()[0]}
            argv = [exe, "--serve"]
            env = cwd = None
        else:
            if spec.module and not _module_present(spec.module):
                entry.update(status="missing", reason=f"{spec.module} is not importable")
                continue
            argv = [sys.executable, "-m", "benchmarks.run", "--worker", name]
            if ptx_path:
                argv += ["--ptx", ptx_path]
            if name in BASELINE_OF:
                why = baseline_problem(config.baseline)
                if why:
                    entry.update(status="unavailable", reason=why)
                    continue
            if name in ("streams-cy", "streams-cy-baseline"):
                # The baseline's own checkout: its get_include() finds the
                # headers from there, not from the folder of one link.
                mod = _build(build_cython_bench, spec, entry, config, progress,
                             streams_dir=config.baseline if name in BASELINE_OF else None)
                if mod is None:
                    continue
                argv += ["--cy-module", mod]
            if name in BASELINE_OF:
                cwd = _baseline_folder(config)
                env = dict(os.environ, PYTHONPATH=child_pythonpath(cwd))
            else:
                env = dict(os.environ, PYTHONPATH=child_pythonpath())
                # `-m` puts the cwd first on sys.path: a source checkout
                # there (no compiled module) would shadow an installed
                # streams.
                cwd = streams_parent()
        if ptx_error and name != "c":
            entry["ptx_error"] = ptx_error
        if config.one_process and name != "c" and name not in BASELINE_OF:
            # Started below, once every member is known; a baseline imports
            # another streams and keeps a process of its own.
            members.append((name, argv, env, cwd))
            continue
        _start_worker(Worker(name, argv, env, cwd, config.cpus), entry, spec, config, progress,
                      workers)
    if members:
        names = [m[0] for m in members]
        _, argv, env, cwd = members[0]
        argv = [a for a in argv]
        i = argv.index("--worker")
        argv[i + 1] = "shared"
        argv += ["--members", ",".join(names)]
        cy = [m[1] for m in members if "--cy-module" in m[1]]
        if cy and "--cy-module" not in argv:
            argv += ["--cy-module", cy[0][cy[0].index("--cy-module") + 1]]
        shared = Worker("shared", argv, env, cwd, config.cpus)
        for name in names:
            spec = CONTENDER_BY_NAME[name]
            doc["contenders"][name]["process"] = "shared with " + ", ".join(
                n for n in names if n != name) if len(names) > 1 else "its own"
            _start_worker(Member(name, shared), doc["contenders"][name], spec, config, progress,
                          workers)
    return workers


def _start_worker(w, entry, spec, config, progress, workers):
    """Start ``w`` (a Worker, or a Member of the shared process) and ask
    for its facts; a contender that fails here is an error, not a column."""
    progress.message(f"starting {spec.label} ...")
    try:
        w.start()
        info = w.ask("info", max(config.timeout, 300.0))
    except (OSError, WorkerDied) as exc:
        w.kill()
        entry.update(status="error", reason=str(exc))
        progress.message(f"{spec.label}: {exc}")
        return
    if not info.get("ok"):
        if not isinstance(w, Member):    # the shared process serves the others still
            w.stop()
        entry.update(status="error", reason=info.get("error", "no reason given"))
        progress.message(f"{spec.label}: {entry['reason']}")
        return
    info.pop("ok", None)
    entry.setdefault("versions", {}).update(info.pop("versions", {}) or {})
    entry["info"] = info
    workers[w.name] = w


def _gpu_facts(doc):
    """GPU name, capability, driver and runtime, from the streams or C worker."""
    sp = doc["contenders"].get("streams-py", {}).get("versions", {}).get("streams")
    if sp and sp.get("devices"):
        dev = sp["devices"][0]
        return {"name": dev["name"], "compute_capability": dev["compute_capability"],
                "driver_cuda_version": sp.get("driver_version"),
                "streams_cuda_runtime": sp.get("runtime_version"), "source": "streams"}
    c = doc["contenders"].get("c", {}).get("info")
    if c and c.get("device"):
        return {"name": c["device"], "compute_capability": c.get("compute_capability"),
                "driver_cuda_version": c.get("driver_version"),
                "streams_cuda_runtime": c.get("runtime_version"), "source": "C program"}
    info = streams_facts()
    if info["devices"]:
        dev = info["devices"][0]
        return {"name": dev["name"], "compute_capability": dev["compute_capability"],
                "driver_cuda_version": info["driver_version"],
                "streams_cuda_runtime": info["runtime_version"], "source": "streams (harness)"}
    return None


def run_benchmark(config, progress=None):
    """Measure; returns the result document (see validate_result)."""
    doc = new_doc(config)
    doc["machine"] = machine_info()
    progress = progress or Progress(0, enabled=config.progress)
    workers = _prepare(config, doc, progress)
    active = [c for c in config.contenders if c in workers]
    progress.total = max(1, len(config.ops) * config.rounds * len(active))
    try:
        for op in config.ops:
            _measure_op(op, config, doc, workers, active, progress)
    except KeyboardInterrupt:
        # What was measured is still worth a table and a file.
        doc["interrupted"] = True
    finally:
        progress.close()
        for w in workers.values():
            w.stop()
        doc["machine"]["gpu"] = _gpu_facts(doc)
        finalize(doc)
    return doc


def _measure_op(op, config, doc, workers, active, progress):
    iters = config.iters(op)
    cells = {c: {"status": "ok", "ns": [], "floor_ns": [], "iters": iters, "drained": 0}
             for c in active}
    # A worker that died on an earlier operation gets a fresh process (a
    # few times): one bad operation does not blank the rest of its column.
    for c in active:
        w = workers[c]
        if not w.alive:
            if w.starts >= 4:
                cells[c] = {"status": "error", "reason": "worker died too often; gave up"}
                continue
            try:
                w.start()
                ans = w.ask("info", max(config.timeout, 300.0))
                if not ans.get("ok"):
                    raise WorkerDied(ans.get("error", "restart failed"))
            except (OSError, WorkerDied) as exc:
                cells[c] = {"status": "error", "reason": f"restart failed: {exc}"}
    only = OP_BY_NAME[op].only
    for c in active:
        if only and c not in only[0] and c != "c":
            cells[c] = {"status": "n/a", "reason": f"only {', '.join(only[0])}: {only[1]}"}
    for rnd in range(config.rounds):
        # Each round starts with a different contender, so none is always
        # the one that runs right after another's burst of work.
        k = rnd % len(active) if active else 0
        for c in active[k:] + active[:k]:
            cell = cells[c]
            if cell["status"] != "ok":
                progress.skip()
                continue
            progress.step(op, rnd, config.rounds, CONTENDER_BY_NAME[c].label)
            # The C program is the floor's loops: an operation whose floor is
            # another's runs that one there.
            name = floor_op(op) if c == "c" else op
            try:
                ans = workers[c].ask(f"run {name} {iters} {config.batches} {config.warmup}",
                                     config.timeout)
            except WorkerDied as exc:
                cells[c] = {"status": "error", "reason": str(exc)}
                progress.message(f"{CONTENDER_BY_NAME[c].label}, {op}: {exc}")
                continue
            if ans.get("ok"):
                ns, floor = ans.get("ns") or [], ans.get("floor_ns") or []
                if not all(isinstance(x, (int, float)) and x > 0 for x in ns + floor):
                    cells[c] = {"status": "error", "reason": f"bad numbers {(ns + floor)[:5]!r}"}
                    continue
                cell["ns"].extend(float(x) for x in ns)
                cell["floor_ns"].extend(float(x) for x in floor)
                cell["drained"] += int(ans.get("drained", 0))
                if ans.get("note"):
                    cell["note"] = ans["note"]
                elif name != op:
                    cell["note"] = f"the loop of {name}: the same CUDA calls"
                if ans.get("floor_error"):
                    cell.setdefault("floor_reason", ans["floor_error"])
            elif "na" in ans:
                cells[c] = {"status": "n/a", "reason": ans["na"]}
            else:
                cells[c] = {"status": "error", "reason": ans.get("error", "no reason given")}
    for c in active:
        cell = cells[c]
        if cell["status"] == "ok":
            if not cell["floor_ns"]:
                del cell["floor_ns"]
                if c != "c":        # the C program is a reference of its own
                    cell.setdefault("floor_reason", "no in-process floor came back")
            if not cell["ns"]:
                cell.update(status="error", reason="no numbers came back")
            elif cell["drained"]:
                extra = (f"{cell['drained']} of {len(cell['ns'])} batches outlasted the spin "
                         "kernel: callbacks may have run during their timing")
                cell["note"] = f"{cell['note']}; {extra}" if cell.get("note") else extra
    for c in config.contenders:
        entry = doc["contenders"][c]
        if c in cells:
            doc["results"][op][c] = cells[c]
        else:
            doc["results"][op][c] = {"status": entry["status"] if entry["status"] != "ok"
                                     else "error",
                                     "reason": entry.get("reason", "not run")}
