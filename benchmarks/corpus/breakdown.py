"""Break ``ckptscan eval`` results on a corpus part down by recipe dimension.

    ckptscan eval /work/corpus/calibration --json -o /tmp/cal-analysis > /tmp/cal-eval.json
    python benchmarks/corpus/breakdown.py --runs /work/corpus/calibration --eval /tmp/cal-eval.json

Joins each eval row (``run`` = the run folder's name) with that run's ``truth.json`` and prints one
table per dimension: framework, save cadence, fault kind (benign events apart), LR shape, optimizer,
optimizer settings (LR, betas, eps, weight decay: a row per recipe of one optimizer), schedule,
model, layers, heads (query / KV), warm-up, and, from the eval row, the onset's phase (before the
run settled, settled but not yet examined, examined: ``onset_phase``).  Columns: runs;
fault runs; detected (of the fault runs: alarm at/after the onset, before the divergence); class
right (of all runs); false alarms (of all runs: any alarm on a healthy or benign run, an alarm
before the onset on a fault run); inconclusive verdicts; the medians, over diverged fault runs, of
ckptscan's lead minus the log-only rule's, that rule read by its first alarm and by its first alarm
at or after the onset
(``ckptscan.drills.evaluate.score_run``).  Nothing is hidden: every value of every dimension gets
its row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

from ckptscan.drills.evaluate import ONSET_PHASES, median

DIMENSIONS = {  # drill runs (ckptscan drill) carry fewer params: they read as the drills' recipe
    "framework": lambda t: t["params"].get("framework", "drill"),
    "cadence": lambda t: t["params"].get("save_every"),
    "fault": lambda t: t["fault"] if not t.get("benign") else f"none ({t['benign']})",
    "lr shape": lambda t: t.get("lr_shape") or ("growth" if t["fault"] in ("high-lr", "combined") else "-"),
    "optimizer": lambda t: (t["params"].get("optimizer") or {"name": "adamw"}).get("name"),
    "optimizer settings": lambda t: _settings(t["params"].get("optimizer") or {"name": "adamw"}),
    "schedule": lambda t: {"cosine": "cos", "constant": "const"}.get(
        t["params"].get("schedule"), t["params"].get("schedule")
    ),
    "model": lambda t: t["params"].get("naming"),
    "layers": lambda t: _layers(t["params"].get("model") or {}),
    "heads": lambda t: _heads(t["params"].get("model") or {}),
    "warm-up %": lambda t: round(100 * t["params"].get("warmup", 0) / t["steps_planned"]),
}
# read from the eval row, not the recipe: where the fault's onset fell in the run's own time line
# (``ckptscan.drills.evaluate.onset_phase``: before the run settled, in the baseline, examined)
ROW_DIMENSIONS = {
    "onset phase": lambda row: row.get("onset_phase") or "-",
}
# rows in the run's own order, not the alphabet's (healthy and benign runs, "-", first)
ORDER = {"onset phase": ("-", *ONSET_PHASES)}


def _settings(opt: dict) -> str:
    """One optimizer recipe: its name, peak LR, betas, eps and weight decay where the truth file
    records them (``lion lr 0.0003 betas 0.9/0.99 wd 1``), so that two recipes of one optimizer
    get a row each."""
    out = [opt.get("name", "adamw")]
    if opt.get("lr") is not None:
        out.append(f"lr {opt['lr']:g}")
    if opt.get("betas"):
        out.append("betas " + "/".join(f"{b:g}" for b in opt["betas"]))
    if opt.get("eps") is not None:
        out.append(f"eps {opt['eps']:g}")
    if opt.get("weight_decay") is not None:
        out.append(f"wd {opt['weight_decay']:g}")
    if opt.get("muon"):  # the hidden matrices' own: the rest above are its AdamW side's
        out.append(f"(muon lr {opt['muon']['lr']:g} wd {opt['muon']['weight_decay']:g})")
    return " ".join(out)


def _layers(model: dict) -> int:
    """A corpus run's transformers config says ``num_hidden_layers`` (GPT-2's ``n_layer``), a
    drill's model ``n_layers``."""
    return int(model.get("num_hidden_layers", model.get("n_layer", model.get("n_layers", 2))))


