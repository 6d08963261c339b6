"""Reliability and security, end to end: broken inputs through the whole pipeline and the CLI.

ckptscan runs when things went wrong (half-written checkpoints, a full disk, NaNs, files from other
teams).  Each test here feeds one kind of damage through ``analyze`` or ``ckptscan analyze`` and
checks the promises of docs/guarantees.md: one line naming the file and the problem, the rest of
the run analysed, the problem in ``summary["checkpoints"]["skipped"]``, the documented exit code,
the evidence unchanged, no code from a checkpoint executed, and interrupted work resumable.

Unit-level checks of the same readers live in test_readers.py / test_replay.py / test_layouts.py /
test_discover.py; this file does not repeat them, it checks what the user sees.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from ckptscan import analyze
from ckptscan.cli import main
from ckptscan.errors import EXIT_INCONCLUSIVE, InputError
from ckptscan.store.timeline import load_part
from tests.reference import attention_reference
from tests.runs import TINY, config, make_run, state_dict, write_checkpoint

REPO = Path(__file__).resolve().parents[1]
SETPRIV = shutil.which("setpriv")
Q0 = "model.layers.0.self_attn.q_proj.weight"
K0 = "model.layers.0.self_attn.k_proj.weight"
Q1 = "model.layers.1.self_attn.q_proj.weight"
K1 = "model.layers.1.self_attn.k_proj.weight"


# ------------------------------------------------------------------------------------------ helpers


def tree_state(root: Path) -> str:
    """A hash of everything a careless tool could change: names, contents, sizes, modes, file and
    folder mtimes (a file created then deleted inside a folder still changes the folder's mtime)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        st = os.lstat(dirpath)
        h.update(f"D {os.path.relpath(dirpath, root)} {st.st_mode} {st.st_mtime_ns}\n".encode())
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            h.update(f"F {f} {st.st_mode} {st.st_size} {st.st_mtime_ns}\n".encode())
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def cli(*args: str):
    """``ckptscan ARGS`` in-process; returns click's Result (stdout/stderr separate)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def cli_json(*args: str):
    r = cli(*args, "--json", "--device", "cpu")
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r, json.loads(r.stdout)


def skipped_by_name(summary: dict) -> dict[str, dict]:
    """Skipped entries keyed by the checkpoint (or file) name they concern."""
    out = {}
    for s in summary["checkpoints"]["skipped"]:
        p = Path(s["path"])
        out[p.parent.name if p.name == "replay.h5" else p.name] = s
    return out


def rewrite_header(f: Path, mutate) -> None:
    """Change a safetensors file's JSON header, keeping its data section byte for byte."""
    b = f.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8 : 8 + n])
    mutate(header)
    hb = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(hb)) + hb + b[8 + n :])


def edit_tensors(f: Path, edit) -> None:
    sd = load_file(f)
    edit(sd)
    save_file(sd, f)


def heads(sd: dict, q: str, k: str):
    H, G, h, d = TINY["heads"], TINY["kv_heads"], TINY["head_dim"], TINY["hidden"]
    return sd[q].double().reshape(H, h, d), sd[k].double().reshape(G, h, d)


