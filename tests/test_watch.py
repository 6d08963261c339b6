"""``ckptscan watch`` (ckptscan/watch.py): what counts as a finished checkpoint, the polling loop on a
run that grows under it, the alarm and its hook, and a drill followed while it trains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptscan.api import analyze
from ckptscan.watch import Watcher, WatchOptions, exit_code, fingerprint, is_complete, run_hook
from tests.runs import make_run

ROOT = Path(__file__).resolve().parents[1]
DRILLS = ROOT / "fixtures" / "drills"


# --- is_complete: the files' own evidence ----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "torch", "dcp"])
def test_a_whole_checkpoint_is_complete(tmp_path, fmt):
    run = make_run(tmp_path / "r", fmt=fmt, n=1)
    assert is_complete(run / "checkpoint-100") == (True, "")


def _cut(f: Path, n: int) -> None:
    data = f.read_bytes()
    f.write_bytes(data[:n] if n >= 0 else data[: len(data) + n])


@pytest.mark.parametrize("cut", [0, 5, 20, "half", -1])
def test_truncated_safetensors_is_not_complete(tmp_path, cut):
    ck = make_run(tmp_path / "r", n=1) / "checkpoint-100"
    f = ck / "model.safetensors"
    _cut(f, f.stat().st_size // 2 if cut == "half" else cut)
    ok, why = is_complete(ck)
    assert not ok and why
    assert not is_complete(f)[0]  # the file alone, as a checkpoint file


def test_sharded_safetensors_missing_a_shard_or_the_index(tmp_path):
    ck = make_run(tmp_path / "r", fmt="sharded", n=1) / "checkpoint-100"
    index = ck / "model.safetensors.index.json"
    saved = index.read_bytes()
    index.unlink()  # save_pretrained writes the index after the last shard
    ok, why = is_complete(ck)
    assert not ok and "index" in why
    index.write_bytes(saved)
    (ck / "model-00002-of-00002.safetensors").unlink()
    ok, why = is_complete(ck)
    assert not ok and "model-00002-of-00002" in why
    shutil.copy(ck / "model-00001-of-00002.safetensors", ck / "model-00002-of-00002.safetensors")
    _cut(ck / "model-00002-of-00002.safetensors", -3)
    ok, why = is_complete(ck)  # all there, the last one still being written
    assert not ok and "model-00002-of-00002" in why
    renamed = ck / "weights-part2.safetensors"  # shards named otherwise: the index says what is missing
    index.write_text(saved.decode().replace("model-00002-of-00002", renamed.stem))
    (ck / "model-00002-of-00002.safetensors").unlink()
    ok, why = is_complete(ck)
    assert not ok and renamed.name in why


def test_dcp_without_metadata_or_with_short_data(tmp_path):
    ck = make_run(tmp_path / "r", fmt="dcp", n=1) / "checkpoint-100"
    meta = ck / ".metadata"
    saved = meta.read_bytes()
    meta.unlink()
    ok, why = is_complete(ck)
    assert not ok and ".metadata" in why
    meta.write_bytes(saved)
    data = max(ck.glob("*.distcp"), key=lambda p: p.stat().st_size)
    _cut(data, -1)
    ok, why = is_complete(ck)
    assert not ok and "truncated" in why


def test_torch_file_cut_short(tmp_path):
    ck = make_run(tmp_path / "r", fmt="torch", n=1) / "checkpoint-100"
    f = ck / "pytorch_model.bin"
    _cut(f, f.stat().st_size - 10)
    assert not is_complete(ck)[0]
    _cut(f, 0)
    ok, why = is_complete(ck)
    assert not ok and "empty" in why


def test_trainer_checkpoint_waits_for_trainer_state(tmp_path):
    ck = make_run(tmp_path / "r", n=1) / "checkpoint-100"
    assert is_complete(ck)[0]
    assert not is_complete(ck, hf_trainer=True)[0]  # in a Trainer tree: trainer_state.json is written last
    (ck / "training_args.bin").write_bytes(b"x")  # the Trainer's own file: it is a Trainer checkpoint
    ok, why = is_complete(ck)
    assert not ok and "trainer_state.json" in why
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": 100}))
    assert is_complete(ck) == (True, "")


def test_tracker_file_names_an_older_save(tmp_path):
    run = make_run(tmp_path / "r", n=2, name="global_step{step}")
    (run / "latest").write_text("global_step100")
    assert is_complete(run / "global_step100")[0]
    ok, why = is_complete(run / "global_step200")
    assert not ok and "tracker" in why
    (run / "latest").write_text("global_step200")
    assert is_complete(run / "global_step200")[0]


def test_empty_or_missing_checkpoint(tmp_path):
    (tmp_path / "checkpoint-100").mkdir()
    assert not is_complete(tmp_path / "checkpoint-100")[0]
    assert not is_complete(tmp_path / "checkpoint-200")[0]


def test_fingerprint_moves_with_the_files(tmp_path):
    ck = make_run(tmp_path / "r", n=1) / "checkpoint-100"
    fp = fingerprint(ck)
    assert fp == fingerprint(ck) and {n for n, _, _ in fp} == {"model.safetensors"}
    (ck / ".model.safetensors.tmp").write_bytes(b"1")  # a hidden temporary file being written
    assert fingerprint(ck) != fp
    assert fingerprint(tmp_path / "gone") == ()


# --- the loop, on runs that grow under it (a scripted clock: each poll runs the next action) ------


class Script:
    """``sleep`` for the watcher: each call advances the clock by the poll and runs the next action;
    ``check`` runs after every poll (on the status file and summary as they are then)."""

    def __init__(self, actions, check=None):
        self.actions, self.check, self.t, self.polls = list(actions), check, 0.0, 0

    def clock(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.polls += 1
        if self.check:
            self.check()
        self.t += seconds
        if self.actions:
            self.actions.pop(0)()
        assert self.polls < 200, "the watcher never stopped"


def _copy(src: Path, dst: Path):
    def act():
        shutil.copytree(src, dst)

    return act


def _watcher(run: Path, out: Path, script: Script, lines: list[str], **kw) -> Watcher:
    opts = WatchOptions(
        poll=1.0, idle=kw.pop("idle", 3.0), analyze_kwargs={"command": [], **kw.pop("analyze", {})}, **kw
    )
    return Watcher(run, out, out / "watch.json", opts, lines.append, clock=script.clock, sleep=script.sleep)


def test_a_half_written_checkpoint_is_waited_for_never_read_as_corrupt(tmp_path):
    src = make_run(tmp_path / "src", n=5)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(src / "config.json", run)
    out = tmp_path / "out"
    data = (src / "checkpoint-300" / "model.safetensors").read_bytes()
    half = run / "checkpoint-300" / "model.safetensors"
    seen = {"pending": [], "analysed": []}

    def start_300():
        half.parent.mkdir()
        half.write_bytes(data[: len(data) // 2])

    def check():
        status = json.loads((out / "watch.json").read_text())
        seen["pending"] += [p["path"] for p in status["pending"]]
        seen["analysed"].append(status["last_step_analysed"])
        if (out / "summary.json").exists():  # no round ever lists a skipped (unreadable) input
            assert json.loads((out / "summary.json").read_text())["checkpoints"]["skipped"] == []

    actions = [
        _copy(src / "checkpoint-100", run / "checkpoint-100"),
        _copy(src / "checkpoint-200", run / "checkpoint-200"),
        start_300,
        lambda: None,
        lambda: None,
        lambda: None,  # checkpoint-300 half written for 3 polls
        _copy(src / "checkpoint-400", run / "checkpoint-400"),  # a later one lands meanwhile
        lambda: None,
        lambda: half.write_bytes(data),
        _copy(src / "checkpoint-500", run / "checkpoint-500"),
    ]
    script = Script(actions, check)
    lines: list[str] = []
    outcome = _watcher(run, out, script, lines).run()
    assert outcome.reason == "idle" and outcome.alarm is None
    assert str(half.parent) in seen["pending"]
    assert 200 in seen["analysed"] and 300 not in seen["analysed"][: seen["analysed"].index(200) + 4]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checkpoints"]["steps"] == [100, 200, 300, 400, 500]
    assert summary["checkpoints"]["skipped"] == []
    status = json.loads((out / "watch.json").read_text())
    assert status["state"] == "stopped" and status["stop_reason"] == "idle" and status["pending"] == []
    assert status["last_step_analysed"] == 500 and status["checkpoints_analysed"] == 5
    assert all(ln.startswith("ckptscan") for ln in lines)
    assert not (run / "watch.json").exists() and sorted(p.name for p in run.iterdir()) == [
        "checkpoint-100",
        "checkpoint-200",
        "checkpoint-300",
        "checkpoint-400",
        "checkpoint-500",
        "config.json",
    ]


def test_an_abandoned_checkpoint_is_analysed_after_stale_seconds_and_reported(tmp_path):
    run = make_run(tmp_path / "run", n=4)
    f = run / "checkpoint-200" / "model.safetensors"
    _cut(f, f.stat().st_size // 2)  # a save that died; the run went on
    out = tmp_path / "out"
    script = Script([])
    outcome = _watcher(run, out, script, [], stale=4.0, idle=10.0).run()
    assert outcome.reason == "idle"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checkpoints"]["steps"] == [100, 300, 400]
    assert [Path(s["path"]).name for s in summary["checkpoints"]["skipped"]] == ["checkpoint-200"]
    status = json.loads((out / "watch.json").read_text())
    assert [Path(g["path"]).name for g in status["given_up"]] == ["checkpoint-200"]
    assert exit_code(outcome, "anomaly") == 3  # an input could not be read, as analyze says


def test_until_stops_once_that_step_is_analysed(tmp_path):
    src = make_run(tmp_path / "src", n=4)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(src / "config.json", run)
    script = Script([_copy(src / f"checkpoint-{s}", run / f"checkpoint-{s}") for s in (100, 200, 300, 400)])
    outcome = _watcher(run, tmp_path / "out", script, [], until=200, idle=None).run()
    assert outcome.reason == "until"
    assert outcome.result.summary["checkpoints"]["steps"][-1] >= 200
    assert not (run / "checkpoint-400").exists()  # it stopped before the run was complete


def test_nothing_finished_is_no_verdict(tmp_path):
    (tmp_path / "run").mkdir()
    outcome = _watcher(tmp_path / "run", tmp_path / "out", Script([]), []).run()
    assert outcome.reason == "idle" and outcome.result is None
    assert exit_code(outcome, "anomaly") == 5 and exit_code(outcome, "never") == 0


def _truncated_log(src: Path, dst: Path, step: int) -> None:
    lines = [ln for ln in (src / "metrics.jsonl").read_text().splitlines() if json.loads(ln)["step"] <= step]
    (dst / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_replayed_fault_drill_alarms_once_at_the_offline_confirmed_step(tmp_path):
    """The fault drill copied in checkpoint by checkpoint (with its log up to each): the alarm comes
    at the round that holds the checkpoint confirming it, the hook runs once with the verdict, and the
    confirmed step is the offline analysis' of the same checkpoints."""
    src = DRILLS / "highlr-moe"
    truth = json.loads((src / "truth.json").read_text())
    offline = analyze(src, out_dir=tmp_path / "offline", command=[]).verdict
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(src / "config.json", run)
    steps = sorted(int(c.split("-")[1]) for c in truth["checkpoints"])

    def land(step):
        def act():
            shutil.copytree(src / f"checkpoint-{step}", run / f"checkpoint-{step}")
            _truncated_log(src, run, step)

        return act

    hook_log = tmp_path / "hook.jsonl"
    hook = (
        f"{sys.executable} -c \"import json, os; open({str(hook_log)!r}, 'a').write(json.dumps("
        f"{{k: v for k, v in os.environ.items() if k.startswith('CKPTSCAN_')}}) + '\\n')\""
    )
    lines: list[str] = []
    script = Script([land(s) for s in steps])
    outcome = _watcher(run, tmp_path / "out", script, lines, on_alarm=hook).run()
    assert outcome.alarm is not None and offline["confirmed_step"] is not None
    assert outcome.alarm["confirmed_step"] == offline["confirmed_step"]
    assert outcome.alarm["analysed_up_to_step"] == offline["confirmed_step"]  # at the round it landed
    assert outcome.alarm["confirmed_step"] < truth["divergence_step"]
    assert outcome.alarm["hook"]["exit_code"] == 0
    calls = [json.loads(ln) for ln in hook_log.read_text().splitlines()]
    assert len(calls) == 1  # once, though later rounds still see the alarm
    env = calls[0]
    assert env["CKPTSCAN_CONFIRMED_STEP"] == str(offline["confirmed_step"])
    assert env["CKPTSCAN_EARLIEST_STEP"] == str(outcome.alarm["earliest_step"])
    assert env["CKPTSCAN_FAULT_TYPE"] == outcome.alarm["fault_type"]
    assert Path(env["CKPTSCAN_RUN"]) == run.absolute()
    assert json.loads(Path(env["CKPTSCAN_SUMMARY"]).read_text())["verdict"]["anomalous"] is True
    assert sum(ln.startswith("ckptscan: ALARM: ") for ln in lines) == 1
    status = json.loads((tmp_path / "out" / "watch.json").read_text())
    assert status["alarm"]["confirmed_step"] == offline["confirmed_step"] and status["stop_reason"] == "idle"


