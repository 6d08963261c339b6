"""Detection (which family?) and building (per-layer blocks with their dimensions) of a layout.

Detection: every family's role templates are matched against the tensor names (wrapper segments such
as ``_orig_mod.`` or ``_fsdp_wrapped_module.`` removed, any common prefix allowed); a family matches
when all its required roles are found under one prefix.  The family with most roles found wins; ties
go to the family named by the config's ``model_type``/``architectures``, then to registry order.

Building: all dimensions come from headers (shapes) and the config, and are cross-checked; any
disagreement is a ``LayoutError`` naming the tensor and the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypedDict, overload

from ..errors import LayoutError
from ..readers.base import TensorInfo
from .base import AttnBlock, Layout, ModelConfig, ProjBlock, RouterBlock
from .config import ConfigFacts
from .families import FAMILIES, Family
from .splitters import MLA, FusedQKV, Router, SeparateQK, Src, Whole

_WRAPPERS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_forward_module.")
_AUX_PREFIX_WORDS = ("vision", "visual", "image", "audio", "mm_projector", "speech")


def normalize(name: str) -> str:
    """Drop wrapper segments that torch.compile, FSDP1, activation checkpointing and Fabric insert."""
    for w in _WRAPPERS:
        if w in name:
            name = name.replace(w, "")
    return name


class Ref(str):
    """A tensor name, or one layer of a tensor stacked over layers (shown as ``name[layer]``).

    The layer is ``layer_index``, not ``index``: an attribute of that name would hide ``str.index``."""

    tensor: str
    layer_index: int | None

    def __new__(cls, tensor: str, index: int | None = None) -> Ref:
        self = super().__new__(cls, tensor if index is None else f"{tensor}[{index}]")
        self.tensor, self.layer_index = tensor, index
        return self


@dataclass
class Matches:
    """role -> layer -> original tensor name, for one chosen family and prefix."""

    family: Family
    prefix: str
    roles: dict[str, dict[int, str]]
    notes: list[str] = field(default_factory=list)


class NameIndex:
    """Tensor names bucketed by their last two segments, so matching many templates stays fast
    (a DeepSeek-V3 checkpoint has ~90k tensor names, mostly experts)."""

    def __init__(self, infos: dict[str, TensorInfo]):
        self.infos = infos
        self.original: dict[str, str] = {}
        self.buckets: dict[str, list[str]] = {}
        for n in infos:
            nn_ = normalize(n)
            self.original.setdefault(nn_, n)
            self.buckets.setdefault(".".join(nn_.rsplit(".", 2)[-2:]), []).append(nn_)

    def candidates(self, template: str) -> list[str]:
        tail = template.rsplit(".", 2)[-2:]
        if any("{L}" in t for t in tail):
            return list(self.original)
        return self.buckets.get(".".join(tail), [])


def _match_family(fam: Family, index: NameIndex) -> dict[str, dict[str, dict[int, str]]]:
    """role -> prefix -> layer -> original name."""
    found: dict[str, dict[str, dict[int, str]]] = {}
    for role, templates in fam.roles.items():
        for template, pat in zip(templates, fam.patterns[role], strict=False):
            for n in index.candidates(template):
                m = pat.fullmatch(n)
                if not m:
                    continue
                by_prefix = found.setdefault(role, {}).setdefault(m.group("prefix"), {})
                orig = index.original[n]
                if "layer" in pat.groupindex:
                    by_prefix.setdefault(int(m.group("layer")), Ref(orig))
                else:  # stacked over layers: the leading axis is the layer (an empty slice is none)
                    shape = index.infos[orig].shape
                    for layer in range(shape[0] if len(shape) >= 2 and math.prod(shape[1:]) != 0 else 0):
                        by_prefix.setdefault(layer, Ref(orig, layer))
    return found


def _choose_prefix(prefixes: set[str], layers_by_prefix: dict[str, dict[int, str]]) -> str:
    """The language model's prefix: not a vision/audio tower, then most layers, then shortest."""

    def key(p: str):
        aux = any(w in p.lower() for w in _AUX_PREFIX_WORDS)
        return (aux, -len(layers_by_prefix.get(p, {})), len(p), p)

    return min(prefixes, key=key)


