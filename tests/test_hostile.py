"""Hostile and broken input, end to end: every failure contained to its file, every resource bounded,
the evidence never touched (docs/guarantees.md, "Hostile input").

Each class of defect found by a red-team pass is a parametrised test here.  A case builds a small run
(tests/runs.py), damages one file the way a crafted or corrupt file would, runs ``ckptscan analyze
--json`` and checks the promises: an exit code in {0, 1, 3, 5} (2 for refused output paths), no
traceback, summary.json written, the damaged file named in one line, the rest of the run analysed,
and the input tree byte-identical (contents, modes, mtimes).  Crafted files are built by the tests;
none is committed.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptscan import analyze
from ckptscan.errors import EXIT_INTERNAL, EXIT_USAGE, FormatError, printable
from ckptscan.readers import open_checkpoint
from ckptscan.readers.dcp import METADATA_FILE, load_metadata
from tests.runs import TINY, config, make_run, state_dict, write_checkpoint
from tests.test_reliability import (
    K0,
    Q0,
    _replay,
    ckptscan_cmd,
    cli,
    needs_setpriv,
    rewrite_header,
    skipped_by_name,
    subprocess_env,
    tree_state,
)

SD = state_dict(torch.Generator().manual_seed(0), False)
DAMAGED = "checkpoint-200"
IDS = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("base") / "run", n=4)


@pytest.fixture
def run(base_run, tmp_path):
    return Path(shutil.copytree(base_run, tmp_path / "run"))


def analyze_json(run: Path, out: Path, *args) -> tuple[object, dict | None]:
    """``ckptscan analyze RUN --json`` in-process: the click result and summary.json (None if absent),
    after checking what every damaged run must give (no traceback, no internal error)."""
    r = cli("analyze", run, "-o", out, "--json", "--device", "cpu", *args)
    assert "Traceback" not in r.output and "internal error" not in r.stderr, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    summary = out / "summary.json"
    return r, json.loads(summary.read_text()) if summary.is_file() else None


def header_bytes(f: Path, edit) -> None:
    """Replace a safetensors file's header by ``edit(header bytes)``, keeping the data section."""
    b = f.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    hb = edit(b[8 : 8 + n])
    f.write_bytes(struct.pack("<Q", len(hb)) + hb + b[8 + n :])


def rewrite_as(run: Path, fmt: str, sd: dict | None = None) -> Path:
    """Checkpoint-200 rewritten in another format (``sd`` instead of its weights when given)."""
    folder = run / DAMAGED
    weights = sd if sd is not None else load_file(folder / "model.safetensors")
    shutil.rmtree(folder)
    write_checkpoint(folder, weights, fmt)
    return folder


def deep(n: int) -> str:
    return "[" * n + "]" * n


# --------------------------------------------------------------- 1. a bad file takes the run down
# Each case: (damage(run), words of the one-line reason, which skipped entry carries it: a checkpoint
# name, "replay.h5" of checkpoint-200, or None when the damaged file is the log, whose problem is a note)


def _deep_index(run):
    folder = rewrite_as(run, "sharded")
    idx = folder / "model.safetensors.index.json"
    idx.write_text(idx.read_text()[:-1] + f', "x": {deep(5000)}}}')


def _long_shard_name(run):
    folder = rewrite_as(run, "sharded")
    idx = folder / "model.safetensors.index.json"
    doc = json.loads(idx.read_text())
    doc["weight_map"] = {k: "x" * 300 + ".safetensors" for k in doc["weight_map"]}
    idx.write_text(json.dumps(doc))


def _zero_qk_no_heads(run):
    cfg = config(False)
    del cfg["num_attention_heads"], cfg["num_key_value_heads"]
    (run / DAMAGED / "config.json").write_text(json.dumps(cfg))
    sd = load_file(run / DAMAGED / "model.safetensors")
    sd.update({Q0: torch.zeros(0, TINY["hidden"]), K0: torch.zeros(0, TINY["hidden"])})
    save_file(sd, run / DAMAGED / "model.safetensors")


def _dcp_metadata(mutate):
    def damage(run):
        folder = rewrite_as(run, "dcp", SD)
        meta = load_metadata(folder)
        mutate(meta)
        with open(folder / METADATA_FILE, "wb") as f:
            pickle.dump(meta, f)

    return damage


