"""`spanscore report --format markdown`: the run's summary where CI shows it (GitHub's job
summary, a pull or merge request comment), read from real evaluated lakes and rendered by
GitHub's own Markdown renderer (cmark-gfm, with raw HTML let through: the strictest reading).

What it says (status and why, gates, the metrics that regressed with the intervals
`compare_runs` computes, the worst conversations against SQL, links to the review app, pass^k
of a simulation against the `scenario_pass_k` view); that hostile strings planted in a real
lake (a conversation's id and message, scenario, metric and suite names) come out as inert
text; and that a run with hundreds of gates and warnings stays under the 60 KB cap, cut
between whole rows."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import cmarkgfm
import pytest
from click.testing import CliRunner
from cmarkgfm.cmark import Options
from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.cli import main
from spanscore.evaluation import load_suite
from spanscore.evaluation.report.markdown import MAX_BYTES, text
from spanscore.evaluation.runs.compare import compare_runs
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

from ..support.collector import start_collector
from ..support.conversation_spans import T0, chat_span, tool_span
from ..support.lake import query
from ..support.otlp_factory import attr
from ..support.otlp_http import post
from ..support.report_lake import EvaluatedLake

UI = "http://127.0.0.1:8765/review"
SINCE = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
ZWSP = "\u200b"
# The only elements the summary's own Markdown makes; nothing from the lake adds any.
OWN_TAGS = {"h2", "h3", "p", "strong", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
OWN_TAGS |= {"a", "code"}


def summary(lake: Path, *args: str) -> str:
    done = CliRunner().invoke(main, ["report", *args, "--lake", str(lake), "--format", "markdown"])
    assert done.exit_code == 0, done.output
    return done.stdout


def github(markdown: str) -> str:
    """The HTML GitHub makes of it, with raw HTML kept (GitHub keeps some; we need none)."""
    return str(
        cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
    )


class Rendered(HTMLParser):
    """The elements, links, headings and tables of a rendered summary, its text without the
    zero-width spaces the escaping puts in."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.hrefs: list[str] = []
        self.headings: list[str] = []
        self.tables: list[list[list[str]]] = []  # rows of cell texts
        self.texts: list[str] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("h2", "h3"):
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).replace(ZWSP, ""))
            self._cell = None
        elif tag in ("h2", "h3") and self._heading is not None:
            self.headings.append("".join(self._heading).replace(ZWSP, ""))
            self._heading = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        for open_ in (self._cell, self._heading):
            if open_ is not None:
                open_.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts).replace(ZWSP, "")

    def table(self, *header: str) -> list[list[str]]:
        """The rows (header first) of the table whose header starts with these cells."""
        return next(t for t in self.tables if t[0][: len(header)] == list(header))


def well_formed(page: Rendered) -> None:
    """Only the summary's own elements; every table row as wide as its header."""
    assert page.tags <= OWN_TAGS, page.tags - OWN_TAGS
    for table in page.tables:
        assert {len(row) for row in table} == {len(table[0])}, table


# --- what it says, on the report's evaluated lake ------------------------------------------------


