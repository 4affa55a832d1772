"""The terminal table and the PNG chart of a result document.

Only the document is read: a stored result renders anywhere, without
streams or a GPU.
"""
from benchmarks.ops import SUSPECT_BELOW, targets_text
from benchmarks.results import SCHEMA_V1


def _version_string(v):
    return "unknown" if not v else f"{v // 1000}.{(v % 1000) // 10}"


def _fmt_ns(x):
    return f"{x:.0f}" if x < 1e6 else f"{x / 1e3:.0f}k"


def _fmt_per_node(x):
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def _ordered(configured, present, chosen=None):
    """The names in ``present``, in the configured order (others after),
    only the ``chosen`` ones when given."""
    names = [n for n in configured if n in present]
    names += [n for n in present if n not in names]
    return [n for n in names if n in chosen] if chosen else names


def _columns(doc, contenders=None):
    return _ordered(doc["config"]["contenders"], doc["contenders"], contenders)


def _rows(doc, ops=None):
    return _ordered(doc["config"]["ops"], doc["results"], ops)


_VERDICT_TEXT = {"pass": " ok", "miss": " MISS", "suspect": " SUSPECT"}


def render_table(doc, ops=None, contenders=None):
    """The terminal table: rows are operations, columns contenders; a cell
    is the median ns per call, ±half the p10-p90 spread, ``/`` the median of
    the in-process floor measured in the same process, the ratio to it, and
    ok/MISS against the promised ratio (SUSPECT: a streams cell below its
    floor, which is a measurement problem); on the graph-size rows, the cost
    of one more node (``/node``)."""
    cols = _columns(doc, contenders)
    rows = _rows(doc, ops)
    notes = []

    def footnote(text):
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    header = ["operation", "target"] + [doc["contenders"][c]["label"] for c in cols]
    table = []
    for op in rows:
        meta = doc["ops"].get(op, {})
        targets = meta.get("targets", {})
        line = [meta.get("label", op), targets_text(targets) or "-"]
        for c in cols:
            cell = doc["results"][op].get(c)
            if cell is None:
                line.append("-")
                continue
            st = cell["status"]
            if st == "ok":
                s = cell["stats"]
                spread = (s["p90"] - s["p10"]) / 2 / s["median"] * 100 if s["median"] else 0
                text = f"{_fmt_ns(s['median'])}±{spread:.0f}%"
                if cell.get("floor_stats"):
                    text += f" /{_fmt_ns(cell['floor_stats']['median'])}"
                if cell.get("ratio") is not None:
                    text += f" {cell['ratio']:.2f}x"
                text += _VERDICT_TEXT.get(cell.get("verdict"), "")
                if cell.get("per_node_ns") is not None:
                    text += f" {_fmt_per_node(cell['per_node_ns'])}/node"
                if "over_ns" in cell and "times" in cell["target"]:
                    ref = cell["target"]["of"]
                    text += footnote(
                        f"{doc['contenders'][c]['label']}: "
                        f"{cell['over_ns'] / cell['target_ref_ns'] * 100:+.1f}% over its "
                        f"{doc['ops'].get(ref, {}).get('label', ref)} "
                        f"({_fmt_ns(cell['target_ref_ns'])} ns); the target: at most "
                        f"{(cell['target']['times'] - 1) * 100:+g}%")
                elif "over_ns" in cell:
                    ref = cell["target"]["of"]
                    text += footnote(
                        f"{doc['contenders'][c]['label']}: {cell['over_ns']:+.0f} ns per call "
                        f"over its {doc['ops'].get(ref, {}).get('label', ref)} "
                        f"({_fmt_ns(cell['target_ref_ns'])} ns); the target: at most "
                        f"{cell['target']['plus_ns']:+g} ns")
                if cell.get("note"):
                    text += footnote(f"{doc['contenders'][c]['label']}: {cell['note']}")
                if cell.get("floor_reason"):
                    text += footnote(f"{doc['contenders'][c]['label']}: no in-process floor: "
                                     f"{cell['floor_reason']}")
            else:
                text = {"n/a": "n/a", "missing": "missing", "unavailable": "unavail.",
                        "error": "ERROR"}[st]
                # The row names the operation: footnotes without it let one
                # reason shared by many cells (a failed set-up) print once.
                if st in ("n/a", "error"):
                    text += footnote(f"{doc['contenders'][c]['label']}: {cell.get('reason')}")
            line.append(text)
        table.append(line)
    widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]

    def fmt(r):
        return "  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()

    out = []
    m = doc.get("machine", {})
    gpu = m.get("gpu") or {}
    title = "streams launch overhead"
    if doc.get("synthetic"):
        title += " -- SYNTHETIC FIXTURE, NOT A MEASUREMENT"
    if doc.get("interrupted"):
        title += " -- INTERRUPTED, PARTIAL"
    out.append(title)
    facts = [f"GPU: {gpu.get('name', 'unknown')}"]
    if gpu.get("driver_cuda_version"):
        facts.append(f"driver CUDA {_version_string(gpu['driver_cuda_version'])}")
    smi = m.get("nvidia_smi") or []
    if smi and smi[0].get("driver_version"):
        facts.append(f"driver {smi[0]['driver_version']}")
    if m.get("cpu"):
        facts.append(f"CPU: {m['cpu']}")
    if m.get("python"):
        facts.append(f"Python {m['python']}")
    facts.append(doc.get("created", ""))
    out.append(", ".join(f for f in facts if f))
    cfg = doc["config"]
    out.append(f"{cfg.get('rounds')} rounds x {cfg.get('batches')} batches per cell"
               + (" (quick)" if cfg.get("quick") else "")
               + (f", every worker on CPUs {','.join(map(str, cfg['cpus']))}"
                  if cfg.get("cpus") else "")
               + "; cells: median ns/call ±half the p10-p90 spread of per-batch means")
    if cfg.get("one_process"):
        out.append("the Python contenders in one process (--one-process), their batches "
                   "interleaved as in every run; the C program and baselines apart")
    if doc.get("schema") == SCHEMA_V1:
        out.append("schema 1, before the in-process floor: ratios are to the separate "
                   "C program; ok/MISS against the target")
    else:
        out.append("/the in-process floor: the same CUDA calls from C, in the contender's "
                   "own process, batch by batch next to its batches; the ratio to it; "
                   "ok/MISS against the target")
    out.append(f"SUSPECT: a streams cell below {SUSPECT_BELOW:g}x of its floor, which is "
               "a measurement problem, never a win")
    if any(cell.get("per_node_ns") is not None
           for op in rows for cell in doc["results"][op].values()):
        sizes = {op: doc["ops"][op]["nodes"] for op in doc["ops"]
                 if op in doc["results"] and doc["ops"][op].get("nodes")}
        base = min(sizes, key=sizes.get)
        out.append(f"N/node: a graph of more nodes costs N ns per launch and node more than "
                   f"the same column's {doc['ops'][base].get('label', base)} (the slope of "
                   "the medians)")
    out.append("")
    out.append(fmt(header))
    out.append(fmt(["-" * w for w in widths]))
    out.extend(fmt(r) for r in table)
    out.append("")
    for c in cols:
        entry = doc["contenders"][c]
        if entry.get("status") in ("missing", "unavailable"):
            out.append(f"{entry['label']}: {entry['status']} ({entry.get('reason', '')})")
    summ = doc.get("summary") or {}
    if summ:
        out.append(f"targets: {summ.get('pass', 0)} pass, {summ.get('miss', 0)} miss, "
                   f"{summ.get('not_measured', 0)} not measured; "
                   f"{summ.get('suspect', 0)} suspect")
    for i, text in enumerate(notes, 1):
        out.append(f"[{i}] {text}")
    return "\n".join(out) + "\n"


