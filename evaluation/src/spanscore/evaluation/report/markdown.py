"""The report as a short Markdown summary, where CI shows it: GitHub's job summary
(`$GITHUB_STEP_SUMMARY`), a pull or merge request comment.

What it says, from the same `ReportDoc` as the page and the JSON: the run's status and why it
has it, its gates, the metrics that regressed since the baseline (the change of the mean with
its 95 % bootstrap interval, as `compare` computes it) and the conversations that went from
pass to fail, the five worst conversations (linked to the review app with `ui_url`, to the
tracing UI with the report's trace URL), and pass^k per scenario for a simulation's run.

Every string from the lake is untrusted (a conversation's id and text, scenario and metric
names, explanations, the suite's name), so `text()` makes it inert: whitespace and control
characters collapse to one space (no new line, no new table row), invisible formatting
characters (bidi overrides, zero-width) are dropped, `<`, `>` and `&` become entities (no HTML),
every Markdown metacharacter is backslash-escaped (no link, image, emphasis, code or table
cell), and a zero-width space is put after `@` and `#` and inside `://` and `www.`, so no one
is mentioned, no issue is referenced and no address becomes a link. Links are only ever built
here, to the review app or the tracing UI, with the ids percent-encoded.

Size: at most `MAX_BYTES` (60,000 bytes of UTF-8), below GitHub's 65,536 characters of a
comment and far below the 1 MiB of a job summary. Each section has a share; a list that does
not fit its share (with what earlier sections left unused) stops at a whole row, with a
"… N more" line, so a cut never falls inside an escape or a table row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from urllib.parse import quote

from spanscore.evaluation.report.data import ReportError
from spanscore.evaluation.report.html import judge_text, num, shown_time
from spanscore.evaluation.report.schema import MetricChangeDoc, ReportDoc, ScenarioTrialsDoc

MAX_BYTES = 60_000
WORST = 5  # conversations in "the worst conversations"
WENT_WRONG = 10  # scores that went from pass to fail, listed

# Each section's share of MAX_BYTES; what one leaves unused goes to the next. The title and
# the line of facts above them are short: every string in them is clipped.
_SHARES = {
    "status": 6_000,
    "gates": 8_000,
    "warnings": 4_000,
    "regressed": 12_000,
    "went_wrong": 4_000,
    "worst": 12_000,
    "trials": 8_000,
    "notes": 2_000,
}
# The longest any one string from the lake is shown (in characters, before escaping).
_CLIP = {"id": 120, "name": 80, "key": 120, "message": 120, "explanation": 160, "reason": 300}

_SPACES = re.compile(r"[\s\x00-\x1f\x7f-\x9f]+")
# Invisible formatting: zero-width characters, bidi embeddings, overrides and isolates.
_INVISIBLE = re.compile(r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_ZWSP = "&#8203;"
_ESCAPES = str.maketrans(
    {
        **{c: "\\" + c for c in "\\`*_~[]()!|$"},
        "<": "&lt;",
        ">": "&gt;",
        "&": "&amp;",
        "@": "@" + _ZWSP,  # no mention, no e-mail link
        "#": "#" + _ZWSP,  # no issue reference, no closing sequence of a heading
    }
)
# What would start a list item at the start of a line: `-`, `+`, `1.` (`1)` is escaped already).
_LIST_MARK = re.compile(r"^([-+]|\d+(?=\.))")
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?i:(?<=www))(?=\.)")  # `https://`, `www.`
_URL_SAFE = "/:?#@!$&'*+,;=%~-._"  # what a link keeps as it is: no space, (, ), <, >, [, ]


def text(value: object, limit: int = _CLIP["name"]) -> str:
    """A string from the lake as inert Markdown text, on one line, cut at `limit` characters
    (see the module docstring)."""
    raw = _INVISIBLE.sub("", _SPACES.sub(" ", "" if value is None else str(value))).strip()
    if len(raw) > limit:
        raw = raw[: limit - 1].rstrip() + "…"
    escaped = _LIST_MARK.sub(
        lambda m: "\\" + m[1] if m[1] in "-+" else m[1] + "\\", raw.translate(_ESCAPES)
    )
    return _AUTOLINK.sub(_ZWSP, escaped)


def check_ui_url(ui_url: str) -> str:
    """The review app's address, checked: http(s), with no character that could end a link."""
    if not ui_url.startswith(("http://", "https://")):
        raise ReportError("the UI URL must start with http:// or https://")
    if re.search(r"[\s<>()\[\]`\"'\\]", ui_url):
        raise ReportError(f"the UI URL {ui_url!r} has a space or one of <>()[]`\"'\\ in it")
    return ui_url.rstrip("/")


