"""What every training stack of the corpus shares: the run spec, model, optimizer, LR scheduler,
batches, loss, the per-step record and the ground truth (``truth.json``).

Determinism: ``torch.manual_seed(seed)`` right before the model is built (weights), a separate
``torch.Generator`` seeded with ``seed + 1`` for the batch order (as the drills), one thread.  A fault
run and its healthy twin (same seed and model) therefore start from the same weights and see the
same batches at the same steps, whichever stack trains them.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import (
    FalconConfig,
    FalconForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from ckptscan.drills.data import load_corpus, sample_batch
from ckptscan.drills.writer import write_json
from ckptscan.judge.logs import DIVERGENCE_MARGIN, EMA_BETA, divergence_step

from . import faults
from .schedules import planned_lr

FAULTS = ("none", "lowprec-attention", "high-lr", "combined")
BENIGN = (None, "warmup-cut", "data-switch", "rewarm")
FRAMEWORKS = ("hf", "plain", "lightning")
OPTIMIZERS = ("adamw", "sgd", "adafactor", "muon", "muon02", "lion")
SEQ_LEN, BATCH_SIZE = 64, 8
NAN_EXTRA_SAVES = 2  # after a non-finite loss, stop at the save at/after it plus this many more

# tiny models: vocab 256 (bytes), hidden 64, 2 layers (``RunSpec.layers``: more), 4 query heads, 2 KV heads
# (``RunSpec.heads``, ``RunSpec.kv_heads``: others), head_dim 16 (``RunSpec.head_dim``: other)
_DIMS = {
    "vocab_size": 256,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "use_cache": False,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}
_MOE = {"num_experts_per_tok": 2, "router_aux_loss_coef": 0.01, "output_router_logits": True}
MODELS = {  # name -> (model class, config class, extra config) ; MoE: 4 experts of width 32, top-2
    "llama": (LlamaForCausalLM, LlamaConfig, {"intermediate_size": 128}),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, {"intermediate_size": 128}),
    "mixtral": (MixtralForCausalLM, MixtralConfig, dict(intermediate_size=32, num_local_experts=4, **_MOE)),
    "qwen2moe": (
        Qwen2MoeForCausalLM,
        Qwen2MoeConfig,
        dict(
            intermediate_size=32,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=4,
            **_MOE,
        ),
    ),
    "olmoe": (OlmoeForCausalLM, OlmoeConfig, dict(intermediate_size=32, num_experts=4, **_MOE)),
    # fused query/key/value projections (holdout73, holdout74): Phi-3 (qkv_proj, all q rows, then k, then v;
    # grouped KV heads), GPT-NeoX (query_key_value, per head q, k, v; rotary on a quarter of each
    # head), GPT-2 (Conv1D c_attn stored [d, 3d]; learned positions, LayerNorm, gelu_new; no grouping),
    # Falcon's new decoder architecture (query_key_value per KV group); no dropout anywhere
    "phi3": (Phi3ForCausalLM, Phi3Config, dict(intermediate_size=128, resid_pdrop=0.0, embd_pdrop=0.0)),
    "gptneox": (GPTNeoXForCausalLM, GPTNeoXConfig, dict(intermediate_size=128, hidden_dropout=0.0)),
    "gpt2": (GPT2LMHeadModel, GPT2Config, dict(n_inner=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "falcon": (FalconForCausalLM, FalconConfig, dict(new_decoder_architecture=True, ffn_hidden_size=128)),
}
MOE_MODELS = ("mixtral", "qwen2moe", "olmoe")
FUSED_QKV_MODELS = ("phi3", "gptneox", "gpt2", "falcon")
UNGROUPED_MODELS = ("gpt2", "gptneox")  # a KV head per query head: their recipes' names say -H4k4


@dataclass(frozen=True)
class RunSpec:
    """One corpus run.  ``severity``: the lowprec amplification reached 1000 steps after onset;
    ``lr_fault``: ``{"shape": ..., "factor"/"growth"/"ramp_steps": ...}`` (``faults.lr_multiplier``);
    ``storage``: ``"default"``, ``"full"`` (HF: optimizer state too), ``"torch"`` (plain loop:
    ``ckpt/step-N.pt`` torch.save files instead of ``step_N/model.safetensors`` folders)."""

    framework: str
    model: str
    opt: str
    lr: float
    schedule: str
    warmup: int
    steps: int
    save_every: int
    seed: int
    betas: tuple[float, float] | None = (0.9, 0.95)
    eps: float | None = 1e-8
    wd: float = 0.1
    fault: str = "none"
    onset: int | None = None
    severity: float | None = None
    lr_fault: dict | None = field(default=None, hash=False)
    benign: str | None = None
    storage: str = "default"
    layers: int = 2  # decoder layers (``num_hidden_layers``); the recipe's name says so where not 2
    heads: int = 4  # query heads, KV heads and the width of a head (the hidden width is heads x
    kv_heads: int = 2  # head_dim: 64 at 4 x 16): the recipe's name says ``-H8k2`` (8 query heads, 2
    head_dim: int = 16  # KV heads) where not 4 and 2, ``-H16k4d8`` where a head is not 16 wide

    def __post_init__(self):
        assert self.framework in FRAMEWORKS and self.model in MODELS and self.opt in OPTIMIZERS
        assert self.fault in FAULTS and self.benign in BENIGN
        assert (self.fault in ("lowprec-attention", "combined")) == (self.severity is not None)
        assert (self.fault in ("high-lr", "combined")) == (self.lr_fault is not None)
        assert (self.fault != "none" or self.benign is not None) == (self.onset is not None)
        assert self.benign is None or self.fault == "none"
        assert self.benign != "warmup-cut" or self.warmup / 2 <= self.onset < self.warmup
        assert self.heads % self.kv_heads == 0
        assert self.model not in UNGROUPED_MODELS or self.kv_heads == self.heads, "no grouped KV heads"

    @property
    def moe(self) -> bool:
        return self.model in MOE_MODELS

    @property
    def opt_tag(self) -> str:
        if self.opt == "lion":  # lion99 (betas 0.9, 0.99), lion98b95 (0.95, 0.98)
            b1, b2 = self.betas
            return f"lion{str(b2)[2:]}" + ("" if b1 == 0.9 else f"b{str(b1)[2:]}")
        if self.opt != "adamw":
            return self.opt
        b1, b2 = self.betas
        tag = f"adamw{str(b2)[2:]}" + ("" if b1 == 0.9 else f"b{str(b1)[2:]}")
        return (
            tag
            + ("" if self.eps == 1e-8 else f"-eps{self.eps:g}")
            + ("" if self.wd == 0.1 else f"-wd{self.wd:g}")
        )

    @property
    def recipe(self) -> str:
        """Everything but the fault: a fault run and its healthy twin share it."""
        pct = round(100 * self.warmup / self.steps)
        store = "" if self.storage == "default" else f"-{self.storage}"
        depth = "" if self.layers == 2 else f"-L{self.layers}"
        width = "" if (self.heads, self.kv_heads) == (4, 2) else f"-H{self.heads}k{self.kv_heads}"
        if self.head_dim != 16:
            width = f"-H{self.heads}k{self.kv_heads}d{self.head_dim}"
        return (
            f"{self.framework}-{self.model}{depth}{width}-{self.opt_tag}-{self.schedule}-w{pct}-e{self.save_every}"
            f"-s{self.seed}{store}"
        )

    @property
    def name(self) -> str:
        if self.fault == "none":
            tail = "healthy" if self.benign is None else f"benign-{self.benign}-on{self.onset}"
        else:
            parts = []
            if self.severity is not None:
                parts.append(f"lp{self.severity:g}")
            if self.lr_fault is not None:
                lf = self.lr_fault
                factor, growth = lf.get("factor", 0), lf.get("growth", 0)
                parts.append(
                    {
                        "growth": f"growth{growth:g}",
                        "jump": f"jump{factor:g}",
                        "jump-growth": f"jump{factor:g}growth{growth:g}",
                        "ramp": f"ramp{factor:g}over{lf.get('ramp_steps', 0)}",
                    }[lf["shape"]]
                )
            tail = {"lowprec-attention": "lowprec", "high-lr": "highlr"}.get(self.fault, self.fault)
            tail = f"{tail}-{'-'.join(parts)}-on{self.onset}"
        return f"{self.recipe}-{tail}"


# --- model, optimizer, schedule ----------------------------------------------------------------------


def model_config(name: str, layers: int = 2, heads: int = 4, kv_heads: int = 2, head_dim: int = 16):
    """The tiny config: ``layers`` decoder layers of ``heads`` query heads and ``kv_heads`` KV heads
    ``head_dim`` wide; the MLPs (dense, experts) scale with the hidden width (heads x head_dim) as
    at 4 heads of 16 (64 wide)."""
    _, config_cls, extra = MODELS[name]
    scale = heads * head_dim / _DIMS["hidden_size"]
    extra = {k: round(v * scale) if k.endswith("intermediate_size") else v for k, v in extra.items()}
    dims = {
        **_DIMS,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_size": heads * head_dim,
    }
    if name == "falcon":  # Falcon names its KV heads num_kv_heads, and derives the head width
        dims["num_kv_heads"] = dims.pop("num_key_value_heads")
        del dims["head_dim"]
    if name in UNGROUPED_MODELS:  # no grouped KV heads (a KV head per query head): the config
        del dims["num_key_value_heads"]  # says nothing of them, as the real ones do not
    cfg = config_cls(**dims, **extra)
    cfg._attn_implementation = faults.ATTN_IMPL
    return cfg


def build_model(spec: RunSpec) -> torch.nn.Module:
    """The tiny transformers model, randomly initialised from ``spec.seed``, on the lowprec kernel."""
    faults.register()
    model_cls, _, _ = MODELS[spec.model]
    torch.manual_seed(spec.seed)
    return model_cls(model_config(spec.model, spec.layers, spec.heads, spec.kv_heads, spec.head_dim))


MUON02_LR = 0.02  # "muon02": the Muon LR of Keller Jordan's recipe (its own scaling), beside AdamW's
MUON_OPTS = ("muon", "muon02")


def muon_settings(spec: RunSpec) -> dict:
    """Muon's LR, scaling and weight decay for a ``muon``/``muon02`` recipe (``_muon_adamw``; the
    truth file records the same dict)."""
    if spec.opt == "muon":
        return {"lr": spec.lr, "adjust_lr_fn": "match_rms_adamw", "weight_decay": spec.wd}
    return {"lr": MUON02_LR, "adjust_lr_fn": "original", "weight_decay": 0.0}


def _closure_loss(closure):
    """An optimizer step's closure run with gradients on (``step`` runs under ``no_grad``), before
    any gradient is read; its loss, or None without one (Lightning steps with a closure)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class MuonAdamW(torch.optim.Optimizer):
    """Muon on the hidden matrices, AdamW on the rest (embeddings, LM head, norms, biases, any
    tensor that is not 2-D: transformers stores an MoE layer's experts fused, 3-D): the split that
    Muon is trained with (torch.optim.Muon takes 2-D matrices only).  One optimizer object to the
    training stacks: its ``param_groups`` are the two inner optimizers' own group dicts, Muon's
    first (so a stack that logs group 0's LR logs Muon's: 0.02 at the peak for ``muon02``), a
    scheduler that sets ``group["lr"]`` drives both, and its state dict holds both (plain tensors
    and numbers: loadable with ``weights_only=True``)."""

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], muon_kw: dict, adamw_kw: dict):
        self.muon = torch.optim.Muon(muon_groups, **muon_kw)
        self.adamw = torch.optim.AdamW(adamw_groups, **adamw_kw)
        super().__init__(self.muon.param_groups + self.adamw.param_groups, {})

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        self.muon.step()
        self.adamw.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Loading gives the inner optimizers new group dicts (Accelerate reloads the state as it
        wraps an optimizer): take those, or a scheduler would set LRs that nothing reads."""
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self.param_groups = self.muon.param_groups + self.adamw.param_groups


def _muon_adamw(model: torch.nn.Module, spec: RunSpec) -> MuonAdamW:
    """``muon``: Moonshot's recipe, Muon scaled to AdamW's update RMS (``match_rms_adamw``) at
    AdamW's LR and weight decay; ``muon02``: Keller Jordan's, Muon at LR 0.02 with its own scaling
    and no weight decay, AdamW at ``spec.lr`` for the rest.  Momentum 0.95, Nesterov, 5
    Newton-Schulz steps (torch's defaults)."""
    tables = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)]  # GPT-2's positions too
    outer = {id(model.get_output_embeddings().weight), *map(id, tables)}
    hidden = [p for p in model.parameters() if p.dim() == 2 and id(p) not in outer]
    kept = {id(p) for p in hidden}
    matrices = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in kept]
    rest = [p for p in model.parameters() if p.dim() < 2]
    adamw = [{"params": matrices, "weight_decay": spec.wd}, {"params": rest, "weight_decay": 0.0}]
    adamw_kw = dict(lr=spec.lr, betas=spec.betas, eps=spec.eps)
    return MuonAdamW([{"params": hidden}], adamw, muon_settings(spec), adamw_kw)


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2): each
    element moves by the LR against the sign of ``beta1 * m + (1 - beta1) * g`` (not at all where
    that is 0), after a decoupled weight decay (``p *= 1 - lr * wd``); the momentum ``m`` then takes
    the gradient with ``beta2``.  torch ships no Lion, and the algorithm is these few lines."""

    def __init__(
        self, params, lr: float, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0
    ):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = _closure_loss(closure)
        for group in self.param_groups:
            (b1, b2), lr = group["betas"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1.0 - lr * group["weight_decay"])
                p.add_(torch.sign(m.mul(b1).add_(p.grad, alpha=1.0 - b1)), alpha=-lr)
                m.mul_(b2).add_(p.grad, alpha=1.0 - b2)
        return loss


def build_optimizer(model: torch.nn.Module, spec: RunSpec) -> torch.optim.Optimizer:
    """AdamW / SGD (momentum 0.9) / Adafactor / Muon with AdamW (``MuonAdamW``) / Lion; weight decay
    on matrices only (biases, norms exempt)."""
    if spec.opt in MUON_OPTS:
        return _muon_adamw(model, spec)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": spec.wd}, {"params": rest, "weight_decay": 0.0}]
    if spec.opt == "adamw":
        return torch.optim.AdamW(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps)
    if spec.opt == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr, momentum=0.9)
    if spec.opt == "lion":
        return Lion(groups, lr=spec.lr, betas=spec.betas)
    return torch.optim.Adafactor(groups, lr=spec.lr)


def lr_at(step: int, spec: RunSpec) -> float:
    """The LR of optimizer step ``step`` (1-based): planned schedule times the fault's multiplier."""
    lr = planned_lr(
        step,
        peak=spec.lr,
        schedule=spec.schedule,
        warmup=spec.warmup,
        total=spec.steps,
        onset=spec.onset,
        benign=spec.benign,
    )
    return lr * faults.lr_multiplier(step, spec.onset, spec.lr_fault)


