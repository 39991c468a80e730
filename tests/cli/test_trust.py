"""Nothing passes silently (issue 11): gates and windows that measure nothing, exit codes, the
lake's integrity, scriptable output, first-use errors. Every test goes through the command
line (a subprocess, or click's CliRunner) against a real lake on disk, and asserts exact exit
codes and messages."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.examples.synthetic import build_lake

from ..support.collector import start_collector
from ..support.lake import copy_lake, query

UTC = dt.UTC
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYNTHETIC_START = dt.datetime.fromtimestamp(1_700_000_000, UTC)  # where build_lake starts

SUITE: dict[str, Any] = {
    "name": "trust",
    "metrics": [{"type": "tool_calls", "mode": "contains", "expected": ["get_order"]}],
    "scenarios": [
        {
            "id": "support_orders",
            "select": {"agent": "support"},
            "assertions": [{"type": "response", "name": "shipped", "keywords": ["shipped"]}],
        },
        {
            "id": "weather_before_booking",
            "select": {"agent": "travel"},  # no such agent in the lake: selects nothing
            "assertions": [{"type": "order", "before": "get_weather", "after": "book_trip"}],
        },
    ],
}


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Any:
    """`spanscore ARGS` in a child process (the real entry point, real exit code), on a PATH
    that has it, as in an activated environment (so hints print `spanscore ...`)."""
    import os

    bin_dir = Path(sys.executable).parent
    return subprocess.run(
        [str(bin_dir / "spanscore"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        input=stdin,
        env={**os.environ, **(env or {}), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )


def write_suite(tmp_path: Path, suite: dict[str, Any] | str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(suite if isinstance(suite, str) else json.dumps(suite, indent=1))
    return path


@pytest.fixture(scope="module")
def shared_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 synthetic conversations (one day, long ago); tests that write runs copy it."""
    lake = tmp_path_factory.mktemp("shared") / "lake"
    build_lake(lake, 40)
    return lake


@pytest.fixture
def lake(shared_lake: Path, tmp_path: Path) -> Path:
    return copy_lake(shared_lake, tmp_path / "lake")


def evaluate_args(lake: Path, suite: Path, *extra: str) -> list[str]:
    return ["evaluate", "--lake", str(lake), "--suite", str(suite), "--settle", "0", *extra]


# --- 1. gates resolve against the suite; a gate with nothing to measure fails --------------------


def test_a_gate_naming_an_unknown_scenario_or_metric_is_a_located_suite_error(
    lake: Path, tmp_path: Path
):
    typo = (
        "name: trust\n"
        "scenarios:\n"
        "  - id: weather_before_booking\n"
        "    assertions: [{type: order, before: get_weather, after: book_trip}]\n"
        "gates:\n"
        "  - {scenario: weather_before_bookin, min_pass_rate: 1.0}\n"
        "  - {metric: oder, min_pass_rate: 1.0}\n"
        "  - {scenario: weather_before_booking, metric: tool_calls, min_mean: 0.5}\n"
    )
    done = cli(*evaluate_args(lake, write_suite(tmp_path, typo)))
    assert done.returncode == 2, done.stderr
    suite = tmp_path / "suite.yaml"
    assert done.stderr.splitlines()[1:] == [
        f"{suite}:6: gates[0].scenario: no scenario or policy named 'weather_before_bookin' "
        "in this suite (did you mean 'weather_before_booking'?)",
        f"{suite}:7: gates[1].metric: no metric named 'oder' in this suite (did you mean 'order'?)",
        f"{suite}:8: gates[2].metric: no metric in 'weather_before_booking' named "
        "'tool_calls' in this suite (it has 'order')",
    ]
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(0,)]


def test_a_fail_under_gate_naming_nothing_is_a_usage_error(lake: Path, tmp_path: Path):
    path = write_suite(tmp_path, SUITE)
    done = cli(*evaluate_args(lake, path, "--fail-under", "weather_before_bookin/pass_rate=0.9"))
    assert done.returncode == 2, done.stderr
    assert (
        "Invalid value for --fail-under: 'weather_before_bookin/pass_rate=0.9': no scenario or "
        "policy named 'weather_before_bookin' in this suite (did you mean "
        "'weather_before_booking'?)"
    ) in done.stderr
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(0,)]


