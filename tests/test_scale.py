"""Scale-out (docs/scale.md): the Ray executor against the local one, and runs read from object
storage (an S3 server on 127.0.0.1, moto) with ranged reads only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckptscan import analyze
from ckptscan.config import EXECUTORS, AnalysisConfig
from ckptscan.errors import UsageError
from ckptscan.pipeline import executors
from ckptscan.store.timeline import load_part

DRILLS = Path(__file__).resolve().parent.parent / "fixtures" / "drills"
ROOT = Path(__file__).resolve().parent.parent


def _ray():
    return pytest.importorskip("ray", reason='the ray executor needs ray (pip install "ckptscan[ray]")')


def _parts(out: Path) -> dict[str, tuple]:
    return {p.name: load_part(p) for p in sorted((out / "parts").glob("*.npz"))}


def assert_same_results(a: Path, b: Path) -> None:
    """The same part files, compared exactly (identity, every series bit for bit, NaN where NaN; the
    extras), and the same summary apart from timings and where it was written."""
    pa, pb = _parts(a), _parts(b)
    assert pa.keys() == pb.keys() and pa
    for name in pa:
        (ia, va, ea), (ib, vb, eb) = pa[name], pb[name]
        assert ia == ib, name
        assert va.keys() == vb.keys(), name
        for k in va:
            assert np.array_equal(va[k], vb[k], equal_nan=True), (name, k)
        assert ea.keys() == eb.keys(), name
        for k in ea:
            assert np.array_equal(ea[k], eb[k]), (name, k)
    sa, sb = (json.loads((x / "summary.json").read_text()) for x in (a, b))
    for s in (sa, sb):
        for k in ("elapsed_s", "started_at", "out", "command"):
            s.pop(k)
        s["checkpoints"].pop("reused")
    assert sa == sb


def test_executor_names_match_the_registry():
    assert tuple(executors.REGISTRY) == EXECUTORS
    with pytest.raises(UsageError, match="--executor"):
        AnalysisConfig(executor="dask")
    with pytest.raises(UsageError, match="--executor ray"):
        AnalysisConfig(workers=2)
    with pytest.raises(UsageError, match="--workers"):
        AnalysisConfig(executor="ray", workers=0)


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray instance (2 CPUs, no dashboard) for the module's in-process tests, shut down after."""
    ray = _ray()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_gives_the_local_results(ray_instance, tmp_path):
    run = DRILLS / "lowprec-moe"  # MoE with replay files: the weight side, the router and activation sides
    local = analyze(run, out_dir=tmp_path / "local", device="cpu")
    seen = []
    remote = analyze(
        run,
        out_dir=tmp_path / "ray",
        device="cpu",
        executor="ray",
        on_progress=lambda i, n, ck, status: seen.append((i, status)),
    )
    assert_same_results(tmp_path / "local", tmp_path / "ray")
    assert remote.verdict == local.verdict and remote.exit_code() == local.exit_code()
    assert sorted(i for i, _ in seen) == list(range(len(local.summary["checkpoints"]["steps"])))
    assert {s for _, s in seen} == {"analysed"}
    # a second run reuses every part, submits nothing and still gives the same
    again = analyze(run, out_dir=tmp_path / "ray", device="cpu", executor="ray")
    assert again.summary["checkpoints"]["reused"] == len(local.summary["checkpoints"]["steps"])
    assert_same_results(tmp_path / "local", tmp_path / "ray")


def _corrupt_run(tmp_path: Path) -> Path:
    run = shutil.copytree(DRILLS / "lowprec-moe", tmp_path / "run")
    st = run / "checkpoint-500" / "model.safetensors"
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])  # truncated
    (run / "checkpoint-900" / "replay.h5").write_bytes(b"not hdf5")  # only its activation side is lost
    return run


@pytest.mark.slow
def test_ray_reports_a_corrupt_checkpoint_as_local_does(ray_instance, tmp_path):
    run = _corrupt_run(tmp_path)
    local = analyze(run, out_dir=tmp_path / "local", device="cpu")
    remote = analyze(run, out_dir=tmp_path / "ray", device="cpu", executor="ray")
    skipped = local.summary["checkpoints"]["skipped"]
    assert [Path(s["path"]).name for s in skipped] == ["checkpoint-500", "replay.h5"]
    assert remote.summary["checkpoints"]["skipped"] == skipped
    assert remote.exit_code() == local.exit_code() == 1  # the anomaly still found
    assert remote.exit_code("input-error") == local.exit_code("input-error") == 3
    assert_same_results(tmp_path / "local", tmp_path / "ray")


