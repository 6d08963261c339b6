"""Baselines, scores and persistent alarms: when did each monitor leave healthy behaviour?

A fault is a deviation from healthy behaviour, not a low value by itself (docs/detection.md).
``run_detection`` does eight things, each in a function of its own:

1. *What is examined* (``layer_starts``, ``head_starts``, ``dormant``): a layer is scored once it
   has left its early phase, read from its weights: its step size (``step_size``, the log of its
   median update ratio) has fallen to half its peak, or it is 4x as old as at that peak; a layer or
   head whose QK form is still below 1/20 of the largest head's is not learning yet and settles
   again after it wakes up; an alarm whose layer (head) is below that line at its trigger point
   does not count (``_drop_asleep``; applied before ``_drop_lone`` and ``_drop_lone_logits``, so
   it keeps no other head, or layer, company).  Too little examined makes the verdict
   inconclusive (``examination``).
2. *The run's own time scale* (``block_size``, ``coarsen``): checkpoints closer than a quarter of
   the run's settling time are scored in blocks (medians), so that every rule below, counted in
   points, means the same at any save cadence; and in blocks large enough that at most
   ``max_points`` points follow the settling: a run saved ten times as often is not given ten
   times the chances of a chance alarm; but small enough (``block_fit``) to leave a baseline
   ``window`` of points scored after it: a run that settles late is not left unexamined.
3. *Scores* per column (``score_self``): each ``Detector`` knows how healthy training moves its
   series: ``level`` series (D2 entropies) hover around a level; ``rate`` series (update ratios,
   ||D3||/||D2||, logits) trend, so the change of their log per point is scored, against "no
   growth" or their recent growth (``reference="flat"``), or, for update ratios, against their own
   recent change but only where they grow (``"trend"``); ``shift`` scores the update ratios' log
   level against their own trend carried forward (a step-size jump that stays).  Reference b_t =
   median of the *accepted* values among the last ``window`` points, scale = max(floor, 1.4826
   MAD); one-sided z.  Values with z > ``z_accept`` never enter later baselines.
4. *Alarms*: ``persist`` consecutive points with z > ``z``, dated at the first of them (the
   trigger, ``Alarm.index``).  Step-size alarms are ``broad``: they start only where attention's
   step size is off in enough layers (``_broad``) and, read against the run's own history, where
   the output projections' step size was not calm across layers within ``step_proj_window``
   points (``proj_calm``; a raised LR moves every update); a logits alarm counts only with another
   layer's within ``persist`` points, where two layers or more have a logits series
   (``_drop_lone_logits``).
5. *A step-size jump* (``jump_alarms``), read checkpoint by checkpoint and from the third defined
   value on, settled or not (but before the layer settled, where its step size stands at its
   running high, ``rising``, only a jump of ``jump_rising`` times: early in a run saved often the
   step size can climb by ``jump`` within one save interval with no LR jump): the step size of the
   attention q/k updates *and* of the output projections standing ``jump`` times above its level
   just before, at two checkpoints in a row (or at the two after a checkpoint that rose part way,
   where the layer has settled or its step size is not at its running high, or stands ``jump``
   times over what a linear warm-up could add across those saves, ``warmup_allowance``: a jump
   between two saves; or ``jump_spike`` times at one checkpoint, the next not below the level (``spike_stays``):
   Adam takes a jump and falls back within a long interval; or ``jump_spike`` times at the one
   after a checkpoint that rose part way (``straddle_spike``: a spike between two saves); these
   three where the saves are evenly spaced), and above anything it had since the layer settled,
   in three quarters of the layers read (two at least where two or more are).  A too-large LR that jumps moves the whole
   model at once; a warm-up rises gradually, a restart returns to a level already seen, and the
   low-precision fault leaves the output projections alone.  A shift alarm (4.) likewise counts
   only where the step size is above its settled high (``above_settled``).  A jump that stays below
   it is reported, never counted (``uncounted_jump``).  Where checkpoints are scored in blocks
   (2.), the rule reads the blocks too, and the earlier of the two readings counts
   (``jump_blocks``): an LR ramped up over a few blocks rises too little between two saves for the
   checkpoints to show a jump, and the carried-on rise of a warm-up hides it.  One checkpoint of
   such a jump (``model_jump``) is evidence for the classifier next to a collapse, never an alarm.
6. *A collapse read by its depth* (``depth_alarms``), on the checkpoints: a head's D2 entropy
   below ``depth`` of its settled level (the median of its first values examined) ``persist``
   checkpoints in a row, with another head's: the window of the level test (3.) follows a slow
   collapse down; this compares with where the head was.
7. *A slow step-size rise across the model* (``rise_alarms``), on the checkpoints: the attention
   step size *and* the output projections' ``rise`` times above their level 1/3 to 2 settling
   times before (the median there; ``rise_near``), ``persist`` checkpoints in a row, in three
   quarters of the layers, where no one save interval carried more than ``rise_gradual`` (x1.5)
   of the rise (a jump that fell back most of the way is none; one that stays is 5.'s too) and
   no restart (a dip) came before it: an LR that grows exponentially moves a few percent per save,
   under the rate test's floor, and may stay under the settled high that 5. and the shift test ask
   for.
8. *A slow fall of attention structure across the model* (``fall_alarms``), on the checkpoints:
   each layer's median over its heads of D2 entropy ``fall`` under its level 2/3 to 2 settling
   times before (7.'s span, with the window 7. had before ``rise_near``), ``persist`` checkpoints
   in a row, in three quarters of the layers, read only where that window lies wholly after the
   layer settled (``fall_whole``: a window cut at the settling holds the values a layer has just
   after it, which can stand above where it goes on): the low-precision fault can wear every head
   down a little per save without collapsing any (a model whose q/k pass through a norm), under
   the level test's window and far from 6.'s depth.  A layer also counts where its median stands
   ``fall_high`` under the highest it stood at (over three checkpoints) from ``fall_high_from``
   times its settling step on: a run that settles late has no whole window before its end; or,
   where ``fall_peak`` is set (off by default since the ``holdout63`` freeze), ``fall_peak`` under
   the highest it stood at from the checkpoint at which the warm-up's peak passed
   (``warmup_peak``) on: a fall that began while the layers settled.
9. *A step size lifted off a level it held* (``lift_alarms``), on the checkpoints, with or without
   a settling: the attention step size *and* the output projections' ``lift`` times over the level
   they held from half the steps so far to a third of that before (``LIFT_HELD``), and over the
   highest they stood at before that (``LIFT_HIGH``), ``persist`` checkpoints in a row, in three
   quarters of the layers: an LR raised soon after the warm-up on a run whose step size holds level
   keeps the layers from settling in time for 2.-4. and 7.

Reference-run baseline (``reference=`` a healthy timeline of the same recipe): x_t is compared
with the healthy run's value at the same step; the scale is the floor or the healthy run's own
step-to-step spread, whichever is larger.  Per-head series are matched to reference heads by
their early level, not by slot (``_reference_columns``); no blocks.  That holds for a reference
that shares the run's history (a twin, a branch).  One whose weights matched the run's at no
checkpoint (another seed) is read for the step-size series alone, in the run's blocks; every other
series and rule reads the run's own history (``reference_scope``).

Head-scope series whose fault acts on every head at once (update ratios) are reduced to one
series per layer first (median over heads): it is the whole layer that moves, and the median is
much quieter than any single head.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from ckptscan.monitors import DETECTORS, Detector, Role, names
from ckptscan.monitors import spec as monitor_spec


@dataclass(frozen=True)
class Params:
    z: float = 3.0  # score threshold
    z_accept: float = 2.0  # values scoring above this never enter a later baseline
    persist: int = 3  # consecutive exceeding checkpoints for an alarm
    window: int = 8  # lagged baseline window (checkpoints)
    warmup_skip: int = 1  # first defined values of a series never enter a baseline
    min_history: int = (
        2  # accepted baseline values needed before a series is scored (one point is no baseline)
    )
    extend: bool = False  # date an alarm from the stretch of scores > z_accept leading into it
    match_window: int = (
        4  # reference mode: defined values (after warm-up) that match heads to reference heads
    )
    breadth: float = 0.5  # self-referenced update-ratio alarms: share of the layers scored there whose
    #                       attention q/k update ratio must be non-normal (z > z_accept) at the trigger's
    #                       first checkpoint, two layers at least where two are scored (``_broad``; a
    #                       step size is global)
    step_proj: bool = True  # ... and only where the output projections' step size was off across layers
    #                         within ``step_proj_window`` points, or not read there (``proj_calm``; a raised
    #                         LR moves every update; False: q/k alone could start one, the rules before)
    step_proj_window: int = 2  # points either side of the alarm's first point (at most persist - 1: a
    #                            live watch confirms the alarm persist - 1 points on and reads no further)
    breadth_run: bool = True  # ... in two layers at least wherever the run scores two or more layers at
    #                           all, not only where two are scored at that checkpoint (``_broad``; False:
    #                           one layer scored alone could start one, the rules before)
    settle_drop: float = (
        0.6931471805599453  # log 2: a layer has settled once its step size fell to half its peak
    )
    settle_age: float = 4.0  # ... or once it is this many times as old (in steps) as at that peak
    resettle: float = 2.0  # a settled layer settles again where its step size stands this many times over
    #                        its early peak while a layer that has not settled stands at its highest so far,
    #                        within ``settle_age`` times that peak's age (``_resettle``; 0: off, the rules before)
    dormant_ratio: float = (
        0.05  # a layer (the median of its heads' ||M||) or head below this share of the largest
        #       head's ||M|| in the model is not learning yet (``dormant``)
    )
    block: float = 0.25  # checkpoints closer than this share of the run's settling time are scored in blocks
    max_points: int = 40  # ... and in blocks large enough that no more than this many points follow the
    #                       run's settling (0: no bound): each point is a chance of a chance alarm
    min_examined: int = 5  # points scored after the run settled: fewer cannot support "healthy"
    block_fit: bool = True  # blocks (``block``, ``max_points``) no larger than would leave a baseline
    #                         ``window`` of points scored after the run's settling, where some block does
    z_lone: float = (
        4.0  # a per-head structure alarm with no other head's alarm within persist points needs this peak
    )
    lone_growth: float = 2.5  # ... plus this times ln(head series / lone_series) in a model of more head
    #                           series (layers x query heads) than ``lone_series`` (``lone_bar``; 0: one
    #                           bar for every model, the rules before)
    lone_series: int = 8
    jump: float = 1.6  # a step-size jump (``jump_alarms``): the whole model's step size x this over its
    #                    level just before, at two checkpoints in a row (0: the rule is off)
    jump_spike: float = 2.0  # ... or one checkpoint this far over it, the next x spike_stays over it:
    spike_stays: float = 1.0  # not below it (1.2: the rules before; Adam falls back within a long interval)
    straddle_spike: bool = True  # ... or a spike straddled: one checkpoint that rose part way, the next
    #                              x jump_spike over the level (the one after not read; False: the
    #                              rules before)
    straddle_early: bool = True  # ... the straddle read before the layer settled too, where its step size is
    #                              not at its running high (``rising``; False: the rules before)
    straddle_warmup: bool = True  # ... and at its running high too, where it stands x its bar over what a
    #                                linear warm-up from step 0 could add between the saves it spans
    #                                (``warmup_allowance``; False: never there, the rules before)
    jump_rising: float = 2.0  # ... read before the layer settled while its step size stood at its running
    #                           high (``rising``): this far over it at least (0: as elsewhere, the rules before);
    #                           not for the straddled shapes with straddle_warmup, whose bar there is
    #                           their own (the straddle's below x2 where the saves it spans are less
    #                           than x1.25 apart in steps; the straddled spike's x2 at least)
    rising_unread: bool = True  # ... and where no direction can be read yet (``no_direction``: the value
    #                            at i - 1 the first one counted), read as at its running high: the
    #                            first values of a warm-up (False: not at its high, the rules of 89644a3)
    jump_blocks: bool = True  # ... read on the scored blocks too, where checkpoints are scored in blocks:
    #                           an LR ramped up over a few blocks rises too little between two saves to
    #                           jump (False: the checkpoints only, the rules before)
    fall_across_settling: bool = True  # ... a settled layer's fall read from i - 3 before it settled
    #                                    too (False: no fall read there, the rules before)
    fall_to_last: bool = True  # ... on a fall, a jump read against the last value, or, where that fell
    #                            more than x1/jump from the one before (a dip), against that one / jump
    #                            (False: against the fall before it carried on, the rules before)
    fall_flat: float = 1.05  # ... a fall read where i - 3 to i - 2 rose less than this (flat, then a fall:
    #                          ``_level_before``; 1.0: only where it fell, the rules before holdout46)
    level_settled: bool = True  # the jump rule reads a settled layer's level from the values it had since it
    #                             settled, not from its warm-up peak (False: the rules before)
    depth: float = 0.1  # a collapse (``depth_alarms``): a head's D2 entropy below this share of its
    #                     settled level, ``persist`` checkpoints in a row, with another head's (0: off)
    rise: float = 1.25  # a slow rise (``rise_alarms``): the whole model's step size x this over its
    #                    level 1/3 to 2 settling times before, ``persist`` checkpoints in a row (0: off;
    #                    1.5: the rules before)
    rise_near: float = 6.0  # ... that reference window ending RISE_SPAN / this settling times before the
    #                         point read (3: the rules before, 2/3): a fast growth is read sooner
    rise_gradual: float = 1.5  # ... and no one save interval carried more than this share of the rise (a
    #                            jump that fell back most of the way is no rise; 1.0 until the holdout33
    #                            freeze, 0.5 with rise 1.5 before that)
    rise_settled: bool = True  # ... in three quarters of the layers settled at the point read (two where two
    #                            are), and half the model's layers at least (False: three quarters of
    #                            all with a step size, the rules before holdout67: a layer whose
    #                            settling the fault held off kept the settled layers' rise unread)
    asleep: bool = True  # an alarm of a layer (a head) ``dormant`` at its trigger point does not count
    #                      (``_drop_asleep``; False: the rules before)
    fall: float = 0.07  # a slow fall (``fall_alarms``): the layers' median D2 entropy this far (of 1)
    #                    under its level 2/3 to 2 settling times before, ``persist`` checkpoints in a row (0: off;
    #                    0.1: the rules before)
    fall_whole: bool = True  # ... read only where its reference window lies wholly after the layer
    #                          settled (False: also where the settling cut it, the rules before)
    fall_high: float = 0.12  # ... or this far under the highest it stood at from ``fall_high_from``
    #                          times the layer's settling step on (``_fall_from_high``; 0: off, the rules
    #                          before the holdout51 freeze)
    fall_high_from: float = 1.5  # ... not from the settling itself: a layer's entropy can stand high
    #                              for a while just after it settled, and come back
    fall_peak: float = 0.0  # ... or this far under the highest it stood at from the end of the
    #                         warm-up's peak on (``warmup_peak``, as the early-fall rule reads it): a
    #                         fall that began before the layers settled.  0: off, since the holdout63
    #                         freeze (it read dips after the warm-up that came back); 0.2 from the
    #                         holdout52 freeze until then
    early_fall: float = 0.5  # a fall before the loss diverged, in a run examined only after that
    #                          (``early_fall_alarms``): a layer's median D2 entropy under this share of its
    #                          level at the settling (or the warm-up's end: next), at two checkpoints in a
    #                          row (0: off, the rules before)
    early_from_peak: float = 0.75  # ... that level read from the first checkpoint at which a layer's
    #                                step size stood x this under its running high (the warm-up's peak
    #                                passed, ``peak_passed``), where that comes before the settling (0:
    #                                from the settling, until the holdout34 freeze)
    peak_median: bool = True  # ... that step size read as the median of its last three values,
    #                           against the highest such median before (``_running_high``): one
    #                           save's dip in the early phase is no peak passed (False: single
    #                           values, until the holdout37 freeze)
    lift: float = 1.75  # a step size lifted off a level it held (``lift_alarms``): the whole model's
    #                     step size x this over that level, read with or without a settling (0: off)
    logits_lone: bool = True  # a layer's logits alarm (||M|| growth) with no other layer's within
    #                           ``persist`` points is dropped, in a model of two layers or more
    #                           (``_drop_lone_logits``; False: kept, until the holdout37 freeze)
    jump_before: float = 1.25  # the classifier: a collapse read alone is ``combined`` where the whole
    #                            model's step size jumped x this at one checkpoint anywhere before it,
    #                            q/k and output projections together (``detect.model_jump``;
    #                            ``classify.JUMP_BEFORE_PATH``; 0: only x``COLLAPSE_JUMP`` within the
    #                            decision window, the rules before)
    collapse_z: float = 10.0  # the classifier: a collapse that followed the step size's growth
    #                           (``combined/step-size-first``) counts as the low-precision fault's only
    #                           where it is deep: a z-scored D2 alarm peaking this high, a depth alarm
    #                           (two heads), or a layer's fall of ``collapse_fall``; shallower, it is the step
    #                           size's doing (``classify.SHALLOW_PATH``; 0: every collapse counts, the
    #                           rules before)
    collapse_fall: float = 0.2  # ... (entropy units, of 1)
    proj_near: float = 6.0  # the output projections' rise at a collapse (``projections_rise``, evidence
    #                         for the classifier) is read against their level from ``RISE_SPAN`` settling
    #                         times to 1/this of that before (3: until the holdout33 freeze)
    unshared_steps: bool = True  # a reference run whose weights matched the run's at no common
    #                              checkpoint but the first (``reference_scope``: another seed, or
    #                              the same init on other batches) scores the step-size series
    #                              alone; every other series, and every whole-model rule, reads the
    #                              run's own history (``REFERENCE_STEPS``; False: it scores every
    #                              series, the rules before 2026-12-07)


@dataclass
class Alarm:
    monitor: str
    block: str  # timeline series name (e.g. "attn.D2.entropy2", "attn_rope.D2.entropy2")
    layer: int
    head: int | None  # None: layer aggregate
    first_step: (
        int  # first checkpoint of the alarm (start of the non-normal stretch leading into the trigger)
    )
    index: int  # scored point (block) of the trigger's first checkpoint (what the classifier orders by)
    score: float  # largest score over the sustained run
    role: str
    direction: str
    confirmed_step: int | None = None  # the checkpoint that completed the persistence rule
    length: int = 0  # points the sustained excursion lasted (from the trigger on)
    trigger_step: int = 0  # the step of the trigger's first point
    test: str = ""  # the detector's mode: "level", "rate" or "shift"; "jump": ``jump_alarms``;
    #                 "depth": ``depth_alarms``; "rise": ``rise_alarms``; "fall": ``fall_alarms``;
    #                 "early-fall": ``early_fall_alarms``; "lift": ``lift_alarms``
    shape: str = ""  # test "jump": the ``JUMP_SHAPES`` shape that read it; test "fall": "high" where
    #                  only the fall from the settled high counted the layer (``Params.fall_high``),
    #                  "peak" where only the fall from the high after the warm-up's peak did
    #                  (``Params.fall_peak``)

    def as_dict(self) -> dict:
        return {
            "monitor": self.block,
            "layer": self.layer,
            "head": self.head,
            "first_alarm_step": self.first_step,
            "confirmed_step": self.confirmed_step,
            "score": round(float(self.score), 3),
            "role": self.role,
            "direction": self.direction,
            "test": self.test,
            "points": self.length,
            **({"shape": self.shape} if self.shape else {}),
        }


@dataclass
class SeriesScore:
    """Scores of one series over the timeline (NaN where not scored)."""

    z: np.ndarray
    exceed: np.ndarray  # bool


# ---------------------------------------------------------------------------------------------
# scoring one series


def _transform(x: np.ndarray, det: Detector) -> np.ndarray:
    """The scored quantity: (log) level (``level``, ``shift``), or (log) change per checkpoint
    (``rate``)."""
    x = np.asarray(x, dtype=np.float64)
    if det.log:
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), np.nan)
    if det.mode == "rate":
        d = np.full_like(x, np.nan)
        d[1:] = x[1:] - x[:-1]
        return d
    return x


SHIFT_MIN_POINTS = 4


def _detrended(win: list[tuple[int, float]], t: int) -> list[float]:
    """The window's values carried along its own trend to index ``t``: v_i + slope * (t - i), with
    slope = the median change per checkpoint between consecutive window values."""
    if len(win) < 2:
        return [a for _, a in win]
    slope = float(np.median([(b - a) / (j - i) for (i, a), (j, b) in itertools.pairwise(win)]))
    return [a + slope * (t - i) for i, a in win]


def _is_trend(det: Detector, direction: str) -> bool:
    """Scored against its own trend, growth only (and gated by breadth in ``detect``)."""
    return det.mode == "rate" and det.reference == "trend" and direction == "up"


def _sign(direction: str) -> float:
    return -1.0 if direction == "down" else 1.0


def score_self(
    x: np.ndarray, det: Detector, direction: str, p: Params = Params(), start: int = 0
) -> SeriesScore:
    """Self-referenced one-sided scores of a transformed series ``x`` (NaN = undefined).  Values
    before index ``start`` (the run had not settled) are neither scored nor enter a baseline."""
    n = len(x)
    z = np.full(n, np.nan)
    exceed = np.zeros(n, dtype=bool)
    accepted: list[tuple[int, float]] = []
    seen = 0
    trend = _is_trend(det, direction)
    for t in range(start, n):
        v = x[t]
        if not np.isfinite(v):
            continue
        seen += 1
        if seen <= p.warmup_skip:
            continue
        win = [(i, a) for (i, a) in accepted if i >= t - p.window]
        hist = [a for _, a in win]
        if det.mode == "shift":  # a trend needs a few points: none is carried forward from fewer
            hist = _detrended(win, t) if len(win) >= SHIFT_MIN_POINTS else []
        if len(hist) >= p.min_history:
            h = np.asarray(hist) if hist else np.zeros(1)
            b = float(np.median(h))
            if det.mode == "rate" and not trend:
                # reference: no change, or the run's own recent change if that is further along
                # the anomalous direction (healthy growth is not a fault)
                b = max(b, 0.0) if direction != "down" else min(b, 0.0)
            mad = 1.4826 * float(np.median(np.abs(h - np.median(h)))) if len(h) >= 3 else 0.0
            s = max(det.floor, mad)
            dev = (v - b) / s
            if direction == "both":
                zz = abs(dev)
            else:
                zz = _sign(direction) * dev
            if trend and v <= det.floor:
                # not growing by more than the noise floor: off its trend perhaps (a schedule that
                # flattens), but not too large -- never abnormal, and it enters the baseline
                zz = min(zz, 0.0)
            z[t] = zz
            exceed[t] = zz > p.z
            if zz > p.z_accept:
                continue  # not accepted: the baseline must not absorb a (slow) deviation
        accepted.append((t, float(v)))
    return SeriesScore(z, exceed)


def score_reference(
    x: np.ndarray, ref: np.ndarray, det: Detector, direction: str, p: Params = Params()
) -> SeriesScore:
    """Scores against a healthy run's series ``ref`` at the same steps (both transformed).

    Per-head series arrive paired with their reference head (``_reference_columns``)."""
    n = len(x)
    z = np.full(n, np.nan)
    exceed = np.zeros(n, dtype=bool)
    r = ref[np.isfinite(ref)]
    # the healthy run's own checkpoint-to-checkpoint spread (robust); first differences of a
    # level series, second differences of a rate series' changes would both be "noise" measures:
    # use the MAD of first differences of the reference, / sqrt(2) for one value's noise
    spread = 0.0
    if len(r) >= 4:
        dd = np.diff(r[p.warmup_skip :]) if len(r) > p.warmup_skip + 2 else np.diff(r)
        spread = 1.4826 * float(np.median(np.abs(dd - np.median(dd)))) / np.sqrt(2)
    s = max(det.floor, spread)
    seen = 0
    for t in range(n):
        if not (np.isfinite(x[t]) and np.isfinite(ref[t])):
            continue
        seen += 1
        if seen <= p.warmup_skip:
            continue
        dev = (x[t] - ref[t]) / s
        zz = abs(dev) if direction == "both" else _sign(direction) * dev
        z[t] = zz
        exceed[t] = zz > p.z
    return SeriesScore(z, exceed)


def first_sustained(exceed: np.ndarray, persist: int, start_ok: np.ndarray | None = None) -> int | None:
    """Index of the first run of ``persist`` consecutive True values (None if there is none);
    with ``start_ok`` (bool per checkpoint), the first such run that starts where it is True.

    Checkpoints where the series is undefined break a run (they cannot confirm it)."""
    ex = np.asarray(exceed, dtype=bool)
    for i in range(len(ex) - persist + 1):
        if ex[i : i + persist].all() and (start_ok is None or start_ok[i]):
            return i
    return None


def extend_back(z: np.ndarray, i: int, z_extend: float, allowed: np.ndarray | None = None) -> int:
    """First index of the stretch of consecutive scores above ``z_extend`` that ends at ``i``
    (``i`` itself when the score before it is not above, or undefined).  With ``allowed`` (bool
    per checkpoint) the stretch also stops at the first checkpoint that is not allowed."""
    while i > 0 and np.isfinite(z[i - 1]) and z[i - 1] > z_extend and (allowed is None or allowed[i - 1]):
        i -= 1
    return i


# ---------------------------------------------------------------------------------------------
# a whole timeline


def _series_for(timeline, det: Detector) -> list[str]:
    """Timeline names that a detector watches: the monitor itself and block-prefixed variants."""
    return [name for name in timeline.names() if names.same_monitor(name, det.monitor)]


def _columns(arr: np.ndarray, det: Detector) -> list[tuple[int, int | None, np.ndarray]]:
    """(layer, head or None, raw series [N]) for each column a detector scores."""
    _, n_l, n_k = arr.shape
    cols: list[tuple[int, int | None, np.ndarray]] = []
    for layer in range(n_l):
        a = arr[:, layer, :]
        if not np.isfinite(a).any():
            continue
        if det.per_head and n_k > 1:
            for h in range(n_k):
                if np.isfinite(a[:, h]).any():
                    cols.append((layer, h, a[:, h]))
        else:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                if det.log:  # median of logs = log of median for a positive series
                    agg = np.nanmedian(np.where(a > 0, a, np.nan), axis=1) if n_k > 1 else a[:, 0]
                else:
                    agg = np.nanmedian(a, axis=1) if n_k > 1 else a[:, 0]
            cols.append((layer, None, agg))
    return cols


def _reference_columns(arr: np.ndarray, ref_arr: np.ndarray, det: Detector, p: Params = Params()) -> dict:
    """(layer, head or None) -> the transformed reference series that ``arr``'s column is scored against.

    Head slots carry no meaning across runs (any permutation of a layer's heads is the same model,
    and two seeds put different heads in each slot), so each head of this run is matched, once for
    the whole run, with the reference head of the same *rank* by early level: both runs' heads are
    ordered by their median over the first ``match_window`` defined values after warm-up, and the
    k-th of this run is scored against the k-th of the reference, step by step.  A run that merely
    permutes its heads matches exactly; a head that collapses later keeps its partner (ranking per
    step would hand every head below it a new, higher partner and blame them instead).  Layer
    aggregates (medians over heads) and single-head layers compare layer with layer."""
    out = {}
    n_k = arr.shape[2]
    if not det.per_head or n_k == 1:
        for layer, head, col in _columns(ref_arr, det):
            out[(layer, head)] = _transform(col, det)
        return out
    if ref_arr.shape[2] != n_k:
        return out  # no matching possible: those columns fall back to the self-referenced baseline
    for layer in range(min(arr.shape[1], ref_arr.shape[1])):
        a = np.stack([_transform(arr[:, layer, h], det) for h in range(n_k)], axis=1)
        r = np.stack([_transform(ref_arr[:, layer, h], det) for h in range(n_k)], axis=1)
        if not np.isfinite(r).any() or not np.isfinite(a).any():
            continue
        order_a = np.argsort(_early_level(a, p), kind="stable")
        order_r = np.argsort(_early_level(r, p), kind="stable")
        for k in range(n_k):
            out[(layer, int(order_a[k]))] = r[:, order_r[k]]
    return out


def _early_level(x: np.ndarray, p: Params) -> np.ndarray:
    """Per column: the median of its first ``match_window`` defined values after ``warmup_skip``
    (+inf for a column with none, so it sorts last)."""
    out = np.full(x.shape[1], np.inf)
    for h in range(x.shape[1]):
        v = x[np.isfinite(x[:, h]), h][p.warmup_skip : p.warmup_skip + p.match_window]
        if len(v):
            out[h] = float(np.median(v))
    return out


def _align(ref_timeline, steps: np.ndarray, name: str) -> np.ndarray | None:
    """The reference run's series ``name`` at ``steps`` (NaN where it has no such step).  A series
    computed from a checkpoint and the one before it (an update ratio: the change since the last
    save) is NaN too where the reference's save before that step is not the run's: saved at
    another cadence, its changes span other intervals and are other sizes."""
    if ref_timeline is None or name not in ref_timeline:
        return None
    arr = ref_timeline.get(name)
    ref_steps = [int(s) for s in ref_timeline.steps]
    idx = {s: i for i, s in enumerate(ref_steps)}
    try:
        pair = monitor_spec(name).kind != "single"
    except KeyError:
        pair = False
    out = np.full((len(steps),) + arr.shape[1:], np.nan, dtype=np.float64)
    for j, s in enumerate(steps):
        i = idx.get(int(s))
        if i is None:
            continue
        if pair and (ref_steps[i - 1] if i else None) != (int(steps[j - 1]) if j else None):
            continue  # the two runs' changes since their last save span other intervals
        out[j] = arr[i]
    return out


SHARED_RTOL = 1e-5  # monitors of two runs on the same weights agree to rounding (where training is
#                     bit-reproducible: nondeterministic GPU kernels drift further apart)


def _weights_alone(name: str) -> bool:
    """A series computed from one checkpoint's weights alone: not from the previous checkpoint too
    (an update ratio, an increment's entropy: two runs saved at other steps differ there), nor from
    a replay batch's activations."""
    try:
        spec = monitor_spec(name)
    except KeyError:
        return False
    return spec.kind == "single" and not spec.family.startswith("act_")


def other_model(timeline, ref_timeline) -> str | None:
    """Why a reference run (``--baseline``) is not a run of this run's model: the shape its layout
    read (``MODEL_SHAPE``: layers, heads, widths, experts; a dense model against a MoE one), or,
    where a timeline carries no layout, the series both computed: one whose layers or heads differ
    in number (at the first such series), or no series in common at all; None where they agree.
    Layer k of another model is no match for this run's layer k."""
    if not timeline.names():  # nothing of this run was read: its own verdict says so
        return None
    if not ref_timeline.names():
        return "none of its checkpoints could be read"
    mine, theirs = _shape_of(timeline.meta), _shape_of(ref_timeline.meta)
    if mine and theirs and mine != theirs:
        return "another model: " + "; ".join(
            f"{mine[key]} {word} here, {theirs[key]} in the reference run"
            for key, word in MODEL_SHAPE
            if mine[key] != theirs[key]
        )
    common = [n for n in timeline.names() if n in ref_timeline]
    if not common:
        return "it has no monitor series in common with this run (another layout)"
    for name in common:
        mine, theirs = timeline.get(name).shape[1:], ref_timeline.get(name).shape[1:]
        if mine != theirs:
            return f"another model: {name} has {_shape(mine)} here, {_shape(theirs)} in the reference run"
    return None


MODEL_SHAPE = (  # the layout's config keys that make two runs the same model, in words
    ("n_layers", "layers"),
    ("n_heads", "query heads"),
    ("n_kv_heads", "KV heads"),
    ("head_dim", "head dim"),
    ("hidden_size", "hidden"),
    ("n_experts", "experts"),
)


def _shape_of(meta: dict) -> dict:
    """The model's shape as the run's layout read it (``MODEL_SHAPE``; empty where the timeline
    carries no layout); no experts reads 0."""
    config = ((meta or {}).get("layout") or {}).get("config") or {}
    if not config:
        return {}
    return {key: config.get(key) or 0 for key, _ in MODEL_SHAPE}


def _shape(shape: tuple) -> str:
    """A series' layers (and heads, where it has more than one column per layer), in words."""
    return f"{shape[0]} layers x {shape[1]} heads" if shape[1] > 1 else f"{shape[0]} layers"


def shared_until(timeline, ref_timeline) -> int | None:
    """The last common step up to which a run and its reference run (``--baseline``) held the same
    weights, as far as the monitors tell: at every common step from the first on, every series both
    computed from one checkpoint's weights (``_weights_alone``) agrees within ``SHARED_RTOL``, NaN
    and infinities included (a twin trained on the same weights and batches until its fault; a
    branch whose folder also holds the checkpoints before its fork).  None where they differ at
    their first common step (another seed, other batches, training that is not bit-reproducible, a
    branch whose folder holds only the checkpoints after its fork), or share no step or such
    series to compare."""
    names = [n for n in timeline.names() if n in ref_timeline and _weights_alone(n)]
    theirs = {n: _align(ref_timeline, np.asarray(timeline.steps), n) for n in names}
    common = {int(st) for st in ref_timeline.steps}
    last = None
    for j, st in enumerate(timeline.steps):
        if int(st) not in common:
            continue
        for n in names:
            a = np.asarray(timeline.get(n)[j], dtype=np.float64)
            b = cast(np.ndarray, theirs[n])[j]
            if a.shape != b.shape or not np.allclose(a, b, rtol=SHARED_RTOL, atol=0, equal_nan=True):
                return last
        if names:
            last = int(st)
    return last


class _Column(NamedTuple):
    det: Detector
    name: str
    layer: int
    head: int | None
    sc: SeriesScore
    self_ref: bool
    direction: str
    broad: bool


def _scored_columns(
    timeline,
    det: Detector,
    name: str,
    direction: str,
    params: Params,
    reference=None,
    starts: tuple[np.ndarray, np.ndarray] | None = None,
):
    """(layer, head or None, SeriesScore, self-referenced?) for each column of series ``name``;
    self-referenced columns are scored from their first examined index (``starts``: the layers'
    and the heads', ``layer_starts`` and ``head_starts``) on."""
    arr = timeline.get(name)
    ref_arr = _align(reference, np.asarray(timeline.steps), name)
    ref_cols = _reference_columns(arr, ref_arr, det, params) if ref_arr is not None else {}
    for layer, head, col in _columns(arr, det):
        x = _transform(col, det)
        ref = ref_cols.get((layer, head))
        self_ref = not (ref is not None and np.isfinite(ref).sum() >= 2 and _covers(ref, x))
        sc = (
            score_self(x, det, direction, params, _start(starts, layer, head))
            if self_ref
            else score_reference(x, cast(np.ndarray, ref), det, direction, params)  # not self_ref: ref is set
        )
        yield layer, head, sc, self_ref


def _covers(ref: np.ndarray, x: np.ndarray) -> bool:
    """Whether a reference column is defined wherever the run's column ``x`` is: a reference that
    ended before the run, or lacks some of its saves (saved at another cadence, a checkpoint it
    could not read), would leave those points unscored, so such a column is read against the run's
    own history instead."""
    return bool(np.all(np.isfinite(ref) | ~np.isfinite(x)))


def _start(starts: tuple[np.ndarray, np.ndarray] | None, layer: int, head: int | None) -> int:
    """A column's first examined index (``layer_starts``, ``head_starts``); a layer without update
    ratios of its own (never in a real run) follows the earliest layer."""
    if starts is None or not len(starts[0]):
        return 0
    layers, heads = starts
    if layer >= len(layers):
        return int(layers.min())
    if head is not None and layer < heads.shape[0] and head < heads.shape[1]:
        return int(heads[layer, head])
    return int(layers[layer])


_LOG_LEVEL = Detector("", "level", True, False, 0.0, "step_size")  # the log of a value, layer medians


def examined_from(
    timeline, params: Params = Params(), detectors: Sequence[Detector] = DETECTORS
) -> tuple[np.ndarray, np.ndarray]:
    """(``layer_starts``, ``head_starts``): where each layer and head is first examined."""
    layers_asleep, heads_asleep = dormant(timeline, params)
    layers = layer_starts(timeline, params, detectors, layers_asleep)
    return layers, head_starts(timeline, layers, params, heads_asleep)


def step_size(timeline, detectors: Sequence[Detector] = DETECTORS, role: str = Role.STEP_SIZE) -> np.ndarray:
    """[N, L]: each layer's step size at each checkpoint: the log of the median, over the layer's
    update-ratio series (q, k and router; each the median over its heads), of ||dW|| / ||W||
    (NaN where none is defined).  ``role``: the series of another role instead (``PROJ_STEP``:
    the output projections')."""
    monitors = dict.fromkeys(det.monitor for det in detectors if det.role == role)
    n = len(timeline.steps)
    per_layer: dict[int, list[np.ndarray]] = {}
    for m in monitors:
        for name in _series_for(timeline, dataclasses.replace(_LOG_LEVEL, monitor=m)):
            for layer, _, col in _columns(timeline.get(name), _LOG_LEVEL):
                per_layer.setdefault(layer, []).append(_transform(col, _LOG_LEVEL))
    out = np.full((n, max(per_layer, default=-1) + 1), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for layer, cols in per_layer.items():
            out[:, layer] = np.nanmedian(np.stack(cols), axis=0)
    return out


JUMP_LAYERS = (
    0.75  # share of the layers read in which the step size must have jumped (two, where 2+ are read)
)


def _layers_needed(n_read: int) -> int:
    """Of ``n_read`` layers read, how many a whole-model rule needs: ``JUMP_LAYERS`` of them, and two
    where two or more are read."""
    return max(min(2, n_read), int(np.ceil(JUMP_LAYERS * n_read)))


def _level_before(
    g: np.ndarray,
    i: np.ndarray,
    starts: np.ndarray | None = None,
    fall_across: bool = False,
    fall_floor: float | None = None,
    flat: float = 0.0,
) -> np.ndarray:
    """The level of the log step sizes ``g`` just before checkpoints ``i``: the higher of the value
    two checkpoints before and the last value carried along its own last rise (a warm-up rises, and
    decelerates: its next rise is never larger than its last; a dip of one checkpoint is covered by
    the value before it); on a fall (i - 3 > i - 2 > i - 1) the higher of the last value and the
    fall from i - 3 to i - 2 carried on, or with ``fall_floor`` the level below (the step size of
    an optimizer whose weights grow falls, and a jump is read against where it got; a dip at i - 1
    on a fall is covered by the fall before it).  Where i - 3 is undefined (the third value of a
    series whose first checkpoint has no update ratio), no fall is read: two values give the level.
    ``starts`` (per layer, the first examined checkpoint, ``layer_starts``): a layer settled by
    i - 1 reads its level from its settled values alone (i - 1 only, where i - 2 came before it
    settled): a warm-up peak is not where the settled step size stands, and the settled-high test
    (``above_settled``) reads those values too.  Where i - 3 came before it settled, no fall is
    read, unless ``fall_across`` (``Params.fall_across_settling``): i - 3 then tells a fall as
    elsewhere (the level is the higher of the last value and the fall carried on, so never above
    i - 2): right after a warm-up the step size can fall by a third per save, and the value two
    checkpoints back stands far above where it got.  ``fall_floor`` (log; ``Params.fall_to_last``:
    the jump bar): on a fall, the level is the last value instead, or the value before less
    ``fall_floor`` where the last fell more than that (a fall that steep is a dip, a restart's LR
    near zero); None: the fall carried on (the rules before).  Carried on, the fall from i - 3 to
    i - 2 stands above the last value wherever the fall steepened, and it steepens as a warm-up
    ends: a jump right after it went unread.  ``flat`` (log; ``Params.fall_flat``): i - 3 to i - 2
    counts as a fall where it rose less than this, a step size that held and then fell (0: only
    where it fell, the rules before): within the save-to-save noise a held value is no rise, and
    read as one the value at i - 2 stayed the level, though the step size had fallen from it."""
    last, before = g[i - 1], g[i - 2]
    third = g[np.maximum(i - 3, 0)]
    third = np.where((np.asarray(i) >= 3).reshape((-1,) + (1,) * (g.ndim - 1)), third, np.nan)
    if starts is not None and g.ndim == 2:  # a settled layer's level from its settled values alone
        ii = np.asarray(i).reshape(-1, 1)
        s0 = np.full(g.shape[1], g.shape[0])  # a layer without a start never settled
        k = min(len(starts), g.shape[1])
        s0[:k] = np.asarray(starts)[:k]
        s0 = s0[None, :]
        settled = ii - 1 >= s0
        before = np.where(settled & (ii - 2 < s0), last, before)
        if not fall_across:  # (with it: a fall read from i - 3 before settling too)
            third = np.where(settled & (ii - 3 < s0), np.nan, third)
    level = np.maximum(last + np.maximum(last - before, 0.0), before)
    with np.errstate(invalid="ignore"):
        falling = (last < before) & (before < third + flat)
    fell = (
        np.maximum(last, 2.0 * before - third)
        if fall_floor is None
        else np.maximum(last, before - fall_floor)
    )
    return np.where(falling, fell, level)


def fall_flat(params: Params) -> float:
    """The jump rule's tolerance for a held value before a fall (``_level_before``'s ``flat``):
    log ``params.fall_flat``, 0 at 1.0 or under."""
    return float(np.log(params.fall_flat)) if params.fall_flat > 1.0 else 0.0


def fall_floor(params: Params) -> float | None:
    """The jump rule's level on a fall (``_level_before``'s ``fall_floor``): log ``params.jump``
    with ``params.fall_to_last``, None (the fall carried on) without."""
    return float(np.log(params.jump)) if params.fall_to_last else None


# shape -> (the checkpoints after i whose values are the jump, the last checkpoint after i it reads)
JUMP_SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "jump": ((0, 1), 1),  # at i and i + 1
    "straddle": ((1, 2), 2),  # at i + 1 and i + 2 (i rose part way)
    "spike": ((0,), 1),  # at i (i + 1 not below the level)
    "straddle_spike": ((1,), 1),  # at i + 1 (i rose part way)
}
STRADDLED = ("straddle", "straddle_spike")  # the shapes that read a jump between two saves
PART_RISE = 1.25  # a straddled jump's first checkpoint rose at least this much (not noise)


def jump_score(
    g: np.ndarray,
    shape: str = "jump",
    starts: np.ndarray | None = None,
    stays: float = Params.spike_stays,
    fall_across: bool = Params.fall_across_settling,
    fall_floor: float | None = None,
    flat: float = 0.0,
) -> np.ndarray:
    """[N, L] log step sizes -> [N, L]: at checkpoint i, how far (log) the step size stands above
    its level before i (``_level_before``), read in one of four ``shape``s:

    * ``"jump"``: the values at i and i + 1 both (the smaller of the two);
    * ``"straddle"``: the values at i + 1 and i + 2 both, where the value at i already rose a
      quarter of that way, and x``PART_RISE`` at least (the LR changed between the saves i - 1 and
      i: the interval ending at i ran part of its steps at the new rate);
    * ``"spike"``: the value at i, where the value at i + 1 still stands x``stays``
      (``Params.spike_stays``: not below it) over the level (an optimizer that normalizes its
      update, Adam, takes the jump and falls back within a long save interval as its second moment
      catches up);
    * ``"straddle_spike"``: the value at i + 1, where the value at i rose part way as for the
      straddle (the spike of an LR that jumped between the saves i - 1 and i; the part-way rise
      is its second checkpoint of evidence, so the value at i + 2 is not read: Adam may have
      caught up by then).

    NaN where a value read (from i - 2 on; i - 3 only tells a fall, ``_level_before``) is
    undefined or the shape's condition fails.  ``starts``: the level of a settled layer from its
    settled values (``_level_before``); ``fall_floor``: the level on a fall (``_level_before``;
    ``jump_alarms`` passes log ``Params.jump`` where ``Params.fall_to_last``; None, the default:
    the fall carried on, the rules before); ``flat``: ``_level_before``'s (``jump_alarms`` passes
    log ``Params.fall_flat``; 0, the default: the rules before)."""
    ahead = _reads(shape)[1]
    g = np.asarray(g, dtype=np.float64)
    n = g.shape[0]
    out = np.full(g.shape, np.nan)
    if n < 3 + ahead:
        return out
    i = np.arange(2, n - ahead)
    level = _level_before(g, i, starts, fall_across, fall_floor, flat)
    ok = np.isfinite(np.stack([g[i + d] for d in range(-2, ahead + 1)])).all(axis=0)
    with np.errstate(invalid="ignore"):
        if shape == "jump":
            up = np.minimum(g[i], g[i + 1]) - level
        elif shape == "straddle":
            up = np.minimum(g[i + 1], g[i + 2]) - level
        elif shape == "straddle_spike":
            up = g[i + 1] - level
        else:  # spike
            up = g[i] - level
            ok &= g[i + 1] - level >= np.log(stays)
        if shape in STRADDLED:  # the value at i rose part way: a quarter of the way, x PART_RISE at least
            ok &= g[i] - level >= np.maximum(0.25 * up, np.log(PART_RISE))
    out[i] = np.where(ok, up, np.nan)
    return out


def above_settled(
    g: np.ndarray, starts: np.ndarray | None, shape: str = "jump", straddle_early: bool = False
) -> np.ndarray:
    """[N, L] log step sizes -> [N, L]: at checkpoint i, how far (log) the values that
    ``jump_score`` reads for ``shape`` stand above the highest value of the layer since it settled
    (``layer_starts``: from its first examined checkpoint to i - 1); +inf where the layer had not
    settled before i (nothing to compare with), except for the straddled shapes (``STRADDLED``):
    NaN there (read over the interval before the one that jumped, a warm-up that accelerates looks
    like a jump) unless ``straddle_early``
    (``jump_alarms`` then reads it where the step size is not at its running high, or past the
    warm-up's own rise, ``warmup_allowance``); NaN where
    a value read is undefined.  A restart of the schedule (cosine with warm restarts) returns the
    step size to a level the settled run has had; a too-large LR goes above."""
    read = _reads(shape)[0]  # the values read, after i
    g = np.asarray(g, dtype=np.float64)
    n, n_l = g.shape
    out = np.full(g.shape, np.nan)
    for layer in range(n_l):
        s0 = int(starts[layer]) if starts is not None and layer < len(starts) else n
        col = g[:, layer]
        high = np.full(n + 1, -np.inf)  # high[j]: the highest value since settling, before j
        for j in range(n):
            high[j + 1] = max(high[j], col[j]) if j >= s0 and np.isfinite(col[j]) else high[j]
        for i in range(n - max(read)):
            values = col[[i + d for d in read]]
            if not np.isfinite(values).all():
                continue
            if i > s0:
                out[i, layer] = values.min() - high[i]
            elif shape not in STRADDLED or straddle_early:
                out[i, layer] = np.inf
    return out


def _counted(g: np.ndarray, skip: int) -> tuple[np.ndarray, np.ndarray]:
    """([N, L], [N, L]) bool: the defined values, and those counted (the first ``skip`` defined
    values of each series set aside, as a baseline sets them aside)."""
    defined = np.isfinite(g)
    return defined, defined & (np.cumsum(defined, axis=0) > skip)


def rising(g: np.ndarray, skip: int = 1) -> np.ndarray:
    """[N, L] log step sizes -> [N, L] bool: at checkpoint i, the series stood at its running
    high just before: the value at i - 1 at or above every value before it (its first ``skip``
    defined values aside, as a baseline sets them aside; at least one such value before i - 1).
    With fewer values there is no direction to read: False.  Early in a run, a step size still
    rising (a warm-up, the first updates starting to add up)."""
    g = np.asarray(g, dtype=np.float64)
    out = np.zeros(g.shape, dtype=bool)
    if g.shape[0] < 3:
        return out
    _, counted = _counted(g, skip)
    high = np.maximum.accumulate(np.where(counted, g, -np.inf), axis=0)  # high[j]: the highest to j
    with np.errstate(invalid="ignore"):
        out[2:] = counted[1:-1] & np.isfinite(high[:-2]) & (g[1:-1] >= high[:-2])
    return out


def no_direction(g: np.ndarray, skip: int = 1) -> np.ndarray:
    """[N, L] log step sizes -> [N, L] bool: at checkpoint i, the value at i - 1 is defined but no
    value counted before it (``rising``'s count: the first ``skip`` defined values set aside) to
    read a direction from.  The first readable checkpoints of a run: ``rising`` says False there,
    which is no evidence that the warm-up is over."""
    g = np.asarray(g, dtype=np.float64)
    out = np.zeros(g.shape, dtype=bool)
    if g.shape[0] < 2:
        return out
    defined, counted = _counted(g, skip)
    before = np.cumsum(counted, axis=0)  # counted values up to and including j
    out[1:] = defined[:-1] & (before[:-1] - counted[:-1] == 0)
    return out


def _reads(shape: str) -> tuple[tuple[int, ...], int]:
    if shape not in JUMP_SHAPES:
        raise ValueError(f"unknown jump shape {shape!r} ({', '.join(JUMP_SHAPES)})")
    return JUMP_SHAPES[shape]


def warmup_allowance(steps: np.ndarray, ahead: int) -> np.ndarray:
    """[N] log: at checkpoint i, how much a linear LR warm-up from step 0 could raise the step size
    between the save before i and the save ``ahead`` after it: log(steps[i + ahead] / steps[i - 1]).
    Under such a warm-up the LR at step s is proportional to s, so between those saves it rises by
    that ratio (x2 from step 30 to 60, x1.25 from 300 to 375).  An update ratio sums the LR over
    its save interval, which rises a little more (x2.2 for 10-step saves from 30 to 60); the
    straddle's level carries the last rise on (``_level_before``), which covers that.  +inf where
    either save is missing or i - 1 is at step 0 (nothing to read)."""
    s = np.asarray(steps, dtype=np.float64)
    out = np.full(len(s), np.inf)
    for i in range(1, len(s) - ahead):
        if s[i - 1] > 0:
            out[i] = float(np.log(s[i + ahead] / s[i - 1]))
    return out


def _evenly_saved(steps: np.ndarray, ahead: int) -> np.ndarray:
    """[N] bool: the save intervals ending at i - 3 .. i + ``ahead`` (those a jump at i is read
    from) are even: the shortest longer than 0.9 of the longest."""
    gaps = np.diff(np.asarray(steps))
    even = np.zeros(len(steps), dtype=bool)
    for i in range(3, len(steps) - ahead):
        near = gaps[max(0, i - 4) : i + ahead]
        even[i] = bool(near.min() > 0.9 * near.max())
    return even


def _model_steps(timeline, detectors: Sequence[Detector] = DETECTORS) -> tuple[np.ndarray, np.ndarray]:
    """([N, L], [N, L]) log step sizes: attention's (``step_size``: q, k, router) and the output
    projections' (they move with the LR, not with the attention fault), NaN where unread."""
    g = step_size(timeline, detectors)
    go = np.full(g.shape, np.nan)
    proj = step_size(timeline, detectors, Role.PROJ_STEP)[:, : g.shape[1]]
    go[:, : proj.shape[1]] = proj
    return g, go


def _step_alarms(
    timeline,
    detectors: Sequence[Detector],
    point_of,
    i: int,
    last: int,
    layers: list[int],
    factors: np.ndarray,
    test: str,
    shapes: np.ndarray | None = None,
) -> list[Alarm]:
    """One whole-model step-size alarm per layer in ``layers``, at checkpoint ``i``, confirmed at
    ``last``, its score the layer's factor (``factors``: log, per layer; not a z)."""
    steps = np.asarray(timeline.steps)
    name = next(
        iter(_series_for(timeline, dataclasses.replace(_LOG_LEVEL, monitor="attn.q.update_ratio"))), None
    )
    point = int(point_of[i]) if point_of is not None else i
    points = int(point_of[last]) - point + 1 if point_of is not None else last - i + 1
    return [
        Alarm(
            "attn.q.update_ratio",
            name or "attn.q.update_ratio",
            layer,
            None,
            int(steps[i]),
            point,
            float(np.exp(factors[layer])),
            Role.STEP_SIZE,
            "up",
            int(steps[last]),
            points,
            int(steps[i]),
            test,
            str(shapes[layer]) if shapes is not None else "",
        )
        for layer in layers
    ]


def jump_alarms(
    timeline,
    params: Params = Params(),
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
    settled_high: bool = True,
) -> list[Alarm]:
    """A step-size jump across the whole model: the first checkpoint at which, in at least
    ``JUMP_LAYERS`` of the layers whose step size is read there (and in two of them where two or
    more are), both the layer's attention step size (``step_size``: q, k, router) and its output
    projection's (``step_size`` of the ``PROJ_STEP`` series) stand ``params.jump`` times above their
    level just before (``jump_score``; a settled layer's from its settled values, with
    ``params.level_settled``; on a fall, the last value, with ``params.fall_to_last``: two
    checkpoints in a row; or the two after one that rose part
    way; or ``params.jump_spike`` times at one checkpoint, the next x``params.spike_stays`` over the
    level at least; or, with ``params.straddle_spike``, ``params.jump_spike`` times at the one after
    a checkpoint that rose part way; these three where the saves they read are evenly spaced) and
    above anything they reached
    since the layer settled (``above_settled``; ``starts``: ``layer_starts``, checkpoint indices);
    before the layer settled and where its attention step size stood at its running high just
    before (``rising``; or, with ``params.rising_unread``, no direction could be read yet:
    ``no_direction``), ``params.jump_rising`` times at least (0: ``params.jump`` there too), and
    in the straddled shapes (read before settling only with ``params.straddle_early``) only
    their own bar (``params.jump``; ``params.jump_spike`` for the straddled spike) times over what
    a linear warm-up could add across the saves it spans
    (``warmup_allowance``, with ``params.straddle_warmup``; not at all without);
    one alarm per layer that jumped, its score the smaller of the two jump factors (not a z),
    confirmed at the checkpoint that completes the evidence. Read on the timeline given: the
    checkpoints themselves (a jump is one save interval wide, whatever the cadence), and
    ``run_detection`` reads the scored blocks too (``Params.jump_blocks``); from the third defined value on,
    before the run settles too: a jump soon after the end of the warm-up is common. Nothing to read
    without output projections (the q/k updates of a collapsing layer jump too). ``point_of``:
    checkpoint index -> scored point (the block it falls in).  ``settled_high=False``: the jump
    as read without the settled-high condition (``uncounted_jump``: evidence for the reader,
    never an alarm)."""
    if params.jump <= 0:
        return []
    g, go = _model_steps(timeline, detectors)
    steps = np.asarray(timeline.steps)
    thresholds = {
        "jump": params.jump,
        "straddle": params.jump,
        "spike": params.jump_spike,
        "straddle_spike": params.jump_spike if params.straddle_spike else 0.0,
    }
    jumped = np.zeros(g.shape, dtype=bool)
    read = np.zeros(g.shape, dtype=bool)  # the layer's step size is read at i (in some shape)
    factor = np.full(g.shape, np.nan)
    ahead = np.zeros(g.shape, dtype=int)
    read_as = np.full(g.shape, "", dtype=object)  # the shape that read the layer's jump
    at_high = rising(g, params.warmup_skip)  # the attention step size at its running high (every shape)
    if params.rising_unread:  # ... or too early in the run to tell: read as a warm-up still rising
        at_high |= no_direction(g, params.warmup_skip)
    own = starts if params.level_settled else None  # a settled layer's level from its settled values
    fl, flat = fall_floor(params), fall_flat(params)  # the level on a fall, and what counts as one
    for shape, (_, n_ahead) in JUMP_SHAPES.items():
        times = thresholds[shape]
        if times <= 0:
            continue
        qk = jump_score(g, shape, own, params.spike_stays, params.fall_across_settling, fl, flat)
        # both must have jumped (NaN where either is unread)
        f = np.minimum(
            qk, jump_score(go, shape, own, params.spike_stays, params.fall_across_settling, fl, flat)
        )
        with np.errstate(invalid="ignore"):
            hit = (qk > np.log(times)) & (f > np.log(times))
            high, high_o = (
                above_settled(g, starts, shape, params.straddle_early),
                above_settled(go, starts, shape, params.straddle_early),
            )
            # without the settled-high condition: read where it is (the straddle once settled, or
            # before settling with straddle_early, off the running high or past the warm-up's rise:
            # the condition below)
            hit &= (high > 0) & (high_o > 0) if settled_high else ~np.isnan(high) & ~np.isnan(high_o)
            if params.jump_rising > 0 and not (shape in STRADDLED and params.straddle_warmup):
                # before the layer settled, at its running high: a larger jump
                hit &= ~(np.isposinf(high) & at_high) | (f > np.log(max(times, params.jump_rising)))
            # before settling, never at the running high (a warm-up), or with straddle_warmup only
            # past the rise a linear warm-up could give
            if shape in STRADDLED and params.straddle_early:
                early = np.isposinf(high) & at_high
                if params.straddle_warmup:  # ... unless it rose past what the warm-up explains
                    allow = np.log(times) + warmup_allowance(steps, n_ahead)[:, None]
                    early &= ~(f > allow)  # f: the smaller of the two factors
                hit &= ~early
        if shape != "jump":  # one interval weighs: only where the saves were evenly spaced around it
            hit &= _evenly_saved(steps, n_ahead)[:, None]
        new = hit & ~jumped
        factor = np.where(new, f, factor)
        ahead = np.where(new, n_ahead, ahead)
        read_as[new] = shape
        jumped |= hit
        read |= np.isfinite(qk)
    for i in range(len(steps) - 1):
        n_read = int(read[i].sum())  # layers whose step size is read at i
        if n_read == 0 or jumped[i].sum() < _layers_needed(n_read):
            continue
        last = i + int(ahead[i][jumped[i]].max())  # the checkpoint that completes the evidence
        layers = np.flatnonzero(jumped[i]).tolist()
        return _step_alarms(timeline, detectors, point_of, i, last, layers, factor[i], "jump", read_as[i])
    return []


COLLAPSE_JUMP = 1.4  # a one-checkpoint whole-model jump this large near a collapse: the LR moved too


class ModelJump(NamedTuple):
    """``model_jump``'s reading, per checkpoint."""

    factor: np.ndarray  # [N] the jump factor; NaN where nothing is read
    step: np.ndarray  # [N] the checkpoint's step
    point: np.ndarray  # [N] the scored point (block) the checkpoint falls in


def model_jump(timeline, point_of=None, detectors: Sequence[Detector] = DETECTORS) -> ModelJump | None:
    """Per checkpoint, the factor by which the whole model's step size stood above its level just
    before (``_level_before``) at that checkpoint alone: the jump rule's one-checkpoint ``spike``
    read without its next checkpoint and its settled high, its level read as before
    ``Params.level_settled`` (the warm-up's values count) and ``Params.fall_to_last`` (a fall
    carried on): the attention step size and the output
    projections' both (per layer the smaller of the two factors), the factor that
    ``_layers_needed`` of the layers where both are read reach; read only where the save intervals
    it spans are even (``_evenly_saved``: an update ratio is not scaled by the interval, so one
    longer interval raises every layer at once).  NaN where not read; None where the layout names
    no output projection.  Evidence for the classifier, never an alarm: next to a D2-entropy
    collapse, a step size that jumped in every layer, the output projections too, is the LR moving
    with the fault (the low-precision fault moves the collapsing layers' q/k only).  Alone, one
    checkpoint proves nothing (``jump_alarms`` asks for two, or for the next one still above).
    ``point_of``: checkpoint index -> point."""
    g, go = _model_steps(timeline, detectors)
    if not np.isfinite(go).any():
        return None
    n = g.shape[0]
    steps = np.asarray(timeline.steps, dtype=np.int64)
    point = np.arange(n) if point_of is None else np.asarray(point_of)
    factor = np.full(n, np.nan)
    i = np.flatnonzero(_evenly_saved(steps, 0))  # from the fourth checkpoint on
    with np.errstate(invalid="ignore"):
        up = np.minimum(g[i] - _level_before(g, i), go[i] - _level_before(go, i))  # [len(i), L]
    for row, f in zip(i, up, strict=True):
        f = np.sort(f[np.isfinite(f)])[::-1]
        if len(f):
            factor[row] = float(np.exp(f[_layers_needed(len(f)) - 1]))
    return ModelJump(factor, steps, point)


RISE_SPAN = 2.0  # the rise rule's reference lies this many settling times back (the last layer's)
RISE_DIP = 1.5  # ... and no value since two such spans before stood this far below it (a restart)


def _reference_span(steps: np.ndarray, settled: list[int]) -> float:
    """How far back (in steps) the slow rules (``rise_levels``, ``fall_levels``) read their reference
    level: ``RISE_SPAN`` times the step at which the last layer settled (``settled``: checkpoint
    indices), four median save intervals at least."""
    return max(RISE_SPAN * float(steps[max(settled)]), 4 * float(np.median(np.diff(steps))))


REFERENCE_NEAR = 3.0  # the slow rules' reference window ends span / this before the point (the rise
#                       rule's: ``Params.rise_near``; the projections' at a collapse: ``Params.proj_near``)


def _reference_windows(
    col: np.ndarray,
    steps: np.ndarray,
    s0: int,
    span: float,
    persist: int,
    near: float = REFERENCE_NEAR,
    whole: bool = False,
):
    """The slow rules' readings of ``col``: per checkpoint i from ``s0`` on whose values at
    i .. i + persist - 1 are all defined and whose reference window (from ``span`` to ``span`` /
    ``near`` steps before i (the fall rule: ``REFERENCE_NEAR``; the rise rule: ``Params.rise_near``;
    ``projections_over``: ``Params.proj_near``), from ``s0`` on; steps ascend) holds two defined
    values at least, yields (i, those values, the reference's median, the index the window starts
    at).  ``whole``: only where the window lies wholly at or after ``s0`` (``span`` steps before i
    at or after its step)."""
    for i in range(max(s0, 0), len(col) - persist + 1):
        now = col[i : i + persist]
        if whole and steps[i] - span < steps[s0]:  # (i >= s0 here, so s0 indexes a save)
            continue
        j0 = max(s0, int(np.searchsorted(steps, steps[i] - span, side="left")))
        j1 = int(np.searchsorted(steps, steps[i] - span / near, side="right"))
        vals = col[j0:j1][np.isfinite(col[j0:j1])]
        if len(vals) >= 2 and np.isfinite(now).all():
            yield i, now, float(np.median(vals)), j0


def _slow_rise(
    col: np.ndarray,
    steps: np.ndarray,
    s0: int,
    span: float,
    persist: int,
    near: float,
    gradual: float,
) -> np.ndarray:
    """[N] log rise of one layer's log step size ``col`` at each checkpoint i: the lowest of its
    values at i .. i + persist - 1 less its reference level (the median of the values from
    ``span`` to ``span`` / ``near`` steps before i, from its first examined checkpoint ``s0`` on, two
    of them at least), where the rise was gradual (from the first checkpoint of the reference window
    to i + persist - 1, no step from one defined value to the next rose more than ``gradual``
    (``Params.rise_gradual``) of it: an undefined value does not hide a jump) and came without a
    restart (nothing from ``2 span`` before i on stood ``RISE_DIP`` below the reference); NaN
    elsewhere."""
    out = np.full(len(col), np.nan)
    for i, now, ref, j0 in _reference_windows(col, steps, s0, span, persist, near):
        rise = float(now.min()) - ref
        if rise <= 0:
            continue
        # save to save over the values read (an undefined one between two: one interval across it)
        seg = col[j0 : i + persist]
        steepest = float(np.max(np.diff(seg[np.isfinite(seg)])))
        jd = max(s0, int(np.searchsorted(steps, steps[i] - 2 * span)))
        lowest = float(np.nanmin(col[jd:i]))  # holds the reference values: never all undefined
        if steepest > gradual * rise or lowest < ref - np.log(RISE_DIP):
            continue
        out[i] = rise
    return out


def rise_levels(
    timeline,
    params: Params = Params(),
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """([N, L], need [N]): per checkpoint and layer, the log rise the rise rule reads (``rise_alarms``):
    the smaller of the attention step size's and the output projections' ``_slow_rise`` over their
    level ``RISE_SPAN`` settling times to 1/``params.rise_near`` of that before (the median there; the settling
    time: the step at which the last layer to settle did, ``starts``: ``layer_starts``; the span
    at least four median save intervals), lowest over ``params.persist`` checkpoints; NaN where either is
    unread or did not rise so.  ``need``: per checkpoint, the layers that must rise together there:
    with ``params.rise_settled``, ``JUMP_LAYERS`` of the layers with a step size that have settled
    by it (two where two or more have), and half of all the layers with a step size at least (in a
    2-layer model, one where one has settled); without, ``JUMP_LAYERS`` of all with a step size (two
    where two or more have); 0 where none has one."""
    g, go = _model_steps(timeline, detectors)
    steps = np.asarray(timeline.steps, dtype=np.float64)
    n, n_layers = g.shape
    rise = np.full(g.shape, np.nan)
    if starts is None:
        starts = layer_starts(timeline, params, detectors)
    # per layer, the checkpoint it settled at (n: never, or no settling given for it)
    begins = np.array([int(starts[layer]) if layer < len(starts) else n for layer in range(n_layers)])
    settled = [int(s) for s in begins if s < n]
    if n < 2 or not settled:
        return rise, np.zeros(n, dtype=int)
    span = _reference_span(steps, settled)
    persist = max(1, params.persist)
    with_step = np.isfinite(g).any(axis=0)
    total = int(with_step.sum())
    for layer in np.flatnonzero(with_step & np.isfinite(go).any(axis=0)).tolist():
        s0 = int(begins[layer])
        # both must have risen: NaN (no rise read) in either is NaN here
        rise[:, layer] = np.minimum(
            _slow_rise(g[:, layer], steps, s0, span, persist, params.rise_near, params.rise_gradual),
            _slow_rise(go[:, layer], steps, s0, span, persist, params.rise_near, params.rise_gradual),
        )
    if not params.rise_settled:
        return rise, np.full(n, _layers_needed(total))
    # a layer counts from the checkpoint it settled at (one that never settled, never): a fault that
    # raises the step size before a layer settles holds that layer's settling off (its step size
    # sets a later peak), and must not keep the layers settled before it from being read; never
    # fewer than half the model's layers with a step size (a deep model whose first layer settled
    # long before the others is not read from that layer alone)
    read = with_step[None, :] & (begins[None, :] <= np.arange(n)[:, None])
    half = -(-total // 2)
    return rise, np.array([max(_layers_needed(int(c)), half) for c in read.sum(axis=1)])


def rise_alarms(
    timeline,
    params: Params = Params(),
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
) -> list[Alarm]:
    """A step size rising slowly across the whole model: the first checkpoint at which, in the
    layers ``rise_levels`` needs, both the attention step size (``step_size``: q, k, router) and
    the output projections' stand ``params.rise`` times above their level ``RISE_SPAN`` settling
    times to 1/``params.rise_near`` of that before, at ``params.persist`` checkpoints in a row, where
    that rise was gradual and no restart came before it (``_slow_rise``).  One alarm per layer that rose, its score the
    rise factor (not a z), confirmed at the last of those checkpoints.  After it settles, a
    healthy run's step size falls or holds (the LR decays, the weights grow); an LR that grows
    exponentially raises it, a few percent per save, too slowly for the rate test's per-point
    change and too low for the shift test's settled high.  A jump is the jump rule's; a restart
    starts from a dip; the low-precision fault leaves the output projections alone.  Nothing to
    read without output projections."""
    if params.rise <= 0:
        return []
    rise, need = rise_levels(timeline, params, detectors, starts)
    return _first_across(timeline, detectors, point_of, rise, need, params.rise, params.persist, "rise")


def _first_across(
    timeline,
    detectors: Sequence[Detector],
    point_of,
    factors: np.ndarray,
    need: int | np.ndarray,
    bar: float,
    persist: int,
    test: str,
) -> list[Alarm]:
    """The whole-model step-size alarms (``_step_alarms``) at the first checkpoint where ``need``
    layers' log ``factors`` ([N, L], NaN: unread) reach ``bar`` (a factor), confirmed ``persist`` -
    1 checkpoints later (the factors read the lowest of that many: all of them are there).  ``need``:
    one count, or one per checkpoint (``rise_levels``); 0 reads nothing there."""
    with np.errstate(invalid="ignore"):
        over = factors >= np.log(bar)
    needs = np.broadcast_to(np.asarray(need), (len(factors),))
    for i in range(len(factors)):
        if needs[i] == 0 or over[i].sum() < needs[i]:
            continue
        layers = np.flatnonzero(over[i]).tolist()
        return _step_alarms(
            timeline, detectors, point_of, i, i + max(1, persist) - 1, layers, factors[i], test
        )
    return []


LIFT_SPAN = 0.5  # the lift rule's level: the values from this share of the steps so far before a
#                  checkpoint to a third of that before it
LIFT_HELD = 0.1  # ... where the later half of those values stood no more than this (log) over the
#                  earlier half's (the median of each): a level held, not a warm-up still rising
LIFT_HIGH = 0.1  # ... and where the values read stand this far (log) over the highest the step size
#                  stood at before that window: a new high, not an LR cut and back, or a warm restart


def _median3(col: np.ndarray) -> np.ndarray:
    """[N]: at each checkpoint with a defined value, the median of the last three defined values up
    to it (NaN before the third, and where ``col`` is undefined)."""
    out = np.full(len(col), np.nan)
    vals: list[float] = []
    for i in range(len(col)):
        if np.isfinite(col[i]):
            vals.append(float(col[i]))
            if len(vals) >= 3:
                out[i] = float(np.median(vals[-3:]))
    return out


def _running_high(col: np.ndarray) -> np.ndarray:
    """[N]: at each checkpoint i, the highest value ``col`` stood at before i, read over three
    checkpoints (the highest median of three defined values in a row before i, ``_median3``; -inf
    where none): one noisy save does not make a high."""
    m = _median3(col)
    return _before(np.where(np.isfinite(m), m, -np.inf))


def _before(x: np.ndarray) -> np.ndarray:
    """[N] or [N, L]: at each i, the highest of ``x`` before i along the first axis (-inf at the
    first)."""
    high = np.full(np.shape(x), -np.inf)
    high[1:] = np.maximum.accumulate(x, axis=0)[:-1]
    return high


def _lift(col: np.ndarray, steps: np.ndarray, persist: int) -> np.ndarray:
    """[N] log lift of one layer's log step size ``col`` at each checkpoint i: the lowest of its
    values at i .. i + persist - 1 less the level it held before (the higher of the medians of the
    earlier and the later half of its defined values from ``LIFT_SPAN`` times step i to a third of
    that before i, three of them at least), where that level held (the later half's median no more
    than ``LIFT_HELD`` over the earlier half's) and those values stand at a new high (``LIFT_HIGH``
    over the highest the series stood at before that window, ``_running_high``); NaN elsewhere.  No
    settling is needed: a warm-up is still rising through that window; an LR cut and brought back,
    or one that decayed and came back (a warm restart), returns to a level it had, not over it."""
    out = np.full(len(col), np.nan)
    high = _running_high(col)
    for i in range(1, len(col) - persist + 1):
        now = col[i : i + persist]
        if not np.isfinite(now).all():
            continue
        span = LIFT_SPAN * float(steps[i])
        j0 = int(np.searchsorted(steps, steps[i] - span, side="left"))
        if float(now.min()) < high[j0] + LIFT_HIGH:
            continue
        j1 = int(np.searchsorted(steps, steps[i] - span / REFERENCE_NEAR, side="right"))
        vals = col[j0:j1][np.isfinite(col[j0:j1])]
        if len(vals) < 3:
            continue
        half = len(vals) // 2
        early, late = float(np.median(vals[:half])), float(np.median(vals[half:]))
        if late - early > LIFT_HELD:
            continue
        out[i] = float(now.min()) - max(early, late)
    return out


def lift_levels(
    timeline, params: Params = Params(), detectors: Sequence[Detector] = DETECTORS
) -> tuple[np.ndarray, int]:
    """([N, L], need): per checkpoint and layer, the log lift the lift rule reads (``lift_alarms``):
    the smaller of the attention step size's and the output projections' ``_lift``, lowest over
    ``params.persist`` checkpoints; NaN where either is unread.  ``need``: ``JUMP_LAYERS`` of the
    layers with a step size (two where two or more have), one count for the whole run: the lift
    rule reads before the layers settle."""
    g, go = _model_steps(timeline, detectors)
    steps = np.asarray(timeline.steps, dtype=np.float64)
    lift = np.full(g.shape, np.nan)
    persist = max(1, params.persist)
    with_step = np.isfinite(g).any(axis=0)
    for layer in np.flatnonzero(with_step & np.isfinite(go).any(axis=0)).tolist():
        lift[:, layer] = np.minimum(_lift(g[:, layer], steps, persist), _lift(go[:, layer], steps, persist))
    return lift, _layers_needed(int(with_step.sum()))


def lift_alarms(
    timeline, params: Params = Params(), point_of=None, detectors: Sequence[Detector] = DETECTORS
) -> list[Alarm]:
    """A step size lifted off a level it held, across the whole model: the first checkpoint at
    which, in the layers ``lift_levels`` needs, both the attention step size (q, k, router) and the
    output projections' stand ``params.lift`` times over the level they held from half the steps
    so far to a third of that before, at ``params.persist`` checkpoints in a row.  One alarm per
    layer lifted, its score the factor (not a z), confirmed at the last of those checkpoints.
    Unlike the rise rule (``rise_alarms``), it reads before the run settled: an LR raised soon
    after the warm-up keeps the step size from ever falling, so the layers do not settle before the
    loss diverges.  A warm-up is still rising through the window (no level held); after it, a
    healthy run's step size holds or falls; a restart comes back to the level it left; the
    low-precision fault leaves the output projections alone.  Nothing to read without output
    projections."""
    if params.lift <= 0:
        return []
    lift, need = lift_levels(timeline, params, detectors)
    return _first_across(timeline, detectors, point_of, lift, need, params.lift, params.persist, "lift")


DEPTH_MONITOR = "attn.D2.entropy2"  # the spectral entropy (alpha 2) of D2, / log h
DEPTH_REF = 5  # a head's settled level: the median of its first this many values examined


def _slow_fall(
    col: np.ndarray, steps: np.ndarray, s0: int, span: float, persist: int, whole: bool = False
) -> np.ndarray:
    """[N] fall of one layer's median D2 entropy ``col`` at each checkpoint i: its reference level
    (the median of the values from ``span`` to ``span`` / 3 steps before i, from its first
    examined checkpoint ``s0`` on, two of them at least) less the highest of its values at
    i .. i + persist - 1; NaN where those are not all defined or the reference is not there, or,
    with ``whole`` (``Params.fall_whole``), where the window reached back before ``s0``."""
    out = np.full(len(col), np.nan)
    for i, now, ref, _ in _reference_windows(col, steps, s0, span, persist, whole=whole):
        out[i] = ref - float(now.max())
    return out


def projections_over(
    go: np.ndarray, steps: np.ndarray, starts: np.ndarray, near: float = Params.proj_near
) -> np.ndarray:
    """[N]: per checkpoint, the log factor by which the output projections' step size (``go``,
    [N, L] log) stands above its level ``RISE_SPAN`` settling times to 1/``near`` of that before
    (``Params.proj_near``; the median there, once the layer settled, one checkpoint), the
    factor that ``_layers_needed`` of the layers with a projection reach (counted over the model,
    as the rise rule counts: a layer not settled yet, or with no reference yet, reads nothing and
    counts against); NaN where fewer are read."""
    steps = np.asarray(steps, dtype=np.float64)
    n, n_layers = go.shape
    out = np.full(n, np.nan)
    settled = [int(s) for s in np.asarray(starts)[:n_layers] if s < n]
    if n < 2 or not settled:
        return out
    span = _reference_span(steps, settled)
    up = np.full(go.shape, np.nan)
    with_proj = np.flatnonzero(np.isfinite(go).any(axis=0)).tolist()
    for layer in with_proj:
        s0 = int(starts[layer]) if layer < len(starts) else n
        for i, now, ref, _ in _reference_windows(go[:, layer], steps, s0, span, 1, near):
            up[i, layer] = float(now[0]) - ref  # the value less its reference
    need = _layers_needed(len(with_proj))
    for i in range(n):
        f = np.sort(up[i][np.isfinite(up[i])])[::-1]
        if len(f) >= need:
            out[i] = float(f[need - 1])
    return out


def projections_rise(
    timeline,
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
    near: float = Params.proj_near,
) -> ModelJump | None:
    """Per checkpoint, the factor by which the output projections' step size stands above where it
    stood 1/``near`` (``Params.proj_near``) to 2 settling times before, across the model
    (``projections_over``); NaN where not
    read; None where the layout names no output projection.  Evidence for the classifier, never an
    alarm: after the run settles, a healthy run's step size falls or holds, and the low-precision
    fault leaves the projections alone, so projections above their earlier level at a collapse are
    an LR that grew with it.  ``point_of``: checkpoint index -> point."""
    _, go = _model_steps(timeline, detectors)
    if not np.isfinite(go).any():
        return None
    n = go.shape[0]
    steps = np.asarray(timeline.steps, dtype=np.int64)
    if starts is None:
        starts = layer_starts(timeline, detectors=detectors)
    point = np.arange(n) if point_of is None else np.asarray(point_of)
    return ModelJump(np.exp(projections_over(go, steps, starts, near)), steps, point)


def _fall_from_high(col: np.ndarray, start: int, persist: int) -> np.ndarray:
    """[N] fall of one layer's median D2 entropy ``col`` at each checkpoint i: the highest it stood
    at from checkpoint ``start`` up to i, read over three checkpoints (the highest median of three
    defined values in a row, ``_median3``, the values before ``start`` left out), less the highest
    of its values at i .. i + persist - 1; NaN where those are not all defined or no such high is
    there yet."""
    n = len(col)
    out = np.full(n, np.nan)
    if start >= n:
        return out
    tail = np.full(n, np.nan)
    tail[start:] = col[start:]
    m = _median3(tail)
    high = np.fmax.accumulate(np.where(np.isfinite(m), m, -np.inf))
    for i in range(start, n - persist + 1):
        now = col[i : i + persist]
        if np.isfinite(now).all() and np.isfinite(high[i]):
            out[i] = high[i] - float(now.max())
    return out


def fall_levels(
    timeline,
    params: Params = Params(),
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
    reading: str = "window",
) -> list[tuple[str, np.ndarray, int]]:
    """Per D2-entropy series (``DEPTH_MONITOR``; a layout with a RoPE part has two): (name,
    [N, L] falls, need): per checkpoint and layer, how far the layer's median D2 entropy over its
    heads stands under its level ``RISE_SPAN`` settling times to a third of that before (the
    median there; the settling time as for ``rise_levels``), the least fall over
    ``params.persist`` checkpoints (``_slow_fall``); NaN where unread, or with
    ``params.fall_whole`` where that window reached back before the layer settled; with ``reading``
    "high", its level is the highest it stood at from ``params.fall_high_from`` times its settling
    step on, over three checkpoints (``_fall_from_high``), less the highest over ``params.persist``
    checkpoints as well; with "peak", from the checkpoint at which the warm-up's peak passed
    (``warmup_peak``) on, the same way.  ``need``: the layers that must fall together,
    ``JUMP_LAYERS`` of those read (two where two or more are)."""
    det = next((d for d in detectors if d.monitor == DEPTH_MONITOR), None)
    if det is None:
        return []
    steps = np.asarray(timeline.steps, dtype=np.float64)
    n = len(steps)
    if starts is None:
        starts = layer_starts(timeline, params, detectors)
    p0 = warmup_peak(timeline, params, detectors) if reading == "peak" else n
    out = []
    for name in _series_for(timeline, det):
        arr = np.asarray(timeline.get(name), dtype=np.float64)
        n_layers = arr.shape[1]
        settled = [int(s) for s in np.asarray(starts)[:n_layers] if s < n]
        if n < 2 or not settled:
            continue
        span = _reference_span(steps, settled)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a checkpoint with no head read
            med = np.nanmedian(arr.reshape(n, n_layers, -1), axis=2)
        fall = np.full(med.shape, np.nan)
        read = np.isfinite(med).any(axis=0)
        for layer in np.flatnonzero(read).tolist():
            s0 = int(starts[layer]) if layer < len(starts) else n
            if reading == "high":
                s1 = n if s0 >= n else int(np.searchsorted(steps, params.fall_high_from * steps[s0]))
                fall[:, layer] = _fall_from_high(med[:, layer], s1, max(1, params.persist))
            elif reading == "peak":
                fall[:, layer] = _fall_from_high(med[:, layer], p0, max(1, params.persist))
            else:
                fall[:, layer] = _slow_fall(
                    med[:, layer], steps, s0, span, max(1, params.persist), params.fall_whole
                )
        out.append((name, fall, _layers_needed(int(read.sum()))))
    return out


def fall_alarms(
    timeline,
    params: Params = Params(),
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
) -> list[Alarm]:
    """Attention structure falling slowly across the whole model: the first checkpoint at which,
    in the layers ``fall_levels`` needs, the median of the layer's heads' D2 spectral entropy
    stands ``params.fall`` (of its range, 0 to 1) under its level ``RISE_SPAN`` settling times to a
    third of that before, at ``params.persist`` checkpoints in a row (with ``params.fall_whole``,
    where that window lies wholly after the layer settled).  One alarm per layer that
    fell (role ``structure``, head None), its score the fall (entropy units, not a z), confirmed at
    the last of those checkpoints; the earliest of the series where there are two.  The
    low-precision fault can wear every head's structure down a little per save (a model with
    q/k norms: no head collapses): the level test's window follows it, and no head reaches the
    depth rule's tenth.  A healthy run's heads hover once settled.

    With ``params.fall_high``, a layer also counts where its median stands that far under the
    highest it stood at from ``params.fall_high_from`` times its settling step on (``fall_levels``
    with ``reading="high"``), at the same checkpoints: a run that settles after a third of its
    length never has a window wholly after the settling.  Such an alarm's ``shape`` is "high" (its
    score that fall) where only this reading counted the layer.

    With ``params.fall_peak``, a layer counts too where its median stands that far under the
    highest it stood at from the checkpoint at which the warm-up's peak passed (``warmup_peak``:
    the first at which some layer's step size passed its peak, one checkpoint for the whole run)
    on (``reading="peak"``): a fall that began while the layers settled, which the readings above
    start too late to see (each starts at or after a layer's settling; this start usually comes
    before the settling, but is not held to it).  Like them it reads only where some layer
    settled.  Its bar is higher: between the warm-up's end and the settling a healthy layer's
    entropy still moves.  Such an alarm's ``shape`` is "peak" where only this reading counted it."""
    if params.fall <= 0 and params.fall_high <= 0 and params.fall_peak <= 0:
        return []
    steps = np.asarray(timeline.steps)
    persist = max(1, params.persist)
    if starts is None:  # the settlings the readings start from (or need), read once
        starts = layer_starts(timeline, params, detectors)
    # the readings in use, in the order that names an alarm's shape: a layer's score and shape are
    # those of the first reading that counted it
    readings = [
        (reading, shape, bar)
        for reading, shape, bar in (
            ("window", "", params.fall),
            ("high", "high", params.fall_high),
            ("peak", "peak", params.fall_peak),
        )
        if bar > 0
    ]
    levels = [fall_levels(timeline, params, detectors, starts, reading=reading) for reading, _, _ in readings]
    best: list[Alarm] = []
    for series in zip(*levels, strict=True):  # one D2-entropy series, read every way in use
        name, _, need = series[0]
        with np.errstate(invalid="ignore"):
            crossed = np.stack(
                [fall >= bar for (_, fall, _), (_, _, bar) in zip(series, readings, strict=True)]
            )
        fell = np.asarray(crossed.any(axis=0))
        first: np.ndarray = crossed.argmax(axis=0)  # [N, L] the first reading that counted the layer
        for i in range(len(steps)):
            if need == 0 or fell[i].sum() < need:
                continue
            if best and best[0].first_step <= int(steps[i]):
                break
            last = i + persist - 1
            point = int(point_of[i]) if point_of is not None else i
            points = int(point_of[last]) - point + 1 if point_of is not None else persist
            best = [
                Alarm(
                    DEPTH_MONITOR,
                    name,
                    layer,
                    None,
                    int(steps[i]),
                    point,
                    float(series[first[i, layer]][1][i, layer]),
                    Role.STRUCTURE,
                    "down",
                    int(steps[last]),
                    points,
                    int(steps[i]),
                    "fall",
                    readings[first[i, layer]][1],
                )
                for layer in np.flatnonzero(fell[i]).tolist()
            ]
            break
    return best


def depth_alarms(
    timeline,
    params: Params = Params(),
    point_of=None,
    heads: np.ndarray | None = None,
    detectors: Sequence[Detector] = DETECTORS,
) -> list[Alarm]:
    """A collapse read by its depth, whatever its pace: a head whose D2 spectral entropy
    (``DEPTH_MONITOR``) stands below ``params.depth`` of its settled level (the median of its
    first ``DEPTH_REF`` values examined, from ``heads``: ``head_starts``, checkpoint indices;
    ``examined_from``'s where not given) at ``params.persist`` consecutive checkpoints (an
    undefined value breaks the run), where another head's does less than ``persist`` points
    apart (``point_of``: checkpoint index -> scored point).  The level test scores each value
    against a window of recent ones, which a slow collapse drags down with it; this one compares
    with where the head was once the run settled.  One alarm per head (the earliest of its series:
    a layout with a RoPE part has two per head, which count as one), dated at the first of its
    checkpoints below, confirmed at the last; its score is the fall (settled level over the
    highest of those values), not a z."""
    if params.depth <= 0:
        return []
    det = next((d for d in detectors if d.monitor == DEPTH_MONITOR), None)
    if det is None:
        return []
    if heads is None:
        heads = examined_from(timeline, params, detectors)[1]
    steps = np.asarray(timeline.steps)
    n, persist = len(steps), max(1, params.persist)
    found: list[Alarm] = []
    for name in _series_for(timeline, det):
        arr = np.asarray(timeline.get(name), dtype=np.float64)
        for layer in range(arr.shape[1]):
            for head in range(arr.shape[2]):
                col = arr[:, layer, head]
                start = int(heads[layer, min(head, heads.shape[1] - 1)]) if layer < heads.shape[0] else n
                idx = [i for i in range(start, n) if np.isfinite(col[i])]
                if len(idx) < DEPTH_REF + persist:
                    continue
                ref = float(np.median(col[idx[:DEPTH_REF]]))
                if not ref > 0:
                    continue
                vals = col[idx]
                below = vals < params.depth * ref
                for k in range(DEPTH_REF, len(idx) - persist + 1):
                    if idx[k + persist - 1] - idx[k] == persist - 1 and below[k : k + persist].all():
                        i, last = idx[k], idx[k + persist - 1]
                        point = int(point_of[i]) if point_of is not None else i
                        points = int(point_of[last]) - point + 1 if point_of is not None else last - i + 1
                        fall = ref / max(float(vals[k : k + persist].max()), 1e-12)
                        found.append(
                            Alarm(
                                det.monitor,
                                name,
                                layer,
                                head,
                                int(steps[i]),
                                point,
                                fall,
                                det.role,
                                "down",
                                int(steps[last]),
                                points,
                                int(steps[i]),
                                "depth",
                            )
                        )
                        break
    first: dict[tuple[int, int | None], Alarm] = {}  # per head, its earliest series' alarm
    for a in sorted(found, key=lambda a: a.first_step):
        first.setdefault((a.layer, a.head), a)
    alarms = list(first.values())
    return [
        a
        for a in alarms
        if any(abs(b.index - a.index) < persist and (b.layer, b.head) != (a.layer, a.head) for b in alarms)
    ]


def dormant(timeline, params: Params = Params()) -> tuple[np.ndarray, np.ndarray]:
    """([N, L], [N, L, H]) bool: layers and heads whose attention is not learning yet at that
    checkpoint: the QK form's spectral norm (a layer: the median over its heads) is below
    ``dormant_ratio`` of the largest head's in the model.  A head left at its initial scale while
    others trained has no update structure to watch yet, and its first learning (a one-off,
    low-rank move that makes its step size jump) is not a fault."""
    name = "attn.M.spectral_norm"
    n = len(timeline.steps)
    if name not in timeline:
        return np.zeros((n, 0), dtype=bool), np.zeros((n, 0, 0), dtype=bool)
    m = np.asarray(timeline.get(name), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        top = np.nanmax(m.reshape(n, -1), axis=1)[:, None]
        layer = np.nanmedian(m, axis=2) / top
        head = m / top[:, :, None]
    return np.nan_to_num(layer, nan=1.0) < params.dormant_ratio, np.nan_to_num(
        head, nan=1.0
    ) < params.dormant_ratio


EARLY_FALL_REF = 3  # the level a layer's fall is read against: its median D2 entropy over this many
#                    checkpoints up to and including the run's settling


def early_fall_alarms(
    timeline,
    divergence: int | None,
    starts: np.ndarray,
    params: Params = Params(),
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
) -> list[Alarm]:
    """A collapse before the loss diverged, in a run whose first examined checkpoint came at or
    after the divergence (``judge`` calls it only then: the per-series tests had no baseline yet).
    From the run's settling (the earliest layer's, ``starts``; or, with ``params.early_from_peak``,
    the first checkpoint at which a layer's step size had passed its warm-up's peak, where that came
    earlier: ``peak_passed``) up to the divergence step, the first
    checkpoint at which a layer's median over its heads of ``DEPTH_MONITOR`` stands under
    ``params.early_fall`` of its level at that start (the median of the ``EARLY_FALL_REF``
    checkpoints up to and including it), there and at the next checkpoint before the divergence
    (where there is one: at the last checkpoint before the divergence, that one alone).  The level
    includes the checkpoints just before the start.  One alarm per layer that fell there, dated
    at that checkpoint, its score the fall (level over the higher of the values read), not a z;
    where the layout has a RoPE part (two series), the earlier of the two readings.  The
    divergence is the gate (``judge`` passes a lasting one, read on an aligned log): a run whose
    loss did not diverge gets none.  Read on the checkpoints; ``point_of``: checkpoint index ->
    scored point."""
    if params.early_fall <= 0 or divergence is None:
        return []
    det = next((d for d in detectors if d.monitor == DEPTH_MONITOR), None)
    s0 = int(np.min(starts)) if len(starts) else len(timeline.steps)
    s0 = min(s0, warmup_peak(timeline, params, detectors))
    if det is None or s0 >= len(timeline.steps):
        return []
    found = [
        _early_fall(timeline, name, divergence, s0, params, point_of) for name in _series_for(timeline, det)
    ]
    found = [f for f in found if f]
    return min(found, key=lambda f: f[0].first_step) if found else []


def warmup_peak(timeline, params: Params = Params(), detectors: Sequence[Detector] = DETECTORS) -> int:
    """The checkpoint index at which the warm-up's peak passed, as the early-fall rule and the fall
    since the peak read it: ``peak_passed`` on the step size with ``params.early_from_peak`` and
    ``params.peak_median``; N (none) where ``early_from_peak`` is 0."""
    if params.early_from_peak <= 0:
        return len(timeline.steps)
    return peak_passed(step_size(timeline, detectors), params.early_from_peak, params.peak_median)


def peak_passed(g: np.ndarray, share: float, median: bool = False) -> int:
    """The first checkpoint index at which some layer's step size (``g``, [N, L] log) stands
    ``share`` times (or less) its running high (the highest of its defined values before; from its
    third defined value on): the warm-up's peak has passed.  N where none does.  A fault that
    keeps the step size up right after the warm-up (an LR raised there) holds the settling off,
    and a layer settles only at half its peak or four times its peak's age (``layer_starts``);
    the warm-up's end comes before that.  ``median`` (``Params.peak_median``; False here: single
    values, the reading until the holdout37 freeze): the step size read over three checkpoints,
    the median of its last three defined values against the highest such median before
    (``_running_high``), so from its fourth defined value on: one save's dip in the early phase,
    while the warm-up still rises, is no peak passed."""
    first = g.shape[0]
    for layer in range(g.shape[1]):
        col = g[:, layer]
        defined = np.isfinite(col)
        if median:  # (the running high is -inf until the third defined value: from the fourth on)
            now, high = _median3(col), _running_high(col)
        else:
            now, high = col, _before(np.where(defined, col, -np.inf))
        with np.errstate(invalid="ignore"):
            hit = defined & (np.cumsum(defined) >= 3) & (now <= high + np.log(share))
        if hit.any():
            first = min(first, int(np.argmax(hit)))
    return first


def _early_fall(timeline, name: str, divergence: int, s0: int, params: Params, point_of) -> list[Alarm]:
    """``early_fall_alarms`` on one series."""
    steps = np.asarray(timeline.steps)
    n = len(steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        e = np.nanmedian(np.asarray(timeline.get(name), dtype=np.float64), axis=2)  # [N, L]
        ref = np.nanmedian(e[max(0, s0 - EARLY_FALL_REF + 1) : s0 + 1], axis=0)  # [L]
    for t in range(max(s0, EARLY_FALL_REF), n):
        if steps[t] >= divergence:
            break
        with np.errstate(invalid="ignore"):
            low = e[t] < params.early_fall * ref
            last = t + 1 if t + 1 < n and steps[t + 1] < divergence else t
            low &= e[last] < params.early_fall * ref
        if not low.any():
            continue
        point = int(point_of[t]) if point_of is not None else t
        points = int(point_of[last]) - point + 1 if point_of is not None else last - t + 1
        return [
            Alarm(
                DEPTH_MONITOR,
                name,
                layer,
                None,
                int(steps[t]),
                point,
                float(ref[layer] / max(float(max(e[t, layer], e[last, layer])), 1e-12)),
                Role.STRUCTURE,
                "down",
                int(steps[last]),
                points,
                int(steps[t]),
                "early-fall",
            )
            for layer in np.flatnonzero(low).tolist()
        ]
    return []


def _settle(g: np.ndarray, steps: np.ndarray, asleep: np.ndarray, params: Params) -> int:
    """The first index at which a step-size series ``g`` (log) has left its early phase: it fell
    ``settle_drop`` below its peak, or ``settle_age`` times as many steps have passed since its
    origin as at that peak.  The origin is step 0, or the last ``asleep`` checkpoint before it
    settled (the early phase starts again after it; once settled, it stays settled: a fault that
    makes another head grow a hundredfold does not put this one back to sleep); ``len(g)``:
    never."""
    n = len(g)
    origin, peak, at = 0.0, -np.inf, None
    for t in range(n):
        if asleep[t]:
            origin, peak, at = float(steps[t]), -np.inf, None
            continue
        if not np.isfinite(g[t]):
            continue
        if g[t] > peak:
            peak, at = g[t], t
        # (below, at is the peak's index: the first finite g[t] after a reset is above peak = -inf)
        elif g[t] <= peak - params.settle_drop or steps[t] - origin >= params.settle_age * max(
            steps[cast(int, at)] - origin, 1.0
        ):
            return t
    return n


def layer_starts(
    timeline,
    params: Params = Params(),
    detectors: Sequence[Detector] = DETECTORS,
    asleep: np.ndarray | None = None,
) -> np.ndarray:
    """[L]: per layer, the index of the first checkpoint examined (``len(steps)``: none).

    A layer is examined once it has left its early phase, read from its weights alone (``_settle``
    of its step size, ``step_size``), counting from step 0 or from its last ``dormant``
    checkpoint: a layer that wakes up late goes through its own early phase.  A layer that has not
    settled by the end of the run is never examined.  A settled layer whose step size then stands
    ``Params.resettle`` times over its early peak while a layer that has not settled stands at its
    highest so far, before the age rule's bound, settles again from there (``_resettle``).
    ``asleep``: ``dormant``'s layer mask, when already at hand."""
    g = step_size(timeline, detectors)
    steps = np.asarray(timeline.steps, dtype=np.float64)
    asleep = dormant(timeline, params)[0] if asleep is None else asleep
    out = np.full(max(g.shape[1], asleep.shape[1]), len(steps))
    for layer in range(g.shape[1]):
        sleep = asleep[:, layer] if layer < asleep.shape[1] else np.zeros(len(steps), dtype=bool)
        out[layer] = _settle(g[:, layer], steps, sleep, params)
    if params.resettle and g.shape[1] > 1:
        out = _resettle(g, steps, asleep, out, params)
    return out


def _resettle(
    g: np.ndarray, steps: np.ndarray, asleep: np.ndarray, out: np.ndarray, params: Params
) -> np.ndarray:
    """``layer_starts`` read again across the layers: a layer that settled (``out``, by ``_settle``)
    while another had not, and whose step size then stands ``params.resettle`` times (or more) over
    its early peak (the highest finite value up to its settling, since its origin, as ``_settle``
    reads it) at a checkpoint t where some layer that has not settled stands at its highest so far
    (at or over every value it had before t: the model still warms up), before ``settle_age`` times
    the early peak's age (counted from the origin, as ``_settle`` counts it), settles again:
    ``_settle`` of its values from t on, which can be never (then the layer is not examined).

    Adam's first steps can make a layer's step size peak within a few saves and halve before the LR
    warm-up has got far (a plain OLMoE AdamW run of 1,500 steps with a 225-step warm-up, saved every
    10 steps: one layer settled at step 50, its step size x7 over that level by step 100, the other
    layer settled at 270).  Read as settled, that layer set the run's time scale (its blocks) and its
    settled high from inside the warm-up, and the warm-up's own rise read as a jump.  A too-large LR
    after the warm-up usually finds every layer settled, or the other layers off their running
    high; not always (an LR raised while a layer had not settled can move another's settling)."""
    new = out.copy()
    n = len(steps)
    ratio = np.log(params.resettle)
    finite = np.where(np.isfinite(g), g, np.nan)
    # [N, L]: each layer at or over every value it had before (its highest so far)
    at_high = np.isfinite(g) & (g >= _before(np.where(np.isfinite(g), g, -np.inf)))
    for layer in range(g.shape[1]):
        s = int(out[layer])
        if s >= n:
            continue
        sleep = asleep[:, layer] if layer < asleep.shape[1] else np.zeros(n, dtype=bool)
        slept = np.flatnonzero(sleep[: s + 1])
        origin = int(slept[-1]) + 1 if len(slept) else 0
        early = finite[origin : s + 1, layer]
        if not np.isfinite(early).any():
            continue
        at = origin + int(np.nanargmax(early))
        horizon = float(steps[origin - 1]) if origin else 0.0
        horizon += params.settle_age * max(float(steps[at]) - horizon, 1.0)
        others = [m for m in range(g.shape[1]) if m != layer]
        for t in range(s + 1, n):
            unsettled = [m for m in others if out[m] > t]
            if not unsettled or steps[t] >= horizon:
                break
            if g[t, layer] >= g[at, layer] + ratio and at_high[t, unsettled].any():
                masked = g[:, layer].copy()
                masked[:t] = np.nan
                new[layer] = _settle(masked, steps, sleep, params)
                break
    return new


def head_starts(
    timeline, starts: np.ndarray, params: Params = Params(), asleep: np.ndarray | None = None
) -> np.ndarray:
    """[L, H]: per query head, the first examined index: its layer's, or, for a head that was
    ``dormant`` at some checkpoint, the later of that and its own settling (its q update ratio,
    counting from its last dormant checkpoint).  ``asleep``: ``dormant``'s head mask, when at hand."""
    asleep = dormant(timeline, params)[1] if asleep is None else asleep
    steps = np.asarray(timeline.steps, dtype=np.float64)
    q = "attn.q.update_ratio"
    g = _transform(timeline.get(q), _LOG_LEVEL) if q in timeline else None
    out = np.repeat(np.asarray(starts)[:, None], max(asleep.shape[2], 1), axis=1)
    for layer in range(min(len(starts), asleep.shape[1])):
        for head in range(asleep.shape[2]):
            if asleep[:, layer, head].any() and g is not None and head < g.shape[2]:
                out[layer, head] = max(
                    int(starts[layer]), _settle(g[:, layer, head], steps, asleep[:, layer, head], params)
                )
    return out


def block_size(timeline, starts: np.ndarray, params: Params = Params()) -> int:
    """Checkpoints per scored point: the run's own time scale, the steps it took to settle (its
    earliest layer's ``layer_starts``), times ``params.block``, in save intervals (the median
    spacing), at least 1.  A run saved every 10 steps whose layers settle at step 200 is scored
    in blocks of 5 checkpoints: its changes per point are then as large, and its noise as
    averaged, as those of a run that settles as fast but saves every 50.  And at least as many as
    leave ``params.max_points`` points (or fewer) after that settling: every point of every series
    is a chance for noise to pass the persistence rule, and a run saved every 10 steps that
    settles early would otherwise be scored on many times the points of the same run saved every
    100.  With ``params.block_fit``, at most as many as leave ``params.window`` points scored after
    the settling, where some block does (``_fit_block``): a run that settles late at a fine cadence
    (step 600 of 1,000, saved every 10 steps) had none left in blocks of a quarter of its settling
    time."""
    steps = np.asarray(timeline.steps, dtype=np.float64)
    first = int(starts.min()) if len(starts) else len(steps)
    if first >= len(steps) or len(steps) < 2:
        return 1
    spacing = float(np.median(np.diff(steps)))
    k = max(1, int(params.block * steps[first] // max(spacing, 1.0)))
    if params.max_points:  # no more than max_points points after the run settled
        k = max(k, -(-(len(steps) - first) // params.max_points))
    if params.block_fit:  # and no fewer than a baseline window of points scored after it
        k = _fit_block(k, len(steps), first, params)
    return k


def _fit_block(k: int, n: int, first: int, params: Params) -> int:
    """The largest block up to ``k`` (at least 1) that leaves ``params.window`` points scored after
    a settling at checkpoint ``first`` of ``n``: the blocks from the settling's on, less the first
    values that never enter a baseline and the history a series needs before it is scored; ``k``
    itself where none does (not even blocks of 1)."""

    def scored(size: int) -> int:
        return -(-n // size) - -(-first // size) - params.warmup_skip - params.min_history

    fit = k
    while fit > 1 and scored(fit) < params.window:
        fit -= 1
    # where not even single checkpoints leave a window, the blocks stay as they were: a late
    # settling is not examined on a few checkpoints that cover a sliver of its own time scale
    return fit if scored(fit) >= params.window else k


def _coarsen_like(ref_timeline, steps: np.ndarray, k: int):
    """The reference run at the run's ``steps`` (its values there, NaN where it has none), in
    blocks of ``k`` checkpoints as the run is scored (``coarsen``)."""
    series = {n: _align(ref_timeline, steps, n) for n in ref_timeline.names()}
    aligned = type(ref_timeline).from_arrays(
        np.asarray(steps, dtype=np.int64), series, dict(ref_timeline.meta)
    )
    return coarsen(aligned, k)[0]


def coarsen(timeline, k: int) -> tuple:
    """(coarse Timeline, block index of each checkpoint): consecutive checkpoints grouped by ``k``,
    each block's value the median of its checkpoints' (NaN ignored), labelled with its upper-median
    checkpoint's step: an excursion the block's median shows covers at least that checkpoint, so
    no alarm is dated before its evidence."""
    n = len(timeline.steps)
    block = np.arange(n) // k
    m = int(block[-1]) + 1 if n else 0
    label = np.array(
        [timeline.steps[np.flatnonzero(block == b)[len(np.flatnonzero(block == b)) // 2]] for b in range(m)],
        dtype=np.int64,
    )
    series = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in timeline.names():
            a = np.asarray(timeline.get(name), dtype=np.float64)
            series[name] = np.stack([np.nanmedian(a[block == b], axis=0) for b in range(m)])
    return type(timeline).from_arrays(label, series, dict(timeline.meta)), block


@dataclasses.dataclass
class Detection:
    """What ``run_detection`` found: the alarms, and how much of the run could be examined."""

    alarms: list[Alarm]
    starts: np.ndarray  # [L]: per layer, the first examined checkpoint (len(steps): none; ``layer_starts``)
    examined: np.ndarray  # bool [N]: checkpoints at which at least one series was scored
    block: int = 1  # checkpoints per scored point (``block_size``); alarm indices count points
    points: int = 0  # scored points (blocks) at which at least one series was scored
    point_steps: np.ndarray | None = None  # the step each point is labelled with (``coarsen``)
    scores: dict[str, np.ndarray] = dataclasses.field(
        default_factory=dict
    )  # series -> [N, L] (``_layer_scores``)
    # [points] (not checkpoints, unlike ``examined`` and ``scores``): 1/0 the output projections'
    # step size off across layers or not, NaN unread (``_proj_broad``); None: nothing to read
    proj_broad: np.ndarray | None = None
    # a whole-model step-size jump the jump rule did not count (``uncounted_jump``): its alarms,
    # one per layer that jumped, never alarms of the run; empty where there is none
    uncounted: list[Alarm] = dataclasses.field(default_factory=list)
    # per checkpoint, the one-checkpoint whole-model step-size jump (``model_jump``); None: unread
    model_jump: ModelJump | None = None
    # per checkpoint, the output projections' step size over its level 1/3 to 2 settling times
    # before, across the model (``projections_rise``); None: unread
    proj_rise: ModelJump | None = None
    # the alarms set aside because their layer (head) was ``dormant`` at their trigger point
    # (``_drop_asleep``): never alarms of the run, reported in ``examination``
    asleep: list[Alarm] = dataclasses.field(default_factory=list)
    # the model's per-head structure series (layers x query heads with a D2-entropy column, read or
    # not): what the lone-head bar grows with (``lone_bar``)
    head_series: int = 0
    # against a reference run (``--baseline``): what it was read for (``REFERENCE_ALL``,
    # ``REFERENCE_STEPS``: ``reference_scope``; ``REFERENCE_NONE`` where no column could be read
    # against it), and ``shared_until`` its result; None: no reference run
    reference_scope: str | None = None
    shared_until: int | None = None

    def point_at_or_after(self, step: int | None) -> int | None:
        """The step of the first point at or after ``step`` (its updates began before ``step``)."""
        if step is None or self.point_steps is None:
            return step
        later = self.point_steps[self.point_steps >= step]
        return int(later[0]) if len(later) else step

    @property
    def point_of(self) -> np.ndarray:
        """[N]: per checkpoint, the scored point (block) it falls in (``coarsen``'s grouping)."""
        return np.arange(len(self.examined)) // max(1, self.block)

    @property
    def settled_index(self) -> int | None:
        """The first checkpoint at which any layer had left its early phase (None: none had)."""
        first = int(self.starts.min()) if len(self.starts) else len(self.examined)
        return first if first < len(self.examined) else None

    def settled_step(self, steps) -> int | None:
        return None if self.settled_index is None else int(np.asarray(steps)[self.settled_index])


def examination(detection: Detection, steps, params: Params = Params()) -> dict:
    """How much of the run the detectors examined (summary.json ``detection.coverage``), and, when
    that is too little for a healthy verdict, one line saying what is missing (``missing``)."""
    steps = np.asarray(steps)
    n = int(detection.examined.sum())
    points = detection.points
    per = (
        "" if detection.block == 1 else f" ({points} block{'' if points == 1 else 's'} of {detection.block})"
    )
    settled_at = detection.settled_step(steps)
    if settled_at is None:
        missing = (
            f"the run never left its early phase (no layer's step size, ||dW||/||W||, had fallen to half "
            f"its peak, nor had a layer grown {params.settle_age:g}x as old as at that peak, by step "
            f"{int(steps[-1]) if len(steps) else '-'}; {len(steps)} checkpoint(s))"
            if len(steps)
            else "no checkpoint could be analysed"
        )
    elif points < params.min_examined:
        missing = (
            f"{n} checkpoint(s){per} examined after the run settled at step {settled_at}; "
            f"{params.min_examined} {'blocks' if per else 'checkpoints'} needed"
        )
    else:
        missing = None
    first = int(steps[detection.examined][0]) if n else None
    unexamined = [i for i, s in enumerate(detection.starts) if s >= len(steps)]
    asleep = detection.asleep  # alarms set aside on layers (heads) not learning (``_drop_asleep``)
    return {
        "settled_step": settled_at,
        "examined_checkpoints": n,
        "first_examined_step": first,
        "block": detection.block,
        "scored_points": points,
        "needed": params.min_examined,
        "layers_not_examined": unexamined,
        # the reader learns that such a layer was there, and what would have alarmed on it
        "dormant_alarms": {
            "alarms": len(asleep),
            "layers": sorted({a.layer for a in asleep}),
            "first_step": min(a.first_step for a in asleep),
            "monitors": sorted({a.monitor for a in asleep}),
            "dormant_ratio": params.dormant_ratio,
        }
        if asleep
        else None,
        "missing": missing,
    }


def detect(
    timeline, params: Params = Params(), reference=None, detectors: Sequence[Detector] = DETECTORS
) -> list[Alarm]:
    """Every sustained alarm in ``timeline`` (``run_detection(...).alarms``)."""
    return run_detection(timeline, params, reference, detectors).alarms


REFERENCE_ALL = "all"  # a reference run read for every series (``reference_scope``)
REFERENCE_STEPS = "step_size"  # ... for the step-size series alone
REFERENCE_NONE = "none"  # ... for nothing: it held none of the run's points (the run read alone)


def reference_scope(timeline, reference, shared: int | None, params: Params = Params()) -> str | None:
    """What a reference run (``--baseline``) is read for: None where there is none;
    ``REFERENCE_STEPS`` where its weights matched the run's at no common checkpoint but the first
    (``shared``, ``shared_until``, None: another seed, other batches; the first alone: the same
    initial weights, other batches) and ``params.unshared_steps``: two such runs' heads take their
    own courses, so a head's structure differs from the other run's for no fault, while the step
    size (the q/k and router update ratios) follows the recipe's schedule and optimizer in both;
    ``REFERENCE_ALL`` otherwise (a twin, or a branch whose folder holds checkpoints before its fork:
    every series reads the departure from it).  ``run_detection`` reads ``REFERENCE_NONE`` where
    no column could be scored against the reference."""
    if reference is None:
        return None
    common = sorted({int(s) for s in timeline.steps} & {int(s) for s in reference.steps})
    unshared = shared is None or (bool(common) and shared <= common[0])
    return REFERENCE_STEPS if (unshared and params.unshared_steps) else REFERENCE_ALL


def run_detection(
    timeline, params: Params = Params(), reference=None, detectors: Sequence[Detector] = DETECTORS
) -> Detection:
    """Every sustained alarm in ``timeline`` (one per scored column at most; the jump rule's,
    one per layer that jumped: ``jump_alarms``; the depth rule's, one per head: ``depth_alarms``;
    the rise rule's, one per layer that rose: ``rise_alarms``; the lift rule's, one per layer
    lifted: ``lift_alarms``; the fall rule's, one per layer that fell: ``fall_alarms``), earliest
    first.

    Self-referenced series of a layer are scored only once it has settled (``layer_starts``).
    ``reference``: a healthy run's Timeline; when given, every column is scored against it at the
    matching steps (columns the reference lacks fall back to the self-referenced baseline), or, where
    it shares none of the run's weights (``reference_scope``), the step-size columns alone, in the
    run's blocks, and the rest as without one."""
    alarms: list[Alarm] = []
    fine = timeline
    fine_steps = np.asarray(timeline.steps)
    starts, heads = examined_from(timeline, params, detectors)
    fine_starts, fine_heads = starts, heads
    shared = shared_until(timeline, reference) if reference is not None else None
    scope = reference_scope(timeline, reference, shared, params)
    step_ref = reference if scope == REFERENCE_STEPS else None
    if step_ref is not None:  # read like a run without one, but for the step-size series
        reference = None
    k = block_size(timeline, starts, params) if reference is None else 1
    block = np.arange(len(fine_steps))
    if k > 1:  # a block is scored for a column once all its checkpoints are
        timeline, block = coarsen(timeline, k)
        starts, heads = -(-starts // k), -(-heads // k)
        if step_ref is not None:
            step_ref = _coarsen_like(step_ref, fine_steps, k)
    steps = np.asarray(timeline.steps)
    both = (starts, heads)
    cols: list[_Column] = []
    for det in detectors:
        try:
            direction = monitor_spec(det.monitor).direction
        except KeyError:
            continue
        for name in _series_for(timeline, det):
            ref_here = step_ref if (step_ref is not None and det.role == Role.STEP_SIZE) else reference
            for layer, head, sc, self_ref in _scored_columns(
                timeline, det, name, direction, params, ref_here, both
            ):
                cols.append(_Column(det, name, layer, head, sc, self_ref, direction, det.broad))
    if scope is not None and all(c.self_ref for c in cols):  # nothing could be read against it
        alone = run_detection(fine, params, None, detectors)
        return dataclasses.replace(alone, reference_scope=REFERENCE_NONE, shared_until=shared)
    examined = np.zeros(len(steps), dtype=bool)
    for c in cols:
        # read by the classifier only (``_proj_broad``); a step size read against a reference of
        # another seed, from its second value on, is no examination of the rest of the run
        if c.det.role != Role.PROJ_STEP and (c.self_ref or scope != REFERENCE_STEPS):
            examined |= np.isfinite(c.sc.z)
    with np.errstate(invalid="ignore"):  # [points, L]: the step size above its settled high (or unread)
        new_high = ~(above_settled(step_size(timeline, detectors), starts) <= 0)
    # per detector mode, where the attention step size is off in enough layers (``_broad``)
    broad_ok = {
        mode: _broad([c for c in cols if c.broad and c.det.mode == mode], params)
        for mode in {c.det.mode for c in cols if c.broad}
    }
    proj = _proj_broad(cols, params) if reference is None else None  # its own history only
    if params.step_proj and proj is not None:  # ... and the output projections not calm around it
        calm = proj_calm(proj, params.step_proj_window)
        broad_ok = {mode: ok & ~calm for mode, ok in broad_ok.items()}
    for c in cols:
        sc = c.sc
        if c.det.role == Role.PROJ_STEP:
            continue  # evidence for the classifier (``_proj_broad``), never an alarm of its own
        # a self-referenced update-ratio alarm starts (and is dated back) only where the share of
        # all update-ratio series that are off reaches params.breadth: a step size is global
        ok = broad_ok[c.det.mode] if (c.broad and c.self_ref) else None
        if (
            c.self_ref
            and c.det.role == Role.STEP_SIZE
            and c.det.mode == "shift"
            and c.layer < new_high.shape[1]
        ):
            # a level off its trend counts only above anything the layer had since it settled: a
            # restart (a new warm-up, cosine with warm restarts) returns to a level already seen
            ok = new_high[:, c.layer] if ok is None else (ok & new_high[:, c.layer])
        i = first_sustained(sc.exceed, params.persist, ok)
        if i is None:
            continue
        confirmed = int(steps[i + params.persist - 1])
        j = i
        while j < len(sc.exceed) and sc.exceed[j]:
            j += 1
        start_i = extend_back(sc.z, i, params.z_accept, ok) if (c.self_ref and params.extend) else i
        alarms.append(
            Alarm(
                c.det.monitor,
                c.name,
                c.layer,
                c.head,
                int(steps[start_i]),
                i,
                float(np.nanmax(sc.z[i:j])),
                c.det.role,
                c.direction,
                confirmed,
                j - i,
                int(steps[i]),
                c.det.mode,
            )
        )
    logit_layers = {c.layer for c in cols if c.det.role == Role.LOGITS}
    head_series = len(
        {(c.layer, c.head) for c in cols if c.det.role == Role.STRUCTURE and c.head is not None}
    )
    asleep: list[Alarm] = []
    if params.asleep:  # before the lone-head rule: a head set aside is no head's company
        found = alarms
        alarms, aside = _drop_asleep(found, timeline, params)
        # reported as set aside: those that would have counted had their layer been learning (a
        # weak lone alarm on a dormant head, or a lone layer's logits, is dropped either way)
        kept = _drop_unaccompanied(found, params, logit_layers, head_series)
        asleep = [a for a in aside if a in kept]
    alarms = _drop_unaccompanied(alarms, params, logit_layers, head_series)
    uncounted: list[Alarm] = []
    if reference is None:  # a jump is read against the run's own level just before it
        counted = jump_alarms(fine, params, block, detectors, fine_starts)
        if k > 1 and params.jump_blocks:  # the same rule at the run's own time scale: the earlier reading
            coarse = jump_alarms(timeline, params, None, detectors, starts)
            if coarse and (not counted or coarse[0].index < counted[0].index):
                counted = coarse
        model = counted + depth_alarms(fine, params, block, fine_heads, detectors)
        model += rise_alarms(fine, params, block, detectors, fine_starts)
        model += lift_alarms(fine, params, block, detectors)
        model += fall_alarms(fine, params, block, detectors, fine_starts)
        uncounted = uncounted_jump(fine, counted, params, block, detectors, fine_starts)
        if params.asleep:
            model, aside = _drop_asleep(model, timeline, params)
            asleep += aside
        alarms += model
    alarms.sort(key=lambda a: (a.index, -a.score))
    asleep.sort(key=lambda a: (a.index, -a.score))
    # back to checkpoints: a checkpoint is examined when its block is; starts as checkpoint indices
    return Detection(
        alarms,
        np.minimum(starts * k, len(fine_steps)),
        examined[block],
        k,
        int(examined.sum()),
        steps,
        {name: sc[block] for name, sc in _layer_scores(cols, len(steps)).items()},
        proj,
        uncounted,
        model_jump(fine, block, detectors) if reference is None else None,
        projections_rise(fine, block, detectors, fine_starts, params.proj_near)
        if reference is None
        else None,
        asleep,
        head_series,
        scope,
        shared,
    )


def uncounted_jump(
    timeline,
    counted: list[Alarm],
    params: Params = Params(),
    point_of=None,
    detectors: Sequence[Detector] = DETECTORS,
    starts: np.ndarray | None = None,
) -> list[Alarm]:
    """The first whole-model step-size jump that ``jump_alarms`` reads without its settled-high
    condition, where that is not the jump it counted (``counted``, its alarms): a jump that did not
    stand above the level the layers had once they settled, in enough of them.  A schedule restart
    does that, and so does
    an LR raised in a run whose step size was high when it settled (no warm-up: the update ratio
    falls for a long while after it).  Nothing in the weights tells the two apart, so it never
    raises an alarm or changes a verdict; the verdict reports it (``uncounted_jump``) for the
    reader, who knows the schedule.  Empty where there is none, or where the jump rule is off."""
    below = jump_alarms(timeline, params, point_of, detectors, starts, settled_high=False)
    if not below:
        return []
    # the same jump where the counted one begins among the points this one read (an LR raised
    # between two saves: the checkpoint before rose part of the way), compared in points: a jump
    # counted on the blocks is dated at its block's label, which can follow this one's checkpoints
    # within the same block
    last = max(a.index + max(a.length, 1) - 1 for a in below)
    return [] if counted and counted[0].index <= last else below


def lone_bar(params: Params, series: int) -> float:
    """The peak a head's structure alarm needs when no other head alarms near it, in a model with
    ``series`` per-head structure series (layers x query heads, ``Detection.head_series``):
    ``params.z_lone``, raised by ``params.lone_growth`` times the log of how many times over
    ``params.lone_series`` the model has (no more than that, or ``lone_series`` 0: ``z_lone``).
    A model with more heads gives a chance crossing more places to happen."""
    if params.lone_growth == 0 or params.lone_series <= 0 or series <= params.lone_series:
        return params.z_lone
    return params.z_lone + params.lone_growth * math.log(series / params.lone_series)


def lone_heads(alarms: list[Alarm], persist: int) -> list[Alarm]:
    """The per-head structure alarms of ``alarms`` with no other head's such alarm triggered within
    ``persist`` points: the alarms the lone-head rule judges (``_drop_lone``)."""
    heads = [a for a in alarms if a.role == Role.STRUCTURE and a.head is not None]
    return [a for a in heads if not _accompanied(a, heads, persist, lambda b: (b.layer, b.head))]


def _drop_lone(alarms: list[Alarm], params: Params, series: int) -> list[Alarm]:
    """``alarms`` less the lone heads' alarms (``lone_heads``) with a peak under ``lone_bar``
    (``series``: the model's per-head structure series).  One head among a model's many crossing
    z three times in a row by chance is far likelier than any given head doing so; a numerics
    fault reaches more than one head, or reaches one far.  Other alarms pass unchanged."""
    bar = lone_bar(params, series)
    weak = [a for a in lone_heads(alarms, params.persist) if a.score < bar]
    return [a for a in alarms if a not in weak]


def _drop_lone_logits(alarms: list[Alarm], params: Params, layers: set[int]) -> list[Alarm]:
    """``alarms`` less the logits alarms (||M|| growth) of a layer whose logits grew alone: no
    other layer's logits alarm within ``params.persist`` points of its trigger.  Where the model
    has one layer with logits read, nothing is dropped.  Logit growth as the sign of a too-large
    step reaches more than one layer (the LR is global); one layer's ||M|| growing at a rate for
    a few checkpoints is within what healthy runs do (an SGD OLMoE run of the corpus, and its
    fault twin before its onset, did so), and it was read as ``high_lr/logits``, the one path
    that needs nothing else.  ``layers``: the layers that have a logits series, read or not (a
    layer that never settled, or sleeps, counts: in a two-layer model whose other layer sleeps, a
    logits alarm never counts).  Other alarms pass unchanged."""
    if len(layers) < 2:
        return alarms
    logits = [a for a in alarms if a.role == Role.LOGITS]
    return [
        a for a in alarms if a not in logits or _accompanied(a, logits, params.persist, lambda b: b.layer)
    ]


def _accompanied(a: Alarm, others: list[Alarm], persist: int, where) -> bool:
    """Another of ``others`` triggered within ``persist`` points of ``a``, somewhere else
    (``where``: alarm -> its head, or its layer)."""
    return any(abs(b.index - a.index) < persist and where(b) != where(a) for b in others)


def _drop_unaccompanied(
    alarms: list[Alarm], params: Params, logit_layers: set[int], head_series: int
) -> list[Alarm]:
    """``alarms`` less a head's weak collapse alone (``_drop_lone``; ``head_series``: the model's
    per-head structure series) and, with ``params.logits_lone``, a layer's logits growing alone
    (``_drop_lone_logits``)."""
    alarms = _drop_lone(alarms, params, head_series)
    return _drop_lone_logits(alarms, params, logit_layers) if params.logits_lone else alarms


def _drop_asleep(alarms: list[Alarm], timeline, params: Params) -> tuple[list[Alarm], list[Alarm]]:
    """(kept, set aside): ``alarms`` split by whether their layer (their head, for a per-head alarm)
    was ``dormant`` at the alarm's trigger point (``timeline``: the scored points' timeline,
    ``Alarm.index`` counts its points).  A layer that settled while every QK form was at its
    initial scale, and stayed there while another layer learned, moves from a level that is noise
    when it does move (SGD): its D2 entropy falls, its update ratios and ||M|| grow, and none of it
    is a fault."""
    layers, heads = dormant(timeline, params)

    def asleep(a: Alarm) -> bool:
        if not 0 <= a.index < len(layers):
            return False
        if a.head is not None and a.layer < heads.shape[1] and a.head < heads.shape[2]:
            return bool(heads[a.index, a.layer, a.head])
        return a.layer < layers.shape[1] and bool(layers[a.index, a.layer])

    kept: list[Alarm] = []
    aside: list[Alarm] = []
    for a in alarms:
        (aside if asleep(a) else kept).append(a)
    return kept, aside


def _layer_scores(cols: list[_Column], n: int) -> dict[str, np.ndarray]:
    """Series -> [points, L]: the largest score any of a layer's columns got at each point (NaN
    where none was scored): the numbers the alarms were raised on, for the reports."""
    out: dict[str, np.ndarray] = {}
    for c in cols:
        a = out.setdefault(c.name, np.full((n, 0), np.nan))
        if a.shape[1] <= c.layer:
            a = out[c.name] = np.concatenate([a, np.full((n, c.layer + 1 - a.shape[1]), np.nan)], axis=1)
        a[:, c.layer] = np.fmax(a[:, c.layer], c.sc.z)
    return out


def detector_for(timeline, name: str, detectors: Sequence[Detector] = DETECTORS) -> Detector | None:
    """The detector that watches series ``name`` (None if none does)."""
    return next((det for det in detectors if name in _series_for(timeline, det)), None)


def _broad(cols: list[_Column], params: Params, counts=None) -> np.ndarray:
    """[N] bool: checkpoints at which the attention step size is off (q or k update ratio scoring
    above ``z_accept``) in at least ``params.breadth`` of the layers scored there, and in two
    layers at least where two or more are scored (with ``params.breadth_run``: where two or more
    are scored anywhere in the run, per detector mode, so not where one layer is scored alone while
    another is not, as before the other has settled).  That reads the whole run: a prefix of it (a
    live watch) that ends before the other layer is scored still reads the one layer alone.  A
    step size is global; one layer's q/k update growing alone is that layer's own affair (an
    attention fault makes its update jump; an SGD layer starting to learn after the other
    settled), and a router reacting to it is no step size either.  ``counts(column)``: which
    columns count (the attention q/k update ratios by default)."""
    n_off, n_scored = _layers_off(cols, params, counts)
    floor = np.minimum(2, n_scored)
    if params.breadth_run:
        floor = np.maximum(floor, min(2, int(n_scored.max(initial=0))))
    return (n_scored > 0) & (n_off >= params.breadth * n_scored) & (n_off >= floor)


def _layers_off(cols: list[_Column], params: Params, counts=None) -> tuple[np.ndarray, np.ndarray]:
    """([N], [N]): per checkpoint, how many layers have a counted column scoring above
    ``z_accept``, and how many have one scored at all (``_broad``)."""
    counts = counts or (lambda c: names.key(c.det.monitor) == "update_ratio" and names.is_attention(c.name))
    n = len(cols[0].sc.z) if cols else 0
    layers = sorted({c.layer for c in cols})
    off = np.zeros((n, len(layers)), dtype=bool)
    scored = np.zeros((n, len(layers)), dtype=bool)
    for c in cols:
        if not counts(c):
            continue
        j = layers.index(c.layer)
        scored[:, j] |= np.isfinite(c.sc.z)
        off[:, j] |= np.nan_to_num(c.sc.z, nan=-np.inf) > params.z_accept
    return off.sum(axis=1), scored.sum(axis=1)


def _proj_broad(cols: list[_Column], params: Params) -> np.ndarray | None:
    """[points] float: 1 where the output projections' step size is off across layers (``_broad``
    of the ``proj_step_size`` columns: above ``z_accept`` in at least ``params.breadth`` of the
    layers scored there, and in two at least), 0 where it is not, NaN where fewer than two layers
    are scored (nothing to read there: not "calm").  None when there is nothing to read at all:
    the layout names no output projection, or fewer than two layers are ever scored (and
    ``run_detection`` does not read it against a reference run: it is the run's own history).  The
    low-precision fault moves a collapsing layer's own projection, not every layer's."""
    proj = [c for c in cols if c.det.role == Role.PROJ_STEP]
    if not proj:
        return None

    def every(c: _Column) -> bool:
        return True

    two = _layers_off(proj, params, every)[1] >= 2
    if not two.any():
        return None
    return np.where(two, _broad(proj, params, every).astype(np.float64), np.nan)


def proj_calm(proj_broad: np.ndarray, window: int) -> np.ndarray:
    """[points] bool: the output projections were read within ``window`` points of the point
    (``_proj_broad``: 1 off across layers, 0 not, NaN unread) and off across layers nowhere there.
    A raised LR scales every update, the output projections' too; the attention q/k updates
    growing while the projections stay calm is the layers' own affair (an SGD layer's gradient
    growing as it learns, a collapsing layer's q/k): no step size (``Params.step_proj``)."""
    n = len(proj_broad)
    calm = np.zeros(n, dtype=bool)
    for i in range(n):
        around = proj_broad[max(0, i - window) : i + window + 1]
        calm[i] = bool(np.isfinite(around).any()) and not bool((around == 1).any())
    return calm


def layer_scores(
    timeline,
    name: str,
    params: Params = Params(),
    reference=None,
    detectors: Sequence[Detector] = DETECTORS,
) -> np.ndarray | None:
    """[N, L]: the score the detector of series ``name`` gave each checkpoint, per layer (the
    largest over the layer's scored columns; NaN where nothing was scored), or None when no
    detector watches ``name``.  The number the alarms are raised on, for reports (an update-ratio
    score can exceed the threshold without an alarm where the breadth rule passed it over)."""
    det = detector_for(timeline, name, detectors)
    if det is None:
        return None
    try:
        direction = monitor_spec(det.monitor).direction
    except KeyError:
        return None
    out = np.full((len(timeline.steps), timeline.get(name).shape[1]), np.nan)
    both = examined_from(timeline, params, detectors)
    for layer, _head, sc, _ in _scored_columns(timeline, det, name, direction, params, reference, both):
        out[:, layer] = np.fmax(out[:, layer], sc.z)
    return out


def first_alarms_by_monitor(alarms: list[Alarm]) -> list[dict]:
    """Per watched series: its earliest alarm step, the layers/heads that alarmed, the top score."""
    out: dict[str, dict] = {}
    for a in alarms:
        d = out.get(a.block)
        if d is None:
            out[a.block] = {
                "monitor": a.block,
                "role": a.role,
                "first_alarm_step": a.first_step,
                "layers": sorted({a.layer}),
                "columns_alarming": 1,
                "max_score": round(a.score, 3),
                "first_alarm_by_layer": {str(a.layer): a.first_step},
            }
        else:
            d["columns_alarming"] += 1
            d["layers"] = sorted(set(d["layers"]) | {a.layer})
            d["max_score"] = round(max(d["max_score"], a.score), 3)
            by = d["first_alarm_by_layer"]
            by[str(a.layer)] = min(by.get(str(a.layer), a.first_step), a.first_step)
    return sorted(out.values(), key=lambda d: d["first_alarm_step"])
