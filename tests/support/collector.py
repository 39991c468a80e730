"""The collector under test, in this process or as a child process.

- `start_collector`: a `Collector` in this process on 127.0.0.1, port 0 for both protocols
  (the OS picks free ports and the collector reports them), with the settings tests want unless
  told otherwise: short batches, no background maintenance, decoding in-process.
- `ServeProcess`: `spanscore serve` in a child process on free loopback ports, logging JSON to a
  file, for what needs a real process: signals, `kill -9`, restarts, several collectors on one
  lake, the benchmarks. `start` polls `/health` until a deadline and fails at once, with the
  log's tail, if the process exits first. `terminate` and `kill` are the signals a test sends on
  purpose; `stop` is the clean-up: SIGTERM, SIGKILL if the process outlives its deadline, and
  then a wait until its decode workers (and every other process it started) are gone too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from spanscore.collector import Collector, load_config

from .polling import wait_for
from .ports import free_port

TEST_SETTINGS: dict[str, Any] = {
    "grpc_port": 0,
    "http_port": 0,
    "batch_delay_ms": 20,
    "maintenance_interval_s": 0,
    "workers": 0,  # decode in-process: fast start; the pool has its own tests
}


def start_collector(lake: Path | str, **settings: Any) -> Collector:
    """A started collector on `lake`: `TEST_SETTINGS`, then `settings`; no environment."""
    overrides = {"lake": str(lake), **TEST_SETTINGS, **settings}
    return Collector(load_config(overrides=overrides, environ={})).start()


class ServeProcess:
    """`spanscore serve` in a child process, on fixed free ports, logging JSON to a file.

    `env` is added to this process's environment; `args` and `env` may be changed before
    `start`.
    """

    def __init__(
        self, lake: Path | str, log_path: Path, *extra: str, env: dict[str, str] | None = None
    ):
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

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> ServeProcess:
        """Start the process and wait until `/health` answers (AssertionError if it exits
        first or does not answer within `timeout` seconds)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        try:
            wait_for(lambda: self.is_healthy() or self._died(), timeout=timeout, interval=0.05)
        except AssertionError:
            raise AssertionError(
                f"collector not healthy within {timeout}s: {self.log_tail()}"
            ) from None
        if self.proc.poll() is not None:
            raise AssertionError(f"collector exited: {self.log_tail(2000)}")
        return self

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def is_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/health", timeout=1
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def get(self, path: str) -> dict[str, Any] | None:
        """The JSON object at `path` on the HTTP port, or None (no answer, not 200, not JSON)."""
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status != 200:
                    return None
                doc = json.loads(response.read())
                return doc if isinstance(doc, dict) else None
        except (OSError, ValueError):
            return None

    def status(self) -> dict[str, Any]:
        """`/status` (the counters), or {} when it does not answer."""
        return self.get("/status") or {}

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (the collector drains and commits); its exit status."""
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would (nothing when it is not running)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop the process however it goes: SIGTERM, then SIGKILL after `timeout` seconds.
        Returns its exit status, None if it had to be killed (or never started). Then waits
        for the processes it started (decode workers, the resource tracker) to be gone,
        killing any left after the deadline."""
        if self.proc is None:
            return None
        descendants = self._descendants()
        code: int | None = self.proc.returncode
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
                code = None
        _, left = psutil.wait_procs(descendants, timeout=timeout)
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        return code

    def _descendants(self) -> list[psutil.Process]:
        try:
            return list(psutil.Process(self.pid).children(recursive=True))
        except psutil.Error:
            return []