@pytest.mark.slow  # a real lake, evaluated
def test_the_summary_gives_status_gates_regressions_and_the_worst_conversations(
    evaluated_lake: EvaluatedLake,
):
    lake, run, baseline = evaluated_lake.lake, evaluated_lake.run, evaluated_lake.baseline_run
    markdown = summary(lake, "--ui-url", UI + "/")
    assert markdown.startswith(f"## ❌ spanscore run {run}: gate\\_failed\n")
    assert len(markdown.encode()) < MAX_BYTES
    page = Rendered(github(markdown))
    well_formed(page)
    assert page.headings == [
        f"❌ spanscore run {run}: gate_failed",
        "Gates: 1 of 2 passed",
        f"Regressed since run {baseline}",
        "The worst conversations: 2 of 2 that failed",
    ]
    # Why: the failed gate, as the run recorded it.
    assert re.search(
        r"gate_failed because:\s*gate verify_before_cancel: conversation pass rate 0\.\d+ below",
        page.text,
    )
    gates = page.table("")
    assert [row[:2] for row in gates[1:]] == [
        ["❌ FAILED", "verify_before_cancel"],  # the failed gate first
        ["✅ passed", "all scores"],
    ]
    # Regressed: exactly the metric whose pass rate fell, with compare's interval; the metric
    # that improved (order_status_check/response) is not listed.
    con = connect(lake, read_only=True)
    try:
        [m] = [
            m
            for m in compare_runs(con, baseline, run).metrics
            if (m.scenario_id, m.metric) == ("product_search_with_budget", "tool_calls")
        ]
    finally:
        con.close()
    assert page.table("scenario", "metric")[1:] == [
        [
            "product_search_with_budget",
            "tool_calls",
            str(m.paired),
            "100% → 50%",
            f"{m.mean_a:.3f} → {m.mean_b:.3f}",
            f"{m.delta:+.3f}",
            "-",  # two paired conversations: too few for an interval
        ]
    ]
    assert "1 scores went from pass to fail:" in page.text
    # The worst: the failing conversations, most failing scores first (SQL, not the report),
    # the one that regressed first among equals; each linked to the review app.
    failing = query(
        lake,
        "SELECT conversation_id, count(DISTINCT coalesce(scenario_id, '') || '/' || metric) "
        "FROM scores WHERE run_id = ? AND (NOT passed OR error IS NOT NULL) GROUP BY ALL",
        [run],
    )
    expected = [c for c, _ in sorted(failing, key=lambda r: (-r[1], r[0] != "cs-budget-search-2"))]
    worst = page.table("conversation")[1:]
    assert [row[0].removesuffix(" (regressed)") for row in worst] == expected
    assert worst[expected.index("cs-budget-search-2")][0].endswith(" (regressed)")
    assert dict(failing)[worst[0][0].removesuffix(" (regressed)")] == int(worst[0][2].split(":")[0])
    links = [f"{UI}/conversations/{quote(c, safe='')}" for c in expected]
    assert page.hrefs == [f"{UI}/conversations/cs-budget-search-2", *links]
    # Without --ui-url nothing is a link.
    assert "<a " not in github(summary(lake))


@pytest.mark.slow  # a real lake, evaluated
def test_a_regression_comes_with_its_bootstrap_interval(tmp_path: Path):
    """A stricter version of a suite over 40 conversations: its metric regresses (the answers
    all say "shipped", 11 name an order starting ORD-1), with compare's interval (enough paired
    conversations for one); the conversations that went from pass to fail are listed, 10 of
    them."""
    lake = tmp_path / "lake"
    build_lake(lake, 40)
    runs = []
    for keywords in (["shipped"], ["ORD-1"]):
        suite = load_suite({"name": "s", "metrics": [{"type": "response", "keywords": keywords}]})
        runs.append(evaluate(lake, suite, RunOptions(settle_s=0, workers=1, since=SINCE)).run_id)
    con = connect(lake, read_only=True)
    try:
        [m] = compare_runs(con, runs[0], runs[1]).metrics
    finally:
        con.close()
    assert m.low is not None
    assert m.high is not None
    page = Rendered(github(summary(lake)))
    well_formed(page)
    assert page.table("scenario", "metric")[1:] == [
        [
            "(all)",
            "response",
            str(m.paired),
            f"{m.pass_rate_a:.0%} → {m.pass_rate_b:.0%}",
            f"{m.mean_a:.3f} → {m.mean_b:.3f}",
            f"{m.delta:+.3f}" + (" *" if m.significant else ""),
            f"[{m.low:+.3f}, {m.high:+.3f}]",
        ]
    ]
    markdown = summary(lake)
    assert "29 scores went from pass to fail:" in markdown
    assert (
        len(re.findall(r"^- conv-\w+: \\\(all\\\)/response 1\.000 → 0\.000$", markdown, re.M)) == 10
    )
    assert "\n- … 19 more\n" in markdown


