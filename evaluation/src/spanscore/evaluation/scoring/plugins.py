"""One registry, one door: the assertion types and metrics a suite may name.

Built-in assertion types register with `@assertion`, as a plugin's do; metrics with `@metric`.
Names are namespaced `package/name`; the built-ins' namespace, `spanscore`, may be left out
(`type: tool_calls` is `spanscore/tool_calls`).

An installed package extends spanscore through the entry-point group `spanscore`: the entry
point's name is its namespace and its value the module that registers (imported, or called
when it names a function)::

    # the plugin's pyproject.toml
    [project.entry-points.spanscore]
    acme = "acme_checks.spanscore"

    # acme_checks/spanscore.py
    @assertion
    class RefundLimit(AssertionBase):
        type: Literal["acme/refund_limit"]
        ...

    @metric          # registered as acme/politeness
    def politeness(trajectory: Trajectory) -> float: ...

A plugin is loaded only when a suite names its namespace, so a broken package that no suite
uses costs nothing; a suite that names an unknown or broken one gets a located suite error.
A suite may also name any importable function as a metric, `module:function`.
"""

from __future__ import annotations

import inspect
from importlib.metadata import EntryPoint, entry_points
from typing import Annotated, Any, TypeVar, get_args

from pydantic import Field

from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.registry import (
    PluginError,
    brief,
    loading_namespace,
    registering_as,
)

ENTRY_POINT_GROUP = "spanscore"
BUILTIN = "spanscore"

A = TypeVar("A", bound=type[AssertionBase])


class AssertionTypes:
    """Assertion types by their `type` (`name` for built-ins, `package/name` for plugins), in
    the order they registered: the suite's discriminated union is made of them."""

    def __init__(self) -> None:
        self._types: dict[str, type[AssertionBase]] = {}
        self.version = 0  # changes whenever a type is added (the suite model is rebuilt)

    def add(self, cls: type[AssertionBase]) -> None:
        name = type_name(cls)
        existing = self._types.get(name)
        if existing is not None and existing is not cls:
            raise TypeError(
                f"assertion type {name!r} is registered twice: by {_where(existing)} and "
                f"{_where(cls)}"
            )
        self._types[name] = cls
        self.version += 1

    def get(self, name: str) -> type[AssertionBase] | None:
        return self._types.get(name.removeprefix(f"{BUILTIN}/"))

    def names(self) -> list[str]:
        return list(self._types)

    def union(self) -> Any:
        """The annotation of one suite entry: every registered type, told apart by `type`."""
        members = tuple(self._types.values())
        if len(members) == 1:
            return members[0]
        union: Any = members[0]
        for member in members[1:]:
            union = union | member
        return Annotated[union, Field(discriminator="type")]


ASSERTION_TYPES = AssertionTypes()


def type_name(cls: type[AssertionBase]) -> str:
    """The value of the class's `type: Literal[...]` field."""
    field = cls.model_fields.get("type")
    args = get_args(field.annotation) if field is not None else ()
    if field is None or len(args) != 1 or not isinstance(args[0], str):
        raise TypeError(
            f"{cls.__qualname__} needs a field `type: Literal['package/name']` to be an "
            "assertion type"
        )
    return args[0]


def assertion(cls: A) -> A:
    """Register an assertion type: a pydantic model subclassing `AssertionBase`, with a
    `type: Literal[...]` field and an `evaluate(trajectory, context) -> Score` method.

    A plugin's type is named `package/name`, `package` being its entry point's name."""
    if not (inspect.isclass(cls) and issubclass(cls, AssertionBase)):
        raise TypeError(f"@assertion decorates a subclass of AssertionBase, not {cls!r}")
    if inspect.isabstract(cls):
        raise TypeError(f"assertion type {cls.__qualname__} does not implement evaluate()")
    name = type_name(cls)
    namespace = loading_namespace() or BUILTIN
    if namespace == BUILTIN:
        if "/" in name and not name.startswith(f"{BUILTIN}/"):
            raise TypeError(
                f"assertion type {name!r} ({_where(cls)}) is namespaced, but no plugin of that "
                "namespace is loading: register it from the module its entry point names"
            )
    elif not name.startswith(f"{namespace}/"):
        raise TypeError(
            f"assertion type {name!r} ({_where(cls)}) must be named '{namespace}/...': "
            f"its package registers as the plugin {namespace!r}"
        )
    ASSERTION_TYPES.add(cls)
    return cls


# --- plugins: installed packages, loaded when a suite names them ------------------------------

_LOADED: dict[str, str | None] = {}  # namespace -> why it failed (None: loaded)


def installed_plugins() -> dict[str, EntryPoint]:
    """The installed packages' entry points in the `spanscore` group, by namespace."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_plugin(namespace: str) -> None:
    """Import the plugin registered under `namespace` (once); PluginError when there is none
    or it fails to load."""
    if namespace == BUILTIN:
        return
    if namespace in _LOADED:
        problem = _LOADED[namespace]
        if problem is not None:
            raise PluginError(problem)
        return
    found = installed_plugins()
    entry_point = found.get(namespace)
    if entry_point is None:
        known = ", ".join(sorted(found)) or "none installed"
        raise PluginError(
            f"no installed package registers the plugin {namespace!r} (entry-point group "
            f"{ENTRY_POINT_GROUP!r}; installed plugins: {known})"
        )
    try:
        with registering_as(namespace):
            loaded = entry_point.load()
            if callable(loaded) and not inspect.isclass(loaded):
                loaded()
    except Exception as exc:
        problem = f"the plugin {namespace!r} ({entry_point.value}) failed to load: {brief(exc)}"
        _LOADED[namespace] = problem
        raise PluginError(problem) from None
    _LOADED[namespace] = None


def load_installed_plugins() -> list[str]:
    """Load every installed plugin (for the published schema); the problems of those that
    fail, one line each."""
    problems = []
    for namespace in sorted(installed_plugins()):
        try:
            load_plugin(namespace)
        except PluginError as exc:
            problems.append(str(exc))
    return problems


def _where(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