def _can_drop_dac() -> bool:
    """True when ``setpriv`` can run a child without CAP_DAC_OVERRIDE (so root obeys permissions)."""
    if SETPRIV is None:
        return False
    r = subprocess.run(
        [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search", "true"],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def _permissions_enforced_here(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    probe.chmod(0)
    try:
        probe.read_bytes()
        return False
    except PermissionError:
        return True
    finally:
        probe.chmod(0o644)


def ckptscan_cmd(*args, drop_dac: bool = False) -> list[str]:
    """The console command in a fresh process, optionally without the capability that lets root
    ignore file permissions (so that 'permission denied' and read-only trees really happen)."""
    cmd = [sys.executable, "-m", "ckptscan.cli", *map(str, args)]
    if drop_dac:
        cmd = [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search", *cmd]
    return cmd


def subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GITHUB_ACTIONS", None)  # no CI annotations on stdout
    env["OMP_NUM_THREADS"] = "1"  # tiny tensors: threads only add contention on a busy machine
    return env


needs_setpriv = pytest.mark.skipif(not _can_drop_dac(), reason="setpriv cannot drop CAP_DAC_OVERRIDE here")


# ------------------------------------------------------------- broken safetensors, whole pipeline

BROKEN_SAFETENSORS = {
    # step: (what is done to model.safetensors, words the one-line reason must contain)
    200: (lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]), "truncated"),
    300: (lambda f: f.write_bytes(struct.pack("<Q", f.stat().st_size) + f.read_bytes()[8:]), "header length"),
    400: (
        lambda f: f.write_bytes(
            f.read_bytes()[:8]
            + b"{"
            + b"x" * (struct.unpack("<Q", f.read_bytes()[:8])[0] - 1)
            + f.read_bytes()[8 + struct.unpack("<Q", f.read_bytes()[:8])[0] :]
        ),
        "not valid JSON",
    ),
    500: (
        lambda f: rewrite_header(
            f,
            lambda h: h[Q0].update(data_offsets=h["model.layers.0.self_attn.o_proj.weight"]["data_offsets"]),
        ),
        "overlap",
    ),
    600: (lambda f: rewrite_header(f, lambda h: h[Q0].update(dtype="C64")), "unknown dtype"),
}


def test_broken_safetensors_are_skipped_one_line_each_and_the_rest_analysed(tmp_path):
    run = make_run(tmp_path / "run", n=7)
    for step, (damage, _) in BROKEN_SAFETENSORS.items():
        damage(run / f"checkpoint-{step}" / "model.safetensors")
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3, r.output
    # nothing crashed: the problems are reported, not raised, one line each on stderr too
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("ckptscan: warning: skipped")]) == 5
    assert s["checkpoints"]["steps"] == [100, 700]
    skipped = skipped_by_name(s)
    assert set(skipped) == {f"checkpoint-{st}" for st in BROKEN_SAFETENSORS}
    for step, (_, words) in BROKEN_SAFETENSORS.items():
        sk = skipped[f"checkpoint-{step}"]
        assert sk["error"] is True
        assert words in sk["reason"] and "model.safetensors" in sk["reason"], sk
        assert "\n" not in sk["reason"]
    # the increment at 700 is taken against 100, the previous *analysed* checkpoint
    sds = [load_file(run / f"checkpoint-{st}" / "model.safetensors") for st in (100, 700)]
    q0, k0 = heads(sds[0], Q1, K1)
    q1, k1 = heads(sds[1], Q1, K1)
    ref = attention_reference(q0, k0, q1, k1)
    tl = analyze(run, out_dir=tmp_path / "out", device="cpu").timeline  # reused: same numbers
    np.testing.assert_allclose(tl.get("attn.D2.entropy2")[1, 1], ref["D2.entropy2"], rtol=1e-4)
    # the terminal report lists each one too
    r2 = cli("analyze", run, "-o", tmp_path / "out", "--device", "cpu")
    assert r2.exit_code == 3
    for step in BROKEN_SAFETENSORS:
        assert f"checkpoint-{step}" in r2.stdout


# --------------------------------------------------------------------- broken sharded checkpoints


def _set_index(folder: Path, mutate) -> None:
    idx = folder / "model.safetensors.index.json"
    doc = json.loads(idx.read_text())
    mutate(doc["weight_map"])
    idx.write_text(json.dumps(doc))


