"""Structured logs: `key=value` text or one JSON object per line, with the `extra` fields.

Every line is scrubbed of credentials (`secrets.scrub`) after it is formatted, so that nothing
a log call or a traceback quotes can leak one.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from .secrets import scrub

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _when(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
        f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": _when(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return scrub(json.dumps(doc, default=str))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_when(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return scrub(line)


def configure_logging(fmt: str = "text", level: str = "info") -> None:
    """Log to stderr in the chosen format; replaces handlers set by an earlier call."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("spanscore")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
