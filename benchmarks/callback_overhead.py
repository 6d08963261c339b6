"""Per-call cost of the in-loop monitor (``ckptscan.callbacks.Monitor.step`` at a computed step).

A model with the q/k projections of a LLaMA-style model at the given geometry (default: 1B-class,
16 layers, hidden 2048, 16 query heads, 16 kv heads, head_dim 128), random weights, no training:
between calls every weight moves by a small random step (not timed), as an optimizer step would.
The first call has no previous point (single-point monitors only); every later call computes the
increment monitors too, which is the steady state.  A call includes writing the point's part file.

    python benchmarks/callback_overhead.py [--device cpu|cuda] [--calls 5] [--layers 16] ...

Prints one JSON object: the geometry, the device and threads, the first call, each steady call and
their median (seconds), and the bytes the monitor keeps between calls (the q/k snapshot).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ckptscan.callbacks import Monitor


def model(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, device: str) -> torch.nn.Module:
    root = torch.nn.Module()
    root.model = torch.nn.Module()
    root.model.layers = torch.nn.ModuleList()
    for _ in range(layers):
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        layer.self_attn.q_proj = torch.nn.Linear(hidden, heads * head_dim, bias=False, device=device)
        layer.self_attn.k_proj = torch.nn.Linear(hidden, kv_heads * head_dim, bias=False, device=device)
        root.model.layers.append(layer)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=5, help="steady-state calls (after the first)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    a = ap.parse_args()
    torch.manual_seed(0)
    m = model(a.layers, a.hidden, a.heads, a.kv_heads, a.head_dim, a.device)
    config = {
        "model_type": "llama",
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
    }
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        mon = Monitor(m, Path(tmp) / "store", every=1, detect=False, config=config)
        times = []
        for step in range(1, a.calls + 2):
            with torch.no_grad():  # an optimizer step's worth of change (not timed)
                for p in m.parameters():
                    p.add_(torch.randn_like(p), alpha=1e-4)
            sync()
            t0 = time.perf_counter()
            mon.step(step)
            sync()
            times.append(time.perf_counter() - t0)
        kept = sum(
            t.numel() * t.element_size() for pair in mon._prev.kept.values() for t in pair if t is not None
        )
        t0 = time.perf_counter()
        mon.close()  # one detection pass over the points (assemble, judge, write summary)
        detect_s = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "geometry": {
                    "layers": a.layers,
                    "hidden": a.hidden,
                    "heads": a.heads,
                    "kv_heads": a.kv_heads,
                    "head_dim": a.head_dim,
                },
                "device": a.device,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "first_call_s": round(times[0], 3),
                "steady_calls_s": [round(t, 3) for t in times[1:]],
                "steady_median_s": round(statistics.median(times[1:]), 3),
                "snapshot_bytes": kept,
                "detection_pass_s": round(detect_s, 3),
                "points": len(times),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
