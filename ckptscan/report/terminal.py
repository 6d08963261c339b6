"""Terminal report (rich): the verdict first, then the evidence, a per-layer heat strip of the
leading monitors, the findings and what was skipped.

Fits in 100 columns.  Colour comes from rich, which drops it when stdout is not a terminal; the CLI's
console also honours ``NO_COLOR``.  Every line still reads without colour (markers are characters).
"""

from __future__ import annotations

import numpy as np
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ckptscan.report import data

MAX_WIDTH = 100
BLOCKS = "▁▂▃▄▅▆▇█"
STRIP_MONITORS = 3
STRIP_LAYERS = 16
SIGMAS_PER_BLOCK = 1.0  # block height: robust sigmas (from the early baseline, or the detector's score)


def _fmt_step(s):
    return "-" if s is None else str(s)


STATE_STYLE = {
    data.ANOMALOUS: "bold red",
    data.INCONCLUSIVE: "bold yellow",
    data.HEALTHY: "bold green",
    data.NO_VERDICT: "bold magenta",
}


def verdict_line(summary: dict) -> str:
    """The headline (``data.outcome``), the one line ``--quiet`` prints (rich markup)."""
    o = data.outcome(summary)
    return f"[{STATE_STYLE[o.state]}]{o.label}[/]: {escape(o.text)}"


def timing_line(summary: dict) -> str:
    """Earliest step against the loss: the lead time, and the log-only detector's."""
    m = data.markers(summary)
    parts = [f"loss divergence step {_fmt_step(m['divergence_step'])}"]
    parts.append(f"lead time {data.lead_text(summary, ' steps')}")
    lo = summary.get("log_only_lead_time_steps")
    parts.append(f"log-only detector alarm {data.log_only_text(summary)} (lead {_fmt_step(lo)})")
    return "  |  ".join(parts)


def print_result(result, console, quiet: bool = False) -> None:
    s = result.summary
    console.print(verdict_line(s))
    if quiet:
        return
    reason = data.verdict(s).get("reason")
    if reason and data.outcome(s).state != data.INCONCLUSIVE:  # an inconclusive headline is its reason
        console.print(f"why: {escape(str(reason))}")
    uncounted = data.uncounted_note(s)
    if uncounted:
        console.print(f"not counted: {escape(uncounted)}")
    aside = data.set_aside_note(s)
    if aside:
        console.print(f"set aside: {escape(aside)}")
    against = data.reference_text(s)
    if against:
        console.print(f"baseline: {escape(against)}")
    ck = s.get("checkpoints") or {}
    skipped = ck.get("skipped") or []
    console.print(
        f"run {escape(str(s.get('run', '?')))}  |  layout "
        f"{escape(str((s.get('layout') or {}).get('family', '?')))}"
    )
    examined = data.examined_text(s)
    console.print(
        f"{escape(data.points_text(s))}, {len(skipped)} skipped"
        + (f"; {escape(examined)}" if examined else "")
    )
    for note in ck.get("notes") or []:
        console.print(f"note: {escape(str(note))}")
    log = s.get("log") or {}
    if log.get("aligned") is False:
        console.print(f"[yellow]log[/]: {escape(str(log['notes'][-1]))}")
    console.print(timing_line(s))
    _evidence_table(s, console)
    _heat_strips(result, console)
    for f in (s.get("findings") or [])[:10]:
        console.print(
            f"[red]finding[/]: {escape(str(f.get('kind', '?')))} at step {f.get('step')} layer "
            f"{f.get('layer')}: {f.get('nonfinite', '?')} NaN/Inf values in "
            f"{escape(', '.join(map(str, f.get('tensors', []))))}"
        )
    if skipped:
        console.print(f"[yellow]skipped ({len(skipped)})[/]:")
        for sk in skipped[:20]:
            tag = "" if sk.get("error", True) else " (expected)"
            console.print(f"  {escape(str(sk['path']))}: {escape(str(sk['reason']))}{tag}")
        if len(skipped) > 20:
            console.print(f"  ... and {len(skipped) - 20} more (see summary.json)")
    console.print(f"results: {escape(str(result.out_dir or s.get('out')))}")


