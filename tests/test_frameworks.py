"""Runs written by the real frameworks, analysed from the root of their default output tree.

Each test writes a tiny run with the library itself (tests/framework_runs.py) and checks that ckptscan
finds every checkpoint under its training step, finds the log, and needs a flag only for what the
framework never records.  DeepSpeed ZeRO-3 is read from a small fixture written by DeepSpeed (two
ranks) and compared with DeepSpeed's own ``zero_to_fp32`` output.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from ckptscan import analyze
from ckptscan.cli import main
from ckptscan.discover.checkpoints import discover_run
from ckptscan.errors import FormatError, UnsafePickleError
from ckptscan.judge import logs
from ckptscan.readers import open_checkpoint
from ckptscan.readers.steps import recorded_step
from tests import framework_runs as fr

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "deepspeed"
HEAD_FLAGS = {"heads": fr.HEADS, "kv_heads": fr.KV_HEADS}


def run(root: Path, out: Path, **kw):
    return analyze(root, out_dir=out, device="cpu", replay=False, command=[], **kw)


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    pytest.importorskip(
        "transformers", reason="transformers writes the Trainer run (test extra 'frameworks')"
    )
    return fr.hf_trainer_run(tmp_path_factory.mktemp("hf") / "out")


def test_hf_trainer_root_and_its_summary_record(hf_run, tmp_path):
    res = run(hf_run, tmp_path / "o")
    ck = res.summary["checkpoints"]
    assert ck["steps"] == [2, 4, 6] and ck["framework"] == "hf-trainer" and not ck["skipped"]
    state = json.loads((hf_run / "trainer_state.json").read_text())
    assert "train_runtime" in state["log_history"][-1]  # the summary record Trainer.save_state writes
    last = [r for r in state["log_history"] if "loss" in r][-1]
    curve = logs.read_log(hf_run / "trainer_state.json")
    assert curve.steps[-1] == last["step"] == 6 and curve.loss[-1] == last["loss"]
    assert curve.loss[-1] != state["log_history"][-1]["train_loss"]
    assert not curve.notes  # no "re-logged steps" note
    assert res.summary["log"]["points"] == 6 and res.summary["log"]["aligned"] is True


@pytest.fixture(scope="module")
def accelerate_root(tmp_path_factory):
    pytest.importorskip("accelerate", reason="accelerate writes the run (test extra 'frameworks')")
    pytest.importorskip("tensorboard", reason="the TensorBoard tracker needs tensorboard (test extra)")
    return fr.accelerate_run(tmp_path_factory.mktemp("acc") / "project")


def test_accelerate_automatic_names_take_the_optimizer_step(accelerate_root, tmp_path):
    names = sorted(p.name for p in (accelerate_root / "checkpoints").iterdir())
    assert names == ["checkpoint_0", "checkpoint_1", "checkpoint_2", "checkpoint_3"]
    found = discover_run(accelerate_root)
    assert found.framework.name == "accelerate"
    assert [c.step for c in found.checkpoints] == [2, 4, 6, 8]
    assert [c.path.name for c in found.checkpoints] == names


def test_accelerate_needs_only_the_heads_flag_and_reads_tensorboard(accelerate_root, tmp_path):
    bare = run(accelerate_root, tmp_path / "bare")
    reasons = {s["reason"] for s in bare.summary["checkpoints"]["skipped"]}
    assert len(reasons) == 1 and "--heads N (and --kv-heads G)" in reasons.pop()
    res = run(accelerate_root, tmp_path / "flags", **HEAD_FLAGS)
    assert res.summary["checkpoints"]["analyzed"] == 4
    assert res.summary["layout"]["attention"][0]["heads"] == fr.HEADS
    log = res.summary["log"]
    assert Path(log["path"]) == accelerate_root / "run" and log["points"] == 8 and log["aligned"]


def test_config_json_found_above_the_run_root(accelerate_root, tmp_path):
    project = tmp_path / "experiments" / "project"
    project.parent.mkdir()
    project.symlink_to(accelerate_root, target_is_directory=True)
    fr.write_config(tmp_path / "experiments")
    res = run(project, tmp_path / "o")
    assert res.summary["checkpoints"]["analyzed"] == 4
    assert any("experiments/config.json" in n for n in res.summary["layout"]["notes"])


def test_checkpoint_steps_that_count_saves_drop_the_lead_time(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate writes the run (test extra 'frameworks')")
    root = fr.accelerate_run(tmp_path / "sgd", optimizer="sgd", tensorboard=False)
    assert recorded_step(root / "checkpoints" / "checkpoint_0", ("optimizer",)) is None
    (root / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "loss": 4.0}) for s in range(1, 401))
    )
    res = run(root, tmp_path / "o", **HEAD_FLAGS)
    assert res.summary["checkpoints"]["steps"] == [0, 1, 2, 3]
    assert any("save" in n for n in res.summary["checkpoints"]["notes"])
    log = res.summary["log"]
    assert log["aligned"] is False and any("cannot be aligned" in n for n in log["notes"])
    assert res.summary["lead_time_steps"] is None
    cli = CliRunner().invoke(
        main,
        [
            "analyze",
            str(root),
            "-o",
            str(tmp_path / "o"),
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--device",
            "cpu",
            "--no-replay",
            "--fail-on",
            "never",
        ],
    )
    assert cli.exit_code == 0 and cli.output.count("cannot be aligned") == 1, cli.output


@pytest.fixture(scope="module")
def lightning_root(tmp_path_factory):
    pytest.importorskip("lightning", reason="Lightning writes the run (test extra 'frameworks')")
    pytest.importorskip("transformers", reason="the tiny model is a transformers LLaMA")
    root = tmp_path_factory.mktemp("pl") / "root"
    fr.lightning_run(root, csv=False)  # version_0: no usable config
    fr.lightning_run(root, save_last=True, hparams={"n_heads": fr.HEADS, "n_kv_heads": fr.KV_HEADS})
    return root


def test_lightning_default_tree_from_the_root(lightning_root, tmp_path):
    res = run(lightning_root, tmp_path / "o")
    ck = res.summary["checkpoints"]
    version = lightning_root / "lightning_logs" / "version_1"
    assert ck["framework"] == "lightning" and Path(ck["run_folder"]) == version
    assert any("version_0, version_1" in n and "analysing version_1" in n for n in ck["notes"])
    assert ck["steps"] == [2, 4, 6] and ck["analyzed"] == 3
    assert [s["error"] for s in ck["skipped"]] == [False]  # last.ckpt: a copy of the step-6 file
    assert "hyper_parameters" in " ".join(res.summary["layout"]["notes"])  # heads from the safe hparams
    assert Path(res.summary["log"]["path"]) == version / "metrics.csv" and res.summary["log"]["points"] == 6
    # Lightning logs the 0-based step being taken (0..5); its checkpoints count completed steps (2, 4, 6)
    assert (res.summary["log"]["first_step"], res.summary["log"]["last_step"]) == (1, 6)


def test_lightning_hparams_without_model_dims_leave_the_config_to_the_run_root(tmp_path):
    """Hyper-parameters that do not describe the model (an lr) do not hide a config.json that the
    training script saved at the run root."""
    pytest.importorskip("lightning", reason="Lightning writes the run (test extra 'frameworks')")
    pytest.importorskip("transformers", reason="the tiny model is a transformers LLaMA")
    root = fr.lightning_run(tmp_path / "root", hparams={"lr": 1e-3})
    fr.llama().config.to_json_file(root / "config.json")
    res = run(root, tmp_path / "o")
    assert res.summary["checkpoints"]["analyzed"] == 3, res.summary["checkpoints"]["skipped"]
    assert any(str(root / "config.json") in n for n in res.summary["layout"]["notes"])


def test_lightning_checkpoints_folder_finds_the_log_one_level_up(lightning_root, tmp_path):
    folder = lightning_root / "lightning_logs" / "version_1" / "checkpoints"
    assert logs.find_log(folder) == folder.parent / "metrics.csv"
    assert recorded_step(folder / "last.ckpt", ("lightning",)) == 6


def test_lightning_tensorboard_log(lightning_root, tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard events are read with tensorboard (test extra)")
    version = lightning_root / "lightning_logs" / "version_0"
    curve = logs.read_log(logs.find_log(version, patterns=("events.out.tfevents.*",)))
    assert curve.steps.tolist() == list(range(6)) and curve.loss.min() > 0


def test_missing_module_under_trust_pickle_is_named(tmp_path, monkeypatch):
    """A Lightning checkpoint whose hyper-parameters hold an object of a module not installed here."""
    mod = types.ModuleType("module_that_is_not_installed")
    mod.Config = type("Config", (), {"__module__": mod.__name__})
    with monkeypatch.context() as m:
        m.setitem(sys.modules, mod.__name__, mod)
        torch.save(
            {"state_dict": {"w": torch.zeros(2)}, "hyper_parameters": {"cfg": mod.Config()}},
            tmp_path / "epoch=0-step=1.ckpt",
        )
    with pytest.raises(UnsafePickleError, match="GLOBAL module_that_is_not_installed.Config"):
        open_checkpoint(tmp_path / "epoch=0-step=1.ckpt").infos()
    with pytest.raises(
        FormatError,
        match="needs the Python module 'module_that_is_not_installed', which is not installed here",
    ):
        open_checkpoint(tmp_path / "epoch=0-step=1.ckpt", trust_pickle=True).infos()
    with pytest.raises(FormatError, match="needs the Python module 'module_that_is_not_installed'"):
        open_checkpoint(tmp_path / "epoch=0-step=1.ckpt", trust_pickle=True).infos()


def test_torchtitan_tree_steps_and_tensorboard_tags(tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard events are read with tensorboard (test extra)")
    root = fr.torchtitan_run(tmp_path / "dump")
    found = discover_run(root)
    assert found.framework.name == "torchtitan" and [c.step for c in found.checkpoints] == [10, 20, 30]
    assert recorded_step(root / "checkpoint" / "step-20", ("dcp_train_state",)) == 20
    res = run(root, tmp_path / "o", **HEAD_FLAGS)
    assert res.summary["checkpoints"]["analyzed"] == 3
    assert res.summary["log"]["points"] == 30 and res.summary["log"]["has_grad_norm"]


def test_olmo_core_and_nemo_trees(tmp_path):
    from tests.runs import config, state_dict, write_checkpoint

    g = torch.Generator().manual_seed(0)
    olmo = tmp_path / "olmo"
    for step in (100, 200):
        write_checkpoint(olmo / f"step{step}" / "model_and_optim", state_dict(g, False), "dcp")
    (olmo / "config.json").write_text(json.dumps(config(False)))
    found = discover_run(olmo)
    assert found.framework.name == "olmo-core" and [c.step for c in found.checkpoints] == [100, 200]
    assert run(olmo, tmp_path / "o1").summary["checkpoints"]["analyzed"] == 2

    version = tmp_path / "nemo" / "gpt" / "2026-01-01_00-00-00"
    for step in (50, 100):
        name = f"megatron_gpt--val_loss=2.10-step={step}-consumed_samples={step * 8}.0"
        write_checkpoint(version / "checkpoints" / name / "weights", state_dict(g, False), "dcp")
    (version / "checkpoints" / "megatron_gpt--val_loss=2.10-step=100-consumed_samples=800.0-last").symlink_to(
        version / "checkpoints" / "megatron_gpt--val_loss=2.10-step=100-consumed_samples=800.0"
    )
    found = discover_run(tmp_path / "nemo" / "gpt")
    assert found.framework.name == "nemo" and [c.step for c in found.checkpoints] == [50, 100]
    assert [s.error for s in found.skipped] == [False]  # the -last copy


def test_deepspeed_zero3_two_ranks_match_zero_to_fp32(tmp_path):
    root = FIXTURES / "zero3-world2"
    found = discover_run(root)
    assert found.framework.name == "deepspeed" and [c.step for c in found.checkpoints] == [2]
    assert recorded_step(root / "global_step2", ("deepspeed",)) == 2
    reference = load_file(FIXTURES / "zero3-world2-reference.safetensors")
    with open_checkpoint(root / "global_step2") as src:
        assert src.format == "deepspeed-zero3"
        for name, want in reference.items():
            assert torch.equal(src.read(name), want), name
    res = CliRunner().invoke(
        main,
        [
            "analyze",
            str(root),
            "-o",
            str(tmp_path / "o"),
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--json",
            "--device",
            "cpu",
            "--fail-on",
            "never",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["checkpoints"]["analyzed"] == 1


def test_deepspeed_zero3_with_a_rank_missing_is_incomplete(tmp_path):
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(FIXTURES / "zero3-world2", root)
    (root / "global_step2" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    found = discover_run(root)
    assert not found.checkpoints and "incomplete" in found.skipped[0].reason


def test_deepspeed_under_hf_trainer_reads_the_tag_folder(tmp_path):
    import shutil

    ck = tmp_path / "run" / "checkpoint-2"
    shutil.copytree(FIXTURES / "zero3-world2" / "global_step2", ck / "global_step2")
    (ck / "latest").write_text("global_step2")
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": []}))
    with open_checkpoint(ck) as src:
        assert src.format == "deepspeed-zero3"
    assert [c.step for c in discover_run(tmp_path / "run").checkpoints] == [2]


def test_tensorboard_log_without_the_package_is_one_note(tmp_path, monkeypatch):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"\x00" * 16)
    for name in [n for n in sys.modules if n.split(".")[0] == "tensorboard"] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # imports fail as if it were not installed
    curve = logs.read_log(logs.find_log(tmp_path))
    assert (
        len(curve) == 0 and len(curve.notes) == 1 and "pip install 'ckptscan[tensorboard]'" in curve.notes[0]
    )


def test_config_flag_json_and_toml(tmp_path):
    from tests.runs import make_run

    root = make_run(tmp_path / "run", n=2)
    cfg = json.loads((root / "config.json").read_text())
    (root / "config.json").unlink()
    (tmp_path / "model.json").write_text(json.dumps(cfg))
    (tmp_path / "model.toml").write_text(
        f"[model]\nheads = {cfg['num_attention_heads']}\nkv_heads = {cfg['num_key_value_heads']}\n"
    )
    for flag in ("model.json", "model.toml"):
        res = run(root, tmp_path / f"out-{flag}", config_file=tmp_path / flag)
        assert res.summary["checkpoints"]["analyzed"] == 2, flag
    (tmp_path / "bad.json").write_text("[1, 2]")
    out = CliRunner().invoke(
        main, ["analyze", str(root), "-o", str(tmp_path / "o"), "--config", str(tmp_path / "bad.json")]
    )
    assert out.exit_code == 2 and "not a JSON object" in out.output
