"""Benchmark: the run report, for 1,000 and 10,000 conversations.

Builds a synthetic lake (examples/synthetic.py: 10 spans per conversation, five tool calls with
~450-byte results), evaluates it twice (a 1,000-conversation sample, then everything), and for
each run prints:

- generation: building the report document from the lake and rendering the page, next to the
  same run's baseline: rebuilding the same conversations' trajectories alone;
- the file's size, and how much of it is the compressed trajectories;
- in headless Chromium (Debian's, driven by Playwright): the time until the page is ready
  (parsed, table drawn) next to an empty page's, the time one filter takes (typing a search,
  choosing a result, until the table is laid out) next to a bare loop over the same strings,
  and opening one conversation (decompressing its chunk and drawing its timeline).

The issue's targets (open in < 3 s, filter in < 200 ms at 10,000 conversations) are printed
next to the figures; nothing is asserted.

    .venv/bin/python bench/report.py
    .venv/bin/python bench/report.py --sizes 1000 --keep /tmp/reports
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spanscore.evaluation import load_suite, load_trajectories
from spanscore.evaluation.report import build_report, render_html
from spanscore.evaluation.runs.options import RunOptions
from spanscore.evaluation.runs.run import evaluate
from spanscore.examples.synthetic import build_lake
from spanscore.lake import connect

# The browser's flags are the tests' (tests/support): a script run as `python bench/report.py`
# has bench/ on sys.path, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.browser import CHROMIUM_ARGS

SUITE: dict[str, Any] = {
    "name": "bench-report",
    "metrics": [
        {"type": "tool_calls", "mode": "contains", "expected": ["get_order", "search_products"]},
        {
            "type": "tool_calls",
            "name": "strict_calls",
            "mode": "strict",
            "expected": [
                ["get_order", "lookup_customer"],
                ["search_products", "verify_customer"],
                "cancel_order",
            ],
        },
        {"type": "response", "keywords": ["shipped"]},
        {"type": "efficiency"},
        {"type": "forbidden", "calls": [{"name": "cancel_order"}]},
    ],
}
EMPTY_PAGE = (
    "<!DOCTYPE html><html><body><p>empty</p><script>"
    "document.documentElement.dataset.readyMs = performance.now().toFixed(1);"
    "document.documentElement.dataset.ready = '1';</script></body></html>"
)
# One filter: set the control, let the page's handler run, force the layout it causes.
FILTER_JS = """([selector, value]) => {
    const control = document.querySelector(selector);
    const t0 = performance.now();
    control.value = value;
    control.dispatchEvent(new Event(control.tagName === 'INPUT' ? 'input' : 'change'));
    document.body.offsetHeight;
    return performance.now() - t0;
}"""
# The floor of a search: a bare loop over the same number of lowered strings.
LOOP_JS = """(n) => {
    const hay = Array.from({length: n}, (_, i) => ('conv-' + i + ' where is my order ord-' + i));
    const t0 = performance.now();
    let hits = 0;
    for (let i = 0; i < n; i++) if (hay[i].indexOf('ord-42') >= 0) hits++;
    return performance.now() - t0;
}"""


def _median(values: list[float]) -> float:
    return statistics.median(values)


def generate(lake: Path, run_id: str, out: Path) -> dict[str, Any]:
    con = connect(lake, read_only=True)
    try:
        started = time.perf_counter()
        doc = build_report(con, run_id)
        built = time.perf_counter() - started
        started = time.perf_counter()
        page = render_html(doc)
        rendered = time.perf_counter() - started
        ids = doc["conversations"]["id"]
        started = time.perf_counter()
        rebuilt = sum(1 for _ in load_trajectories(con, conversation_ids=ids))
        floor = time.perf_counter() - started
    finally:
        con.close()
    data = page.encode()
    out.write_bytes(data)
    chunks = sum(
        len(part.split("</script>", 1)[0])
        for part in page.split('<script type="application/octet-stream"')[1:]
    )
    return {
        "conversations": len(ids),
        "rebuilt": rebuilt,
        "build_s": built,
        "render_s": rendered,
        "floor_s": floor,
        "bytes": len(data),
        "chunk_bytes": chunks,
    }


def browse(browser: Any, path: Path, conversations: int, repeats: int) -> dict[str, float]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(120_000)
        loads = []
        for _ in range(repeats):
            page.goto(path.as_uri())
            page.wait_for_selector("html[data-ready]")
            loads.append(float(page.eval_on_selector("html", "e => e.dataset.readyMs")))
        empty = path.with_name("empty.html")
        empty.write_text(EMPTY_PAGE)
        empties = []
        for _ in range(repeats):
            page.goto(empty.as_uri())
            page.wait_for_selector("html[data-ready]")
            empties.append(float(page.eval_on_selector("html", "e => e.dataset.readyMs")))
        page.goto(path.as_uri())
        page.wait_for_selector("html[data-ready]")
        searches, results = [], []
        for k in range(repeats):
            searches.append(page.evaluate(FILTER_JS, ["#filters input[name=q]", f"ord-{k}7"]))
            searches.append(page.evaluate(FILTER_JS, ["#filters input[name=q]", ""]))
            results.append(page.evaluate(FILTER_JS, ["#filters select[name=result]", "failed"]))
            results.append(page.evaluate(FILTER_JS, ["#filters select[name=result]", ""]))
        loop = [page.evaluate(LOOP_JS, conversations) for _ in range(repeats)]
        opens = []
        for k in range(repeats):
            target = page.eval_on_selector_all(
                "table.convs tbody tr", "(rows, k) => rows[k].dataset.id", k
            )
            started = time.perf_counter()
            page.click(f'table.convs tbody tr[data-id="{target}"] td:nth-child(2)')
            page.wait_for_selector(f'#conversation[data-loaded="{target}"]')
            opens.append((time.perf_counter() - started) * 1000)
            page.keyboard.press("Escape")
        return {
            "load_ms": _median(loads),
            "empty_ms": _median(empties),
            "search_ms": _median(searches),
            "select_ms": _median(results),
            "loop_ms": _median(loop),
            "open_ms": _median(opens),
        }
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the reports in this directory")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    work = Path(tempfile.mkdtemp(prefix="spanscore-bench-report-"))
    out_dir = args.keep or work
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        lake = work / "lake"
        build_lake(lake, sizes[-1])
        suite = load_suite(SUITE)
        since = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        runs = {}
        for size in sizes:
            started = time.perf_counter()
            result = evaluate(
                lake,
                suite,
                RunOptions(settle_s=0, since=since, max_conversations=size, rescore=True),
            )
            runs[size] = result.run_id
            print(
                f"evaluated {result.scored} conversations in "
                f"{time.perf_counter() - started:.1f} s (run {result.run_id})"
            )
        figures = {}
        for size in sizes:
            path = out_dir / f"report-{size}.html"
            figures[size] = generate(lake, runs[size], path)
        from playwright.sync_api import sync_playwright

        executable = shutil.which("chromium")
        if executable is None:
            print("no chromium: the browser figures are left out (apt-get install chromium)")
        else:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
                try:
                    for size in sizes:
                        path = out_dir / f"report-{size}.html"
                        figures[size].update(browse(browser, path, size, args.repeats))
                finally:
                    browser.close()
        print()
        print(
            f"{'conversations':>13} {'build s':>8} {'render s':>9} {'rebuild-only s':>15} "
            f"{'file MB':>8} {'of it traj. MB':>15}"
        )
        for size in sizes:
            f = figures[size]
            print(
                f"{f['conversations']:>13} {f['build_s']:>8.2f} {f['render_s']:>9.2f} "
                f"{f['floor_s']:>15.2f} {f['bytes'] / 1e6:>8.1f} {f['chunk_bytes'] / 1e6:>15.1f}"
            )
        if executable is not None:
            print()
            print(
                f"{'conversations':>13} {'ready ms':>9} {'empty page':>11} {'search ms':>10} "
                f"{'select ms':>10} {'bare loop':>10} {'open one ms':>12}"
            )
            for size in sizes:
                f = figures[size]
                print(
                    f"{f['conversations']:>13} {f['load_ms']:>9.0f} {f['empty_ms']:>11.0f} "
                    f"{f['search_ms']:>10.1f} {f['select_ms']:>10.1f} {f['loop_ms']:>10.2f} "
                    f"{f['open_ms']:>12.0f}"
                )
            print(
                "\ntargets (issue): ready < 3000 ms and a filter < 200 ms at 10,000 "
                "conversations; medians of",
                args.repeats,
                "runs",
            )
        if args.keep:
            print(f"reports kept in {out_dir}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
