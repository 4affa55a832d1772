"""Bisect the crash of tests/test_capture_races_gpu.py (issue 25, item 6):
host functions and asyncio waits enqueued on a stream while another thread
begins and ends captures.

Each variant runs in a child process with faulthandler on (a crash prints
the Python stack of every thread) and a 30 s timeout (a hang dumps the
stacks at 25 s), and this prints one block per variant: its name, exit code
(-11: SIGSEGV, -6: abort, 124: timed out), its last stdout line and the last
lines of its stderr.  All variants take well under two minutes.

    PYTHONPATH=$PWD python3 tools/capture_race_bisect.py [NAME ...] [--race S]

Variants (threads: E enqueuers, one capture thread, optionally an awaiter):

  A   1 streams enqueuer, streams captures (begin_end, relaxed), empty captures
  B   4 streams enqueuers, same captures
  B-g B with global captures;  B-t  with thread_local captures
  (A, B, E..H close every graph as soon as it is captured)
  C   B + a kernel (launch_empty) in every capture, every other graph kept
      (closed at the end, not replayed)
  D   C + the kept graphs instantiated and replayed 3 times at the end
  E   B + a kernel in every capture
  F   awaits only: 1 asyncio awaiter (stream and event waits), captures with
      a kernel, no enqueuer
  G   4 streams enqueuers on s, captures (global) of ANOTHER stream only
  H   4 streams enqueuers, captures begun/ended through the driver API
      (ctypes; streams' fence cannot see them), no replay
  P1  pure driver: 4 threads cuLaunchHostFunc(free, NULL) (ctypes, GIL
      released) into s while the capture thread captures it through the
      driver: can the driver take concurrent enqueues into a capture?
  P2  pure driver: 4 threads each do cuStreamGetCaptureInfo (graph),
      cuUserObjectCreate, cuGraphRetainUserObject on that graph and
      cuLaunchHostFunc (GIL released): what streams' captured path does, with
      no lock around it
  P3  P2 with the GIL kept through every call (ctypes.PyDLL): the same calls,
      serialized (the control for P2)
  FULL the test's scenario (4 enqueuers, awaiter, context captures in global
      mode with a kernel, replays)

Reading it: P1 crashing means the driver cannot take concurrent enqueues
into one capture at all (streams must serialize every enqueue into a
capturing stream); P2 crashing while P3 passes means concurrent calls on
one capture's graph are the fault (streams' exclusive hold for captured
enqueues is the fix); A/B/C/D/E/G/H/F crashing on a build with that fix
points at streams itself, the letter at the part.
"""
import json
import os
import subprocess
import sys
import time

