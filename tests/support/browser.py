"""Debian's Chromium, headless, driven by Playwright (no browser download: its
`executable_path` is the system's Chromium). The `browser` fixture (tests/conftest.py) starts
one per test module and checks that every process it started is gone at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def ensure_chromium() -> str:
    """Debian's Chromium, installed when missing and we may (root with apt-get)."""
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, timeout=900)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"], check=True, env=env, timeout=1800
        )
        found = shutil.which("chromium")
    if found is None:
        message = "Chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone meanwhile
        return ""


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium; every process it started is gone when the block ends."""
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    playwright = sync_playwright().start()
    started: list[psutil.Process] = []
    try:
        # Playwright gives every launch a fresh temporary profile (user data directory).
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        assert any(
            "chromium" in _command(p) for p in me.children(recursive=True) if p.pid not in before
        )
        yield browser
        # Everything started since (the driver, the browser, its renderers): all must go.
        started = [p for p in me.children(recursive=True) if p.pid not in before]
        browser.close()
    finally:
        playwright.stop()
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, f"browser processes left running: {[p.pid for p in alive]}"


def save_screenshot(
    page: Any, artifacts: Any, name: str, inked: float = 0.02, **options: Any
) -> Any:
    """Save a screenshot of `page` as an artifact (in `artifacts`, and in
    $SPANSCORE_TEST_ARTIFACTS when set); fail if it is blank (less than `inked` of it drawn)."""
    import io
    from pathlib import Path

    from PIL import Image

    data = page.screenshot(**options)
    path = Path(artifacts) / f"{name}.png"
    path.write_bytes(data)
    if os.environ.get("SPANSCORE_TEST_ARTIFACTS"):
        target = Path(os.environ["SPANSCORE_TEST_ARTIFACTS"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)
    image = Image.open(io.BytesIO(data)).convert("RGB").resize((280, 200))
    raw = image.tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    drawn = sum(1 for p in pixels if sum(p) < 600) / len(pixels)
    assert len(set(pixels)) > 16, f"{path} is blank (one colour)"
    assert drawn > inked, f"{path} is blank ({drawn:.1%} of it has anything drawn)"
    return path
