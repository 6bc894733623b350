"""moto's standalone S3 server: the named stand-in for S3/MinIO in tests (no internet here).

Started as a subprocess on a free 127.0.0.1 port and stopped at the end; every test gets a fresh
bucket. aifab talks to it through s3fs exactly as it would to AWS S3 or MinIO.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import httpx

from serve_proc import free_port


class MotoS3Server:
    """One moto server process (the S3 stand-in); :meth:`new_bucket` hands out fresh buckets."""

    #: Credentials moto accepts (any); set in the environment the way a real deployment would.
    ENV = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.endpoint + "/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)

    @property
    def env(self) -> dict[str, str]:
        """Environment that points boto3/s3fs at this server."""
        return {**self.ENV, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def new_bucket(self) -> str:
        """Create an empty bucket; returns its name."""
        import boto3

        name = f"aifab-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        """Stop the server (its buckets live in its memory and go with it)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
