"""The report as one self-contained HTML file: styles, script, plots and data inside it.

- Header, gates, baseline changes and plots are rendered here, as static HTML and inline SVG;
  every string from the lake goes through `html.escape`.
- The conversations are one columnar JSON document in a `<script type="application/json">`
  block (`<`, `>`, `&` and the JavaScript line separators written as `\\u003c`-style
  escapes, so no value can close the block); the page's script filters, sorts and pages them
  and never puts data into `innerHTML`.
- Trajectories are gzip-compressed JSON in chunks of `chunk_size` conversations (base64), each
  decompressed by the browser only when one of its conversations is opened: a 10,000
  conversation report opens without parsing any of them.
- A Content-Security-Policy allows only the page's own script (by hash) and no connection, so
  nothing in the file can load or send anything.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
from importlib import resources
from typing import Any
from urllib.parse import quote

import orjson

from spanscore.evaluation.report import svg
from spanscore.evaluation.report.schema import JudgeDoc, ReportDoc, RunDoc, ToolFailureDoc
from spanscore.evaluation.report.trials import about_the_simulator

_OPTIONS = orjson.OPT_NON_STR_KEYS
_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def script_json(value: Any) -> str:
    """JSON text that is safe inside a `<script>` element (it cannot end the element)."""
    text = orjson.dumps(value, default=str, option=_OPTIONS).decode()
    for raw, escaped in _ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def shown_time(iso: str | None) -> str:
    return "-" if not iso else iso.replace("T", " ").replace("Z", " UTC")[:23].rstrip(".")


def num(value: float | None, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def _link(conversation_id: str, text: object = None) -> str:
    """A link that opens the conversation (its id, or `text`, shown)."""
    shown = conversation_id if text is None else text
    return f'<a class="conv" href="#c={_e(quote(conversation_id, safe=""))}">{_e(shown)}</a>'


def judge_text(judge: JudgeDoc) -> str:
    """`12 calls (40 from the cache), 5,200 prompt tokens (1,000 cached) + 300 completion,
    $0.0123`: the figures the judge records, whichever of them the run has."""
    figures = {k.removeprefix("judge."): v for k, v in judge["figures"].items()}

    def count(key: str) -> int | None:
        value = figures.get(key)
        return (
            int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        )

    parts = []
    if judge["calls"] is not None:
        extras = [
            f"{n:,} {label}"
            for key, label in (
                ("cache_hits", "from the cache"),
                ("skipped", "skipped"),
                ("failed", "failed"),
            )
            if (n := count(key))
        ]
        parts.append(f"{judge['calls']:,} calls" + (f" ({', '.join(extras)})" if extras else ""))
    prompt, cached, completion = (
        count(k) for k in ("prompt_tokens", "cached_tokens", "completion_tokens")
    )
    if prompt is not None:
        tokens = f"{prompt:,} prompt tokens" + (f" ({cached:,} cached)" if cached else "")
        parts.append(tokens + (f" + {completion:,} completion" if completion is not None else ""))
    if judge["cost_usd"] is not None:
        parts.append(f"${judge['cost_usd']:.4f}")
    return ", ".join(parts) or "used"


def _header(doc: ReportDoc) -> str:
    run = doc["run"]
    window = f"{shown_time(run['window_start']) if run['window_start'] else 'the beginning'} to "
    window += shown_time(run["window_end"])
    counts = (
        f"{run['conversations']} scored"
        + (f" of {run['sampled']} sampled" if run["sampled"] is not None else "")
        + (f" ({run['skipped']} already scored)" if run["skipped"] else "")
        + (f", {run['candidates']} in the window" if run["candidates"] is not None else "")
    )
    sample = ", ".join(
        f"{k} {v}" for k, v in sorted(run["sample"].items()) if v not in (None, [], False)
    )
    facts = [
        ("run", run["run_id"]),
        ("suite", f"{run['suite_name']} (version {(run['suite_version'] or '?')[:12]})"),
        ("window", window),
        ("started", shown_time(run["started_at"])),
        ("duration", num(run["duration_s"], "{:.1f} s")),
        ("conversations", counts),
        ("scores", f"{run['scores']} ({run['errors']} could not be given)"),
        ("sample", sample or "every conversation"),
    ]
    judge = run["judge"]
    titles: dict[str, str] = {}
    if judge is not None:
        facts.append(("judge", judge_text(judge)))
        titles["judge"] = "; ".join(f"{k} {v}" for k, v in judge["figures"].items())
    facts.append(("spanscore", f"{run['spanscore_version'] or '?'} on {run['host'] or '?'}"))
    rows = "".join(
        f"<dt>{_e(k)}</dt><dd"
        + (f' title="{_e(titles[k])}"' if titles.get(k) else "")
        + f">{_e(v)}</dd>"
        for k, v in facts
    )
    gates = "".join(
        f'<li class="{"pass" if g["passed"] else "fail"}">'
        f"<b>{'passed' if g['passed'] else 'FAILED'}</b> {_e(g['scope'])}: "
        f"{_e(g['measure'])} {num(g['measured'])} "
        f"(needs &ge; {num(g['target'])})</li>"
        for g in run["gates"]
    )
    notes = "".join(f"<li>{_e(n)}</li>" for n in doc["notes"])
    status = run["status"] or "unknown"
    return (
        f'<header><h1>{_e(run["suite_name"])} <span class="status {_e(status)}">'
        f"{_e(status)}</span></h1>"
        '<p class="sub">spanscore evaluation report, generated '
        f"{_e(shown_time(doc['generated_at']))}</p>{_reasons(run)}"
        f'<dl class="facts">{rows}</dl>'
        + (f'<h3>Gates</h3><ul class="gates">{gates}</ul>' if gates else "")
        + _warnings(run)
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</header>"
    )


def _reasons(run: RunDoc) -> str:
    """Why the run has its status, next to the badge (a run can fail with every gate passed)."""
    reasons = run["status_reasons"]
    if not reasons:
        return ""
    items = "".join(f"<li>{_e(r)}</li>" for r in reasons)
    return f'<div class="why"><b>{_e(run["status"])} because:</b><ul>{items}</ul></div>'


def _warnings(run: RunDoc) -> str:
    """The run's warnings, each saying whether it failed the run."""
    if not run["warnings"]:
        return ""
    verdict = {
        True: '<span class="tag fails">fails the run (strict)</span> ',
        False: '<span class="tag">does not fail the run (not strict)</span> ',
        None: "",
    }[run["strict"]]
    items = "".join(f"<li>{verdict}{_e(w)}</li>" for w in run["warnings"])
    return f'<h3>Warnings ({len(run["warnings"])})</h3><ul class="warnings">{items}</ul>'


