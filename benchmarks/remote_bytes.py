"""Bytes served by S3 for ``ckptscan analyze s3://...`` of a drill run (docs/scale.md): moto's S3
server on 127.0.0.1 behind the tests' byte-counting proxy.  python benchmarks/remote_bytes.py [RUN]"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_scale import DRILLS, _CountingProxy, _small_and_weights, _upload  # noqa: E402


def main() -> None:
    from moto.server import ThreadedMotoServer

    logging.disable(logging.CRITICAL)
    run = Path(sys.argv[1]) if len(sys.argv) > 1 else DRILLS / "lowprec-moe"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    proxy = _CountingProxy(server._server.server_port)
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}",
    )
    _upload(run, "bench")
    from ckptscan import analyze

    small, weights = _small_and_weights(run)
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("first run", "second run (parts reused)"):
            before = proxy.served
            analyze(f"s3://bench/{run.name}", out_dir=Path(tmp) / "out", device="cpu")
            served = proxy.served - before
            print(f"{label}: served {served:,} bytes; weight files {weights:,}, other files {small:,}")
    proxy.close()
    server.stop()


if __name__ == "__main__":
    main()