def build_scheduler(opt: torch.optim.Optimizer, spec: RunSpec) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR stepped once per optimizer step: its k-th value (0-based) is the LR of step k + 1."""
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lr_at(k + 1, spec) / spec.lr)


def set_step_faults(step: int, spec: RunSpec) -> None:
    """Switch the attention fault for the update of ``step`` (the LR fault lives in the scheduler)."""
    faults.set_lowprec(step, spec.onset, spec.severity)


def lm_loss(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(training loss, cross-entropy): next-byte CE over ``ids[:, 1:]``, plus the router's
    load-balancing loss times ``router_aux_loss_coef`` for MoE models."""
    moe = getattr(model.config, "output_router_logits", False)
    out = model(input_ids=ids[:, :-1], **({"output_router_logits": True} if moe else {}))
    vocab = out.logits.shape[-1]
    ce = torch.nn.functional.cross_entropy(out.logits.reshape(-1, vocab).float(), ids[:, 1:].reshape(-1))
    if not moe:
        return ce, ce
    return ce + model.config.router_aux_loss_coef * out.aux_loss, ce


# --- data -----------------------------------------------------------------------------------------


@functools.cache
def corpus():
    return load_corpus()


class BatchStream(torch.utils.data.IterableDataset):
    """The run's batches, [BATCH_SIZE, SEQ_LEN + 1] int64 each, one per optimizer step; from the
    stdlib test suite instead of the library sources from ``onset`` on for the data-switch event.
    ``rows=True`` yields the rows one by one (for loaders that batch by themselves)."""

    def __init__(self, spec: RunSpec, rows: bool = False):
        self.spec, self.rows = spec, rows

    def __iter__(self):
        c, spec = corpus(), self.spec
        gen = torch.Generator().manual_seed(spec.seed + 1)
        for step in range(1, spec.steps + 1):
            switched = spec.benign == "data-switch" and step >= spec.onset
            batch = sample_batch(c.switch if switched else c.main, BATCH_SIZE, SEQ_LEN, gen)
            if self.rows:
                yield from ({"input_ids": row} for row in batch)
            else:
                yield batch

    def __len__(self):
        return self.spec.steps * (BATCH_SIZE if self.rows else 1)


