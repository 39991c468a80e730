"""The command line: sql formats and errors, and the demo end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from spanscore.cli import main
from spanscore.lake import connect


@pytest.fixture
def small_lake(lake_dir: Path) -> Path:
    con = connect(lake_dir, create=True)
    con.execute(
        "INSERT INTO scores (run_id, conversation_id, metric, value, passed, details) VALUES "
        "('r1', 'c1', 'strict', 1.0, true, '{\"a\": [1, 2]}'), "
        "('r1', 'c2', 'strict', 0.5, false, NULL)"
    )
    con.close()
    return lake_dir


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("json", '[\n  {"conversation_id": "c1", "value": 1.0, "passed": true},\n'),
        ("csv", "conversation_id,value,passed\nc1,1.0,True\nc2,0.5,False\n"),
        ("table", "conversation_id  value  passed\n---------------  -----  ------\nc1  "),
    ],
    ids=["json", "csv", "table"],
)
def test_sql_formats(small_lake: Path, fmt: str, expected: str) -> None:
    result = CliRunner().invoke(
        main,
        ["sql", "--lake", str(small_lake), "--format", fmt,
         "SELECT conversation_id, value, passed FROM scores ORDER BY conversation_id"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.startswith(expected)


def test_sql_json_is_one_array_of_objects(small_lake: Path) -> None:
    result = CliRunner().invoke(
        main, ["sql", "--lake", str(small_lake), "--format", "json", "SELECT * FROM scores"]
    )
    rows = json.loads(result.output)
    assert [r["conversation_id"] for r in rows] == ["c1", "c2"]
    empty = CliRunner().invoke(
        main,
        ["sql", "--lake", str(small_lake), "--format", "json", "SELECT * FROM scores WHERE false"],
    )
    assert json.loads(empty.output) == []


def test_sql_reads_the_lake_from_the_environment(small_lake: Path) -> None:
    result = CliRunner().invoke(
        main, ["sql", "SELECT count(*) AS n FROM scores"], env={"SPANSCORE_LAKE": str(small_lake)}
    )
    assert result.exit_code == 0
    assert "2" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["SELEC 1"], "syntax error"),
        (["SELECT * FROM nowhere"], "Table with name nowhere does not exist"),
    ],
    ids=["syntax", "unknown-table"],
)
def test_sql_errors_exit_2_with_the_message(
    small_lake: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["sql", "--lake", str(small_lake), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_sql_without_a_lake(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sql", "--lake", str(tmp_path / "none"), "SELECT 1"], env={})
    assert result.exit_code == 3
    assert "no lake at" in result.output
    assert not (tmp_path / "none").exists()
    missing = CliRunner().invoke(main, ["sql", "SELECT 1"], env={"SPANSCORE_LAKE": ""})
    assert missing.exit_code == 2


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    lake = tmp_path / "demo"
    result = CliRunner().invoke(main, ["demo", "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    assert "spans exported over OTLP/HTTP and committed" in result.output
    # The evaluation catches exactly the conversations that break policy.
    assert "gate FAILED: verify_before_cancel: conversation pass rate 0.889" in result.output
    # Before deployment: simulated users, two trials per scenario; the pushy user of each
    # scenario that has one (the odd trials) leads the agent to break the same policies, which
    # the same suite catches: pass^1 6/7, pass^2 5/7.
    assert "14 conversations (goal_reached 14)" in result.output
    # The simulated users' fidelity is judged on simulated conversations only.
    production, simulation = result.output.split("4. Before deployment")
    assert "simulator.fidelity" not in production
    assert "simulator.fidelity" in simulation
    assert "over 7 scenarios: pass^1 0.857, pass^2 0.714" in result.output
    failed = result.output.split("Failed scores of the run")[1]
    assert "/auth_cancel_order/t1" in failed
    assert "/product_search_with_budget/t1" in failed
    assert "/auth_cancel_order/t2" not in failed
    assert "/order_status_check/" not in failed
    con = connect(lake)
    simulated = "(SELECT conversation_id FROM simulated_conversations)"
    assert con.execute(
        f"SELECT count(*) FILTER (WHERE conversation_id NOT IN {simulated}), "
        f"count(*) FILTER (WHERE conversation_id IN {simulated}) FROM conversations"
    ).fetchone() == (9, 14)
    # A second run starts from a fresh lake.
    again = CliRunner().invoke(main, ["demo", "--lake", str(lake)])
    assert again.exit_code == 0
    assert connect(lake).execute("SELECT count(*) FROM conversations").fetchone() == (23,)


def test_demo_refuses_to_clobber_another_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = CliRunner().invoke(main, ["demo", "--lake", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a spanscore lake" in result.output
    assert (tmp_path / "precious.txt").exists()


def test_the_command_list_shows_each_summary_whole():
    from click.testing import CliRunner

    from spanscore.cli import main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    words = " ".join(result.output.split())
    for name, command in main.every_command().items():
        summary = " ".join((command.help or "").split("\n\n")[0].split()).split(". ")[0]
        assert f"{name} {summary.rstrip('.')}" in words, name


def test_a_mistyped_command_is_told_the_one_it_meant():
    result = CliRunner().invoke(main, ["shwo", "--lake", "x", "conv-1"])
    assert result.exit_code == 2
    assert "No such command 'shwo'" in result.output
    assert "Did you mean 'show'?" in result.output
