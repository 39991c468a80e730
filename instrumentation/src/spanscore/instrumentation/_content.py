"""What content leaves the process: a switch per kind, and redaction before export.

This product evaluates tool calls, so tool arguments, tool results and model messages are
captured by default (unlike upstream GenAI instrumentations, where content is opt-in). Each kind
can be switched off, and a redaction hook (key patterns, or a callable) is applied to every
value our shims record, before it reaches an exporter.

Environment (read once, when `instrument()` runs; its arguments win):
    SPANSCORE_CAPTURE_TOOL_ARGUMENTS   true (default) / false
    SPANSCORE_CAPTURE_TOOL_RESULTS     true (default) / false
    SPANSCORE_CAPTURE_MESSAGES         true (default) / false
    SPANSCORE_REDACT_KEYS              comma-separated key patterns, `*` wildcard
                                       (e.g. ``email,card_number,*token*``)
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("spanscore.instrumentation")

Kind = Literal["tool_arguments", "tool_results", "messages"]
Redactor = Callable[[str, Any], Any]  # (kind, value) -> value to record
REDACTED = "[REDACTED]"


def flag(name: str, default: bool = True) -> bool:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    log.warning("%s=%r is not true or false; using %s", name, raw, default)
    return default


@dataclass(frozen=True)
class ContentPolicy:
    tool_arguments: bool = True
    tool_results: bool = True
    messages: bool = True
    redact_keys: tuple[str, ...] = ()
    redactor: Redactor | None = field(default=None, compare=False)

    @classmethod
    def from_environment(
        cls,
        *,
        capture_tool_arguments: bool | None = None,
        capture_tool_results: bool | None = None,
        capture_messages: bool | None = None,
        redact: Sequence[str] | Redactor | None = None,
    ) -> ContentPolicy:
        keys: tuple[str, ...] = tuple(
            k.strip() for k in os.environ.get("SPANSCORE_REDACT_KEYS", "").split(",") if k.strip()
        )
        redactor: Redactor | None = None
        if callable(redact):
            redactor = redact
        elif redact is not None:
            keys = tuple(redact)
        return cls(
            tool_arguments=_choose(capture_tool_arguments, "SPANSCORE_CAPTURE_TOOL_ARGUMENTS"),
            tool_results=_choose(capture_tool_results, "SPANSCORE_CAPTURE_TOOL_RESULTS"),
            messages=_choose(capture_messages, "SPANSCORE_CAPTURE_MESSAGES"),
            redact_keys=keys,
            redactor=redactor,
        )

    def _redact_keys(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: REDACTED if self._matches(k) else self._redact_keys(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._redact_keys(v) for v in value]
        return value

    def _matches(self, key: Any) -> bool:
        text = str(key).lower()
        return any(fnmatch.fnmatchcase(text, p.lower()) for p in self.redact_keys)

    def record(self, kind: Kind, value: Any) -> Any:
        """The value to record for `kind`, redacted; None when it must not be recorded.

        JSON text stays JSON text. A failing user redactor records nothing (never the raw value).
        """
        if value is None or not getattr(self, kind):
            return None
        if not self.redact_keys and self.redactor is None:
            return value
        was_text = isinstance(value, str)
        parsed: Any = value
        if was_text:
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = value
        if self.redact_keys:
            parsed = self._redact_keys(parsed)
        if self.redactor is not None:
            try:
                parsed = self.redactor(kind, parsed)
            except Exception:
                log.warning("the redaction hook failed; %s not recorded", kind, exc_info=True)
                return None
        if was_text and not isinstance(parsed, str):
            return json.dumps(parsed, ensure_ascii=False, default=str)
        return parsed


def _choose(explicit: bool | None, variable: str) -> bool:
    return explicit if explicit is not None else flag(variable)


_policy = ContentPolicy()


def content_policy() -> ContentPolicy:
    """The policy our shims apply: set by `instrument()`; from the environment when a shim is
    instrumented on its own (by the application, or by `opentelemetry-instrument`)."""
    return _policy


def set_content_policy(policy: ContentPolicy) -> None:
    global _policy
    _policy = policy