# --- the per-step record and the ground truth ------------------------------------------------------


class StepRecord:
    """The losses the training code itself saw (truth's divergence step is computed from these, not
    from the framework's log), and when to stop after a non-finite loss."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.steps: list[int] = []
        self.losses: list[float] = []
        self.nan_step: int | None = None
        self.stop_step: int | None = None
        self.t0 = time.perf_counter()

    def add(self, step: int, ce: float) -> None:
        self.steps.append(step)
        self.losses.append(ce)
        if self.nan_step is None and not math.isfinite(ce):
            self.nan_step = step
            every = self.spec.save_every
            self.stop_step = min(self.spec.steps, (-(-step // every) + NAN_EXTRA_SAVES) * every)

    def should_stop(self, step: int) -> bool:
        return self.stop_step is not None and step >= self.stop_step


def write_truth(run: Path, spec: RunSpec, rec: StepRecord, checkpoints: list[str], extra: dict) -> dict:
    """``run/truth.json``: what was injected, when, what happened, and the recipe."""
    model_cls, _, _ = MODELS[spec.model]
    lr_fault = spec.lr_fault or {}
    c = corpus()
    params = {
        "naming": spec.model,
        "model": model_config(
            spec.model, spec.layers, spec.heads, spec.kv_heads, spec.head_dim
        ).to_diff_dict(),
        "model_class": model_cls.__name__,
        "seq_len": SEQ_LEN,
        "batch_size": BATCH_SIZE,
        "framework": spec.framework,
        "optimizer": {
            "name": spec.opt,
            "lr": spec.lr,
            **({"betas": list(spec.betas), "eps": spec.eps} if spec.opt == "adamw" else {}),
            **({"betas": list(spec.betas)} if spec.opt == "lion" else {}),
            **({"momentum": 0.9} if spec.opt == "sgd" else {}),
            **(
                {"betas": list(spec.betas), "eps": spec.eps, "muon": muon_settings(spec)}
                if spec.opt in MUON_OPTS
                else {}
            ),
            "weight_decay": spec.wd,
        },
        "schedule": spec.schedule,
        "warmup": spec.warmup,
        "save_every": spec.save_every,
        "lr": spec.lr,
        "grad_clip": 1.0,
        "dtype": "float32",
        "storage": spec.storage,
        "attn_implementation": faults.ATTN_IMPL,
        "threads": torch.get_num_threads(),
        **extra,
    }
    truth = {
        "fault": spec.fault,
        "benign": spec.benign,
        "onset_step": spec.onset if spec.fault != "none" else None,
        "benign_step": spec.onset if spec.benign else None,
        "divergence_step": divergence_step(rec.steps, rec.losses),
        "nan_step": rec.nan_step,
        "severity": spec.severity,
        "lr_shape": lr_fault.get("shape"),
        "lr_severity": lr_fault.get("factor", lr_fault.get("growth")),
        "lr_fault": spec.lr_fault,
        "lowprec": None
        if spec.severity is None
        else {"mantissa_bits": faults.FAULT.mantissa_bits, "amplification_per_1000_steps": spec.severity},
        "seed": spec.seed,
        "steps_planned": spec.steps,
        "steps_run": rec.steps[-1] if rec.steps else 0,
        "recipe": spec.recipe,
        "checkpoints": checkpoints,
        "divergence_rule": {
            "ema_beta": EMA_BETA,
            "margin_nats": DIVERGENCE_MARGIN,
            "text": "first step where EMA(loss) > running min of EMA + margin, or loss NaN/Inf",
        },
        "final_loss": _mean_tail(rec.losses),
        "params": params,
        "spec": {**asdict(spec), "betas": list(spec.betas) if spec.betas else None},
        "data": {
            "source": "python stdlib .py sources",
            "fingerprint": c.fingerprint,
            "python": platform.python_version(),
        },
        # the CPU kernel path too: the same seeds trained with AVX2 and with AVX-512 kernels are other runs
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            # ATen's level alone does not say which MKL / oneDNN kernels ran: these variables do
            "kernel_env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
        },
        "elapsed_s": round(time.perf_counter() - rec.t0, 2),
    }
    write_json(run / "truth.json", truth)
    return truth


# environment variables that choose the CPU kernels of ATen, MKL and oneDNN (recorded where set)
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "DNNL_MAX_CPU_ISA")


def _mean_tail(losses: list[float], n: int = 50) -> float | None:
    tail = [x for x in losses[-n:] if math.isfinite(x)]
    return round(sum(tail) / len(tail), 4) if tail else None