def _torch_file(edit):
    def damage(run):
        sd = dict(SD)
        edit(sd)
        shutil.rmtree(run / DAMAGED)
        (run / DAMAGED).mkdir()
        torch.save(sd, run / DAMAGED / "pytorch_model.bin")

    return damage


def _nest(sd, depth=3000):
    inner: dict = {"w": torch.zeros(1)}
    for _ in range(depth):
        inner = {"a": inner}
    sd["deep"] = inner


def _save_deep(run):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # torch.save pickles recursively; loading must not need this
    try:
        _torch_file(_nest)(run)
    finally:
        sys.setrecursionlimit(limit)


def _replays(run, theta=None):
    for step in (100, 200, 300, 400):
        _replay(run / f"checkpoint-{step}" / "replay.h5", step, IDS)
    if theta is not None:
        (run / "config.json").write_text(json.dumps({**config(False), "rope_theta": theta}))


def _flipped_replay(run):
    _replays(run)
    h5 = run / DAMAGED / "replay.h5"
    data = bytearray(h5.read_bytes())
    data[2072] ^= 0x10  # with h5py 3.16 / HDF5 2.0.0, reading this file then never finishes
    h5.write_bytes(data)


def _in_header(edit):
    return lambda run: header_bytes(run / DAMAGED / "model.safetensors", edit)


def _config_text(text: str):
    return lambda run: (run / DAMAGED / "config.json").write_text(text)


CONTAINED = {
    "deep JSON in a safetensors header": (
        _in_header(lambda h: h.rstrip()[:-1] + f', "x": {deep(5000)}}}'.encode()),
        "nested deeper than 100 levels",
        DAMAGED,
    ),
    "deep JSON in a shard index": (_deep_index, "nested deeper than 100 levels", DAMAGED),
    "deep JSON in config.json": (_config_text(f'{{"a": {deep(5000)}}}'), "nested deeper", DAMAGED),
    "a header integer of 5000 digits": (
        _in_header(
            lambda h: re.sub(rb'"data_offsets": ?\[\d+', b'"data_offsets":[' + b"7" * 5000, h, count=1)
        ),
        "integer of 5000 digits",
        DAMAGED,
    ),
    "a config integer of 5000 digits": (
        _config_text(json.dumps(config(False))[:-1] + ', "x": ' + "9" * 5000 + "}"),
        "integer of 5000 digits",
        DAMAGED,
    ),
    "a dtype that is a list": (
        lambda run: rewrite_header(run / DAMAGED / "model.safetensors", lambda h: h[Q0].update(dtype=["F3"])),
        "unknown dtype ['F3']",
        DAMAGED,
    ),
    "zero-size q/k and no head count": (_zero_qk_no_heads, "an empty weight matrix", DAMAGED),
    "a 300-character shard name": (_long_shard_name, "File name too long", DAMAGED),
    "DCP metadata with chunks=None": (
        _dcp_metadata(lambda m: setattr(m.state_dict_metadata[Q0], "chunks", None)),
        "wrong type",
        DAMAGED,
    ),
    "DCP metadata with a string size": (
        _dcp_metadata(lambda m: setattr(m.state_dict_metadata[Q0], "size", "32x32")),
        "wrong type",
        DAMAGED,
    ),
    "DCP storage entry with a float offset": (
        _dcp_metadata(lambda m: setattr(next(iter(m.storage_data.values())), "offset", 1.5)),
        "wrong type",
        DAMAGED,
    ),
    "a meta-device tensor": (
        _torch_file(lambda sd: sd.update({Q0: torch.empty(32, 32, device="meta")})),
        "meta device",
        DAMAGED,
    ),
    "a state dict nested 3000 deep": (_save_deep, "nests deeper than 64 levels", DAMAGED),
    "a checkpoint named with a step beyond int64": (
        lambda run: shutil.copytree(run / "checkpoint-400", run / ("checkpoint-" + "9" * 25)),
        "beyond the int64 range",
        "checkpoint-" + "9" * 25,
    ),
    "NaN rope_theta with replay files": (lambda run: _replays(run, float("nan")), None, None),
    "negative rope_theta with replay files": (lambda run: _replays(run, -10000.0), None, None),
    "a replay file with one flipped byte": (_flipped_replay, "replay file not used", "replay.h5"),
}
SLOW_CASES = {"a replay file with one flipped byte"}  # the replay worker's time limit: about 3 s
LOGS = {
    "deep JSON in a log line": (
        '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": ' + deep(5000) + "}\n",
        "nested deeper",
    ),
    "a log step of 1e30": ('{"step": 1, "loss": 2.0}\n{"step": 1e30, "loss": 2.0}\n', "bad step"),
}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in CONTAINED]
)
def test_a_bad_file_is_skipped_alone(run, tmp_path, case, monkeypatch):
    damage, words, entry = CONTAINED[case]
    monkeypatch.setenv("CKPTSCAN_REPLAY_TIMEOUT", "3")
    damage(run)
    before = tree_state(run)
    r, s = analyze_json(run, tmp_path / "out")
    assert tree_state(run) == before
    assert r.exit_code in (0, 1, 3, 5) and s is not None, r.output
    if words is None:  # nothing to skip: the bad value is noted and not used
        assert s["checkpoints"]["steps"] == [100, 200, 300, 400] and s["checkpoints"]["skipped"] == []
        notes = s["layout"]["notes"]
        assert any("rope_theta" in n and "ignored" in n for n in notes), notes
        return
    assert r.exit_code == 3
    sk = skipped_by_name(s)
    assert list(sk) == [entry.removesuffix("replay.h5") or DAMAGED], sk
    reason = next(iter(sk.values()))["reason"]
    assert words in reason and "\n" not in reason, reason
    assert s["checkpoints"]["steps"] == ([100, 300, 400] if entry == DAMAGED else [100, 200, 300, 400])