def test_a_failed_unit_is_its_reason_as_locally(tmp_path):
    """The unit of work itself (what a Ray task runs): a checkpoint that cannot be read comes back
    with the reason the local loop gives, and nothing is written."""
    from ckptscan.discover.checkpoints import Checkpoint
    from ckptscan.pipeline.analyzer import Options

    run = _corrupt_run(tmp_path)
    ck = {s: Checkpoint(s, run / f"checkpoint-{s}") for s in (400, 500, 600)}
    got = executors.analyze_unit(run, Options(), ck[500], ck[400])
    assert got.result is None and got.part is None and "truncated file" in got.reason
    ok = executors.analyze_unit(run, Options(), ck[600], ck[400])
    assert ok.reason is None and ok.part is not None and ok.part[1]["prev_step"] == 400
    assert ok.result is not None and not ok.result.reused
    assert not list(tmp_path.rglob("*.npz"))


class _Ref:
    def __init__(self, value):
        self.value = value


class _FakeRay:
    """Ray's calls the driver makes, run in this process (tasks complete in reverse submission
    order), so that the driver's bookkeeping is checked without a cluster."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self, fail_steps=()):
        self.fail_steps, self.calls = set(fail_steps), []

    def put(self, x):
        return x

    def cluster_resources(self):
        return {"CPU": 4}

    def remote(self, fn):
        fake = self

        class Task:
            def options(self, **_):
                return self

            def remote(self, run_dir, options, ck, prev, ref):
                fake.calls.append((ck.step, prev.step if prev else None))
                if ck.step in fake.fail_steps:
                    return _Ref(executors.UnitResult(ck, prev, reason="broken (test)"))
                return _Ref(fn(run_dir, options, ck, prev, ref))

        return Task()

    def wait(self, refs, num_returns):
        return refs[-num_returns:], refs[:-num_returns]

    def get(self, ref):
        return ref.value


def test_the_driver_reanalyses_the_checkpoint_after_a_failed_one(tmp_path):
    """A checkpoint that fails in its task (not when planned): the one after it is analysed again
    against the last good one, as the local loop's previous checkpoint is the last good one."""
    from ckptscan.discover.checkpoints import discover_run
    from ckptscan.pipeline import ray_executor
    from ckptscan.pipeline.analyzer import Options

    run = DRILLS / "healthy-dense"
    ckpts = discover_run(run).checkpoints[:5]
    fake = _FakeRay(fail_steps={ckpts[2].step})
    out = tmp_path / "out"
    results, skipped, _ = ray_executor._drive(fake, run, out, ckpts, Options(), None, False, 2, "cpu")
    assert [r.step for r in results] == [c.step for c in ckpts if c.step != ckpts[2].step]
    assert [s.reason for s in skipped] == ["broken (test)"]
    assert (ckpts[3].step, ckpts[1].step) in fake.calls  # the fix-up
    ident = load_part(out / "parts" / f"step_{ckpts[3].step:012d}.npz")[0]
    assert ident["prev_step"] == ckpts[1].step
    assert not (out / "parts" / f"step_{ckpts[2].step:012d}.npz").exists()


