"""A throwaway S3-compatible server for tests: moto's standalone server on a loopback port.

    with MotoServer.start() as s3:     # raises S3Unavailable (the reason) if it cannot
        s3.env                         # AWS_ENDPOINT_URL, test credentials, region
        s3.create_bucket("tokensweep")

`moto_server` (``pip install "moto[server]"``, in the ``integration`` extra) is a real HTTP server that
speaks the S3 protocol, conditional writes (``If-None-Match: *``) included; it keeps the buckets
in its own memory, so stopping it drops them. Clients reach it the way they reach any S3
endpoint: through ``AWS_ENDPOINT_URL`` and the usual credential variables (moto accepts any).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


class S3Unavailable(RuntimeError):
    """The S3 server cannot be started here; the message says why (for pytest.skip)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoServer:
    proc: subprocess.Popen
    port: int
    log: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a client needs to reach this server (moto accepts any credentials)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

    @classmethod
    def start(cls, timeout: float = 60.0) -> "MotoServer":
        binary = shutil.which("moto_server", path=str(Path(sys.executable).parent))
        if binary is None:
            raise S3Unavailable("moto's server is not installed: pip install 'moto[server]' "
                                "(part of tokensweep's `integration` extra)")
        port = _free_port()
        log = Path(tempfile.mkdtemp(prefix="tokensweep-moto-")) / "moto.log"
        proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)],
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        server = cls(proc, port, log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise S3Unavailable(f"moto_server exited {proc.returncode}: {log.read_text()[-1000:]}")
            try:
                with urllib.request.urlopen(server.endpoint, timeout=2):
                    return server
            except OSError:
                time.sleep(0.3)
        server.stop()
        raise S3Unavailable(f"moto_server did not answer on port {port} in {timeout:.0f} s")

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                     aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key in `bucket` under `prefix`, as the server lists them."""
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
        return keys

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.log.parent, ignore_errors=True)

    def __enter__(self) -> "MotoServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
