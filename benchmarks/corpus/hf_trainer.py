"""Hugging Face ``transformers.Trainer`` runs: the Trainer's own output tree.

Layout of ``RUN`` (Trainer defaults)::

    checkpoint-N/  config.json  generation_config.json  model.safetensors  trainer_state.json
                   training_args.bin   [+ optimizer.pt  scheduler.pt  rng_state.pth  with storage "full"]

``trainer_state.json`` carries ``log_history`` (loss, grad_norm, learning_rate per step:
``logging_steps=1``).  The corpus' optimizer and ``LambdaLR`` go in through ``optimizers=``, so the LR
fault shapes apply; a callback switches the attention fault from ``state.global_step``.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

from .common import (
    BATCH_SIZE,
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


class _CorpusTrainer(Trainer):
    """A Trainer whose loss is the corpus' next-byte loss (+ router aux loss), recorded per step."""

    def __init__(self, *args, record: StepRecord, **kwargs):
        super().__init__(*args, **kwargs)
        self.record = record

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, ce = lm_loss(model, inputs["input_ids"])
        self.record.add(self.state.global_step + 1, ce.item())
        return loss


class _FaultSwitch(TrainerCallback):
    def __init__(self, spec: RunSpec, record: StepRecord):
        self.spec, self.record = spec, record

    def on_step_begin(self, args, state, control, **kwargs):
        set_step_faults(state.global_step + 1, self.spec)

    def on_step_end(self, args, state, control, **kwargs):
        if self.record.should_stop(state.global_step):
            control.should_training_stop = True


def train(run: Path, spec: RunSpec) -> dict:
    model = build_model(spec)
    opt = build_optimizer(model, spec)
    sched = build_scheduler(opt, spec)
    rec = StepRecord(spec)
    args = TrainingArguments(
        output_dir=str(run),
        max_steps=spec.steps,
        per_device_train_batch_size=BATCH_SIZE,
        save_strategy="steps",
        save_steps=spec.save_every,
        save_only_model=spec.storage != "full",
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        seed=spec.seed,
        max_grad_norm=1.0,
        dataloader_pin_memory=False,
        disable_tqdm=True,
        log_level="error",
    )
    trainer = _CorpusTrainer(
        model=model,
        args=args,
        train_dataset=BatchStream(spec, rows=True),
        optimizers=(opt, sched),
        callbacks=[_FaultSwitch(spec, rec)],
        record=rec,
    )
    trainer.remove_callback(PrinterCallback)  # the log goes to trainer_state.json, not to stdout
    hf_logging.disable_progress_bar()
    trainer.train()
    checkpoints = sorted(
        (p for p in run.iterdir() if p.name.startswith("checkpoint-")),
        key=lambda p: int(p.name.split("-")[1]),
    )
    return write_truth(
        run, spec, rec, [p.name for p in checkpoints], {"log": "checkpoint-N/trainer_state.json"}
    )