def test_a_gate_with_no_scores_in_the_run_fails_unless_it_allows_empty(lake: Path, tmp_path: Path):
    # The scenario is spelled right but selects no conversation: nothing to measure.
    path = write_suite(tmp_path, SUITE)
    done = cli(*evaluate_args(lake, path, "--fail-under", "weather_before_booking/pass_rate=0.9"))
    assert done.returncode == 1, done.stderr
    assert (
        "gate FAILED: weather_before_booking: no conversation pass rate to measure, no score in "
        "this run (an empty gate fails)"
    ) in done.stdout
    assert query(lake, "SELECT status FROM eval_runs") == [("gate_failed",)]
    allowed = {
        **SUITE,
        "gates": [
            {"scenario": "weather_before_booking", "min_pass_rate": 0.9, "allow_empty": True},
            {"scenario": "support_orders", "metric": "shipped", "min_pass_rate": 1.0},
        ],
    }
    again = cli(*evaluate_args(lake, write_suite(tmp_path, allowed), "--since", "2020-01-01"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        "gate passed: weather_before_booking: no conversation pass rate to measure, no score in "
        "this run (allowed by allow_empty)"
    ) in again.stdout
    assert (
        "gate passed: support_orders/shipped: conversation pass rate 1.000 (needs >= 1.0)"
        in again.stdout
    )


def test_a_pass_rate_gate_counts_conversations_and_a_score_pass_rate_gate_scores(
    lake: Path, tmp_path: Path
):
    # Every conversation passes one of its two scores and fails the other.
    always = ["get_order", "search_products", "lookup_customer", "verify_customer",
              "cancel_order", "send_verification_code"]  # fmt: skip
    suite = {
        "name": "gates",
        "scenarios": [
            {
                "id": "support",
                "select": {"agent": "support"},
                "assertions": [
                    {"type": "tool_calls", "name": "known", "mode": "subset", "expected": always},
                    {"type": "response", "name": "never", "keywords": ["zzz-never-said"]},
                ],
            }
        ],
        "gates": [{"scenario": "support", "min_score_pass_rate": 0.5}],
    }
    path = write_suite(tmp_path, suite)
    done = cli(*evaluate_args(lake, path, "--fail-under", "support/pass_rate=0.5"))
    assert done.returncode == 1, done.stdout + done.stderr
    gates = [line for line in done.stdout.splitlines() if line.startswith("gate")]
    assert gates == [
        "gate passed: support: score pass rate 0.500 (needs >= 0.5)",
        "gate FAILED: support: conversation pass rate 0.000 (needs >= 0.5)",
    ]


# --- 2. an empty window says why; a minimum; a changed suite; an inverted window ------------------


def test_an_empty_window_says_which_bound_or_filter_left_each_conversation_out(
    lake: Path, tmp_path: Path
):
    path = write_suite(tmp_path, {"name": "trust", "metrics": SUITE["metrics"]})
    first = cli(*evaluate_args(lake, path))
    assert first.returncode == 0, first.stderr
    assert "40 conversations in the window, 40 sampled" in first.stdout
    assert "window start: the beginning: the first run of this suite" in first.stdout
    run_id = query(lake, "SELECT run_id FROM eval_runs")[0][0]
    # The next run of the same suite starts where the first ended: nothing new arrived.
    again = cli(*evaluate_args(lake, path))
    assert again.returncode == 0, again.stderr
    assert (
        "no conversation in the window: the lake holds 40 conversations: 40 ended before the "
        f"window start (the end of run {run_id}, the previous one of this suite version)"
    ) in again.stdout
    # The settle (the default 10 minutes here is 5000 days) and the filters.
    settled = cli("evaluate", "--lake", str(lake), "--suite", str(path), "--since", "2020-01-01",
                  "--settle", "5000d")  # fmt: skip
    assert settled.returncode == 2, settled.stdout  # the window would end before 2020
    young = cli("evaluate", "--lake", str(lake), "--suite", str(path), "--settle", "5000d",
                "--since", "2000-01-01")  # fmt: skip
    assert young.returncode == 0, young.stderr
    assert (
        "no conversation in the window: the lake holds 40 conversations: 40 ended at or after "
        "the window end (now minus --settle 5000d)"
    ) in young.stdout
    filtered = cli(*evaluate_args(lake, path, "--since", "2020-01-01", "--agent", "nobody"))
    assert filtered.returncode == 0, filtered.stderr
    assert (
        "no conversation in the window: the lake holds 40 conversations: 40 did not match "
        "--service / --agent / --scenario"
    ) in filtered.stdout


def test_an_empty_lake_points_at_the_collector(lake_dir: Path, tmp_path: Path):
    from spanscore.lake import connect

    connect(lake_dir, create=True).close()
    path = write_suite(tmp_path, {"name": "trust", "metrics": SUITE["metrics"]})
    done = cli(*evaluate_args(lake_dir, path))
    assert done.returncode == 0, done.stderr
    assert (
        "no conversation in the window: the lake holds no conversation yet (are spans "
        "arriving? `spanscore status` shows what the collector received)"
    ) in done.stdout


def test_a_window_that_starts_after_it_ends_is_an_error(lake: Path, tmp_path: Path):
    path = write_suite(tmp_path, SUITE)
    done = cli(*evaluate_args(lake, path, "--since", "2024-01-02", "--until", "2024-01-01"))
    assert done.returncode == 2, done.stdout
    assert done.stderr == (
        "Error: the window starts at 2024-01-02 00:00:00 UTC (--since) after it ends at "
        "2024-01-01 00:00:00 UTC (--until): nothing can be in it. Give a --since before "
        "--until (--since 2h --until 1h: from 2 h to 1 h ago)\n"
    )
    assert query(lake, "SELECT count(*) FROM eval_runs") == [(0,)]
    # Durations are times ago; the hint is about the two bounds given, not about --settle.
    ago = CliRunner().invoke(main, evaluate_args(lake, path, "--since", "1h", "--until", "2h"))
    assert ago.exit_code == 2, ago.output
    assert ago.output.endswith(
        "Give a --since before --until (--since 2h --until 1h: from 2 h to 1 h ago)\n"
    )
    settled = CliRunner().invoke(main, evaluate_args(lake, path, "--since", "1m", "--settle", "1h"))
    assert settled.exit_code == 2, settled.output
    assert settled.output.endswith("Give an earlier --since, or a shorter --settle\n")


def test_a_minimum_number_of_conversations_from_the_option_or_the_suite(lake: Path, tmp_path: Path):
    path = write_suite(tmp_path, {"name": "trust", "metrics": SUITE["metrics"]})
    empty = cli(*evaluate_args(lake, path, "--agent", "nobody", "--min-conversations", "1"))
    assert empty.returncode == 1, empty.stderr
    assert (
        "run FAILED: 0 conversations in the run, fewer than the 1 required (min_conversations)"
    ) in empty.stdout
    assert query(lake, "SELECT status FROM eval_runs") == [("gate_failed",)]
    wanting = write_suite(tmp_path, {"name": "trust", "metrics": SUITE["metrics"],
                                     "min_conversations": 41}, "wanting.yaml")  # fmt: skip
    short = cli(*evaluate_args(lake, wanting, "--since", "2020-01-01"))
    assert short.returncode == 1, short.stderr
    assert "run FAILED: 40 conversations in the run, fewer than the 41 required" in short.stdout
    enough = cli(
        *evaluate_args(lake, wanting, "--min-conversations", "40", "--since", "2020-01-01")
    )
    assert enough.returncode == 0, enough.stdout


def test_a_changed_suite_version_scores_the_previous_versions_last_window_again(
    lake: Path, tmp_path: Path
):
    path = write_suite(tmp_path, {"name": "trust", "metrics": SUITE["metrics"]})
    first = cli(*evaluate_args(lake, path, "--since", "2023-11-01"))
    assert first.returncode == 0, first.stderr
    assert "40 conversations in the window" in first.stdout
    run_id = query(lake, "SELECT run_id FROM eval_runs")[0][0]
    edited = {"name": "trust", "metrics": [*SUITE["metrics"], {"type": "efficiency"}]}
    write_suite(tmp_path, edited)
    second = cli(*evaluate_args(lake, path))
    assert second.returncode == 0, second.stderr
    assert (
        "window start: this suite version never ran: the start of the previous version's "
        f"last run {run_id}"
    ) in second.stdout
    assert "40 conversations in the window, 40 sampled, 0 already scored, 40 scored" in (
        second.stdout
    )
    # The unchanged version goes on from its own last run.
    third = cli(*evaluate_args(lake, path))
    assert "40 ended before the window start" in third.stdout


# --- 3. what measured nothing is a warning; strict makes it fail ----------------------------------


FAILING_METRIC = """\
from spanscore.evaluation import metric

@metric
def fussy(trajectory):
    raise ValueError("no data for " + trajectory.agent_name)
"""


def test_warnings_in_the_summary_and_junit_and_strict_fails_them(lake: Path, tmp_path: Path):
    from xml.etree import ElementTree

    (tmp_path / "fussy.py").write_text(FAILING_METRIC)
    suite = {**SUITE, "custom_metrics": ["fussy.py"],
             "metrics": [*SUITE["metrics"], {"type": "metric", "metric": "fussy"}]}  # fmt: skip
    path = write_suite(tmp_path, suite)
    junit = tmp_path / "junit.xml"
    done = cli(*evaluate_args(lake, path, "--junit", str(junit)))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning")]
    assert warnings == [
        "warning: scenario 'weather_before_booking' selected none of the 40 conversations",
        "warning: fussy gave an error on every conversation (40): ValueError: no data for support",
    ]
    run = ElementTree.parse(junit).getroot().find("testsuite[@name='(run)']")
    assert run is not None
    assert [c.get("name") for c in run.findall("testcase/skipped/..")] == [
        "warning: scenario 'weather_before_booking' selected none of the 40 conversations",
        "warning: fussy gave an error on every conversation (40): ValueError: no data for support",
    ]
    strict = cli(*evaluate_args(lake, path, "--strict", "--rescore", "--since", "2020-01-01",
                                "--junit", str(junit)))  # fmt: skip
    assert strict.returncode == 1, strict.stderr
    assert "warning (strict: fails the run): scenario 'weather_before_booking'" in strict.stdout
    assert "run FAILED: strict mode: 2 warnings fail the run" in strict.stdout
    run = ElementTree.parse(junit).getroot().find("testsuite[@name='(run)']")
    assert run is not None
    assert run.get("failures") == "3"  # two warnings and the run
    # The suite's own setting does the same.
    strict_suite = write_suite(tmp_path, {**suite, "strict": True}, "strict.yaml")
    by_suite = cli(*evaluate_args(lake, strict_suite, "--since", "2020-01-01"))
    assert by_suite.returncode == 1, by_suite.stderr
    assert "run FAILED: strict mode: 2 warnings fail the run" in by_suite.stdout


def test_a_judge_that_fails_on_every_conversation_fails_the_run_and_names_its_endpoint(
    lake: Path, tmp_path: Path
):
    from ..support.ports import free_port

    endpoint = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    suite = {
        "name": "judge-down",
        "judge": {"base_url": endpoint, "max_attempts": 2},
        "metrics": [{"type": "judged", "name": "tone", "criteria": "Is the agent polite?"}],
    }
    done = cli(*evaluate_args(lake, write_suite(tmp_path, suite), "--max-conversations", "3"))
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("run FAILED")]
    assert len(failed) == 1, done.stdout
    assert failed[0].startswith(
        f"run FAILED: tone gave an error on 3 of 3 conversations (the judge at {endpoint}); "
        "last error: APIConnectionError"
    )
    judge = next(line for line in done.stdout.splitlines() if line.startswith("judge:"))
    assert judge.startswith("judge: 0 calls answered of 6 attempts"), judge
    assert "warning" not in done.stdout  # a failure, not a warning as well


