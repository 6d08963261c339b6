"""``ckptscan drill``: the click command (the lead registers it with ``main.add_command(drill)``).

Also runnable on its own: ``python -m ckptscan.drills ...`` or ``python -m ckptscan.drills.cli ...``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .naming import NAMINGS
from .train import FAULTS, run_drill
from .writer import FOLDER_STYLES

_STYLE_ALIASES = {
    "checkpoint-{step}": "checkpoint",
    "step-{step}": "step-",
    "step_{step}": "step_",
    "iter_{step:07d}": "iter",
    "global_step{step}": "global_step",
}


@click.command("drill")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--fault", type=click.Choice(FAULTS), default="none", show_default=True)
@click.option(
    "--onset", type=int, default=400, show_default=True, help="First step with the fault (or benign event)."
)
@click.option(
    "--severity",
    type=float,
    default=None,
    help="lowprec-attention: amplification of O's truncation error; high-lr: LR growth "
    "(natural log per 1000 steps). Default: the calibrated value (docs/drills.md).",
)
@click.option(
    "--lr-severity", type=float, default=None, help="combined: LR growth (severity is the attention part)."
)
@click.option(
    "--benign",
    type=click.Choice(["warmup-cut", "data-switch"]),
    default=None,
    help="Harmless event at onset (fault none only).",
)
@click.option("--steps", type=int, default=1500, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--naming",
    type=click.Choice(NAMINGS),
    default="mixtral",
    show_default=True,
    help="llama = dense model; mixtral / qwen2_moe = MoE model.",
)
@click.option("--n-layers", type=int, default=2, show_default=True)
@click.option("--d-model", type=int, default=64, show_default=True)
@click.option("--n-heads", type=int, default=4, show_default=True)
@click.option("--n-kv-heads", type=int, default=2, show_default=True)
@click.option("--head-dim", type=int, default=16, show_default=True)
@click.option(
    "--ffn", type=int, default=None, help="MLP width (per expert for MoE). [default: 128 dense, 32 MoE]"
)
@click.option("--n-experts", type=int, default=4, show_default=True)
@click.option("--top-k", type=int, default=2, show_default=True)
@click.option("--seq-len", type=int, default=64, show_default=True)
@click.option("--batch-size", type=int, default=8, show_default=True)
@click.option("--lr", type=float, default=3e-3, show_default=True)
@click.option("--warmup", type=int, default=100, show_default=True)
@click.option("--schedule", type=click.Choice(["cosine", "constant"]), default="cosine", show_default=True)
@click.option("--grad-clip", type=float, default=1.0, show_default=True)
@click.option(
    "--mantissa-bits",
    type=int,
    default=7,
    show_default=True,
    help="lowprec: kept mantissa bits of O (7 = bf16).",
)
@click.option("--save-every", type=int, default=100, show_default=True)
@click.option(
    "--folder-style",
    type=click.Choice(sorted(FOLDER_STYLES) + sorted(_STYLE_ALIASES)),
    default="checkpoint",
    show_default=True,
)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True)
@click.option(
    "--format", "fmt", type=click.Choice(["safetensors", "torch"]), default="safetensors", show_default=True
)
@click.option("--sharded", is_flag=True, help="Write model-0000i-of-0000N.safetensors + index.")
@click.option("--num-shards", type=int, default=2, show_default=True)
@click.option("--replay/--no-replay", default=True, show_default=True, help="Write replay.h5 per checkpoint.")
@click.option("--replay-batch", type=int, default=2, show_default=True, help="Replay batch size B.")
@click.option("--replay-seq", type=int, default=64, show_default=True, help="Replay sequence length T.")
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def drill(
    out_dir,
    fault,
    onset,
    severity,
    lr_severity,
    benign,
    steps,
    seed,
    naming,
    n_layers,
    d_model,
    n_heads,
    n_kv_heads,
    head_dim,
    ffn,
    n_experts,
    top_k,
    seq_len,
    batch_size,
    lr,
    warmup,
    schedule,
    grad_clip,
    mantissa_bits,
    save_every,
    folder_style,
    dtype,
    fmt,
    sharded,
    num_shards,
    replay,
    replay_batch,
    replay_seq,
    threads,
    quiet,
):
    """Train a tiny model on CPU with a fault injected at ONSET; write a checkpointed run to OUT_DIR."""
    if sharded and fmt == "torch":
        raise click.UsageError("--sharded applies to safetensors only")
    try:
        truth = run_drill(
            out_dir,
            fault=fault,
            onset=onset,
            severity=severity,
            lr_severity=lr_severity,
            benign=benign,
            steps=steps,
            seed=seed,
            naming=naming,
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            ffn=ffn,
            n_experts=n_experts,
            top_k=top_k,
            seq_len=seq_len,
            batch_size=batch_size,
            lr=lr,
            warmup=warmup,
            schedule=schedule,
            grad_clip=grad_clip,
            mantissa_bits=mantissa_bits,
            save_every=save_every,
            folder_style=_STYLE_ALIASES.get(folder_style, folder_style),
            dtype=dtype,
            fmt=fmt,
            shards=num_shards if sharded else 1,
            replay=replay,
            replay_batch_size=replay_batch,
            replay_seq=replay_seq,
            threads=threads,
            quiet=quiet,
        )
    except (ValueError, FileExistsError) as e:
        raise click.UsageError(str(e)) from None
    keys = ("fault", "onset_step", "divergence_step", "nan_step", "severity", "steps_run", "elapsed_s")
    click.echo(json.dumps({k: truth[k] for k in keys}))


if __name__ == "__main__":
    drill()
