"""Tiny training runs written by the real frameworks (transformers Trainer, accelerate, Lightning,
torch.distributed.checkpoint), exactly as each leaves its default output tree.

One tiny LLaMA (hidden 32, 2 layers, 4 query heads, 2 kv heads), a handful of steps on random tokens,
one CPU thread.  Each writer imports its library lazily: tests ``importorskip`` it first.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

HEADS, KV_HEADS, HIDDEN, LAYERS, VOCAB = 4, 2, 32, 2, 64


def llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(cfg)


def batches(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (4, 16), generator=g) for _ in range(n)]


def hf_trainer_run(root: Path, steps: int = 6, save_steps: int = 2, report_to: str = "none") -> Path:
    """``Trainer.train()`` then ``save_state()``: checkpoint-N folders and the root trainer_state.json
    whose last log_history record is the end-of-training summary."""
    from transformers import Trainer, TrainingArguments

    data = [{"input_ids": b[0], "labels": b[0]} for b in batches(steps * 4)]
    args = TrainingArguments(
        output_dir=str(root),
        max_steps=steps,
        save_steps=save_steps,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to=report_to,
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
    )
    trainer = Trainer(model=llama(), args=args, train_dataset=data)
    trainer.train()
    trainer.save_state()
    return root


def accelerate_run(
    root: Path, steps: int = 8, every: int = 2, optimizer: str = "adamw", tensorboard: bool = True
) -> Path:
    """``save_state()`` with automatic naming (checkpoints/checkpoint_<i>) and, when asked, the
    TensorBoard tracker (<root>/run/events...)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import ProjectConfiguration

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    acc = Accelerator(
        cpu=True,
        log_with="tensorboard" if tensorboard else None,
        project_config=ProjectConfiguration(project_dir=str(root), automatic_checkpoint_naming=True),
    )
    if tensorboard:
        acc.init_trackers("run")
    model = llama()
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, opt = acc.prepare(model, opt)
    else:  # plain SGD keeps no per-parameter state: no step recorded anywhere
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        model, opt = acc.prepare(model, opt)
    for step, ids in enumerate(batches(steps), 1):
        loss = model(input_ids=ids, labels=ids).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        acc.log({"train_loss": loss.item()}, step=step)
        if step % every == 0:
            acc.save_state()
    acc.end_training()
    return root


def lightning_run(
    root: Path,
    steps: int = 6,
    every: int = 2,
    csv: bool = True,
    save_last: bool = False,
    hparams: dict | None = None,
) -> Path:
    """``Trainer(default_root_dir=root).fit()``: a new lightning_logs/version_N per call, with
    ``epoch=E-step=N.ckpt`` every ``every`` steps and metrics.csv (CSVLogger) or TensorBoard events."""
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self, **hp):
            super().__init__()
            self.save_hyperparameters(hp)
            self.model = llama()

        def training_step(self, batch, i):
            loss = self.model(input_ids=batch, labels=batch).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.cat(batches(steps)), batch_size=4)

    logger = L.pytorch.loggers.CSVLogger(str(root), name="lightning_logs") if csv else None
    ckpt = L.pytorch.callbacks.ModelCheckpoint(every_n_train_steps=every, save_top_k=-1, save_last=save_last)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = L.Trainer(
            default_root_dir=str(root),
            max_steps=steps,
            accelerator="cpu",
            log_every_n_steps=1,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[ckpt],
            **({"logger": logger} if logger else {}),
        )
        trainer.fit(Module(**(hparams or {})))
    return root


def torchtitan_run(root: Path, steps=(10, 20, 30)) -> Path:
    """torchtitan's tree rebuilt with DCP itself: <dump>/checkpoint/step-N/ holding the model's
    state dict flattened to the top level (torchtitan's names) and ``train_state.step``, and the
    TensorBoard log <dump>/tb/<time>/ with torchtitan's tags."""
    import torch.distributed.checkpoint as dcp
    from torch.utils.tensorboard import SummaryWriter

    g = torch.Generator().manual_seed(0)
    h = HIDDEN // HEADS
    sd = {}
    for i in range(LAYERS):
        sd[f"layers.{i}.attention.wq.weight"] = torch.randn(HEADS * h, HIDDEN, generator=g)
        sd[f"layers.{i}.attention.wk.weight"] = torch.randn(KV_HEADS * h, HIDDEN, generator=g)
        sd[f"layers.{i}.attention.wv.weight"] = torch.randn(KV_HEADS * h, HIDDEN, generator=g)
    for step in steps:
        sd = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in sd.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(
                {**sd, "train_state": {"step": torch.tensor(step, dtype=torch.int32)}},
                checkpoint_id=str(root / "checkpoint" / f"step-{step}"),
                no_dist=True,
            )
    writer = SummaryWriter(str(root / "tb" / "20260101-0000"))
    for step in range(1, steps[-1] + 1):
        writer.add_scalar("loss_metrics/global_avg_loss", 4.0 - 0.01 * step, step)
        writer.add_scalar("grad_norm", 1.0, step)
    writer.close()
    return root


def write_config(folder: Path) -> Path:
    """The tiny model's HF config.json, for runs whose checkpoints carry none."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = llama().config.to_dict()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"
