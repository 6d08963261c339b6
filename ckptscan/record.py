"""Record replay activations from inside a training loop (the writer side of docs/replay.md).

At each checkpoint, ``ReplayRecorder(model, replay_ids).save(ckpt_dir / "replay.h5", step)`` runs one
``torch.no_grad()`` forward of the fixed replay batch with forward pre-hooks on every layer's Q/K/V
projection and MoE router, and writes what entered them.  The model is put in eval mode for that
forward (dropout off) and every module's own training flag is restored afterwards.

Modules are found by name (``named_modules``), with the tensor-name conventions of the layouts, or
given explicitly (``attn_modules={layer: module}``, ``router_modules={layer: module}``) for models
whose names are not recognised.  Activations are stored as float32 by default: the increment
monitors (``act.attn.dS.*``) difference the activations of consecutive checkpoints, and bf16
rounding of x (relative 4e-3) would swamp a small per-checkpoint change.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ckptscan.layouts.families import FAMILIES, template_regex
from ckptscan.replay.contract import FORMAT
from ckptscan.store.timeline import atomic_write

# Module names come from the layout registry (tensor-name knowledge lives in ckptscan/layouts only):
# a role's tensor template ``layers.{L}.self_attn.q_proj.weight`` names the module
# ``layers.{L}.self_attn.q_proj`` whose input we capture.
_ATTN_ROLES = ("q", "qkv", "q_a")  # q_a: MLA with a query LoRA; its input is the normalised hidden state
_ROUTER_ROLES = ("router",)


def _module_patterns(roles: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    seen: dict[str, re.Pattern] = {}
    for fam in FAMILIES:
        for role in roles:
            for template in fam.roles.get(role, ()):
                module = template.removesuffix(".weight")
                if module not in seen:
                    seen[module] = template_regex(module)
    return tuple(seen.values())


ATTN_PATTERNS = _module_patterns(_ATTN_ROLES)
ROUTER_PATTERNS = _module_patterns(_ROUTER_ROLES)


def _is_router(model: nn.Module, name: str) -> bool:
    """A module called ``gate`` is a router only inside an MoE block: some dense models also name a
    gating linear ``gate`` (dense ``mlp.gate_proj`` never matches).  Require an enclosing module, up to
    three levels up (``mlp``, ``block_sparse_moe``, ``moe`` of ``moe.router.gate``), to own ``experts``."""
    if not name.endswith("gate"):
        return True
    parts = name.split(".")
    for up in range(1, min(4, len(parts))):
        if hasattr(model.get_submodule(".".join(parts[:-up])), "experts"):
            return True
    return False


def find_modules(model: nn.Module) -> tuple[dict[int, nn.Module], dict[int, nn.Module]]:
    """({layer: Q/K/V projection module}, {layer: router module}) found by module name."""
    attn: dict[int, nn.Module] = {}
    router: dict[int, nn.Module] = {}
    for name, module in model.named_modules():
        for role, patterns, table in (
            ("attention", ATTN_PATTERNS, attn),
            ("router", ROUTER_PATTERNS, router),
        ):
            m = next((m for pat in patterns if (m := pat.fullmatch(name))), None)
            if m is None or (role == "router" and not _is_router(model, name)):
                continue
            i = int(m.group("layer"))
            if i in table and table[i] is not module:
                raise ValueError(
                    f"two {role} modules for layer {i} (second: {name!r}); pass "
                    f"attn_modules=/router_modules= explicitly"
                )
            table[i] = module
    return attn, router


class ReplayRecorder:
    """Capture, for a fixed replay batch, the inputs of every layer's Q/K/V projection and router.

    ``model``: any ``nn.Module``; ``replay_batch``: input ids [B, T] (the same tensor at every
    checkpoint); ``forward(model, ids)``: how to run the model (default ``model(ids)``).
    ``attn_modules`` / ``router_modules``: explicit ``{layer: module}`` maps; when either is given,
    name matching is skipped and only the given maps are used.  ``store_dtype``: "float32" (default),
    "float16" or "bfloat16" (stored as uint16, see docs/replay.md).  ``sequence_first``: the model
    feeds [T, B, d] to its projections (Megatron); otherwise [B, T, d] or a flattened [B*T, d].
    """

    def __init__(
        self,
        model: nn.Module,
        replay_batch: torch.Tensor,
        forward: Callable[[nn.Module, torch.Tensor], Any] | None = None,
        attn_modules: dict[int, nn.Module] | None = None,
        router_modules: dict[int, nn.Module] | None = None,
        store_dtype: str = "float32",
        sequence_first: bool = False,
    ):
        if replay_batch.ndim != 2:
            raise ValueError(f"replay_batch must be input ids [B, T], got shape {tuple(replay_batch.shape)}")
        if store_dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"store_dtype must be float32, float16 or bfloat16, got {store_dtype!r}")
        self.model = model
        self.replay_batch = replay_batch
        self.forward = forward or (lambda m, ids: m(ids))
        self.store_dtype = store_dtype
        self.sequence_first = sequence_first
        if attn_modules is not None or router_modules is not None:
            self.attn_modules = dict(attn_modules or {})
            self.router_modules = dict(router_modules or {})
        else:
            self.attn_modules, self.router_modules = find_modules(model)
        fused = [i for i, m in self.attn_modules.items() if hasattr(m, "layer_norm_weight")]
        if fused:
            raise ValueError(
                f"the QKV modules of layers {fused} fuse the layernorm (Transformer Engine): their "
                "input is not normalised; record the normalised state yourself (docs/replay.md)"
            )
        if not self.attn_modules and not self.router_modules:
            raise ValueError(
                "no attention projection or router modules found by name; pass "
                "attn_modules={layer: module} (and router_modules=) explicitly"
            )

    # -- capture -----------------------------------------------------------------------------------
    def record(self) -> dict[tuple[int, str], torch.Tensor]:
        """Run the replay forward; {(layer, "attn_in"|"router_in"|"router_logits"): float32 CPU [B, T, .]}."""
        captured: dict[tuple[int, str], torch.Tensor] = {}
        b, t = self.replay_batch.shape

        def to_bt(x: torch.Tensor, key) -> torch.Tensor:
            x = x.detach()
            if x.ndim == 3 and self.sequence_first and x.shape[:2] == (t, b):
                x = x.transpose(0, 1)
            elif x.ndim == 3 and x.shape[:2] == (b, t):
                pass
            elif x.ndim == 2 and x.shape[0] == b * t:  # HF MoE blocks flatten tokens before the router
                x = x.reshape(b, t, x.shape[-1])
            else:
                raise ValueError(
                    f"layer {key[0]} {key[1]}: captured shape {tuple(x.shape)} does not match "
                    f"the replay batch [B={b}, T={t}, .]"
                    + ("" if self.sequence_first else " (sequence-first model? pass sequence_first=True)")
                )
            return x.float().cpu().clone()

        def store(key, tensor):
            if key in captured:
                raise ValueError(
                    f"layer {key[0]}: module called more than once in one forward ({key[1]}); "
                    "pass the modules explicitly"
                )
            captured[key] = to_bt(tensor, key)

        def pre_hook(key):
            def hook(module, args, kwargs):
                x = (
                    args[0]
                    if args
                    else next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
                )
                if x is None:
                    raise ValueError(f"layer {key[0]}: no tensor input reached the {key[1]} module")
                store(key, x)

            return hook

        def logits_hook(key):
            def hook(module, args, output):
                if isinstance(output, torch.Tensor):
                    store(key, output)

            return hook

        handles = []
        flags = [(m, m.training) for m in self.model.modules()]
        try:
            for i, mod in self.attn_modules.items():
                handles.append(mod.register_forward_pre_hook(pre_hook((i, "attn_in")), with_kwargs=True))
            for i, mod in self.router_modules.items():
                handles.append(mod.register_forward_pre_hook(pre_hook((i, "router_in")), with_kwargs=True))
                if isinstance(mod, nn.Linear):  # output = logits; custom gates return (weights, idx)
                    handles.append(mod.register_forward_hook(logits_hook((i, "router_logits"))))
            self.model.eval()
            ids = self.replay_batch.to(_device_of(self.model))
            with torch.no_grad():
                self.forward(self.model, ids)
        finally:
            for h in handles:
                h.remove()
            for m, flag in flags:
                m.training = flag
        missing = [i for i in self.attn_modules if (i, "attn_in") not in captured]
        missing += [i for i in self.router_modules if (i, "router_in") not in captured]
        if missing:
            raise ValueError(f"the forward never reached the modules of layers {sorted(set(missing))}")
        return captured

    def save(self, path: str | Path, step: int, write: bool = True) -> dict[tuple[int, str], torch.Tensor]:
        """Record and write the replay file atomically (``ckptscan.store.timeline.atomic_write``); returns the capture.

        ``write=False`` runs the forward only (for ranks other than 0 in a sharded model, where every
        rank must take part in the forward but one writes).
        """
        captured = self.record()
        if write:
            write_replay(path, step, captured, self.replay_batch, self.store_dtype)
        return captured


def write_replay(
    path: str | Path,
    step: int,
    activations: dict[tuple[int, str], torch.Tensor],
    input_ids: torch.Tensor | np.ndarray | None = None,
    store_dtype: str = "float32",
) -> Path:
    """Write a replay file in the contract's format, atomically; ``activations`` as from ``record``."""
    import h5py

    path = Path(path)

    def write(tmp: Path) -> None:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["step"] = int(step)
            if input_ids is not None:
                ids = (
                    input_ids.cpu().numpy() if isinstance(input_ids, torch.Tensor) else np.asarray(input_ids)
                )
                f.create_dataset("input_ids", data=ids.astype(np.int64))
            for (layer, name), x in sorted(activations.items()):
                _b, t, last = x.shape
                chunks = (1, t, last)  # one sequence per chunk: readers can slice sequences
                if store_dtype == "bfloat16":
                    data = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
                    ds = f.create_dataset(f"layers/{layer}/{name}", data=data, chunks=chunks)
                    ds.attrs["dtype"] = "bfloat16"
                else:
                    data = x.to(getattr(torch, store_dtype)).numpy()
                    f.create_dataset(f"layers/{layer}/{name}", data=data, chunks=chunks)

    atomic_write(path, writer=write)
    return path


def _device_of(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")
