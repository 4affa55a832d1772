"""The result document (schema ``streams-bench/2``): its skeleton, the
numbers derived from the raw per-batch values, and its validation.

benchmarks/README.md describes the fields.  Documents of schema 1, from
before the in-process floor, still load: their ratios are to the separate C
program, as they were then.
"""
import datetime
import json
import math
import os
import sys

from benchmarks.ops import CONTENDER_BY_NAME, OP_BY_NAME, SUSPECT_BELOW

SCHEMA = "streams-bench/2"
SCHEMA_V1 = "streams-bench/1"
#: The columns held to the floor: streams makes the floor's very calls, so
#: a cell below it measured something else.  (Peers may do other work:
#: torch's streams come from a pool.)
STREAMS_COLUMNS = ("streams-py", "streams-cy")
CELL_STATUSES = ("ok", "n/a", "missing", "unavailable", "error")
CONTENDER_STATUSES = ("ok", "missing", "unavailable", "error")


def _quantile(xs, q):
    """Linear-interpolation quantile of sorted ``xs``."""
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(ns):
    """Median, p10, p90, min, mean of per-batch ns/call values."""
    xs = sorted(float(x) for x in ns)
    if not xs:
        return None
    return {"n": len(xs), "median": _quantile(xs, 0.5), "p10": _quantile(xs, 0.1),
            "p90": _quantile(xs, 0.9), "min": xs[0], "mean": sum(xs) / len(xs)}


def new_doc(config):
    """An empty result document for ``config`` (a harness.Config)."""
    return {
        "schema": SCHEMA,
        "synthetic": False,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), "-m", "benchmarks.run"]
                            + sys.argv[1:]),
        "config": config.as_dict(),
        "machine": {},
        "contenders": {c: {"label": CONTENDER_BY_NAME[c].label,
                           "about": CONTENDER_BY_NAME[c].about, "status": "ok"}
                       for c in config.contenders},
        "ops": {op: _op_entry(OP_BY_NAME[op]) for op in config.ops},
        "results": {op: {} for op in config.ops},
    }


def _op_entry(op):
    """An operation's entry in ``ops``: what the table needs of it."""
    entry = {"label": op.label, "about": op.about, "targets": dict(op.targets)}
    if op.nodes:
        entry["nodes"] = op.nodes
    return entry


def _derive(cell, c_median, legacy):
    """A cell's statistics and ratios, from its raw values only.

    ``ratio`` is to the in-process floor of the cell's own process (its
    ``floor_ns``, measured batch by batch next to ``ns``; a schema-1
    document had only the C program); ``ratio_to_c`` is to the separate C
    program, the second reference; ``ratio_stats`` summarizes the ratios of
    paired batches.
    """
    for key in ("stats", "floor_stats", "ratio_stats"):
        cell.pop(key, None)
    cell["ratio"] = cell["ratio_to_c"] = None
    if cell.get("status") != "ok" or not cell.get("ns"):
        return
    stats = cell["stats"] = summarize(cell["ns"])
    if c_median:
        cell["ratio_to_c"] = stats["median"] / c_median
    floor = cell.get("floor_ns")
    if floor:
        cell["floor_stats"] = summarize(floor)
        cell["ratio"] = stats["median"] / cell["floor_stats"]["median"]
        if len(floor) == len(cell["ns"]):
            cell["ratio_stats"] = summarize([a / b for a, b in zip(cell["ns"], floor)])
    elif legacy:
        cell["ratio"] = cell["ratio_to_c"]


