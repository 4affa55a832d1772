"""Where a status or enqueue call's time goes, layer by layer, in one process.

For stream query, event record, event query and stream wait_event it times,
batch by batch in turn (so that a slow minute of the machine hits every
layer alike):

* ``floor``: the raw cudart call from C (``streams._cudart.floor_batch``);
* ``call``: the package's call layer (guard + error check) around it;
* ``c_api``: the C-level method a Cython project calls without the GIL,
  which also counts its use of each object;
* ``python``: the Python method, in the benchmark's generated loop;

and the pieces on their own: the guard, a counted use (two locked
read-modify-writes), the GIL's release and retake that every status and
enqueue call from Python makes, and a Python call with no CUDA
(``Stream.closed``) in the same loop.  Each line: the median ns per call
of the batches and half their p10-p90 spread; each layer also as the
ratio to the floor and what it adds to the layer below.

Run on a GPU machine from a checkout with streams built in place:
``python -m benchmarks.probes.status_breakdown [--rounds 21] [--n 20000]``.
The probe module (``status_probe.pyx``) is compiled on first use with the
CUDA headers into the benchmark cache.  A probe, not a row of the table.
"""
import argparse
import os
import statistics
import sys
import sysconfig

from benchmarks import CHECKOUT
from benchmarks import builders
from benchmarks.timing import make_loop

PROBE = "streams_status_probe"

_SETUP = """\
import sys
from setuptools import Extension, setup
from Cython.Build import cythonize
build, pyx, pxd_root = sys.argv[1:4]
incs = sys.argv[4:]
ext = Extension(%r, [pyx], include_dirs=incs, extra_compile_args=["-O2"])
setup(name="streams-status-probe",
      ext_modules=cythonize([ext], include_path=[pxd_root], build_dir=build,
                            compiler_directives={"language_level": 3,
                                                 # else importing it turns a free-threaded
                                                 # build's GIL back on for the whole run
                                                 "freethreading_compatible": True},
                            quiet=True),
      script_args=["build_ext", "--build-lib", build, "--build-temp", build + "/tmp"])
""" % PROBE

PY_BODIES = {"stream_query": "s.query()", "event_record": "s.record(ev)",
             "event_query": "done.query()", "stream_wait_event": "s.wait_event(done)"}


