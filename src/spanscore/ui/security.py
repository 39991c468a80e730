"""Who may use the app, and what a page may do.

- Loopback by default. A non-loopback bind needs a token (the command refuses otherwise).
- With tokens, every request carries one: `Authorization: Bearer T`, or the cookie that the
  sign-in URL (`/?token=T`, printed by `spanscore ui`) sets, HttpOnly and SameSite=Strict.
  A token given as `NAME:SECRET` names its reviewer.
- A write (any method but GET and HEAD) must also come from the app's own origin (its
  `Origin`, else its `Referer`) and send JSON: a page elsewhere can neither post a form to it
  nor read its answer.
- Every answer carries a Content-Security-Policy that allows the app's own scripts and styles
  only, no inline script, no frame: a value from the lake that got into markup could not run.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "spanscore_token"
REVIEWER_COOKIE = "spanscore_reviewer"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


@dataclass(frozen=True)
class Token:
    secret: str
    name: str | None  # the reviewer it names, if any

    @classmethod
    def parse(cls, text: str) -> Token:
        name, sep, secret = text.partition(":")
        if sep and name and secret:
            return cls(secret, name)
        return cls(text, None)


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def matching_token(tokens: list[Token], given: str | None) -> Token | None:
    """The token whose secret `given` is (compared in constant time), or None."""
    if not given:
        return None
    for token in tokens:
        if hmac.compare_digest(token.secret.encode(), given.encode()):
            return token
    return None


def bearer(request: Request) -> str | None:
    """The secret of the request's `Authorization: Bearer ...` header, if it has one."""
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def new_token() -> str:
    return secrets.token_urlsafe(24)


def default_reviewer() -> str:
    for key in ("SPANSCORE_REVIEWER", "USER", "LOGNAME"):
        if os.environ.get(key):
            return os.environ[key]
    return "reviewer"


class Guard:
    """ASGI middleware: tokens, same-origin writes, security headers (see the module doc)."""

    def __init__(self, app: ASGIApp, tokens: list[Token]) -> None:
        self.app = app
        self.tokens = tokens

    def _token(self, given: str | None) -> Token | None:
        return matching_token(self.tokens, given)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in HEADERS.items():
                    headers.setdefault(key, value)
            await send(message)

        token: Token | None = None
        if self.tokens:
            offered = request.query_params.get("token")
            token = self._token(offered)
            if token is not None and request.method in ("GET", "HEAD"):
                # The sign-in URL: keep the token in a cookie, not in the address bar.
                target = request.url.remove_query_params("token")
                path = target.path + (f"?{target.query}" if target.query else "")
                response: Response = RedirectResponse(path, status_code=303)
                response.set_cookie(
                    COOKIE,
                    token.secret,
                    httponly=True,
                    samesite="strict",
                    secure=request.url.scheme == "https",
                )
                await response(scope, receive, send_with_headers)
                return
            token = self._token(bearer(request)) or self._token(request.cookies.get(COOKIE))
            if token is None:
                response = JSONResponse(
                    {
                        "error": "this app needs its token: open the URL `spanscore ui` printed, "
                        "or send Authorization: Bearer TOKEN"
                    },
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
                await response(scope, receive, send_with_headers)
                return
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            problem = _cross_site(request)
            if problem:
                await JSONResponse({"error": problem}, status_code=403)(
                    scope, receive, send_with_headers
                )
                return
        scope.setdefault("state", {})["token_name"] = token.name if token else None
        await self.app(scope, receive, send_with_headers)


def _cross_site(request: Request) -> str | None:
    """Why a write is refused as possibly cross-site (None: it is the app's own)."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return "a write must come from the app's own pages (no Origin or Referer was sent)"
    if urlsplit(origin).netloc != host:
        return f"a write must come from the app's own origin, not {urlsplit(origin).netloc!r}"
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/json":
        return "a write sends JSON (Content-Type: application/json)"
    return None


def reviewer_of(request: Request, fallback: str) -> str:
    """The reviewer: the token's name, else the name the session chose, else `fallback`."""
    named = request.scope.get("state", {}).get("token_name")
    if named:
        return str(named)
    chosen = request.cookies.get(REVIEWER_COOKIE, "").strip()
    return chosen[:100] if chosen else fallback
