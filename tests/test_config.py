"""``AnalysisConfig``: one frozen object for every choice of an analysis, checked at construction."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from ckptscan.config import AnalysisConfig
from ckptscan.errors import UsageError


def test_defaults_paths_and_selection():
    c = AnalysisConfig(steps="0:500", every=2, layout_file="x.toml", baseline="ref")
    assert c.layout_file == Path("x.toml") and c.baseline == Path("ref")
    assert c.selection == {"steps": "0:500", "every": 2, "step_regex": None}
    assert AnalysisConfig().device == "auto" and AnalysisConfig().replay is True


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        AnalysisConfig().device = "cpu"


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"every": 0}, "--every 0: must be >= 1"),
        ({"heads": -1}, "--heads -1: must be >= 1"),
        ({"kv_heads": 1.5}, "--kv-heads 1.5: must be a whole number"),
        ({"device": "tpu"}, "--device tpu"),
    ],
)
def test_invalid_values_are_usage_errors(kw, words):
    with pytest.raises(UsageError, match=words):
        AnalysisConfig(**kw)


def test_every_field_is_documented():
    docs = AnalysisConfig.fields_doc()
    assert set(docs) == {f.name for f in dataclasses.fields(AnalysisConfig)}
    assert all(docs.values())


def test_reference_config_drops_its_own_log_and_baseline():
    c = AnalysisConfig(device="cpu", log_file="log.jsonl", baseline="ref", steps=":900")
    assert c.for_reference() == AnalysisConfig(device="cpu", steps=":900")


def test_api_and_judge_do_not_import_each_other():
    """The judgement is pure: ``api`` analyses a reference run itself and hands its timeline over."""
    code = "import sys, ckptscan.judge.verdict; print('ckptscan.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    src = (Path(__file__).parent.parent / "ckptscan" / "judge" / "verdict.py").read_text()
    assert "from ckptscan.api" not in src and "import ckptscan.api" not in src


def test_analyze_takes_a_config_or_its_fields_not_both(tmp_path):
    from ckptscan import analyze

    with pytest.raises(TypeError, match="not both"):
        analyze(tmp_path, AnalysisConfig(), device="cpu")