def _baseline(doc: ReportDoc) -> str:
    base = doc["baseline"]
    if base is None:
        return ""
    head = (
        f'<section id="baseline"><h2>Changes since run {_e(base["run_id"])}</h2>'
        f'<p class="sub">baseline started {_e(shown_time(base["started_at"]))}; '
        f"{base['paired_conversations']} conversations scored by both runs. Changes of the mean "
        "come with a 95 % bootstrap interval over those conversations; * marks one whose "
        "interval excludes 0.</p>"
    )
    moved = [m for m in base["metrics"] if m["direction"] != "unchanged"]
    if not base["metrics"]:
        return head + "<p>No conversation was scored by both runs.</p></section>"
    rows = "".join(
        f'<tr class="{m["direction"]}"><td>{_e(m["direction"])}</td>'
        f"<td>{_e(m['scenario_id'] or '(all)')}</td><td>{_e(m['metric'])}</td>"
        f"<td>{m['paired']}</td><td>{num(m['pass_rate_a'], '{:.0%}')} &rarr; "
        f"{num(m['pass_rate_b'], '{:.0%}')}</td><td>{num(m['mean_a'])} &rarr; "
        f"{num(m['mean_b'])}</td><td>{num(m['delta'], '{:+.3f}')}"
        f"{' *' if m['significant'] else ''}</td><td>"
        + ("-" if m["low"] is None or m["high"] is None else f"[{m['low']:+.3f}, {m['high']:+.3f}]")
        + "</td></tr>"
        for m in moved
    )
    table = (
        '<table class="changes"><thead><tr><th></th><th>scenario</th><th>metric</th>'
        "<th>paired</th><th>pass rate</th><th>mean</th><th>change</th><th>95% interval</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
        if moved
        else f"<p>All {len(base['metrics'])} metrics unchanged.</p>"
    )
    lists = ""
    for kind in ("regressed", "fixed"):
        items = [c for c in base["conversations"] if c["kind"] == kind]
        if not items:
            continue
        shown = "".join(
            f"<li>{_link(c['conversation_id'])} {_e(c['scenario_id'] or '(all)')}/"
            f"{_e(c['metric'])}: {num(c['value_a'])} &rarr; {num(c['value_b'])}</li>"
            for c in items[:200]
        )
        more = f"<li>and {len(items) - 200} more</li>" if len(items) > 200 else ""
        lists += f'<div class="{kind}"><h3>{len(items)} {kind}</h3><ul>{shown}{more}</ul></div>'
    return head + table + (f'<div class="lists">{lists}</div>' if lists else "") + "</section>"


