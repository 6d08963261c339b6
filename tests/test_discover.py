"""Run discovery: step names of real frameworks, unfinished writes, filters, odd trees."""

import os

import pytest

from ckptscan.discover.checkpoints import discover, parse_step
from ckptscan.errors import InputError, UsageError
from tests.runs import make_run


@pytest.mark.parametrize(
    "name,step",
    [
        ("checkpoint-500", 500),
        ("step-500", 500),
        ("step500", 500),
        ("step_500", 500),
        ("iter_0000500", 500),
        ("global_step500", 500),
        ("epoch=0-step=500.ckpt", 500),
        ("step=500.ckpt", 500),
        ("500", 500),
        ("000500", 500),
        ("checkpoint_7", 7),
        ("step500-tmp", None),
        ("checkpoint-500.partial", None),
        ("runs", None),
        ("config.json", None),
        ("latest", None),
        ("step-", None),
    ],
)
def test_parse_step(name, step):
    assert parse_step(name) == step


def test_custom_regex():
    import re

    assert parse_step("ckpt.e3.s1200", re.compile(r"ckpt\.e\d+\.s(\d+)")) == 1200
    assert parse_step("checkpoint-5", re.compile(r"ckpt\.e\d+\.s(\d+)")) is None


def test_orders_by_step_and_lists_skipped(tmp_path):
    run = make_run(tmp_path / "run", n=3, every=50, name="step_{step}")
    (run / "step_175-tmp").mkdir()
    (run / "step_999").mkdir()  # a checkpoint-like folder without weights
    (run / "notes").mkdir()
    ckpts, skipped = discover(run)
    assert [c.step for c in ckpts] == [50, 100, 150]
    reasons = {os.path.basename(s.path): s for s in skipped}
    assert not reasons["step_175-tmp"].error and "unfinished" in reasons["step_175-tmp"].reason
    assert reasons["step_999"].error and "no checkpoint" in reasons["step_999"].reason
    assert "notes" not in reasons


def test_non_monotonic_names_and_duplicates(tmp_path):
    run = make_run(tmp_path / "run", n=2, every=1000, name="iter_{step:07d}")
    make_run(run, n=1, every=5, name="checkpoint-{step}")  # step 5: sorts before 1000 despite the name
    make_run(tmp_path / "other", n=1, every=1000, name="step-{step}")
    os.rename(tmp_path / "other" / "step-1000", run / "step-1000")  # duplicate of iter_0001000
    ckpts, skipped = discover(run)
    assert [c.step for c in ckpts] == [5, 1000, 2000]
    dup = [s for s in skipped if "duplicate step 1000" in s.reason]
    assert len(dup) == 1


def test_steps_and_every_filters(tmp_path):
    run = make_run(tmp_path / "run", n=6, every=100)
    assert [c.step for c in discover(run, steps="200:400")[0]] == [200, 300, 400]
    assert [c.step for c in discover(run, steps=":200")[0]] == [100, 200]
    assert [c.step for c in discover(run, every=2)[0]] == [100, 300, 500]
    with pytest.raises(UsageError):
        discover(run, steps="400:200")
    with pytest.raises(UsageError):
        discover(run, steps="abc")
    with pytest.raises(UsageError):
        discover(run, step_regex="no-group")


def test_checkpoints_in_a_container_folder_and_lightning_files(tmp_path):
    run = tmp_path / "run"
    make_run(run / "checkpoints", n=2, every=10, fmt="torch", name="ckpt-{step}")
    # Lightning: files named epoch=E-step=S.ckpt holding {"state_dict": ...}
    import torch

    light = tmp_path / "light" / "checkpoints"
    light.mkdir(parents=True)
    for s in (10, 20):
        torch.save({"state_dict": {"model.w": torch.zeros(2)}}, light / f"epoch=0-step={s}.ckpt")
    assert [c.step for c in discover(tmp_path / "light")[0]] == [10, 20]
    assert discover(run)[0] == []  # ckpt-10 is no known step name
    assert [c.step for c in discover(run / "checkpoints", step_regex=r"ckpt-(\d+)")[0]] == [10, 20]


def test_incomplete_sharded_checkpoint_is_skipped(tmp_path):
    run = make_run(tmp_path / "run", n=3, fmt="sharded")
    (run / "checkpoint-200" / "model-00002-of-00002.safetensors").unlink()
    ckpts, skipped = discover(run)
    assert [c.step for c in ckpts] == [100, 300]
    assert any("checkpoint-200" in s.path and "incomplete" in s.reason and s.error for s in skipped)


def test_symlink_loop_and_missing_run(tmp_path):
    run = make_run(tmp_path / "run", n=1)
    os.symlink(run / "step-7", run / "step-7")  # a link to itself
    ckpts, skipped = discover(run)
    assert [c.step for c in ckpts] == [100]
    assert any("step-7" in s.path for s in skipped)
    with pytest.raises(InputError):
        discover(tmp_path / "nope")


def test_many_checkpoint_folders(tmp_path):
    run = make_run(tmp_path / "run", n=1)
    for i in range(10_000):
        (run / f"step-{i + 1000}-tmp").mkdir()
    ckpts, skipped = discover(run)
    assert [c.step for c in ckpts] == [100]
    assert len(skipped) == 10_000
