"""Shared fixtures: a real collector on loopback ports over a real lake on disk."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanscore.collector import Collector, load_config
from spanscore.lake import connect


def pytest_configure(config: pytest.Config) -> None:
    """Processes the tests start stop on SIGINT whatever started the test run: a launcher that
    ignores SIGINT (`nohup`, a background job of a non-interactive shell) hands the ignoring on
    to every child, and tests that stop a child with SIGINT then wait in vain. A Python handler
    is not inherited across exec: children get the default, as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def make_collector(lake_dir: Path) -> Iterator[Callable[..., Collector]]:
    """Start collectors on free loopback ports; every one is stopped at the end of the test."""
    started: list[Collector] = []

    def start(**settings: Any) -> Collector:
        overrides = {
            "lake": str(lake_dir),
            "grpc_port": 0,
            "http_port": 0,
            "batch_delay_ms": 20,
            "maintenance_interval_s": 0,
            "workers": 0,  # decode in-process: fast start; the pool has its own tests
            **settings,
        }
        collector = Collector(load_config(overrides=overrides, environ={})).start()
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop(timeout=10)


@pytest.fixture
def collector(make_collector: Callable[..., Collector]) -> Collector:
    return make_collector()


def query(lake: Path | str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Read the lake from a fresh connection, as another process would."""
    con = connect(lake)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy (returned) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """`spanscore serve` in a child process, on fixed free ports, logging JSON to a file."""

    def __init__(self, lake: Path, log_path: Path, *extra: str, env: dict[str, str] | None = None):
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.log_path = log_path
        self.args = [
            sys.executable,
            "-m",
            "spanscore.cli",
            "serve",
            "--lake",
            str(lake),
            "--grpc-port",
            str(self.grpc_port),
            "--http-port",
            str(self.http_port),
            "--log-format",
            "json",
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ServeProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        wait_for(lambda: self.is_healthy() or self._died(), timeout=timeout, interval=0.05)
        if self.proc.poll() is not None:
            raise AssertionError(f"collector exited: {self.log_path.read_text()[-2000:]}")
        return self

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def is_healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/health", timeout=1
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)


# --- a shared lake: a fresh PostgreSQL database for the catalog, a loopback S3 server --------

POSTGRES_SERVER = os.environ.get("SPANSCORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


def _postgres(dbname: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(f"{POSTGRES_SERVER}/{dbname}", autocommit=True, connect_timeout=5)


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (its URI), dropped at the end of the test."""
    import uuid

    try:
        admin = _postgres()
    except Exception as exc:
        pytest.skip(f"no PostgreSQL server at {POSTGRES_SERVER} ({type(exc).__name__})")
    name = "spanscore_test_" + uuid.uuid4().hex[:12]
    with admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield f"{POSTGRES_SERVER}/{name}"
    with _postgres() as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def s3_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A running S3-compatible server; this process's environment points the lake at it."""
    server = S3Server(tmp_path / "moto.log").start()
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def shared_lake(postgres_database: str, s3_server: S3Server) -> str:
    """A lake spec: catalog in a fresh PostgreSQL database, data in the S3 bucket."""
    return f"{postgres_database}?data_path=s3://{s3_server.bucket}/lake/"