def trials_html(doc: ReportDoc) -> str:
    """A simulation's trials: a row per scenario, a cell per trial (passed or not, and why it
    ended), its pass^k; then the scores about the simulated users, apart from the agent's."""
    trials = doc["trials"]
    if trials is None:
        return ""
    most = max((s["trials"] for s in trials["scenarios"]), default=0)
    ks = [str(k) for k in range(1, most + 1)]
    # A column per trial number, counted or not (a trial left out of pass^k keeps its place).
    every = [c["trial"] for s in trials["scenarios"] for c in [*s["cells"], *s["not_counted"]]]
    numbers = [str(n) for n in range(1, max(every, default=0) + 1)]
    head = (
        "<tr><th>scenario</th>"
        + "".join(f"<th>trial {n}</th>" for n in numbers)
        + "".join(f"<th>pass^{k}</th>" for k in ks)
        + "</tr>"
    )
    rows = []
    for scenario in trials["scenarios"]:
        cells = {str(c["trial"]): c for c in scenario["cells"]}
        left_out = {str(c["trial"]): c for c in scenario["not_counted"]}
        shown = []
        for n in numbers:
            cell = cells.get(n)
            if cell is None:
                out = left_out.get(n)
                if out is None:
                    shown.append("<td></td>")
                    continue
                text = f"\u2013 {out['stop_reason']} (not counted)"
                shown.append(f'<td class="notrun">{_link(out["conversation_id"], text)}</td>')
                continue
            mark = "passed" if cell["passed"] else "failed"
            text = ("\u2713 " if cell["passed"] else "\u2717 ") + cell["stop_reason"]
            shown.append(f'<td class="{mark}">{_link(cell["conversation_id"], text)}</td>')
        shown += [f"<td>{num(scenario['pass_hat_k'].get(k), '{:.2f}')}</td>" for k in ks]
        rows.append(f"<tr><td>{_e(scenario['scenario'])}</td>{''.join(shown)}</tr>")
    means = ", ".join(f"pass^{k} {num(v)}" for k, v in trials["mean_pass_hat_k"].items())
    simulator = [r for r in doc["summary"] if about_the_simulator(r["metric"])]
    users = ""
    if simulator:
        listed = "".join(
            f"<tr><td>{_e(r['scenario_id'] or '(all)')}</td><td>{_e(r['metric'])}</td>"
            f"<td>{r['passed']} of {r['judged']}</td></tr>"
            for r in simulator
        )
        users = (
            '<h3>The simulated users</h3><p class="sub">Judged apart: these scores say whether '
            "the simulated user stayed within its instructions, and count in no trial.</p>"
            f"<table><tr><th>scenario</th><th>metric</th><th>faithful</th></tr>{listed}</table>"
        )
    return (
        f'<section id="trials"><h2>Trials of simulation {_e(trials["simulation_id"])}</h2>'
        f'<p class="sub">Over the scenarios: {_e(means)}.</p>'
        f'<table class="trials">{head}{"".join(rows)}</table>{users}</section>'
    )