def test_hook_runs_without_a_shell_and_failures_are_reported(tmp_path):
    out = tmp_path / "argv.json"
    lines: list[str] = []
    script = 'import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], "w"))'
    cmd = f"{sys.executable} -c '{script}' {out} '$HOME;' '`id`'"
    rec = run_hook(cmd, {"CKPTSCAN_FAULT_TYPE": "high_lr"}, 30, lines.append)
    assert rec["exit_code"] == 0 and rec["error"] is None
    assert json.loads(out.read_text()) == [str(out), "$HOME;", "`id`"]  # no expansion, no substitution
    rec = run_hook(f"{sys.executable} -c 'import sys; print(\"paged\"); sys.exit(3)'", {}, 30, lines.append)
    assert rec["exit_code"] == 3 and "exited with 3" in rec["error"]
    assert "ckptscan: on-alarm: paged" in lines
    assert run_hook("/no/such/program", {}, 30, lines.append)["error"].startswith("cannot run")
    assert "cannot split" in run_hook("echo 'unclosed", {}, 30, lines.append)["error"]
    rec = run_hook(f"{sys.executable} -c 'import time; time.sleep(30)'", {}, 1, lines.append)
    assert "did not finish" in rec["error"]
    assert all(ln.startswith("ckptscan") for ln in lines)


