"""The corpus' run lists: parts fixed in code (deterministic), that share no seed.

* ``calibration()``: where the detection rules were first chosen (seeds 101-127).
* ``reported()``: generated only after the rules were frozen (seeds 200-244); it also has recipe
  variations the calibration part lacks: AdamW betas (0.8, 0.99) and eps 1e-6, warm-ups of 1, 5, 15
  and 20 % of the run, the OLMoE family, other onsets and severities.
* ``fresh()``, ``final()``, ``holdout()``, ``holdout2()``, ``holdout3()``, ``holdout4()``,
  ``holdout5()``, ``holdout6()``, ``holdout7()``, ``holdout8()``, ``holdout9()``, ``holdout10()``,
  ``holdout11()``, ``holdout12()``, ``holdout13()``, ``holdout14()``, ``holdout15()``,
  ``holdout16()``, ``holdout17()``, ``holdout18()``, ``holdout19()``, ``holdout20()``,
  ``holdout21()``, ``holdout22()``, ``holdout23()``, ``holdout24()``, ``holdout25()``,
  ``holdout26()``, ``holdout27()``, ``holdout28()``, ``holdout29()``, ``holdout30()``,
  ``holdout31()``, ``holdout32()``, ``holdout33()``, ``holdout34()``, ``holdout35()``,
  ``holdout36()``, ``holdout37()``, ``holdout38()``, ``holdout39()``, ``holdout40()``,
  ``holdout41()``, ``holdout42()``, ``holdout43()``, ``holdout44()``, ``holdout45()``,
  ``holdout46()``, ``holdout47()``, ``holdout48()``, ``holdout49()``, ``holdout50()``,
  ``holdout51()``, ``holdout52()``, ``holdout53()``, ``holdout54()``, ``holdout55()``,
  ``holdout56()``, ``holdout57()``, ``holdout58()``, ``holdout59()``, ``holdout60()``,
  ``holdout61()``, ``holdout62()``, ``holdout63()``, ``holdout64()``, ``holdout65()``, ``holdout66()``,
  ``holdout67()``, ``holdout68()``, ``holdout69()``, ``holdout70()``, ``holdout71()``,
  ``holdout72()``, ``holdout73()``, ``holdout74()``: the reported
  part's design with other seeds (300-344, 400-444, 500-544, 600-644, 700-744, 800-844, 900-944, 1000-1044,
  1100-1144, 1200-1244, 1300-1344, 1400-1444, 1500-1544, 1600-1644, 1700-1744, 1800-1844, 1900-1944,
  2000-2044, 2100-2144, 2200-2244, 2300-2344, 2400-2444, 2500-2544, 2600-2644, 2700-2744,
  2800-2844, 2900-2944, 3000-3044, 3100-3144, 3200-3244, 3300-3344, 3400-3444,
  3500-3544, 3600-3644, 3700-3744, 3800-3844, 3900-3944, 4000-4044, 4100-4144, 4200-4244,
  4300-4344, 4400-4444, 4500-4544, 4600-4644, 4700-4744, 4800-4844, 4900-4944, 5000-5044,
  5100-5144, 5200-5244, 5300-5344, 5400-5444, 5500-5544, 5600-5644, 5700-5744, 5800-5844, 5900-5944,
  6000-6044, 6100-6144, 6200-6244, 6300-6344, 6400-6444, 6500-6544, 6600-6644, 6700-6744,
  6800-6844, 6900-6944, 7000-7044, 7100-7144, 7200-7244, 7300-7344, 7400-7444, 7500-7544,
  7600-7644, 7700-7744, 7800-7844)
  and its cycles shifted, each generated after the rules had been chosen again, or (holdout45 to
  holdout47) trained before the rules or table they were judged under were frozen, and not read
  until judged once (docs/detection-history.md says on which parts).  ``holdout52()`` is the first
  part whose models are deeper than two layers (4, 6 and 8); ``holdout53()`` has 2, 4 and 8;
  ``holdout54()`` is the first whose models are wider (8 or 16 query heads, 2 to 8 KV heads, 128
  wide); ``holdout55()``, ``holdout56()`` and ``holdout57()`` have those widths with 2 and 4 layers;
  ``holdout58()``, ``holdout59()`` and ``holdout60()`` have them and the narrow models' width (4
  query heads of 16) with 2 and 4 layers; ``holdout61()`` to ``holdout68()`` go
  back to the narrow 2-layer models of ``holdout44()`` to ``holdout51()``; ``holdout69()`` has
  ``holdout52()``'s deeper ones (4, 6 and 8 layers); ``holdout70()`` and ``holdout71()`` train every
  recipe with Muon (the hidden matrices; AdamW on the rest), an optimizer no other part has;
  ``holdout72()`` trains every recipe with Lion; ``holdout73()`` and ``holdout74()`` have model
  families whose attention stores the query, key and value projections fused (Phi-3, GPT-NeoX,
  GPT-2, Falcon).

All cover every stack (hf, plain, lightning), save cadence (10, 25, 50, 100, 250), schedule (cos,
lin, wsd, const), dense and MoE models, AdamW and non-Adam optimizers (SGD, Adafactor; Muon in
``holdout70()`` and ``holdout71()``, Lion in ``holdout72()``, which have no other), every fault kind
and LR shape, and benign events.  Each recipe has a healthy run; fault and benign runs are its twins (same seed,
model, batches, schedule).

Run length by cadence (``STEPS``): 1500 steps for saves every 10-50 steps, 2000 for 100, 4000 for 250.
Severities were measured on these models (README.md, "Calibration of the faults"): on a decayed
schedule AdamW absorbs an LR jump of x8-12 (loss +0.0..0.5 at the end), while a jump to ~0.035-0.05
absolute LR (x12-16 on a constant 3e-3) diverges within ~15 steps, before any checkpoint can see it:
jumps are kept below that.  SGD diverges after x8.  The lowprec amplification needed is larger than
the drills' (AdamW 3000-6000, SGD 800-1500, Adafactor 8000); Qwen3's QK-norm absorbs 8000 and needs
~16000 (a realistic hard case).
"""

from __future__ import annotations

import dataclasses

from .common import UNGROUPED_MODELS, RunSpec
from .faults import LR_SHAPES

