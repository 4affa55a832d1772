"""A contender's worker process: requests on stdin, one JSON answer a line
on stdout (the protocol is described by ``harness.Worker``).

Started by the harness as ``python -m benchmarks.run --worker NAME``, or,
for ``--one-process``, as ``--worker shared --members a,b,c``: one process
that serves several contenders, each request naming the one it is for
(``info NAME``, ``run NAME OP ITERS BATCHES WARMUP``).
"""
import gc
import json
import os
import sys

from benchmarks.adapters import ADAPTERS
from benchmarks.ops import OP_BY_NAME
from benchmarks.timing import NotAvailable, describe, run_batches


class Serving:
    """One contender's adapter and its current case, answering its requests."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.ready, self.setup_error = False, None
        self.case_op, self.case, self.case_na = None, None, None
        self.floor, self.floor_na = None, None

    def _setup(self):
        if not self.ready and self.setup_error is None:
            try:
                self.adapter.setup()
                self.ready = True
            except Exception as exc:
                self.setup_error = "setup failed: " + describe(exc)

    def info(self):
        self._setup()
        if self.setup_error:
            return {"ok": False, "error": self.setup_error}
        try:
            return dict({"ok": True}, **self.adapter.info())
        except Exception as exc:
            return {"ok": True, "info_error": describe(exc)}

    def run(self, args, line):
        """``args``: OP ITERS BATCHES WARMUP."""
        self._setup()
        if len(args) != 4:
            return {"ok": False, "error": f"bad request {line.strip()!r}"}
        if self.setup_error:
            return {"ok": False, "error": self.setup_error}
        op = args[0]
        try:
            iters, batches, warmup = int(args[1]), int(args[2]), int(args[3])
        except ValueError:
            return {"ok": False, "error": f"bad request {line.strip()!r}"}
        if op not in OP_BY_NAME:
            return {"ok": False, "na": f"unknown operation {op}"}
        if op != self.case_op:
            self.close()
            self.case_op, self.case, self.case_na = op, None, None
            gc.collect()
            try:
                self.case = self.adapter.make_case(op)
            except NotAvailable as exc:
                self.case_na = str(exc)
            except Exception as exc:
                self.case_op = None      # a later request for it tries again
                return {"ok": False, "error": "set-up failed: " + describe(exc)}
            try:
                self.floor, self.floor_na = self.adapter.floor(op), None
            except NotAvailable as exc:
                self.floor, self.floor_na = None, str(exc)
        if self.case_na is not None:
            return {"ok": False, "na": self.case_na}
        try:
            measured = run_batches(self.case, iters, batches, warmup, self.floor)
        except Exception as exc:
            self.close()
            self.case_op = None
            return {"ok": False, "error": describe(exc)}
        answer = {"ok": True, "op": op, "iters": iters, "drained": measured["drained"],
                  "ns": measured["ns"]}
        if measured["floor_ns"]:
            answer["floor_ns"] = measured["floor_ns"]
        if self.floor_na or measured["floor_error"]:
            answer["floor_error"] = self.floor_na or measured["floor_error"]
        if self.case.note:
            answer["note"] = self.case.note
        return answer

    def close(self):
        if self.case is not None:
            self.case.close()
            self.case = None


def worker_main(name, ptx_path=None, cy_module=None, members=None):
    """Serve requests for one contender (or, with ``members``, for each of
    them in this one process) on stdin/stdout (see harness.Worker)."""
    # The protocol gets a private copy of stdout; fd 1 becomes stderr, so
    # whatever a library prints cannot corrupt an answer.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(obj):
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    shared = members is not None
    servings = {}
    for m in (members if shared else [name]):
        servings[m] = Serving(ADAPTERS[m](ptx_path, cy_module))
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        if parts[0] not in ("info", "run"):
            reply({"ok": False, "error": f"bad request {line.strip()!r}"})
            continue
        args = parts[1:]
        if shared:
            if not args or args[0] not in servings:
                reply({"ok": False, "error": f"bad request {line.strip()!r}: no such member"})
                continue
            serving, args = servings[args[0]], args[1:]
        else:
            serving = servings[name]
        if parts[0] == "info":
            reply(serving.info() if not args else
                  {"ok": False, "error": f"bad request {line.strip()!r}"})
        else:
            reply(serving.run(args, line))
    # Each member's objects go before the next member's: a library's
    # objects never outlive another's set-up by accident.
    for serving in servings.values():
        serving.close()
    proto.flush()
    # Skip interpreter teardown: some libraries are slow, or hang, at exit,
    # and the process is done.
    os._exit(0)