@pytest.mark.slow  # a real lake, evaluated
def test_trace_links_and_the_summary_written_to_a_file(
    evaluated_lake: EvaluatedLake, tmp_path: Path
):
    lake = evaluated_lake.lake
    template = "https://tracing.example/trace/{trace_id}?c={conversation_id}"
    page = Rendered(github(summary(lake, "--trace-url", template)))
    traces = dict(
        query(
            lake,
            "SELECT conversation_id, arg_min(trace_id, start_time) FROM spans "
            "WHERE conversation_id IN ('cs-cancel-2', 'cs-budget-search-2') GROUP BY ALL",
        )
    )
    assert sorted(page.hrefs) == sorted(
        f"https://tracing.example/trace/{t}?c={c}" for c, t in traces.items()
    )
    out = tmp_path / "ci" / "summary.md"
    done = CliRunner().invoke(
        main, ["report", "--lake", str(lake), "--format", "markdown", "-o", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert done.output.startswith(f"summary of run {evaluated_lake.run} written to {out} (")
    assert out.read_text() == summary(lake)


@pytest.mark.slow  # a real lake, evaluated
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--format", "markdown"], "no evaluation run 'nope'"),
        (["--format", "markdown", "--ui-url", "javascript:alert(1)"], "must start with http"),
        (["--format", "markdown", "--ui-url", "https://x/a)b"], "has a space or one of"),
        (["--format", "markdown", "--baseline", "zzz"], "no evaluation run 'zzz'"),
        (["-o", "r.html", "--ui-url", UI], "--ui-url is for --format markdown"),
    ],
    ids=["unknown-run", "not-http", "breaks-a-link", "unknown-baseline", "ui-url-on-html"],
)
def test_bad_input_exits_2_and_says_why(
    evaluated_lake: EvaluatedLake, args: list[str], message: str
):
    done = CliRunner().invoke(
        main, ["report", "--lake", str(evaluated_lake.lake), *args], catch_exceptions=False
    )
    assert done.exit_code == 2, done.output
    assert message in done.output


@pytest.mark.slow  # a real lake, evaluated
def test_the_ui_url_from_the_environment_is_left_to_the_summary(
    evaluated_lake: EvaluatedLake, tmp_path: Path
):
    # One variable for a CI job's every report: the HTML one goes on, the summary links.
    env = {"SPANSCORE_UI_URL": UI}
    out = tmp_path / "r.html"
    runner = CliRunner()
    made = runner.invoke(
        main, ["report", "--lake", str(evaluated_lake.lake), "-o", str(out)], env=env
    )
    assert made.exit_code == 0, made.output
    linked = runner.invoke(
        main, ["report", "--lake", str(evaluated_lake.lake), "--format", "markdown"], env=env
    )
    assert f"]({UI}/conversations/cs-cancel-2)" in linked.stdout


# --- hostile strings in a real lake --------------------------------------------------------------

HOSTILE_ID = (
    "x|y</td><script>alert(1)</script>](javascript:alert(2))@everyone #1 `c` *b* _i_ ~s~ $m$ "
    "https://e.example www.e.example"
)
HOSTILE_MESSAGE = (
    "hi @octocat\n| a | b |\n|---|---|\n## not a heading\n<img src=x onerror=alert(3)> "
    "[click](javascript:alert(4)) ![p](https://evil.example/p.png) <!-- c --> \\ &lt;"
)
HOSTILE_SCENARIO = "<b>bold</b>|@here #2 - [s](javascript:alert(5))"
HOSTILE_METRIC = "calls](javascript:alert(6)) *x* `y`"
HOSTILE_SUITE = "suite <i>x</i> @channel"


def _one_line(value: str) -> str:
    return " ".join(value.split())


