"""The drill training loop: train the tiny model, switch a fault on at ``onset``, write a run directory.

Public entry point: ``run_drill(out_dir, fault=..., onset=..., severity=...) -> truth`` (a dict, also
written to ``out_dir/truth.json``).  Layout of ``out_dir``::

    config.json  metrics.jsonl  truth.json
    checkpoint-100/ {config.json, model.safetensors | shards + index | pytorch_model.bin, replay.h5}
    ...

Faults (all switched on for the optimizer updates of steps >= onset; see docs/drills.md):
* ``lowprec-attention``  D = rowsum(dO * O_lowp) in the attention backward (``model.LowPrecFault``);
  the truncation error of O is amplified by ``severity * (t - onset) / 1000`` (a bias that grows);
* ``high-lr``  the learning rate grows geometrically after onset, lr *= exp(severity * (t - onset)/1000),
  as a scheduler that multiplies instead of decays would;
* ``combined``  both (``severity`` for the attention fault, ``lr_severity`` for the LR growth);
* ``none``  healthy; ``benign`` = "warmup-cut" | "data-switch" adds a harmless event at onset.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import cast

import torch

from ckptscan.judge.faults import INJECTABLE, NO_FAULT
from ckptscan.judge.logs import DIVERGENCE_MARGIN, EMA_BETA, divergence_step
from ckptscan.record import ReplayRecorder

from .data import load_corpus, replay_batch, sample_batch
from .model import LowPrecFault, MoE, TinyConfig, TinyLM
from .naming import NAMINGS, config_json, hf_state_dict
from .writer import FOLDER_STYLES, folder_name, save_weights, write_json

FAULTS = (NO_FAULT, *(f.drill_name for f in INJECTABLE))  # "none", "lowprec-attention", "high-lr", "combined"
BENIGN = (None, "warmup-cut", "data-switch")
DEFAULT_SEVERITY = {"lowprec-attention": 1000.0, "high-lr": 8.0}  # calibrated: docs/drills.md

# Divergence rule: ckptscan.judge.logs.divergence_step, the same function analyze uses (docs/detection.md).


def base_lr(
    step: int,
    *,
    lr: float,
    warmup: int,
    total: int,
    schedule: str,
    min_ratio: float,
    onset: int,
    benign: str | None,
) -> float:
    """Warm-up + cosine/constant schedule at optimizer step ``step`` (1-based).

    With ``benign="warmup-cut"`` the warm-up is planned to last ``2 * onset`` steps but is cut at
    ``onset``: the LR jumps from about half of its peak to the peak (a configuration change that real
    runs do, and that must not be mistaken for a fault).
    """
    if benign == "warmup-cut":
        if step < onset:
            return lr * step / (2 * onset)
        warmup = onset
    elif step <= warmup:
        return lr * step / max(1, warmup)
    if schedule == "constant":
        return lr
    prog = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * prog)))


def _recorder(model: TinyLM, ids: torch.Tensor) -> ReplayRecorder:
    """The library's own recorder (what a real training loop would call), pointed at the drill
    model's q projections and routers."""
    layers = model.model.decoder_layers()
    attn: dict[int, torch.nn.Module] = {i: layer.self_attn.q_proj for i, layer in enumerate(layers)}
    # with cfg.moe every layer's mlp is a MoE
    routers: dict[int, torch.nn.Module] = (
        {i: cast(MoE, layer.mlp).router for i, layer in enumerate(layers)} if model.cfg.moe else {}
    )
    return ReplayRecorder(model, ids, attn_modules=attn, router_modules=routers)


