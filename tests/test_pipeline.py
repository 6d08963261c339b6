"""End to end: analyze() on each reader kind, resume, read-only evidence, bad input mid-run."""

import hashlib
import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from ckptscan import analyze
from ckptscan.cli import main
from ckptscan.errors import UsageError
from tests.reference import attention_reference, router_reference
from tests.runs import TINY, make_run


def _tree_hash(root):
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            h.update(p.encode())
            h.update(str((st.st_size, st.st_mtime_ns)).encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
        h.update(str(sorted(dirnames)).encode())
    return h.hexdigest()


def _heads(sd, layer):
    H, G, h, d = TINY["heads"], TINY["kv_heads"], TINY["head_dim"], TINY["hidden"]
    q = sd[f"model.layers.{layer}.self_attn.q_proj.weight"].double().reshape(H, h, d)
    k = sd[f"model.layers.{layer}.self_attn.k_proj.weight"].double().reshape(G, h, d)
    return q, k


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "torch", "dcp"])
def test_analyze_each_format_matches_reference(tmp_path, fmt):
    run = make_run(tmp_path / "run", fmt=fmt, n=3, moe=True)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert res.summary["checkpoints"]["analyzed"] == 3
    assert list(res.timeline.steps) == [100, 200, 300]
    # reference from the same weights, read back with an independent loader
    ref_run = make_run(tmp_path / "ref", fmt="safetensors", n=3, moe=True)
    sds = [load_file(ref_run / f"checkpoint-{s}" / "model.safetensors") for s in (100, 200, 300)]
    for layer in range(TINY["layers"]):
        q0, k0 = _heads(sds[1], layer)
        q1, k1 = _heads(sds[2], layer)
        ref = attention_reference(q0, k0, q1, k1)
        for name in (
            "M.entropy2",
            "M.spectral_norm",
            "D2.entropy2",
            "D2.entropy1",
            "D3_over_D2",
            "q.update_ratio",
        ):
            got = res.timeline.get(f"attn.{name}")[2, layer, :]
            np.testing.assert_allclose(got, ref[name], rtol=1e-4, err_msg=f"{fmt} layer {layer} {name}")
        w0 = sds[1][f"model.layers.{layer}.block_sparse_moe.gate.weight"].numpy()
        w1 = sds[2][f"model.layers.{layer}.block_sparse_moe.gate.weight"].numpy()
        rref = router_reference(w0, w1)
        for name in ("similarity", "W.entropy2", "dW.entropy2", "update_ratio"):
            assert res.timeline.get(f"router.{name}")[2, layer, 0] == pytest.approx(rref[name], rel=1e-4), (
                name
            )
    # pair monitors are undefined at the first checkpoint
    assert np.isnan(res.timeline.get("attn.D2.entropy2")[0]).all()


