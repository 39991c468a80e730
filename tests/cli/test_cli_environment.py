"""Every option of every command reads a SPANSCORE_* variable, named by the rule of the
`spanscore.cli` docstring, and the variables take effect."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from spanscore.cli import main
from spanscore.collector import Collector
from spanscore.examples.synthetic import build_lake

from ..support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

# Options without a variable, and why.
WITHOUT_VARIABLE = {
    "--help": "prints the help and exits: a variable would print help instead of running",
    "--version": "prints the version and exits: a variable would stop every command",
}
# Names a command still reads after its option got the rule's name.
OLDER_NAMES = {"SPANSCORE_FORMAT": "sql --format"}


def _commands() -> Iterator[tuple[str, click.Command, click.Context]]:
    """Every command under `spanscore`, groups and their subcommands included, with a context
    under its parent's (so that it has the group's help options)."""

    def walk(
        command: click.Command, path: str, parent: click.Context | None
    ) -> Iterator[tuple[str, click.Command, click.Context]]:
        name = path.rsplit(" ", 1)[-1]
        ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
        yield path, command, ctx
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                found = command.get_command(ctx, name)
                assert found is not None, name
                yield from walk(found, f"{path} {name}", ctx)

    yield from walk(main, "spanscore", None)


COMMANDS = {path: (command, ctx) for path, command, ctx in _commands()}


def _options(path: str) -> list[click.Option]:
    command, ctx = COMMANDS[path]
    return [p for p in command.get_params(ctx) if isinstance(p, click.Option)]


def _long(option: click.Option) -> str:
    return max(option.opts, key=len)


def _names(envvar: str | Sequence[str] | None) -> list[str]:
    if envvar is None:
        return []
    return [envvar] if isinstance(envvar, str) else list(envvar)


def test_the_walk_reaches_every_command_and_subcommand() -> None:
    assert {"spanscore serve", "spanscore evaluate", "spanscore schema suite"} <= set(COMMANDS)
    # the group, its commands, `schema suite`
    assert len(COMMANDS) == 1 + len(main.every_command()) + 1
    assert sum(len(_options(path)) for path in COMMANDS) > 100


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_option_reads_a_spanscore_variable(path: str) -> None:
    for option in _options(path):
        if _long(option) in WITHOUT_VARIABLE:
            assert not option.envvar
            continue
        names = _names(option.envvar)
        assert names, f"{path} {option.opts[-1]} reads no environment variable"
        assert all(n.startswith("SPANSCORE_") for n in names), (path, option.opts, names)
        assert option.show_envvar, f"{path} {option.opts[-1]}: --help does not name {names[0]}"


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_variables_are_named_by_the_rule(path: str) -> None:
    command_part = path.split(" ", 1)[-1].upper().replace("-", "_").replace(" ", "_")
    for option in _options(path):
        first, *older = _names(option.envvar) or ["(none)"]
        if _long(option) in WITHOUT_VARIABLE:
            continue
        long_name = _long(option).lstrip("-").upper().replace("-", "_")
        assert first in (f"SPANSCORE_{long_name}", f"SPANSCORE_{command_part}_{long_name}"), (
            f"{path} {option.opts[-1]}: {first} is not SPANSCORE_[COMMAND_]{long_name}"
        )
        for name in older:
            assert name in OLDER_NAMES, f"{path} {option.opts[-1]}: unexpected {name}"


# Variables read by several commands: one setting each, so one name is right.
SHARED = {
    "SPANSCORE_LAKE": "the lake every command but demo works on",
    "SPANSCORE_TOKEN": "the collector's bearer token: serve requires it, status sends it",
    "SPANSCORE_SUITE": "the suite file evaluate and judge-check load",
    "SPANSCORE_ALLOW_OUTSIDE_METRICS": "how that suite's metric files may be loaded",
    "SPANSCORE_JUDGE_MODEL": "the judge's settings, the same wherever a judge is asked",
    "SPANSCORE_JUDGE_BASE_URL": "",
    "SPANSCORE_JUDGE_CONCURRENCY": "",
    "SPANSCORE_JUDGE_TIMEOUT": "",
    "SPANSCORE_MAX_JUDGE_CALLS": "",
    "SPANSCORE_MAX_JUDGE_COST": "",
    "SPANSCORE_NO_JUDGE_CACHE": "",
}


def test_a_variable_read_by_several_commands_means_one_thing() -> None:
    """Only the SHARED variables are read by several commands, each by options declared once
    (same help, same type; serve's come from the collector's settings, so only the type).
    Options that share a name but not a meaning (--format, --workers, --limit ...) each have
    their command's variable."""
    readers: dict[str, list[tuple[str, click.Option]]] = {}
    for path in COMMANDS:
        for option in _options(path):
            for name in _names(option.envvar):
                readers.setdefault(name, []).append((path, option))
    shared = {name: found for name, found in readers.items() if len(found) > 1}
    assert set(shared) == set(SHARED)
    for name, found in shared.items():
        shapes = {
            (type(o.type).__name__, tuple(getattr(o.type, "choices", ())), o.multiple, o.is_flag)
            for _, o in found
        }
        assert len(shapes) == 1, f"{name} is read as different things: {found}"
        helps = {o.help for path, o in found if path != "spanscore serve"}
        assert len(helps) == 1, f"{name} is declared more than once: {helps}"
    for path in COMMANDS:  # and within one command, one option per variable
        names = [n for o in _options(path) for n in _names(o.envvar)]
        assert len(names) == len(set(names)), path


