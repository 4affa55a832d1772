"""Launch-overhead benchmark: streams next to its floor and its peers.

    python -m benchmarks.run [--quick] [--json PATH] [--png PATH]
                             [--ops a,b] [--contenders x,y] [--dry-run FILE]

Run from a source checkout.  Each operation (``--list`` shows them) is
timed for each contender as nanoseconds per call: batches of many calls
after a warm-up batch, in rounds that go round-robin over the contenders,
so that clock or thermal drift hits every column alike.  A cell is the
median of the per-batch means, with the p10-p90 spread, and its ratio to
its floor: the same CUDA calls made from a plain C loop in the same process
(src/floor.h, as streams._cudart.floor_batch), batch by batch
next to the contender's.  The C program (benchmarks/c_floor/bench.c) runs
those loops in a process of its own, as a second reference.

Every contender runs in a process of its own: a peer that crashes, hangs
or is not installed costs its own column only, no two libraries share an
interpreter, and each has its own CUDA context as the C program does.
``--one-process`` puts the Python contenders in one shared process
instead (the same rounds, each batch next to its in-process floor): every
library then meets the same context, caches and clocks; a crash there
costs all of their columns.

``--dry-run FILE`` renders the table (and ``--png`` chart) of a stored
result without a GPU.  benchmarks/README.md says what each column means.
"""
import argparse
import json
import os
import sys

from benchmarks.harness import Config, run_benchmark
from benchmarks.ops import (CONTENDER_BY_NAME, CONTENDERS, GPU_FREE, OP_BY_NAME, OPS, QUICK,
                            targets_text)
from benchmarks.render import render_chart, render_table
from benchmarks.results import load_result
from benchmarks.under_test import streams_facts


def _names(text, known, what):
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad) or '(none given)'}; choose from: "
            + ", ".join(k for k in known if not (what == "contender"
                                                and CONTENDER_BY_NAME[k].hidden)))
    return names


def _cpu_list(text):
    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cpus takes CPU numbers like 2,3, not {text!r}")
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(
            f"--cpus {text}: this process may run on CPUs {sorted(allowed)} only")
    return cpus


def build_parser():
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Launch-overhead benchmark of streams against its floor and its peers "
                    "(CuPy, PyTorch, cuda.core, cuda.bindings, numba-cuda).",
        epilog="See benchmarks/README.md for what each column means.")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['rounds']} rounds x {QUICK['batches']} batches, "
                        f"{QUICK['scale']:g}x the calls per batch")
    p.add_argument("--json", metavar="PATH", help="write the full result (raw numbers) here")
    p.add_argument("--png", metavar="PATH",
                   help="write a bar chart of ratios to the floor (matplotlib)")
    p.add_argument("--ops", type=lambda s: _names(s, OP_BY_NAME, "operation"),
                   metavar="a,b", help="operations to run (default: all; --list shows them)")
    p.add_argument("--contenders", type=lambda s: _names(s, CONTENDER_BY_NAME, "contender"),
                   metavar="x,y", help="contenders to run (default: all)")
    p.add_argument("--dry-run", metavar="FILE",
                   help="render the table (and --png) from a stored JSON result; no GPU needed")
    p.add_argument("--rounds", type=int, metavar="N", help="rounds over the contenders")
    p.add_argument("--batches", type=int, metavar="N", help="timed batches per request")
    p.add_argument("--scale", type=float, metavar="F", help="multiply the calls per batch")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="seconds to wait for one request before giving up on a worker")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where the C program and Cython module are built (default: "
                        "benchmarks/build, else ~/.cache/streams-bench)")
    p.add_argument("--source-dir", metavar="DIR",
                   help="source checkout whose benchmarks/c_floor/bench.c and "
                        "benchmarks/cy_bench.pyx to build (default: this one)")
    p.add_argument("--baseline", metavar="DIR",
                   help="also time streams from Python in another build (an in-place "
                        "build of another commit: the folder that holds its streams "
                        "package, a checkout's src/): before/after in one run")
    p.add_argument("--cpus", type=_cpu_list, metavar="a,b",
                   help="pin every worker to these CPUs (e.g. 2,3): floors and cells of "
                        "all contenders then come from the same cores")
    p.add_argument("--one-process", action="store_true",
                   help="run the Python contenders (streams, CuPy, PyTorch, cuda.core, ...; "
                        "not the baselines) in one shared process, interleaved as usual, "
                        "instead of a process each: every library then meets the same "
                        "CUDA context, caches and clocks (the C program stays apart)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("--list", action="store_true", help="list operations and contenders")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--ptx", help=argparse.SUPPRESS)
    p.add_argument("--cy-module", help=argparse.SUPPRESS)
    p.add_argument("--members", help=argparse.SUPPRESS)
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    for key in ("rounds", "batches"):
        v = getattr(args, key)
        if v is not None and v < 1:
            p.error(f"--{key} must be >= 1")
    if args.scale is not None and not args.scale > 0:
        p.error("--scale must be > 0")
    if args.worker is not None:
        # Only a worker needs the adapters (and, through them, the libraries).
        from benchmarks.adapters import ADAPTERS
        if args.worker == "shared":
            members = (args.members or "").split(",")
            if not args.members or not set(members) <= set(ADAPTERS):
                p.error(f"--worker shared needs --members from {', '.join(ADAPTERS)}")
        elif args.worker not in ADAPTERS:
            p.error(f"unknown worker {args.worker}")
    return args