def match_family(index: NameIndex, facts: ConfigFacts, forced: str | None = None) -> Matches | None:
    """The best-matching registry family, or None."""
    cands = []
    hints = facts.hints
    for i, fam in enumerate(FAMILIES):
        if forced and fam.name != forced:
            continue
        found = _match_family(fam, index)
        if not all(r in found for r in fam.required):
            continue
        prefixes = set.intersection(*(set(found[r]) for r in fam.required))
        if not prefixes:
            continue
        prefix = _choose_prefix(prefixes, found[fam.required[0]])
        roles = {r: by[prefix] for r, by in found.items() if prefix in by}
        hinted = bool(hints & set(fam.model_types))
        cands.append(((len(roles), hinted, -i), fam, prefix, roles, len(prefixes) > 1))
    if not cands:
        return None
    cands.sort(key=lambda c: c[0], reverse=True)
    (score, hinted, _), fam, prefix, roles, several = cands[0]
    notes = []
    if prefix:
        notes.append(f"tensor prefix {prefix!r}")
    if several:
        notes.append("several model prefixes matched; using the language model's")
    ties = [c[1].name for c in cands[1:] if c[0][0] == score]
    if ties and not hinted:
        notes.append(
            f"family {fam.name} chosen by tensor names only (also consistent with: "
            f"{', '.join(ties)}); pass config.json to disambiguate"
        )
    return Matches(fam, prefix, roles, notes)


# ---------------------------------------------------------------- building


class _MLACommon(TypedDict):
    """The fields both parts of an MLA block share (see ``Builder.mla``)."""

    n_heads: int
    nope: int
    rope: int
    v_dim: int
    kv_lora: int
    kv_a: Src
    q: Src | None
    q_a: Src | None
    q_a_norm: Src | None
    q_b: Src | None


