"""A small JSON Schema checker for tool-call arguments: the keywords tool schemas use.

Not a full validator (no dependency is added for it). It reads: `type` (one name or a list),
`enum`, `const`, `required`, `properties`, `additionalProperties` (false or a schema),
`items` (a schema, or a list of schemas as in draft 4), `prefixItems`, `anyOf`, `oneOf`,
`allOf`, `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (number or draft-4
boolean), `minLength`, `maxLength`, `pattern`, `minItems`, `maxItems`, and local `$ref`s
(`#/$defs/...`, `#/definitions/...`). Unknown keywords are ignored, so an unusual schema never
makes a valid call invalid.

Types follow JSON Schema (draft 2020-12): an integer is any number with a zero fractional
part, so `1.0` is a valid `integer`; a boolean is never a number. `enum` and `const` compare
numbers by value (`1` equals `1.0`) and never equal a boolean to a number.

`check_arguments(arguments, schema, strict=...)` returns the problems, one readable sentence
each, naming the argument by its dot path (`address.zip`, `items[2].sku`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from spanscore.evaluation.matching.arguments import values_equal

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


def json_type(value: Any) -> str:
    """The JSON type name of a Python value (`integer` for whole numbers, as the schema sees)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def is_type(value: Any, name: str) -> bool:
    """Whether `value` is of JSON Schema type `name` (unknown type names accept anything)."""
    actual = json_type(value)
    if name == "number":
        return actual in ("number", "integer")
    if name in JSON_TYPES:
        return actual == name
    return True


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else '"' + value + '"'
    return text if len(text) <= 40 else text[:37] + "..."


def _where(path: str) -> str:
    return f"argument '{path}'" if path else "the arguments"


class _Checker:
    def __init__(self, root: Mapping[str, Any], strict: bool) -> None:
        self.root = root
        self.strict = strict
        self.problems: list[str] = []

    def resolve(self, schema: Any, depth: int = 0) -> Any:
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#") or depth > 20:
            return schema
        target: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return {}  # an unresolvable reference constrains nothing
            target = target[part]
        return self.resolve(target, depth + 1)

    def matches(self, value: Any, schema: Any) -> bool:
        """Whether `value` satisfies `schema`, without recording problems."""
        sub = _Checker(self.root, self.strict)
        sub.check(value, schema, "")
        return not sub.problems

    def check(self, value: Any, schema: Any, path: str) -> None:
        schema = self.resolve(schema)
        if schema is False:
            self.problems.append(f"{_where(path)} is not allowed")
            return
        if not isinstance(schema, dict | Mapping):  # `true`, or not a schema: anything goes
            return
        declared = schema.get("type")
        if declared is not None:
            names = declared if isinstance(declared, list) else [declared]
            if isinstance(declared, str):
                typed = is_type(value, declared)
            else:
                typed = any(is_type(value, str(n)) for n in names)
            if not typed:
                wanted = " or ".join(str(n) for n in names)
                self.problems.append(
                    f"{_where(path)} should be {wanted}, got {json_type(value)} {_shown(value)}"
                )
                return  # the other keywords would only repeat the same mistake
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(values_equal(option, value) for option in enum):
            allowed = ", ".join(_shown(o) for o in enum)
            self.problems.append(f"{_where(path)} is {_shown(value)}, not one of {allowed}")
        if "const" in schema and not values_equal(value, schema["const"]):
            self.problems.append(
                f"{_where(path)} is {_shown(value)}, should be {_shown(schema['const'])}"
            )
        if "allOf" in schema or "anyOf" in schema or "oneOf" in schema:
            self._combinators(value, schema, path)
        if isinstance(value, bool):
            pass
        elif isinstance(value, int | float):
            self._bounds(value, schema, path)
        elif isinstance(value, str):
            self._string(value, schema, path)
        elif isinstance(value, list | tuple):
            self._array(list(value), schema, path)
        elif isinstance(value, dict | Mapping):
            self._object(value, schema, path)

    def _combinators(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        all_of = schema.get("allOf")
        for sub in all_of if isinstance(all_of, list) else []:
            self.check(value, sub, path)
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and any_of:
            count = sum(1 for sub in any_of if self.matches(value, sub))
            if count == 0:
                self.problems.append(
                    f"{_where(path)} ({_shown(value)}) matches none of the allowed forms (anyOf)"
                )
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and one_of:
            count = sum(1 for sub in one_of if self.matches(value, sub))
            if count != 1:
                how = "none" if count == 0 else f"{count}"
                self.problems.append(
                    f"{_where(path)} ({_shown(value)}) matches {how} of the oneOf forms, "
                    "exactly one is required"
                )

    def _bounds(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        if not _BOUNDS.intersection(schema):
            return
        low, high = schema.get("minimum"), schema.get("maximum")
        ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if ex_low is True:  # draft 4: a flag on minimum
            ex_low, low = low, None
        if ex_high is True:
            ex_high, high = high, None
        if _number(low) and value < low:
            self.problems.append(f"{_where(path)} is {value}, below the minimum {low}")
        if _number(high) and value > high:
            self.problems.append(f"{_where(path)} is {value}, above the maximum {high}")
        if _number(ex_low) and value <= ex_low:
            self.problems.append(f"{_where(path)} is {value}, should be more than {ex_low}")
        if _number(ex_high) and value >= ex_high:
            self.problems.append(f"{_where(path)} is {value}, should be less than {ex_high}")

    def _string(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        if not _STRING_KEYWORDS.intersection(schema):
            return
        low, high = schema.get("minLength"), schema.get("maxLength")
        if _number(low) and len(value) < low:
            self.problems.append(f"{_where(path)} is shorter than {low} characters")
        if _number(high) and len(value) > high:
            self.problems.append(f"{_where(path)} is longer than {high} characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                found = re.search(pattern, value) is not None
            except re.error:
                found = True  # a pattern Python cannot read constrains nothing here
            if not found:
                self.problems.append(f"{_where(path)} ({_shown(value)}) does not match {pattern}")

    def _array(self, value: list[Any], schema: Mapping[str, Any], path: str) -> None:
        low, high = schema.get("minItems"), schema.get("maxItems")
        if _number(low) and len(value) < low:
            self.problems.append(f"{_where(path)} has {len(value)} items, fewer than {low}")
        if _number(high) and len(value) > high:
            self.problems.append(f"{_where(path)} has {len(value)} items, more than {high}")
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list):  # draft 4 tuple form
            prefix, items = items, schema.get("additionalItems")
        start = 0
        if isinstance(prefix, list):
            for i, sub in enumerate(prefix[: len(value)]):
                self.check(value[i], sub, f"{path}[{i}]")
            start = len(prefix)
        if items is not None:
            for i in range(start, len(value)):
                self.check(value[i], items, f"{path}[{i}]")

    def _object(self, value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> None:
        prefix = f"{path}." if path else ""
        required = schema.get("required")
        if isinstance(required, list):
            for key in required:
                if key not in value:
                    self.problems.append(f"missing required argument '{prefix}{key}'")
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict | Mapping) else {}
        additional = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                self.check(item, properties[key], f"{prefix}{key}")
            elif additional is False or (self.strict and properties):
                self.problems.append(f"unexpected argument '{prefix}{key}'")
            elif isinstance(additional, Mapping):
                self.check(item, additional, f"{prefix}{key}")


_BOUNDS = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))


_STRING_KEYWORDS = frozenset(("minLength", "maxLength", "pattern"))


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_arguments(
    arguments: Any, schema: Mapping[str, Any], *, strict: bool = False
) -> list[str]:
    """The ways `arguments` break `schema` (empty when valid).

    `strict`: an argument that an object schema with `properties` does not declare is a
    problem even when `additionalProperties` is not false (Dokimos' strict mode; applied at
    every level of nesting)."""
    checker = _Checker(schema, strict)
    checker.check(arguments, schema, "")
    return checker.problems


# Exact Python types that are certainly of each JSON type (bool is not an int here).
_QUICK_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def quick_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """For an object of scalar properties, every one required (each a `type`, with an optional
    `enum` of that type's values), a test that is True only for values `check_arguments` finds
    no problem with (False means "ask `check_arguments`", which also says why). None for any
    other schema. `surely_valid`'s test, for a judge's verdict schema: its answers are checked
    one by one, and this makes the check a few dictionary look-ups."""
    if schema.get("required") != list(schema.get("properties") or ()):
        return None  # not every property required: `surely_valid`'s wider case
    return _scalar_object_test(schema, strict=False)


# Keywords `check_arguments` reads nothing from (annotations): a schema of only these and the
# ones `surely_valid` checks itself may take its shortcut.
_ANNOTATIONS = frozenset(("description", "title", "default", "examples", "$comment"))


_OBJECT_KEYWORDS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}


