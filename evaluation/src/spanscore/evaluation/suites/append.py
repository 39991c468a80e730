"""Appending a scenario to a suite file as text, so that everything already written stays as it
was, byte for byte: comments, key order, quoting, blank lines, the other keys after
`scenarios:` (a YAML or JSON library that loads and dumps the file would lose the comments and
re-quote everything).

The new scenario goes in after the last one, in the file's own style: a block item in a block
list, an item of a flow list (`scenarios: [...]`), an element of a JSON array; a file with no
`scenarios` yet gets the key. The result is checked before anyone writes it: it must parse to
exactly the document it parsed to before, plus the new scenario at the end of `scenarios`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml


class AppendError(ValueError):
    """The scenario cannot be appended to this text (its shape is not a suite's)."""


@dataclass(frozen=True)
class Insertion:
    """The text to insert at `offset` of the file's text (nothing else changes)."""

    offset: int
    text: str

    def apply(self, original: str) -> str:
        return original[: self.offset] + self.text + original[self.offset :]


def append_scenario(text: str, scenario: Mapping[str, Any], *, json_file: bool) -> Insertion:
    """Where and what to insert into the suite file's `text` to append `scenario` (a
    document of plain JSON values), checked: the new text parses to the old document with the
    scenario appended. Raises `AppendError` when it cannot be done."""
    newline = "\r\n" if "\r\n" in text else "\n"
    if json_file:
        insertion = _json_insertion(text, scenario, newline)
        before, after = _parse_json(text), _parse_json(insertion.apply(text))
    else:
        insertion = _yaml_insertion(text, scenario, newline)
        before, after = _parse_yaml(text), _parse_yaml(insertion.apply(text))
    expected = dict(before)
    expected["scenarios"] = [*(before.get("scenarios") or []), json.loads(json.dumps(scenario))]
    if after != expected:
        raise AppendError(
            "appending to this file's text would change more than its scenarios; add the "
            "scenario by hand"
        )
    return insertion


def _parse_json(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AppendError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AppendError("the file is not a JSON object")
    return data


def _parse_yaml(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AppendError(f"invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise AppendError("the file is not a YAML mapping")
    # The comparison is of JSON values, as the scenario is (dates and such become text).
    return dict(json.loads(json.dumps(data, default=str)))


# --- YAML ------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Dumps what a user could have typed: a text with a line break double-quoted on one line
    (its breaks escaped), never folded, so that indenting every line keeps its value; a list
    in a mapping indented under its key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _text_style(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(c in value for c in "\n\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text_style)
_WIDE = 1 << 30  # no line folding


def _yaml_block(value: Any) -> str:
    return str(
        yaml.dump(
            value,
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=_WIDE,
        )
    )


def _yaml_flow(value: Any) -> str:
    text = yaml.dump(
        value,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=True,
        allow_unicode=True,
        width=_WIDE,
    )
    return str(text).strip().removesuffix("...").strip()


def _indented(block: str, column: int, newline: str) -> str:
    pad = " " * column
    lines = block.rstrip("\n").split("\n")
    return "".join(f"{pad}{line}{newline}" if line else newline for line in lines)


def _yaml_insertion(text: str, scenario: Mapping[str, Any], newline: str) -> Insertion:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise AppendError(f"invalid YAML: {exc}") from None
    if not isinstance(root, yaml.MappingNode):
        raise AppendError("the file is not a YAML mapping")
    found = [v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "scenarios"]
    item = dict(scenario)
    if not found:  # a new key, after the mapping's last entry
        if root.flow_style:
            at = root.end_mark.index - 1  # the closing brace
            comma = ", " if root.value else ""
            return Insertion(at, f"{comma}scenarios: [{_yaml_flow(item)}]")
        at = _line_after(text, _content_end(root))
        lead = newline if at == len(text) and text and not text.endswith("\n") else ""
        column = root.start_mark.column
        block = _yaml_block({"scenarios": [item]})
        return Insertion(at, lead + _indented(block, column, newline))
    value = found[-1]  # PyYAML keeps the last of a repeated key
    if not isinstance(value, yaml.SequenceNode):
        raise AppendError("`scenarios` is not a list")
    if value.flow_style:
        if not value.value:
            return Insertion(value.end_mark.index - 1, _yaml_flow(item))
        last = value.value[-1]
        first_line = value.start_mark.line
        if last.start_mark.line != first_line:  # one item a line: the new one on its own
            separator = f",{newline}{' ' * last.start_mark.column}"
        else:
            separator = ", "
        return Insertion(last.end_mark.index, separator + _yaml_flow(item))
    column = value.start_mark.column
    at = _line_after(text, _content_end(value))
    if column > root.start_mark.column:  # a comment at the keys' indentation is the next key's
        at = _after_comments(text, at, column)
    lead = newline if at == len(text) and not text.endswith("\n") else ""
    return Insertion(at, lead + _indented(_yaml_block([item]), column, newline))


def _content_end(node: yaml.Node) -> int:
    """Where the node's last written character ends (a block collection's own end mark lies
    after the comments and blank lines that follow it, at the next key)."""
    if not isinstance(node, yaml.CollectionNode) or node.flow_style:
        return int(node.end_mark.index)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            children += [key, value]
    ends = [_content_end(child) for child in children]
    return max(ends, default=int(node.start_mark.index))


def _after_comments(text: str, index: int, column: int) -> int:
    """Past the comment lines that follow a list's last item at the items' indentation (they
    belong to the list: `# promoted scenarios go below`, a scenario commented out), and the
    blank lines between them; not past blank lines after the last one."""
    at = position = index
    while position < len(text):
        end = text.find("\n", position)
        end = len(text) if end < 0 else end + 1
        line = text[position:end]
        stripped = line.lstrip(" ")
        if stripped.startswith("#") and len(line) - len(stripped) >= column:
            at = end
        elif stripped.strip():
            break
        position = end
    return at


def _line_after(text: str, index: int) -> int:
    """The start of the line after the one `index` ends on (a block scalar's end already is at
    a line start, after its line break)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    found = text.find("\n", index)
    return len(text) if found < 0 else found + 1


# --- JSON ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    """A member of a JSON object, by where its key and value are in the text."""

    key: str
    key_start: int
    value_start: int
    value_end: int


def _json_insertion(text: str, scenario: Mapping[str, Any], newline: str) -> Insertion:
    _parse_json(text)  # a clear error for a broken file before scanning it
    start = _skip_space(text, 0)
    members, close = _json_object(text, start)
    unit = _indent_unit(text)
    multiline = "\n" in text[start:close]
    found = [m for m in members if m.key == "scenarios"]
    if not found:
        if not members:
            raise AppendError("the JSON object is empty: not a suite")
        end = members[-1].value_end
        if not multiline:
            rendered = json.dumps({"scenarios": [scenario]}, ensure_ascii=False)
            return Insertion(end, ", " + rendered[1:-1])
        column = _column(text, members[-1].key_start)
        array = _json_text([scenario], unit, column, newline)
        return Insertion(end, f',{newline}{" " * column}"scenarios": {array}')
    value_start, value_end = found[-1].value_start, found[-1].value_end
    if text[value_start] != "[":
        raise AppendError("`scenarios` is not a list")
    elements, bracket = _json_array(text, value_start)
    if not elements:
        if "\n" not in text[value_start:bracket] and not multiline:
            return Insertion(bracket, json.dumps(scenario, ensure_ascii=False))
        key_column = _column(text, found[-1].key_start)
        inner = " " * (key_column + unit)
        item = _json_text(scenario, unit, key_column + unit, newline)
        return Insertion(value_start + 1, f"{newline}{inner}{item}{newline}{' ' * key_column}")
    last_start, last_end = elements[-1]
    if "\n" not in text[value_start:value_end]:
        return Insertion(last_end, ", " + json.dumps(scenario, ensure_ascii=False))
    column = _column(text, last_start)
    item = _json_text(scenario, unit, column, newline)
    return Insertion(last_end, f",{newline}{' ' * column}{item}")


def _json_text(value: Any, unit: int, column: int, newline: str) -> str:
    """`value` as indented JSON whose first line starts at `column` (its other lines are
    indented to match)."""
    lines = json.dumps(value, indent=unit, ensure_ascii=False).split("\n")
    return newline.join([lines[0], *(" " * column + line for line in lines[1:])])


def _indent_unit(text: str) -> int:
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped and len(stripped) < len(line):
            return len(line) - len(stripped)
    return 2


def _column(text: str, index: int) -> int:
    return index - (text.rfind("\n", 0, index) + 1)


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index


def _string_end(text: str, index: int) -> int:
    """The index after the string starting (with its quote) at `index`."""
    index += 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == '"':
            return index + 1
        index += 1
    raise AppendError("unterminated JSON string")


def _value_end(text: str, index: int) -> int:
    char = text[index]
    if char == '"':
        return _string_end(text, index)
    if char == "{":
        return _json_object(text, index)[1] + 1
    if char == "[":
        return _json_array(text, index)[1] + 1
    while index < len(text) and text[index] not in ",]} \t\r\n":
        index += 1
    return index


def _json_object(text: str, index: int) -> tuple[list[_Member], int]:
    """The members of the object at `index`, and the index of its closing brace."""
    if index >= len(text) or text[index] != "{":
        raise AppendError("the file is not a JSON object")
    members: list[_Member] = []
    index = _skip_space(text, index + 1)
    while text[index] != "}":
        key_start, key_end = index, _string_end(text, index)
        key = json.loads(text[key_start:key_end])
        index = _skip_space(text, _skip_space(text, key_end) + 1)  # past the colon
        end = _value_end(text, index)
        members.append(_Member(key, key_start, index, end))
        index = _skip_space(text, end)
        if text[index] == ",":
            index = _skip_space(text, index + 1)
    return members, index


def _json_array(text: str, index: int) -> tuple[list[tuple[int, int]], int]:
    """The elements (start, end) of the array at `index`, and the index of its bracket."""
    elements: list[tuple[int, int]] = []
    index = _skip_space(text, index + 1)
    while text[index] != "]":
        end = _value_end(text, index)
        elements.append((index, end))
        index = _skip_space(text, end)
        if text[index] == ",":
            index = _skip_space(text, index + 1)
    return elements, index
