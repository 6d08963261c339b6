"""PyTorch Lightning runs: Lightning's own default output tree.

Layout of ``RUN``::

    config.json                                            the HF model config (model.config.save_pretrained)
    lightning_logs/version_0/metrics.csv                   CSVLogger: train_loss, grad_norm, lr-<Optimizer>
    lightning_logs/version_0/hparams.yaml
    lightning_logs/version_0/checkpoints/epoch=0-step=N.ckpt   ModelCheckpoint(every_n_train_steps=cadence)

The ``.ckpt`` files are Lightning's full checkpoints (``state_dict`` with the module's ``model.``
prefix, optimizer and scheduler state, loops, callbacks); hyper-parameters are plain types, so each
loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

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

CKPT_DIR = "lightning_logs/version_0/checkpoints"


class CorpusModule(L.LightningModule):
    def __init__(self, spec: RunSpec, record: StepRecord):
        super().__init__()
        hp = dataclasses.asdict(spec)
        hp["betas"] = list(spec.betas) if spec.betas else None
        self.save_hyperparameters(hp)
        self.spec, self.record = spec, record
        self.model = build_model(spec)

    def configure_optimizers(self):
        opt = build_optimizer(self.model, self.spec)
        sched = build_scheduler(opt, self.spec)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_train_batch_start(self, batch, batch_idx):
        set_step_faults(self.global_step + 1, self.spec)

    def training_step(self, batch, batch_idx):
        loss, ce = lm_loss(self.model, batch)
        self.record.add(self.global_step + 1, ce.item())
        self.log("train_loss", ce)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norms = [p.grad.detach().norm() for p in self.parameters() if p.grad is not None]
        self.log("grad_norm", torch.stack(norms).norm())

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.record.should_stop(self.global_step):
            self.trainer.should_stop = True


def train(run: Path, spec: RunSpec) -> dict:
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    rec = StepRecord(spec)
    module = CorpusModule(spec, rec)
    module.model.config.save_pretrained(run)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=spec.steps,
        gradient_clip_val=1.0,
        log_every_n_steps=1,
        logger=CSVLogger(run),
        default_root_dir=run,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(every_n_train_steps=spec.save_every, save_top_k=-1),
            LearningRateMonitor(logging_interval="step"),
        ],
    )
    loader = torch.utils.data.DataLoader(BatchStream(spec), batch_size=None)
    trainer.fit(module, loader)
    ckpts = sorted((run / CKPT_DIR).glob("*.ckpt"), key=lambda p: int(p.stem.rsplit("=", 1)[1]))
    return write_truth(
        run,
        spec,
        rec,
        [p.relative_to(run).as_posix() for p in ckpts],
        {"log": "lightning_logs/version_0/metrics.csv"},
    )
