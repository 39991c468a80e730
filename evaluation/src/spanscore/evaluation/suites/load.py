"""Loading a suite file: YAML or JSON, or another tool's native file through its importer.

Loading never half-works: every problem is reported (`SuiteError`) with the file, the line and
the path into the document, and what was expected, before anything is scored."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ValidationError,
)

from spanscore.evaluation.metrics.custom import METRIC_ASSERTIONS_DOC
from spanscore.evaluation.scoring.plugins import load_plugin
from spanscore.evaluation.scoring.registry import REGISTRY, MetricRegistry, PluginError
from spanscore.evaluation.suites import importers
from spanscore.evaluation.suites.loaded import LoadedSuite
from spanscore.evaluation.suites.model import Suite, located_assertions, suite_model

# --- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SuiteError(ValueError):
    """The suite cannot be used; `problems` says where and why, one entry per problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def load_suite(
    source: str | Path | Mapping[str, Any],
    *,
    registry: MetricRegistry | None = None,
    name: str | None = None,
    base_dir: str | Path | None = None,
    format: str | None = None,  # noqa: A002 (the user-facing word)
    allow_outside_metrics: bool = False,
) -> LoadedSuite:
    """Read, validate and prepare a suite (a file path, or an already parsed document whose
    custom metric files are relative to `base_dir`, default the working directory).

    Another tool's native test file (ArkSim scenarios, watsonx datasets or a directory of them,
    tool-selection datasets, ADK eval sets, agentevals trajectories) is accepted too: it is
    recognised by its shape, or named by `format`, and converted by its importer first
    (`spanscore.evaluation.suites.importers`).

    A custom metric file is Python that the run imports and executes: one outside the suite's
    folder (an absolute path, `..`, a symbolic link leading out) is a suite problem unless
    `allow_outside_metrics` says the caller trusts it, so that a suite handed over does not
    run code from anywhere on the machine.

    Raises `SuiteError` naming file, line and path of every problem."""
    if isinstance(source, Mapping):
        label = name or "<suite>"
        data: Any = dict(source)
        root: yaml.Node | None = None
        base = Path(base_dir).resolve() if base_dir is not None else Path.cwd()
        path = None
    else:
        path = Path(source)
        label = str(path)
        if path.is_dir():  # a directory of watsonx datasets
            data, root = None, None
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise SuiteError([Problem(label, None, "", "file not found")]) from None
            except (OSError, UnicodeDecodeError) as exc:
                raise SuiteError([Problem(label, None, "", f"cannot read: {exc}")]) from None
            data, root = _parse(text, label, path.suffix.lower())
        base = path.resolve().parent
    data, root, label, dropped = _import_native(data, root, label, path, format)
    if not isinstance(data, dict):
        raise SuiteError([Problem(label, 1, "", "expected a mapping (name, scenarios, ...)")])
    unloaded = _load_named_plugins(label, root, data)
    if unloaded:
        raise SuiteError(unloaded)
    try:
        suite = suite_model().model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A value that fits no member of a union gets one error per member: keep those of the
        # members whose shape (mapping or list) the value has.
        found = [p for p in (_problem(label, root, data, e) for e in errors) if p is not None]
        if not found:
            found = [
                _problem(label, root, data, errors[0], lenient=True)
                or Problem(label, None, "", str(exc))
            ]
        raise SuiteError(list(dict.fromkeys(found))) from None
    registry = MetricRegistry(parent=registry or REGISTRY)
    problems: list[Problem] = []
    for i, metric_file in enumerate(suite.custom_metrics):
        where: tuple[str | int, ...] = ("custom_metrics", i)
        outside = _outside(base, metric_file)
        if outside and not allow_outside_metrics:
            problems.append(_at(label, root, data, where, outside))
            continue
        try:
            registry.load_file(base / metric_file)
        except Exception as exc:  # a broken metric file is a suite problem
            problems.append(_at(label, root, data, where, f"{type(exc).__name__}: {exc}"))
    for where, assertion in located_assertions(suite):
        for message in assertion.check(registry):
            problems.append(_at(label, root, data, where, message))
    for i, gate in enumerate(suite.gates):
        unknown = suite.gate_problem(gate)
        if unknown is not None:
            problems.append(_at(label, root, data, ("gates", i, unknown[0]), unknown[1]))
    for group, seen in _duplicate_metric_names(suite):
        problems.append(
            _at(label, root, data, group, f"two assertions are both named {seen!r}: name one")
        )
    if problems:
        raise SuiteError(problems)
    # The version a score belongs to: what decides scores. What only decides whether the run
    # passes (gates and run rules) is left out, so changing it re-scores nothing.
    # The simulated users decide what a simulation asks, not how a conversation is scored
    # (simulations are scored whole each time): editing them re-scores no production traffic.
    versioned = suite.model_dump(mode="json", exclude={"min_conversations", "strict", "simulator"})
    for gate in versioned["gates"]:
        gate.pop("allow_empty", None)
    for scenario in versioned["scenarios"]:
        scenario.pop("user", None)
    content_hash = hashlib.sha256(
        json.dumps(versioned, sort_keys=True).encode()
        + b"".join(_file_digest(base / f) for f in suite.custom_metrics)
    ).hexdigest()[:16]
    return LoadedSuite(
        suite=suite,
        path=path,
        content_hash=content_hash,
        registry=registry,
        base_dir=base,
        dropped=dropped,
        allow_outside_metrics=allow_outside_metrics,
        label=label,
        scenario_lines={
            s.id: _at(label, root, data, ("scenarios", i), "").line
            for i, s in enumerate(suite.scenarios)
        },
    )