@pytest.mark.parametrize("bundle", ["--suite", "--judge-model", "--max-judge-cost"])
def test_the_judge_and_suite_options_are_declared_once(bundle: str) -> None:
    """evaluate and judge-check take the same suite and judge options, with the same help."""

    def record(path: str) -> dict[str, tuple[str, str] | None]:
        _, ctx = COMMANDS[path]
        return {
            o.opts[-1]: o.get_help_record(ctx)
            for o in _options(path)
            if o.opts[-1].startswith(("--suite", "--allow-outside", "--judge", "--max-judge"))
            or o.opts[-1] == "--no-judge-cache"
        }

    evaluate, judge_check = record("spanscore evaluate"), record("spanscore judge-check")
    assert bundle in evaluate
    assert evaluate.pop("--judge-batch") is not None  # the Batch API serves a run only
    assert evaluate == judge_check


def _invoke(args: list[str], env: dict[str, str]) -> Result:
    return CliRunner().invoke(main, args, env=env)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A lake of 20 synthetic conversations, evaluated twice, all options from variables."""
    base = tmp_path_factory.mktemp("environment")
    build_lake(base / "lake", 20)
    suite = base / "suite.json"
    metrics = [{"type": "tool_calls", "mode": "contains", "expected": ["get_order"]}]
    suite.write_text(json.dumps({"name": "env-suite", "metrics": metrics}))
    env = {
        "SPANSCORE_LAKE": str(base / "lake"),
        "SPANSCORE_SUITE": str(suite),
        "SPANSCORE_SINCE": "2023-01-01T00:00:00Z",
        "SPANSCORE_SETTLE": "0",
        "SPANSCORE_EVALUATE_WORKERS": "1",
        "SPANSCORE_SAMPLE": "0.5",
        "SPANSCORE_EVALUATE_FORMAT": "json",
    }
    first = _invoke(["evaluate"], env)
    assert first.exit_code == 0, first.output
    again = _invoke(["evaluate"], {**env, "SPANSCORE_RESCORE": "true", "SPANSCORE_SAMPLE": ""})
    assert again.exit_code == 0, again.output
    return {
        **env,
        "first": first.output,
        "again": again.output,
        "base": str(base),
        "lake": str(base / "lake"),
    }


def test_evaluate_takes_its_window_sample_and_format_from_the_environment(
    evaluated: dict[str, str],
) -> None:
    first = json.loads(evaluated["first"])
    assert first["window"]["start"] == "2023-01-01T00:00:00+00:00"  # SPANSCORE_SINCE
    assert first["counts"]["candidates"] == 20
    assert 0 < first["counts"]["sampled"] < 20  # SPANSCORE_SAMPLE=0.5
    again = json.loads(evaluated["again"])
    # SPANSCORE_RESCORE as a boolean; an empty SPANSCORE_SAMPLE counts as unset.
    assert again["counts"] == {**again["counts"], "sampled": 20, "scored": 20, "skipped": 0}


def test_evaluate_prefers_the_command_line_to_a_variable_for_the_window_start(
    evaluated: dict[str, str],
) -> None:
    env = {k: evaluated[k] for k in evaluated if k.startswith("SPANSCORE_")}
    both = _invoke(["evaluate"], {**env, "SPANSCORE_LAST": "1h"})
    assert both.exit_code == 2
    assert "give --last or --since, not both" in both.output
    # SPANSCORE_LAST set for the nightly job, --since typed by hand: the command line's.
    by_hand = _invoke(
        ["evaluate", "--since", "2023-06-01T00:00:00Z"],
        {**env, "SPANSCORE_SINCE": "", "SPANSCORE_LAST": "1h"},
    )
    assert by_hand.exit_code == 0, by_hand.output
    assert json.loads(by_hand.output)["window"]["start"] == "2023-06-01T00:00:00+00:00"


def _latest_run(lake: str) -> str:
    newest = "SELECT run_id FROM eval_runs ORDER BY started_at DESC, run_id DESC LIMIT 1"
    return _invoke(["sql", "--lake", lake, "--format", "csv", newest], {}).output.split()[1]


def test_compare_and_runs_read_their_own_variables(evaluated: dict[str, str]) -> None:
    lake = {"SPANSCORE_LAKE": evaluated["lake"]}
    latest = _latest_run(evaluated["lake"])
    compared = _invoke(
        ["compare", "previous", "latest"], {**lake, "SPANSCORE_COMPARE_FORMAT": "json"}
    )
    assert compared.exit_code == 0, compared.output
    assert json.loads(compared.output)["run_b"] == latest
    listed = _invoke(
        ["runs"], {**lake, "SPANSCORE_RUNS_FORMAT": "json", "SPANSCORE_RUNS_LIMIT": "1"}
    )
    assert [r["run_id"] for r in json.loads(listed.output)] == [latest]
    other = _invoke(["runs"], {**lake, "SPANSCORE_RUNS_FORMAT": "csv", "SPANSCORE_RUNS_SUITE": "x"})
    assert other.output.startswith("run_id,suite_name,")
    assert len(other.output.splitlines()) == 1  # no run of a suite named x
    # runs does not read evaluate's --format variable (text is not one of runs' formats).
    wrong = _invoke(["runs"], {**lake, "SPANSCORE_EVALUATE_FORMAT": "text"})
    assert wrong.exit_code == 0
    assert wrong.output.startswith("run_id  ")  # the table: runs ignored evaluate's variable


def test_report_and_show_read_their_own_variables(evaluated: dict[str, str]) -> None:
    lake = {"SPANSCORE_LAKE": evaluated["lake"]}
    output = Path(evaluated["base"]) / "report.json"
    written = _invoke(
        ["report"],
        {**lake, "SPANSCORE_REPORT_FORMAT": "json", "SPANSCORE_REPORT_OUTPUT": str(output)},
    )
    assert written.exit_code == 0, written.output
    assert json.loads(output.read_text())["run"]["run_id"] == _latest_run(evaluated["lake"])
    conversation = _invoke(
        ["sql", "SELECT min(conversation_id) FROM conversations"],
        {**lake, "SPANSCORE_SQL_FORMAT": "csv"},
    ).output.splitlines()[1]
    shown = _invoke(["show", conversation], {**lake, "SPANSCORE_SHOW_JSON": "1"})
    assert json.loads(shown.output)["conversation_id"] == conversation
    plain = _invoke(["show", conversation], {**lake, "SPANSCORE_SHOW_JSON": "0"})
    assert plain.output.startswith(f"conversation {conversation}")


def test_sql_reads_its_format_under_both_names_and_the_command_line_wins(
    evaluated: dict[str, str],
) -> None:
    lake = {"SPANSCORE_LAKE": evaluated["lake"]}
    sql = ["sql", "SELECT 1 AS one"]
    assert _invoke(sql, {**lake, "SPANSCORE_SQL_FORMAT": "csv"}).output == "one\n1\n"
    assert _invoke(sql, {**lake, "SPANSCORE_FORMAT": "csv"}).output == "one\n1\n"
    both = {**lake, "SPANSCORE_SQL_FORMAT": "json", "SPANSCORE_FORMAT": "csv"}
    assert json.loads(_invoke(sql, both).output) == [{"one": 1}]
    given = _invoke([*sql[:1], "--format", "csv", *sql[1:]], both)
    assert given.output == "one\n1\n"
    query_file = Path(evaluated["base"]) / "query.sql"
    query_file.write_text("SELECT 2 AS two")
    from_file = _invoke(["sql"], {**both, "SPANSCORE_FILE": str(query_file)})
    assert json.loads(from_file.output) == [{"two": 2}]
    # The variable's file and a QUERY typed on the command line: the command line's.
    typed = _invoke(sql, {**both, "SPANSCORE_FILE": str(query_file)})
    assert json.loads(typed.output) == [{"one": 1}]
    given_twice = _invoke([*sql, "--file", str(query_file)], both)
    assert given_twice.exit_code == 2
    assert "not both" in given_twice.output


def test_judge_check_reads_its_inputs_from_the_environment(
    evaluated: dict[str, str], tmp_path: Path
) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("conversation_id,label\nc1,pass\n")
    env = {
        "SPANSCORE_LAKE": evaluated["lake"],
        "SPANSCORE_SUITE": evaluated["SPANSCORE_SUITE"],
        "SPANSCORE_METRIC": "helpfulness",
        "SPANSCORE_LABELS": str(labels),
    }
    result = _invoke(["judge-check"], env)
    assert result.exit_code == 2
    assert "the suite has no judged metric 'helpfulness'" in result.output


@pytest.mark.parametrize("command", ["evaluate", "judge-check"])
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SPANSCORE_JUDGE_CONCURRENCY", "0"),
        ("SPANSCORE_JUDGE_TIMEOUT", "0"),
        ("SPANSCORE_MAX_JUDGE_CALLS", "-1"),
        ("SPANSCORE_MAX_JUDGE_COST", "a dollar"),
        ("SPANSCORE_NO_JUDGE_CACHE", "maybe"),
    ],
)
def test_both_judging_commands_read_the_judge_variables(
    command: str, variable: str, value: str
) -> None:
    env = {
        "SPANSCORE_LAKE": "unused",
        "SPANSCORE_SUITE": "unused.yaml",
        "SPANSCORE_METRIC": "unused",
        "SPANSCORE_LABELS": "unused.csv",
        variable: value,
    }
    result = _invoke([command], env)
    assert result.exit_code == 2
    assert f"(env var: '{variable}')" in result.output


def test_status_reads_the_endpoint_token_and_json_switch(
    make_collector: Callable[..., Collector],
) -> None:
    collector = make_collector(token="s3cret")
    env = {
        "SPANSCORE_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
        "SPANSCORE_STATUS_JSON": "yes",
    }
    refused = _invoke(["status"], env)
    assert refused.exit_code == 2
    assert "answered 401" in refused.output
    answered = _invoke(["status"], {**env, "SPANSCORE_TOKEN": "s3cret"})
    assert answered.exit_code == 0, answered.output
    assert json.loads(answered.output)["status"] == "ok"
    waited = _invoke(
        ["status"],
        {"SPANSCORE_ENDPOINT": f"http://127.0.0.1:{free_port()}", "SPANSCORE_WAIT": "0.3"},
    )
    assert "(waited 0.3s)" in waited.output


def test_serve_names_the_variable_a_bad_setting_came_from(tmp_path: Path) -> None:
    # The collector's configuration reads its variables itself (under the command line, over
    # the config file), so an error says it came from the environment, not the command line.
    env = {"SPANSCORE_LAKE": str(tmp_path / "lake"), "SPANSCORE_GRPC_PORT": "70000"}
    result = _invoke(["serve"], env)
    assert result.exit_code == 2
    assert "grpc_port (from environment variable SPANSCORE_GRPC_PORT)" in result.output
    assert not (tmp_path / "lake").exists()


def test_import_and_demo_read_their_paths_from_the_environment(tmp_path: Path) -> None:
    output = tmp_path / "suite.yaml"
    source = ROOT / "examples" / "customer_service" / "arksim_scenarios.json"
    imported = _invoke(["import", "arksim", str(source)], {"SPANSCORE_IMPORT_OUTPUT": str(output)})
    assert imported.exit_code == 0, imported.output
    assert output.read_text().startswith("# Imported by `spanscore import arksim`")
    (tmp_path / "precious.txt").write_text("keep me")
    # The demo recreates its lake: it reads SPANSCORE_DEMO_LAKE, never SPANSCORE_LAKE.
    demo = _invoke(["demo"], {"SPANSCORE_DEMO_LAKE": str(tmp_path)})
    assert demo.exit_code == 2
    assert f"{tmp_path} exists and is not a spanscore lake" in demo.output
    assert (tmp_path / "precious.txt").exists()


def test_the_help_names_each_variable() -> None:
    text = " ".join(_invoke(["evaluate", "--help"], {}).output.split())
    for variable in ("SPANSCORE_LAKE", "SPANSCORE_EVALUATE_WORKERS", "SPANSCORE_JUDGE_BATCH"):
        assert re.search(rf"\[env var: {variable}[];]", text), variable
