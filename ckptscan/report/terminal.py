"""Terminal report (rich): the verdict first, then the evidence, then what was skipped."""

from __future__ import annotations

from rich.table import Table


def _fmt_step(s):
    return "-" if s is None else str(s)


def print_result(result, console, quiet: bool = False) -> None:
    s = result.summary
    v = s["verdict"]
    ck = s["checkpoints"]
    if v["anomalous"]:
        head = (f"[bold red]ANOMALOUS[/]: {v['fault_type']} (confidence {v['confidence']:.2f}), "
                f"earliest anomalous step {_fmt_step(v['earliest_step'])}")
    else:
        head = "[bold green]HEALTHY[/]: no sustained anomaly in the monitors"
    console.print(head)
    if quiet:
        return
    loss = s.get("loss", {})
    console.print(
        f"run {s['run']}  |  {ck['analyzed']} checkpoints analysed ({ck.get('reused', 0)} reused), "
        f"{len(ck['skipped'])} skipped  |  layout {(s.get('layout') or {}).get('family', '?')}"
    )
    console.print(
        f"loss divergence step {_fmt_step(loss.get('divergence_step'))}  |  lead time {_fmt_step(s.get('lead_time_steps'))} steps"
        f"  |  log-only detector alarm {_fmt_step(loss.get('log_only_alarm_step'))}"
        f" (lead {_fmt_step(s.get('log_only_lead_time_steps'))})"
    )
    ev = v.get("evidence") or []
    if ev:
        t = Table(title="evidence (first alarms)", show_lines=False)
        for col in ("monitor", "layer", "head", "first alarm step", "score"):
            t.add_column(col)
        for e in ev[:15]:
            score = e.get("score")
            t.add_row(str(e.get("monitor", "")), _fmt_step(e.get("layer")), _fmt_step(e.get("head")),
                      _fmt_step(e.get("first_alarm_step", e.get("step"))), "-" if score is None else f"{score:.3g}")
        console.print(t)
    for f in s.get("findings", [])[:10]:
        console.print(f"[red]finding[/]: {f['kind']} at step {f['step']} layer {f['layer']}: "
                      f"{f['nonfinite']} NaN/Inf values in {', '.join(f['tensors'])}")
    if ck["skipped"]:
        console.print(f"[yellow]skipped ({len(ck['skipped'])})[/]:")
        for sk in ck["skipped"][:20]:
            console.print(f"  {sk['path']}: {sk['reason']}")
        if len(ck["skipped"]) > 20:
            console.print(f"  ... and {len(ck['skipped']) - 20} more (see summary.json)")
    console.print(f"results: {s['out']}")


def print_inspect(info: dict, console) -> None:
    lay = info["layout"]
    console.print(f"[bold]{info['path']}[/]  format {info['format']}, {info['n_tensors']} tensors, dtypes {', '.join(info['dtypes'])}")
    cfg = {k: v for k, v in lay["config"].items() if v not in (None, {}, [])}
    console.print(f"family [bold]{lay['family']}[/]  config: {cfg}")
    t = Table(title="attention blocks")
    for col in ("layer", "block", "heads", "kv heads", "head_dim", "hidden", "tensors"):
        t.add_column(col)
    for b in lay["attention"]:
        t.add_row(str(b["layer"]), b["block"], str(b["heads"]), str(b["kv_heads"]), str(b["head_dim"]), str(b["hidden"]),
                  ", ".join(b["tensors"]))
    console.print(t)
    if lay["routers"]:
        t = Table(title="MoE routers")
        for col in ("layer", "experts", "routing", "tensors"):
            t.add_column(col)
        for r in lay["routers"]:
            t.add_row(str(r["layer"]), str(r["experts"]), r["routing"], ", ".join(r["tensors"]))
        console.print(t)
    for n in lay.get("notes", []):
        console.print(f"note: {n}")
    for tinfo in info.get("tensors", []):
        console.print(f"  {tinfo['name']}  {tinfo['shape']}  {tinfo['dtype']}  ({tinfo['file']})")