@pytest.mark.slow
def test_ray_driver_killed_resumes_without_recomputing(tmp_path):
    """A driver killed mid-run (its own local Ray instance with it) leaves whole parts; the next run
    reuses them (same mtimes) and computes the rest, and the results are the local executor's."""
    _ray()
    run = DRILLS / "lowprec-moe"
    out = tmp_path / "ray"
    cmd = [sys.executable, "-m", "ckptscan.cli", "analyze", str(run), "-o", str(out), "-q", "--device", "cpu"]
    cmd += ["--executor", "ray", "--workers", "1", "--fail-on", "never"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    try:
        while len(list((out / "parts").glob("step_*.npz"))) < 3:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the driver wrote no parts in 120 s"
            time.sleep(0.05)
    finally:
        with_pid = proc.pid
        os.killpg(with_pid, signal.SIGKILL)  # the driver's own session: it and the Ray processes it started
        proc.wait()
    first = {p.name: p.stat().st_mtime_ns for p in (out / "parts").glob("step_*.npz")}
    assert 3 <= len(first) < 15 and not (out / "summary.json").exists()
    res = subprocess.run(cmd, env=env, capture_output=True, timeout=300, start_new_session=True)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checkpoints"]["reused"] == len(first)
    for name, mtime in first.items():
        assert (out / "parts" / name).stat().st_mtime_ns == mtime, name
    analyze(run, out_dir=tmp_path / "local", device="cpu")
    assert_same_results(tmp_path / "local", out)


# --- object storage: an S3 server (moto) on 127.0.0.1, behind a proxy that counts the bytes served


class _CountingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``port`` that counts the bytes the server sends back
    (HTTP headers included): what a reader really fetched."""

    def __init__(self, port: int):
        import socket
        import threading

        self.target, self.served, self._lock = port, 0, threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading

        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src, dst, count):
        try:
            while data := src.recv(65536):
                if count:
                    with self._lock:
                        self.served += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self):
        self.sock.close()


@pytest.fixture
def s3(monkeypatch):
    """An S3 server on 127.0.0.1 (moto, started here, stopped after), reached through the counting
    proxy with the endpoint in ``AWS_ENDPOINT_URL`` and dummy credentials in the environment."""
    pytest.importorskip("s3fs", reason='object storage needs s3fs (pip install "ckptscan[s3]")')
    server_mod = pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = _CountingProxy(server._server.server_port)
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
    }.items():
        monkeypatch.setenv(k, v)
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # file systems (with their endpoint) are cached per process
    yield proxy
    S3FileSystem.clear_instance_cache()
    proxy.close()
    server.stop()


def _upload(run: Path, bucket: str) -> None:
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.mkdir(bucket)
    for p in sorted(run.rglob("*")):
        if p.is_file():
            fs.pipe_file(f"{bucket}/{run.name}/{p.relative_to(run)}", p.read_bytes())


def test_s3_reads_only_the_needed_byte_ranges(s3):
    """Every tensor the analysis reads (each registered family's blocks) comes back from S3 equal to
    the local reader's, and the bytes served are the header and those tensors, not the file."""
    from ckptscan import monitors as registry
    from ckptscan.layouts import resolve_layout
    from ckptscan.readers import open_checkpoint
    from ckptscan.readers.remote import RemoteSafetensorsSource

    run = DRILLS / "lowprec-moe"
    _upload(run, "bucket")
    config = json.loads((run / "config.json").read_text())
    for step in (100, 1500):
        local_dir = run / f"checkpoint-{step}"
        before = s3.served
        with (
            RemoteSafetensorsSource(f"s3://bucket/lowprec-moe/checkpoint-{step}") as remote,
            open_checkpoint(local_dir) as local,
        ):
            assert remote.infos() == local.infos()
            layout = resolve_layout(remote.infos(), config)
            names = set()
            for fam in registry.FAMILIES:
                for b in fam.blocks(layout):
                    got, want = fam.load(b, remote.read), fam.load(b, local.read)
                    for x, y in zip(got, want, strict=True):
                        assert (x is None and y is None) or torch_equal(x, y)
                    names.update(b.tensors)
            infos = local.infos()
            needed = sum(local.read(n).numel() * local.read(n).element_size() for n in names if n in infos)
            assert 0 < needed
            size = remote.size
            header = 8 + int.from_bytes((local_dir / "model.safetensors").read_bytes()[:8], "little")
            assert remote.bytes_read == needed + header  # what was asked for: exactly that
        served = s3.served - before  # what the server sent: those bytes plus HTTP's own
        assert size == (local_dir / "model.safetensors").stat().st_size
        assert needed + header <= served < 0.5 * size, (served, needed, size)


def torch_equal(x, y) -> bool:
    import torch

    return x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x, y))


def test_urls_are_shown_without_credentials():
    from ckptscan.readers.remote import is_url, redact

    assert redact("s3://AKIA:secret@bucket/run/ck?X-Amz-Signature=abc#f") == "s3://bucket/run/ck"
    assert redact("https://u:p@host:8443/a/b?sig=1") == "https://host:8443/a/b"
    assert is_url("gs://b/run") and not is_url("/data/run")


# --- a whole run at an S3 URL: ckptscan analyze s3://bucket/run


def _small_and_weights(run: Path) -> tuple[int, int]:
    files = [p for p in run.rglob("*") if p.is_file()]
    weights = sum(p.stat().st_size for p in files if p.name.endswith(".safetensors"))
    return sum(p.stat().st_size for p in files) - weights, weights


