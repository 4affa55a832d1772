"""A contender's worker process: requests on stdin, one JSON answer a line
on stdout (the protocol is described by ``harness.Worker``).

Started by the harness as ``python -m benchmarks.run --worker NAME``.
"""
import gc
import json
import os
import sys

from benchmarks.adapters import ADAPTERS
from benchmarks.ops import OP_BY_NAME
from benchmarks.timing import NotAvailable, describe, run_batches


def worker_main(name, ptx_path=None, cy_module=None):
    """Serve requests for one contender on stdin/stdout (see harness.Worker)."""
    # The protocol gets a private copy of stdout; fd 1 becomes stderr, so
    # whatever a library prints cannot corrupt an answer.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    adapter = ADAPTERS[name](ptx_path, cy_module)
    ready, setup_error = False, None
    case_op, case, case_na = None, None, None
    floor, floor_na = None, None
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        if not ready and setup_error is None:
            try:
                adapter.setup()
                ready = True
            except Exception as exc:
                setup_error = "setup failed: " + describe(exc)
        if parts[0] == "info":
            if setup_error:
                reply({"ok": False, "error": setup_error})
                continue
            try:
                reply(dict({"ok": True}, **adapter.info()))
            except Exception as exc:
                reply({"ok": True, "info_error": describe(exc)})
            continue
        if parts[0] != "run" or len(parts) != 5:
            reply({"ok": False, "error": f"bad request {line.strip()!r}"})
            continue
        if setup_error:
            reply({"ok": False, "error": setup_error})
            continue
        op = parts[1]
        try:
            iters, batches, warmup = int(parts[2]), int(parts[3]), int(parts[4])
        except ValueError:
            reply({"ok": False, "error": f"bad request {line.strip()!r}"})
            continue
        if op not in OP_BY_NAME:
            reply({"ok": False, "na": f"unknown operation {op}"})
            continue
        if op != case_op:
            if case is not None:
                case.close()
            case_op, case, case_na = op, None, None
            gc.collect()
            try:
                case = adapter.make_case(op)
            except NotAvailable as exc:
                case_na = str(exc)
            except Exception as exc:
                case_op = None      # a later request for it tries again
                reply({"ok": False, "error": "set-up failed: " + describe(exc)})
                continue
            try:
                floor, floor_na = adapter.floor(op), None
            except NotAvailable as exc:
                floor, floor_na = None, str(exc)
        if case_na is not None:
            reply({"ok": False, "na": case_na})
            continue
        try:
            measured = run_batches(case, iters, batches, warmup, floor)
        except Exception as exc:
            case.close()
            case_op, case = None, None
            reply({"ok": False, "error": describe(exc)})
            continue
        answer = {"ok": True, "op": op, "iters": iters, "drained": measured["drained"],
                  "ns": measured["ns"]}
        if measured["floor_ns"]:
            answer["floor_ns"] = measured["floor_ns"]
        if floor_na or measured["floor_error"]:
            answer["floor_error"] = floor_na or measured["floor_error"]
        if case.note:
            answer["note"] = case.note
        reply(answer)
    if case is not None:
        case.close()
    proto.flush()
    # Skip interpreter teardown: some libraries are slow, or hang, at exit,
    # and the process is done.
    os._exit(0)