def test_outputs_written_outside_the_run_and_evidence_unchanged(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    before = _tree_hash(run)
    out = tmp_path / "out"
    res = analyze(run, out_dir=out, device="cpu")
    assert _tree_hash(run) == before
    assert (out / "timeline.h5").is_file() and (out / "summary.json").is_file()
    s = json.loads((out / "summary.json").read_text())
    assert s["schema"] == "ckptscan/1" and s["checkpoints"]["analyzed"] == 3
    assert res.summary == s
    with pytest.raises(UsageError):
        analyze(run, out_dir=run / "results")


def test_rerun_reuses_parts_and_computes_only_new_checkpoints(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    out = tmp_path / "out"
    first = analyze(run, out_dir=out, device="cpu")
    again = analyze(run, out_dir=out, device="cpu")
    assert again.summary["checkpoints"]["reused"] == 3
    for name in first.timeline.names():
        np.testing.assert_array_equal(first.timeline.get(name), again.timeline.get(name))
    # the run gains a checkpoint: only it is computed, and its increment needs the previous weights
    make_run(tmp_path / "more", n=4)
    os.rename(tmp_path / "more" / "checkpoint-400", run / "checkpoint-400")
    grown = analyze(run, out_dir=out, device="cpu")
    assert grown.summary["checkpoints"]["reused"] == 3
    assert grown.summary["checkpoints"]["analyzed"] == 4
    assert np.isfinite(grown.timeline.get("attn.D2.entropy2")[3]).all()
    # a checkpoint rewritten in place is recomputed, and so is the pair that follows it
    f = run / "checkpoint-200" / "model.safetensors"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    again2 = analyze(run, out_dir=out, device="cpu")
    assert again2.summary["checkpoints"]["reused"] == 2


def test_torn_part_file_is_recomputed(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    out = tmp_path / "out"
    analyze(run, out_dir=out, device="cpu")
    part = min((out / "parts").iterdir())
    part.write_bytes(part.read_bytes()[:50])
    res = analyze(run, out_dir=out, device="cpu")
    assert res.summary["checkpoints"]["reused"] == 1


def test_nan_in_one_layer_is_a_finding_and_other_layers_go_on(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    f = run / "checkpoint-300" / "model.safetensors"
    sd = load_file(f)
    sd["model.layers.1.self_attn.k_proj.weight"][0, 0] = float("nan")
    sd["model.layers.1.self_attn.k_proj.weight"][1, 0] = float("inf")
    from safetensors.torch import save_file

    save_file(sd, f)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    (finding,) = res.summary["findings"]
    assert finding["kind"] == "overflow" and finding["step"] == 300 and finding["layer"] == 1
    assert finding["nonfinite"] == 2
    assert "model.layers.1.self_attn.k_proj.weight" in finding["tensors"]
    tl = res.timeline
    assert np.isfinite(tl.get("attn.D2.entropy2")[2, 0]).all()
    assert np.isnan(tl.get("attn.D2.entropy2")[2, 1]).all()
    assert tl.get("numerics.nonfinite")[2, 1, 0] == 2


def test_unreadable_checkpoint_is_skipped_and_the_rest_analysed(tmp_path):
    run = make_run(tmp_path / "run", n=4)
    f = run / "checkpoint-200" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    runner = CliRunner()
    r = runner.invoke(main, ["analyze", str(run), "-o", str(tmp_path / "out"), "--json", "--device", "cpu"])
    assert r.exit_code == 3, r.output
    s = json.loads(r.stdout)
    assert s["checkpoints"]["analyzed"] == 3
    (sk,) = s["checkpoints"]["skipped"]
    assert "checkpoint-200" in sk["path"] and sk["error"]
    r2 = runner.invoke(main, ["analyze", str(run), "-o", str(tmp_path / "out"), "--fail-on", "never", "-q"])
    assert r2.exit_code == 0


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["analyze", str(tmp_path / "missing"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2  # a path on the command line that is not there: a usage error, in every command
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing" in lines[0] and "Traceback" not in r.output
    r = runner.invoke(main, ["analyze", str(tmp_path), "--steps", "x"])
    assert r.exit_code == 2
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        "ckptscan: error: --steps 'x': expected START:END, e.g. 1000:5000 or :5000"
    ]
    r = runner.invoke(main, ["analyze", str(tmp_path), "--every", "0"])  # click's own check: one line too
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "--every" in r.stderr


def test_inspect_shows_layout(tmp_path):
    run = make_run(tmp_path / "run", n=1, moe=True)
    r = CliRunner().invoke(main, ["inspect", str(run / "checkpoint-100"), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["layout"]["family"] == "mixtral"
    assert [b["heads"] for b in info["layout"]["attention"]] == [TINY["heads"]] * TINY["layers"]
    assert len(info["layout"]["routers"]) == TINY["layers"]


def test_bf16_checkpoints(tmp_path):
    run = make_run(tmp_path / "run", n=2, dtype=torch.bfloat16)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert np.isfinite(res.timeline.get("attn.D2.entropy2")[1]).all()


def _write_replays(run, steps, moe=True, bad_step=None, seed=0):
    from ckptscan.record import write_replay

    g = torch.Generator().manual_seed(seed)
    B, T, d = 2, 12, TINY["hidden"]
    ids = torch.randint(0, 64, (B, T), generator=g)
    for s in steps:
        acts = {}
        for layer in range(TINY["layers"]):
            acts[(layer, "attn_in")] = torch.randn(B, T, d + (3 if s == bad_step else 0), generator=g)
            if moe:
                acts[(layer, "router_in")] = torch.randn(B, T, d, generator=g)
        write_replay(run / f"checkpoint-{s}" / "replay.h5", s, acts, input_ids=ids)


def test_replay_files_add_activation_series(tmp_path):
    run = make_run(tmp_path / "run", n=3, moe=True)
    _write_replays(run, (100, 200, 300))
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    tl = res.timeline
    for name in ("act.attn.max_logit", "act.attn.entropy_mean", "act.attn.S.entropy2", "act.attn.tie_ratio"):
        assert np.isfinite(tl.get(name)).all(), name
    assert (
        np.isnan(tl.get("act.attn.dS.entropy2")[0]).all()
        and np.isfinite(tl.get("act.attn.dS.entropy2")[1:]).all()
    )
    for name in (
        "act.router.entropy_mean",
        "act.router.load_entropy",
        "act.router.churn_prev",
        "act.router.churn_final",
    ):
        assert name in tl, name
    assert np.all(tl.get("act.router.churn_final")[-1] == 0)  # the final checkpoint against itself
    assert np.isfinite(tl.get("act.router.churn_prev")[1:]).all()
    again = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert again.summary["checkpoints"]["reused"] == 3
    for name in tl.names():
        np.testing.assert_array_equal(tl.get(name), again.timeline.get(name), err_msg=name)


def test_broken_replay_file_loses_only_the_activation_side(tmp_path):
    run = make_run(tmp_path / "run", n=3, moe=True)
    _write_replays(run, (100, 200, 300), bad_step=200)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    (sk,) = res.summary["checkpoints"]["skipped"]
    assert sk["path"].endswith("checkpoint-200/replay.h5") and "attn_in" in sk["reason"]
    assert res.exit_code() == 3
    tl = res.timeline
    assert np.isfinite(tl.get("attn.D2.entropy2")[1]).all()
    assert (
        np.isnan(tl.get("act.attn.max_logit")[1]).all() and np.isfinite(tl.get("act.attn.max_logit")[2]).all()
    )


def test_nothing_readable_gives_no_verdict_and_stale_temporaries_are_removed(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    out = tmp_path / "out"
    analyze(run, out_dir=out, device="cpu")
    stale = out / "parts" / ".step_000000000100.npz.abc.tmp"
    stale.write_bytes(b"torn")
    analyze(run, out_dir=out, device="cpu")
    assert not stale.exists()
    (run / "config.json").write_text("{not json")  # every checkpoint reads it
    res = analyze(run, out_dir=tmp_path / "out2", device="cpu")
    assert res.exit_code() == 3 and res.summary["checkpoints"]["analyzed"] == 0
    assert not res.anomalous and res.verdict["confidence"] == 0.0
    assert (
        "none of the 2 checkpoints could be read" in res.verdict["reason"]
        and "config.json" in res.verdict["reason"]
    )
    # with a log whose loss diverged: still no verdict from the checkpoints (nothing was read)
    (run / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": st, "loss": 3.0 if st < 150 else None}) for st in range(1, 201))
    )
    res = analyze(run, out_dir=tmp_path / "out3", device="cpu")
    assert res.exit_code() == 3 and not res.anomalous and res.verdict["fault_type"] == "inconclusive"
    assert res.verdict["earliest_step"] is None and "decision" not in res.verdict


def test_fixture_weights_match_reference(tmp_path):
    """The committed drill's real (trained, bf16) weights, through the whole pipeline, against the
    full-SVD reference of the materialised matrices."""
    from pathlib import Path

    run = Path(__file__).resolve().parent.parent / "fixtures" / "drills" / "lowprec-moe"
    res = analyze(run, out_dir=tmp_path / "out", device="cpu", steps="500:700", replay=False)
    steps = list(res.timeline.steps)
    assert steps == [500, 600, 700]
    cfg = json.loads((run / "config.json").read_text())
    H, G, h = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    sds = [load_file(run / f"checkpoint-{s}" / "model.safetensors") for s in (600, 700)]
    for layer in range(cfg["num_hidden_layers"]):

        def heads(sd, layer=layer):
            q = sd[f"model.layers.{layer}.self_attn.q_proj.weight"].double().reshape(H, h, -1)
            k = sd[f"model.layers.{layer}.self_attn.k_proj.weight"].double().reshape(G, h, -1)
            return q, k

        ref = attention_reference(*heads(sds[0]), *heads(sds[1]))
        for name, r in ref.items():
            np.testing.assert_allclose(
                res.timeline.get(f"attn.{name}")[2, layer, :], r, rtol=1e-4, err_msg=name
            )


def test_cli_bounds_heap_growth_unless_the_user_chose(monkeypatch):
    """The CLI's allocator settings (ckptscan/_alloc.py) apply on glibc Linux, and never when the
    user set MALLOC_* themselves or opted out."""
    import os
    import platform
    import sys

    import pytest

    from ckptscan._alloc import bound_heap_growth

    for k in [k for k in os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert bound_heap_growth() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("CKPTSCAN_KEEP_MALLOC", "1")
    assert bound_heap_growth() is False
    monkeypatch.delenv("CKPTSCAN_KEEP_MALLOC")
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc-only setting")
    assert bound_heap_growth() is True


FIXTURE_DRILLS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "drills")


@pytest.mark.skipif(not os.path.isdir(FIXTURE_DRILLS), reason="no drill fixtures")
def test_the_scores_alarms_were_raised_on_are_stored_and_the_baseline_stays_inside_out(tmp_path):
    """timeline.h5 keeps the detector's scores per layer (the reports draw those, not a
    recomputation), summary.json each alarm's first step per layer, and a reference run's analysis
    is cached inside -o."""
    from ckptscan.api import load_result
    from ckptscan.judge import detect
    from ckptscan.report import data

    run = os.path.join(FIXTURE_DRILLS, "lowprec-moe")
    analyze(run, out_dir=tmp_path / "a", device="cpu", replay=False)
    stored = load_result(tmp_path / "a")
    fresh = detect.run_detection(stored.timeline).scores
    assert set(stored.timeline.scores) == set(fresh) >= {"attn.D2.entropy2", "attn.q.update_ratio"}
    for name, sc in stored.timeline.scores.items():
        assert sc.shape == stored.timeline.get(name).shape[:2]
        np.testing.assert_allclose(sc, fresh[name], rtol=1e-6)
    np.testing.assert_allclose(
        data.detector_scores(stored.summary, stored.timeline, "attn.q.update_ratio"),
        stored.timeline.scores["attn.q.update_ratio"].T,
    )
    for a in stored.summary["alarms"]:
        assert min(a["first_alarm_by_layer"].values()) == a["first_alarm_step"]
        assert sorted(int(k) for k in a["first_alarm_by_layer"]) == a["layers"]
    analyze(
        run,
        out_dir=tmp_path / "b",
        device="cpu",
        replay=False,
        baseline=os.path.join(FIXTURE_DRILLS, "healthy-moe"),
    )
    assert (tmp_path / "b" / "baseline" / "healthy-moe" / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_baseline_of_another_model_is_refused_by_name(tmp_path):
    """A ``--baseline`` run of another model (here 3 layers for the run's 2) would be compared layer
    by layer with layers it does not have: a usage error (exit 2) naming the reference, the series
    and both shapes; the run's own results are still written, unjudged. Another seed of the same
    model is read."""
    run = make_run(tmp_path / "run", n=4)
    deeper = make_run(tmp_path / "deeper", n=4, c={**TINY, "layers": 3})
    r = CliRunner().invoke(
        main, ["analyze", str(run), "--baseline", str(deeper), "-o", str(tmp_path / "a"), "-q"]
    )
    assert r.exit_code == 2, r.output
    said = " ".join(r.output.split())
    assert (
        f"{deeper}: --baseline run: another model:" in said
        and "another model: 2 layers here, 3 in the reference run; give a run of the same model" in said
    )
    assert (
        "could not be judged"
        in json.loads((tmp_path / "a" / "summary.json").read_text())["verdict"]["reason"]
    )
    moe = make_run(tmp_path / "moe", n=4, moe=True)  # the same attention, with experts: another model
    r = CliRunner().invoke(
        main, ["analyze", str(run), "--baseline", str(moe), "-o", str(tmp_path / "m"), "-q"]
    )
    assert r.exit_code == 2 and "another model: 0 experts here, 4 in the reference run" in " ".join(
        r.output.split()
    )
    other_seed = make_run(tmp_path / "seed", n=4, seed=5)
    res = analyze(run, out_dir=tmp_path / "b", baseline=other_seed)
    d = res.summary["detection"]
    assert (d["reference_scope"], d["reference_steps_held"], d["reference_identical"]) == (
        "step_size",
        [4, 4],
        False,
    )
    copy = make_run(tmp_path / "copy", n=4)  # the same seed: the same weights at every checkpoint
    d = analyze(run, out_dir=tmp_path / "c", baseline=copy).summary["detection"]
    assert (d["reference_shared_until"], d["reference_identical"]) == (400, True)


def test_a_baseline_that_is_the_run_or_no_run_is_refused_by_name(tmp_path):
    """``--baseline`` naming the run itself is a usage error (exit 2: a run read against itself would
    show a perfect match); a baseline that cannot be analysed names itself as the --baseline run, so
    a reader knows which of the two folders is wrong (exit 3)."""
    run = os.path.join(FIXTURE_DRILLS, "lowprec-moe")
    with pytest.raises(UsageError, match="--baseline is the run itself"):
        analyze(run, out_dir=tmp_path / "a", baseline=run + os.sep)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, ["analyze", run, "--baseline", str(empty), "-o", str(tmp_path / "b"), "-q"])
    assert r.exit_code == 3, r.output
    assert f"{empty}: --baseline run: no checkpoints found" in " ".join(r.output.split())
