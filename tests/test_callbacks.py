"""In-loop monitoring (ckptscan.callbacks): the same values as the offline analysis of checkpoints
saved at the same steps, a store that ``ckptscan report`` reads, rank 0 alone writing, the alarm hook."""

from __future__ import annotations

import json
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from ckptscan import analyze, load_result
from ckptscan.callbacks import Monitor, store
from ckptscan.cli import main
from ckptscan.drills import run_drill
from ckptscan.drills.naming import config_json, hf_name

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "drills"
TINY = {
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 8,
    "ffn": 16,
    "batch_size": 4,
    "seq_len": 32,
    "warmup": 10,
    "replay": False,
}


def assert_same_timeline(offline, live, rtol=1e-6, projections=False):
    """Every series of ``offline`` in ``live`` with the same shape, the same NaNs and values within
    ``rtol`` (relative to the value; exact zeros exactly); except, unless the monitor was asked for
    ``projections``, the output projections' step size, which it then does not compute (it would
    keep another copy of them on the device)."""
    assert list(offline.steps) == list(live.steps)
    assert ("out.update_ratio" in live.names()) == projections
    names = [n for n in offline.names() if projections or n != "out.update_ratio"]
    assert set(names) <= set(live.names())
    for name in names:
        a, b = offline.get(name), live.get(name)
        assert a.shape == b.shape, name
        assert np.array_equal(np.isnan(a), np.isnan(b)), name
        ok = ~np.isnan(a)
        np.testing.assert_allclose(b[ok], a[ok], rtol=rtol, atol=0, err_msg=name)


def drill_monitor(root: Path, naming: str, **kw):
    """A drill ``callback`` that attaches a Monitor to the drill model on its first step."""
    holder = {}

    def callback(step, model, rec):
        if "m" not in holder:
            holder["m"] = Monitor(
                model,
                root,
                rename=partial(hf_name, naming=naming),
                config=config_json(model.cfg, naming, "float32"),
                **kw,
            )
        holder["m"].step(step, loss=rec["loss"], grad_norm=rec["grad_norm"])

    return holder, callback