def test_broken_sharded_checkpoints_are_skipped_and_nothing_outside_is_read(tmp_path):
    run = make_run(tmp_path / "run", n=5, fmt="sharded")
    outside = tmp_path / "x.safetensors"  # a valid file outside the checkpoint: must never be opened
    shutil.copy(run / "checkpoint-100" / "model-00002-of-00002.safetensors", outside)
    (run / "checkpoint-200" / "model-00002-of-00002.safetensors").unlink()
    _set_index(
        run / "checkpoint-300",
        lambda wm: wm.update(
            {k: "../../x.safetensors" for k, v in wm.items() if v.startswith("model-00002")}
        ),
    )
    _set_index(
        run / "checkpoint-400",
        lambda wm: wm.update({k: str(outside) for k, v in wm.items() if v.startswith("model-00002")}),
    )
    os.utime(outside, ns=(0, 10**9))  # atime < mtime: even a relatime mount records a read
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3, r.output
    assert s["checkpoints"]["steps"] == [100, 500]
    sk = skipped_by_name(s)
    assert (
        "missing" in sk["checkpoint-200"]["reason"]
        and "model-00002-of-00002.safetensors" in sk["checkpoint-200"]["reason"]
    )
    assert "outside the checkpoint folder (refused)" in sk["checkpoint-300"]["reason"]
    assert (
        "absolute shard path" in sk["checkpoint-400"]["reason"]
        and "refused" in sk["checkpoint-400"]["reason"]
    )
    for step in (300, 400):
        assert "model.safetensors.index.json" in sk[f"checkpoint-{step}"]["reason"]
    assert os.stat(outside).st_atime_ns == 0  # not even read (atime untouched)


def test_tensor_in_index_but_missing_from_shard_is_skipped(tmp_path):
    run = make_run(tmp_path / "run", n=3, fmt="sharded")
    _set_index(
        run / "checkpoint-200",
        lambda wm: wm.update({"model.extra.weight": "model-00001-of-00002.safetensors"}),
    )
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 300]
    reason = skipped_by_name(s)["checkpoint-200"]["reason"]
    assert "model.extra.weight" in reason and "missing" in reason


def test_skip_reason_names_the_file_inside_the_checkpoint(tmp_path):
    run = make_run(tmp_path / "run", n=3, fmt="sharded")
    _set_index(
        run / "checkpoint-200",
        lambda wm: wm.update({"model.extra.weight": "model-00001-of-00002.safetensors"}),
    )
    (run / "checkpoint-300" / "config.json").write_text("{oops")
    s = analyze(run, out_dir=tmp_path / "out", device="cpu").summary
    sk = skipped_by_name(s)
    assert "model-00001-of-00002.safetensors" in sk["checkpoint-200"]["reason"]
    assert "checkpoint-300/config.json" in sk["checkpoint-300"]["reason"]


# ----------------------------------------------------------------------- broken configs and layouts


def test_bad_configs_and_shapes_skip_only_their_checkpoint(tmp_path):
    run = make_run(tmp_path / "run", n=6)
    cfg = config(False)
    (run / "checkpoint-200" / "config.json").write_text("{not json")
    (run / "checkpoint-300" / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 3}))
    (run / "checkpoint-400" / "config.json").write_text(json.dumps(["a", "list"]))
    edit_tensors(
        run / "checkpoint-500" / "model.safetensors",
        lambda sd: sd.update({K0: torch.randn(16, TINY["hidden"] - 8)}),
    )
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3, r.output
    assert s["checkpoints"]["steps"] == [100, 600]
    sk = skipped_by_name(s)
    assert "invalid config.json" in sk["checkpoint-200"]["reason"]
    assert (
        "num_attention_heads = 3" in sk["checkpoint-300"]["reason"] and Q0 in sk["checkpoint-300"]["reason"]
    )
    assert "not a JSON object" in sk["checkpoint-400"]["reason"]
    assert K0 in sk["checkpoint-500"]["reason"] and "hidden size" in sk["checkpoint-500"]["reason"]


