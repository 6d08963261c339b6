"""Scale-out benchmark (docs/scale.md): the local executor against the Ray executor with 1, 2 and 4
workers on synthetic checkpoints of a real geometry, and the bytes an S3 read fetches against the
file size (not part of the test suite).

    python benchmarks/scale.py --geometry llama-3-8b --checkpoints 3 --json scale.json

The run is ``bench.write_run``'s (bf16 HF llama attention weights, small step-to-step updates) in
a scratch folder, removed afterwards.  Each executor analyses it into a fresh output folder, on a
warm page cache (the local run goes first and is timed a second time).  The S3 part uploads one
drill run (``fixtures/drills/lowprec-moe``) to a moto server on 127.0.0.1 and counts the bytes the
server sends (``tests/test_scale.py``'s counting proxy) while every tensor the analysis needs is read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench import GEOMETRIES, write_run  # noqa: E402


def timed_analyze(run: Path, out: Path, **kw) -> float:
    from ckptscan import analyze

    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    analyze(run, out_dir=out, device="cpu", **kw)
    return time.perf_counter() - t


def s3_bytes() -> dict:
    """Bytes fetched from S3 (moto on 127.0.0.1) reading every needed tensor of one drill checkpoint."""
    import pytest

    from ckptscan import monitors as registry
    from ckptscan.layouts import resolve_layout
    from ckptscan.readers.remote import RemoteSafetensorsSource
    from tests.test_scale import _CountingProxy, _upload

    mp = pytest.MonkeyPatch()
    from moto.server import ThreadedMotoServer
    from s3fs import S3FileSystem

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = _CountingProxy(server._server.server_port)
    env = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in {**env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}.items():
        mp.setenv(k, v)
    S3FileSystem.clear_instance_cache()
    try:
        run = Path(__file__).resolve().parent.parent / "fixtures" / "drills" / "lowprec-moe"
        _upload(run, "bench")
        config = json.loads((run / "config.json").read_text())
        before = proxy.served
        with RemoteSafetensorsSource("s3://bench/lowprec-moe/checkpoint-1500") as src:
            layout = resolve_layout(src.infos(), config)
            for fam in registry.FAMILIES:
                for b in fam.blocks(layout):
                    fam.load(b, src.read)
            asked, size = src.bytes_read, src.size
        return {"file_bytes": size, "bytes_asked": asked, "bytes_served": proxy.served - before}
    finally:
        proxy.close()
        server.stop()
        mp.undo()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="llama-3-8b")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--scratch", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(dir=args.scratch, prefix="ckptscan-scale-"))
    res: dict = {"geometry": args.geometry, "shape": GEOMETRIES[args.geometry], "cpus": os.cpu_count()}
    try:
        run = write_run(scratch / "run", args.geometry, args.checkpoints)
        res["checkpoints"] = args.checkpoints
        res["file_bytes"] = sum(p.stat().st_size for p in run.rglob("*.safetensors")) // args.checkpoints
        timed_analyze(run, scratch / "warm")  # the page cache warm, torch's kernels loaded
        res["local_s"] = timed_analyze(run, scratch / "local")
        print(f"local: {res['local_s']:.1f} s", flush=True)
        for w in [int(x) for x in args.workers.split(",")]:
            res[f"ray_{w}_s"] = t = timed_analyze(run, scratch / f"ray{w}", executor="ray", workers=w)
            print(f"ray, {w} workers: {t:.1f} s ({res['local_s'] / t:.2f}x local)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res["s3"] = s3_bytes()
    print(json.dumps(res, indent=2))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