def test_what_a_native_file_could_not_carry_over_is_a_warning(lake: Path, tmp_path: Path):
    scenario = {
        "scenario_id": "support",
        "user_id": "u",
        "goal": "a goal",
        "agent_context": "ctx",
        "user_profile": "p",
        "assertions": [
            {"type": "tool_calls", "expected": [{"name": "get_order"}], "match_mode": "contains"},
            {"type": "tool_calls", "expected": [{"name": "nothing"}], "match_mode": "strict"},
        ],
    }
    path = tmp_path / "scenarios.json"
    path.write_text(json.dumps({"schema_version": "v1", "scenarios": [scenario]}))
    done = cli(*evaluate_args(lake, path, "--strict"))
    assert done.returncode == 1, done.stderr
    assert (
        f"warning (strict: fails the run): not imported from {path}: support: ArkSim uses only "
        "a scenario's first tool_calls assertion; the one at scenarios[0].assertions[1] is "
        "ignored there and not imported."
    ) in done.stdout


def test_evaluate_takes_a_directory_of_native_datasets_as_import_does(lake: Path, tmp_path: Path):
    folder = tmp_path / "datasets"
    folder.mkdir()
    dataset = json.loads((EXAMPLES / "hr" / "timeoff_schedule.json").read_text())
    for name in ("timeoff_schedule", "timeoff_again"):
        (folder / f"{name}.json").write_text(json.dumps(dataset))
    done = cli(*evaluate_args(lake, folder, "--since", "2020-01-01", "--format", "json"))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    imported = CliRunner().invoke(main, ["import", "watsonx", str(folder)])
    assert imported.exit_code == 0, imported.output
    scenarios = [s["id"] for s in yaml.safe_load(imported.output)["scenarios"]]
    assert scenarios == ["timeoff_again", "timeoff_schedule"]
    for sid in scenarios:  # both read from the folder, and neither selected a conversation
        assert any(sid in w for w in summary["warnings"]), summary["warnings"]