def test_heads_that_do_not_divide_the_projection(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    cfg = config(False)
    del cfg["head_dim"]
    cfg["num_attention_heads"] = 5  # 32 rows of q_proj do not split into 5 heads
    (run / "config.json").write_text(json.dumps(cfg))
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["analyzed"] == 0
    for sk in s["checkpoints"]["skipped"]:
        assert Q0 in sk["reason"] and "5 heads" in sk["reason"], sk


def test_checkpoint_with_fewer_layers_is_analysed_with_nan_where_missing(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    edit_tensors(
        run / "checkpoint-200" / "model.safetensors",
        lambda sd: [sd.pop(k) for k in list(sd) if ".layers.1." in k],
    )
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    # three checkpoints are too few to call a run healthy: inconclusive, never healthy
    assert res.summary["checkpoints"]["steps"] == [100, 200, 300] and res.exit_code() == EXIT_INCONCLUSIVE
    tl = res.timeline
    assert np.isfinite(tl.get("attn.M.entropy2")[:, 0]).all()
    assert np.isnan(tl.get("attn.M.entropy2")[1, 1]).all()
    assert np.isfinite(tl.get("attn.M.entropy2")[[0, 2], 1]).all()
    # no increment across the gap for layer 1, the normal one for layer 0
    assert np.isnan(tl.get("attn.D2.entropy2")[1:, 1]).all()
    assert np.isfinite(tl.get("attn.D2.entropy2")[1:, 0]).all()


def test_unknown_architecture_names_the_tensors_it_saw(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    (run / "config.json").unlink()
    for c in ("checkpoint-100", "checkpoint-200"):
        edit_tensors(
            run / c / "model.safetensors",
            lambda sd: [sd.update({k.replace("self_attn.q_proj", "mix.wq"): sd.pop(k)}) for k in list(sd)],
        )
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["analyzed"] == 0
    for sk in s["checkpoints"]["skipped"]:
        assert "unknown architecture" in sk["reason"] and "--layout" in sk["reason"]
        assert "model.layers.0.mix.wq.weight [32, 32]" in sk["reason"]


# ------------------------------------------------------------------------------------------ numerics


def test_nan_in_router_and_inf_in_q_are_overflow_findings_and_the_verdict(tmp_path):
    run = make_run(tmp_path / "run", n=4, moe=True)
    router0 = "model.layers.0.block_sparse_moe.gate.weight"

    def poison(sd):
        sd[router0][1, 2] = float("nan")
        sd[Q1][0, 0] = float("inf")

    edit_tensors(run / "checkpoint-300" / "model.safetensors", poison)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    found = {(f["layer"], tuple(f["tensors"])): f for f in res.summary["findings"]}
    assert found[(0, (router0,))]["kind"] == "overflow" and found[(0, (router0,))]["step"] == 300
    (attn,) = [f for (layer, t), f in found.items() if layer == 1]
    assert attn["step"] == 300 and Q1 in attn["tensors"] and attn["nonfinite"] == 1
    tl = res.timeline
    # the poisoned blocks are NaN, everything else at that step is computed
    assert np.isnan(tl.get("router.W.entropy2")[2, 0, 0]) and np.isfinite(
        tl.get("router.W.entropy2")[2, 1, 0]
    )
    assert (
        np.isnan(tl.get("attn.M.entropy2")[2, 1]).all() and np.isfinite(tl.get("attn.M.entropy2")[2, 0]).all()
    )
    assert np.isfinite(tl.get("attn.M.entropy2")[3]).all()  # the next checkpoint is fine again
    assert tl.get("numerics.nonfinite")[2, :, 0].tolist() == [1, 1]
    assert res.verdict["fault_type"] == "overflow" and res.verdict["earliest_step"] == 300
    assert res.exit_code() == 1


def test_all_zero_and_subnormal_weights_do_not_crash_or_count_as_overflow(tmp_path):
    run = make_run(tmp_path / "run", n=3)

    def shrink(sd):
        sd[Q0].zero_()
        sd[K1] *= 1e-41  # float32 subnormals

    edit_tensors(run / "checkpoint-200" / "model.safetensors", shrink)
    res = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert res.summary["findings"] == [] and res.exit_code() == EXIT_INCONCLUSIVE
    assert res.verdict["fault_type"] != "overflow"
    tl = res.timeline
    # the increment into and out of the zero matrix is well defined; the next checkpoint is normal
    assert np.isfinite(tl.get("attn.D2.entropy2")[1:, 0]).all()
    assert np.isfinite(tl.get("attn.M.entropy2")[2]).all()


def test_zero_and_subnormal_matrices_give_no_made_up_spectrum(tmp_path):
    run = make_run(tmp_path / "run", n=3)

    def shrink(sd):
        sd[Q0].zero_()
        sd[K1] *= 1e-41  # float32 subnormals

    edit_tensors(run / "checkpoint-200" / "model.safetensors", shrink)
    tl = analyze(run, out_dir=tmp_path / "out", device="cpu").timeline
    # subnormal: either undefined or right (entropy is scale-invariant); never a wrong finite value
    sd = load_file(run / "checkpoint-200" / "model.safetensors")
    q, k = heads(sd, Q1, K1)
    ref = attention_reference(q, k * 1e41, q, k * 1e41)["M.entropy2"]
    got = tl.get("attn.M.entropy2")[1, 1]
    assert np.all(np.isnan(got) | np.isclose(got, ref, rtol=1e-4))
    # a zero matrix has no spectrum: entropies undefined (NaN), norm 0 -- never a made-up number
    assert np.isnan(tl.get("attn.M.entropy2")[1, 0]).all()
    assert (tl.get("attn.M.spectral_norm")[1, 0] == 0).all()


def _scaled_run(root: Path, scale: float, dtype) -> Path:
    """Two bf16/fp32 checkpoints; layer 1's q_proj of the second is multiplied by ``scale``."""
    run = make_run(root, n=2, dtype=dtype)
    edit_tensors(
        run / "checkpoint-200" / "model.safetensors",
        lambda sd: sd.update({Q1: (sd[Q1].float() * scale).to(dtype)}),
    )
    return run


def _check_scaled(res, run: Path, scale: float):
    assert res.summary["findings"] == [], res.summary["findings"]
    sd = {k: v.double() for k, v in load_file(run / "checkpoint-200" / "model.safetensors").items()}
    q, k = heads(sd, Q1, K1)
    ref = attention_reference(q / scale, k, q / scale, k)  # entropies are scale-invariant
    tl = res.timeline
    np.testing.assert_allclose(tl.get("attn.M.entropy2")[1, 1], ref["M.entropy2"], rtol=1e-4)
    np.testing.assert_allclose(
        tl.get("attn.M.spectral_norm")[1, 1], ref["M.spectral_norm"] * scale, rtol=1e-4
    )
    assert np.isfinite(tl.get("attn.D2.entropy2")[1, 1]).all()


def test_bf16_values_beyond_fp16_range_are_never_downcast(tmp_path):
    """2**20 ~ 1e6 is out of fp16's range (max 65504): a detour through fp16 would make it Inf."""
    run = _scaled_run(tmp_path / "run", 2.0**20, torch.bfloat16)
    _check_scaled(analyze(run, out_dir=tmp_path / "out", device="cpu"), run, 2.0**20)


def test_bf16_values_near_1e30_survive_as_finite_monitors(tmp_path):
    run = _scaled_run(tmp_path / "run", 2.0**100, torch.bfloat16)
    _check_scaled(analyze(run, out_dir=tmp_path / "out", device="cpu"), run, 2.0**100)


# ---------------------------------------------------------------------------------------------- runs


def test_empty_run_is_an_input_error(tmp_path):
    run = tmp_path / "empty"
    (run / "notes").mkdir(parents=True)
    r = cli("analyze", run, "-o", tmp_path / "out", "--device", "cpu")
    assert r.exit_code == 3
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert f"no checkpoints found in {run}" in line and "looked for" in line and "checkpoint-N" in line


def test_no_checkpoints_error_message(tmp_path):
    """The message the empty-run error uses (discover.no_checkpoints_error)."""
    from ckptscan.discover.checkpoints import Skipped, no_checkpoints_error

    err = no_checkpoints_error(
        tmp_path, [Skipped(str(tmp_path / "step-5-tmp"), "unfinished", error=False)], steps="10:20"
    )
    assert isinstance(err, InputError) and err.exit_code == 3
    text = str(err)
    assert text.startswith(f"no checkpoints found in {tmp_path}") and "\n" not in text
    for word in ("checkpoint-N", "iter_N", "checkpoints/", "--step-regex", "10:20", "1 entry skipped"):
        assert word in text, word


def test_single_checkpoint_is_analysed_without_increments(tmp_path):
    run = make_run(tmp_path / "run", n=1)
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == EXIT_INCONCLUSIVE and s["checkpoints"]["steps"] == [100]
    assert s["verdict"]["fault_type"] == "inconclusive" and not s["verdict"]["anomalous"]
    tl = analyze(run, out_dir=tmp_path / "out", device="cpu").timeline
    assert np.isfinite(tl.get("attn.M.entropy2")).all() and np.isnan(tl.get("attn.D2.entropy2")).all()


def test_duplicates_odd_names_and_unfinished_writes_through_the_cli(tmp_path):
    run = make_run(tmp_path / "run", n=2, every=1000, name="iter_{step:07d}")
    make_run(run, n=1, every=5, name="checkpoint-{step}")
    shutil.copytree(run / "iter_0001000", run / "global_step1000")  # same step, other name
    shutil.copytree(run / "iter_0002000", run / "step_3000-tmp")  # an unfinished write
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert s["checkpoints"]["steps"] == [5, 1000, 2000]
    sk = skipped_by_name(s)
    assert sk["step_3000-tmp"]["error"] is False
    assert (
        "duplicate step 1000" in sk["iter_0001000" if "iter_0001000" in sk else "global_step1000"]["reason"]
    )
    assert r.exit_code == 3  # the duplicate is listed as a problem


def test_only_an_unfinished_write_is_not_an_error(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    shutil.copytree(run / "checkpoint-200", run / "checkpoint-300.partial")
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == EXIT_INCONCLUSIVE and s["checkpoints"]["steps"] == [100, 200]
    assert skipped_by_name(s)["checkpoint-300.partial"]["error"] is False


def test_checkpoints_appearing_and_vanishing_while_running(tmp_path):
    run = make_run(tmp_path / "run", n=4)
    spare = make_run(tmp_path / "spare", n=5) / "checkpoint-500"

    def on_progress(i, total, ck, status):
        if i == 0:
            shutil.copytree(spare, run / "checkpoint-500")  # a save lands mid-run
            shutil.rmtree(run / "checkpoint-300")  # a cleanup job deletes one

    res = analyze(run, out_dir=tmp_path / "out", device="cpu", on_progress=on_progress)
    s = res.summary
    assert s["checkpoints"]["steps"] == [100, 200, 400] == list(res.timeline.steps)
    sk = skipped_by_name(s)
    assert set(sk) == {"checkpoint-300"} and "No such file" in sk["checkpoint-300"]["reason"]
    again = analyze(run, out_dir=tmp_path / "out", device="cpu")
    assert again.summary["checkpoints"]["steps"] == [100, 200, 400, 500]
    # 400 was computed against 200 (300 had gone): unchanged, so reused; only 500 is new
    assert again.summary["checkpoints"]["reused"] == 3


def test_symlink_loop_in_the_run_is_listed(tmp_path):
    run = make_run(tmp_path / "run", n=2)
    os.symlink(run / "checkpoint-300", run / "checkpoint-300")
    os.symlink(run, run / "checkpoint-100" / "loop")  # a loop inside a checkpoint folder: harmless
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 200]
    assert "checkpoint-300" in skipped_by_name(s)


@pytest.mark.slow
@needs_setpriv
def test_unreadable_file_is_skipped_with_permission_denied(tmp_path):
    run = make_run(tmp_path / "run", n=3)
    f = run / "checkpoint-200" / "model.safetensors"
    f.chmod(0)
    out = tmp_path / "out"
    p = subprocess.run(
        ckptscan_cmd("analyze", run, "-o", out, "--json", "--device", "cpu", drop_dac=True),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    f.chmod(0o644)
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr
    s = json.loads(p.stdout)
    assert s["checkpoints"]["steps"] == [100, 300]
    reason = skipped_by_name(s)["checkpoint-200"]["reason"]
    assert "Permission denied" in reason and "model.safetensors" in reason


# ---------------------------------------------------------------------------------- untrusted pickles


class _Payload:
    """Unpickling this calls ``os.mkdir(marker)``: if the marker exists, code from the file ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_pickle_that_runs_code_is_refused_through_the_cli(tmp_path):
    run = make_run(tmp_path / "run", n=3, fmt="torch")
    marker = tmp_path / "pwned"
    evil = run / "checkpoint-200" / "pytorch_model.bin"
    sd = torch.load(evil, weights_only=True)
    sd["evil"] = _Payload(marker)
    torch.save(sd, evil)
    before = tree_state(run)
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert not marker.exists()
    assert r.exit_code == 3 and s["checkpoints"]["steps"] == [100, 300]
    reason = skipped_by_name(s)["checkpoint-200"]["reason"]
    assert "refusing to unpickle" in reason and "--trust-pickle" in reason and "mkdir" in reason
    assert tree_state(run) == before
    # --trust-pickle is the only way through, and it really runs the file's code
    _, s2 = cli_json("analyze", run, "-o", tmp_path / "out2", "--trust-pickle")
    assert marker.is_dir() and s2["checkpoints"]["steps"] == [100, 200, 300]


def test_help_says_trust_pickle_executes_code():
    r = cli("analyze", "--help")
    text = " ".join(r.stdout.split())
    assert "--trust-pickle" in text and "executes code" in text and "DANGEROUS" in text


# ---------------------------------------------------------------------------------------- replay files


def _replay(path: Path, step: int, ids, layers=(0, 1), d=TINY["hidden"], seed=0):
    from ckptscan.record import write_replay

    g = torch.Generator().manual_seed(seed + step)
    acts = {}
    for layer in layers:
        acts[(layer, "attn_in")] = torch.randn(ids.shape[0], ids.shape[1], d, generator=g)
        acts[(layer, "router_in")] = torch.randn(ids.shape[0], ids.shape[1], TINY["hidden"], generator=g)
    write_replay(path, step, acts, input_ids=ids)


def test_broken_replay_files_lose_only_their_activation_side(tmp_path):
    run = make_run(tmp_path / "run", n=5, moe=True)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    _replay(run / "checkpoint-100" / "replay.h5", 100, ids)
    _replay(run / "checkpoint-200" / "replay.h5", 200, ids, layers=(0,))  # layer 1 missing
    _replay(run / "checkpoint-300" / "replay.h5", 300, ids + 1)  # other tokens
    _replay(run / "checkpoint-400" / "replay.h5", 400, ids)
    h5 = run / "checkpoint-400" / "replay.h5"
    h5.write_bytes(h5.read_bytes()[: h5.stat().st_size // 3])  # corrupt HDF5
    _replay(run / "checkpoint-500" / "replay.h5", 500, ids)
    r, s = cli_json("analyze", run, "-o", tmp_path / "out")
    assert r.exit_code == 3, r.output
    assert s["checkpoints"]["steps"] == [100, 200, 300, 400, 500]  # the weight side of every one
    sk = skipped_by_name(s)
    assert set(sk) == {"checkpoint-200", "checkpoint-300", "checkpoint-400"}
    assert "layers/1/attn_in" in sk["checkpoint-200"]["reason"]
    assert "input_ids" in sk["checkpoint-300"]["reason"] and "same tokens" in sk["checkpoint-300"]["reason"]
    assert "HDF5" in sk["checkpoint-400"]["reason"]
    for v in sk.values():
        assert v["path"].endswith("replay.h5") and v["error"] is True
    tl = analyze(run, out_dir=tmp_path / "out", device="cpu").timeline
    assert np.isfinite(tl.get("attn.M.entropy2")).all()
    act = tl.get("act.attn.max_logit")
    assert np.isnan(act[1:4]).all() and np.isfinite(act[[0, 4]]).all()


# ------------------------------------------------------------------------ evidence is read-only


def test_interrupted_analyze_leaves_evidence_unchanged_and_resumes(tmp_path):
    run = make_run(tmp_path / "run", n=4)
    before = tree_state(run)
    seen = []

    def stop(i, total, ck, status):
        seen.append((ck.step, status))
        if i == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        analyze(run, out_dir=tmp_path / "out", device="cpu", on_progress=stop)
    assert tree_state(run) == before
    parts = sorted(p.name for p in (tmp_path / "out" / "parts").iterdir())
    assert parts == ["step_000000000100.npz", "step_000000000200.npz"]
    statuses = []
    res = analyze(
        run, out_dir=tmp_path / "out", device="cpu", on_progress=lambda i, t, ck, st: statuses.append(st)
    )
    assert statuses == ["reused", "reused", "analysed", "analysed"]
    assert res.summary["checkpoints"]["reused"] == 2
    assert tree_state(run) == before


@pytest.mark.slow
@needs_setpriv
def test_read_only_tree_without_dac_override(tmp_path):
    """chmod -R a-w, and a process that cannot bypass permissions: analysis still works."""
    run = make_run(tmp_path / "run", n=3)
    for dirpath, _dirnames, filenames in os.walk(run):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o444)
        os.chmod(dirpath, 0o555)
    before = tree_state(run)
    try:
        p = subprocess.run(
            ckptscan_cmd("analyze", run, "-o", tmp_path / "out", "--json", "--device", "cpu", drop_dac=True),
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
            check=False,
        )
        assert p.returncode == EXIT_INCONCLUSIVE, p.stderr
        assert json.loads(p.stdout)["checkpoints"]["steps"] == [100, 200, 300]
        assert tree_state(run) == before
    finally:
        for dirpath, _dirnames, _filenames in os.walk(run):
            os.chmod(dirpath, 0o755)


# ------------------------------------------------------------------ resumable after a kill (SIGINT/KILL)


def _slow_run(root: Path, n: int) -> Path:
    """A run with wider attention layers (and nothing else), so each checkpoint takes a moment."""
    c = {"layers": 6, "heads": 8, "kv_heads": 4, "head_dim": 16, "hidden": 128, "experts": 4}
    g = torch.Generator().manual_seed(0)
    sd = {k: v for k, v in state_dict(g, False, c).items() if "_proj" in k and "mlp" not in k}
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config(False, c)))
    for i in range(n):
        write_checkpoint(root / f"checkpoint-{i + 1}", sd, "safetensors")
        sd = {k: v * 1.01 for k, v in sd.items()}  # distinct files; the monitors' values do not matter here
    return root


N_SLOW = 12


def _nice_with_default_sigint() -> None:
    os.nice(10)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    return _slow_run(tmp_path_factory.mktemp("slow") / "run", N_SLOW)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_killed_analyze_resumes_without_recomputing(tmp_path, slow_run, sig):
    run = slow_run
    before = tree_state(run)
    # The child runs at a lower priority so that this process, polling for its first part, is not
    # starved on a loaded machine until the child has finished; if it still finished before the
    # signal landed (a race, not what is tested), the attempt is made again in a fresh folder.
    # SIGINT is reset to its default in the child: a shell starts background jobs with SIGINT
    # ignored, and Python then keeps ignoring it (a CI script run in the background did).
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        proc = subprocess.Popen(
            ckptscan_cmd("analyze", run, "-o", out, "-q", "--device", "cpu"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            preexec_fn=_nice_with_default_sigint,
        )
        parts = out / "parts"
        deadline = time.monotonic() + 120
        while not (parts.is_dir() and any(p.name.startswith("step_") for p in parts.iterdir())):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.002)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        landed = len([p for p in parts.iterdir() if p.name.startswith("step_")]) < N_SLOW
        if landed:
            break
    if sig == signal.SIGINT:
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "Traceback" not in stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    assert tree_state(run) == before
    finished = sorted(p.name for p in parts.iterdir() if p.name.startswith("step_"))
    assert 1 <= len(finished) < N_SLOW, "the kill should land mid-run"
    for p in parts.iterdir():  # only whole part files under their real name (tmp files are dot-named)
        if p.name.startswith("step_"):
            load_part(p)
        else:
            assert p.name.startswith(".") and p.name.endswith(".tmp"), p.name
    statuses = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = analyze(
            run, out_dir=out, device="cpu", on_progress=lambda i, t, ck, st: statuses.__setitem__(ck.step, st)
        )
    finally:
        torch.set_num_threads(threads)
    assert res.summary["checkpoints"]["reused"] == len(finished)
    done = {int(n[5:17]) for n in finished}
    assert statuses == {s: ("reused" if s in done else "analysed") for s in range(1, N_SLOW + 1)}
    assert res.summary["checkpoints"]["analyzed"] == N_SLOW and tree_state(run) == before