def conversation_url(ui_url: str, conversation_id: str) -> str:
    """The review app's page of a conversation: `{ui_url}/conversations/{quoted id}`."""
    return f"{check_ui_url(ui_url)}/conversations/{quote(conversation_id, safe='')}"


def _trace_url(template: str, trace_id: str, conversation_id: str) -> str:
    """The report's trace URL template filled in as the page fills it (values encoded)."""
    values = {"trace_id": trace_id, "span_id": "", "conversation_id": conversation_id}
    filled = re.sub(
        r"\{(trace_id|span_id|conversation_id)\}",
        lambda m: quote(values[m.group(1)], safe=""),
        template,
    )
    return quote(filled, safe=_URL_SAFE)


class _Page:
    """The summary's lines, and the bytes they may still take."""

    def __init__(self, limit: int) -> None:
        self.lines: list[str] = []
        self.left = limit
        self.spare = 0  # what earlier sections left of their shares

    def add(self, *lines: str) -> None:
        for line in lines:
            self.lines.append(line)
            self.left -= len(line.encode()) + 1

    def section(
        self,
        share: str,
        head: Sequence[str],
        rows: Sequence[str],
        more: Callable[[int], str],
        tail: Sequence[str] = (),
        left_out: int = 0,
    ) -> None:
        """`head`, as many of `rows` as fit the section's share, a "… N more" line for the
        rest (and the `left_out` rows not offered), and `tail`: all or nothing of head and
        tail, whole rows only."""
        budget = min(_SHARES[share] + self.spare, self.left)

        def size(*lines: str) -> int:
            return sum(len(line.encode()) + 1 for line in lines)

        def rest(shown: int) -> list[str]:
            hidden = len(rows) - shown + left_out
            return [more(hidden)] if hidden else []

        used = size(*head, *tail)
        shown = 0
        # Each row that fits with room left for the "… N more" line after it.
        while shown < len(rows) and used + size(rows[shown], *rest(shown + 1)) <= budget:
            used += size(rows[shown])
            shown += 1
        used += size(*rest(shown))
        if used > budget:  # cannot happen with the shares above: a guard, not a layout
            self.spare = budget
            return
        self.add(*head, *rows[:shown], *rest(shown))
        self.add(*tail)
        self.spare = budget - used


def _cell(*parts: str) -> str:
    return "| " + " | ".join(parts) + " |"


def _status_mark(status: str | None) -> str:
    return {"succeeded": "✅", "gate_failed": "❌", "failed": "❌"}.get(status or "", "⚠️")


def _head(doc: ReportDoc, page: _Page) -> None:
    run = doc["run"]
    status = run["status"] or "unknown"
    page.add(
        f"## {_status_mark(run['status'])} spanscore run {text(run['run_id'], _CLIP['id'])}: "
        f"{text(status)}",
        "",
    )
    conversations = doc["conversations"]
    failed = sum(1 for r in conversations["result"] if r in ("failed", "error"))
    facts = [
        f"suite **{text(run['suite_name'])}** (version {text((run['suite_version'] or '?')[:12])})",
        f"{run['conversations']} conversations scored, {failed} failed",
        f"{run['scores']} scores ({run['errors']} could not be given)",
        "window "
        + text(shown_time(run["window_start"]) if run["window_start"] else "the beginning")
        + f" to {text(shown_time(run['window_end']))}",
    ]
    if run["judge"] is not None:
        facts.append(f"judge: {text(judge_text(run['judge']), _CLIP['reason'])}")
    if run["simulation_id"] is not None:
        facts.append(f"simulation {text(run['simulation_id'], _CLIP['id'])}")
    page.add(" · ".join(facts), "")
    reasons = [f"- {text(r, _CLIP['reason'])}" for r in run["status_reasons"]]
    if not reasons:
        return
    page.section(
        "status",
        [f"**{text(status)} because:**", ""],
        reasons,
        lambda n: f"- … {n} more reasons (the HTML or JSON report has them all)",
        [""],
    )


