"""Fuzzing whole runs: one file of a small run replaced by hypothesis-generated content, then
``ckptscan analyze`` through the CLI.  Whatever the content, the promises of docs/guarantees.md hold:
an exit code in {0, 1, 3, 5}, no traceback, summary.json written, and the input tree byte-identical
(contents, modes, mtimes).  tests/test_fuzz.py fuzzes each parser alone; this file checks that
nothing a parser lets through breaks a later stage.

Fuzzed: a safetensors header, a shard index, config.json, the training log (JSON lines, CSV,
trainer_state.json) and a replay.h5 file.  CI runs ``FUZZ_EXAMPLES`` examples per fuzzer; set
``CKPTSCAN_FUZZ_EXAMPLES`` for a longer run (docs/guarantees.md says how long the last one was).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from itertools import count
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptscan.api import OWNER_FILE
from tests.runs import make_run, write_checkpoint
from tests.test_fuzz import JSON
from tests.test_reliability import Q0, _replay, cli, tree_state

FUZZ_EXAMPLES = int(os.environ.get("CKPTSCAN_FUZZ_EXAMPLES", "6"))
RUNS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
IDS = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
_EXAMPLE = count()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """checkpoint-100/300 single safetensors files, checkpoint-200 sharded with an index; a JSONL
    log; a second copy with replay files."""
    root = tmp_path_factory.mktemp("fuzz-base")
    run = make_run(root / "run", n=3)
    sd = {k: v for k, v in _load(run / "checkpoint-200" / "model.safetensors").items()}
    shutil.rmtree(run / "checkpoint-200")
    write_checkpoint(run / "checkpoint-200", sd, "sharded")
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 3.0 - s / 1000}) + "\n" for s in range(10, 310, 10))
    )
    replay = shutil.copytree(run, root / "replay-run")
    for step in (100, 200, 300):
        _replay(replay / f"checkpoint-{step}" / "replay.h5", step, IDS)
    return {"plain": run, "replay": replay, "scratch": root}


def _load(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path)


def analyze_damaged(base: dict, kind: str, damage) -> None:
    """Copy the base run (mtimes kept, so unchanged checkpoints' parts are reused), damage one file,
    analyse it, and check the promises."""
    i = next(_EXAMPLE)
    run = shutil.copytree(base[kind], base["scratch"] / f"ex{i}" / "run")
    damage(Path(run))
    out = base["scratch"] / f"out-{kind}"
    (out / "summary.json").unlink(missing_ok=True)
    (out / OWNER_FILE).unlink(missing_ok=True)  # the folder is shared by the examples (parts reused)
    before = tree_state(run)
    r = cli("analyze", run, "-o", out, "--json", "--device", "cpu")
    assert "Traceback" not in r.output and "internal error" not in r.stderr, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 3, 5), r.output
    assert (out / "summary.json").is_file()
    assert tree_state(run) == before
    shutil.rmtree(Path(run).parent)


# ------------------------------------------------------------------------------ safetensors header

ENTRY_FIELD = st.sampled_from(["dtype", "shape", "data_offsets"])
BIG = st.one_of(st.integers(-(2**70), 2**70), st.just(10**500), st.floats(allow_nan=True))


def _header(f: Path) -> tuple[dict, bytes]:
    b = f.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    return json.loads(b[8 : 8 + n]), b[8 + n :]


def _write_header(f: Path, header_bytes: bytes, data: bytes) -> None:
    f.write_bytes(struct.pack("<Q", len(header_bytes)) + header_bytes + data)


HEADER = st.one_of(
    st.tuples(st.just("field"), ENTRY_FIELD, st.one_of(JSON, BIG, st.lists(BIG, max_size=3))),
    st.tuples(st.just("whole"), JSON, st.none()),
    st.tuples(st.just("bytes"), st.binary(max_size=80), st.none()),
    st.tuples(st.just("nest"), st.integers(1, 3000), st.none()),
    st.tuples(st.just("twice"), st.none(), st.none()),
)


@RUNS
@given(HEADER)
def test_fuzzed_safetensors_header(base, change):
    how, a, b = change

    def damage(run: Path) -> None:
        f = run / "checkpoint-300" / "model.safetensors"
        header, data = _header(f)
        if how == "field":
            header[Q0][a] = b
            raw = json.dumps(header).encode()
        elif how == "whole":
            raw = json.dumps(a).encode()
        elif how == "bytes":
            raw = a
        elif how == "nest":
            raw = json.dumps(header)[:-1].encode() + b', "x": ' + b"[" * a + b"]" * a + b"}"
        else:
            again = json.dumps({Q0: header[Q0]})[1:-1]
            raw = (json.dumps(header)[:-1] + ", " + again + "}").encode()
        _write_header(f, raw, data)

    analyze_damaged(base, "plain", damage)


# ------------------------------------------------------------------------------------- shard index

SHARD = st.one_of(
    st.sampled_from(
        [
            "model-00001-of-00002.safetensors",
            "../x.safetensors",
            "/etc/passwd",
            "",
            "x" * 300,
            "a/../../b",
            "model.safetensors.index.json",
            ".",
        ]
    ),
    st.text(max_size=12),
    st.integers(),
    st.none(),
)


@RUNS
@given(
    st.one_of(
        st.tuples(st.just("weight_map"), st.dictionaries(st.sampled_from([Q0, "x", ""]), SHARD, max_size=3)),
        st.tuples(st.just("whole"), JSON),
        st.tuples(st.just("bytes"), st.binary(max_size=80)),
    )
)
def test_fuzzed_shard_index(base, change):
    how, value = change

    def damage(run: Path) -> None:
        idx = run / "checkpoint-200" / "model.safetensors.index.json"
        if how == "weight_map":
            doc = json.loads(idx.read_text())
            doc["weight_map"].update(value)
            idx.write_text(json.dumps(doc))
        elif how == "whole":
            idx.write_text(json.dumps(value))
        else:
            idx.write_bytes(value)

    analyze_damaged(base, "plain", damage)


# ------------------------------------------------------------------------------------- config.json

CONFIG_KEYS = st.sampled_from(
    [
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "hidden_size",
        "num_hidden_layers",
        "rope_theta",
        "partial_rotary_factor",
        "model_type",
        "architectures",
        "rope_scaling",
        "text_config",
        "num_local_experts",
    ]
)


@RUNS
@given(
    st.one_of(
        st.tuples(st.just("keys"), st.dictionaries(CONFIG_KEYS, st.one_of(JSON, BIG), max_size=4)),
        st.tuples(st.just("whole"), JSON),
        st.tuples(st.just("bytes"), st.binary(max_size=80)),
    )
)
def test_fuzzed_config(base, change):
    how, value = change

    def damage(run: Path) -> None:
        cfg = run / "config.json"
        if how == "keys":
            cfg.write_text(json.dumps({**json.loads(cfg.read_text()), **value}))
        elif how == "whole":
            cfg.write_text(json.dumps(value))
        else:
            cfg.write_bytes(value)

    analyze_damaged(base, "plain", damage)


# ------------------------------------------------------------------------------------ log readers

LOG_VALUE = st.one_of(JSON, BIG, st.sampled_from(["nan", "inf", "1e999", "", "x", "-1"]))
LOG_LINE = st.one_of(
    st.dictionaries(
        st.sampled_from(["step", "loss", "grad_norm", "lr", "global_step", "train_loss"]),
        LOG_VALUE,
        max_size=4,
    ).map(json.dumps),
    st.text(max_size=30),
)


@RUNS
@given(
    st.sampled_from(["metrics.jsonl", "metrics.csv", "trainer_state.json"]),
    st.lists(LOG_LINE, max_size=8),
    st.one_of(JSON, st.none()),
)
def test_fuzzed_log(base, name, lines, state):
    def damage(run: Path) -> None:
        (run / "metrics.jsonl").unlink()
        if name == "metrics.csv":
            text = "step,loss,grad_norm\n" + "\n".join(line.replace("\n", " ") for line in lines)
        elif name == "trainer_state.json" and state is not None:
            text = json.dumps({"global_step": state, "log_history": [state, *lines]})
        else:
            text = "\n".join(lines)
        (run / name).write_text(text)

    analyze_damaged(base, "plain", damage)


# -------------------------------------------------------------------------------------- replay.h5


@RUNS
@given(
    flips=st.lists(st.tuples(st.integers(0, 2**31), st.integers(1, 255)), min_size=1, max_size=4),
    keep=st.one_of(st.none(), st.floats(0.05, 1.0)),
)
def test_fuzzed_replay_file(base, flips, keep, monkeypatch):
    monkeypatch.setenv("CKPTSCAN_REPLAY_TIMEOUT", "5")  # a flip can make HDF5 loop: the guard's limit

    def damage(run: Path) -> None:
        f = run / "checkpoint-200" / "replay.h5"
        data = bytearray(f.read_bytes())
        for at, xor in flips:
            data[at % len(data)] ^= xor
        f.write_bytes(bytes(data[: int(len(data) * keep)] if keep is not None else data))

    analyze_damaged(base, "replay", damage)
