"""The test harness itself: what every test relies on about the processes it starts."""

from __future__ import annotations

import subprocess
import sys


def test_children_stop_on_sigint_whatever_started_the_run() -> None:
    """A process a test starts takes SIGINT's default, even when the run was launched with
    SIGINT ignored (`nohup`, a background job of a non-interactive shell): conftest's
    `pytest_configure` sees to it. Launched so, this fails without it."""
    shown = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout.strip() == "default_int_handler"
