"""The README and the docs pages cannot drift from the code, and keep their promises (two
commands, same CI, a README read to the end, links that lead somewhere)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spanscore.cli import main
from spanscore.cli.reference import render

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_reference_page_is_up_to_date() -> None:
    page = (ROOT / "docs" / "reference.md").read_text()
    assert render(page) == page, (
        "docs/reference.md is stale: run `.venv/bin/python -m spanscore.cli.reference`"
    )
    assert "<!-- reference:" not in README  # the README links to the page instead


def test_the_two_setup_commands_and_ci_agree() -> None:
    assert "$ ./run demo" in README
    assert "$ ./run test" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./run test" in ci
    assert "./run lint" in ci
    lint = (ROOT / "run").read_text()
    for tool in ("ruff check", "ruff format --check", "mypy", "lint-imports"):
        assert tool in lint


@pytest.mark.parametrize("name", sorted(main.every_command()))
def test_every_command_has_help_with_an_example(name: str) -> None:
    command = main.every_command()[name]
    assert command.help, f"spanscore {name} has no help text"
    assert f"$ spanscore {name}" in command.help, f"spanscore {name} has no example"
    assert f"#### `spanscore {name}`" in (ROOT / "docs" / "reference.md").read_text()


def _blocks(language: str, section: str | None = None, page: str = "README.md") -> list[str]:
    text = (ROOT / page).read_text()
    if section is not None:
        text = text.split(section + "\n", 1)[1].split("\n#", 1)[0]
    parts = text.split(f"```{language}\n")[1:]
    return [p.split("```", 1)[0] for p in parts]


def test_the_suite_example_loads() -> None:
    from spanscore.evaluation import load_suite

    (example,) = _blocks("yaml", "## A suite", "docs/suites.md")
    import yaml

    suite = load_suite(yaml.safe_load(example), base_dir=ROOT / "examples" / "customer_service")
    assert suite.suite.scenarios[0].id == "auth_cancel_order"


@pytest.mark.slow
def test_the_queries_over_the_scores_run_on_an_evaluated_lake(tmp_path: Path) -> None:
    from spanscore.evaluation import load_suite
    from spanscore.evaluation.runs.options import RunOptions
    from spanscore.evaluation.runs.run import evaluate
    from spanscore.examples.demo import SUITE, run_demo
    from spanscore.lake import connect

    lake = tmp_path / "demo"
    run_demo(lake, echo=lambda line: None)
    evaluate(lake, load_suite(SUITE), RunOptions(settle_s=0, rescore=True))
    queries = _blocks("sql", "## Queries over the scores", "docs/suites.md")
    assert len(queries) == 3
    con = connect(lake)
    try:
        per_night = con.execute(queries[0]).fetchall()
        assert {row[1] for row in per_night} >= {"(all)", "auth_cancel_order"}
        assert con.execute(queries[1]).fetchall() == []  # same agent, same scores: none regressed
        worst = con.execute(queries[2]).fetchall()
        assert worst[0][0] == "get_order"  # the one tool that failed (ORD-9999 not found)
    finally:
        con.close()


def _nightly_commands() -> dict[str, str]:
    """The shell command each scheduler runs, as the shell it starts sees it."""
    unit = (ROOT / "deploy" / "systemd" / "spanscore-evaluate.service").read_text()
    cron = (ROOT / "deploy" / "cron" / "spanscore-evaluate").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    # systemd: `/bin/sh -c '...'`, with %% and $$ for % and $.
    systemd = exec_start.split("-c ", 1)[1].strip("'").replace("%%", "%").replace("$$", "$")
    (entry,) = [
        line
        for line in cron.splitlines()
        if line and not line.startswith("#") and "=" not in line.split()[0]
    ]
    # cron: six fields before the command, and \% for %.
    return {"systemd": systemd, "cron": entry.split(None, 6)[6].replace("\\%", "%")}


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["systemd", "cron"])
def test_the_nightly_job_keeps_a_dated_junit_file_and_report_each_night(
    scheduler: str, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from spanscore.examples.synthetic import build_lake

    command = _nightly_commands()[scheduler]
    assert "/opt/spanscore/.venv/bin/spanscore evaluate --sample 0.1" in command
    reports, log = tmp_path / "reports", tmp_path / "evaluate.log"
    reports.mkdir()
    command = (
        command.replace(
            "/opt/spanscore/.venv/bin/spanscore", str(Path(sys.executable).parent / "spanscore")
        )
        .replace("/var/lib/spanscore/reports", str(reports))
        .replace("/var/log/spanscore/evaluate.log", str(log))
    )
    build_lake(tmp_path / "lake", 20)
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: nightly\nmetrics: [{type: efficiency}]\n")
    env = {**os.environ, "SPANSCORE_LAKE": str(tmp_path / "lake"), "SPANSCORE_SUITE": str(suite)}
    done = subprocess.run(
        ["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (
        done.stdout + done.stderr + (log.read_text() if log.exists() else "")
    )
    written = sorted(p.name for p in reports.iterdir())
    assert len(written) == 2, written
    assert re.fullmatch(r"\d{4}-\d\d-\d\d\.html", written[0]), written
    assert written[1] == written[0].replace(".html", ".xml")


def test_the_readme_is_short_enough_to_read_to_the_end() -> None:
    # The rest is in docs/, one page per part of the product, which the README links to.
    assert len(README.splitlines()) <= 300


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (`## A b: `c`` is `#a-b-c`)."""
    anchors: set[str] = set()
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and anchor not in _anchors(file)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_match_modes_tables_are_the_table_of_modes() -> None:
    from spanscore.evaluation.assertions.modes import MODES, docstring_table, markdown_table
    from spanscore.evaluation.assertions.tool_calls import ToolCallsAssertion

    assert docstring_table() in (ToolCallsAssertion.__doc__ or "")
    page = (ROOT / "docs" / "assertions.md").read_text()
    assert markdown_table() in page, (
        "docs/assertions.md's mode table differs from the table of modes; it should read:\n"
        + markdown_table()
    )
    # the suite example's comment lists every mode
    (listed,) = re.findall(r"mode: strict +# (.*)", (ROOT / "docs" / "suites.md").read_text())
    assert listed.split() == list(MODES)