def _heads(model: dict) -> str:
    """Query heads / KV heads: a corpus run's transformers config (``num_attention_heads``, GPT-2's
    ``n_head``; ``num_key_value_heads``, Falcon's ``num_kv_heads``, none in GPT-2's and GPT-NeoX's,
    whose KV heads are the query heads), a drill's model (``n_heads``, ``n_kv_heads``; the drills'
    4 / 2)."""
    if "n_heads" in model or not model:  # a drill's model
        return f"{int(model.get('n_heads', 4))}/{int(model.get('n_kv_heads', 2))}"
    q = int(model.get("num_attention_heads", model.get("n_head", 4)))
    kv = model.get("num_key_value_heads", model.get("num_kv_heads"))
    return f"{q}/{int(kv) if kv is not None else q}"


def join(runs_dir: Path, rows: list[dict]) -> list[tuple[dict, dict]]:
    """(eval row, truth) pairs; a row whose run folder has no truth.json is reported and left out."""
    pairs = []
    for row in rows:
        tp = runs_dir / row["run"] / "truth.json"
        if not tp.is_file():
            print(f"note: {row['run']}: no truth.json under {runs_dir}; left out", file=sys.stderr)
            continue
        pairs.append((row, json.loads(tp.read_text())))
    return pairs


LEADS = ("lead_over_log_only_first", "lead_over_log_only")  # its first alarm; its first at/after onset


def _keys() -> dict:
    """Every dimension, each a function of (eval row, truth)."""
    keys = {dim: partial(_of_truth, key) for dim, key in DIMENSIONS.items()}
    return keys | {dim: partial(_of_row, key) for dim, key in ROW_DIMENSIONS.items()}


def _of_truth(key, row: dict, truth: dict):
    return key(truth)


def _of_row(key, row: dict, truth: dict):
    return key(row)


def tally(pairs: list[tuple[dict, dict]], key) -> dict:
    """Per value of ``key`` (a function of (eval row, truth)), the counts and medians of its rows."""
    columns = ("runs", "fault", "detected", "class_right", "false_alarms", "inconclusive")
    groups: dict = defaultdict(lambda: {**dict.fromkeys(columns, 0), **{k: [] for k in LEADS}})
    for row, truth in pairs:
        g = groups[key(row, truth)]
        g["runs"] += 1
        g["fault"] += row["truth"] != "healthy"
        g["detected"] += bool(row.get("detected"))
        g["class_right"] += bool(row.get("class_right"))
        g["false_alarms"] += bool(row.get("false_alarm"))
        g["inconclusive"] += row.get("verdict") == "inconclusive"
        for k in LEADS:
            if row.get(k) is not None:
                g[k].append(row[k])
    for g in groups.values():
        for k in LEADS:
            g[k] = median(g[k])
    return dict(sorted(groups.items(), key=lambda kv: (str(type(kv[0])), kv[0])))


def _ordered(dim: str, groups: dict) -> dict:
    """``groups`` in ``ORDER[dim]``'s order where the dimension has one (values it lacks last)."""
    order = ORDER.get(dim)
    if order is None:
        return groups
    return dict(sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def format_tables(pairs: list[tuple[dict, dict]]) -> str:
    lines = []
    for dim, key in _keys().items():
        groups = _ordered(dim, tally(pairs, key))
        width = max(len(dim), *(len(str(v)) for v in groups))
        lines.append(
            f"{dim:<{width}}  runs  fault  detected  class right  false alarms  inconclusive  "
            f"lead - log-only (1st / 1st after onset)"
        )
        for value, g in groups.items():
            det = f"{g['detected']}/{g['fault']}" if g["fault"] else "-"
            leads = " / ".join("-" if g[k] is None else f"{g[k]:g}" for k in LEADS)
            lines.append(
                f"{value!s:<{width}}  {g['runs']:>4}  {g['fault']:>5}  {det:>8}  "
                f"{g['class_right']:>5}/{g['runs']:<5}  {g['false_alarms']:>6}/{g['runs']:<5}  "
                f"{g['inconclusive']:>12}  {leads}"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True, help="the corpus part (folders with truth.json)")
    ap.add_argument(
        "--eval", dest="eval_json", type=Path, required=True, help="the output of ckptscan eval --json"
    )
    ap.add_argument("--json", action="store_true", help="print the tallies as JSON")
    args = ap.parse_args(argv)
    data = json.loads(args.eval_json.read_text())
    pairs = join(args.runs, data["rows"] if isinstance(data, dict) else data)
    if args.json:
        tallies = {dim: {str(k): v for k, v in tally(pairs, key).items()} for dim, key in _keys().items()}
        print(json.dumps(tallies, indent=1))
    else:
        print(format_tables(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