def _progress(total: int, quiet: bool):
    """A rich progress bar on a TTY, else a no-op."""
    if quiet or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    p = Progress(
        TextColumn("drill"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    return p


def run_drill(
    out_dir,
    *,
    fault: str = "none",
    onset: int = 400,
    severity: float | None = None,
    lr_severity: float | None = None,
    benign: str | None = None,
    steps: int = 1500,
    seed: int = 0,
    naming: str = "mixtral",
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    head_dim: int = 16,
    ffn: int | None = None,
    n_experts: int = 4,
    top_k: int = 2,
    seq_len: int = 64,
    batch_size: int = 8,
    lr: float = 3e-3,
    warmup: int = 100,
    schedule: str = "cosine",
    min_lr_ratio: float = 0.1,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    aux_coef: float = 0.01,
    mantissa_bits: int = 7,
    save_every: int = 100,
    folder_style: str = "checkpoint",
    dtype: str = "float32",
    fmt: str = "safetensors",
    shards: int = 1,
    replay: bool = True,
    replay_batch_size: int = 2,
    replay_seq: int = 64,
    nan_extra_saves: int = 2,
    threads: int = 1,
    quiet: bool = True,
    callback=None,
) -> dict:
    """Train a drill run into ``out_dir`` and return its ground truth (also in ``truth.json``).

    ``naming="llama"`` trains a dense model; ``"mixtral"`` / ``"qwen2_moe"`` an MoE model with
    ``n_experts`` experts (top ``top_k``).  ``ffn`` defaults to 128 (dense) or 32 (per expert).
    After the loss turns NaN/Inf the run stops ``nan_extra_saves`` saves later.
    ``callback(step, model, record)``, when given, is called after every optimizer step (``record``:
    the metrics line of that step), before that step's checkpoint is written: the hook an in-loop
    monitor (``ckptscan.callbacks``) attaches to.
    """
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
    if benign not in BENIGN:
        raise ValueError(f"unknown benign event {benign!r}; choose warmup-cut or data-switch")
    if benign and fault != "none":
        raise ValueError("a benign event is only for fault 'none'")
    if naming not in NAMINGS:
        raise ValueError(f"unknown naming {naming!r}; choose one of {', '.join(NAMINGS)}")
    if folder_style not in FOLDER_STYLES:
        raise ValueError(f"unknown folder style {folder_style!r}; choose one of {', '.join(FOLDER_STYLES)}")
    if onset < 1 or ((fault != "none" or benign) and onset > steps):
        raise ValueError(f"onset {onset} must lie in 1..{steps}")
    lowprec_on = fault in ("lowprec-attention", "combined")
    highlr_on = fault in ("high-lr", "combined")
    amp = (
        (severity if severity is not None else DEFAULT_SEVERITY["lowprec-attention"]) if lowprec_on else None
    )
    if fault == "high-lr":
        growth = severity if severity is not None else DEFAULT_SEVERITY["high-lr"]
    elif fault == "combined":
        growth = lr_severity if lr_severity is not None else DEFAULT_SEVERITY["high-lr"]
    else:
        growth = None

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "metrics.jsonl").exists() or (out / "truth.json").exists():
        raise FileExistsError(f"{out}: already holds a drill run (metrics.jsonl/truth.json); pick a new dir")

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        moe = naming != "llama"
        cfg = TinyConfig(
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            ffn=ffn or (32 if moe else 128),
            n_experts=n_experts if moe else 0,
            top_k=top_k,
            max_seq=max(seq_len, replay_seq),
        )
        torch.manual_seed(seed)
        model = TinyLM(cfg)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr,
            betas=(0.9, 0.95),
        )
        corpus = load_corpus()
        gen = torch.Generator().manual_seed(seed + 1)
        replay_ids = replay_batch(corpus, replay_batch_size, replay_seq)
        recorder = _recorder(model, replay_ids)
        fault_obj = LowPrecFault(mantissa_bits=mantissa_bits, amplification=amp or 0.0, active=False)
        if lowprec_on:
            model.set_fault(fault_obj)
        cfg_json = config_json(cfg, naming, dtype)
        write_json(out / "config.json", cfg_json)

        steps_seen, losses, checkpoints = [], [], []
        nan_step, saves_after_nan, stopped_at = None, 0, steps
        bar = _progress(steps, quiet)
        task = bar.add_task("train", total=steps, info="") if bar else None
        if bar:
            bar.start()
        with open(out / "metrics.jsonl", "w") as mf:
            for step in range(1, steps + 1):
                active = step >= onset
                fault_obj.active = lowprec_on and active
                # the bias grows as ties accumulate (docs/drills.md); amp is set whenever lowprec_on
                if fault_obj.active and amp is not None:
                    fault_obj.amplification = amp * (step - onset + 1) / 1000.0
                lr_now = base_lr(
                    step,
                    lr=lr,
                    warmup=warmup,
                    total=steps,
                    schedule=schedule,
                    min_ratio=min_lr_ratio,
                    onset=onset,
                    benign=benign,
                )
                mult = (  # growth is set whenever highlr_on
                    math.exp(growth * (step - onset) / 1000.0)
                    if (highlr_on and active and growth is not None)
                    else 1.0
                )
                lr_now *= mult
                for g in opt.param_groups:
                    g["lr"] = lr_now
                src = corpus.switch if (benign == "data-switch" and active) else corpus.main
                batch = sample_batch(src, batch_size, seq_len, gen)
                logits = model(batch[:, :-1])
                ce = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1)
                )
                aux = model.aux_loss()
                loss = ce + aux_coef * aux
                opt.zero_grad(set_to_none=True)
                loss.backward()
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                opt.step()
                ce_v, gn_v = ce.item(), gnorm.item()
                rec = {
                    "step": step,
                    "loss": ce_v if math.isfinite(ce_v) else None,
                    "grad_norm": gn_v if math.isfinite(gn_v) else None,
                    "lr": lr_now,
                }
                if moe:
                    aux_v = aux.item()
                    rec["aux_loss"] = aux_v if math.isfinite(aux_v) else None
                mf.write(json.dumps(rec) + "\n")
                if callback is not None:
                    callback(step, model, rec)
                steps_seen.append(step)
                losses.append(ce_v)
                if nan_step is None and not (math.isfinite(ce_v) and math.isfinite(gn_v)):
                    nan_step = step
                if step % save_every == 0:
                    mf.flush()
                    folder = out / folder_name(folder_style, step)
                    save_weights(folder, hf_state_dict(model, naming), fmt=fmt, dtype=dtype, shards=shards)
                    write_json(folder / "config.json", cfg_json)
                    if replay:
                        recorder.save(folder / "replay.h5", step)
                    checkpoints.append(folder.name)
                    if nan_step is not None:
                        saves_after_nan += 1
                if bar:
                    bar.update(task, advance=1, info=f"loss {ce_v:.3f} lr {lr_now:.2e}")
                if nan_step is not None and saves_after_nan > nan_extra_saves:
                    stopped_at = step
                    break
        if bar:
            bar.stop()
    finally:
        torch.set_num_threads(old_threads)

    div = divergence_step(steps_seen, losses)
    truth = {
        "fault": fault,
        "onset_step": onset,
        "divergence_step": div,
        "severity": severity if severity is not None else (amp if lowprec_on else growth),
        "seed": seed,
        "benign": benign,
        "lowprec": {"mantissa_bits": mantissa_bits, "amplification_per_1000_steps": amp}
        if lowprec_on
        else None,
        "lr_growth_per_1000_steps": growth,
        "nan_step": nan_step,
        "steps_planned": steps,
        "steps_run": stopped_at,
        "divergence_rule": {
            "ema_beta": EMA_BETA,
            "margin_nats": DIVERGENCE_MARGIN,
            "text": "first step where EMA(loss) > running min of EMA + margin, or loss NaN/Inf",
        },
        "checkpoints": checkpoints,
        "params": {
            "naming": naming,
            "model": asdict(cfg),
            "seq_len": seq_len,
            "batch_size": batch_size,
            "lr": lr,
            "warmup": warmup,
            "schedule": schedule,
            "min_lr_ratio": min_lr_ratio,
            "weight_decay": weight_decay,
            "grad_clip": grad_clip,
            "aux_coef": aux_coef,
            "save_every": save_every,
            "folder_style": folder_style,
            "dtype": dtype,
            "format": fmt,
            "shards": shards,
            "replay": replay,
            "replay_batch": [replay_batch_size, replay_seq],
            "threads": threads,
        },
        "data": {
            "source": "python stdlib .py sources",
            "fingerprint": corpus.fingerprint,
            "python": platform.python_version(),
        },
        "torch": torch.__version__,
        "elapsed_s": round(time.perf_counter() - t0, 2),
    }
    write_json(out / "truth.json", truth)
    return truth