def test_monitor_equals_offline_analysis_on_a_drill(tmp_path):
    """MoE drill (attention and routers): the in-loop points at the save steps equal the offline
    analysis of the checkpoints written at those steps (float32 files: the same weights)."""
    holder, cb = drill_monitor(tmp_path / "live", "mixtral", every=10, detect_every=100)
    run_drill(tmp_path / "run", naming="mixtral", steps=40, save_every=10, callback=cb, **TINY)
    live = holder["m"].close()
    offline = analyze(tmp_path / "run", out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert offline.summary["layout"]["family"] == live.summary["layout"]["family"] == "mixtral"
    assert "router.update_ratio" in live.timeline and "attn.D2.entropy2" in live.timeline
    assert np.isfinite(live.timeline.get("attn.D2.entropy2")[1:]).all()
    assert_same_timeline(offline.timeline, live.timeline)
    # the store is an output folder: its parts are the pipeline's format, marked in-loop
    parts = sorted((tmp_path / "live" / "parts").glob("step_*.npz"))
    assert [p.name for p in parts] == [f"step_{s:012d}.npz" for s in (10, 20, 30, 40)]
    assert [s for *_, s in store.read_points(tmp_path / "live")] == ["in-loop"] * 4
    assert live.summary["checkpoints"]["source"] == "in-loop"
    assert live.timeline.meta["sources"] == ["in-loop"] * 4
    # the loss the loop passed is the store's log, and the verdict read it
    assert live.summary["log"]["points"] == 40


def test_monitor_with_projections_equals_offline_analysis(tmp_path):
    """``projections=True``: the output projections' step size too, equal to the offline analysis
    of the checkpoints saved at the same steps."""
    holder, cb = drill_monitor(tmp_path / "live", "llama", every=10, detect_every=100, projections=True)
    run_drill(tmp_path / "run", naming="llama", steps=60, save_every=10, callback=cb, **TINY)
    live = holder["m"].close()
    offline = analyze(tmp_path / "run", out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert "out.update_ratio" in offline.timeline.names()
    assert np.isfinite(live.timeline.get("out.update_ratio")[1:]).all()
    assert_same_timeline(offline.timeline, live.timeline, projections=True)
    assert live.summary["layout"]["projections"] == offline.summary["layout"]["projections"]


def test_interval_counts_optimizer_steps_and_skips_repeats(tmp_path):
    torch.manual_seed(0)
    model = _module_from(
        {
            "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8),
            "model.layers.0.self_attn.k_proj.weight": torch.randn(8, 8),
        }
    )
    mon = Monitor(
        model,
        tmp_path / "s",
        every=3,
        config={"num_attention_heads": 2, "num_key_value_heads": 2},
        detect=False,
    )
    got = [s for s in range(1, 10) if mon.step(s) is not None]
    assert got == [3, 6, 9]
    assert mon.step(9) is None  # gradient accumulation: the same optimizer step again
    assert len(mon.call_seconds) == 3


def _module_from(tensors: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A module whose parameters carry exactly these dotted names."""
    root = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, torch.nn.Parameter(t.clone().float()))
    return root


def test_rank_other_than_zero_writes_nothing(tmp_path, monkeypatch):
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    broadcasts = []

    def broadcast(box, src=0, **kw):  # rank 0 would send its verdict: here, none
        broadcasts.append(src)
        box[0] = None

    monkeypatch.setattr(dist, "broadcast_object_list", broadcast)
    holder, cb = drill_monitor(tmp_path / "live", "llama", every=5, detect_every=2)
    run_drill(tmp_path / "run", naming="llama", steps=20, save_every=10, callback=cb, **TINY)
    mon = holder["m"]
    computed = mon._computed
    mon.start(20)  # a resume's call: nothing computed, nothing written on this rank
    mon.step(20)  # ... and the step it resumed at is taken, as on rank 0: the ranks stay in lockstep
    assert mon._computed == computed
    assert mon.rank == 1 and mon.close() is None
    assert not (tmp_path / "live").exists()
    assert mon.call_seconds == []
    assert broadcasts == [0, 0, 0]  # two detection passes (4 points, every 2) and the final one


def _lockstep_worker(rank: int, port: int, out: Path, run: Path) -> None:
    """One of two gloo ranks holding the same (replicated) parameters: a first attempt to 300, then
    one resumed from 200 (``start(200)``, then ``step(200)`` again, as Lightning's first micro-batch
    of an accumulation cycle does), on to 400, an online detection pass at every point."""
    import datetime
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist = torch.distributed
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    torch.set_num_threads(1)
    weights = dict(_fixture_weights(run))
    model = _module_from(weights[100])
    params = dict(model.named_parameters())
    config = json.loads((run / "config.json").read_text())

    def at(step: int) -> int:
        with torch.no_grad():
            for name, t in weights[step].items():
                params[name].copy_(t)
        return step

    kw = dict(every=100, detect_every=1, config=config, log_file=run / "metrics.jsonl")
    mon = Monitor(model, out / "store", **kw)
    for step in (100, 200, 300):
        mon.step(at(step))
    mon.close()
    mon = Monitor(model, out / "store", **kw)
    mon.start(at(200))
    mon.step(200)
    for step in (300, 400):
        mon.step(at(step))
    mon.close()
    (out / f"rank{rank}.json").write_text(json.dumps({"computed": mon._computed}))
    dist.destroy_process_group()


def test_two_ranks_stay_in_lockstep_through_a_resume(tmp_path):
    """Two processes (gloo, CPU): every rank takes the same steps through ``start`` and a repeated
    step, so the detection passes' broadcasts pair up and both finish; rank 0 alone writes."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_lockstep_worker, args=(port, tmp_path, FIXTURES / "highlr-moe"), nprocs=2, join=True)
    counts = [json.loads((tmp_path / f"rank{r}.json").read_text())["computed"] for r in (0, 1)]
    assert counts == [2, 2]  # 300 and 400 after the resume
    assert [s for s, *_ in store.read_points(tmp_path / "store")] == [100, 200, 300, 400]


def _agreement_worker(rank: int, port: int, out: Path, run: Path) -> None:
    """One of two gloo ranks opening a callback's monitor on a folder that holds another run's
    store: only rank 0 claims the folder, so only it meets the error."""
    import datetime
    import os

    from ckptscan.callbacks.monitor import open_for_callback
    from ckptscan.errors import UsageError

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group(
        "gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    torch.set_num_threads(1)
    model = _module_from(dict(_fixture_weights(run))[100])
    config = json.loads((run / "config.json").read_text())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lenient = open_for_callback(False, model, out / "store", 100, config=config)
    try:
        open_for_callback(True, model, out / "store", 100, config=config)
        strict = "opened"
    except UsageError as e:
        strict = str(e)
    result = {"off": lenient is None, "warned": [str(w.message) for w in seen], "strict": strict}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    torch.distributed.destroy_process_group()


def test_ranks_agree_when_one_cannot_open_the_monitor(tmp_path):
    """Two processes (gloo): the folder holds another run's store, which only rank 0 reads; both
    ranks turn monitoring off (rank 1 naming rank 0's error), and with ``strict`` both raise, so no
    rank is left waiting in a gather or a broadcast that the other never joins."""
    import socket

    import torch.multiprocessing as mp

    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "run.json").write_text(json.dumps({"run": "/some/run", "selection": {}}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_agreement_worker, args=(port, tmp_path, FIXTURES / "highlr-moe"), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["off"] and r1["off"]
    assert any("needs a folder of its own" in w for w in r0["warned"])
    assert any("(on rank 0)" in w and "needs a folder of its own" in w for w in r1["warned"])
    assert "needs a folder of its own" in r0["strict"]
    assert r1["strict"].startswith("in-loop monitoring failed on rank 0")


def _fixture_weights(run: Path):
    truth = json.loads((run / "truth.json").read_text())
    for name in truth["checkpoints"]:
        yield int(name.split("-")[1]), load_file(str(run / name / "model.safetensors"))


def test_on_alarm_fires_on_a_fault_drill_as_offline_alarms(tmp_path):
    """The low-precision drill's checkpoints played through a live module: the online detector
    raises one alarm with the offline verdict's class and earliest step, and the points equal the
    offline analysis (bf16 weights).  The training log grows with the run, as a live one does (a
    log that already holds the divergence is an alarm of its own)."""
    run = FIXTURES / "lowprec-moe"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    log = tmp_path / "metrics.jsonl"

    def log_until(step: int) -> None:
        log.write_text("".join(json.dumps(r) + "\n" for r in records if r["step"] <= step))

    offline = analyze(run, out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert offline.anomalous
    weights = _fixture_weights(run)
    first_step, first = next(weights)
    model = _module_from(first)
    params = dict(model.named_parameters())
    alarms = []
    mon = Monitor(
        model,
        tmp_path / "live",
        every=100,
        detect_every=1,
        on_alarm=alarms.append,
        config=json.loads((run / "config.json").read_text()),
        log_file=log,
    )
    log_until(first_step)
    mon.step(first_step)
    for step, tensors in weights:
        with torch.no_grad():
            for name, t in tensors.items():
                params[name].copy_(t)
        log_until(step)
        mon.step(step)
    log_until(records[-1]["step"])
    live = mon.close()
    assert len(alarms) == 1
    a = alarms[0]
    assert a.verdict["fault_type"] == offline.verdict["fault_type"]
    assert a.verdict["earliest_step"] == offline.verdict["earliest_step"]
    assert a.step >= a.verdict["confirmed_step"] >= a.verdict["earliest_step"]
    assert live.verdict["earliest_step"] == offline.verdict["earliest_step"]
    assert live.summary["lead_time_steps"] == offline.summary["lead_time_steps"]
    assert_same_timeline(offline.timeline, live.timeline)


def _play(run: Path, out: Path, **kw):
    """A drill fixture's checkpoints played through a live module, one point per checkpoint."""
    weights = _fixture_weights(run)
    first_step, first = next(weights)
    model = _module_from(first)
    params = dict(model.named_parameters())
    config = json.loads((run / "config.json").read_text())
    mon = Monitor(model, out, every=1, detect=False, config=config, log_file=run / "metrics.jsonl", **kw)
    mon.step(first_step)
    for step, tensors in weights:
        with torch.no_grad():
            for name, t in tensors.items():
                params[name].copy_(t)
        mon.step(step)
    return mon.close()


def test_projections_give_the_live_verdict_the_offline_step_size_rules(tmp_path):
    """The too-large-LR drill (its LR grows from 400): offline, the whole-model step-size jump
    (which reads the output projections) dates the fault at 600.  Live with ``projections=True``
    the verdict is the offline one; without, that rule is not read and the attention-logit rule
    dates it at 700, less confidently (the numbers docs/live.md quotes)."""
    run = FIXTURES / "highlr-moe"
    offline = analyze(run, out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    keys = ("fault_type", "decision", "earliest_step", "confidence")
    assert [offline.verdict[k] for k in keys] == ["high_lr", "high_lr/jump", 600, 0.95]
    full = _play(run, tmp_path / "full", projections=True)
    for key in ("fault_type", "earliest_step", "decision", "confidence", "confirmed_step"):
        assert full.verdict.get(key) == offline.verdict.get(key), key
    assert_same_timeline(offline.timeline, full.timeline, projections=True)
    bare = _play(run, tmp_path / "bare")
    assert [bare.verdict[k] for k in keys] == ["high_lr", "high_lr/logits", 700, 0.67]


def _resumed(run: Path, out: Path, died_at: int, resumed_from: int, start: bool = True, **kw):
    """A drill fixture played through a live module (as ``_play``) to ``died_at``; then a second
    attempt on the same store from the checkpoint at ``resumed_from`` to the end."""
    weights = list(_fixture_weights(run))
    model = _module_from(weights[0][1])
    params = dict(model.named_parameters())
    config = json.loads((run / "config.json").read_text())

    def attempt(items, first=None):
        mon = Monitor(model, out, every=1, detect=False, config=config, log_file=run / "metrics.jsonl", **kw)
        for step, tensors in items:
            with torch.no_grad():
                for name, t in tensors.items():
                    params[name].copy_(t)
            if step == first:  # the checkpoint just loaded
                if start:
                    mon.start(step)
                continue
            mon.step(step)
        return mon.close()

    attempt([(s, w) for s, w in weights if s <= died_at])  # killed: nothing after died_at
    return attempt([(s, w) for s, w in weights if s >= resumed_from], first=resumed_from)


def test_a_resumed_run_continues_its_store_as_if_never_stopped(tmp_path):
    """Killed at 1000, resumed from the checkpoint at 500, inside the too-large-LR drill's LR
    growth (from 400): with ``start(500)`` the store's points after 500 are replaced and the one at
    600 has its increment, so the store equals the offline analysis and the verdict is that of a
    monitor never stopped (``high_lr``, dated 600 by the whole-model step-size jump the detector
    reads there).  Without it the first point of the new attempt has no increment: that jump is not
    seen and the run is dated later, by the rise rule."""
    run = FIXTURES / "highlr-moe"
    offline = analyze(run, out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    never_stopped = _play(run, tmp_path / "whole", projections=True)
    live = _resumed(run, tmp_path / "live", died_at=1000, resumed_from=500, projections=True)
    assert list(live.timeline.steps) == list(offline.timeline.steps)
    assert_same_timeline(offline.timeline, live.timeline, projections=True)
    keys = ("fault_type", "earliest_step", "decision", "confidence")
    assert [live.verdict.get(k) for k in keys] == [never_stopped.verdict.get(k) for k in keys]
    assert live.verdict["decision"] == offline.verdict["decision"] == "high_lr/jump"
    bare = _resumed(run, tmp_path / "bare", died_at=1000, resumed_from=500, start=False, projections=True)
    at = list(bare.timeline.steps).index(600)
    assert np.isnan(bare.timeline.get("attn.q.update_ratio")[at]).all()
    assert [bare.verdict.get(k) for k in keys] == ["high_lr", 700, "high_lr/rise", 0.89]


def test_start_forgets_the_summary_of_the_points_it_drops(tmp_path):
    """Resumed from 600 in a store that got to 1000: the points after 600 are gone, and so is the
    summary that judged them, so ``ckptscan report`` judges the store again (``is_stale``)."""
    run = FIXTURES / "highlr-moe"
    weights = list(_fixture_weights(run))
    model = _module_from(weights[0][1])
    params = dict(model.named_parameters())
    config = json.loads((run / "config.json").read_text())
    out = tmp_path / "live"
    _play(run, out)
    assert not store.is_stale(out)
    with torch.no_grad():
        for name, t in dict(weights)[600].items():
            params[name].copy_(t)
    Monitor(model, out, every=1, detect=False, config=config).start(600)
    assert [s for s, *_ in store.read_points(out)][-1] == 600
    assert store.is_stale(out)


def test_detection_passes_and_the_log_keep_to_the_runs_steps_across_a_resume(tmp_path, monkeypatch):
    """Passes at the multiples of ``every * detect_every`` (here 300, 600, ...) whatever the
    process computed before, so a run killed and resumed more often than every ``detect_every``
    points is still judged online; the loss lines passed so far are on disk at every point."""
    run = FIXTURES / "highlr-moe"
    weights = dict(_fixture_weights(run))
    model = _module_from(weights[100])
    params = dict(model.named_parameters())
    config = json.loads((run / "config.json").read_text())
    passes = []
    original = Monitor.run_detection

    def counted(self, step=None):
        passes.append(step)
        return original(self, step)

    monkeypatch.setattr(Monitor, "run_detection", counted)
    out = tmp_path / "live"

    def at(step: int) -> int:
        with torch.no_grad():
            for name, t in weights[step].items():
                params[name].copy_(t)
        return step

    first = Monitor(model, out, every=100, detect_every=3, config=config)
    for step in (100, 200):
        first.step(at(step), loss=2.0)
    lines = (out / "log.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [100, 200]  # flushed at 200, no pass there
    for step in (300, 400, 500):
        first.step(at(step), loss=2.0)
    assert passes == [300]  # killed at 500: no close()
    second = Monitor(model, out, every=100, detect_every=3, config=config)
    second.start(at(400))
    for step in (500, 600):
        second.step(at(step), loss=2.0)
    assert passes == [300, 600]  # the fourth and fifth points of the run, the second of this process


def test_a_callback_that_cannot_monitor_warns_and_training_goes_on(tmp_path):
    """A folder that holds another run's store: the HF callback warns, naming why, and the Trainer
    trains on unmonitored; ``strict=True`` raises instead."""
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from transformers import Trainer, TrainingArguments

    from ckptscan.callbacks import HFCallback
    from ckptscan.errors import UsageError

    torch.set_num_threads(1)
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "run.json").write_text(json.dumps({"run": "/some/run", "selection": {}}))
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=4,
        save_strategy="no",
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    cb = HFCallback(tmp_path / "live", every=2)
    with pytest.warns(
        RuntimeWarning, match="in-loop monitoring is off for this run: .*needs a folder of its own"
    ):
        state = Trainer(model=_llama(), args=args, train_dataset=_token_data(16), callbacks=[cb]).train()
    assert state.global_step == 4 and cb.monitor is None
    assert not (tmp_path / "live" / "parts").exists()
    strict = HFCallback(tmp_path / "live", every=2, strict=True)
    with warnings.catch_warnings(), pytest.raises(UsageError, match="needs a folder of its own"):
        warnings.simplefilter("ignore")
        Trainer(model=_llama(), args=args, train_dataset=_token_data(16), callbacks=[strict]).train()


def test_a_store_resumed_with_other_settings_warns(tmp_path):
    """Points computed without the projections, then a resume with them: the monitor says the
    store mixes the two; the same settings again say nothing."""
    run = FIXTURES / "highlr-moe"
    weights = dict(_fixture_weights(run))
    model = _module_from(weights[100])
    config = json.loads((run / "config.json").read_text())
    Monitor(model, tmp_path / "live", every=100, detect=False, config=config).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Monitor(model, tmp_path / "live", every=100, detect=False, config=config).close()
    with pytest.warns(RuntimeWarning, match="layout differ from those its store's earlier points"):
        Monitor(model, tmp_path / "live", every=100, detect=False, config=config, projections=True)


def test_resuming_where_the_store_has_no_point_computes_one_there(tmp_path):
    """Killed at 500, resumed from a checkpoint at 600 that the store has no point for: ``start``
    computes one there (no increment: the weights before it are gone), and 700's increment spans
    600-700, as offline."""
    run = FIXTURES / "highlr-moe"
    offline = analyze(run, out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    live = _resumed(run, tmp_path / "live", died_at=500, resumed_from=600)
    assert list(live.timeline.steps) == list(offline.timeline.steps)
    at = list(live.timeline.steps).index(600)
    q_live, q_off = live.timeline.get("attn.q.update_ratio"), offline.timeline.get("attn.q.update_ratio")
    assert np.isnan(q_live[at]).all() and np.isfinite(q_off[at]).all()
    np.testing.assert_allclose(q_live[at + 1 :], q_off[at + 1 :], rtol=1e-6)
    np.testing.assert_allclose(q_live[:at], q_off[:at], rtol=1e-6)


def _llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(cfg)


def _token_data(n: int):
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (n, 16), generator=g)]


def _saving_args(out: Path):
    """The Trainer's arguments of a 20-step CPU run that saves and logs: checkpoints every 5 steps."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out),
        max_steps=20,
        save_steps=5,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
    )


def test_hf_trainer_callback_store_analyses_like_checkpoints(tmp_path):
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from transformers import Trainer

    from ckptscan.callbacks import HFCallback

    torch.set_num_threads(1)
    cb = HFCallback(tmp_path / "live", every=5)
    args = _saving_args(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Trainer(model=_llama(), args=args, train_dataset=_token_data(80), callbacks=[cb]).train()
    live = load_result(tmp_path / "live")  # written when training ended
    assert list(live.timeline.steps) == [5, 10, 15, 20]
    assert np.isfinite(live.timeline.get("attn.D2.entropy2")[1:]).all()
    assert live.summary["layout"]["family"] == "llama"
    assert live.summary["log"]["points"] == 20  # the Trainer's logged loss
    offline = analyze(tmp_path / "run", out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert_same_timeline(offline.timeline, live.timeline)

    # a loop killed after its last detection pass: report assembles the newer parts first
    (tmp_path / "live" / "summary.json").unlink()
    r = CliRunner().invoke(main, ["report", str(tmp_path / "live"), "--html", str(tmp_path / "r.html")])
    assert r.exit_code in (0, 5), r.output
    assert "points computed in the training loop every 5 optimizer steps" in r.output
    assert "in the training loop" in (tmp_path / "r.html").read_text()
    r = CliRunner().invoke(main, ["report", str(tmp_path / "live"), "--json"])
    assert json.loads(r.output)["checkpoints"]["sources"] == {"in-loop": 4}


def test_hf_trainer_resumed_from_a_checkpoint_continues_the_store(tmp_path):
    """A Trainer run to step 20, then resumed from ``checkpoint-10`` (``resume_from_checkpoint``)
    with the same callback folder: the store's points 15 and 20 are the second attempt's, with their
    increments from the loaded checkpoint, and equal the offline analysis of the checkpoints left."""
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from transformers import Trainer

    from ckptscan.callbacks import HFCallback

    torch.set_num_threads(1)
    args = _saving_args(tmp_path / "run")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for resume in (None, str(tmp_path / "run" / "checkpoint-10")):
            cb = HFCallback(tmp_path / "live", every=5)
            trainer = Trainer(model=_llama(), args=args, train_dataset=_token_data(80), callbacks=[cb])
            trainer.train(resume_from_checkpoint=resume)
    live = load_result(tmp_path / "live")
    assert list(live.timeline.steps) == [5, 10, 15, 20]
    assert np.isfinite(live.timeline.get("attn.q.update_ratio")[1:]).all()
    offline = analyze(tmp_path / "run", out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert_same_timeline(offline.timeline, live.timeline)


def test_hf_callback_stops_and_saves_on_alarm(tmp_path, monkeypatch):
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from transformers import Trainer, TrainingArguments

    from ckptscan.callbacks import HFCallback
    from ckptscan.callbacks import monitor as monitor_mod

    def anomalous(self, step=None):  # a detector that always alarms: the hook's wiring only
        self._sync_alarm({"anomalous": True, "fault_type": "high_lr", "earliest_step": step}, step)

    monkeypatch.setattr(monitor_mod.Monitor, "run_detection", anomalous)
    seen = []
    cb = HFCallback(
        tmp_path / "live",
        every=2,
        detect_every=1,
        stop_on_alarm=True,
        save_on_alarm=True,
        on_alarm=seen.append,
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=20,
        save_strategy="no",
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = Trainer(model=_llama(), args=args, train_dataset=_token_data(80), callbacks=[cb]).train()
    assert len(seen) == 1 and seen[0].step == 2 and seen[0].actions == ["stop", "save"]
    assert "optimizer" in seen[0].context
    assert state.global_step == 2  # stopped at the alarm
    assert (tmp_path / "run" / "checkpoint-2").is_dir()  # and saved there


def _lightning_fit(L, root: Path, callbacks: list, ckpt_path=None) -> None:
    """Nine steps of a LightningModule around ``_llama()`` on ``_token_data`` (AdamW at 1e-3) on the
    CPU, with ``callbacks``; checkpoints only where a ``ModelCheckpoint`` is among them."""

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = _llama()

        def training_step(self, batch, i):
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(
                torch.stack([d["input_ids"] for d in _token_data(40)]), batch_size=4
            )

    saves = any(isinstance(c, L.pytorch.callbacks.ModelCheckpoint) for c in callbacks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L.Trainer(
            default_root_dir=str(root),
            max_steps=9,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=saves,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=callbacks,
        ).fit(Module(), ckpt_path=ckpt_path)


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning", reason="lightning is in the test extra")
    from ckptscan.callbacks import LightningCallback

    _lightning_fit(L, tmp_path / "run", [LightningCallback(tmp_path / "live", every=3)])
    live = load_result(tmp_path / "live")
    assert list(live.timeline.steps) == [3, 6, 9]
    assert live.summary["layout"]["family"] == "llama" and live.summary["log"]["points"] == 9


def test_lightning_callback_resumed_from_a_checkpoint(tmp_path):
    """Lightning ``fit(ckpt_path=...)``: the callback starts the store's increments from the
    restored weights (``on_train_start``), so the first point after the resume has one, equal to the
    offline analysis of the checkpoints."""
    L = pytest.importorskip("lightning", reason="lightning is in the test extra")
    from ckptscan.callbacks import LightningCallback

    def fit(ckpts: Path, ckpt_path=None):
        save = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(ckpts), every_n_train_steps=3, save_top_k=-1)
        _lightning_fit(L, tmp_path / "run", [LightningCallback(tmp_path / "live", every=3), save], ckpt_path)

    first, second = tmp_path / "first", tmp_path / "second"
    fit(first)
    fit(second, str(first / "epoch=0-step=3.ckpt"))  # resumed; its own folder (Lightning adds -v1)
    live = load_result(tmp_path / "live")
    assert list(live.timeline.steps) == [3, 6, 9]
    assert np.isfinite(live.timeline.get("attn.q.update_ratio")[1:]).all()
    # offline: the checkpoint resumed from, then the second attempt's
    (second / "epoch=0-step=3.ckpt").write_bytes((first / "epoch=0-step=3.ckpt").read_bytes())
    _llama().config.to_json_file(str(second / "config.json"))  # the head counts
    offline = analyze(second, out_dir=tmp_path / "off", device="cpu", replay=False, command=[])
    assert list(offline.timeline.steps) == [3, 6, 9]
    assert_same_timeline(offline.timeline, live.timeline)


@pytest.mark.parametrize("kind", ["fsdp1", "zero3"])
def test_parameters_held_as_shards_get_an_error_that_says_what_to_do(tmp_path, kind):
    """FSDP1's flat parameters and DeepSpeed ZeRO-3's partitioned ones (an empty local tensor with
    ``ds_numel``) cannot be resolved into heads: the error names them and the way out."""
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    from ckptscan.errors import LayoutError

    model = _llama()
    if kind == "fsdp1":
        wrapped = torch.nn.Module()
        wrapped.add_module("_fsdp_wrapped_module", torch.nn.Module())
        n = sum(p.numel() for p in model.parameters())
        wrapped._fsdp_wrapped_module.register_parameter("_flat_param", torch.nn.Parameter(torch.zeros(n)))
        wrapped.config = model.config
        model, expect = wrapped, "FSDP1 flat parameters .*summon_full_params"
    else:
        for mod in model.modules():
            for key, p in list(mod._parameters.items()):
                if p is not None:
                    shard = torch.nn.Parameter(torch.empty(0))
                    shard.ds_numel = p.numel()
                    mod._parameters[key] = shard
        expect = "ZeRO-3 partitioned parameters .*GatheredParameters"
    with pytest.raises(LayoutError, match=expect):
        Monitor(model, tmp_path / "live")
    assert not (tmp_path / "live").exists()


def test_store_refuses_an_analysis_folder(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.json").write_text(json.dumps({"run": "/some/run", "selection": {}}))
    model = _module_from(
        {
            "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8),
            "model.layers.0.self_attn.k_proj.weight": torch.randn(8, 8),
        }
    )
    from ckptscan.errors import UsageError

    with pytest.raises(UsageError, match="needs a folder of its own"):
        Monitor(model, tmp_path / "out", config={"num_attention_heads": 2})