def _gates(doc: ReportDoc, page: _Page) -> None:
    gates = doc["run"]["gates"]
    if not gates:
        return
    failed = sum(1 for g in gates if not g["passed"])
    rows = [
        _cell(
            "✅ passed" if g["passed"] else "❌ FAILED",
            text(g["scope"]),
            f"{text(g['measure'])} {num(g['measured'])}",
            f"≥ {num(g['target'])}",
        )
        for g in sorted(gates, key=lambda g: g["passed"])  # the failed ones first
    ]
    page.section(
        "gates",
        [
            f"### Gates: {len(gates) - failed} of {len(gates)} passed",
            "",
            _cell("", "gate", "measured", "needs"),
            "|---|---|---|---|",
        ],
        rows,
        lambda n: f"\n… {n} more gates (the HTML or JSON report has them all)",
        [""],
    )


def _warnings(doc: ReportDoc, page: _Page) -> None:
    run = doc["run"]
    if not run["warnings"]:
        return
    effect = {True: " (strict: they fail the run)", False: " (not strict)", None: ""}
    page.section(
        "warnings",
        [f"### Warnings: {len(run['warnings'])}{effect[run['strict']]}", ""],
        [f"- {text(w, _CLIP['reason'])}" for w in run["warnings"]],
        lambda n: f"- … {n} more warnings",
        [""],
    )


def _interval(m: MetricChangeDoc) -> str:
    if m["low"] is None or m["high"] is None:
        return "-"
    return f"[{m['low']:+.3f}, {m['high']:+.3f}]"


def _regressed(doc: ReportDoc, page: _Page, ui_url: str | None) -> None:
    base = doc["baseline"]
    if base is None:
        return  # the notes say why there is none
    metrics = [m for m in base["metrics"] if m["direction"] == "regressed"]
    worse = [c for c in base["conversations"] if c["kind"] == "regressed"]
    title = f"### Regressed since run {text(base['run_id'], _CLIP['id'])}"
    if not metrics and not worse:
        said = (
            "No conversation was scored by both runs: nothing to compare."
            if not base["metrics"]
            else f"Nothing regressed: {len(base['metrics'])} metrics compared over "
            f"{base['paired_conversations']} conversations scored by both runs."
        )
        page.section("regressed", [title, "", said, ""], [], str)
        return
    rows = [
        _cell(
            text(m["scenario_id"] or "(all)"),
            text(m["metric"]),
            str(m["paired"]),
            f"{num(m['pass_rate_a'], '{:.0%}')} → {num(m['pass_rate_b'], '{:.0%}')}",
            f"{num(m['mean_a'])} → {num(m['mean_b'])}",
            num(m["delta"], "{:+.3f}") + (" \\*" if m["significant"] else ""),
            _interval(m),
        )
        for m in metrics
    ]
    head = [
        title,
        "",
        f"{len(metrics)} of {len(base['metrics'])} metrics, over the "
        f"{base['paired_conversations']} conversations both runs scored. The change of the mean "
        "comes with its 95 % bootstrap interval; \\* marks one whose interval excludes 0.",
        "",
    ]
    if rows:
        head += [
            _cell("scenario", "metric", "paired", "pass rate", "mean", "change", "95 % interval"),
            "|---|---|---:|---|---|---:|---|",
        ]
    page.section(
        "regressed",
        head,
        rows,
        lambda n: f"\n… {n} more regressed metrics (`spanscore compare` lists them all)",
        [""],
    )
    if worse:
        listed = [
            f"- {_conversation(c['conversation_id'], ui_url)}: "
            f"{text(c['scenario_id'] or '(all)')}/{text(c['metric'])} "
            f"{num(c['value_a'])} → {num(c['value_b'])}"
            for c in worse[:WENT_WRONG]
        ]
        page.section(
            "went_wrong",
            [f"{len(worse)} scores went from pass to fail:", ""],
            listed,
            lambda n: f"- … {n} more",
            [""],
            left_out=len(worse) - len(listed),
        )


def _conversation(conversation_id: str, ui_url: str | None) -> str:
    shown = text(conversation_id, _CLIP["id"])
    if ui_url is None:
        return shown
    return f"[{shown}]({conversation_url(ui_url, conversation_id)})"


def worst_conversations(doc: ReportDoc, n: int = WORST) -> list[int]:
    """The indexes (into `conversations`) of the `n` worst conversations: those that failed or
    errored, the most failing scores first; at equal counts, one that regressed since the
    baseline, then one that failed before one that only errored, then the report's order."""
    c = doc["conversations"]
    bad = [i for i, r in enumerate(c["result"]) if r in ("failed", "error")]
    bad.sort(
        key=lambda i: (-len(c["failing"][i]), c["change"][i] != "regressed", c["result"][i], i)
    )
    return bad[:n]