class Builder:
    """Turns matched roles into AttnBlocks and RouterBlocks, checking every dimension."""

    def __init__(self, infos: dict[str, TensorInfo], facts: ConfigFacts, m: Matches):
        self.infos, self.facts, self.m, self.fam = infos, facts, m, m.family
        self.notes: list[str] = [*m.notes, *facts.ignored]
        self._noted: set[str] = set()

    # -- helpers
    def note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def name(self, role: str, layer: int) -> str | None:
        return self.m.roles.get(role, {}).get(layer)

    def need(self, role: str, layer: int) -> str:
        """The tensor of a role that is present for this layer: ``build`` makes blocks only for the
        layers that have all of an attention kind's roles, and routers only for a router's layers."""
        name = self.name(role, layer)
        assert name is not None, f"no {role} tensor for layer {layer}"
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        if isinstance(name, Ref) and name.layer_index is not None:
            return tuple(self.infos[name.tensor].shape[1:])
        return tuple(self.infos[name].shape)

    @overload
    def src(self, name: str) -> Src: ...
    @overload
    def src(self, name: None) -> None: ...
    @overload
    def src(self, name: str | None) -> Src | None: ...
    def src(self, name: str | None) -> Src | None:
        """A tensor to read, with its FP8 block scale when the checkpoint stores one."""
        if name is None:
            return None
        if isinstance(name, Ref) and name.layer_index is not None:
            return Src(name.tensor, index=name.layer_index)
        name = str(name)
        scale = name + "_scale_inv"
        if scale not in self.infos:
            return Src(name)
        b0, b1 = self.facts.fp8_block
        rows, cols = self.shape(name)
        want = (math.ceil(rows / b0), math.ceil(cols / b1))
        if self.shape(scale) != want:
            raise LayoutError(
                f"{scale} has shape {list(self.shape(scale))}, expected {list(want)} for "
                f"{name} {[rows, cols]} with FP8 blocks {b0}x{b1}"
            )
        self.note(f"FP8 weights dequantised with their weight_scale_inv ({b0}x{b1} blocks)")
        return Src(name, scale, (b0, b1))

    def matrix(self, name: str) -> tuple[int, int]:
        s = self.shape(name)
        if len(s) != 2:
            raise LayoutError(f"{name} has shape {list(s)}, expected a 2-D weight matrix")
        if 0 in s:
            raise LayoutError(f"{name} has shape {list(s)}: an empty weight matrix")
        return s[0], s[1]

    def numel(self, name: str) -> int:
        return math.prod(self.shape(name))

    def _split(self, name: str, what: str, total: int, parts: int) -> int:
        if parts <= 0 or total % parts:
            raise LayoutError(f"{name} has {total} {what}: not divisible into {parts} heads")
        return total // parts

    def _check(self, name: str, what: str, got: int, cfg: int | None, key: str) -> None:
        if cfg is not None and cfg != got:
            raise LayoutError(f"{name}: shape gives {what} = {got} but the config says {key} = {cfg}")

    def _need_heads(self, name: str) -> int:
        if self.facts.n_heads is None:
            raise LayoutError(
                f"{name}: the number of attention heads cannot be read from the shapes of "
                f"a {self.fam.name} checkpoint and no config gives it; pass --heads N "
                f"(and --kv-heads G), or --config PATH (an HF config.json, or a layout file as "
                f"for --layout)"
            )
        return self.facts.n_heads

    def _norm(self, role: str, layer: int, n: int, h: int, proj: str) -> Src | None:
        name = self.name(role, layer)
        if name is None:
            return None
        size = self.numel(name)
        if size == h:
            return self.src(name)
        if size == n * h:
            if n > 1:
                self.note(
                    f"{role} normalises the whole projection ({n}x{h}); its gain is folded per "
                    f"head, the normalisation itself is not per-head"
                )
            return self.src(name)
        raise LayoutError(f"{name} has {size} elements; expected head_dim {h} or {n}x{h} for {proj}")

    # -- attention kinds
    def separate(self, layer: int) -> list[AttnBlock]:
        qn, kn = self.need("q", layer), self.need("k", layer)
        (qr, d), (kr, dk) = self.matrix(qn), self.matrix(kn)
        if d != dk:
            raise LayoutError(f"{qn} {[qr, d]} and {kn} {[kr, dk]} disagree on the hidden size")
        f = self.facts
        h = f.head_dim
        if h is None:
            qnorm = self.name("q_norm", layer)
            s = self.numel(qnorm) if qnorm else None
            if s and s < qr and qr % s == 0:
                h = s  # per-head QK-norm gain: its size is the head dim
            else:  # the head count from the config (_need_heads raises without one)
                h = self._split(qn, "rows", qr, self._need_heads(qn))
        if qr % h:
            raise LayoutError(f"{qn} has {qr} rows: not a multiple of head_dim {h}")
        H = qr // h
        self._check(qn, "heads", H, f.n_heads, "num_attention_heads")
        if kr % h:
            raise LayoutError(f"{kn} has {kr} rows: not a multiple of head_dim {h}")
        G = kr // h
        self._check(kn, "kv heads", G, f.n_kv_heads, "num_key_value_heads")
        if H % G:
            raise LayoutError(f"{qn}: {H} query heads do not divide into {G} kv heads ({kn})")
        load = SeparateQK(
            self.src(qn),
            self.src(kn),
            H,
            G,
            h,
            self._norm("q_norm", layer, H, h, qn),
            self._norm("k_norm", layer, G, h, kn),
            self.fam.norm_offset,
        )
        return [self._attn(layer, load, H, G, h, d)]

    def qkv(self, layer: int, order: str | None = None, n_kv: int | None = None) -> list[AttnBlock]:
        name = self.need("qkv", layer)
        rows, d = self.matrix(name)
        if self.fam.transposed:
            rows, d = d, rows
        order = order or self.fam.qkv_order
        f = self.facts
        H = self._need_heads(name)
        G = n_kv if n_kv is not None else f.n_kv_heads
        if order not in ("contiguous", "per_head", "per_group"):
            raise LayoutError(f"{name}: unknown fused qkv order {order!r}")
        if order == "per_head":
            h = f.head_dim or self._split(name, "rows (3 x heads)", rows, 3 * H)
            if G is not None and G != H:
                raise LayoutError(
                    f"{name}: per-head fused qkv needs kv heads = heads, config says "
                    f"{G} kv heads for {H} heads"
                )
            G = H
        else:
            h = f.head_dim or self._split(name, "hidden columns" if not self.fam.transposed else "rows", d, H)
            if G is None:
                extra = rows - H * h
                if rows % h or extra <= 0 or extra % (2 * h):
                    raise LayoutError(
                        f"{name} has {rows} rows: not (heads {H} + 2 x kv heads) x head_dim {h}"
                    )
                G = extra // (2 * h)
        if rows != (H + 2 * G) * h:
            raise LayoutError(
                f"{name} has {rows} rows, expected (heads {H} + 2 x kv heads {G}) x "
                f"head_dim {h} = {(H + 2 * G) * h}"
            )
        if H % G:
            raise LayoutError(f"{name}: {H} query heads do not divide into {G} kv heads")
        load = FusedQKV(
            self.src(name),
            order,
            H,
            G,
            h,
            self.fam.transposed,
            self._norm("q_norm", layer, H, h, name),
            self._norm("k_norm", layer, G, h, name),
            self.fam.norm_offset,
        )
        return [self._attn(layer, load, H, G, h, d)]

    def falcon(self, layer: int) -> list[AttnBlock]:
        """Falcon's three fused layouts, chosen like transformers' FalconAttention._split_heads."""
        name = self.need("qkv", layer)
        rows, d = self.matrix(name)
        f = self.facts
        H = self._need_heads(name)
        h = f.head_dim or self._split(name, "hidden columns", d, H)
        if f.new_decoder_architecture:
            return self.qkv(layer, "per_group", f.n_kv_heads or H)
        mq = f.multi_query
        if mq is None:  # flag absent: the shape tells (transformers' default would be multi_query)
            mq = rows == (H + 2) * h
        return self.qkv(layer, "contiguous", 1) if mq else self.qkv(layer, "per_head", H)

    def mla(self, layer: int) -> list[AttnBlock]:
        f = self.facts
        kv_a, kv_b = self.need("kv_a", layer), self.need("kv_b", layer)
        q, q_a, q_b = self.name("q", layer), self.name("q_a", layer), self.name("q_b", layer)
        if q is not None:
            qname = q
        elif q_a is not None and q_b is not None:
            qname = q_b
        else:
            raise LayoutError(
                f"layer {layer}: {kv_a} found but no q projection (q_proj or q_a_proj + q_b_proj)"
            )
        H = self._need_heads(qname)
        (kva_r, d), (kvb_r, kv_lora) = self.matrix(kv_a), self.matrix(kv_b)
        self._check(kv_b, "kv_lora_rank", kv_lora, f.kv_lora_rank, "kv_lora_rank")
        rope = kva_r - kv_lora
        self._check(kv_a, "qk_rope_head_dim", rope, f.qk_rope_head_dim, "qk_rope_head_dim")
        qr, q_in = self.matrix(qname)
        qk = self._split(qname, "rows", qr, H)
        nope = qk - rope
        self._check(qname, "qk_nope_head_dim", nope, f.qk_nope_head_dim, "qk_nope_head_dim")
        v_dim = self._split(kv_b, "rows", kvb_r, H) - nope
        self._check(kv_b, "v_head_dim", v_dim, f.v_head_dim, "v_head_dim")
        if nope <= 0 or rope <= 0 or v_dim <= 0:
            raise LayoutError(
                f"{kv_b}: MLA dimensions nope={nope} rope={rope} v={v_dim} for {H} heads are not positive"
            )
        if q is None:
            assert q_a is not None  # checked above: without q_proj, q_a_proj and q_b_proj are both present
            qa_r, qa_d = self.matrix(q_a)
            if qa_r != q_in or qa_d != d:
                raise LayoutError(f"{q_a} {[qa_r, qa_d]} does not feed {q_b} {[qr, q_in]} from hidden {d}")
            self._check(q_a, "q_lora_rank", qa_r, f.q_lora_rank, "q_lora_rank")
        qan = self.name("q_a_norm", layer)
        kvn = self.name("kv_a_norm", layer)
        lora = q is None
        common: _MLACommon = {
            "n_heads": H,
            "nope": nope,
            "rope": rope,
            "v_dim": v_dim,
            "kv_lora": kv_lora,
            "kv_a": self.src(kv_a),
            "q": self.src(q),
            "q_a": self.src(q_a) if lora else None,
            "q_a_norm": self.src(qan) if lora else None,
            "q_b": self.src(q_b) if lora else None,
        }
        nope_load = MLA("nope", kv_a_norm=self.src(kvn), kv_b=self.src(kv_b), **common)
        rope_load = MLA("rope", **common)
        self.note(
            "MLA: block 'attn' is the no-RoPE part (H query and H key heads of qk_nope_head_dim), "
            "'attn_rope' the RoPE part (one shared key head); the score scale is "
            f"1/sqrt(nope + rope) = 1/sqrt({nope + rope}); latent-norm gains folded"
        )
        return [
            self._attn(layer, nope_load, H, H, nope, d, rope=False),
            self._attn(layer, rope_load, H, 1, rope, d, name="attn_rope", rope=True),
        ]

    def _attn(self, layer, load, H, G, h, d, name="attn", rope=None) -> AttnBlock:
        if h > d:  # an h x h Gram per head: bounded by the bytes present only while h <= d
            raise LayoutError(
                f"{load.names()[0]}: head_dim {h} is larger than the hidden size {d}: not an "
                f"attention head ({H} heads; is the head count right?)"
            )
        if rope is None:
            rope = self.uses_rope()
        return AttnBlock(
            layer=layer,
            n_heads=H,
            n_kv_heads=G,
            head_dim=h,
            hidden=d,
            tensors=load.names(),
            load=load,
            name=name,
            rope=rope,
        )

    def uses_rope(self) -> bool:
        if self.facts.uses_rope is not None:
            return self.facts.uses_rope
        return self.fam.uses_rope and not self.facts.no_rope_by_config()

    # -- router
    def router(self, layer: int, hidden: int | None, routing: str | None) -> RouterBlock:
        name = self.need("router", layer)
        f = self.facts
        if self.fam.router_flat and len(self.shape(name)) == 1:
            d = hidden or f.hidden_size
            if d is None:
                raise LayoutError(
                    f"{name} is stored flattened {list(self.shape(name))}; the hidden size is "
                    f"needed to reshape it (config.json d_model or layout [model] hidden_size)"
                )
            n = self.numel(name)
            if n % d:
                raise LayoutError(f"{name} has {n} elements: not a multiple of the hidden size {d}")
            E = n // d
        else:
            E, d = self.matrix(name)
            if hidden is not None and d != hidden:
                raise LayoutError(f"{name} has {d} columns but the attention hidden size is {hidden}")
        self._check(name, "experts", E, f.n_experts, "number of experts")
        bname = self.name("router_bias", layer)
        if bname is not None and self.numel(bname) != E:
            raise LayoutError(f"{bname} has {self.numel(bname)} elements, expected {E} (one per expert)")
        rule = routing or (self.fam.routing_with_bias if bname else self.fam.routing)
        load = Router(self.src(name), E, d, self.src(bname))
        return RouterBlock(
            layer=layer, n_experts=E, hidden=d, tensors=load.names(), load=load, routing=rule, top_k=f.top_k
        )

    # -- projections (read for their step size only)
    def projections(self, attention: list[AttnBlock]) -> list[ProjBlock]:
        """The attention output projection of every layer that has attention, where it is stored
        as a 2-D matrix with the hidden size on one side; one that is not is left out, with a
        note (it is optional: only its update ratio is read)."""
        out: list[ProjBlock] = []
        hidden = {b.layer: b.hidden for b in attention}
        for layer in sorted(self.m.roles.get("out", {})):
            name = self.need("out", layer)
            shape = self.shape(name)
            if layer not in hidden or len(shape) != 2 or hidden[layer] not in shape or 0 in shape:
                self.note(f"{name}: shape {list(shape)} is not an output projection of this model; not read")
                continue
            try:
                load = Whole(self.src(name))
            except LayoutError as e:  # e.g. an FP8 scale of the wrong shape: this layer's is not read
                self.note(f"{e}; the output projection of layer {layer} is not read")
                continue
            out.append(ProjBlock(layer=layer, tensors=load.names(), load=load))
        return out

    # -- everything
    def build(self, routing: str | None = None) -> Layout:
        fam = self.fam
        kinds = {
            "separate": (self.separate, ("q", "k")),
            "qkv": (self.qkv, ("qkv",)),
            "falcon": (self.falcon, ("qkv",)),
            "mla": (self.mla, ("kv_a", "kv_b")),
        }
        make, need = kinds[fam.attn]
        self._check_layer_indices()
        layers = sorted(set().union(*(self.m.roles.get(r, {}) for r in need)))
        attention: list[AttnBlock] = []
        for layer in layers:
            missing = [r for r in need if self.name(r, layer) is None]
            if missing:
                have = [n for r in need if (n := self.name(r, layer))]
                raise LayoutError(
                    f"layer {layer}: {', '.join(have)} found but no {'/'.join(missing)} "
                    f"tensor for it ({fam.name} layout)"
                )
            attention.extend(make(layer))
        hidden = attention[0].hidden if attention else self.facts.hidden_size
        routers = [self.router(layer, hidden, routing) for layer in sorted(self.m.roles.get("router", {}))]
        if not attention and not routers:  # only stacked tensors can match without a layer: empty ones
            raise LayoutError(f"the {fam.name} tensors stacked over layers are empty: no layer to analyse")
        for bl in self.m.roles.get("router_bias", {}):
            if bl not in self.m.roles.get("router", {}):
                raise LayoutError(f"{self.name('router_bias', bl)} found but no router weight for layer {bl}")
        if fam.norm_offset:
            self.note(f"QK-norm gains folded as (1 + weight) ({fam.name} convention)")
        if routers and any(r.routing == "sigmoid_bias" for r in routers) and fam.name != "deepseek-mla":
            self.note("router bias found: routing assumed sigmoid scores + selection bias")
        self.notes.extend(fam.notes)
        return Layout(
            family=fam.name,
            config=self.model_config(attention, routers),
            attention=attention,
            routers=routers,
            notes=self.notes,
            projections=self.projections(attention),
        )

    def _check_layer_indices(self) -> None:
        """Layers 0..L-1 each hold tensors of their own, so a layer index at or above the number of
        tensors present (``layers.999999999``) is not a real one; it would size every per-layer array
        of the analysis.  (A layer of a stacked tensor is a slice of bytes that are present.)"""
        n = len(self.infos)
        for by_layer in self.m.roles.values():
            for layer, name in by_layer.items():
                if layer >= n and not (isinstance(name, Ref) and name.layer_index is not None):
                    raise LayoutError(
                        f"{name} names layer {layer}, but the checkpoint holds only {n} "
                        f"tensors: not a layer index"
                    )

    def model_config(self, attention: list[AttnBlock], routers: list[RouterBlock]) -> ModelConfig:
        f = self.facts
        first = next((b for b in attention if b.name == "attn"), None)
        layers = {b.layer for b in attention} | {r.layer for r in routers}
        has_norm = any(self.m.roles.get(r) for r in ("q_norm", "k_norm"))
        return ModelConfig(
            model_type=f.model_type,
            hidden_size=f.hidden_size or (first.hidden if first else None),
            n_layers=f.n_layers or (max(layers) + 1 if layers else None),
            n_heads=first.n_heads if first else f.n_heads,
            n_kv_heads=first.n_kv_heads if first else f.n_kv_heads,
            head_dim=first.head_dim if first else f.head_dim,
            rope_theta=f.rope_theta,
            rope_scaling=f.rope_scaling,
            partial_rotary_factor=f.partial_rotary_factor if f.partial_rotary_factor is not None else 1.0,
            uses_rope=self.uses_rope(),
            qk_norm=has_norm,
            n_experts=f.n_experts or (routers[0].n_experts if routers else None),
            top_k=f.top_k,
            raw=f.raw,
        )