# --- 4. one exit-code contract ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["sql", "SELECT 1"],
        ["show", "conv-1"],
        ["evaluate", "--suite", "{suite}", "--settle", "0"],
        ["compare", "latest", "previous"],
        ["report", "-o", "{out}/report.html"],
        ["report", "--format", "json", "-o", "{out}/report.json"],
        ["report", "--format", "markdown"],
    ],
    ids=["sql", "show", "evaluate", "compare", "report", "report-json", "report-markdown"],
)
def test_a_lake_that_cannot_be_opened_exits_3_and_creates_nothing(tmp_path: Path, args: list[str]):
    suite = write_suite(tmp_path, SUITE)
    wrong = tmp_path / "wrong"
    filled = [a.replace("{suite}", str(suite)).replace("{out}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, [filled[0], "--lake", str(wrong), *filled[1:]])
    assert result.exit_code == 3, result.output
    assert result.output == (
        f"Error: no lake at {wrong} (start `spanscore serve --lake {wrong}` to create one)\n"
    )
    assert not wrong.exists()


def test_a_lake_name_with_a_typo_points_at_the_lake_beside_it(lake: Path):
    typo = lake.parent / "lak"
    result = CliRunner().invoke(main, ["sql", "--lake", str(typo), "SELECT 1"])
    assert result.exit_code == 3, result.output
    assert result.output == f"Error: no lake at {typo}: did you mean {lake}?\n"
    assert not typo.exists()


def test_exit_codes_of_evaluate_through_the_real_entry_point(lake: Path, tmp_path: Path):
    path = write_suite(tmp_path, SUITE)
    wrong = cli("evaluate", "--lake", str(tmp_path / "wrong"), "--suite", str(path))
    assert wrong.returncode == 3, wrong.stderr
    usage = cli("evaluate", "--lake", str(lake), "--suite", str(path), "--sample", "2")
    assert usage.returncode == 2
    sql_error = cli("sql", "--lake", str(lake), "SELEC 1")
    assert sql_error.returncode == 2
    assert sql_error.stderr.startswith("Error: Parser Error: syntax error")
    helped = cli("--help")
    assert (
        "Exit codes: 0 ok; 1 a gate or a comparison failed; 2 a usage, suite or input error;"
        in " ".join(helped.stdout.split())
    )
    evaluate_help = " ".join(cli("evaluate", "--help").stdout.split())
    assert "3 the lake cannot be opened" in evaluate_help


# --- 5. sql is read-only unless --write; views come back; SQL from a file or stdin ----------------


@pytest.mark.parametrize(
    ("statement", "kind"),
    [("DELETE FROM scores", "DELETE"), ("DROP VIEW tool_calls", "DROP")],
    ids=["delete", "drop-view"],
)
def test_sql_is_read_only_unless_write(lake: Path, statement: str, kind: str):
    result = CliRunner().invoke(main, ["sql", "--lake", str(lake), statement])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f'Error: Invalid Input Error: Cannot execute statement of type "{kind}" on database '
        '"lake" which is attached in read-only mode!\n'
        "The lake is opened read-only: add --write to change it.\n"
    )
    assert query(lake, "SELECT count(*) FROM tool_calls") == [(200,)]


def test_a_dropped_or_replaced_view_is_recreated_when_the_lake_opens(lake: Path):
    dropped = CliRunner().invoke(main, ["sql", "--lake", str(lake), "--write",
                                        "DROP VIEW tool_calls"])  # fmt: skip
    assert dropped.exit_code == 0, dropped.output
    replaced = CliRunner().invoke(main, ["sql", "--lake", str(lake), "--write",
        "CREATE OR REPLACE VIEW conversations AS SELECT 1 AS conversation_id"])  # fmt: skip
    assert replaced.exit_code == 0, replaced.output
    # A read-only open sees the views as defined (this connection's own copies)...
    counted = CliRunner().invoke(main, ["sql", "--lake", str(lake), "--format", "csv",
        "SELECT (SELECT count(*) FROM tool_calls) AS calls, "
        "(SELECT count(*) FROM conversations) AS conversations"])  # fmt: skip
    assert counted.output == "calls,conversations\n200,40\n"
    # ...and the next read-write open repairs the lake itself.
    from spanscore.lake import connect

    connect(lake).close()
    raw = connect(lake, read_only=True)
    try:
        marks = raw.execute(
            "SELECT view_name, comment LIKE 'spanscore:%' FROM duckdb_views() "
            "WHERE database_name = 'lake' AND NOT temporary ORDER BY 1"
        ).fetchall()
        assert marks == [
            ("conversations", True),
            ("scenario_pass_k", True),
            ("simulation_trials", True),
            ("tool_calls", True),
            ("turns", True),
        ]
    finally:
        raw.close()
    assert query(lake, "SELECT count(*) FROM conversations") == [(40,)]


def test_sql_from_a_file_or_stdin(lake: Path, tmp_path: Path):
    (tmp_path / "q.sql").write_text(
        "-- tools\nSELECT count(DISTINCT tool_name) AS tools\nFROM tool_calls\n"
    )
    from_file = CliRunner().invoke(main, ["sql", "--lake", str(lake), "--format", "csv",
                                          "-f", str(tmp_path / "q.sql")])  # fmt: skip
    assert from_file.output == "tools\n5\n", from_file.output
    from_stdin = cli("sql", "--lake", str(lake), "--format", "csv", "-",
                     stdin="SELECT count(*) AS n FROM conversations")  # fmt: skip
    assert (from_stdin.returncode, from_stdin.stdout) == (0, "n\n40\n")
    both = CliRunner().invoke(main, ["sql", "--lake", str(lake), "-f", str(tmp_path / "q.sql"),
                                     "SELECT 1"])  # fmt: skip
    assert both.exit_code == 2
    assert "give the SQL as QUERY or with --file, not both" in both.output
    neither = CliRunner().invoke(main, ["sql", "--lake", str(lake)])
    assert neither.exit_code == 2
    assert "no SQL: give QUERY, --file FILE, or - to read stdin" in neither.output


# --- 6. scriptable output -------------------------------------------------------------------------


def test_sql_csv_has_lf_line_ends_and_json_columns_are_json(lake: Path):
    sql = ("SELECT tool_name, arguments FROM tool_calls "
           "ORDER BY conversation_id, step_index LIMIT 2")  # fmt: skip
    csv_out = cli("sql", "--lake", str(lake), "--format", "csv", sql)
    assert csv_out.returncode == 0, csv_out.stderr
    assert "\r" not in csv_out.stdout
    assert csv_out.stdout.count("\n") == 3
    json_out = cli("sql", "--lake", str(lake), "--format", "json", sql)
    rows = json.loads(json_out.stdout)
    assert isinstance(rows[0]["arguments"], dict)
    assert set(rows[0]["arguments"]) == {"order_id", "email", "reason", "n"}
    text = cli("sql", "--lake", str(lake), "--format", "json",
               "SELECT '{\"a\": 1}' AS text_not_json, '{\"a\": 1}'::JSON AS json")  # fmt: skip
    assert json.loads(text.stdout) == [{"text_not_json": '{"a": 1}', "json": {"a": 1}}]


def calls_suite(expected: list[str]) -> dict[str, Any]:
    return {
        "name": "compared",
        "metrics": [{"type": "tool_calls", "name": "calls", "mode": "contains",
                     "expected": expected}],
    }  # fmt: skip


def test_evaluate_json_runs_listing_run_names_and_compare(lake: Path, tmp_path: Path):
    lenient = write_suite(tmp_path, calls_suite([]), "lenient.yaml")
    strict = write_suite(tmp_path, calls_suite(["no_such_tool"]), "strict.yaml")
    two = ["--max-conversations", "2", "--since", "2020-01-01"]
    first = cli(*evaluate_args(lake, lenient, *two, "--format", "json",
                               "--fail-under", "calls.pass_rate=1"))  # fmt: skip
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["status"] == "succeeded"
    assert doc["counts"] == {"candidates": 40, "sampled": 2, "skipped": 0, "scored": 2,
                             "scores": 2, "errors": 0}  # fmt: skip
    assert [(r["metric"], r["pass_rate"]) for r in doc["summary"]] == [("calls", 1.0)]
    assert doc["gates"][0]["passed"] is True
    assert doc["gates"][0]["description"] == "calls: conversation pass rate 1.000 (needs >= 1.0)"
    second = cli(*evaluate_args(lake, strict, *two, "--format", "json"))
    assert second.returncode == 0, second.stderr
    a, b = doc["run_id"], json.loads(second.stdout)["run_id"]

    # Two conversations that both dropped from 1 to 0 are a regression, never "significant".
    compared = cli("compare", "--lake", str(lake), "previous", "latest", "--format", "json",
                   "--fail-on-regression")  # fmt: skip
    assert compared.returncode == 1, compared.stderr
    report = json.loads(compared.stdout)
    assert (report["run_a"], report["run_b"], report["regressed"]) == (a, b, True)
    (metric,) = report["metrics"]
    assert (metric["paired"], metric["delta"], metric["low"], metric["significant"]) == (
        2, -1.0, None, False)  # fmt: skip
    assert report["notes"] == [
        "1 metric has fewer than 10 paired conversations: no interval, never significant"
    ]
    assert [c["kind"] for c in report["conversations"]] == ["regressed", "regressed"]
    text = cli("compare", "--lake", str(lake), a[:6], b[:7])
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"1 of 1 metrics changed from {a} to {b}\nnote: 1 metric has")
    assert "-1.000 " in text.stdout
    assert "-1.000 *" not in text.stdout

    # A run with no scores says why.
    third = cli(*evaluate_args(lake, strict))
    assert third.returncode == 0, third.stderr
    c = query(lake, "SELECT run_id FROM eval_runs ORDER BY started_at DESC LIMIT 1")[0][0]
    empty = cli("compare", "--lake", str(lake), b, "latest")
    assert empty.returncode == 0, empty.stderr
    assert f"note: run {c} has no scores: no conversation was in its window (the lake " in (
        empty.stdout
    )
    unknown = cli("compare", "--lake", str(lake), "zzz", "latest")
    assert unknown.returncode == 2
    # The hint names the lake, so that it runs from any folder.
    hint = f"(`spanscore runs --lake {lake.resolve()}` lists them"
    assert f"Error: no evaluation run 'zzz' in this lake {hint}" in unknown.stderr

    listed = cli("runs", "--lake", str(lake), "--format", "json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [r["run_id"] for r in runs] == [c, b, a]
    assert [r["conversations"] for r in runs] == [0, 2, 2]
    assert runs[0]["empty_because"].startswith("the lake holds 40 conversations: 40 ended")
    assert runs[2]["empty_because"] is None
    table = cli("runs", "--lake", str(lake), "--suite", "compared", "--limit", "1")
    assert table.stdout.splitlines()[0].split()[:4] == [
        "run_id", "suite_name", "suite_hash", "status"]  # fmt: skip
    assert table.stdout.splitlines()[2].startswith(c)


# --- 7. first-use mistakes: one line that says what to do, nothing created -----------------------


def serve_args(lake: Path, grpc: int = 0, http: int = 0) -> list[str]:
    return ["serve", "--lake", str(lake), "--grpc-port", str(grpc), "--http-port", str(http),
            "--workers", "0"]  # fmt: skip


def test_a_busy_port_is_one_line_and_creates_no_lake(tmp_path: Path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = cli(*serve_args(tmp_path / "lake", grpc=port), env={"SPANSCORE_LAKE": ""})
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"Error: cannot listen for OTLP/gRPC on 127.0.0.1:{port}: the port is in use (another "
        "collector? `spanscore status --endpoint http://127.0.0.1:4318` tells). Stop it, or "
        "choose another port with --grpc-port (0: any free port)\n"
    )
    assert not (tmp_path / "lake").exists()


def test_status_pointed_at_the_grpc_port_says_so_in_one_line(tmp_path: Path):
    """The hint used to name the gRPC port, where `status` died with a 40-line traceback. The
    collector's gRPC port answers HTTP/1 itself and names its HTTP port."""
    with start_collector(tmp_path / "lake") as collector:
        done = cli("status", "--endpoint", f"http://127.0.0.1:{collector.grpc_port}")
        assert collector.stats.get("refused_http_on_grpc_port") == 1
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"Error: http://127.0.0.1:{collector.grpc_port} is the collector's OTLP/gRPC port. "
        f"`status` asks its OTLP/HTTP port, {collector.http_port}: `spanscore status "
        f"--endpoint http://127.0.0.1:{collector.http_port}`\n"
    )


