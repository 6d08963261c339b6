"""One head's D2-entropy alarm read alone, per run: what the lone-head rule (``detect.lone_bar``)
decides on, by how many head series the model has.

    python benchmarks/corpus/lone_heads.py --ana /work/corpus-ana/holdout53 /work/corpus-ana/holdout54

For every analysed run with an ``eval.json`` row beside it (``score.py`` writes both), the
per-head structure alarms the run's detection raises with the lone-head rule off (``z_lone`` 0,
``lone_growth`` 0), less those with another head's alarm triggered within ``Params.persist`` points:
the alarms the rule judges.  Per head-series count (``Detection.head_series``: layers x query
heads): how many healthy or benign runs and head series were read, how many such alarms they raised
and their peaks, and how many clear the current bar; for fault runs' alarms at or after their onset,
how many there were, how many reach ``Params.z_lone`` (the bar of the models of 8 series) and how
many clear the current bar.  Lists every healthy or benign one.  Reads only the stored timelines.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import margin_cli  # noqa: E402 -- after the repository root is on sys.path


def lone_alarms(timeline) -> tuple[int, list]:
    """(the model's head series, the per-head structure alarms read alone with the rule off)."""
    from ckptscan.judge import detect

    p = detect.Params()
    found = detect.run_detection(timeline, dataclasses.replace(p, z_lone=0.0, lone_growth=0.0))
    return found.head_series, detect.lone_heads(found.alarms, p.persist)


def main(argv=None) -> int:
    args = margin_cli.parser(__doc__).parse_args(argv)
    from ckptscan.api import load_result
    from ckptscan.judge import detect

    runs: dict[int, int] = defaultdict(int)
    clean: dict[int, list[tuple[float, str, int, int, int]]] = defaultdict(list)
    fault: dict[int, list[float]] = defaultdict(list)
    for root in args.ana:
        for row in json.loads((root / args.eval).read_text())["rows"]:
            if row.get("verdict") == "error":
                continue
            series, lone = lone_alarms(load_result(root / row["run"]).timeline)
            if row["truth"] == "healthy":
                runs[series] += 1
                clean[series] += [(a.score, row["run"], a.layer, a.head, a.trigger_step) for a in lone]
            elif row.get("onset") is not None:
                fault[series] += [a.score for a in lone if a.trigger_step >= row["onset"]]
    print("series  healthy/benign runs  series read  lone alarms  over the bar  peaks")
    print("        | fault runs' alarms at/after their onset: all, reaching z_lone, over the bar")
    for n in sorted(set(runs) | set(fault)):
        bar = detect.lone_bar(detect.Params(), n)
        peaks = sorted((c[0] for c in clean[n]), reverse=True)
        over = sum(x >= bar for x in peaks)
        shown = " ".join(f"{x:.2f}" for x in peaks) or "-"
        f_over = sum(x >= bar for x in fault[n])
        f_base = sum(x >= detect.Params().z_lone for x in fault[n])
        print(
            f"{n:6d}  {runs[n]:19d}  {runs[n] * n:11d}  {len(peaks):11d}  {over:12d}  {shown} (bar {bar:.2f})"
            f" | {len(fault[n])}, {f_base}, {f_over}"
        )
    for n in sorted(clean):
        for score, run, layer, head, step in sorted(clean[n], reverse=True):
            print(f"  {n} series: {run} layer {layer} head {head} from step {step}: z {score:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