def _load_named_plugins(label: str, root: yaml.Node | None, data: Any) -> list[Problem]:
    """Load the plugins the suite names (`type: package/name`, `metric: package/name`) before
    it is validated, so that their types are among the ones an entry may be. A plugin that is
    not installed or fails to load is a problem at the name."""
    problems: list[Problem] = []
    for where, entry in _entries(data):
        kind = entry.get("type")
        named = [("type", kind)]
        if kind == "metric":
            named.append(("metric", entry.get("metric")))
        for key, name in named:
            if not isinstance(name, str) or "/" not in name or ":" in name:
                continue
            try:
                load_plugin(name.split("/", 1)[0])
            except PluginError as exc:
                problems.append(_at(label, root, data, (*where, key), str(exc)))
    return problems


def _entries(data: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """The suite's entries (assertions and metrics) as written, before validation."""

    def listed(value: Any) -> list[Any]:
        return value if isinstance(value, list) else []

    for i, entry in enumerate(listed(data.get("metrics"))):
        if isinstance(entry, dict):
            yield ("metrics", i), entry
    for group in ("policies", "scenarios"):
        for j, item in enumerate(listed(data.get(group))):
            if not isinstance(item, dict):
                continue
            for k, entry in enumerate(listed(item.get("assertions"))):
                if isinstance(entry, dict):
                    yield (group, j, "assertions", k), entry


def _outside(base: Path, metric_file: str) -> str | None:
    """Why a custom metric file is outside the suite's folder, or None when it is inside."""
    resolved = (base / metric_file).resolve()
    if resolved.is_relative_to(base.resolve()):
        return None
    return (
        f"{metric_file!r} is outside the suite's folder {base} (it resolves to {resolved}): "
        "move it next to the suite, or pass --allow-outside-metrics (load_suite("
        "allow_outside_metrics=True)) if you trust it to run"
    )


def _import_native(
    data: Any, root: yaml.Node | None, label: str, path: Path | None, fmt: str | None
) -> tuple[Any, yaml.Node | None, str, list[str]]:
    """A native file of another tool, converted by its importer (lines then refer to nothing:
    the suite is generated), and what the conversion could not carry over."""
    if fmt in ("spanscore", "suite"):
        return data, root, label, []
    if fmt is None or fmt == "auto":
        fmt = importers.detect(data) if data is not None else None
        if fmt is None and path is not None and path.is_dir():
            fmt = importers.detect_path(path)
        if fmt is None:
            if data is None:
                raise SuiteError([Problem(label, None, "", "a directory, not a suite file")])
            return data, root, label, []
    try:
        if path is not None and path.is_dir():
            result = importers.import_file(fmt, path)
        else:
            result = importers.convert(fmt, data, path or Path(label))
    except importers.ImporterError as exc:
        raise SuiteError([Problem(label, None, "", str(exc))]) from None
    return result.suite, None, f"{label} (imported as {fmt})", list(result.dropped)


def _file_digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""


def _duplicate_metric_names(suite: Suite) -> Iterator[tuple[tuple[str | int, ...], str]]:
    groups: list[tuple[tuple[str | int, ...], list[Any]]] = [(("metrics",), suite.metrics)]
    groups += [(("policies", i, "assertions"), p.assertions) for i, p in enumerate(suite.policies)]
    groups += [
        (("scenarios", i, "assertions"), s.assertions) for i, s in enumerate(suite.scenarios)
    ]
    for where, assertions in groups:
        seen: set[str] = set()
        for assertion in assertions:
            if assertion.metric_name in seen:
                yield where, assertion.metric_name
            seen.add(assertion.metric_name)


# A suite is a few hundred lines; these bounds stop a hostile file (a YAML "billion laughs"
# alias bomb grows a 1 KiB file into gigabytes) before it costs memory.
MAX_SUITE_BYTES = 8 * 1024 * 1024


MAX_EXPANDED_NODES = 1_000_000


def _expanded_nodes(root: yaml.Node) -> int:
    """The number of nodes the document has once every alias is expanded (shared nodes
    counted once per use), computed without expanding it."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int = 0) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if depth > 1_000:
            raise ValueError("nested more than 1000 levels deep")
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = total = min(total, MAX_EXPANDED_NODES + 1)
        return total

    return size(root)


def _bounded_yaml(text: str, label: str) -> Any:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        try:
            expanded = _expanded_nodes(node)
        except ValueError as exc:
            raise SuiteError([Problem(label, None, "", f"invalid YAML: {exc}")]) from None
        if expanded > MAX_EXPANDED_NODES:
            raise SuiteError(
                [
                    Problem(
                        label,
                        None,
                        "",
                        f"the YAML expands to more than {MAX_EXPANDED_NODES:,} values through "
                        "its aliases (&anchor / *alias): not a suite",
                    )
                ]
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _parse(text: str, label: str, suffix: str) -> tuple[Any, yaml.Node | None]:
    if len(text) > MAX_SUITE_BYTES:
        raise SuiteError(
            [Problem(label, None, "", f"larger than {MAX_SUITE_BYTES // 2**20} MiB: not a suite")]
        )
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SuiteError(
                [Problem(label, exc.lineno, "", f"invalid JSON: {exc.msg} (column {exc.colno})")]
            ) from None
    else:
        try:
            data = _bounded_yaml(text, label)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else None
            problem = getattr(exc, "problem", None) or str(exc)
            raise SuiteError([Problem(label, line, "", f"invalid YAML: {problem}")]) from None
    try:  # JSON is YAML: one way to find lines for both
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    return data, root


def _problem(
    label: str, root: yaml.Node | None, data: Any, err: Mapping[str, Any], lenient: bool = False
) -> Problem | None:
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
        shown = json.dumps(err["input"], default=str)
        if len(shown) <= 80 and not isinstance(err["input"], dict | list):
            message += f" (got {shown})"
    if err["type"] == "extra_forbidden":
        message = "unknown field (check the spelling; `spanscore schema suite` lists the fields)"
    return _locate(label, root, data, tuple(err["loc"]), message, lenient=lenient)


def _at(
    label: str, root: yaml.Node | None, data: Any, loc: tuple[Any, ...], message: str
) -> Problem:
    return _locate(label, root, data, loc, message) or Problem(label, None, "", message)


def _locate(
    label: str,
    root: yaml.Node | None,
    data: Any,
    loc: tuple[Any, ...],
    message: str,
    lenient: bool = True,
) -> Problem | None:
    """A problem at `loc` (a pydantic location: keys, indexes and union tags). None when the
    location is a union member the value does not have the shape of (unless `lenient`)."""
    parts: list[str] = []
    node = root
    key_node: yaml.Node | None = None  # the key the location ends on: its line is the key's
    value = data
    for key in loc:
        if isinstance(key, int) and isinstance(value, list) and 0 <= key < len(value):
            parts.append(f"[{key}]")
            value = value[key]
            key_node = None
            if isinstance(node, yaml.SequenceNode) and key < len(node.value):
                node = node.value[key]
        elif isinstance(key, str) and isinstance(value, dict) and key in value:
            parts.append(f".{key}" if parts else key)
            value = value[key]
            if isinstance(node, yaml.MappingNode):
                found = next(((k, v) for k, v in node.value if k.value == key), None)
                if found is not None:
                    key_node, node = found
        elif isinstance(value, dict) and value.get("type") == key:
            continue  # the tag of a discriminated union member
        elif isinstance(key, str) and "[" in key:  # a union member: `list[...]`, `function-...`
            wants_list = key.startswith("list[")
            if not lenient and wants_list != isinstance(value, list):
                return None
        else:  # a missing field, named after the mapping it is missing from
            parts.append(f".{key}" if parts else str(key))
            break
    # A key's value may start on the next line (a block under `expected:`): the key's line.
    at = key_node if key_node is not None else node
    line = at.start_mark.line + 1 if at is not None else None
    return Problem(label, line, "".join(parts), message)


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of suite files: exactly the shapes the loader accepts.

    pydantic's schema shows only each model's canonical shape; the loader also takes a
    model's `string_shorthand` (a bare tool name for a call, a strategy name for a rule) and
    every spelling of a key that has several (`name` or `tool`). Both are added here, read
    from the models themselves so the schema cannot drift from the loader. The assertion
    types of the plugins loaded so far are in it (`load_installed_plugins` loads them all)."""
    suite = suite_model()
    schema = suite.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})
    for model in _models(suite):
        if model is suite:
            _accept_spellings(schema, model)
            continue
        entry = defs.get(model.__name__)
        if entry is None:
            continue
        _accept_spellings(entry, model)
        shorthand = getattr(model, "string_shorthand", None)
        if shorthand is not None:
            defs[model.__name__] = {"anyOf": [shorthand, entry]}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("description", METRIC_ASSERTIONS_DOC)
    return schema


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model its fields can hold, at any depth."""
    found: dict[type[BaseModel], None] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found[annotation] = None
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for arg in get_args(annotation):
            visit(arg)

    visit(root)
    return list(found)


def _accept_spellings(entry: dict[str, Any], model: type[BaseModel]) -> None:
    """Let `entry` (the model's object schema) take every spelling of a key, one at a time."""
    properties: dict[str, Any] = entry.get("properties", {})
    required: list[str] = entry.get("required", [])
    exclusive: list[dict[str, Any]] = []
    for info in model.model_fields.values():
        alias = info.validation_alias
        if not isinstance(alias, AliasChoices):
            continue
        names = [c for c in alias.choices if isinstance(c, str)]
        shown = next((n for n in names if n in properties), None)
        if shown is None:
            continue
        for name in names:
            properties.setdefault(name, properties[shown])
        exclusive += [{"required": [a, b]} for i, a in enumerate(names) for b in names[i + 1 :]]
        if shown in required:
            required.remove(shown)
            entry.setdefault("allOf", []).append(
                {"anyOf": [{"required": [name]} for name in names]}
            )
    if exclusive:
        entry["not"] = {"anyOf": exclusive}
    if "required" in entry and not required:
        del entry["required"]


def import_to_yaml(
    fmt: str | None, path: str | Path, options: Mapping[str, Any] | None = None
) -> str:
    """`import_file`, checked by `load_suite` (the suite it produces must load), as a
    commented YAML suite file: what `spanscore import` prints."""
    result = importers.import_file(fmt, path, options)
    try:
        load_suite(result.suite, name=f"{Path(path).name} (imported as {result.format})")
    except SuiteError as exc:
        raise importers.ImporterError(str(exc)) from None
    return importers.to_yaml(result)