def _evidence_table(s: dict, console) -> None:
    ev = data.verdict(s)["evidence"]
    if not ev:
        return
    t = Table(
        title="evidence (first alarms)",
        caption=data.score_note(s),
        show_lines=False,
    )
    for col in ("monitor", "layer", "head", "first alarm step", "score"):
        t.add_column(col, justify="left" if col == "monitor" else "right")
    for e in ev[:15]:
        t.add_row(
            escape(data.evidence_monitor(e)),
            _fmt_step(e.get("layer")),
            _fmt_step(e.get("head")),
            data.evidence_step_text(s, e),
            data.score_text(e),
        )
    console.print(t)
    if len(ev) > 15:
        console.print(f"  ... and {len(ev) - 15} more evidence items (see summary.json)")


WARN_LEVEL = 5  # blocks this high before the layer's first alarm are yellow


def _heat_strips(result, console) -> None:
    """One block per leading monitor: a row per layer, a column per (sub-sampled) step; the block
    height is the departure from the layer's early baseline in the anomalous direction, or, for
    trending (rate) series, the detector's own score (``data.detector_scores``)."""
    tl = result.timeline
    if tl is None or len(tl.steps) == 0:
        return
    s = result.summary
    width = min(console.width or MAX_WIDTH, MAX_WIDTH)
    label_w = 6
    cols = max(8, width - label_w - 2)
    steps = np.asarray(tl.steps)
    marks = data.markers(s)
    leading = data.leading_monitors(s, tl.names(), k=STRIP_MONITORS)
    if not leading:
        return
    persist = data.as_int(data.detection(s).get("persist")) or 3
    first_examined = marks.get("first_examined_step")
    raw = (data.coverage(s) or {}).get("first_examined_step", _UNRECORDED)
    # recorded: nothing examined (None) or a step; a result stored without coverage, or with a
    # step that is no number, says nothing of it
    known = raw is None or first_examined is not None
    never = data.layers_not_examined(s) if known else set()
    for words in STRIP_LEGEND if known else STRIP_LEGEND[:1]:
        text = words.format(top=BLOCKS[-1], n=len(BLOCKS) - 1, warn=WARN_LEVEL, persist=persist)
        console.print(Text(text, style="dim"))
    xs = steps
    shown: set[str] = set()
    for name in leading:
        info = data.monitor_info(name)
        mat = data.layer_matrix(tl.get(name), info.direction)
        xs, red = data.reduce_columns(mat, steps, cols, info.direction)
        scores = data.detector_scores(s, tl, name)
        if scores is not None:
            _, dev = data.reduce_columns(
                np.clip(np.nan_to_num(scores, nan=0.0), 0.0, None), steps, cols, "up"
            )
        else:
            dev = data.deviation(red, info.direction)
        rows = list(range(dev.shape[0]))
        note = ""
        if len(rows) > STRIP_LAYERS:
            keep = np.argsort(-dev.max(axis=1), kind="stable")[:STRIP_LAYERS]
            rows = sorted(int(r) for r in keep)
            note = f", {STRIP_LAYERS} of {dev.shape[0]} layers (the most deviant)"
        how = {"down": "min over heads", "up": "max over heads"}.get(info.direction, "mean over heads")
        how = how if info.scope == "head" else "per layer"
        how = "detector score, per layer" if scores is not None else how
        console.print(Text(f"{name}  [{how}, anomalous direction {info.direction}{note}]", style="bold"))
        first_alarm = data.first_alarm_by_layer(s, name)
        for r in rows:
            row = Text()  # a Text's own style would dim every block: only the label is dim
            row.append(f"{f'L{r}' + ('*' if r in never else ''):<{label_w}}", style="dim")
            for j in range(len(xs)):
                lvl = min(len(BLOCKS) - 1, int(dev[r, j] / SIGMAS_PER_BLOCK))
                ch = BLOCKS[lvl] if np.isfinite(red[r, j]) else " "
                end = _bin_end(xs, j, steps)
                alarmed = r in first_alarm and end >= first_alarm[r]
                if not alarmed and known and (r in never or first_examined is None or end < first_examined):
                    row.append(ch, style="dim")  # not scored by the per-series tests
                    continue
                row.append(ch, style="red" if alarmed else ("yellow" if lvl >= WARN_LEVEL else ""))
            console.print(row)
        for mrow in marker_rows(xs, int(steps[-1]), marks):
            console.print(Text(" " * label_w + mrow, style="bold"))
            shown.update(c for c in mrow if c != " ")
    cols_note = "" if len(xs) == len(steps) else f", {len(xs)} columns"
    console.print(
        Text(
            f"{'':{label_w}}steps {steps[0]}..{steps[-1]} ({len(steps)} checkpoints{cols_note})", style="dim"
        )
    )
    named = [f"{ch} {what} {marks[key]}" for key, ch, what in MARKERS if ch in shown]
    if named:
        console.print(Text(f"{'':{label_w}}" + ", ".join(named), style="dim"))


