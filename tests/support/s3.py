"""moto's S3-compatible server in a child process on a loopback port, with one bucket: the
object store of the shared-lake tests (a collector or an evaluator reaches it through `env`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .polling import wait_for
from .ports import free_port


class S3Server:
    """moto's S3-compatible server in a child process on a loopback port, with one bucket."""

    bucket = "spanscore-test"

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a collector or evaluator needs to reach the store (test credentials)."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "SPANSCORE_S3_ENDPOINT": self.endpoint,
            "SPANSCORE_S3_REGION": "us-east-1",
            "SPANSCORE_S3_URL_STYLE": "path",
        }

    def start(self) -> S3Server:
        import urllib.request

        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
        )

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"moto exited: {self.log_path.read_text()[-2000:]}")
            try:
                # Creating the bucket is the readiness probe (PUT bucket is idempotent here).
                request = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
                with urllib.request.urlopen(request, timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        wait_for(up, timeout=60, interval=0.1)
        return self

    def objects(self, prefix: str = "") -> list[str]:
        """The keys under `prefix` (ListObjectsV2, every page)."""
        import urllib.parse
        import urllib.request
        import xml.etree.ElementTree as ET

        keys: list[str] = []
        token = ""
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            url = f"{self.endpoint}/{self.bucket}?{urllib.parse.urlencode(query)}"
            with urllib.request.urlopen(url, timeout=10) as response:
                root = ET.fromstring(response.read())
            keys += [e.text or "" for e in root.iter(f"{ns}Key")]
            next_token = root.find(f"{ns}NextContinuationToken")
            if next_token is None or not next_token.text:
                return keys
            token = next_token.text

    def read(self, key: str) -> bytes:
        """The object's content (a signed request, as the lake's own reads are)."""
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        data: bytes = client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return data

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
