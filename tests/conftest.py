"""Shared fixtures: a real collector on loopback ports over a real lake on disk."""

from __future__ import annotations

import os
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