_SCALAR_KEYWORDS = _ANNOTATIONS | {"type", "enum"}


# (schema, strict) by the schema's id -> (the schema, kept alive so the id stays its own; the
# test, or None where the schema is not one it can decide)
_SURE: dict[tuple[int, bool], tuple[Mapping[str, Any], Callable[[Any], bool] | None]] = {}


def surely_valid(arguments: Any, schema: Mapping[str, Any], *, strict: bool = False) -> bool:
    """True only when `check_arguments(arguments, schema, strict=strict)` finds no problem;
    False means "ask it" (it also says why). Decides the common tool schema (an object of
    scalar properties, some required, each a `type` with an optional `enum`) with a few
    dictionary look-ups, prepared once per schema: tool-call validity checks every call of
    every conversation against a handful of schemas. Schemas are read-only here: prepared
    by identity, as `llm.answers` does (the entry keeps the schema alive, so its id is not
    reused)."""
    key = (id(schema), strict)
    found = _SURE.get(key)
    if found is None or found[0] is not schema:
        if len(_SURE) >= 1024:  # schemas come from the suite and the agents' recorded tools
            _SURE.clear()
        found = _SURE[key] = (schema, _scalar_object_test(schema, strict))
    test = found[1]
    return test is not None and test(arguments)


def _scalar_object_test(schema: Mapping[str, Any], strict: bool) -> Callable[[Any], bool] | None:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if (
        schema.get("type") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or additional not in (True, False)  # a schema for the others: the full check
        or not set(schema) <= _OBJECT_KEYWORDS
    ):
        return None
    fields: dict[str, tuple[tuple[type, ...], frozenset[Any] | None]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict) or not set(sub) <= _SCALAR_KEYWORDS:
            return None
        types = _QUICK_TYPES.get(sub.get("type"))  # type: ignore[arg-type]
        if types is None:
            return None
        enum = sub.get("enum")
        if enum is not None:
            # only values of the exact type: `True == 1` and `1 == 1.0` must not decide here
            if not isinstance(enum, list) or not all(type(o) in types[:1] for o in enum):
                return None
            enum = frozenset(enum)
        fields[name] = (types, enum)
    needed = tuple(required)
    closed = additional is False or (strict and bool(properties))

    def test(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            field = fields.get(name)
            if field is None:
                if closed:
                    return False
                continue
            types, enum = field
            if type(item) not in types or (enum is not None and item not in enum):
                return False
        return True

    return test
