"""The review app in Debian's Chromium (tests/support/browser.py), served by the real
`spanscore ui` command on a copy of a real evaluated lake: every page opens and draws, a
filter narrows the list, a reviewer labels three conversations with the keyboard and finds
the labels after a reload, the judge's agreement changes with them, and the hostile
conversation's markup stays text and runs nothing. Screenshots are kept as artifacts (a blank
one fails). Every process started here is gone at the end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..support.browser import save_screenshot
from ..support.polling import wait_for
from ..support.report_lake import PLANTED_MESSAGE, EvaluatedLake

pytestmark = pytest.mark.slow

WAIT_MS = 60_000  # generous: the machine may be loaded


PROMOTED = "# promoted from production\nname: promoted\nmetrics:\n  - {type: efficiency}\n"


@pytest.fixture(scope="module")
def promoted_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suites") / "promoted.yaml"
    path.write_text(PROMOTED)
    return path


@pytest.fixture(scope="module")
def served(review_lake: EvaluatedLake, promoted_suite: Path) -> Iterator[str]:
    """`spanscore ui --port 0` on the lake; its printed URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spanscore.cli",
            "ui",
            "--lake",
            str(review_lake.lake),
            "--port",
            "0",
            "--reviewer",
            "rita",
            "--promote-into",
            str(promoted_suite),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield found.group(0).rstrip("/")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode is not None


@pytest.fixture
def page(browser: Any, served: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, base_url=served)
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    outside: list[str] = []
    opened.on("request", lambda r: outside.append(r.url) if not r.url.startswith(served) else None)
    opened.errors = errors
    yield opened
    context.close()
    assert not errors, errors
    assert not outside, outside


def ready(page: Any) -> None:
    # Selectors, not wait_for_function: the app's CSP forbids the eval that polling needs.
    page.wait_for_selector("html[data-ready='1']", state="attached")


def test_every_page_opens_and_draws(page: Any, review_lake: EvaluatedLake, tmp_path: Path) -> None:
    run, baseline = review_lake.run, review_lake.baseline_run
    for name, path in [
        ("runs", "/"),
        ("run", f"/runs/{run}"),
        ("compare", f"/compare/{baseline}/{run}"),
        ("conversations", "/conversations"),
        ("conversation", "/conversations/cs-cancel-2"),
        ("queues", "/queues"),
        ("judge", "/judge"),
    ]:
        answer = page.goto(path)
        assert answer is not None, path
        assert answer.status == 200, path
        ready(page)
        save_screenshot(page, tmp_path, f"ui-{name}", inked=0.005, full_page=True)
    # The conversation's trajectory is the report's renderer: turns, tool cards, scores.
    page.goto("/conversations/cs-cancel-2")
    page.wait_for_selector("#trajectory[data-ready='1']")
    assert page.locator("#trajectory .turn").count() >= 1
    assert page.locator("#trajectory .step.tool").count() >= 1
    assert "cancel_order" in page.locator("#trajectory").inner_text()


def test_a_filter_narrows_the_list(page: Any) -> None:
    page.goto("/conversations")
    ready(page)
    total = int(page.locator("#match-count").inner_text())
    page.fill("input[name=text]", "laptop stand")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"text=laptop"))
    ready(page)
    assert int(page.locator("#match-count").inner_text()) < total
    assert "cs-planted-1" in page.locator("table.convs").inner_text()


def test_three_labels_with_the_keyboard_survive_a_reload_and_move_the_agreement(
    page: Any, review_lake: EvaluatedLake, tmp_path: Path
) -> None:
    page.goto("/judge")
    ready(page)
    assert page.locator(".judge-metric[data-metric='verification_compliance']").count() == 0
    page.goto(f"/runs/{review_lake.run}")
    ready(page)
    page.click("button.queue-metric[data-metric='verification_compliance']")
    page.wait_for_url(re.compile(r"/queues/review-verification_compliance-"))
    ready(page)
    total = page.locator("#queue-items li").count()
    assert total >= 3
    for key in ("a", "d", "a"):
        page.wait_for_selector("#item-trajectory[data-ready='1']")
        before = page.locator("#queue-items li.done").count()
        page.keyboard.press(key)
        page.keyboard.press("Enter")
        wait_for(lambda b=before: page.locator("#queue-items li.done").count() == b + 1, 60)
    assert page.locator("#progress").inner_text() == f"3 of {total}"
    save_screenshot(page, tmp_path, "ui-queue", inked=0.005, full_page=True)
    page.reload()
    ready(page)
    assert page.locator("#progress").inner_text() == f"3 of {total}"
    assert page.locator("#queue-items li.done").count() == 3
    page.goto("/judge")
    ready(page)
    metric = page.locator(".judge-metric[data-metric='verification_compliance']")
    assert metric.count() == 1
    assert "over 3 labels" in metric.inner_text()
    assert metric.locator(".agreement").inner_text() == "67%"
    assert metric.locator("table.disagreements tbody tr").count() == 1
    save_screenshot(page, tmp_path, "ui-judge-after", inked=0.005, full_page=True)


def test_the_hostile_conversation_runs_no_script(page: Any, tmp_path: Path) -> None:
    for path in ["/conversations/cs-planted-1", "/conversations?text=laptop"]:
        page.goto(path)
        ready(page)
        if path.startswith("/conversations/"):
            page.wait_for_selector("#trajectory[data-ready='1']")
            assert PLANTED_MESSAGE in page.locator("#trajectory .user").first.inner_text()
            for link in page.locator("a").all():
                href = link.get_attribute("href") or ""
                assert not href.lower().startswith("javascript:"), href
        assert page.evaluate("window.__pwned") is None
        assert page.locator("textarea").count() == 0
    save_screenshot(page, tmp_path, "ui-hostile", inked=0.005, full_page=True)


def test_a_conversation_is_promoted_from_its_page(page: Any, promoted_suite: Path) -> None:
    page.goto("/conversations/cs-cancel-2")
    ready(page)
    page.click("#promote")
    page.click("#promote-preview")
    wait_for(lambda: page.locator("#promote-status").inner_text().startswith("preview"), 60)
    assert "cs-cancel-2" in page.locator("pre.promote-preview").inner_text()
    assert promoted_suite.read_text() == PROMOTED
    page.click("#promote-write")
    wait_for(lambda: page.locator("#promote-status").inner_text().startswith("appended"), 60)
    text = promoted_suite.read_text()
    assert text.startswith(PROMOTED)
    assert "cs-cancel-2" in text[len(PROMOTED) :]
