"""Credentials never appear in any output (issue 16, items 7 and 12): not in `/health`,
`/status`, the logs, client messages or start-up errors, while the catalog is down or up; and
the collector warns when a secret is exposed by how it was started.

The catalog outage is real: the collector reaches the PostgreSQL server through a TCP proxy
that the test cuts, then restores.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from google.rpc import status_pb2

from spanscore import lake as lake_api
from spanscore.cli.options import EXIT_LAKE
from spanscore.collector import load_config

from ..support import otlp_factory as f
from ..support.collector import ServeProcess
from ..support.netutil import CuttableProxy
from ..support.polling import wait_for
from ..support.ports import free_port
from ..support.postgres import postgres_available

SECRET = "pw-7c1e9d0b-do-not-print"
TOKEN = "token-5a4f-do-not-print"


def _get(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _export(port: int, token: str) -> tuple[int, str, str | None]:
    """One small export over OTLP/HTTP: (status, the error message, Retry-After)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            "/v1/traces",
            f.request(f.tool_spans(3)),
            {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"},
        )
        response = conn.getresponse()
        body = response.read()
        message = status_pb2.Status.FromString(body).message if response.status != 200 else ""
        return response.status, message, response.getheader("Retry-After")
    finally:
        conn.close()


@pytest.fixture
def proxied_postgres(tmp_path: Path) -> Iterator[tuple[str, CuttableProxy]]:
    """A new lake on the PostgreSQL server, reached through a cuttable proxy, with a password
    in its connection string (the server trusts loopback, so any password is accepted)."""
    reason = postgres_available()
    if reason:
        pytest.skip(reason)
    proxy = CuttableProxy(("127.0.0.1", 5432))
    schema_name = "spanscore_rel_" + uuid.uuid4().hex[:10]
    url = (
        f"postgresql://postgres:{SECRET}@127.0.0.1:{proxy.port}/test?lake_schema={schema_name}"
        f"&data_path={tmp_path / 'pgdata'}/"
    )
    yield url, proxy
    proxy.close()
    con = duckdb.connect()
    lake_api.load_extension(con, "postgres_scanner")
    con.execute("ATTACH 'postgresql://postgres@127.0.0.1:5432/test' AS pg (TYPE postgres)")
    con.execute(f"CALL postgres_execute('pg', 'DROP SCHEMA IF EXISTS {schema_name} CASCADE')")
    con.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_the_catalog_password_never_leaves_the_collector(
    tmp_path: Path, proxied_postgres: tuple[str, CuttableProxy]
) -> None:
    url, proxy = proxied_postgres
    log_path = tmp_path / "collector.log"
    server = ServeProcess(
        url,  # type: ignore[arg-type]
        log_path,
        "--workers",
        "0",
        "--commit-deadline-s",
        "2",
        env={"SPANSCORE_TOKEN": TOKEN},
    )
    try:
        server.start(timeout=60)
        assert _export(server.http_port, TOKEN)[0] == 200

        proxy.cut()  # the catalog is down
        status, message, retry_after = _export(server.http_port, TOKEN)
        assert status == 503, message  # retryable, with a delay
        assert retry_after is not None
        assert int(retry_after) >= 1
        assert SECRET not in message
        assert "retry" in message

        # Unauthenticated, /health says only up or down.
        status, doc = _get(server.http_port, "/health")
        assert (status, doc) == (503, {"status": "degraded"})
        # With the token it says why, with the password masked.
        status, doc = _get(server.http_port, "/health", TOKEN)
        assert status == 503
        last_error = str(doc["last_error"])
        assert "Postgres" in last_error
        assert SECRET not in last_error
        assert "postgres:***@" in last_error
        status, doc = _get(server.http_port, "/status", TOKEN)
        assert status == 200
        assert SECRET not in json.dumps(doc)
        assert doc["counters"]["commits_failed"] >= 1  # type: ignore[index]

        proxy.restore()  # the catalog is back: exports succeed again, health recovers
        deadline = time.monotonic() + 60
        while _export(server.http_port, TOKEN)[0] != 200:
            assert time.monotonic() < deadline, "the collector did not recover"
            time.sleep(0.2)
        wait_for(lambda: _get(server.http_port, "/health")[0] == 200, timeout=30)
        assert server.terminate() == 0
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
    logged = log_path.read_text()
    assert "commit failed" in logged  # the outage is in the log...
    assert SECRET not in logged  # ...without the password
    assert TOKEN not in logged
    # The lake was given on the command line, password included: the collector says so.
    assert "the lake's password is on the command line" in logged


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://postgres:{secret}@127.0.0.1:{port}/test?data_path=/tmp/x/",
        "postgres:dbname=test host=127.0.0.1 port={port} user=postgres password={secret}",
    ],
    ids=["url", "key-value"],
)
def test_a_start_up_failure_does_not_print_the_password(spec: str, tmp_path: Path) -> None:
    # Nothing listens on the port: attaching the catalog fails, and the error (which quotes
    # the connection string) is what the operator sees.
    lake = spec.format(secret=SECRET, port=free_port())
    run = subprocess.run(
        [sys.executable, "-m", "spanscore.cli", "serve", "--grpc-port", "0", "--http-port", "0"],
        env={**_clean_env(), "SPANSCORE_LAKE": lake, "SPANSCORE_WORKERS": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == EXIT_LAKE, run.stderr  # the "cannot open the lake" code
    assert "cannot attach lake" in run.stderr
    assert "***" in run.stderr
    assert SECRET not in run.stderr + run.stdout


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SPANSCORE_")}


@pytest.mark.parametrize("where", ["command-line", "environment"])
def test_a_token_on_the_command_line_is_warned_about(where: str, tmp_path: Path) -> None:
    # Other users of the machine read command lines with ps; the variable and the file are
    # private. The token itself is never logged.
    extra = ("--token", TOKEN, "--workers", "0") if where == "command-line" else ("--workers", "0")
    env = {"SPANSCORE_TOKEN": TOKEN} if where == "environment" else {}
    log_path = tmp_path / "collector.log"
    server = ServeProcess(tmp_path / "lake", log_path, *extra, env=env)
    try:
        server.start(timeout=60)
        assert server.terminate() == 0
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
    warnings = [
        event["message"]
        for event in map(json.loads, log_path.read_text().splitlines())
        if event["level"] == "warning"
    ]
    about_token = [w for w in warnings if "bearer token" in w]
    if where == "command-line":
        assert len(about_token) == 1
        assert "bearer token is on the command line" in about_token[0]
        assert "SPANSCORE_TOKEN" in about_token[0]
    else:
        assert about_token == []
    assert TOKEN not in log_path.read_text()


@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        # TLS encrypts but does not authenticate: on a reachable address anyone may write.
        ({"host": "0.0.0.0", "tls_cert": "c.pem", "tls_key": "k.pem"}, True),
        ({"host": "0.0.0.0", "tls_cert": "c.pem", "tls_key": "k.pem", "token": TOKEN}, False),
        ({"host": "127.0.0.1", "tls_cert": "c.pem", "tls_key": "k.pem"}, False),
    ],
    ids=["tls-no-token-public", "tls-token-public", "tls-no-token-loopback"],
)
def test_tls_without_a_token_on_a_public_address_is_warned_about(
    settings: dict[str, str], warned: bool
) -> None:
    # Checked on the settings: binding a non-loopback address is out of bounds for tests.
    config = load_config(overrides={"lake": "lake", **settings}, environ={})
    found = [w for w in config.warnings() if w.startswith("TLS without a token")]
    assert bool(found) is warned, config.warnings()