@pytest.mark.parametrize("case", LOGS)
def test_a_bad_log_is_a_note(run, tmp_path, case):
    text, words = LOGS[case]
    (run / "metrics.jsonl").write_text(text)
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 5 and s["checkpoints"]["steps"] == [100, 200, 300, 400]
    assert any(words in n and "metrics.jsonl line 2" in n for n in s["log"]["notes"]), s["log"]["notes"]


def test_a_trainer_state_global_step_of_1e999(run, tmp_path):
    state = '{"global_step": 1e999, "log_history": [{"step": 100, "loss": 2.0}]}'
    (run / "trainer_state.json").write_text(state)
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 5 and s["log"]["points"] == 1


@pytest.mark.slow
@needs_setpriv
def test_a_folder_the_user_cannot_read_is_passed_over_by_the_log_search(run, tmp_path):
    secret = run / "private"  # beside the checkpoints: the log search looks into every folder there
    secret.mkdir()
    (secret / "trainer_state.json").write_text("{}")
    secret.chmod(0)
    try:
        p = subprocess.run(
            ckptscan_cmd("analyze", run, "-o", tmp_path / "out", "--json", "--device", "cpu", drop_dac=True),
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
            check=False,
        )
    finally:
        secret.chmod(0o755)
    assert p.returncode == 5 and "Traceback" not in p.stderr, p.stderr
    assert json.loads(p.stdout)["checkpoints"]["steps"] == [100, 200, 300, 400]


def test_an_internal_error_keeps_a_summary_of_what_was_done(run, tmp_path, monkeypatch):
    def bug(*args, **kwargs):
        raise RuntimeError("a bug in judging")

    monkeypatch.setattr("ckptscan.judge.verdict.judge", bug)
    r = cli("analyze", run, "-o", tmp_path / "out", "--device", "cpu")
    assert r.exit_code == EXIT_INTERNAL and "internal error: RuntimeError: a bug in judging" in r.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["checkpoints"]["steps"] == [100, 200, 300, 400] and (tmp_path / "out" / "timeline.h5").is_file()
    assert s["verdict"]["fault_type"] == "inconclusive" and "a bug in judging" in s["verdict"]["reason"]


# ------------------------------------------------------------------ output-side OS errors are named


