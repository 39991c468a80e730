"""The reference pages (`docs/reference.md`: settings, tables, every `--help`), generated from
the code so that they cannot drift.

`python -m spanscore.cli.reference [FILE]` rewrites every block of FILE (default
`docs/reference.md`) between ``<!-- reference:NAME -->`` and ``<!-- /reference:NAME -->``; the
tests fail when the page differs from what this module generates.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from spanscore.collector.config import CollectorConfig, env_name
from spanscore.lake.schema.reference import tables_markdown


def settings() -> str:
    rows = ["| setting | option | environment | default | meaning |", "|---|---|---|---|---|"]
    for name, info in CollectorConfig.model_fields.items():
        if info.default_factory is not None:
            default = "one per CPU" if name == "workers" else "[]"
        elif info.is_required():
            default = "(required)"
        else:
            default = "" if info.default is None else f"`{info.default}`"
        option = "--" + name.replace("_", "-")
        rows.append(
            f"| `{name}` | `{option}` | `{env_name(name)}` | {default} | {info.description or ''} |"
        )
    return "\n".join(rows)


def tables() -> str:
    return tables_markdown()


def commands() -> str:
    from spanscore.cli import main

    parts = []
    # Help as the shell shows it: each command's context under the group's (same help options).
    with main.make_context("spanscore", [], resilient_parsing=True, terminal_width=100) as group:
        for name, command in main.every_command().items():
            with command.make_context(name, [], parent=group, resilient_parsing=True) as ctx:
                text = command.get_help(ctx)
                parts.append(f"#### `spanscore {name}`\n\n```text\n{text}\n```\n")
                for sub_name in sorted(getattr(command, "commands", {})):
                    sub = command.commands[sub_name]  # type: ignore[attr-defined]
                    with sub.make_context(
                        sub_name, [], parent=ctx, resilient_parsing=True
                    ) as sub_ctx:
                        sub_text = sub.get_help(sub_ctx)
                    parts.append(
                        f"#### `spanscore {name} {sub_name}`\n\n```text\n{sub_text}\n```\n"
                    )
    return "\n".join(parts).rstrip()


def variables() -> str:
    """Every command's variables: the option each sets, in which commands."""
    import click

    from spanscore.cli import main

    read: dict[str, list[str]] = {}
    with main.make_context("spanscore", [], resilient_parsing=True) as group:
        for name, command in main.every_command().items():
            with command.make_context(name, [], parent=group, resilient_parsing=True) as ctx:
                for param in command.get_params(ctx):
                    if not isinstance(param, click.Option) or not param.envvar:
                        continue
                    envvars = [param.envvar] if isinstance(param.envvar, str) else param.envvar
                    option = max(param.opts, key=len)
                    for variable in envvars:
                        read.setdefault(variable, []).append(f"`{name} {option}`")
    rows = ["| variable | option |", "|---|---|"]
    rows.extend(f"| `{v}` | {', '.join(read[v])} |" for v in sorted(read))
    return "\n".join(rows)


SECTIONS: dict[str, Callable[[], str]] = {
    "settings": settings,
    "tables": tables,
    "variables": variables,
    "commands": commands,
}


def render(text: str) -> str:
    """`text` with every reference block regenerated."""
    for name, make in SECTIONS.items():
        pattern = re.compile(
            rf"(<!-- reference:{name} -->\n).*?(<!-- /reference:{name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise ValueError(f"no <!-- reference:{name} --> block to regenerate")
        start, end = pattern.search(text).span()  # type: ignore[union-attr]
        opening = f"<!-- reference:{name} -->\n"
        closing = f"<!-- /reference:{name} -->"
        text = text[:start] + opening + make() + "\n" + closing + text[end:]
    return text


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference.md")
    path.write_text(render(path.read_text()))