def _why(doc: ReportDoc, i: int) -> str:
    """The first failing score's explanation (or error), when the trajectory is embedded."""
    detail = doc["details"][i]
    if detail is None:
        return ""
    for s in detail["scores"]:
        if s["passed"] is False or s["error"] is not None:
            said = s["error"] if s["error"] is not None else s["explanation"]
            if said:
                return f": {text(said, _CLIP['explanation'])}"
    return ""


def _worst(doc: ReportDoc, page: _Page, ui_url: str | None) -> None:
    c = doc["conversations"]
    worst = worst_conversations(doc)
    if not worst:
        page.section("worst", ["### The worst conversations", "", "None failed.", ""], [], str)
        return
    rows = []
    for i in worst:
        cid = c["id"][i]
        failing = [c["keys"][k] for k in c["failing"][i]]
        named = ", ".join(text(k, _CLIP["key"]) for k in failing[:3]) + (
            f" (+{len(failing) - 3} more)" if len(failing) > 3 else ""
        )
        shown = _conversation(cid, ui_url)
        trace = c["trace_id"][i]
        if doc["trace_url"] and trace:
            shown += f" ([trace]({_trace_url(doc['trace_url'], trace, cid)}))"
        if c["change"][i] == "regressed":
            shown += " (regressed)"
        rows.append(
            _cell(
                shown,
                text(c["scenario"][i] or "-"),
                f"{len(failing)}: {named}{_why(doc, i)}",
                text(c["first_message"][i] or "-", _CLIP["message"]),
            )
        )
    failed = sum(1 for r in c["result"] if r in ("failed", "error"))
    page.section(
        "worst",
        [
            f"### The worst conversations: {len(worst)} of {failed} that failed",
            "",
            "The most failing scores first, a regression first among equals.",
            "",
            _cell("conversation", "scenario", "failing scores", "first message"),
            "|---|---|---|---|",
        ],
        rows,
        lambda n: f"\n… {n} more (the HTML report has them all)",
        [""],
    )


def _trials(doc: ReportDoc, page: _Page) -> None:
    trials = doc["trials"]
    if trials is None:
        return
    most = max((s["trials"] for s in trials["scenarios"]), default=0)
    # Every k up to 8; past that, 1 to 7 and the largest.
    ks = [*range(1, min(most, 8) + 1)] if most <= 8 else [*range(1, 8), most]
    header = ["scenario", "trials", "passed", "not counted", *(f"pass^{k}" for k in ks)]

    def row(s: ScenarioTrialsDoc) -> str:
        return _cell(
            text(s["scenario"]),
            str(s["trials"]),
            str(s["passed"]),
            str(len(s["not_counted"])),
            *(num(s["pass_hat_k"].get(str(k)), "{:.2f}") for k in ks),
        )

    mean = _cell(
        "**over the scenarios**",
        "",
        "",
        "",
        *(f"**{num(trials['mean_pass_hat_k'].get(str(k)), '{:.3f}')}**" for k in ks),
    )
    page.section(
        "trials",
        [
            f"### pass^k of simulation {text(trials['simulation_id'], _CLIP['id'])}",
            "",
            "pass^k: the chance that k trials of a scenario all pass. A trial that did not run "
            "to an end is not counted.",
            "",
            _cell(*header),
            "|---|" + "---:|" * (len(header) - 1),
            mean,
        ],
        [row(s) for s in trials["scenarios"]],
        lambda n: f"\n… {n} more scenarios (the HTML or JSON report has them all)",
        [""],
    )


def render_markdown(doc: ReportDoc, *, ui_url: str | None = None) -> str:
    """The summary (see the module docstring); conversations link to `{ui_url}/conversations/
    {id}` when `ui_url` is given."""
    if ui_url is not None:
        ui_url = check_ui_url(ui_url)
    page = _Page(MAX_BYTES)
    _head(doc, page)
    _gates(doc, page)
    _warnings(doc, page)
    _regressed(doc, page, ui_url)
    _worst(doc, page, ui_url)
    _trials(doc, page)
    page.section(
        "notes",
        ["### Notes", ""] if doc["notes"] else [],
        [f"- {text(n, _CLIP['reason'])}" for n in doc["notes"]],
        lambda n: f"- … {n} more notes",
    )
    return "\n".join(page.lines).rstrip("\n") + "\n"