def build_probe(cache_dir=None):
    """Compile status_probe.pyx against this checkout; ``(path, None)`` or ``(None, why)``."""
    import subprocess
    import streams
    pkg = os.path.dirname(os.path.abspath(streams.__file__))
    src_root = os.path.join(CHECKOUT, "src")
    if os.path.realpath(os.path.dirname(pkg)) != os.path.realpath(src_root):
        return None, f"the imported streams ({pkg}) is not this checkout's: build it in place"
    incs, _lib = builders.find_cuda()
    if incs is None:
        return None, _lib
    src = os.path.join(CHECKOUT, "benchmarks", "probes", "status_probe.pyx")
    pxds = [builders.read(os.path.join(pkg, n), "rb") for n in sorted(os.listdir(pkg))
            if n.endswith(".pxd")]
    build = os.path.join(cache_dir or builders.default_cache_dir(), "status-probe")
    product = os.path.join(build, PROBE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    key = builders._digest(builders.read(src, "rb"), _SETUP.encode(), *pxds, sys.version, *incs)
    if builders._stamp_ok(build, key, product):
        return product, None
    os.makedirs(build, exist_ok=True)
    pyx = os.path.join(build, PROBE + ".pyx")
    with open(src, "rb") as fin, open(pyx, "wb") as fout:
        fout.write(fin.read())
    # The probe cimports the call layer (src/streams/*.pxd), whose private
    # headers (the shim, counters.h) live in the checkout's src/, never in
    # the package.
    cmd = [sys.executable, "-c", _SETUP, build, pyx, src_root, streams.get_include(), src_root,
           *incs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=build)
    if proc.returncode != 0 or not os.path.isfile(product):
        return None, "building the probe failed:\n" + builders._tail(proc.stdout + proc.stderr)
    with open(os.path.join(build, "stamp"), "w") as f:
        f.write(key + "\n")
    return product, None


def _load(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(PROBE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary(values):
    values = sorted(values)
    med = statistics.median(values)
    lo = values[int(0.1 * (len(values) - 1))]
    hi = values[int(round(0.9 * (len(values) - 1)))]
    return med, (hi - lo) / 2


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probes.status_breakdown",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--n", type=int, default=20000, help="calls per batch")
    ap.add_argument("--out", help="also write the report to this file")
    args = ap.parse_args(argv)

    import streams
    from streams import _cudart
    path, why = build_probe()
    if path is None:
        print(f"status_breakdown: {why}", file=sys.stderr)
        return 1
    probe = _load(path)
    s, other = streams.Stream(), streams.Stream()
    ev, done = streams.Event(), streams.Event()
    other.record(done)
    done.synchronize()

    timers = {}
    for op in probe.OPS:
        timers[(op, "floor")] = lambda n, op=op: _cudart.floor_batch(op, n)
        for layer in probe.LAYERS:
            timers[(op, layer)] = (lambda n, op=op, layer=layer:
                                   probe.layer_batch(op, layer, s, ev, done, n))
        timers[(op, "python")] = make_loop(PY_BODIES[op], s=s, ev=ev, done=done)
    for piece in probe.PIECES:
        timers[("piece", piece)] = lambda n, piece=piece: probe.piece_batch(piece, s, n)
    timers[("piece", "python_call")] = make_loop("s.closed", s=s)
    timers[("split", "noop(s)")] = make_loop("noop(s)", s=s, noop=probe.noop)
    timers[("split", "query(s)")] = make_loop("query(s)", s=s, query=probe.query)

    for timed in timers.values():           # warm-up: first calls, caches, the floor's set-up
        timed(max(1, args.n // 10))
    per_call = {key: [] for key in timers}
    for _ in range(args.rounds):
        for key, timed in timers.items():
            per_call[key].append(timed(args.n) / args.n)
            s.synchronize()

    import platform
    lines = [f"# benchmarks/probes/status_breakdown.py: streams {streams.__version__}, "
             f"Python {platform.python_version()}, {args.rounds} rounds x {args.n} calls; "
             "ns per call: median ±half the p10-p90 spread of the batches",
             f"{'operation':<18} {'layer':<8} {'ns/call':>14} {'x floor':>8} {'adds':>7} (c_api over call, "
             "python over call, call over floor)"]
    # What each layer adds is over the layer it is built on: the Python
    # method does not go through the C-level one (it holds the GIL, so its
    # use is a look at the closed flag), both stand on the call layer.
    below = {"call": "floor", "c_api": "call", "python": "call"}
    for op in probe.OPS:
        floor = _summary(per_call[(op, "floor")])[0]
        for layer in ("floor",) + probe.LAYERS + ("python",):
            med, spread = _summary(per_call[(op, layer)])
            adds = (f"{med - _summary(per_call[(op, below[layer])])[0]:+7.1f}"
                    if layer in below else "")
            lines.append(f"{op:<18} {layer:<8} {med:8.1f} ±{spread:5.1f} {med / floor:7.3f}x "
                         f"{adds}")
    for piece in probe.PIECES + ("python_call",):
        med, spread = _summary(per_call[("piece", piece)])
        lines.append(f"{'piece':<18} {piece:<21} {med:6.1f} ±{spread:5.1f}")
    # The Python layer of stream_query, split: a compiled function's call
    # from the loop, the call layer's query inside such a call, and the rest
    # (the method's own work: the held use, the bool).
    noop = _summary(per_call[("split", "noop(s)")])[0]
    plain = _summary(per_call[("split", "query(s)")])[0]
    call = _summary(per_call[("stream_query", "call")])[0]
    method = _summary(per_call[("stream_query", "python")])[0]
    lines += [f"{'split':<18} {'noop(s) from Python':<21} {noop:6.1f}",
              f"{'split':<18} {'query(s) from Python':<21} {plain:6.1f}   the call layer's query "
              f"costs {plain - noop:.1f} there, {call:.1f} in a C loop",
              f"{'split':<18} {'s.query() - query(s)':<21} {method - plain:+6.1f}   the method's own work"]
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")
    for obj in (s, other, ev, done):
        obj.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