STEPS = {10: 1500, 25: 1500, 50: 1500, 100: 2000, 250: 4000}
OPTIMIZERS = {  # adamw99b8 and adamw95-eps1e-06: reported part only
    "adamw95": {"opt": "adamw", "lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "wd": 0.1},
    "adamw999": {"opt": "adamw", "lr": 3e-3, "betas": (0.9, 0.999), "eps": 1e-8, "wd": 0.01},
    "adamw95-wd0": {"opt": "adamw", "lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "wd": 0.0},
    "adamw99b8": {"opt": "adamw", "lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-8, "wd": 0.1},
    "adamw95-eps1e-06": {"opt": "adamw", "lr": 2e-3, "betas": (0.9, 0.95), "eps": 1e-6, "wd": 0.1},
    "sgd": {"opt": "sgd", "lr": 0.3, "betas": None, "eps": None, "wd": 0.0},
    "adafactor": {"opt": "adafactor", "lr": 0.01, "betas": None, "eps": None, "wd": 0.0},
    # Muon on the hidden matrices, AdamW (these betas, eps, LR) on the rest: holdout70 and holdout71 only
    "muon": {"opt": "muon", "lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "wd": 0.1},
    "muon02": {"opt": "muon02", "lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "wd": 0.1},
    # Lion (``common.Lion``), holdout72 only: the paper's advice, an LR 3-10x below AdamW's and a
    # weight decay as much larger; lion98b95 has the betas it trained language models with
    "lion99": {"opt": "lion", "lr": 3e-4, "betas": (0.9, 0.99), "eps": None, "wd": 1.0},
    "lion98b95": {"opt": "lion", "lr": 1e-3, "betas": (0.95, 0.98), "eps": None, "wd": 0.3},
}


class Recipe:
    """A healthy recipe and constructors for its twins."""

    def __init__(
        self,
        framework: str,
        model: str,
        opt: str,
        schedule: str,
        warmup_pct: float,
        every: int,
        seed: int,
        storage: str = "default",
        layers: int = 2,
        heads: tuple[int, int, int] = (4, 2, 16),
    ):
        steps = STEPS[every]
        self.kw = dict(
            framework=framework,
            model=model,
            **OPTIMIZERS[opt],
            schedule=schedule,
            warmup=round(warmup_pct * steps / 100),
            steps=steps,
            save_every=every,
            seed=seed,
            storage=storage,
            layers=layers,
            heads=heads[0],
            kv_heads=heads[0] if model in UNGROUPED_MODELS else heads[1],
            head_dim=heads[2],
        )

    def at(self, frac: float) -> int:
        """An onset at ``frac`` of the run (not aligned to the saves, as real faults are not)."""
        return round(frac * self.kw["steps"]) + 7

    def healthy(self) -> RunSpec:
        return RunSpec(**self.kw)

    def benign(self, event: str, frac: float | None = None) -> RunSpec:
        """warmup-cut: cut at 2/3 of the planned warm-up (LR x1.5); others at ``frac``."""
        onset = round(2 * self.kw["warmup"] / 3) if event == "warmup-cut" else self.at(frac)
        return RunSpec(**self.kw, benign=event, onset=onset)

    def lowprec(self, frac: float, severity: float) -> RunSpec:
        return RunSpec(**self.kw, fault="lowprec-attention", onset=self.at(frac), severity=severity)

    def highlr(self, frac: float, shape: str, **lr) -> RunSpec:
        return RunSpec(**self.kw, fault="high-lr", onset=self.at(frac), lr_fault={"shape": shape, **lr})

    def combined(self, frac: float, severity: float, shape: str, **lr) -> RunSpec:
        return RunSpec(
            **self.kw,
            fault="combined",
            onset=self.at(frac),
            severity=severity,
            lr_fault={"shape": shape, **lr},
        )


def _check(specs: list[RunSpec]) -> list[RunSpec]:
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate run names: {sorted(dup)}"
    return specs


def calibration() -> list[RunSpec]:
    R = Recipe
    # cadence 10
    a = R("hf", "llama", "adamw95", "cos", 10, 10, 101)
    b = R("plain", "mixtral", "adamw95", "wsd", 2, 10, 102)
    c = R("lightning", "qwen2moe", "adamw999", "lin", 25, 10, 103)
    d = R("hf", "mixtral", "sgd", "cos", 10, 10, 104)
    e = R("plain", "qwen3", "adafactor", "const", 0, 10, 105)
    # cadence 25
    f = R("hf", "mixtral", "adamw95", "cos", 2, 25, 106)
    g = R("plain", "llama", "adamw95", "const", 10, 25, 107)
    h = R("lightning", "llama", "adamw95-wd0", "wsd", 10, 25, 108)
    i = R("hf", "qwen2moe", "adamw999", "lin", 0, 25, 109)
    j = R("plain", "mixtral", "sgd", "wsd", 2, 25, 110)
    k = R("lightning", "mixtral", "adafactor", "cos", 10, 25, 111)
    # cadence 50
    m = R("plain", "llama", "adamw95", "cos", 25, 50, 112)
    n = R("hf", "qwen3", "adamw95", "wsd", 10, 50, 113)
    o = R("lightning", "mixtral", "adamw95", "const", 2, 50, 114)
    p = R("hf", "llama", "sgd", "lin", 10, 50, 115)
    q = R("plain", "qwen2moe", "adamw95", "cos", 10, 50, 116, storage="torch")
    r = R("hf", "mixtral", "adamw95", "cos", 10, 50, 117, storage="full")
    # cadence 100
    s = R("hf", "llama", "adamw95", "cos", 10, 100, 118)
    t = R("plain", "mixtral", "adamw999", "cos", 25, 100, 119)
    u = R("lightning", "qwen3", "adamw95", "lin", 2, 100, 120)
    v = R("plain", "llama", "sgd", "const", 10, 100, 121)
    w = R("hf", "qwen2moe", "adafactor", "wsd", 10, 100, 122)
    # cadence 250
    x = R("hf", "mixtral", "adamw95", "cos", 2, 250, 123)
    y = R("plain", "llama", "adamw95-wd0", "wsd", 10, 250, 124)
    z = R("lightning", "llama", "adamw999", "cos", 25, 250, 125)
    aa = R("plain", "qwen2moe", "sgd", "cos", 10, 250, 126)
    bb = R("lightning", "mixtral", "adamw95", "const", 0, 250, 127)
    recipes = [a, b, c, d, e, f, g, h, i, j, k, m, n, o, p, q, r, s, t, u, v, w, x, y, z, aa, bb]

    specs = [rc.healthy() for rc in recipes]
    specs += [  # benign events (fault "none")
        a.benign("warmup-cut"),
        c.benign("warmup-cut"),
        h.benign("warmup-cut"),
        z.benign("warmup-cut"),
        b.benign("data-switch", 0.4),
        g.benign("data-switch", 0.5),
        s.benign("data-switch", 0.3),
        x.benign("data-switch", 0.6),
        f.benign("rewarm", 0.5),
        m.benign("rewarm", 0.6),
        t.benign("rewarm", 0.45),
        y.benign("rewarm", 0.5),
        o.benign("data-switch", 0.35),
    ]
    specs += [  # lowprec-attention
        a.lowprec(0.4, 4000),
        b.lowprec(0.3, 5000),
        c.lowprec(0.35, 4000),
        f.lowprec(0.25, 4000),
        g.lowprec(0.5, 6000),
        m.lowprec(0.3, 3000),
        d.lowprec(0.33, 1500),
        j.lowprec(0.5, 1000),
        s.lowprec(0.4, 4000),
        t.lowprec(0.55, 3000),
        x.lowprec(0.35, 3000),
        aa.lowprec(0.3, 800),
        k.lowprec(0.3, 8000),
        n.lowprec(0.3, 16000),
    ]
    specs += [  # high-lr, four shapes
        a.highlr(0.5, "growth", growth=8),
        h.highlr(0.3, "growth", growth=6),
        u.highlr(0.4, "growth", growth=8),
        y.highlr(0.35, "growth", growth=4),
        v.highlr(0.3, "growth", growth=3),
        b.highlr(0.4, "jump", factor=12),
        i.highlr(0.3, "jump", factor=8),
        o.highlr(0.5, "jump", factor=8),
        r.highlr(0.4, "jump", factor=10),
        p.highlr(0.35, "jump", factor=5),
        bb.highlr(0.3, "jump", factor=8),
        f.highlr(0.4, "jump-growth", factor=5, growth=4),
        c.highlr(0.45, "jump-growth", factor=4, growth=5),
        q.highlr(0.3, "jump-growth", factor=6, growth=3),
        x.highlr(0.4, "jump-growth", factor=4, growth=4),
        j.highlr(0.3, "jump-growth", factor=3, growth=3),
        e.highlr(0.3, "jump-growth", factor=4, growth=4),
        g.highlr(0.35, "ramp", factor=30, ramp_steps=300),
        s.highlr(0.3, "ramp", factor=25, ramp_steps=400),
        z.highlr(0.5, "ramp", factor=40, ramp_steps=1000),
        d.highlr(0.5, "ramp", factor=8, ramp_steps=200),
        m.highlr(0.6, "ramp", factor=20, ramp_steps=200),
    ]
    specs += [  # combined: lowprec + an LR shape, both weaker
        a.combined(0.3, 2000, "growth", growth=4),
        g.combined(0.4, 3000, "jump", factor=6),
        s.combined(0.35, 1200, "jump-growth", factor=2, growth=3),
        t.combined(0.3, 1200, "ramp", factor=6, ramp_steps=600),
        b.combined(0.5, 2000, "growth", growth=5),
        f.combined(0.3, 2500, "jump", factor=5),
        x.combined(0.3, 800, "growth", growth=2),
        m.combined(0.45, 2000, "jump-growth", factor=3, growth=4),
        d.combined(0.3, 800, "jump", factor=2),
        u.combined(0.3, 2500, "ramp", factor=12, ramp_steps=300),
        h.combined(0.4, 2500, "jump", factor=6),
        q.combined(0.35, 2000, "growth", growth=4),
        y.combined(0.3, 800, "ramp", factor=6, ramp_steps=800),
        i.combined(0.4, 2500, "jump-growth", factor=3, growth=3),
    ]
    return _check(specs)


# the reported part's severities, by optimizer (lowprec amplification; LR shapes as keyword sets)
_LOWPREC = {"adamw": (3000, 5000, 7000, 4000), "sgd": (700, 1200, 1000), "adafactor": (6000, 10000)}
_LR = {
    "adamw": {
        "growth": ({"growth": 5}, {"growth": 7}, {"growth": 9}),
        "jump": ({"factor": 4}, {"factor": 6}, {"factor": 8}, {"factor": 10}),
        "jump-growth": ({"factor": 4, "growth": 4}, {"factor": 6, "growth": 3}, {"factor": 3, "growth": 6}),
        "ramp": (
            {"factor": 15, "ramp_steps": 200},
            {"factor": 30, "ramp_steps": 400},
            {"factor": 50, "ramp_steps": 300},
        ),
    },
    "sgd": {
        "growth": ({"growth": 2}, {"growth": 4}),
        "jump": ({"factor": 3}, {"factor": 6}),
        "jump-growth": ({"factor": 2, "growth": 3}, {"factor": 3, "growth": 2}),
        "ramp": ({"factor": 4, "ramp_steps": 200}, {"factor": 8, "ramp_steps": 300}),
    },
}
_LR["adafactor"] = _LR["adamw"]
# Muon (holdout70, holdout71): AdamW's severities and LR shapes as they are, not tuned for it
_LOWPREC["muon"] = _LOWPREC["muon02"] = _LOWPREC["adamw"]
_LR["muon"] = _LR["muon02"] = _LR["adamw"]
# Lion (holdout72): AdamW's too.  Measured before holdout72 was fixed (README.md, "Calibration of
# the faults"; lowprec, a jump x6 and one combined fault): every lowprec severity tried does harm;
# a jump x6 does little on lion98b95 and lowers lion99's final loss (its LR of 3e-4 is cautious)
_LOWPREC["lion"], _LR["lion"] = _LOWPREC["adamw"], _LR["adamw"]
_KINDS = ("lowprec", "growth", "combined", "jump", "jump-growth", "lowprec", "ramp", "combined")


# Coarser saves get slower faults (amplification and growth rates scaled, ramps lengthened), so that
# the loss diverges a few saves after the onset, not before the first one (measured on calibration:
# combined faults diverge 50-230 steps after onset at full strength).
_SLOWER = {10: 1.0, 25: 1.0, 50: 1.0, 100: 0.5, 250: 0.3}


def _slower(lr: dict, scale: float) -> dict:
    return {
        k: round(v / scale) if k == "ramp_steps" else round(v * scale, 3) if k == "growth" else v
        for k, v in lr.items()
    }


def _fault(rc: Recipe, i: int) -> RunSpec:
    """The i-th fault of the reported part on recipe ``rc``: kind, onset and severity from fixed cycles."""
    opt, steps = rc.kw["opt"], rc.kw["steps"]
    scale = _SLOWER[rc.kw["save_every"]]
    kind = _KINDS[i % len(_KINDS)]
    frac = (0.2, 0.45, (rc.kw["warmup"] + 0.05 * steps) / steps, 0.65, 0.3, 0.55)[i % 6]  # 3rd: after warm-up
    sev = round(_LOWPREC[opt][i % len(_LOWPREC[opt])] * scale)
    if kind == "lowprec":
        return rc.lowprec(frac, sev)
    if kind == "combined":  # both weaker: half the amplification, half the LR factor's excess or growth
        shape = LR_SHAPES[i % len(LR_SHAPES)]
        lr = _LR[opt][shape][i % len(_LR[opt][shape])]
        weak = {
            k: v if k == "ramp_steps" else 1 + (v - 1) / 2 if k == "factor" else v / 2 for k, v in lr.items()
        }
        return rc.combined(frac, sev / 2, shape, **_slower(weak, scale))
    return rc.highlr(frac, kind, **_slower(_LR[opt][kind][i % len(_LR[opt][kind])], scale))


def reported() -> list[RunSpec]:
    """45 recipes (9 per cadence), each healthy; 20 benign twins; 65 fault twins.  Recipe settings come
    from fixed cycles of coprime lengths, so the combinations differ from the calibration part's."""
    return _held_out(seed0=200, shift=0)


def fresh() -> list[RunSpec]:
    """A second held-out part, generated after the rules were chosen again on the calibration and
    reported parts: the reported part's design with other seeds (300-344) and its cycles shifted,
    so that every recipe is another combination."""
    return _held_out(seed0=300, shift=4)


def final() -> list[RunSpec]:
    """A third held-out part, generated after the rules were chosen again on all three parts above
    (adding ``z_lone`` and ``min_history`` 2): other seeds (400-444), the cycles shifted by 2."""
    return _held_out(seed0=400, shift=2)


def holdout() -> list[RunSpec]:
    """A fourth held-out part, generated after the rules were chosen again on the regenerated
    final, fresh and reported parts (the output projections' step size in the classification):
    other seeds (500-544), the cycles shifted by 1."""
    return _held_out(seed0=500, shift=1)


def holdout2() -> list[RunSpec]:
    """A fifth held-out part, generated after the rules were chosen again on final, fresh and holdout
    (the step-size jump, ``ckptscan.judge.detect.jump_alarms``): other seeds (600-644), the cycles
    shifted by 3."""
    return _held_out(seed0=600, shift=3)


def holdout3() -> list[RunSpec]:
    """A sixth held-out part, generated after the jump rule was widened on final, fresh, holdout and
    holdout2 (a jump between two saves, a one-checkpoint spike, the level on a steady fall): other
    seeds (700-744), the cycles shifted by 5."""
    return _held_out(seed0=700, shift=5)


def holdout4() -> list[RunSpec]:
    """A seventh held-out part, generated after the depth rule was added on final and holdout3 (a
    collapse read against the head's settled level, ``ckptscan.judge.detect.depth_alarms``): other
    seeds (800-844), the cycles shifted by 6."""
    return _held_out(seed0=800, shift=6)


def holdout5() -> list[RunSpec]:
    """An eighth held-out part, generated after the rise rule was added on final, holdout3 and
    holdout4 (a slow step-size rise across the model, ``ckptscan.judge.detect.rise_alarms``):
    other seeds (900-944), the cycles shifted by 7."""
    return _held_out(seed0=900, shift=7)


def holdout6() -> list[RunSpec]:
    """A ninth held-out part, generated after a one-checkpoint whole-model step-size jump next to a
    collapse was made evidence of the combined fault on final, holdout3, holdout4 and holdout5
    (``ckptscan.judge.detect.model_jump``): other seeds (1000-1044), the cycles shifted by 8."""
    return _held_out(seed0=1000, shift=8)


def holdout7() -> list[RunSpec]:
    """A tenth held-out part, generated after a jump read from the third update ratio on and a
    loss that diverged unseen made anomalous were chosen on final and holdout3-6: other seeds
    (1100-1144), the cycles shifted by 9."""
    return _held_out(seed0=1100, shift=9)


def holdout8() -> list[RunSpec]:
    """An eleventh held-out part, generated after a step size that grew within one settling time
    of a collapse was read as combined, chosen on final and holdout3-7: other seeds (1200-1244),
    the cycles shifted by 10."""
    return _held_out(seed0=1200, shift=10)


def holdout9() -> list[RunSpec]:
    """A twelfth held-out part, generated after a slow fall of the heads' D2 entropy across the
    model was made a collapse, chosen on final and holdout3-8: other seeds (1300-1344), the cycles
    shifted by 11."""
    return _held_out(seed0=1300, shift=11)


def holdout10() -> list[RunSpec]:
    """A thirteenth held-out part, generated after a collapse with the output projections over
    their earlier level was read as combined, chosen on final and holdout3-8: other seeds
    (1400-1444), the cycles shifted by 12."""
    return _held_out(seed0=1400, shift=12)


def holdout11() -> list[RunSpec]:
    """A fourteenth held-out part, generated after the logits alarm was kept to layers that are
    learning (a layer asleep again wakes without one), chosen on final and holdout3-10: other
    seeds (1500-1544), the cycles shifted by 13."""
    return _held_out(seed0=1500, shift=13)


def holdout12() -> list[RunSpec]:
    """A fifteenth held-out part, generated after each run was scored on at most 40 points after
    its settling (and the awake rule withdrawn), chosen on final and holdout3-11: other seeds
    (1600-1644), the cycles shifted by 14."""
    return _held_out(seed0=1600, shift=14)


def holdout13() -> list[RunSpec]:
    """A sixteenth held-out part, generated after a jump read before a layer settled, where its
    step size stood at its running high, came to need x2 (``detect.rising``), chosen on holdout12
    trained twice and holdout11's healthy runs: other seeds (1700-1744), the cycles shifted by 15."""
    return _held_out(seed0=1700, shift=15)


def holdout14() -> list[RunSpec]:
    """A seventeenth held-out part, generated after the straddle shape came to be read before a
    layer settled where its step size is not at its running high (``Params.straddle_early``),
    chosen on holdout13, holdout12 trained twice and holdout11's healthy runs: other seeds
    (1800-1844), the cycles shifted by 16."""
    return _held_out(seed0=1800, shift=16)


def holdout15() -> list[RunSpec]:
    """An eighteenth held-out part, generated with the detection rules unchanged since holdout14
    (no rule chosen in between: the rules measured again on runs they have not seen): other seeds
    (1900-1944), the cycles shifted by 17."""
    return _held_out(seed0=1900, shift=17)


def holdout16() -> list[RunSpec]:
    """A nineteenth held-out part, generated with the detection rules still unchanged since
    holdout14, after holdout15 was judged (the spread between parts under the same rules): other
    seeds (2000-2044), the cycles shifted by 18."""
    return _held_out(seed0=2000, shift=18)


def holdout17() -> list[RunSpec]:
    """A twentieth held-out part, generated after the alarms of a layer (a head) dormant at their
    trigger point came to be dropped (``Params.asleep``), chosen on holdout12 to holdout16, on the
    low-precision, combined and SGD runs of holdout9 and holdout10 and on the SGD runs of holdout11,
    trained again: other seeds (2100-2144), the cycles shifted by 19."""
    return _held_out(seed0=2100, shift=19)


def holdout18() -> list[RunSpec]:
    """A twenty-first held-out part, generated after the asleep rule came to be applied before the
    lone-head rule (an alarm set aside is no head's company), checked on holdout12 to holdout17:
    other seeds (2200-2244), the cycles shifted by 20."""
    return _held_out(seed0=2200, shift=20)


def holdout19() -> list[RunSpec]:
    """A twenty-second held-out part, generated with the detection rules unchanged since holdout18
    (``ece7631``; only report text changed after it), after holdout18 was judged: how far two
    fresh parts differ under the same rules.  Other seeds (2300-2344), the cycles shifted by 21."""
    return _held_out(seed0=2300, shift=21)


def holdout20() -> list[RunSpec]:
    """A twenty-third held-out part, generated after the confidence table was recounted on holdout12
    to holdout19 under the rules of ``ece7631`` (and a ``healthy`` verdict next to an uncounted
    step-size jump given a path of its own), the detection rules unchanged: other seeds
    (2400-2444), the cycles shifted by 22."""
    return _held_out(seed0=2400, shift=22)


def holdout21() -> list[RunSpec]:
    """A twenty-fourth held-out part, generated with holdout20 under the same rules and confidence
    table, so that two fresh parts judge them: other seeds (2500-2544), the cycles shifted by 23."""
    return _held_out(seed0=2500, shift=23)


def holdout22() -> list[RunSpec]:
    """A twenty-fifth held-out part, generated after two jump-and-rise changes were chosen on
    holdout20 and holdout21 (trained again) and frozen: a settled layer's jump level read from its
    settled values alone, and the rise rule's reference window ending nearer the point read.
    Other seeds (2600-2644), the cycles shifted by 24."""
    return _held_out(seed0=2600, shift=24)


def holdout23() -> list[RunSpec]:
    """A twenty-sixth held-out part, generated after two jump changes were chosen on holdout20 to
    holdout22 (all seen) and frozen: a spike's next checkpoint need only not fall below the level,
    and the jump rule reads the scored blocks as well as the checkpoints.  Other seeds (2700-2744),
    the cycles shifted by 25."""
    return _held_out(seed0=2700, shift=25)


def holdout24() -> list[RunSpec]:
    """A twenty-seventh held-out part, generated after the jump rule's level was read across a
    layer's settling (a fall told by the checkpoint before it settled), chosen on holdout20 to
    holdout23 (all seen) and frozen.  Other seeds (2800-2844), the cycles shifted by 26."""
    return _held_out(seed0=2800, shift=26)


def holdout25() -> list[RunSpec]:
    """A twenty-eighth held-out part, generated after a change to the classifier was chosen on
    holdout20 to holdout24 (all seen) and frozen: a collapse in one head alone, after the step
    size grew or with it, reads as the too-large LR's.  Other seeds (2900-2944), the cycles shifted
    by 27."""
    return _held_out(seed0=2900, shift=27)


def holdout26() -> list[RunSpec]:
    """A twenty-ninth held-out part, generated after a change to the jump rule was chosen on
    holdout20 to holdout25 (all seen) and frozen: a straddled jump read before a layer settled,
    where its step size stood at its running high, once it stands past what a linear warm-up could
    add between those saves.  Other seeds (3000-3044), the cycles shifted by 28."""
    return _held_out(seed0=3000, shift=28)


def holdout27() -> list[RunSpec]:
    """A thirtieth held-out part, generated after a new reading was chosen on holdout20 to
    holdout26 (all seen) and frozen: in a run whose loss diverged before its first examined
    checkpoint, a layer's D2 entropy fallen under half its level at the settling dates the fault.
    Other seeds (3100-3144), the cycles shifted by 29."""
    return _held_out(seed0=3100, shift=29)


def holdout28() -> list[RunSpec]:
    """A thirty-first held-out part, generated after the jump rule's level on a fall was chosen
    again on holdout20 to holdout27 (all seen) and frozen: a jump read against the last value, not
    against the fall before it carried on.  Other seeds (3200-3244), the cycles shifted by 30."""
    return _held_out(seed0=3200, shift=30)


def holdout29() -> list[RunSpec]:
    """A thirty-second held-out part, generated after the rise rule's bar and its gradual guard
    were chosen again on holdout20 to holdout28 (all seen) and frozen: a rise of x1.25, no one save
    interval carrying more than the whole rise.  Other seeds (3300-3344), the cycles shifted by 31."""
    return _held_out(seed0=3300, shift=31)


def holdout30() -> list[RunSpec]:
    """A thirty-third held-out part, generated after the fall rule was chosen again on holdout20
    to holdout29 (all seen) and frozen: a fall read only where its reference window lies wholly
    after the layer settled.  Other seeds (3400-3444), the cycles shifted by 32."""
    return _held_out(seed0=3400, shift=32)


def holdout31() -> list[RunSpec]:
    """A thirty-fourth held-out part, generated after the fall rule's bar was chosen again on
    holdout20 to holdout30 (all seen) and frozen: a fall of 0.07 (was 0.1), read where its window
    lies wholly after the settling.  Other seeds (3500-3544), the cycles shifted by 33."""
    return _held_out(seed0=3500, shift=33)


def holdout32() -> list[RunSpec]:
    """A thirty-fifth held-out part, generated after the lift rule was chosen on holdout20 to
    holdout31 (all seen) and frozen: the whole model's step size x1.75 over a level it held (from
    half the steps so far to a third of that before), read with or without a settling.  Other
    seeds (3600-3644), the cycles shifted by 34."""
    return _held_out(seed0=3600, shift=34)


def holdout33() -> list[RunSpec]:
    """A thirty-sixth held-out part, generated after two changes were chosen on holdout20 to
    holdout32 (all seen) and frozen: the rise rule's gradual guard at x1.5 the rise (one save
    interval may carry up to that), and the output projections' rise at a collapse read against
    their level 1/3 to 2 settling times before (was 2/3).  Other seeds (3700-3744), the cycles
    shifted by 35."""
    return _held_out(seed0=3700, shift=35)


def holdout34() -> list[RunSpec]:
    """A thirty-seventh held-out part, generated after a change was chosen on holdout20 to
    holdout33 (all seen) and frozen: the early-fall rule's level read from the first checkpoint at
    which a layer's step size stood x0.75 under its running high (the warm-up's peak passed), where
    that comes before the settling.  Other seeds (3800-3844), the cycles shifted by 36."""
    return _held_out(seed0=3800, shift=36)


def holdout35() -> list[RunSpec]:
    """A thirty-eighth held-out part, generated with no rule changed since holdout34 (the rules of
    24aba09): a second judgement of the same frozen rules on runs generated after them.  Other
    seeds (3900-3944), the cycles shifted by 37."""
    return _held_out(seed0=3900, shift=37)


def holdout36() -> list[RunSpec]:
    """A thirty-ninth held-out part: other seeds (4000-4044), the cycles shifted by 38.  Added
    with holdout35, before any run of holdout35 was analysed; docs/detection-history.md says
    under which rules it was judged."""
    return _held_out(seed0=4000, shift=38)


def holdout37() -> list[RunSpec]:
    """A fortieth held-out part, generated after two changes were chosen on holdout35 and
    holdout36 (both seen; judged once each under the rules of 24aba09 first) and frozen: a layer's
    logits alarm with no other layer's within ``persist`` points dropped; the warm-up's peak, where
    the early-fall rule starts, read on a median of three step sizes (the second change committed
    while the part was generated, before any of its runs was analysed).  Other seeds (4100-4144),
    the cycles shifted by 39."""
    return _held_out(seed0=4100, shift=39)


def holdout38() -> list[RunSpec]:
    """A forty-first held-out part, generated with no rule changed since holdout37 (the rules of
    fa327e7): a second judgement of those frozen rules.  Other seeds (4200-4244), the cycles
    shifted by 40."""
    return _held_out(seed0=4200, shift=40)


def holdout39() -> list[RunSpec]:
    """A forty-second held-out part, generated with no rule changed since holdout37 (the rules of
    fa327e7): a third judgement of those frozen rules.  Other seeds (4300-4344), the cycles
    shifted by 41."""
    return _held_out(seed0=4300, shift=41)


def holdout40() -> list[RunSpec]:
    """A forty-third held-out part, generated with no rule changed since holdout37 (the rules of
    fa327e7): a fourth judgement of those frozen rules.  Other seeds (4400-4444), the cycles
    shifted by 42."""
    return _held_out(seed0=4400, shift=42)


def holdout41() -> list[RunSpec]:
    """A forty-fourth held-out part, generated after the straddled spike joined the jump rule's
    shapes (``Params.straddle_spike``; chosen on holdout35 to holdout40): its judgement.  Other
    seeds (4500-4544), the cycles shifted by 43."""
    return _held_out(seed0=4500, shift=43)


def holdout42() -> list[RunSpec]:
    """A forty-fifth held-out part, generated after the classifier's ``combined/jump-before`` path
    (``Params.jump_before``; chosen on holdout35 to holdout41): its judgement.  Other seeds
    (4600-4644), the cycles shifted by 44."""
    return _held_out(seed0=4600, shift=44)


def holdout43() -> list[RunSpec]:
    """A forty-sixth held-out part, generated after the blocks were bounded to leave a baseline
    window of points after the settling (``Params.block_fit``; chosen on holdout35 to holdout42):
    its judgement.  Other seeds (4700-4744), the cycles shifted by 45."""
    return _held_out(seed0=4700, shift=45)


def holdout44() -> list[RunSpec]:
    """A forty-seventh held-out part, generated after the blocks' fit was kept to where some block
    leaves the window (``detect._fit_block``; chosen on holdout35 to holdout43): its judgement.
    Other seeds (4800-4844), the cycles shifted by 46."""
    return _held_out(seed0=4800, shift=46)


def holdout45() -> list[RunSpec]:
    """A forty-eighth held-out part, generated under the rules holdout44 was judged by (no rule
    changed since), while the next candidates were measured on holdout35 to holdout44 only: it is
    not read until judged once.  Other seeds (4900-4944), the cycles shifted by 47."""
    return _held_out(seed0=4900, shift=47)


def holdout46() -> list[RunSpec]:
    """A forty-ninth held-out part, trained under the rules holdout45 was judged by (no rule changed)
    ahead of the next choice of rules, which is made on holdout35 to holdout45 only: it is not read
    until judged once.  Other seeds (5000-5044), the cycles shifted by 48."""
    return _held_out(seed0=5000, shift=48)


def holdout47() -> list[RunSpec]:
    """A fiftieth held-out part, trained after the held value before a fall joined the jump rule
    (``Params.fall_flat``, frozen at 7d6e9c6 and judged on holdout46), while the next rule was
    chosen on holdout44 to holdout46 only: it was read first when judged once under that rule
    (``Params.resettle``, bbe75e0).  Other seeds (5100-5144), the cycles shifted by 49."""
    return _held_out(seed0=5100, shift=49)


def holdout48() -> list[RunSpec]:
    """A fifty-first held-out part, trained after a layer settled inside the warm-up was made to
    settle again (``Params.resettle``, frozen at bbe75e0 and judged on holdout47), ahead of the next
    choice of rules: it is not read until judged once.  Other seeds (5200-5244), the cycles shifted
    by 50."""
    return _held_out(seed0=5200, shift=50)


def holdout49() -> list[RunSpec]:
    """A fifty-second held-out part, trained under the rules holdout48 was judged by (those of
    bbe75e0), ahead of the next choice of rules, which is made on holdout44 to holdout48 only: it
    is not read until judged once.  Other seeds (5300-5344), the cycles shifted by 51."""
    return _held_out(seed0=5300, shift=51)


def holdout50() -> list[RunSpec]:
    """A fifty-third held-out part, trained after a step-size alarm's breadth was made to need two
    layers wherever the run scores two at all (``Params.breadth_run``, frozen at 6d026f3, chosen on
    holdout44 to holdout49): it is not read until judged once under that rule.  Other seeds
    (5400-5444), the cycles shifted by 52."""
    return _held_out(seed0=5400, shift=52)


def holdout51() -> list[RunSpec]:
    """A fifty-fourth held-out part, trained after a slow fall was also read from a layer's settled
    high (``Params.fall_high``, frozen at b1e621e, chosen on holdout44 to holdout50): it is not read
    until judged once under that rule.  Other seeds (5500-5544), the cycles shifted by 53."""
    return _held_out(seed0=5500, shift=53)


def holdout52() -> list[RunSpec]:
    """A fifty-fifth held-out part, and the first of deeper models: the design of the others with
    4, 6 and 8 decoder layers in turn (every rule was chosen on 2-layer models), trained from
    889799c under the rules of 2839302 while the rule of 89644a3 was chosen on holdout44 to
    holdout51, and not read until judged once under that rule.  Other seeds (5600-5644), the
    cycles shifted by 54."""
    return _held_out(seed0=5600, shift=54, depths=(4, 6, 8))


def holdout53() -> list[RunSpec]:
    """A fifty-sixth held-out part, trained under the rules of 89644a3 after holdout52 was judged,
    and not read until judged once under the rules frozen before it is read: the design of the
    others with 2, 4 and 8 decoder layers in turn.  Other seeds (5700-5744), the cycles shifted by
    55."""
    return _held_out(seed0=5700, shift=55, depths=(2, 4, 8))


def holdout54() -> list[RunSpec]:
    """A fifty-seventh held-out part, and the first of wider models: the design of the others with
    8 query heads and 2 KV heads of 16, 16 and 4 of 8, and 8 and 8 of 16 in turn (128 wide; every
    rule was chosen on models of 4 query heads of 16, 64 wide), trained under the rules of 89644a3
    and not read until judged once under the rules frozen before it is read.  Other seeds
    (5800-5844), the cycles shifted by 56."""
    return _held_out(seed0=5800, shift=56, widths=((8, 2, 16), (16, 4, 8), (8, 8, 16)))


def holdout55() -> list[RunSpec]:
    """A fifty-eighth held-out part, trained under the rules of c282949 after holdout54 was judged,
    and not read until judged once under the rules frozen before it is read: holdout54's widths (8
    query heads and 2 KV heads of 16, 16 and 4 of 8, 8 and 8 of 16) with 2 and 4 layers, the most
    head series per run of any part (a bar for one head read alone was chosen on 8).  Other seeds
    (5900-5944), the cycles shifted by 57."""
    return _held_out(seed0=5900, shift=57, depths=(2, 4), widths=((8, 2, 16), (16, 4, 8), (8, 8, 16)))


def holdout56() -> list[RunSpec]:
    """A fifty-ninth held-out part, trained under the rules of 2b09424 after holdout55 was judged,
    and not read until judged once under the rules frozen before it is read: holdout55's design
    (8 query heads and 2 KV heads of 16, 16 and 4 of 8, 8 and 8 of 16, with 2 and 4 layers), where
    the class of a too-large LR slipped most.  Other seeds (6000-6044), the cycles shifted by 58."""
    return _held_out(seed0=6000, shift=58, depths=(2, 4), widths=((8, 2, 16), (16, 4, 8), (8, 8, 16)))


def holdout57() -> list[RunSpec]:
    """A sixtieth held-out part, trained after the rules of c28d2e9 (a shallow collapse after the
    step size grew reads high_lr) were frozen and holdout56 was judged under them, and not read until
    judged once: holdout55's design again (8/2, 16/4 and 8/8 query/KV heads, 2 and 4 layers).
    Other seeds (6100-6144), the cycles shifted by 59."""
    return _held_out(seed0=6100, shift=59, depths=(2, 4), widths=((8, 2, 16), (16, 4, 8), (8, 8, 16)))


# holdout58's, holdout59's and holdout60's widths (query heads, KV heads, head_dim): five in the cycle, the narrow
# width twice, against two depths, so that every width meets both depths
MIXED_WIDTHS = ((4, 2, 16), (8, 2, 16), (16, 4, 8), (8, 8, 16), (4, 2, 16))


def holdout58() -> list[RunSpec]:
    """A sixty-first held-out part, trained after holdout57 was judged under the rules of c28d2e9,
    and not read until judged once under the rules frozen before it is read: the narrow models'
    width (4 query heads and 2 KV heads of 16, 64 wide) and holdout55's three wider ones in turn,
    with 2 and 4 layers.  Other seeds (6200-6244), the cycles shifted by 60."""
    return _held_out(seed0=6200, shift=60, depths=(2, 4), widths=MIXED_WIDTHS)


def holdout59() -> list[RunSpec]:
    """A sixty-second held-out part, trained after holdout58 was judged under the rules of 343b3c0
    (a self-referenced step-size alarm needs the output projections to move), and not read until
    judged once under the rules frozen before it is read: holdout58's design (the narrow width and
    holdout55's three wider ones, with 2 and 4 layers).  Other seeds (6300-6344), the cycles shifted
    by 61."""
    return _held_out(seed0=6300, shift=61, depths=(2, 4), widths=MIXED_WIDTHS)


def holdout60() -> list[RunSpec]:
    """A sixty-third held-out part, trained after holdout59 was judged under the rules of 343b3c0,
    from a commit that changes no rule, and not read until judged once under the rules frozen before
    it is read: holdout58's design again.  Other seeds (6400-6444), the cycles shifted by 62."""
    return _held_out(seed0=6400, shift=62, depths=(2, 4), widths=MIXED_WIDTHS)


def holdout61() -> list[RunSpec]:
    """A sixty-fourth held-out part, trained after holdout60 was judged under the rules of 343b3c0,
    from a commit that changes no rule, and not read until judged once: the narrow 2-layer models
    (4 query and 2 KV heads of 16, 64 wide) of holdout44 to holdout51, which train in under half
    the time.  Other seeds (6500-6544), the cycles shifted by 63."""
    return _held_out(seed0=6500, shift=63)


def holdout62() -> list[RunSpec]:
    """A sixty-fifth held-out part, trained after holdout61 was judged under the rules of 343b3c0,
    from a commit that changes no rule, and not read until judged once: holdout61's narrow 2-layer
    models.  Other seeds (6600-6644), the cycles shifted by 64."""
    return _held_out(seed0=6600, shift=64)


def holdout63() -> list[RunSpec]:
    """A sixty-sixth held-out part, trained after holdout62 was judged and the fall read from the
    warm-up's peak was turned off (``Params.fall_peak`` 0), from the commit that froze that, and
    not read until judged once: holdout61's narrow 2-layer models.  Other seeds (6700-6744), the
    cycles shifted by 65."""
    return _held_out(seed0=6700, shift=65)


def holdout64() -> list[RunSpec]:
    """A sixty-seventh held-out part, trained after holdout63 was judged, from a commit that changes
    no rule since the fall read from the warm-up's peak was turned off, and not read until judged
    once: holdout61's narrow 2-layer models.  Other seeds (6800-6844), the cycles shifted by 66."""
    return _held_out(seed0=6800, shift=66)


def holdout65() -> list[RunSpec]:
    """A sixty-eighth held-out part, trained beside holdout64's reference runs, from a commit that
    changes no rule, and not read until judged once: holdout61's narrow 2-layer models.  Other seeds
    (6900-6944), the cycles shifted by 67."""
    return _held_out(seed0=6900, shift=67)


def holdout66() -> list[RunSpec]:
    """A sixty-ninth held-out part, trained with its reference runs (``holdout66ref``) after a
    reference run that shares none of a run's weights was read for the step size alone
    (``Params.unshared_steps``), from the commit that froze that, and not read until judged once:
    holdout61's narrow 2-layer models.  Other seeds (7000-7044), the cycles shifted by 68."""
    return _held_out(seed0=7000, shift=68)


def holdout67() -> list[RunSpec]:
    """A seventieth held-out part, trained after the rise rule came to count the layers it needs
    among those settled at the point read (``Params.rise_settled``), from the commit that froze
    that, and not read until judged once: holdout61's narrow 2-layer models.  Other seeds
    (7100-7144), the cycles shifted by 69."""
    return _held_out(seed0=7100, shift=69)


def holdout68() -> list[RunSpec]:
    """A seventy-first held-out part, trained after holdout67 was judged, from a commit that changes
    no rule since the rise rule's count (``Params.rise_settled``) and its floor, and not read until
    judged once: holdout61's narrow 2-layer models.  Other seeds (7200-7244), the cycles shifted by
    70."""
    return _held_out(seed0=7200, shift=70)


def holdout69() -> list[RunSpec]:
    """A seventy-second held-out part, trained after holdout68 was judged, from a commit that changes
    no rule since the rise rule's count among the settled layers and its floor of half the model's
    layers (``Params.rise_settled``), and not read until judged once: the deeper models of
    holdout52 (the narrow width, 4, 6 and 8 decoder layers in turn), where that floor, chosen from a
    synthetic 16-layer run, meets layers that settle at different steps.  Other seeds (7300-7344),
    the cycles shifted by 71."""
    return _held_out(seed0=7300, shift=71, depths=(4, 6, 8))


def holdout70() -> list[RunSpec]:
    """A seventy-third held-out part, trained after holdout69 was judged, from a commit that changes
    no rule, and not read until judged once: every recipe trains with Muon (the hidden matrices,
    router included; AdamW for the embeddings, LM head, norms and biases), an optimizer no rule was
    chosen on, whose update of a matrix is orthogonalised (every singular value about equal) where
    AdamW's follows the gradient's shape.  ``muon``: Moonshot's scaling at AdamW's LR; ``muon02``:
    Keller Jordan's, LR 0.02 (``common.MuonAdamW``).  Otherwise holdout68's design (2 layers, the
    narrow width); other seeds (7400-7444), the cycles shifted by 72."""
    return _held_out(seed0=7400, shift=72, opts=("muon", "muon02"))


def holdout71() -> list[RunSpec]:
    """A seventy-fourth held-out part, trained after holdout70 was judged, from a commit that
    changes no rule, and not read until judged once: holdout70's design again (Muon throughout,
    ``muon`` and ``muon02`` in turn, 2 layers, the narrow width), so that what Muon does to the
    verdicts is read on twice the runs.  Other seeds (7500-7544), the cycles shifted by 73."""
    return _held_out(seed0=7500, shift=73, opts=("muon", "muon02"))


def holdout72() -> list[RunSpec]:
    """A seventy-fifth held-out part, trained after holdout71 was judged, from a commit that
    changes no rule, and not read until judged once: every recipe trains with Lion (``common.Lion``:
    each entry moves by the LR against the sign of its momentum mixed with its gradient, so a
    step's size follows the LR and not the gradient's scale), an optimizer no rule was chosen on;
    ``lion99`` (LR 3e-4, weight decay 1.0, betas 0.9 / 0.99) and ``lion98b95`` (LR 1e-3, weight
    decay 0.3, betas 0.95 / 0.98) in turn.  Otherwise holdout68's design (2 layers, the narrow
    width); other seeds (7600-7644), the cycles shifted by 74.  The recipe is picked by the same
    cycle as the fault kind, so the two recipes do not get the same faults: ``lion99`` has 46 fault
    runs, every second fault among them, ``lion98b95`` 22, none of them a jump-then-growth or a
    pure ramp (holdout70's ``muon`` and ``muon02`` split the same way)."""
    return _held_out(seed0=7600, shift=74, opts=("lion99", "lion98b95"))


FUSED_PART_MODELS = ("phi3", "gptneox", "gpt2", "falcon", "mixtral")  # holdout73, holdout74


def holdout73() -> list[RunSpec]:
    """A seventy-sixth held-out part, trained after holdout72 was judged, from a commit that
    changes no rule, and not read until judged once: four of its five model families store the
    attention's query, key and value projections as one fused matrix, as no earlier part's did
    (``common.FUSED_QKV_MODELS``: Phi-3's ``qkv_proj``, GPT-NeoX's and Falcon's
    ``query_key_value``, GPT-2's Conv1D ``c_attn``), so ckptscan splits each into heads as it reads;
    GPT-2 and GPT-NeoX have a KV head per query head (``-H4k4``), GPT-2 learned positions and no
    RoPE, GPT-NeoX rotary on a quarter of each head.  The fifth is Mixtral (separate projections,
    and the part's MoE family).
    Otherwise holdout68's design (2 layers, the narrow width, its optimizers); other seeds
    (7700-7744), the cycles shifted by 75."""
    return _held_out(seed0=7700, shift=75, models=FUSED_PART_MODELS)


def holdout74() -> list[RunSpec]:
    """A seventy-seventh held-out part, trained after holdout73 was judged, from a commit that
    changes no rule, and not read until judged once: holdout73's design again (Phi-3, GPT-NeoX,
    GPT-2 and Falcon, whose attention projections are fused, and Mixtral), so that what the fused
    families do to the verdicts is read on twice the runs.  Other seeds (7800-7844), the cycles
    shifted by 76."""
    return _held_out(seed0=7800, shift=76, models=FUSED_PART_MODELS)


REFERENCE_SEED_OFFSET = 50  # a reference part's seeds: its part's seeds + 50 (6850-6894 for holdout64)


def holdout64ref() -> list[RunSpec]:
    """Reference runs for holdout64: a second healthy run of each of its 45 recipes, with another
    seed (its seed + ``REFERENCE_SEED_OFFSET``: other initial weights, other batches), as a team
    would have from an earlier run of the same configuration.  Every holdout64 run is judged
    against its recipe's reference with ``--baseline`` (``score.py --reference DIR``)."""
    return _reference(holdout64())


def holdout65ref() -> list[RunSpec]:
    """Reference runs for holdout65, as ``holdout64ref`` for holdout64 (seeds 6950-6994)."""
    return _reference(holdout65())


def holdout66ref() -> list[RunSpec]:
    """Reference runs for holdout66, as ``holdout64ref`` for holdout64 (seeds 7050-7094)."""
    return _reference(holdout66())


def _reference(part: list[RunSpec]) -> list[RunSpec]:
    healthy = [s for s in part if s.fault == "none" and s.benign is None]
    return _check([dataclasses.replace(s, seed=s.seed + REFERENCE_SEED_OFFSET) for s in healthy])


def _held_out(
    seed0: int,
    shift: int,
    depths: tuple[int, ...] = (2,),
    widths: tuple[tuple[int, int, int], ...] = ((4, 2, 16),),
    opts: tuple[str, ...] = (
        "adamw99b8",
        "adamw95-eps1e-06",
        "adamw95",
        "sgd",
        "adamw999",
        "adafactor",
        "adamw95-wd0",
    ),
    models: tuple[str, ...] = ("llama", "olmoe", "mixtral", "qwen3", "qwen2moe"),
) -> list[RunSpec]:
    frameworks = ("hf", "plain", "lightning")
    schedules = ("cos", "lin", "wsd", "const")
    warmups = (1, 5, 15, 20, 0, 10, 2, 25, 5, 15, 20)
    recs = []
    for i in range(45):
        j = i + shift  # the cycles' phase: another part, other combinations
        every = (10, 25, 50, 100, 250)[i % 5]
        fw = frameworks[j % 3]
        storage = {"hf": "full", "plain": "torch"}.get(fw, "default") if j % 7 == 3 else "default"
        model = models[j % 5 if i < 5 else (i // 5 + j) % 5]
        recs.append(
            Recipe(
                fw,
                model,
                opts[j % len(opts)],
                schedules[(i // 5 + shift) % 4],
                warmups[j % 11],
                every,
                seed0 + i,
                storage=storage,
                layers=depths[(i // 5) % len(depths)],  # every cadence (i % 5) gets each depth
                heads=widths[(i // 5) % len(widths)],  # ... and each width (query, KV heads, head_dim)
            )
        )
    specs = [rc.healthy() for rc in recs]
    for i, rc in enumerate(recs[:20]):
        event = ("warmup-cut", "data-switch", "rewarm")[i % 3]
        if event == "warmup-cut" and rc.kw["warmup"] < 30:
            event = "data-switch"
        specs.append(rc.benign(event, (0.35, 0.5, 0.6, 0.25)[i % 4]))
    specs += [_fault(rc, i + shift) for i, rc in enumerate(recs)]
    specs += [_fault(rc, i + 3 + shift) for i, rc in enumerate(recs) if i % 2 == 0]  # a second fault
    return _check(specs)


def smoke_specs() -> list[RunSpec]:
    """One tiny run per stack (60 steps, saves every 20): what the smoke test generates."""
    tiny = {"lr": 3e-3, "schedule": "cos", "warmup": 10, "steps": 60, "save_every": 20, "seed": 0}
    return [
        RunSpec(
            framework="hf",
            model="mixtral",
            opt="adamw",
            **tiny,
            fault="lowprec-attention",
            onset=25,
            severity=4000,
        ),
        RunSpec(
            framework="plain",
            model="llama",
            opt="adamw",
            **tiny,
            fault="high-lr",
            onset=30,
            lr_fault={"shape": "jump", "factor": 10},
        ),
        RunSpec(framework="lightning", model="qwen2moe", opt="adamw", **tiny, benign="data-switch", onset=30),
    ]


PARTS = {
    "calibration": calibration,
    "reported": reported,
    "fresh": fresh,
    "final": final,
    "holdout": holdout,
    "holdout2": holdout2,
    "holdout3": holdout3,
    "holdout4": holdout4,
    "holdout5": holdout5,
    "holdout6": holdout6,
    "holdout7": holdout7,
    "holdout8": holdout8,
    "holdout9": holdout9,
    "holdout10": holdout10,
    "holdout11": holdout11,
    "holdout12": holdout12,
    "holdout13": holdout13,
    "holdout14": holdout14,
    "holdout15": holdout15,
    "holdout16": holdout16,
    "holdout17": holdout17,
    "holdout18": holdout18,
    "holdout19": holdout19,
    "holdout20": holdout20,
    "holdout21": holdout21,
    "holdout22": holdout22,
    "holdout23": holdout23,
    "holdout24": holdout24,
    "holdout25": holdout25,
    "holdout26": holdout26,
    "holdout27": holdout27,
    "holdout28": holdout28,
    "holdout29": holdout29,
    "holdout30": holdout30,
    "holdout31": holdout31,
    "holdout32": holdout32,
    "holdout33": holdout33,
    "holdout34": holdout34,
    "holdout35": holdout35,
    "holdout36": holdout36,
    "holdout37": holdout37,
    "holdout38": holdout38,
    "holdout39": holdout39,
    "holdout40": holdout40,
    "holdout41": holdout41,
    "holdout42": holdout42,
    "holdout43": holdout43,
    "holdout44": holdout44,
    "holdout45": holdout45,
    "holdout46": holdout46,
    "holdout47": holdout47,
    "holdout48": holdout48,
    "holdout49": holdout49,
    "holdout50": holdout50,
    "holdout51": holdout51,
    "holdout52": holdout52,
    "holdout53": holdout53,
    "holdout54": holdout54,
    "holdout55": holdout55,
    "holdout56": holdout56,
    "holdout57": holdout57,
    "holdout58": holdout58,
    "holdout59": holdout59,
    "holdout60": holdout60,
    "holdout61": holdout61,
    "holdout62": holdout62,
    "holdout63": holdout63,
    "holdout64": holdout64,
    "holdout64ref": holdout64ref,
    "holdout65": holdout65,
    "holdout65ref": holdout65ref,
    "holdout66": holdout66,
    "holdout66ref": holdout66ref,
    "holdout67": holdout67,
    "holdout68": holdout68,
    "holdout69": holdout69,
    "holdout70": holdout70,
    "holdout71": holdout71,
    "holdout72": holdout72,
    "holdout73": holdout73,
    "holdout74": holdout74,
}