def _verdict(contender, cell, target, results):
    """pass/miss/suspect/not measured, or None.  A relative target (ops.over)
    is met when the cell's median is at most ``plus_ns`` above the median of
    the same contender on the ``of`` row of this run; the cell gets that
    row's median as ``target_ref_ns`` and its own excess as ``over_ns``."""
    ratio = cell["ratio"]
    if contender in STREAMS_COLUMNS and ratio is not None and ratio < SUSPECT_BELOW:
        return "suspect"
    if target is None:
        return None
    if isinstance(target, dict):
        ref = results.get(target["of"], {}).get(contender, {})
        if not (cell.get("stats") and ref.get("stats")):
            return "not measured"
        cell["target_ref_ns"] = ref["stats"]["median"]
        cell["over_ns"] = cell["stats"]["median"] - cell["target_ref_ns"]
        if "times" in target:       # ops.times: a ratio to the other row
            return ("pass" if cell["stats"]["median"] <= target["times"] * cell["target_ref_ns"]
                    else "miss")
        return "pass" if cell["over_ns"] <= target["plus_ns"] else "miss"
    if ratio is None:
        return "not measured"
    return "pass" if ratio <= target else "miss"


def _per_node(doc):
    """The graph-size series (the rows whose ``ops`` entry has ``nodes``):
    each cell's cost of one more node, the slope from the same contender's
    cell on the series' smallest graph in this document: ``per_node_ns`` from
    the two medians, ``floor_per_node_ns`` from the two in-process floors'."""
    sizes = {op: meta["nodes"] for op, meta in doc["ops"].items()
             if op in doc["results"] and isinstance(meta, dict) and meta.get("nodes")}
    base = min(sizes, key=sizes.get) if sizes else None
    for op, nodes in sizes.items():
        for c, cell in doc["results"][op].items():
            cell.pop("per_node_ns", None)
            cell.pop("floor_per_node_ns", None)
            ref = doc["results"][base].get(c, {})
            if nodes == sizes[base]:
                continue
            for key, stats in (("per_node_ns", "stats"), ("floor_per_node_ns", "floor_stats")):
                if cell.get(stats) and ref.get(stats):
                    cell[key] = ((cell[stats]["median"] - ref[stats]["median"])
                                 / (nodes - sizes[base]))


def finalize(doc):
    """Recompute every derived number from the raw per-batch values.

    Stored results are re-derived on load too: the table and chart never
    trust numbers that the raw data does not support.
    """
    legacy = doc.get("schema") == SCHEMA_V1
    summary = {"pass": 0, "miss": 0, "suspect": 0, "not_measured": 0, "misses": [],
               "suspects": []}
    for row in doc["results"].values():
        base = row.get("c")
        c_median = None
        if base and base.get("status") == "ok" and base.get("ns"):
            c_median = summarize(base["ns"])["median"]
        for c, cell in row.items():
            _derive(cell, c_median if c != "c" else None, legacy)
    _per_node(doc)
    # Verdicts once every cell has its numbers: a target may refer to another row.
    for op, row in doc["results"].items():
        targets = doc["ops"].get(op, {}).get("targets", {})
        for c, cell in row.items():
            for key in ("target_ref_ns", "over_ns"):
                cell.pop(key, None)
            target = cell["target"] = targets.get(c)
            verdict = cell["verdict"] = _verdict(c, cell, target, doc["results"])
            if verdict == "not measured":
                summary["not_measured"] += 1
            elif verdict is not None:
                summary[verdict] += 1
            if verdict in ("miss", "suspect"):
                entry = {"op": op, "contender": c,
                         "ratio": None if cell["ratio"] is None else round(cell["ratio"], 3),
                         "target": target}
                if "over_ns" in cell:
                    entry["over_ns"] = round(cell["over_ns"], 1)
                summary["misses" if verdict == "miss" else "suspects"].append(entry)
        for c in targets:
            if c not in row and c in doc.get("contenders", {}):
                summary["not_measured"] += 1
    doc["summary"] = summary
    return doc


class ResultError(ValueError):
    """A stored result does not follow the schema; ``problems`` lists why."""

    def __init__(self, problems):
        self.problems = problems
        super().__init__("not a streams benchmark result:\n  " + "\n  ".join(problems))


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_target(t, ops):
    """A ratio to the floor, or a relative target (ops.over) to a row of ``ops``."""
    if isinstance(t, dict) and set(t) == {"of", "times"}:
        return t["of"] in ops and _is_num(t["times"]) and t["times"] > 0
    if isinstance(t, dict):
        return (set(t) == {"of", "plus_ns"} and t["of"] in ops and _is_num(t["plus_ns"])
                and t["plus_ns"] >= 0)
    return _is_num(t) and t > 0