CHILD = r'''
import asyncio, ctypes, faulthandler, gc, json, sys, threading, time
faulthandler.enable()
faulthandler.dump_traceback_later(25, exit=True)
cfg = json.loads(sys.argv[1])
import streams
from streams.testing import launch_empty

RACE_S = cfg["race"]
s, other, replay = streams.Stream(), streams.Stream(), streams.Stream()
launch_empty(s)
s.synchronize()
stop = threading.Event()
counts = {}
problems = []
kept = []          # streams Graphs kept for replay
foreign = []       # driver CUgraphs kept for replay
stats = {"enq": 0, "captures": 0, "awaits": 0}

cu = ctypes.CDLL("libcuda.so.1")              # releases the GIL in each call
cu_gil = ctypes.PyDLL("libcuda.so.1")         # keeps it (calls serialized)
for lib in (cu, cu_gil):
    lib.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.cuStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.cuGraphDestroy.argtypes = [ctypes.c_void_p]
    lib.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.cuUserObjectCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    lib.cuGraphRetainUserObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint,
                                            ctypes.c_uint]
    # CUDA 12.3+ drivers export _v3 (with edge data); older ones _v2.
    if hasattr(lib, "cuStreamGetCaptureInfo_v3"):
        lib.get_info = lib.cuStreamGetCaptureInfo_v3
        lib.get_info.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.info_tail = (None, None, None)
    else:
        lib.get_info = lib.cuStreamGetCaptureInfo_v2
        lib.get_info.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ulonglong),
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        lib.info_tail = (None, None)
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                                ctypes.c_void_p, ctypes.c_ulonglong]
    lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cuGraphExecDestroy.argtypes = [ctypes.c_void_p]
FREE = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value   # free(NULL): a no-op
MODES = {"global": 0, "thread_local": 1, "relaxed": 2}

def ck(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")

def make_current():
    # Driver-API threads: the runtime's primary context of device 0.
    ctx = ctypes.c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "primary ctx")
    ck(cu.cuCtxSetCurrent(ctx), "set current")

def cb(ident):
    counts[ident] = counts.get(ident, 0) + 1

def streams_enqueuer(k):
    i = 0
    while not stop.is_set():
        try:
            s.launch_host_func(cb, (k, i))
            stats["enq"] += 1
        except (streams.CudaError, RuntimeError) as exc:
            problems.append(("enqueue", repr(exc)))
        i += 1

def driver_enqueuer_plain(k):
    make_current()
    h = ctypes.c_void_p(s.handle)
    while not stop.is_set():
        r = cu.cuLaunchHostFunc(h, FREE, None)
        if r != 0:
            problems.append(("cuLaunchHostFunc", r))
        stats["enq"] += 1

def driver_enqueuer_attach(k, lib):
    make_current()
    h = ctypes.c_void_p(s.handle)
    status, cid, graph = ctypes.c_int(), ctypes.c_ulonglong(), ctypes.c_void_p()
    uo = ctypes.c_void_p()
    while not stop.is_set():
        r = lib.get_info(h, ctypes.byref(status), ctypes.byref(cid), ctypes.byref(graph),
                         *lib.info_tail)
        if r == 0 and status.value == 1:          # active: attach, as streams does
            r = lib.cuUserObjectCreate(ctypes.byref(uo), None, FREE, 1, 1)
            if r == 0:
                r = lib.cuGraphRetainUserObject(graph, uo, 1, 1)
                if r != 0:
                    problems.append(("retain", r))
        r = lib.cuLaunchHostFunc(h, FREE, None)
        if r != 0:
            problems.append(("cuLaunchHostFunc", r))
        stats["enq"] += 1

def awaiter():
    ev = streams.Event()
    async def main():
        while not stop.is_set():
            try:
                await asyncio.wait_for(s.wait_async(), 10)
                stats["awaits"] += 1
            except RuntimeError as exc:
                pass
            except streams.CudaError as exc:
                problems.append(("await", repr(exc)))
            try:
                ev.record(s)
                await asyncio.wait_for(ev.wait_async(), 10)
            except (RuntimeError, streams.CudaError) as exc:
                problems.append(("await event", repr(exc)))
            await asyncio.sleep(0)
    asyncio.run(main())
    ev.close()

def streams_captures():
    end = time.monotonic() + RACE_S
    n = 0
    target = other if cfg["capture"] == "other" else s
    while time.monotonic() < end:
        n += 1
        try:
            target.begin_capture(cfg["mode"])
            try:
                if cfg["kernel"]:
                    launch_empty(target)
            finally:
                g = target.end_capture()
        except streams.CudaError as exc:
            problems.append(("capture", repr(exc)))
            continue
        stats["captures"] += 1
        if cfg["close"] != "at_once" and n % 2 == 0 and len(kept) < 150:
            kept.append(g)      # closed at the end (replayed first if "replay")
        else:
            g.close()

def driver_captures():
    make_current()
    h = ctypes.c_void_p(s.handle)
    end = time.monotonic() + RACE_S
    while time.monotonic() < end:
        ck(cu.cuStreamBeginCapture_v2(h, MODES[cfg["mode"]]), "begin")
        g = ctypes.c_void_p()
        r = cu.cuStreamEndCapture(h, ctypes.byref(g))
        if r != 0:
            problems.append(("driver end", r))
            continue
        stats["captures"] += 1
        if cfg["replay"] and len(foreign) < 150:
            foreign.append(g)
        else:
            ck(cu.cuGraphDestroy(g), "graph destroy")
        time.sleep(0.0002)

enq = cfg["enqueue"]
target = {"streams": streams_enqueuer, "plain": driver_enqueuer_plain,
          "attach": lambda k: driver_enqueuer_attach(k, cu),
          "attach_gil": lambda k: driver_enqueuer_attach(k, cu_gil)}[enq]
threads = [threading.Thread(target=target, args=(k,), name=f"enqueuer-{k}")
           for k in range(cfg["enqueuers"])]
if cfg["awaits"]:
    threads.append(threading.Thread(target=awaiter, name="awaiter"))
for t in threads:
    t.start()
try:
    if cfg["capture"] == "driver":
        driver_captures()
    else:
        streams_captures()
finally:
    stop.set()
    for t in threads:
        t.join(20)
print("race over", flush=True)
s.synchronize()
if kept and cfg["replay"]:
    execs = [g.instantiate() for g in kept]
    for _ in range(3):
        for ex in execs:
            ex.launch(replay)
    replay.synchronize()
    for ex in execs:
        ex.close()
for g in kept:
    g.close()
if foreign:
    fx = []
    for g in foreign:
        ex = ctypes.c_void_p()
        ck(cu.cuGraphInstantiateWithFlags(ctypes.byref(ex), g, 0), "instantiate")
        fx.append(ex)
    for _ in range(3):
        for ex in fx:
            ck(cu.cuGraphLaunch(ex, ctypes.c_void_p(replay.handle)), "launch")
    replay.synchronize()
    for ex in fx:
        ck(cu.cuGraphExecDestroy(ex), "exec destroy")
    for g in foreign:
        ck(cu.cuGraphDestroy(g), "graph destroy")
gc.collect()
streams.synchronize_device()
kinds = sorted({p[0] for p in problems})
print("OK", json.dumps(stats), "problems", len(problems), kinds, flush=True)
'''

