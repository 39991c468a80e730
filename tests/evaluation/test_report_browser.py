"""The report page in a real browser: Debian's Chromium, headless, driven by Playwright (no
browser download: its `executable_path` is the system's Chromium).

On a report of a real evaluated lake (tests/support/report_lake.py): the plots are drawn, the table
filters, sorts and pages, a failing conversation opens with the failing assertion next to its
tool call, markup planted in a tool result and a user message stays text and never runs, and
no request leaves the page. Screenshots are kept as artifacts (in pytest's temporary directory,
and in $SPANSCORE_TEST_ARTIFACTS when set); a blank one fails the test. Every browser process
started here is gone at the end.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spanscore.evaluation import load_suite
from spanscore.evaluation.report import ReportOptions, write_report
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake

from ..support.browser import save_screenshot
from ..support.lake import query
from ..support.report_lake import PLANTED, PLANTED_MESSAGE, EvaluatedLake

pytestmark = pytest.mark.slow

TRACE_URL = "https://tracing.example/trace/{trace_id}?span={span_id}"
WAIT_MS = 60_000  # generous: the machine may be loaded


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report-screenshots")


@pytest.fixture(scope="module")
def report(evaluated_lake: EvaluatedLake, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(evaluated_lake.lake, path, evaluated_lake.run, ReportOptions(trace_url=TRACE_URL))
    return path


@dataclass
class Opened:
    page: Any
    url: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        return list(self.page.evaluate("window.__violations"))


@pytest.fixture
def open_report(browser: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def open_(path: Path, fragment: str = "") -> Opened:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        opened = Opened(page, path.as_uri())
        page.on("request", lambda request: opened.requests.append(request.url))
        page.on("pageerror", lambda error: opened.errors.append(str(error)))
        page.on(
            "console",
            lambda m: opened.errors.append(m.text) if m.type == "error" else None,
        )
        # Anything the Content-Security-Policy had to stop would be recorded here.
        page.add_init_script(
            "window.__violations = [];"
            "document.addEventListener('securitypolicyviolation',"
            " e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        page.goto(opened.url + fragment)
        page.wait_for_selector("html[data-ready]")
        return opened

    yield open_
    for context in contexts:
        context.close()


def screenshot(
    opened: Opened, artifacts: Path, name: str, inked: float = 0.02, **options: Any
) -> Path:
    """Save a screenshot as an artifact; fail if it is blank (less than `inked` of it drawn)."""
    return save_screenshot(opened.page, artifacts, name, inked, **options)


def rows(opened: Opened) -> list[str]:
    return list(
        opened.page.eval_on_selector_all("table.convs tbody tr", "r => r.map(x => x.dataset.id)")
    )


def set_filter(opened: Opened, name: str, value: str) -> None:
    opened.page.select_option(f"#filters select[name={name}]", value)


def search(opened: Opened, text: str) -> None:
    opened.page.fill("#filters input[name=q]", text)


def open_conversation(opened: Opened, conversation_id: str) -> None:
    opened.page.click(f'table.convs tbody tr[data-id="{conversation_id}"] td:nth-child(2)')
    opened.page.wait_for_selector(f'#conversation[data-loaded="{conversation_id}"]')


def assert_stayed_offline(opened: Opened) -> None:
    assert opened.requests == [opened.url], opened.requests
    assert opened.violations() == []
    assert opened.errors == []


# --- the tests ---------------------------------------------------------------------------------


def test_the_plots_are_drawn_and_nothing_leaves_the_page(
    open_report: Any, report: Path, artifacts: Path
):
    opened = open_report(report)
    page = opened.page
    for plot in ("rates", "dists", "trend", "tools"):
        drawn = page.eval_on_selector_all(
            f"svg.plot.{plot} .value, svg.plot.{plot} .point, svg.plot.{plot} .line",
            "els => els.filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0"
            " || e.tagName === 'circle' }).length",
        )
        assert drawn > 0, f"the {plot} plot is empty"
        box = page.eval_on_selector(f"svg.plot.{plot}", "e => e.getBoundingClientRect().height")
        assert box > 40
    assert page.locator("svg.plot.trend circle.point.current").count() == 1
    assert page.locator("ul.gates li.fail").count() == 1
    screenshot(opened, artifacts, "report-page", full_page=True)
    assert_stayed_offline(opened)


def test_the_operators_sections_fit_a_1400_px_page(open_report: Any, report: Path, artifacts: Path):
    """Trends per scenario and per metric (each metric on its own scale), distinct run labels,
    tools by failed assertions, labels in the table, and nothing wider than the page."""
    opened = open_report(report)
    page = opened.page
    doc = page.evaluate("JSON.parse(document.getElementById('report-data').textContent).doc")
    # No horizontal scroll: not the page, not the conversations table.
    widths = page.evaluate(
        """() => ({
            page: document.documentElement.scrollWidth,
            view: document.documentElement.clientWidth,
            box: document.getElementById('table').clientWidth,
            boxScroll: document.getElementById('table').scrollWidth,
            table: document.querySelector('table.convs').getBoundingClientRect().width,
            widest: Math.max(...[...document.querySelectorAll('main > section > *')]
                .map(e => e.getBoundingClientRect().right)),
        })"""
    )
    assert widths["view"] == 1400
    assert widths["page"] <= widths["view"], widths
    assert widths["boxScroll"] <= widths["box"], widths
    assert widths["table"] <= widths["box"], widths
    assert widths["widest"] <= widths["view"], widths
    # A small chart per scenario and per metric, side by side, none squeezed.
    charts = page.eval_on_selector_all(
        "#trend .series-grid svg.plot.series",
        "s => s.map(e => ({title: e.querySelector('title').textContent,"
        " width: e.getBoundingClientRect().width, top: e.getBoundingClientRect().top,"
        " drawn: e.querySelectorAll('circle.point').length,"
        " scale: [...e.querySelectorAll('text.scale')].map(t => t.textContent)}))",
    )
    assert len(charts) == len(doc["trend_series"])
    assert all(300 <= c["width"] <= 400 and c["drawn"] >= 2 for c in charts), charts
    assert len({c["top"] for c in charts}) < len(charts)  # several to a row
    rubric = next(c for c in charts if c["title"].startswith("suite-wide / tool_usage_efficiency"))
    assert rubric["scale"] == ["5", "0"]  # every value 5, drawn at the top of 0-5
    labels = page.eval_on_selector_all(
        "svg.plot.trend text.xlabel", "t => t.map(x => x.textContent)"
    )
    assert len(labels) == len(set(labels)) == len(doc["trend"])
    # Tools by failed assertions: a number opens the first conversation it counts.
    cell = page.locator("table.toolfail tr", has_text="product_search_with_budget/tool_calls")
    cell.locator("td.n a").click()
    page.wait_for_selector('#conversation[data-loaded="cs-budget-search-2"]')
    page.keyboard.press("Escape")
    # Label metrics show their labels.
    column = next(
        i
        for i, k in enumerate(
            page.eval_on_selector_all("table.convs th", "t => t.map(x => x.dataset.key)")
        )
        if k == "m:data_privacy"
    )
    shown = page.eval_on_selector_all(
        f"table.convs tbody td:nth-child({column + 1})", "t => t.map(x => x.textContent)"
    )
    assert set(shown) == {"compliant"}
    assert "gate_failed because:" in page.inner_text("header .why")
    top = page.eval_on_selector("#trend", "e => e.getBoundingClientRect().top + window.scrollY")
    bottom = page.eval_on_selector(
        "#conversations", "e => e.getBoundingClientRect().bottom + window.scrollY"
    )
    screenshot(
        opened,
        artifacts,
        "report-1400",
        inked=0.01,  # line charts on white: less ink than the whole page
        full_page=True,
        clip={"x": 0, "y": top, "width": 1400, "height": bottom - top},
    )
    assert_stayed_offline(opened)


def test_the_table_filters_sorts_and_searches(
    open_report: Any, report: Path, evaluated_lake: EvaluatedLake, artifacts: Path
):
    opened = open_report(report)
    everything = {
        r[0] for r in query(evaluated_lake.lake, "SELECT conversation_id FROM conversations")
    }
    assert set(rows(opened)) == everything
    set_filter(opened, "result", "failed")
    assert set(rows(opened)) == {"cs-budget-search-2", "cs-cancel-2"}
    set_filter(opened, "result", "")
    set_filter(
        opened,
        "failing",
        opened.page.eval_on_selector(
            "#filters select[name=failing]",
            "s => [...s.options].find(o => o.textContent === 'verify_before_cancel/order').value",
        ),
    )
    assert rows(opened) == ["cs-cancel-2"]
    set_filter(opened, "failing", "")
    # Free text over the first user message, as the lake has it.
    wanted = {
        r[0]
        for r in query(
            evaluated_lake.lake,
            "SELECT conversation_id FROM conversations WHERE first_user_message ILIKE '%ORD-1003%'",
        )
    }
    search(opened, "ord-1003")
    assert set(rows(opened)) == wanted
    assert len(wanted) == 2
    assert opened.page.text_content("#filters .count") == f"2 of {len(everything)} conversations"
    search(opened, "<b>laptop")
    assert rows(opened) == ["cs-planted-1"]
    search(opened, "")
    opened.page.click("table.convs th[data-key=id]")
    assert rows(opened) == sorted(everything)
    opened.page.click("table.convs th[data-key=id]")
    assert rows(opened) == sorted(everything, reverse=True)
    set_filter(opened, "change", "regressed")
    assert rows(opened) == ["cs-budget-search-2"]
    screenshot(opened, artifacts, "table-filtered")
    assert_stayed_offline(opened)


def test_a_failing_conversation_shows_the_failing_assertion_at_its_tool_call(
    open_report: Any, report: Path, evaluated_lake: EvaluatedLake, artifacts: Path
):
    opened = open_report(report)
    set_filter(opened, "result", "failed")
    open_conversation(opened, "cs-cancel-2")
    page = opened.page
    view = page.locator("#conversation")
    # The failing scores come first, each with its explanation.
    first = view.locator("table.scores tbody tr").first
    assert "fail" in (first.get_attribute("class") or "")
    policy = view.locator("table.scores tr", has_text="verify_before_cancel/order")
    assert "cancel_order call(s) before any verify_customer" in policy.inner_text()
    # The judge's explanation of its (failed) rubric, as the lake has it.
    explanation = query(
        evaluated_lake.lake,
        "SELECT explanation FROM scores WHERE run_id = ? AND conversation_id = 'cs-cancel-2' "
        "AND metric = 'verification_compliance'",
        [evaluated_lake.run],
    )[0][0]
    judged = view.locator("table.scores tr", has_text="verification_compliance")
    assert "fail" in (judged.get_attribute("class") or "")
    assert judged.locator(".expl").inner_text() == explanation
    # The tool call that broke the policy carries the verdict, next to its arguments.
    cancel = view.locator(".step.tool", has=page.locator(".name", has_text="cancel_order"))
    assert cancel.count() == 1
    marks = cancel.locator(".mark.fail").all_inner_texts()
    assert any("verify_before_cancel/order" in m and "breaks this rule" in m for m in marks)
    assert any(
        "auth_cancel_order/tool_calls" in m and ("not expected here" in m or "out of order" in m)
        for m in marks
    )
    assert '"order_id":"ORD-1003"' in cancel.locator("pre.args").inner_text()
    missing = view.locator(".missing-calls").inner_text()
    assert "missing get_order" in missing
    # The link to the same trace in the tracing UI, from the template.
    trace_id = query(
        evaluated_lake.lake,
        "SELECT trace_id, span_id FROM tool_calls WHERE conversation_id = 'cs-cancel-2' "
        "AND tool_name = 'cancel_order'",
    )[0]
    href = cancel.locator("a.trace").get_attribute("href")
    assert href == f"https://tracing.example/trace/{trace_id[0]}?span={trace_id[1]}"
    screenshot(opened, artifacts, "failing-conversation")
    # Escape closes it; the address says which conversation is open, so it can be shared.
    assert opened.page.url.endswith("#c=cs-cancel-2")
    page.keyboard.press("Escape")
    page.wait_for_selector("#conversation", state="hidden")
    assert_stayed_offline(opened)


def test_planted_markup_stays_text_and_never_runs(open_report: Any, report: Path, artifacts: Path):
    opened = open_report(report, "#c=cs-planted-1")
    page = opened.page
    page.wait_for_selector('#conversation[data-loaded="cs-planted-1"]')
    view = page.locator("#conversation")
    search_call = view.locator(".step.tool", has=page.locator(".name", has_text="search_products"))
    products = json.loads(search_call.locator("pre.result").inner_text())
    assert PLANTED + " laptop stand" in [p["name"] for p in products]
    assert PLANTED_MESSAGE in view.locator(".user").inner_text()
    assert view.locator(".step.handoff").inner_text() == "hand-off customer-service → billing"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#conversation script, #conversation img").count() == 0
    assert page.locator("#conversation b", has_text="laptop stand").count() == 0
    assert page.locator("script").count() == page.evaluate(
        "document.querySelectorAll('script[type=\"application/octet-stream\"]').length + 2"
    )
    screenshot(opened, artifacts, "planted-markup")
    assert_stayed_offline(opened)


def test_regressions_are_listed_first_and_open_their_conversation(
    open_report: Any, report: Path, evaluated_lake: EvaluatedLake
):
    opened = open_report(report)
    page = opened.page
    directions = page.eval_on_selector_all(
        "#baseline table.changes tbody tr", "r => r.map(x => x.className)"
    )
    assert directions == ["regressed", "improved"]
    assert evaluated_lake.baseline_run in page.text_content("#baseline h2")
    page.click("#baseline .regressed a.conv")
    page.wait_for_selector('#conversation[data-loaded="cs-budget-search-2"]')
    marks = page.locator("#conversation .mark.fail").all_inner_texts()
    assert any(
        "product_search_with_budget/tool_calls" in m and "not allowed" in m for m in marks
    ), marks
    assert page.locator("#baseline .fixed a.conv").inner_text() == "cs-order-status-1"
    assert_stayed_offline(opened)


def test_a_conversation_without_its_trajectory_says_how_to_see_it(
    open_report: Any, evaluated_lake: EvaluatedLake, tmp_path: Path
):
    path = tmp_path / "one.html"
    write_report(evaluated_lake.lake, path, evaluated_lake.run, ReportOptions(max_trajectories=1))
    opened = open_report(path)
    open_conversation(opened, "cs-budget-search-2")  # the regressed one is embedded first
    assert opened.page.locator("#conversation .step.tool").count() == 2
    opened.page.keyboard.press("Escape")
    open_conversation(opened, "cs-cancel-1")
    assert "spanscore show cs-cancel-1" in opened.page.inner_text("#conversation .note")
    assert_stayed_offline(opened)


def test_many_conversations_are_paged(open_report: Any, tmp_path: Path, artifacts: Path):
    lake = tmp_path / "lake"
    build_lake(lake, 120)
    suite = {
        "name": "paged",
        "metrics": [
            {"type": "tool_calls", "mode": "strict", "expected": ["get_order"]},
            {"type": "efficiency"},
        ],
    }
    since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    run = evaluate(lake, load_suite(suite), RunOptions(settle_s=0, workers=1, since=since))
    path = tmp_path / "paged.html"
    write_report(lake, path, run.run_id)
    opened = open_report(path)
    page = opened.page
    first = rows(opened)
    assert len(first) == 50
    assert page.text_content("#pager .page") == "page 1 of 3"
    page.click("#pager button:text('next')")
    second = rows(opened)
    assert len(second) == 50
    assert not set(first) & set(second)
    page.click("#pager button:text('next')")
    assert len(rows(opened)) == 20
    assert page.is_disabled("#pager button:text('next')")
    screenshot(opened, artifacts, "paged-table")
    assert_stayed_offline(opened)
