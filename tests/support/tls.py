"""A self-signed certificate for loopback (localhost and 127.0.0.1), made with the `openssl`
command, valid for a day: enough for a collector to serve TLS and a client to trust it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """Write `cert.pem` and `key.pem` into `directory`; their paths. Needs `openssl` on PATH."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