def _plots(doc: ReportDoc) -> str:
    agent = [r for r in doc["summary"] if not about_the_simulator(r["metric"])]
    parts = [
        trials_html(doc),
        '<section id="scores"><h2>Scores per scenario and metric</h2>',
        svg.pass_rates(agent),
        "<h3>Score distributions</h3>",
        svg.distributions(doc["distributions"]),
        "</section>",
    ]
    if doc["trend"]:
        parts += [
            '<section id="trend"><h2>Trend over the suite\'s runs</h2>',
            '<p class="sub">The share of each run\'s judged scores that passed: this run and '
            "the suite's completed runs before it.</p>",
            svg.trend(doc["trend"]),
            _series(doc),
            "</section>",
        ]
    if doc["tools"]:
        parts += [
            '<section id="tools"><h2>Tools</h2>',
            svg.tools(doc["tools"]),
            "</section>",
        ]
    parts.append(_tool_failures(doc))
    return "".join(parts)


def _series(doc: ReportDoc) -> str:
    """Small multiples: each scenario, then each scenario's metric, failing ones first."""
    points = doc["trend"]
    if len(points) < 2:
        return (
            '<p class="note">The first run of this suite: the trends per scenario and metric '
            "start with the next one.</p>"
        )
    now = next((i for i, p in enumerate(points) if p["current"]), len(points) - 1)

    def grid(items: list[Any]) -> str:
        items.sort(key=lambda s: not (s["pass_rate"][now] is not None and s["pass_rate"][now] < 1))
        return (
            '<div class="series-grid">' + "".join(svg.series(s, points) for s in items) + "</div>"
        )

    scenarios = [s for s in doc["trend_series"] if s["metric"] is None]
    metrics = [s for s in doc["trend_series"] if s["metric"] is not None]
    return (
        '<h3>Per scenario</h3><p class="sub">The share of the scenario\'s conversations whose '
        "scores in it all passed. Failing ones first.</p>"
        + grid(scenarios)
        + '<h3>Per scenario and metric</h3><p class="sub">Pass rate (solid, 0 to 100 % on the '
        "left) and mean (dashed, on the metric's own scale, on the right). Failing ones first."
        "</p>" + grid(metrics)
    )


_TOOL_COLUMNS = 20  # tools shown side by side in the failed-assertion table