BASE = dict(enqueuers=4, enqueue="streams", capture="streams", mode="relaxed", kernel=False,
            replay=False, awaits=False, close="at_once")

VARIANTS = [
    ("A", dict(enqueuers=1)),
    ("B", {}),
    ("B-g", dict(mode="global")),
    ("B-t", dict(mode="thread_local")),
    ("C", dict(kernel=True, close="end")),
    ("D", dict(kernel=True, close="end", replay=True)),
    ("E", dict(kernel=True)),
    ("F", dict(enqueuers=0, kernel=True, awaits=True)),
    ("G", dict(capture="other", mode="global", kernel=True)),
    ("H", dict(capture="driver")),
    ("P1", dict(capture="driver", enqueue="plain")),
    ("P2", dict(capture="driver", enqueue="attach")),
    ("P3", dict(capture="driver", enqueue="attach_gil")),
    ("FULL", dict(kernel=True, close="end", replay=True, awaits=True, mode="global")),
]


def main(argv):
    race = 1.5
    if "--race" in argv:
        i = argv.index("--race")
        race = float(argv[i + 1])
        del argv[i:i + 2]
    wanted = set(argv)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    t_all = time.monotonic()
    for name, over in VARIANTS:
        if wanted and name not in wanted:
            continue
        cfg = dict(BASE, race=race, **over)
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], env=env,
                                  capture_output=True, text=True, timeout=30)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        last = (out.strip().splitlines() or [""])[-1]
        print(f"== {name:4s} rc={rc:4d} {time.monotonic() - t0:5.1f}s  {json.dumps(over)}")
        print(f"   stdout: {last}")
        if rc != 0:
            for line in err.strip().splitlines()[-40:]:
                print(f"   | {line}")
        sys.stdout.flush()
    print(f"total {time.monotonic() - t_all:.1f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
