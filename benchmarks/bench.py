"""Weight-side speed and memory benchmark at real model geometries (not part of the test suite).

    python benchmarks/bench.py --geometry llama-3.2-1b              # pair timing vs I/O floor vs naive
    python benchmarks/bench.py --geometry llama-3.2-1b --memory 2,10,50   # peak RSS vs checkpoints
    python benchmarks/bench.py --geometry llama-3-8b --json out.json

It writes synthetic bf16 checkpoints (HF llama names: only the attention q/k/v/o projections, which
is what the weight-side monitors read; the MLP would only add bytes never read) with small
step-to-step updates into a scratch folder (default: a temp dir, removed afterwards), then measures,
side by side, on a warm page cache:

1. the I/O floor: read the q/k tensors ckptscan needs (memory-mapped) and convert them to float32;
2. ckptscan's weight-side analysis (``ckptscan.analyze``) of the same checkpoints;
3. the naive reference: form M_j and D2 (d x d, float64) and take their full SVD, on a sample of
   heads, extrapolated to all heads and layers;
   and a compute bound: the float64 matrix-product flops the low-rank route needs at this machine's
   measured GEMM rate, plus its measured eigensolve time (``compute_bound``);
4. peak RSS of a fresh process running the analysis, against the number of checkpoints.

Prints ratios, not only seconds, and writes a JSON result with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

GEOMETRIES = {
    # name: layers, hidden, heads, kv heads, head_dim
    "llama-3.2-1b": (16, 2048, 32, 8, 64),
    "llama-3-8b": (32, 4096, 32, 8, 128),
    "tiny": (2, 256, 8, 2, 32),
}


def write_run(
    root: Path,
    geometry: str,
    n: int,
    seed: int = 0,
    rel_update: float = 1e-3,
    replay: tuple[int, int] | None = None,
) -> Path:
    L, d, H, G, h = GEOMETRIES[geometry]
    g = torch.Generator().manual_seed(seed)
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": d,
        "num_hidden_layers": L,
        "num_attention_heads": H,
        "num_key_value_heads": G,
        "head_dim": h,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(cfg))
    base = {}
    for i in range(L):
        p = f"model.layers.{i}.self_attn."
        base[p + "q_proj.weight"] = torch.randn(H * h, d, generator=g) * d**-0.5
        base[p + "k_proj.weight"] = torch.randn(G * h, d, generator=g) * d**-0.5
        base[p + "v_proj.weight"] = torch.randn(G * h, d, generator=g) * d**-0.5
        base[p + "o_proj.weight"] = torch.randn(d, H * h, generator=g) * d**-0.5
    for step in range(n):
        folder = root / f"checkpoint-{(step + 1) * 100}"
        folder.mkdir()
        save_file({k: v.to(torch.bfloat16) for k, v in base.items()}, folder / "model.safetensors")
        (folder / "config.json").write_text(json.dumps(cfg))
        if replay is not None:  # a fixed replay batch: same tokens, slowly moving activations
            from ckptscan.record import write_replay

            b, t = replay
            gx = torch.Generator().manual_seed(seed + 1)
            acts = {(i, "attn_in"): torch.randn(b, t, d, generator=gx) + step * 1e-3 for i in range(L)}
            write_replay(
                folder / "replay.h5",
                (step + 1) * 100,
                acts,
                input_ids=torch.zeros(b, t, dtype=torch.long),
                store_dtype="bfloat16",
            )
        for v in base.values():
            v.add_(torch.randn(v.shape, generator=g) * (rel_update * d**-0.5))
    return root


def io_floor(run: Path) -> float:
    """Seconds to read every q/k tensor of every checkpoint (mmap) and convert it to float32."""
    from ckptscan.readers import open_checkpoint

    t = time.perf_counter()
    for ck in sorted(p for p in run.iterdir() if p.is_dir()):
        with open_checkpoint(ck) as src:
            for name in src.infos():
                if name.endswith(("q_proj.weight", "k_proj.weight")):
                    src.read(name).to(torch.float32)
    return time.perf_counter() - t


def analysis(run: Path, out: Path, device: str, replay: bool = False) -> float:
    from ckptscan import analyze

    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    analyze(run, out_dir=out, device=device, replay=replay, command=["bench"])
    return time.perf_counter() - t


def naive(run: Path, heads: int = 2) -> float:
    """Seconds per head for M_j and D2 via full SVD of the d x d matrices (float64)."""
    from ckptscan.readers import open_checkpoint

    cks = sorted(p for p in run.iterdir() if p.is_dir())[:2]
    with open_checkpoint(cks[0]) as a, open_checkpoint(cks[1]) as b:
        n = "model.layers.0.self_attn."
        q0, k0 = a.read(n + "q_proj.weight").double(), a.read(n + "k_proj.weight").double()
        q1, k1 = b.read(n + "q_proj.weight").double(), b.read(n + "k_proj.weight").double()
    cfg = json.loads((run / "config.json").read_text())
    h = cfg["head_dim"]
    grp = cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    t = time.perf_counter()
    for j in range(heads):
        g = j // grp
        wq0, wk0 = q0[j * h : (j + 1) * h].numpy(), k0[g * h : (g + 1) * h].numpy()
        dq = q1[j * h : (j + 1) * h].numpy() - wq0
        dk = k1[g * h : (g + 1) * h].numpy() - wk0
        np.linalg.svd(wq0.T @ wk0, compute_uv=False)  # M_j at t-1 (and t: same cost, counted once)
        np.linalg.svd(dq.T @ wk0 + wq0.T @ dk, compute_uv=False)  # D2
    return (time.perf_counter() - t) / heads


def _best(fn, n: int = 3) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def compute_bound(geometry: str, n_ckpt: int, device: str) -> dict:
    """A lower bound on the weight-side analysis from this machine's own speed on the same shapes.

    Counts the float64 matrix-product flops the low-rank route cannot avoid (Gram and cross blocks
    over d, the 2h x 2h / h x h core products), divides by the measured float64 batched-GEMM rate on
    the [H, h, d] blocks, and adds the measured time of the batched eigensolves (as the
    analysis runs them).  Reading, conversion, finiteness checks and Python are not counted."""
    L, d, H, G, h = GEOMETRIES[geometry]
    dev = torch.device(device)
    x64 = torch.randn(H, h, d, dtype=torch.float64, device=dev)
    x32 = x64.float()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gemm_flop = 2 * H * h * h * d
    rate64 = gemm_flop / _best(lambda: (x64 @ x64.mT, sync()))
    rate32 = gemm_flop / _best(lambda: (x32 @ x32.mT, sync()))
    pairs = n_ckpt - 1
    products = L * (
        2 * (H + G) * h * h * d  # G(W) of the first checkpoint (later ones are carried)
        + pairs * 4 * (H + G) * h * h * d
    )  # G(dW) and C = dW W^T, queries and keys
    cores = L * (pairs * H * 2 * 2 * (2 * h) ** 3 + n_ckpt * H * 2 * 2 * h**3)  # F^T G F
    a = torch.randn(H, 2 * h, 2 * h, dtype=torch.float64, device=dev)
    a = a @ a.mT
    b = a[:, :h, :h].contiguous()
    eig = L * (
        pairs * _best(lambda: (torch.linalg.eigvalsh(a), sync()))
        + n_ckpt * _best(lambda: (torch.linalg.eigvalsh(b), sync()))
    )
    bound = (products + cores) / rate64 + eig
    return {
        "gemm_f64_gflops": round(rate64 / 1e9, 1),
        "gemm_f32_gflops": round(rate32 / 1e9, 1),
        "matmul_gflop": round((products + cores) / 1e9, 2),
        "eigensolve_s": round(eig, 4),
        "compute_bound_s": round(bound, 4),
    }


# VmHWM, not ru_maxrss: on Linux ru_maxrss survives exec, so a child would report the forking
# benchmark's own peak (it holds the synthetic weights it wrote).
PEAK_SNIPPET = """
import sys
from ckptscan import analyze
analyze(sys.argv[1], out_dir=sys.argv[2], device=sys.argv[3], replay=False, command=["bench"])
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def peak_rss_mb(run: Path, out: Path, device: str, env: dict | None = None) -> float:
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(
        [sys.executable, "-c", PEAK_SNIPPET, str(run), str(out), device],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return int(r.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="llama-3.2-1b")
    ap.add_argument(
        "--checkpoints", type=int, default=2, help="checkpoints for the timing run (default: a pair)"
    )
    ap.add_argument(
        "--memory", default="", help="comma-separated checkpoint counts for the peak-RSS sweep, e.g. 2,10,50"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--naive-heads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scratch", type=Path, default=None, help="where to write the synthetic checkpoints")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--peak-env",
        default="",
        metavar="K=V[,K=V]",
        help="environment for the peak-RSS processes, e.g. MALLOC_ARENA_MAX=1,MALLOC_TRIM_THRESHOLD_=0",
    )
    ap.add_argument(
        "--replay",
        default="",
        metavar="BxT",
        help="also time the activation side with a replay batch, e.g. 8x512 (written in bf16)",
    )
    args = ap.parse_args()

    L, d, H, G, h = GEOMETRIES[args.geometry]
    scratch = Path(tempfile.mkdtemp(prefix="ckptscan-bench-", dir=args.scratch))
    try:
        run = write_run(scratch / "run", args.geometry, args.checkpoints)
        out = scratch / "out"
        io_floor(run)  # warm the page cache
        floor = min(io_floor(run) for _ in range(args.repeat))
        ana = min(analysis(run, out, args.device) for _ in range(args.repeat))
        per_head = naive(run, args.naive_heads)
        bound = compute_bound(args.geometry, args.checkpoints, args.device)
        naive_total = (
            per_head * H * L * (args.checkpoints - 1) + per_head / 2 * H * L
        )  # D2 per pair, M per ckpt
        result = {
            "geometry": args.geometry,
            "layers": L,
            "hidden": d,
            "heads": H,
            "kv_heads": G,
            "head_dim": h,
            "checkpoints": args.checkpoints,
            "device": args.device,
            "io_floor_s": round(floor, 4),
            "analysis_s": round(ana, 4),
            "analysis_per_checkpoint_s": round(ana / args.checkpoints, 4),
            "analysis_over_floor": round(ana / floor, 2),
            "naive_per_head_s": round(per_head, 4),
            "naive_extrapolated_s": round(naive_total, 1),
            "speedup_over_naive": round(naive_total / ana, 1),
            **bound,
            "compute_bound_over_floor": round(bound["compute_bound_s"] / floor, 2),
            "analysis_over_compute_bound": round(ana / bound["compute_bound_s"], 2),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        }
        if args.replay:
            b, t = (int(x) for x in args.replay.lower().split("x"))
            rrun = write_run(scratch / "replay-run", args.geometry, args.checkpoints, replay=(b, t))
            with_replay = analysis(rrun, scratch / "replay-out", args.device, replay=True)
            weights_only = analysis(rrun, scratch / "replay-out2", args.device, replay=False)
            result.update(
                {
                    "replay_batch": [b, t],
                    "analysis_with_replay_s": round(with_replay, 3),
                    "activation_side_s": round(with_replay - weights_only, 3),
                    "activation_side_per_checkpoint_s": round(
                        (with_replay - weights_only) / args.checkpoints, 3
                    ),
                }
            )
            shutil.rmtree(rrun)
        if args.memory:
            peak_env = dict(kv.split("=", 1) for kv in args.peak_env.split(",") if kv)
            sweep = {}
            for n in (int(x) for x in args.memory.split(",")):
                mrun = write_run(scratch / f"mem{n}", args.geometry, n)
                sweep[n] = round(peak_rss_mb(mrun, scratch / f"memout{n}", args.device, peak_env), 1)
                shutil.rmtree(mrun)
            result["peak_rss_mb_by_checkpoints"] = sweep
            if peak_env:
                result["peak_env"] = peak_env
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