@pytest.fixture(scope="module")
def hostile_lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A conversation with a hostile id and message, sent over OTLP to a real collector, failing
    an assertion of a hostile scenario and metric of a hostile suite, whose gate fails."""
    directory = tmp_path_factory.mktemp("hostile")
    lake = directory / "lake"
    collector = start_collector(lake)
    try:
        spans = [
            chat_span(
                HOSTILE_ID, user=HOSTILE_MESSAGE, calls=[{"id": "c1", "name": "lookup"}], at=T0
            ),
            tool_span(HOSTILE_ID, "lookup", call_id="c1", result="ok", at=T0 + 200),
            chat_span(
                HOSTILE_ID, user=HOSTILE_MESSAGE, results=[("c1", "ok")], answer="done", at=T0 + 400
            ),
        ]
        for span in spans:
            span.attributes.append(attr("scenario.id", HOSTILE_SCENARIO))
        post(collector, spans)
    finally:
        collector.stop(timeout=10)
    suite = directory / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "name": HOSTILE_SUITE,
                "scenarios": [
                    {
                        "id": HOSTILE_SCENARIO,
                        "assertions": [
                            {
                                "type": "tool_calls",
                                "name": HOSTILE_METRIC,
                                "mode": "contains",
                                "expected": ["verify_customer"],
                            }
                        ],
                    }
                ],
                "gates": [{"scenario": HOSTILE_SCENARIO, "min_pass_rate": 1}],
            }
        )
    )
    result = evaluate(lake, load_suite(suite), RunOptions(settle_s=0, workers=1, since=SINCE))
    assert (result.scored, result.status) == (1, "gate_failed")
    return lake, result.run_id


@pytest.mark.slow  # a real lake, evaluated
def test_hostile_strings_from_the_lake_render_as_inert_text(hostile_lake: tuple[Path, str]):
    lake, run = hostile_lake
    markdown = summary(lake, "--ui-url", UI)
    page = Rendered(github(markdown))
    well_formed(page)  # no <script>, <img>, <b>, <i>, no table broken by a |
    # The one link is ours, the id percent-encoded in it; no address in the text became one.
    assert page.hrefs == [f"{UI}/conversations/{quote(HOSTILE_ID, safe='')}"]
    # Every string reads exactly as it was, on one line.
    [row] = page.table("conversation")[1:]
    assert row[0] == HOSTILE_ID
    assert row[1] == HOSTILE_SCENARIO
    assert row[2].startswith(f"1: {HOSTILE_SCENARIO}/{HOSTILE_METRIC}")
    assert row[3] == _one_line(HOSTILE_MESSAGE)[:119] + "…"  # clipped at 120 characters
    assert page.table("")[1][1] == HOSTILE_SCENARIO  # the failed gate
    assert f"suite {HOSTILE_SUITE} (version" in page.text
    # Headings: the summary's own only ("## not a heading" is text in a cell).
    assert page.headings == [
        f"❌ spanscore run {run}: gate_failed",
        "Gates: 0 of 1 passed",
        "The worst conversations: 1 of 1 that failed",
        "Notes",
    ]
    # Nobody is mentioned, no issue referenced: each @ and # is followed by a zero-width space.
    rendered = "".join(page.texts)
    assert re.findall(r"[@#](?!\u200b)", rendered) == []
    assert "@\u200beveryone" in rendered
    assert "@\u200bhere" in rendered


@given(st.text(), st.text())
@settings(max_examples=300, deadline=None)
def test_any_string_is_shown_as_itself_in_a_paragraph_a_list_and_a_table_cell(a: str, b: str):
    def shown(value: str) -> str:
        """What a reader should see: the string on one line, invisible characters dropped."""
        flat = re.sub(r"[\s\x00-\x1f\x7f-\x9f]+", " ", value)
        flat = re.sub(
            r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]", "", flat
        )
        return flat.strip()

    ta, tb = text(a, 10_000), text(b, 10_000)
    for markdown, expected in [
        (f"{ta}\n", [shown(a)]),
        (f"- {ta}\n- {tb}\n", [shown(a), shown(b)]),
    ]:
        page = Rendered(github(markdown))
        assert page.tags <= {"p", "ul", "li"}
        if markdown.startswith("- "):
            items = [t.replace(ZWSP, "") for t in page.texts if t.strip()]
            assert items == [e for e in expected if e], markdown
        else:
            assert page.text.strip() == expected[0], markdown
    page = Rendered(github(f"| a | b |\n|---|---|\n| {ta} | {tb} |\n"))
    assert page.tags <= {"table", "thead", "tbody", "tr", "th", "td"}
    assert page.tables[0][1] == [shown(a), shown(b)]


# --- a simulation's pass^k -----------------------------------------------------------------------


@pytest.mark.slow  # a real lake, evaluated
def test_a_simulations_run_shows_pass_k_per_scenario(tmp_path: Path):
    from spanscore.examples.demo import run_demo

    lake = tmp_path / "demo"
    run_demo(lake, echo=lambda line: None)  # production traffic, then a simulation, both scored
    [(run, simulation)] = query(
        lake, "SELECT run_id, simulation_id FROM eval_runs WHERE simulation_id IS NOT NULL"
    )
    page = Rendered(github(summary(lake, run)))
    well_formed(page)
    assert f"pass^k of simulation {simulation}" in page.headings
    table = page.table("scenario", "trials")
    most = max(
        int(k) for (k,) in query(lake, "SELECT k FROM scenario_pass_k WHERE run_id = ?", [run])
    )
    assert table[0] == ["scenario", "trials", "passed", "not counted"] + [
        f"pass^{k}" for k in range(1, most + 1)
    ]
    expected: dict[str, list[str]] = {}
    for scenario, trials, passed, value in query(
        lake,
        "SELECT scenario_id, trials, passed, pass_hat_k FROM scenario_pass_k "
        "WHERE run_id = ? ORDER BY scenario_id, k",
        [run],
    ):
        expected.setdefault(scenario, [scenario, str(trials), str(passed), "0"]).append(
            f"{value:.2f}"
        )
    assert table[2:] == list(expected.values())
    means = [sum(float(r[4 + k]) for r in table[2:]) / len(table[2:]) for k in range(most)]
    assert table[1][4:] == [f"{m:.3f}" for m in means]  # over the scenarios


# --- the size cap --------------------------------------------------------------------------------


@pytest.mark.slow  # a real lake, evaluated
def test_a_run_with_hundreds_of_gates_and_warnings_fits_under_the_cap(tmp_path: Path):
    """300 scenarios with long hostile ids, each selecting nothing (a warning, strict) and
    gated (a gate that measured nothing fails): hundreds of reasons, gates and warnings, each
    a few hundred bytes once escaped."""
    lake = tmp_path / "lake"
    build_lake(lake, 20)

    def name(i: int) -> str:
        return f"<b>|@all #{i}</b> " + "`*_[x](javascript:1)` " * 8 + str(i)

    n = 300
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps(
            {
                "name": "big",
                "strict": True,
                "scenarios": [
                    {"id": name(i), "assertions": [{"type": "tool_errors"}]} for i in range(n)
                ],
                "gates": [{"scenario": name(i), "min_pass_rate": 1} for i in range(n)],
            }
        )
    )
    result = evaluate(lake, load_suite(suite), RunOptions(settle_s=0, workers=1, since=SINCE))
    assert result.status == "gate_failed"
    markdown = summary(lake)
    assert len(markdown.encode()) <= MAX_BYTES
    page = Rendered(github(markdown))
    well_formed(page)
    # Each list stops at a whole row and says how many it left out.
    gates = page.table("")[1:]
    [left] = re.findall(r"… (\d+) more gates", markdown)
    assert len(gates) + int(left) == n
    names = {name(i)[:79] for i in range(n)}  # clipped at 80 characters, the last one "…"
    assert all(row[1][:-1].rstrip() in {m.rstrip() for m in names} for row in gates), gates[0]
    assert all(row[1].endswith("…") for row in gates)
    for what, listed in [("reasons", "- gate "), ("warnings", "- scenario '")]:
        [left] = re.findall(rf"^- … (\d+) more {what}", markdown, re.M)
        shown = sum(1 for line in markdown.splitlines() if line.startswith(listed))
        assert shown > 0
        assert shown + int(left) == n + (what == "reasons")  # and "strict mode: ..."
    assert "The worst conversations" in page.headings  # the sections after them are there
