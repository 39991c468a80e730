"""Shared fixtures: a real collector on loopback ports over a real lake on disk.

Only fixtures (and pytest hooks) live here; what they call, and what test modules import, is
in `tests/support`.
"""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanscore.collector import Collector

from .support.browser import chromium
from .support.collector import start_collector
from .support.postgres import POSTGRES_SERVER, postgres_connection
from .support.report_lake import EvaluatedLake, build_evaluated_lake
from .support.s3 import S3Server
from .support.tls import self_signed_certificate


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
        collector = start_collector(settings.pop("lake", lake_dir), **settings)
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop(timeout=10)


@pytest.fixture
def collector(make_collector: Callable[..., Collector]) -> Collector:
    return make_collector()


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 and its key (skips without openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    return self_signed_certificate(tmp_path)


# --- a shared lake: a fresh PostgreSQL database for the catalog, a loopback S3 server --------


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database (its URI), dropped at the end of the test."""
    try:
        admin = postgres_connection()
    except Exception as exc:
        pytest.skip(f"no PostgreSQL server at {POSTGRES_SERVER} ({type(exc).__name__})")
    name = "spanscore_test_" + uuid.uuid4().hex[:12]
    with admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield f"{POSTGRES_SERVER}/{name}"
    with postgres_connection() as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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


# --- a real evaluated lake for the report tests ----------------------------------------------


@pytest.fixture(scope="session")
def evaluated_lake(tmp_path_factory: pytest.TempPathFactory) -> EvaluatedLake:
    """Built once per test session (about 10 s), read by every report test."""
    return build_evaluated_lake(tmp_path_factory.mktemp("report-lake"))


# --- a browser for the report's and the review app's browser tests ----------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless (`support.browser`), one per test module."""
    with chromium() as started:
        yield started
