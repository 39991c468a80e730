"""Credentials never leave the collector: not in logs, `/health`, `/status` or client messages.

Errors from the lake quote their connection string (DuckDB's PostgreSQL extension says
`Unable to connect to Postgres at "postgresql://user:PASSWORD@host/db"`). Every text that can
carry one goes through `scrub` before it is logged, stored or sent: the known secrets (the
lake's password, the bearer token) are replaced, and so is anything shaped like a password
(`scheme://user:PASSWORD@`, libpq's `password=...`), whatever it belongs to.
"""

from __future__ import annotations

import json
import re
import threading
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"

_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s\"']*:)[^@\s\"']+@")
_KEY_PASSWORD = re.compile(
    r"(\b(?:password|passwd|pwd|token|secret)\s*=\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;\"']+)",
    re.IGNORECASE,
)

_lock = threading.Lock()
_known: set[str] = set()


def register(secret: str | None) -> None:
    """Remember a secret so that `scrub` removes it wherever it appears (process-wide)."""
    if not secret or len(secret) < 3:  # a one-letter "secret" would mask half of every line
        return
    forms = {secret, json.dumps(secret)[1:-1]}  # as is, and as it appears inside JSON text
    with _lock:
        _known.update(forms)


def register_connection_string(spec: str) -> None:
    """Register the password a lake or database connection string carries, if any."""
    text = spec.strip()
    if "://" in text:
        parts = urlsplit(text.removeprefix("postgres:") if text.startswith("postgres:") else text)
        if parts.password:
            register(parts.password)
            register(unquote(parts.password))
        for key, value in parse_qsl(parts.query):
            if key.lower() in ("password", "sslpassword"):
                register(value)
    for match in _KEY_PASSWORD.finditer(text):
        register(match.group(2).strip("'\""))


def scrub(text: str) -> str:
    """`text` with every credential replaced by `***`."""
    with _lock:
        known = sorted(_known, key=len, reverse=True)  # longest first: no partial leftovers
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text)
    return _KEY_PASSWORD.sub(rf"\g<1>{MASK}", text)


def describe_error(exc: BaseException) -> str:
    """`Type: message` of an exception, scrubbed."""
    return scrub(f"{type(exc).__name__}: {exc}")