def _tool_failures(doc: ReportDoc) -> str:
    """Failed assertions (rows) by the tools they are about (columns): how many conversations."""
    found = doc["tool_failures"]
    head = '<section id="tool-failures"><h2>Tools in failed assertions</h2>'
    unmarked = (
        f" {found['unmarked']} of the {found['failed_scores']} failed scores mark no tool call "
        "(response checks, judged rubrics, goals)."
        if found["unmarked"]
        else ""
    )
    if not found["cells"]:
        said = "No assertion failed." if not found["failed_scores"] else unmarked.strip()
        return head + f'<p class="sub">{_e(said)}</p></section>'
    per_tool: dict[str, int] = {}
    per_key: dict[str, int] = {}
    cells: dict[tuple[str, str], ToolFailureDoc] = {}
    for c in found["cells"]:
        key = f"{c['scenario_id']}/{c['metric']}" if c["scenario_id"] else c["metric"]
        per_tool[c["tool"]] = per_tool.get(c["tool"], 0) + c["conversations"]
        per_key[key] = per_key.get(key, 0) + c["conversations"]
        cells[key, c["tool"]] = c
    tools = sorted(per_tool, key=lambda t: (-per_tool[t], t))
    shown, hidden = tools[:_TOOL_COLUMNS], tools[_TOOL_COLUMNS:]
    most = max(c["conversations"] for c in found["cells"])
    header = "".join(f'<th class="tool" title="{_e(t)}"><span>{_e(t)}</span></th>' for t in shown)
    rows = []
    for key in sorted(per_key, key=lambda k: (-per_key[k], k)):
        tds = []
        for tool in shown:
            cell = cells.get((key, tool))
            if cell is None:
                tds.append('<td class="n"></td>')
                continue
            marks = ", ".join(f"{n} {kind}" for kind, n in cell["marks"].items())
            tip = (
                f"{key} failed on {tool} in {cell['conversations']} conversations ({marks}): "
                + ", ".join(cell["conversation_ids"])
            )
            alpha = 0.15 + 0.6 * cell["conversations"] / most
            first = _link(cell["conversation_ids"][0], cell["conversations"])
            tds.append(
                f'<td class="n" style="background: rgba(198, 40, 40, {alpha:.2f})" '
                f'title="{_e(tip)}">{first}</td>'
            )
        rows.append(f'<tr><td class="key">{_e(key)}</td>{"".join(tds)}</tr>')
    more = (
        f'<p class="note">and {len(hidden)} more tools: {_e(", ".join(hidden))} '
        "(every cell is in the JSON report, `tool_failures`).</p>"
        if hidden
        else ""
    )
    return (
        head
        + '<p class="sub">How many conversations a failed assertion (row) marked a call of the '
        "tool (column) in: not expected, not allowed, breaking a rule, or missing. A number "
        "opens the first of them; the tooltip lists more."
        + _e(unmarked)
        + "</p>"
        + '<table class="toolfail"><thead><tr><th>failed assertion</th>'
        + header
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + more
        + "</section>"
    )


def _chunks(doc: ReportDoc, chunk_size: int) -> tuple[list[int | None], list[str]]:
    slots: list[int | None] = []
    embedded: list[Any] = []
    for detail in doc["details"]:
        if detail is None:
            slots.append(None)
        else:
            slots.append(len(embedded))
            embedded.append(detail)
    blocks: list[str] = []
    for start in range(0, len(embedded), chunk_size):
        raw = orjson.dumps(embedded[start : start + chunk_size], default=str, option=_OPTIONS)
        packed = base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")
        blocks.append(
            f'<script type="application/octet-stream" id="tj-{len(blocks)}">{packed}</script>'
        )
    return slots, blocks


def render_html(doc: ReportDoc, *, chunk_size: int = 100) -> str:
    """The report page (see the module docstring)."""
    slots, blocks = _chunks(doc, chunk_size)
    data = {**doc, "details": None}
    payload = script_json({"doc": data, "slots": slots, "chunk_size": chunk_size})
    # One script: the trajectory renderer (shared with the review app), then the report's.
    script = _asset("trajectory.js") + "\n" + _asset("report.js")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"{doc['run']['suite_name']}: run {doc['run']['run_id']}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(policy)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_asset('report.css')}</style></head><body>"
        f"{_header(doc)}<main>{_baseline(doc)}{_plots(doc)}"
        '<section id="conversations"><h2>Conversations</h2>'
        '<div id="filters"></div><div id="table"></div><div id="pager"></div></section>'
        '<section id="conversation" hidden></section></main>'
        f'<script type="application/json" id="report-data">{payload}</script>'
        + "".join(blocks)
        + f"<script>{script}</script></body></html>\n"
    )
