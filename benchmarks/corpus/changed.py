"""The runs whose verdict two judgements of the same runs disagree on.

    python benchmarks/corpus/score.py --runs /work/corpus/final --out DIR --set rise=0   # DIR/eval-rise=0.json
    python benchmarks/corpus/score.py --runs /work/corpus/final --out DIR                # DIR/eval.json
    python benchmarks/corpus/changed.py DIR/eval-rise=0.json DIR/eval.json

Reads two ``eval.json`` files that ``score.py`` wrote and prints, per run whose verdict, decision
path, earliest step, detection, false alarm or class differs, both readings, then a count. This
is how "no other verdict changed" is checked when a rule is added.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FIELDS = ("verdict", "decision", "earliest_step", "detected", "false_alarm", "class_right")


def changed(before: list[dict], after: list[dict]) -> list[tuple[str, dict, dict]]:
    """(run, before row, after row) for every run whose ``FIELDS`` differ, or that only one has."""
    a = {r["run"]: r for r in before}
    b = {r["run"]: r for r in after}
    return [
        (run, a.get(run, {}), b.get(run, {}))
        for run in sorted(set(a) | set(b))
        if any(a.get(run, {}).get(f) != b.get(run, {}).get(f) for f in FIELDS)
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    rows = [json.loads(p.read_text())["rows"] for p in (args.before, args.after)]
    diff = changed(*rows)
    for run, x, y in diff:
        truth = y.get("truth", x.get("truth"))
        print(f"{run} (truth {truth}, onset {x.get('onset')}, divergence {x.get('divergence')})")
        print("  before: " + ", ".join(f"{f} {x.get(f)}" for f in FIELDS))
        print("  after:  " + ", ".join(f"{f} {y.get(f)}" for f in FIELDS))
    print(
        f"{len(diff)} of {len(set(r['run'] for r in rows[0]) | set(r['run'] for r in rows[1]))} runs changed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