def test_status_pointed_at_another_grpc_server_says_so_in_one_line():
    """Any other gRPC server (an upstream OpenTelemetry Collector's, an older collector's)
    opens with HTTP/2 SETTINGS, which `status` recognises."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        done = cli("status", "--endpoint", f"http://127.0.0.1:{port}")
    finally:
        server.stop(None).wait(30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        f"Error: http://127.0.0.1:{port} answers HTTP/2 (gRPC): it is the "
        "collector's OTLP/gRPC port. `status` asks the OTLP/HTTP port"
    ), done.stderr
    assert "`spanscore status --endpoint http://127.0.0.1:4318`" in done.stderr


def test_lake_mistakes_are_one_line_and_create_nothing(tmp_path: Path):
    from spanscore.lake import connect

    lake = tmp_path / "lake"
    connect(lake, create=True).close()
    before = sorted(p.name for p in lake.iterdir())
    catalog = lake / "catalog.sqlite"
    for args in (serve_args(catalog), ["sql", "--lake", str(catalog), "SELECT 1"]):
        done = cli(*args)
        assert done.returncode == 3, done.stderr
        assert done.stderr == (
            f"Error: --lake {catalog} is a file, not a lake directory: use --lake {lake}\n"
        )
    assert sorted(p.name for p in lake.iterdir()) == before
    env = {"SPANSCORE_LAKE": ""}
    for args in (["serve"], ["sql", "SELECT 1"], ["evaluate", "--suite", "s.yaml"]):
        missing = cli(*args, env=env)
        assert missing.returncode == 2, missing.stderr
        assert missing.stderr.endswith(
            "Error: Missing option '--lake': the lake's directory or PostgreSQL connection "
            "string (or set SPANSCORE_LAKE)\n"
        )
        assert "Traceback" not in missing.stderr


def test_a_second_collector_on_one_embedded_lake_and_endpoint_mistakes(tmp_path: Path):
    import socket
    import urllib.error
    import urllib.request

    from ..support.collector import ServeProcess
    from ..support.polling import wait_for

    lake = tmp_path / "lake"
    log = tmp_path / "collector.log"
    first = ServeProcess(lake, log, "--workers", "0").start()
    try:
        second = cli(*serve_args(lake))
        assert second.returncode == 3, second.stderr
        assert second.stderr == (
            f"Error: another collector (pid {first.proc.pid}) is serving the lake {lake}: one "
            "collector per embedded lake. Send to that one, or stop it first (several "
            "collectors can share a lake with a PostgreSQL catalog)\n"
        )
        base = f"http://127.0.0.1:{first.http_port}"
        doubled = urllib.request.Request(
            base + "/v1/traces/v1/traces",
            data=b"",
            headers={"Content-Type": "application/x-protobuf"},
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(doubled, timeout=30)
        assert answer.value.code == 404
        fix = (
            "POST /v1/traces/v1/traces: no OTLP endpoint here, the exporter's URL has the "
            f"path twice: set OTEL_EXPORTER_OTLP_ENDPOINT to the base URL (http://HOST:"
            f"{first.http_port}, the exporter adds /v1/traces), or "
            f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT to the full URL (http://HOST:"
            f"{first.http_port}/v1/traces)"
        )
        wait_for(lambda: fix in log.read_text(), timeout=60)
        # A gRPC exporter pointed at the HTTP port opens with the HTTP/2 preface.
        with socket.create_connection(("127.0.0.1", first.http_port), timeout=30) as grpc_like:
            grpc_like.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            grpc_like.recv(1024)
        wrong_port = (
            f"an OTLP/gRPC exporter is sending to the OTLP/HTTP port {first.http_port}: point "
            f"it at the gRPC port {first.grpc_port}, or switch it to OTLP/HTTP "
            "(OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
        )
        wait_for(lambda: wrong_port in log.read_text(), timeout=60)
    finally:
        assert first.terminate() == 0
    # Once the first is gone, the lake is free again.
    again = ServeProcess(lake, tmp_path / "again.log", "--workers", "0").start()
    assert again.terminate() == 0


def test_status_waits_for_a_starting_collector_then_says_it_waited(tmp_path: Path):
    from ..support.ports import free_port

    port = free_port()
    done = cli("status", "--endpoint", f"http://127.0.0.1:{port}", "--wait", "0.5")
    assert done.returncode == 2, done.stderr
    assert f"no collector at http://127.0.0.1:{port} (waited 0.5s)" in done.stderr