def _list_text():
    lines = ["operations:"]
    for op in OPS:
        t = targets_text(op.targets)
        lines.append(f"  {op.name:<22} {op.about}" + (f" [target {t}]" if t else ""))
    lines.append("contenders:")
    for c in CONTENDERS:
        if not c.hidden:
            lines.append(f"  {c.name:<22} {c.about}")
    return "\n".join(lines) + "\n"


def _write_outputs(doc, args, out):
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.png:
        try:
            render_chart(doc, args.png, args.ops, args.contenders)
            print(f"wrote {args.png}", file=sys.stderr)
        except ImportError:
            print("no chart: matplotlib is not installed (pip install matplotlib)",
                  file=sys.stderr)
        except ValueError as exc:
            print(f"no chart: {exc}", file=sys.stderr)


def main(argv=None, out=None):
    out = out or sys.stdout
    args = parse_args(argv)
    if args.worker:
        from benchmarks.worker import worker_main
        worker_main(args.worker, args.ptx, args.cy_module,
                    args.members.split(",") if args.worker == "shared" else None)
        return 0
    if args.list:
        out.write(_list_text())
        return 0
    if args.dry_run:
        try:
            doc = load_result(args.dry_run)
        except (OSError, ValueError) as exc:
            print(f"cannot read {args.dry_run}: {exc}", file=sys.stderr)
            return 2
        out.write(render_table(doc, args.ops, args.contenders))
        _write_outputs(doc, args, out)
        return 0
    config = Config(ops=args.ops, contenders=args.contenders, quick=args.quick,
                    rounds=args.rounds, batches=args.batches, scale=args.scale,
                    cache_dir=args.cache_dir, timeout=args.timeout,
                    progress=not args.no_progress, source_dir=args.source_dir,
                    baseline=args.baseline, cpus=args.cpus, one_process=args.one_process)
    if not set(config.contenders) <= GPU_FREE:
        info = streams_facts()
        if info["device_count"] == 0:
            print("cannot run the benchmark: no usable CUDA device ("
                  + (info["error"] or "device_count() == 0") + ")", file=sys.stderr)
            return 1
    doc = run_benchmark(config)
    out.write(render_table(doc, args.ops, args.contenders))
    _write_outputs(doc, args, out)
    if doc.get("interrupted"):
        print("interrupted: the results above are partial", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