def test_an_output_folder_that_cannot_be_created_is_a_usage_error(run, tmp_path):
    (tmp_path / "file").write_text("x")
    r = cli("analyze", run, "-o", tmp_path / "file" / "out", "--device", "cpu")
    assert r.exit_code == EXIT_USAGE, r.output
    (line,) = r.stderr.splitlines()
    assert f"{tmp_path / 'file' / 'out'}: cannot create the output folder" in line


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write beyond the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.slow
def test_a_full_output_file_system_is_a_usage_error_naming_the_file(run, tmp_path):
    """RLIMIT_FSIZE makes every output file larger than 4 kB fail to write, as a full disk would."""
    p = subprocess.run(
        ckptscan_cmd("analyze", run, "-o", tmp_path / "out", "-q", "--device", "cpu"),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
        preexec_fn=_limit_file_size,
    )
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"ckptscan: error: {tmp_path / 'out' / 'parts'}"), line
    assert "cannot write: File too large" in line
    assert not [f for f in (tmp_path / "out" / "parts").iterdir()]  # no torn file left


@pytest.mark.slow
@needs_setpriv
def test_a_read_only_output_folder_is_a_usage_error(run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        p = subprocess.run(
            ckptscan_cmd("analyze", run, "-o", out, "-q", "--device", "cpu", drop_dac=True),
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
            check=False,
        )
    finally:
        out.chmod(0o755)
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr, p.stderr
    assert "Permission denied" in p.stderr and str(out) in p.stderr


# ------------------------------------------------------------------------ 2. declared sizes believed


class MemoryCap:
    """Limit this process's address space to what it uses now plus ``extra`` bytes (restored on exit),
    so a declared size that is believed fails fast with a MemoryError instead of exhausting the machine."""

    def __init__(self, extra: int = 2 * 2**30):
        self.extra = extra

    def __enter__(self):
        self.old = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/status") as f:
            vm = int(next(line for line in f if line.startswith("VmSize:")).split()[1]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + self.extra, self.old[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_AS, self.old)


def _huge_replay(run):
    _replays(run)
    with h5py.File(run / DAMAGED / "replay.h5", "w") as h:  # 9 kB declaring 256 TiB, never written
        h.attrs["format"], h.attrs["step"] = "ckptscan-replay/1", 200
        for layer in (0, 1):
            h.create_dataset(
                f"layers/{layer}/attn_in", shape=(2**20, 2**20, 32), dtype="f8", chunks=(1, 1, 32)
            )


def _stacked_empty(run):
    shutil.rmtree(run / DAMAGED)
    (run / DAMAGED).mkdir()
    header = {
        "decoder.layers.self_attention.linear_qkv.weight": {
            "dtype": "BF16",
            "shape": [10**9, 0, 64],
            "data_offsets": [0, 0],
        }
    }
    hb = json.dumps(header).encode()
    (run / DAMAGED / "model.safetensors").write_bytes(struct.pack("<Q", len(hb)) + hb)


def _big_head(run):  # a 4 kB q/k with a config of one head: a 1024 x 1024 Gram per head from 4 kB is refused
    cfg = {**config(False), "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 32 * 32}
    (run / DAMAGED / "config.json").write_text(json.dumps(cfg))
    sd = load_file(run / DAMAGED / "model.safetensors")
    sd.update({Q0: torch.randn(1024, 1), K0: torch.randn(1024, 1)})
    save_file(sd, run / DAMAGED / "model.safetensors")


DECLARED = {
    "a stride-0 view (4 bytes stored as a 32 x 32 q_proj)": (
        _torch_file(lambda sd: sd.update({Q0: torch.zeros(1, 1).expand(32, 32)})),
        "stride 0",
        DAMAGED,
    ),
    "a 9 kB replay file declaring 256 TiB": (_huge_replay, "declares 281474976710656 bytes", "replay.h5"),
    "a tensor named layers.999999999": (
        lambda run: rewrite_as(
            run,
            "safetensors",
            {
                **SD,
                Q0.replace(".0.", ".999999999."): SD[Q0].clone(),
                K0.replace(".0.", ".999999999."): SD[K0].clone(),
            },
        ),
        "names layer 999999999, but the checkpoint holds only",
        DAMAGED,
    ),
    "a zero-byte stacked tensor of shape [1e9, 0, 64]": (
        _stacked_empty,
        "stacked over layers are empty",
        DAMAGED,
    ),
    "a head_dim larger than the hidden size": (
        _big_head,
        "head_dim 1024 is larger than the hidden size 1",
        DAMAGED,
    ),
}


@pytest.mark.parametrize("case", DECLARED)
def test_declared_sizes_are_checked_before_allocating(run, tmp_path, case):
    damage, words, entry = DECLARED[case]
    damage(run)
    before = tree_state(run)
    t0 = time.monotonic()
    with MemoryCap():
        r, s = analyze_json(run, tmp_path / "out")
    assert time.monotonic() - t0 < 60
    assert tree_state(run) == before
    assert r.exit_code == 3 and s is not None, r.output
    sk = skipped_by_name(s)
    assert list(sk) == [DAMAGED], sk
    assert words in sk[DAMAGED]["reason"], sk
    want = [100, 200, 300, 400] if entry == "replay.h5" else [100, 300, 400]
    assert s["checkpoints"]["steps"] == want


def test_a_stride_0_view_of_16_gib_in_a_small_file_is_refused_without_allocating(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(1, 1).expand(2**16, 2**16)}, path)  # float32: 16 GiB once copied
    assert path.stat().st_size < 2**20
    with MemoryCap(), open_checkpoint(path) as src:
        assert src.infos()["w"].shape == (2**16, 2**16)
        with pytest.raises(FormatError, match="'w' is a view of 4294967296 elements over a storage of 4 "):
            src.read("w")


def test_a_checkpoint_beyond_the_memory_budget_is_refused_with_a_clear_line(run, tmp_path, monkeypatch):
    monkeypatch.setenv("CKPTSCAN_MEMORY_BUDGET", "64K")
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["analyzed"] == 0
    for sk in s["checkpoints"]["skipped"]:
        assert "more than the memory budget of 64 KiB (set CKPTSCAN_MEMORY_BUDGET" in sk["reason"], sk
    monkeypatch.setenv("CKPTSCAN_MEMORY_BUDGET", "lots")
    r = cli("analyze", run, "-o", tmp_path / "out2", "--device", "cpu")
    assert r.exit_code == EXIT_USAGE and "CKPTSCAN_MEMORY_BUDGET='lots'" in r.stderr


# -------------------------------------------------------------------------- 3. hangs and signals


@pytest.mark.slow
def test_a_replay_file_that_never_finishes_reading_is_skipped_at_the_time_limit(run, tmp_path, monkeypatch):
    """A dataset whose bytes are 'external storage' in a FIFO: HDF5 blocks on it forever."""
    _replays(run)
    fifo = run / DAMAGED / "activations.raw"
    os.mkfifo(fifo)
    with h5py.File(run / DAMAGED / "replay.h5", "a") as h:
        del h["layers/1/attn_in"]
        h.create_dataset(
            "layers/1/attn_in",
            shape=(2, 8, TINY["hidden"]),
            dtype="f4",
            external=[(str(fifo), 0, 2 * 8 * TINY["hidden"] * 4)],
        )
    monkeypatch.setenv("CKPTSCAN_REPLAY_TIMEOUT", "2")
    before = tree_state(run)
    t0 = time.monotonic()
    r, s = analyze_json(run, tmp_path / "out")
    assert time.monotonic() - t0 < 30
    assert tree_state(run) == before
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 200, 300, 400]
    (sk,) = s["checkpoints"]["skipped"]
    assert sk["path"] == str(run / DAMAGED / "replay.h5") and "did not finish within 2 s" in sk["reason"]
    act = np.asarray(analyze(run, out_dir=tmp_path / "out", device="cpu").timeline.get("act.attn.max_logit"))
    assert np.isnan(act[1]).all() and np.isfinite(act[[0, 2, 3]]).all()


# the worker as ckptscan starts it, after a pause: a machine too busy to start a process quickly
SLOW_START = (
    "import sys, time, runpy; time.sleep(float(sys.argv[1])); "
    "runpy.run_module('ckptscan.replay.check', run_name='__main__')"
)


def _small_h5(path: Path) -> Path:
    with h5py.File(path, "w") as h:
        h.create_dataset("x", data=np.arange(64, dtype="f4").reshape(8, 8))
    return path


def test_the_replay_time_limit_counts_the_read_not_the_workers_start(tmp_path):
    """A worker that takes 2 s to start, a limit of 1 s per file: a good file is read (the limit
    covered the start as well until the worker said when it is ready)."""
    from ckptscan.replay.check import ReplayChecker

    checker = ReplayChecker(timeout=1.0)
    checker.command = [sys.executable, "-c", SLOW_START, "2"]
    try:
        assert checker.check(_small_h5(tmp_path / "a.h5"), 2**30) == []
        assert checker.check(_small_h5(tmp_path / "b.h5"), 2**30) == []  # the same worker, no new start
    finally:
        checker.close()


def test_a_worker_that_does_not_start_refuses_the_files_by_its_own_reason(tmp_path):
    from ckptscan.errors import ReplayError
    from ckptscan.replay.check import ReplayChecker

    checker = ReplayChecker(timeout=5.0, start_timeout=0.5)
    checker.command = [sys.executable, "-c", SLOW_START, "30"]
    try:
        with pytest.raises(ReplayError, match=r"worker process .* did not start within 0.5 s"):
            checker.check(_small_h5(tmp_path / "a.h5"), 2**30)
        b = _small_h5(tmp_path / "b.h5")
        t0 = time.monotonic()  # no second wait for a worker that could not start
        with pytest.raises(ReplayError, match="did not start") as err:
            checker.check(b, 2**30)
        assert time.monotonic() - t0 < 0.4 and "b.h5" in str(err.value)
    finally:
        checker.close()


def test_a_worker_that_ends_before_it_is_ready_is_named_with_its_exit_status(tmp_path):
    from ckptscan.errors import ReplayError
    from ckptscan.replay.check import ReplayChecker

    checker = ReplayChecker(timeout=5.0)
    checker.command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    try:
        for name in ("a.h5", "b.h5"):  # each file tries a new worker: an exit is not a hang
            with pytest.raises(ReplayError, match=r"ended \(exit status 3\) before it was ready"):
                checker.check(_small_h5(tmp_path / name), 2**30)
    finally:
        checker.close()


def test_a_line_the_worker_prints_before_its_answers_is_not_taken_for_one(tmp_path):
    """Something in the interpreter's start-up prints (a sitecustomize): until the worker's lines
    were read by what they are, that line was the first file's answer, and every later answer
    went to the file before it (a damaged file passed, a good one was refused)."""
    from ckptscan.errors import ReplayError
    from ckptscan.replay.check import ReplayChecker

    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an HDF5 file at all")
    checker = ReplayChecker(timeout=10.0)
    checker.command = [
        sys.executable,
        "-c",
        "print('banner', flush=True); print('[1]', flush=True); print('{}', flush=True); " + SLOW_START,
        "0",
    ]
    try:
        assert checker.check(_small_h5(tmp_path / "a.h5"), 2**30) == []
        with pytest.raises(ReplayError, match="not a readable HDF5 replay file"):
            checker.check(bad, 2**30)
        assert checker.check(_small_h5(tmp_path / "c.h5"), 2**30) == []
    finally:
        checker.close()


RESAVE = """
import sys, torch
from pathlib import Path
from safetensors.torch import save
from ckptscan.readers import open_checkpoint
path, fmt = Path(sys.argv[1]), sys.argv[2]
with open_checkpoint(path) as src:
    names = sorted(src.infos())
    src.read(names[0])
    # a trainer re-saves the checkpoint in place (same inode, truncated, rewritten smaller)
    small = {n: torch.zeros(1) for n in names}
    if fmt == "safetensors":
        path.write_bytes(save(small))
    else:
        torch.save(small, path)
    try:
        src.read(names[-1])
        print("read")
    except Exception as e:
        print(type(e).__name__, e)
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
def test_a_checkpoint_rewritten_in_place_while_read_is_an_error_not_sigbus(tmp_path, fmt):
    path = tmp_path / ("model.safetensors" if fmt == "safetensors" else "model.pt")
    big = {f"w{i}": torch.randn(256, 1024) for i in range(4)}  # 4 MiB: far past the rewritten file's end
    save_file(big, path) if fmt == "safetensors" else torch.save(big, path)
    p = subprocess.run(
        [sys.executable, "-c", RESAVE, str(path), fmt],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, (p.returncode, p.stderr)  # -7 would be SIGBUS
    assert p.stdout.startswith("FormatError") and "changed while it was being read" in p.stdout, p.stdout


def test_a_checkpoint_saved_again_during_its_analysis_is_skipped_and_analysed_next_run(
    run, tmp_path, monkeypatch
):
    from ckptscan.readers.safetensors_ import SafetensorsFile

    read = SafetensorsFile.read
    target = run / DAMAGED / "model.safetensors"
    newer = {k: v + 1 for k, v in load_file(target).items()}

    def read_while_saving(self, name):
        t = read(self, name)
        if self.path == target and not newer.get("saved"):
            newer["saved"] = True
            save_file({k: v for k, v in newer.items() if k != "saved"}, target)  # in place, same size
            os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))
        return t

    monkeypatch.setattr(SafetensorsFile, "read", read_while_saving)
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 300, 400]
    assert "changed while it was being read" in skipped_by_name(s)[DAMAGED]["reason"]
    monkeypatch.undo()
    again = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert again.summary["checkpoints"]["steps"] == [100, 200, 300, 400]
    assert again.summary["checkpoints"]["skipped"] == []


# -------------------------------------------------------------------------- 4. writes into the evidence


def _parts_named(run, tmp_path):
    folder = tmp_path / "parts"
    run.rename(folder)
    (folder / ".step_000000000100.npz.abc.tmp").write_text("the run's own file")
    return folder, ["-o", tmp_path]


def _in_baseline(run, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(run, base)
    return run, ["--baseline", base, "-o", base / "out"]


def _link_into_run(run, tmp_path):
    (run / "results").mkdir()
    os.symlink(run / "results", tmp_path / "link")
    return run, ["-o", tmp_path / "link"]


WRITES = {
    "--html inside the run": (lambda run, tmp: (run, ["--html", run / "report.html"]), "output"),
    "--junit inside the run": (lambda run, tmp: (run, ["--junit", run / DAMAGED / "ckptscan.xml"]), "output"),
    "a run named parts, -o its parent": (_parts_named, "(its parts) is inside the run directory"),
    "-o inside the --baseline run": (_in_baseline, "inside the baseline run"),
    "-o a symlink into the run": (_link_into_run, "inside the run directory"),
}


@pytest.mark.parametrize("case", WRITES)
def test_nothing_is_written_into_the_evidence(run, tmp_path, case):
    setup, words = WRITES[case]
    run, args = setup(run, tmp_path)
    trees = {p: tree_state(p) for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()}
    r = cli("analyze", run, "--device", "cpu", *args, *(["-o", tmp_path / "out"] if "-o" not in args else []))
    assert r.exit_code == EXIT_USAGE, r.output
    (line,) = r.stderr.splitlines()
    assert words in line and "never writes there" in line, line
    assert {p: tree_state(p) for p in trees} == trees  # nothing created, changed or deleted anywhere


def test_report_refuses_an_output_inside_the_run(run, tmp_path):
    analyze(run, out_dir=tmp_path / "out", device="cpu")
    before = tree_state(run)
    r = cli("report", tmp_path / "out", "--junit", run / "ckptscan.xml")
    assert r.exit_code == EXIT_USAGE and "inside the run directory" in r.stderr
    assert tree_state(run) == before


def test_stale_temporary_cleanup_touches_only_the_files_ckptscan_makes(run, tmp_path):
    out = tmp_path / "out"
    analyze(run, out_dir=out, device="cpu")
    ours, theirs = out / "parts" / ".step_000000000100.npz.k3x_9qza.tmp", out / "parts" / ".notes.tmp"
    ours.write_bytes(b"torn")
    theirs.write_bytes(b"a user's file")
    analyze(run, out_dir=out, device="cpu")
    assert not ours.exists() and theirs.read_bytes() == b"a user's file"


# ------------------------------------------------------------------------------------ 5. quieter ones


def test_a_tensor_named_twice_in_a_header_is_refused(run, tmp_path):
    def twice(h: bytes) -> bytes:
        first = json.dumps({Q0: json.loads(h)[Q0]})[1:-1]
        return h.rstrip()[:-1] + b", " + first.encode() + b"}"

    header_bytes(run / DAMAGED / "model.safetensors", twice)
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 300, 400]
    assert f"header names {Q0!r} twice" in skipped_by_name(s)[DAMAGED]["reason"]


FORGED = "checkpoint-300\x1b[2J\x1b[32m\nHEALTHY: no sustained anomaly\x07"


def test_control_characters_in_names_are_escaped_in_terminal_junit_and_annotations(
    run, tmp_path, monkeypatch
):
    shutil.copytree(run / "checkpoint-400", run / FORGED)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    r = cli("analyze", run, "-o", tmp_path / "out", "--device", "cpu", "--junit", tmp_path / "j.xml")
    assert r.exit_code == 5, r.output
    for text in (r.stdout, r.stderr):
        assert not any(c in text for c in "\x1b\x07"), text
        flat = "".join(text.splitlines())  # the terminal report wraps long lines at 100 columns
        # the forged verdict never starts a line of its own: it always follows the escaped newline
        assert flat.count("HEALTHY: no sustained") == flat.count("\\nHEALTHY: no sustained")
    assert printable(str(run / FORGED)) in "".join(r.stdout.splitlines())  # the entry is listed, escaped
    assert any(
        line.startswith("::notice title=ckptscan%3A input skipped::") and "\\x1b[2J" in line
        for line in r.stdout.splitlines()
    )
    inputs = ET.parse(tmp_path / "j.xml").getroot().find(".//testcase[@name='inputs']/system-out")
    assert inputs is not None  # the XML parses: no raw control characters in it
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["checkpoints"]["skipped"][0]["path"] == str(run / FORGED)  # JSON keeps the real name


@pytest.mark.parametrize(
    "damage,file,words",
    [
        (lambda out: (out / "summary.json").write_text("{"), "summary.json", "not a ckptscan summary"),
        (
            lambda out: (out / "summary.json").write_text('{"schema": 1}'),
            "summary.json",
            "not a ckptscan summary",
        ),
        (
            lambda out: (out / "timeline.h5").write_bytes(b"\x89HDF\r\n" + bytes(100)),
            "timeline.h5",
            "not a readable ckptscan timeline",
        ),
    ],
    ids=["summary not JSON", "summary not the schema", "timeline not HDF5"],
)
def test_report_on_a_damaged_result_names_the_file(run, tmp_path, damage, file, words):
    out = tmp_path / "out"
    analyze(run, out_dir=out, device="cpu")
    damage(out)
    r = cli("report", out)
    assert r.exit_code == 3 and "Traceback" not in r.output, r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"ckptscan: error: {out / file}: {words}"), line


def _symlinked_shard(run, outside):
    folder = rewrite_as(run, "sharded")
    shard = folder / "model-00002-of-00002.safetensors"
    shutil.move(shard, outside / shard.name)
    os.symlink(outside / shard.name, shard)
    return outside / shard.name


def _symlinked_folder(run, outside):
    shutil.move(run / DAMAGED, outside / DAMAGED)
    os.symlink(outside / DAMAGED, run / DAMAGED)
    return outside / DAMAGED / "model.safetensors"


def _external_replay(run, outside):
    _replays(run)
    raw = outside / "acts.raw"
    np.random.default_rng(0).standard_normal((2, 8, TINY["hidden"]), dtype=np.float32).tofile(raw)
    with h5py.File(run / DAMAGED / "replay.h5", "a") as h:
        del h["layers/1/attn_in"]
        h.create_dataset(
            "layers/1/attn_in",
            shape=(2, 8, TINY["hidden"]),
            dtype="f4",
            external=[(str(raw), 0, raw.stat().st_size)],
        )
    return raw


@pytest.mark.parametrize(
    "setup",
    [_symlinked_shard, _symlinked_folder, _external_replay],
    ids=["symlinked shard", "symlinked checkpoint folder", "HDF5 external storage"],
)
def test_inputs_outside_the_run_are_read_and_noted(run, tmp_path, setup):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    path = setup(run, outside)
    r, s = analyze_json(run, tmp_path / "out")
    assert r.exit_code == 5 and s["checkpoints"]["steps"] == [100, 200, 300, 400], r.output
    (note,) = [n for n in s["checkpoints"]["notes"] if n.startswith("inputs outside the run")]
    assert str(path.resolve()) in note and "(1 read through" in note
    assert "inputs outside the run" in cli("report", tmp_path / "out").stdout