# --- a drill trains while `ckptscan watch` follows it in a subprocess ------------------------------

# a tiny dense drill whose LR grows steeply from step 250: saved every 20 steps, it trains in a few
# seconds; the healthy twin is the same run without the fault
TINY_DRILL = {
    "steps": 700,
    "save_every": 20,
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 8,
    "ffn": 16,
    "batch_size": 4,
    "seq_len": 32,
    "replay": False,
    "warmup": 40,
    "onset": 250,
    "naming": "llama",
    "seed": 0,
}
PACE_S = 0.25  # the trainer pauses after each save, as a real one spends time between saves


def _train_paced(run: Path, fault: str, saves: dict, monkeypatch) -> dict:
    """``run_drill`` with a pause after each checkpoint is written; ``saves[step]`` = when it was."""
    from ckptscan.drills import train

    real = train.save_weights

    def paced(folder, *a, **k):
        files = real(folder, *a, **k)
        saves[int(folder.name.split("-")[1])] = time.time()
        time.sleep(PACE_S)
        return files

    monkeypatch.setattr(train, "save_weights", paced)
    return train.run_drill(run, fault=fault, **TINY_DRILL, **({"severity": 22.0} if fault != "none" else {}))


def _watch_while_training(tmp_path: Path, fault: str, monkeypatch):
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    hook_log = tmp_path / "hook.json"
    hook = (
        f'{sys.executable} -c "import json, os, time; json.dump({{**{{k: v for k, v in os.environ.items() '
        f"if k.startswith('CKPTSCAN_')}}, 't': time.time()}}, open({str(hook_log)!r}, 'w'))\""
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ckptscan.cli",
            "watch",
            str(run),
            "-o",
            str(out),
            "--poll",
            "0.1",
            "--idle",
            "5",
            "--on-alarm",
            hook,
            "-q",
            "--nice",
            "0",
            "--device",
            "cpu",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    saves: dict[int, float] = {}
    try:
        time.sleep(1.0)  # watch is up and looking at an empty run when training starts
        truth = _train_paced(run, fault, saves, monkeypatch)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    status = json.loads((out / "watch.json").read_text())
    hook_env = json.loads(hook_log.read_text()) if hook_log.exists() else None
    return run, out, truth, saves, proc.returncode, stdout, stderr, status, hook_env


@pytest.mark.slow
def test_watch_alarms_before_divergence_on_a_training_fault_drill(tmp_path, monkeypatch):
    run, _out, truth, saves, code, stdout, stderr, status, hook = _watch_while_training(
        tmp_path, "high-lr", monkeypatch
    )
    div = truth["divergence_step"]
    assert div is not None, truth
    offline = analyze(run, out_dir=tmp_path / "offline", command=[]).verdict
    assert offline["confirmed_step"] is not None and offline["confirmed_step"] < div
    alarm = status["alarm"]
    assert alarm is not None, stderr
    assert alarm["confirmed_step"] == offline["confirmed_step"]
    assert hook is not None and hook["CKPTSCAN_CONFIRMED_STEP"] == str(offline["confirmed_step"])
    # in time: the hook ran before the trainer had saved the last checkpoint before the divergence
    # (so before it reached the divergence step)
    before = max(s for s in saves if s <= div)
    assert hook["t"] < saves[before], (hook["t"] - saves[before], alarm)
    assert code == 1 and stdout.startswith("ANOMALOUS: "), (code, stdout, stderr)
    assert "ckptscan: ALARM: " in stderr
    assert not any(p.name.startswith(("watch", "ckptscan")) for p in run.rglob("*"))


@pytest.mark.slow
def test_watch_stays_quiet_on_the_healthy_twin(tmp_path, monkeypatch):
    run, _out, truth, saves, code, stdout, stderr, status, hook = _watch_while_training(
        tmp_path, "none", monkeypatch
    )
    assert truth["divergence_step"] is None
    assert status["alarm"] is None and hook is None, status
    assert status["last_step_analysed"] == max(saves) and status["stop_reason"] == "idle"
    offline = analyze(run, out_dir=tmp_path / "offline", command=[]).verdict
    assert offline["confirmed_step"] is None
    assert code == 0 and stdout.startswith("HEALTHY: "), (code, stdout, stderr)


def test_a_slow_round_is_not_idle_time(tmp_path):
    """A round that takes longer than --idle (a big checkpoint, a busy machine) does not end the watch:
    a checkpoint that landed meanwhile is found by the next look at the run."""
    src = make_run(tmp_path / "src", n=4)
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(src / "config.json", run)
    shutil.copytree(src / "checkpoint-100", run / "checkpoint-100")
    later = [_copy(src / f"checkpoint-{s}", run / f"checkpoint-{s}") for s in (200, 300, 400)]
    script = Script([])
    w = _watcher(run, tmp_path / "out", script, [], idle=3.0)
    real = w.analyse

    def slow(scan):
        result = real(scan)
        if result is not None:
            script.t += 10.0  # the round took 10 s, and the next checkpoint landed meanwhile
            if later:
                later.pop(0)()
        return result

    w.analyse = slow
    outcome = w.run()
    assert outcome.reason == "idle"
    assert outcome.result.summary["checkpoints"]["steps"] == [100, 200, 300, 400]