def render_chart(doc, path, ops=None, contenders=None):
    """A PNG bar chart of every contender's ratio to its in-process floor
    (log scale).

    Needs matplotlib (``pip install matplotlib``); raises
    ImportError without it, ValueError when there is nothing to compare.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = _rows(doc, ops)
    cols = [c for c in _columns(doc, contenders) if c != "c"]
    data = {c: [doc["results"][op].get(c, {}).get("ratio") for op in rows] for c in cols}
    cols = [c for c in cols if any(v is not None for v in data[c])]
    if not rows or not cols:
        raise ValueError("no ratios to a floor to draw")
    n = len(cols)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, 1.6 + len(rows) * (0.2 + 0.1 * n)))
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", [None])
    ys = list(range(len(rows)))
    drawn = []
    for j, c in enumerate(cols):
        pos = [y - 0.4 + height * (j + 0.5) for y in ys]
        pairs = [(p, v) for p, v in zip(pos, data[c]) if v is not None]
        drawn += [v for _, v in pairs]
        ax.barh([p for p, _ in pairs], [v for _, v in pairs], height=height * 0.9,
                label=doc["contenders"][c]["label"], color=colors[j % len(colors)])
        for y, op in zip(pos, rows):
            target = doc["ops"].get(op, {}).get("targets", {}).get(c)
            if isinstance(target, (int, float)):     # not a target relative to another row
                ax.plot([target, target], [y - height / 2, y + height / 2], color="black",
                        linewidth=2)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.axvline(SUSPECT_BELOW, color="red", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    lo, hi = min(0.8, min(drawn) * 0.8), max(2.5, max(drawn) * 1.25)
    ax.set_xlim(lo, hi)
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50, 100) if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks(ys)
    ax.set_yticklabels([doc["ops"].get(op, {}).get("label", op) for op in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    floor = "C program" if doc.get("schema") == SCHEMA_V1 else "in-process floor"
    ax.set_xlabel(f"median time per call / {floor} (log scale)\nblack ticks: streams' "
                  f"targets; red: {SUSPECT_BELOW:g}x, below which a streams cell is suspect")
    gpu = (doc.get("machine", {}).get("gpu") or {}).get("name", "unknown GPU")
    title = f"Launch overhead relative to the {floor}\n{gpu}"
    if doc.get("synthetic"):
        title = "SYNTHETIC FIXTURE, NOT A MEASUREMENT\n" + title
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="best", fontsize="small")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# The README's table: the operations and contenders a reader compares.
README_OPS = ["stream_query", "event_record", "stream_wait_event", "kernel_launch",
              "graph_launch", "host_func_round_trip", "host_func_native_round_trip",
              "event_create_destroy", "stream_create_destroy"]
README_CONTENDERS = ["streams-py", "cupy", "torch", "cuda-core"]
README_SHORT = {"streams-py": "streams", "c": "C prog."}


def render_markdown(doc, ops=None, contenders=None):
    """The README's table of a result: per operation, the C program's
    median and each contender's median ns per call with its ratio to its
    in-process floor (n/a where it has no number)."""
    cols = _columns(doc, contenders or README_CONTENDERS)
    rows = _rows(doc, ops or README_OPS)
    width = max([len(doc["ops"].get(op, {}).get("label", op)) for op in rows] + [9])
    names = [README_SHORT.get(c, doc["contenders"][c]["label"]) for c in cols]
    out = [f"| {'operation':<{width}} | C prog. | " + " | ".join(f"{n:<11}" for n in names)
           + " |",
           f"|{'-' * (width + 2)}|--------:|" + "|".join("-" * 12 + ":" for _ in cols) + "|"]
    for op in rows:
        res = doc["results"][op]
        c = res.get("c", {})
        base = _fmt_ns(c["stats"]["median"]) if c.get("status") == "ok" else "n/a"
        cells = []
        for col in cols:
            cell = res.get(col, {})
            if cell.get("status") != "ok":
                cells.append(f"{'n/a':>11}")
                continue
            ratio = f"{cell['ratio']:.2f}x" if cell.get("ratio") is not None else ""
            ns = _fmt_ns(cell["stats"]["median"])
            cells.append(f"{ns:>5} {ratio:<5}" if len(ns) < 5 else f"{ns} {ratio}")
        label = doc["ops"].get(op, {}).get("label", op)
        out.append(f"| {label:<{width}} | {base:>7} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import argparse
    import json
    ap = argparse.ArgumentParser(description="Render a stored result document.")
    ap.add_argument("result", help="a result document (python -m benchmarks.run --json)")
    ap.add_argument("--markdown", action="store_true",
                    help="the README's table instead of the terminal one")
    args = ap.parse_args()
    with open(args.result) as f:
        document = json.load(f)
    print(render_markdown(document) if args.markdown else render_table(document), end="")