def _positive_numbers(xs):
    return isinstance(xs, list) and bool(xs) and all(_is_num(x) and x > 0 for x in xs)


def validate_result(doc):
    """Raise ResultError unless ``doc`` is a result document of this schema."""
    p = []
    if not isinstance(doc, dict):
        raise ResultError(["the top level is not an object"])
    if doc.get("schema") not in (SCHEMA, SCHEMA_V1):
        p.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r} (or {SCHEMA_V1!r})")
    if not isinstance(doc.get("synthetic"), bool):
        p.append("synthetic must be true or false")
    for key in ("created",):
        if not isinstance(doc.get(key), str):
            p.append(f"{key} must be a string")
    for key in ("machine", "config", "contenders", "ops", "results"):
        if not isinstance(doc.get(key), dict):
            p.append(f"{key} must be an object")
    if p:
        raise ResultError(p)
    cfg = doc["config"]
    for key in ("rounds", "batches"):
        if not (isinstance(cfg.get(key), int) and cfg[key] >= 1):
            p.append(f"config.{key} must be an integer >= 1")
    for key in ("ops", "contenders"):
        if not (isinstance(cfg.get(key), list) and all(isinstance(x, str) for x in cfg[key])):
            p.append(f"config.{key} must be a list of names")
    for name, entry in doc["contenders"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            p.append(f"contenders.{name} needs a label")
        elif entry.get("status") not in CONTENDER_STATUSES:
            p.append(f"contenders.{name}.status must be one of {CONTENDER_STATUSES}")
    for op, entry in doc["ops"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str):
            p.append(f"ops.{op} needs a label")
        elif not isinstance(entry.get("targets"), dict) or not all(
                _is_target(v, doc["ops"]) for v in entry["targets"].values()):
            p.append(f"ops.{op}.targets must map contenders to ratios > 0 or to "
                     '{"of": another operation, "plus_ns": ns >= 0} or '
                     '{"of": another operation, "times": ratio > 0}')
        elif "nodes" in entry and not (isinstance(entry["nodes"], int)
                                       and not isinstance(entry["nodes"], bool)
                                       and entry["nodes"] >= 1):
            p.append(f"ops.{op}.nodes must be an integer >= 1 (a graph's kernel nodes)")
    for op, row in doc["results"].items():
        if op not in doc["ops"]:
            p.append(f"results.{op}: not in ops")
        if not isinstance(row, dict):
            p.append(f"results.{op} must be an object")
            continue
        for c, cell in row.items():
            where = f"results.{op}.{c}"
            if c not in doc["contenders"]:
                p.append(f"{where}: not in contenders")
            if not isinstance(cell, dict) or cell.get("status") not in CELL_STATUSES:
                p.append(f"{where}.status must be one of {CELL_STATUSES}")
                continue
            if cell["status"] == "ok":
                if not _positive_numbers(cell.get("ns")):
                    p.append(f"{where}.ns must be a non-empty list of positive numbers")
                if not (isinstance(cell.get("iters"), int) and cell["iters"] >= 1):
                    p.append(f"{where}.iters must be an integer >= 1")
                if "floor_ns" in cell and not _positive_numbers(cell["floor_ns"]):
                    p.append(f"{where}.floor_ns must be a non-empty list of positive numbers")
                if not isinstance(cell.get("floor_reason", ""), str):
                    p.append(f"{where}.floor_reason must be a string")
            elif not isinstance(cell.get("reason"), str):
                p.append(f"{where}.reason must say why there are no numbers")
    if p:
        raise ResultError(p)


def load_result(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    validate_result(doc)
    return finalize(doc)