_UNRECORDED = object()  # a coverage without ``first_examined_step``

# what the strips show, and what they do not: tall blocks are not alarms
STRIP_LEGEND = (
    "heat strips: one row per layer, one column per checkpoint (or run of them); block height = how "
    "far the layer's value stood from its own early level, in robust standard deviations (median and "
    "MAD), in the direction a fault moves it (trending series: the detector's score against the "
    "layer's recent change); {top} = {n} or more; red: from the layer's first alarm on, yellow: "
    ">= {warn} with no alarm (yet).",
    "A block is not an alarm: the per-series tests score from E (the first step examined, once the "
    "run had left its early phase; dim before it, where colour is shown; L1* marks a layer that never "
    "left it, none of whose cells was scored) and alarm "
    "only where the score stays high ({persist} points in a row); the whole-model rules (step-size "
    "jump, slow rise or fall, collapse depth, a fall before an unseen divergence) read from the "
    "layers' settling (the jump, and the fall before an unseen divergence, from earlier) and can alarm "
    "before E (red is drawn over dim).",
)


def _bin_end(xs: np.ndarray, j: int, steps: np.ndarray) -> int:
    """The last step in column ``j`` (columns start at ``xs[j]``)."""
    return int(xs[j + 1] - 1) if j + 1 < len(xs) else int(steps[-1])


# drawn in this order; a column that already holds a marker pushes the next one a row down
MARKERS = (
    ("earliest_step", "^", "earliest anomaly at step"),
    ("divergence_step", "D", "loss divergence at step"),
    ("log_only_alarm_step", "L", "log-only alarm at step"),
    ("first_examined_step", "E", "first examined at step"),
)


def marker_rows(xs: np.ndarray, last: int, marks: dict) -> list[str]:
    """``^`` earliest anomaly, ``D`` loss divergence, ``L`` log-only alarm, each under the column of
    its step; markers that share a column go on further rows, so none hides another.  No rows when
    no marker falls inside the analysed steps."""
    rows: list[list[str]] = []
    for key, ch, _ in MARKERS:
        st = marks.get(key)
        if st is None or len(xs) == 0 or not xs[0] <= st <= last:
            continue
        j = int(np.searchsorted(xs, st, side="right") - 1)
        row = next((r for r in rows if r[j] == " "), None)
        if row is None:
            row = [" "] * len(xs)
            rows.append(row)
        row[j] = ch
    return ["".join(r).rstrip() for r in rows]


def print_inspect(info: dict, console) -> None:
    lay = info["layout"]
    console.print(
        f"[bold]{info['path']}[/]  format {info['format']}, {info['n_tensors']} tensors, "
        f"dtypes {', '.join(info['dtypes'])}"
    )
    cfg = {k: v for k, v in lay["config"].items() if v not in (None, {}, [])}
    console.print(f"family [bold]{lay['family']}[/]  config: {cfg}")
    t = Table(title="attention blocks")
    for col in ("layer", "block", "heads", "kv heads", "head_dim", "hidden", "tensors"):
        t.add_column(col)
    for b in lay["attention"]:
        t.add_row(
            str(b["layer"]),
            b["block"],
            str(b["heads"]),
            str(b["kv_heads"]),
            str(b["head_dim"]),
            str(b["hidden"]),
            ", ".join(b["tensors"]),
        )
    console.print(t)
    if lay["routers"]:
        t = Table(title="MoE routers")
        for col in ("layer", "experts", "routing", "tensors"):
            t.add_column(col)
        for r in lay["routers"]:
            t.add_row(str(r["layer"]), str(r["experts"]), r["routing"], ", ".join(r["tensors"]))
        console.print(t)
    if lay.get("projections"):
        outs = lay["projections"]
        console.print(
            f"output projections (step size only): {len(outs)} layer(s), e.g. {', '.join(outs[0]['tensors'])}"
        )
    for n in lay.get("notes", []):
        console.print(f"note: {n}")
    for tinfo in info.get("tensors", []):
        console.print(f"  {tinfo['name']}  {tinfo['shape']}  {tinfo['dtype']}  ({tinfo['file']})")
