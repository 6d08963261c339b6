"""A checkpoint format defined and registered in this file alone flows through discovery, the
completeness checks (readers and ``ckptscan watch``), and the analysis, which computes from it
exactly what it computes from the same weights in safetensors.  Nothing outside this file knows
about it (CONTRIBUTING.md, "Add a checkpoint format": one file, plus one import line for a
built-in one)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Self

import numpy as np
import pytest
import torch

from ckptscan import analyze
from ckptscan.discover.checkpoints import discover
from ckptscan.errors import FormatError
from ckptscan.readers import detect_format, is_complete, open_checkpoint
from ckptscan.readers.base import TensorInfo
from ckptscan.readers.registry import FORMATS, Format, Listing, Plan, register_format, unregister_format
from ckptscan.watch import is_complete as watch_complete

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "drills" / "healthy-dense"
SUFFIX = ".toyw"  # an .npz archive: each tensor's raw bytes as int16/int32 words, its dtype beside it


class ToySource:
    format = "toy"

    def __init__(self, path: Path):
        self.path = path
        with np.load(path) as z:
            self._arrays = {k: z[k] for k in z.files}

    def infos(self) -> dict[str, TensorInfo]:
        return {
            k[:-5]: TensorInfo(k[:-5], tuple(v.shape), str(self._arrays[k[:-5] + ".type"]), self.path.name)
            for k, v in self._arrays.items()
            if k.endswith(".data")
        }

    def read(self, name: str) -> torch.Tensor:
        dtype = getattr(torch, str(self._arrays[name + ".type"]))
        return torch.from_numpy(self._arrays[name + ".data"].copy()).view(dtype)

    def close(self) -> None:
        self._arrays = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plan_file(path: Path) -> Plan | None:
    return Plan(TOY, "toy", path, files=[path]) if path.name.endswith(SUFFIX) else None


def _plan_folder(ls: Listing) -> Plan | None:
    files = ls.only("*" + SUFFIX, ls.models)
    return Plan(TOY, "toy", ls.folder / files[0], files=[ls.folder / files[0]]) if len(files) == 1 else None


def _check_complete(plan: Plan) -> None:
    if plan.files[0].stat().st_size == 0:
        raise FormatError("file is empty (0 bytes)", plan.files[0])


def _unfinished(names: set[str]) -> str:
    return "a .partial file: still being written" if any(n.endswith(".partial") for n in names) else ""


TOY = Format(
    name="toy",
    precedence=35,
    looked_for="*" + SUFFIX,
    plan_file=_plan_file,
    plan_folder=_plan_folder,
    open=lambda plan, trust_pickle: ToySource(plan.files[0]),
    check_complete=_check_complete,
    file_suffixes=(SUFFIX,),
    unfinished=_unfinished,
)


@pytest.fixture
def toy_format():
    register_format(TOY)
    yield TOY
    unregister_format("toy")


def _write_toy(source: Path, target: Path) -> None:
    arrays = {}
    with open_checkpoint(source) as src:
        for name, info in src.infos().items():
            t = src.read(name)
            words = {2: torch.int16, 4: torch.int32}[t.element_size()]
            arrays[name + ".data"] = t.view(words).numpy()
            arrays[name + ".type"] = np.array(info.dtype)
    with open(target, "wb") as f:  # np.savez would add ".npz" to a name
        np.savez(f, **arrays)


def _toy_run(tmp_path: Path, steps=(100, 200, 300, 400)) -> Path:
    run = tmp_path / "toy-run"
    run.mkdir()
    shutil.copy(FIXTURE / "config.json", run / "config.json")
    for step in steps:
        ck = run / f"checkpoint-{step}"
        ck.mkdir()
        shutil.copy(FIXTURE / f"checkpoint-{step}" / "config.json", ck / "config.json")
        _write_toy(FIXTURE / f"checkpoint-{step}", ck / ("model" + SUFFIX))
    return run


def test_a_format_registered_here_is_analysed_like_the_same_weights_in_safetensors(toy_format, tmp_path):
    run = _toy_run(tmp_path)
    assert detect_format(run / "checkpoint-100") == "toy"
    assert is_complete(run / "checkpoint-100") == (True, "")
    toy = analyze(run, out_dir=tmp_path / "toy-out", device="cpu", command=["test"])
    ref = analyze(FIXTURE, out_dir=tmp_path / "ref-out", device="cpu", steps="100:400", command=["test"])
    assert list(toy.timeline.steps) == list(ref.timeline.steps) == [100, 200, 300, 400]
    names = set(ref.timeline.names())
    assert names and set(toy.timeline.names()) == names
    for name in names:
        np.testing.assert_array_equal(toy.timeline.get(name), ref.timeline.get(name), err_msg=name)
    assert toy.summary["verdict"] == ref.summary["verdict"]


def test_its_files_are_found_checked_and_watched(toy_format, tmp_path):
    run = _toy_run(tmp_path, steps=(100,))
    shutil.copy(run / "checkpoint-100" / ("model" + SUFFIX), run / ("step200" + SUFFIX))  # a file alone
    (run / ("step300" + SUFFIX)).write_bytes(b"")  # cut short
    found, skipped = discover(run)
    assert [(c.step, c.path.name) for c in found] == [(100, "checkpoint-100"), (200, "step200" + SUFFIX)]
    assert [(Path(s.path).name, "empty" in s.reason) for s in skipped] == [("step300" + SUFFIX, True)]
    with open_checkpoint(run / ("step200" + SUFFIX)) as src:
        assert src.format == "toy" and "model.norm.weight" in src.infos()
    # ckptscan watch: the format's own "still being written" rule, then the readers' checks
    (run / "checkpoint-100" / "model.toyw.partial").write_bytes(b"")
    assert watch_complete(run / "checkpoint-100") == (False, "a .partial file: still being written")
    os.remove(run / "checkpoint-100" / "model.toyw.partial")
    assert watch_complete(run / "checkpoint-100") == (True, "")


def test_the_format_is_gone_once_unregistered(toy_format, tmp_path):
    run = _toy_run(tmp_path, steps=(100,))
    unregister_format("toy")
    assert "toy" not in [f.name for f in FORMATS]
    assert detect_format(run / "checkpoint-100") is None
    ok, why = is_complete(run / "checkpoint-100")
    assert not ok and "no checkpoint files found" in why and SUFFIX not in why
    register_format(TOY)  # the fixture removes it again
    with pytest.raises(ValueError, match="registered twice"):
        register_format(TOY)