def assert_same_series(a: Path, b: Path) -> None:
    """Every part's series and extras equal (NaN where NaN); identities differ (local vs remote)."""
    pa, pb = _parts(a), _parts(b)
    assert pa.keys() == pb.keys() and pa
    for name in pa:
        (_, va, ea), (_, vb, eb) = pa[name], pb[name]
        assert va.keys() == vb.keys() and ea.keys() == eb.keys(), name
        for k in va:
            assert np.array_equal(va[k], vb[k], equal_nan=True), (name, k)
        for k in ea:
            assert np.array_equal(ea[k], eb[k]), (name, k)


@pytest.mark.slow
def test_analyze_a_run_at_an_s3_url(s3, tmp_path):
    """``ckptscan analyze s3://bucket/run``: the local analysis's series and verdict, with only the
    headers, the q/k/router tensors and the small files (config, log, replay) served; a second run
    (the CLI) reuses every part and fetches no tensor."""
    from ckptscan.store.timeline import Timeline

    run = DRILLS / "lowprec-moe"
    _upload(run, "whole")
    local = analyze(run, out_dir=tmp_path / "local", device="cpu")
    before = s3.served
    got = analyze("s3://whole/lowprec-moe", out_dir=tmp_path / "s3", device="cpu")
    served = s3.served - before
    assert_same_series(tmp_path / "local", tmp_path / "s3")
    assert got.verdict == local.verdict and got.exit_code() == local.exit_code() == 1
    assert got.summary["checkpoints"]["steps"] == local.summary["checkpoints"]["steps"]
    assert got.summary["run"] == "s3://whole/lowprec-moe" and not got.skipped
    assert "/remote/run" not in json.dumps(got.summary)  # the mirror is never what is shown
    tl, tr = Timeline.load(tmp_path / "local" / "timeline.h5"), Timeline.load(tmp_path / "s3" / "timeline.h5")
    assert tl.names() == tr.names()
    small, weights = _small_and_weights(run)
    # at least the small files whole and one q/k/router set per checkpoint; far below the weights
    per_ckpt = 30_000  # q, k and router bytes of one drill checkpoint (test above: 30,184 with header)
    assert small + 15 * per_ckpt < served < small + 0.25 * weights, (served, small, weights)
    before = s3.served
    cmd = [
        sys.executable,
        "-m",
        "ckptscan.cli",
        "analyze",
        "s3://whole/lowprec-moe",
        "-o",
        str(tmp_path / "s3"),
    ]
    res = subprocess.run(
        [*cmd, "--device", "cpu", "--json", "--fail-on", "never"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    again = json.loads(res.stdout)
    assert again["checkpoints"]["reused"] == 15 and again["verdict"] == local.verdict
    assert s3.served - before < 0.1 * weights  # a listing and the headers: no small file copied again


@pytest.mark.slow
def test_a_corrupt_or_unreadable_remote_checkpoint_is_skipped(s3, tmp_path):
    run = _corrupt_run(tmp_path)
    (run / "checkpoint-1600").mkdir()
    (run / "checkpoint-1600" / "pytorch_model.bin").write_bytes(b"PK not read")
    _upload(run, "corrupt")
    local = analyze(run, out_dir=tmp_path / "local", device="cpu")
    got = analyze("s3://corrupt/run", out_dir=tmp_path / "s3", device="cpu")
    reasons = {Path(s.path).name: s.reason for s in got.skipped}
    want = {Path(s.path).name: s.reason for s in local.skipped}
    assert reasons.keys() == want.keys() == {"checkpoint-500", "checkpoint-1600", "replay.h5"}
    assert "truncated" in reasons["checkpoint-500"] and "truncated" in want["checkpoint-500"]
    assert "remote runs: only safetensors checkpoints are read over fsspec" in reasons["checkpoint-1600"]
    assert "pytorch_model.bin" in reasons["checkpoint-1600"]
    assert all("\n" not in r and "/remote/run" not in r for r in reasons.values())
    assert [s.path for s in got.skipped][0].startswith("s3://corrupt/run/")
    assert got.exit_code() == local.exit_code() == 1
    assert got.verdict == local.verdict


def test_file_system_errors_are_told_without_secrets():
    from ckptscan.readers.remote import _scrub

    url = "s3://AKIA:s3cr3t@bucket/run?X-Amz-Signature=abc"
    said = _scrub('Invalid bucket name "AKIA:s3cr3t@bucket" (X-Amz-Signature=abc)', url)
    assert "s3cr3t" not in said and "AKIA" not in said and "Signature=abc" not in said
