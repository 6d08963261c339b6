"""A plain PyTorch training loop, as nanoGPT- or torchtitan-style scripts write it.

Layout of ``RUN``::

    config.json                      the model's HF config (``model.config.save_pretrained(RUN)``)
    metrics.jsonl                    {"step", "loss", "grad_norm", "lr"} per step (null where not finite)
    step_N/model.safetensors         storage "default": the model's state dict every ``save_every`` steps
    ckpt/step-N.pt                   storage "torch": torch.save({"model", "optimizer", "step", "lr"})
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from ckptscan.store.timeline import atomic_write

from .common import (
    BatchStream,
    RunSpec,
    StepRecord,
    build_model,
    build_optimizer,
    build_scheduler,
    lm_loss,
    set_step_faults,
    write_truth,
)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _save(run: Path, spec: RunSpec, step: int, model, opt, lr: float) -> str:
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if spec.storage == "torch":
        path = run / "ckpt" / f"step-{step}.pt"
        path.parent.mkdir(exist_ok=True)
        blob = {"model": sd, "optimizer": opt.state_dict(), "step": step, "lr": lr}
        atomic_write(path, writer=lambda tmp: torch.save(blob, tmp))
    else:
        path = run / f"step_{step}" / "model.safetensors"
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, writer=lambda tmp: save_file(sd, str(tmp), metadata={"format": "pt"}))
    return path.relative_to(run).as_posix()


def train(run: Path, spec: RunSpec) -> dict:
    model = build_model(spec)
    model.config.save_pretrained(run)
    opt = build_optimizer(model, spec)
    sched = build_scheduler(opt, spec)
    rec = StepRecord(spec)
    checkpoints = []
    model.train()
    with open(run / "metrics.jsonl", "w") as log:
        for step, batch in enumerate(BatchStream(spec), start=1):
            set_step_faults(step, spec)
            lr = sched.get_last_lr()[0]
            loss, ce = lm_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
            opt.step()
            sched.step()
            ce_v = ce.item()
            rec.add(step, ce_v)
            rec_line = {"step": step, "loss": _finite(ce_v), "grad_norm": _finite(gnorm), "lr": lr}
            log.write(json.dumps(rec_line) + "\n")
            if step % spec.save_every == 0:
                log.flush()
                checkpoints.append(_save(run, spec, step, model, opt, lr))
            if rec.should_stop(step):
                break
    return write_truth(run, spec, rec, checkpoints, {"log": "metrics.jsonl"})
