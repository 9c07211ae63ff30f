"""Dashboard logins: the same API keys as the HTTP API, exchanged for a session cookie.

- **Login.** The form takes an API key with ``read`` or ``admin``. The server makes a random
  session token, stores only its SHA-256 digest (``jobledger_sessions``) with the key's id, and
  sets it as an ``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` when the request came over
  HTTPS). The key itself is never stored in the browser.
- **Every request** looks the session up and checks its key again: revoking the key ends its
  sessions at once. Logging out deletes the session.
- **CSRF.** Every form that changes something carries a token derived from the session token
  (a SHA-256 of it; the cookie is HttpOnly, so a script on another site can read neither) and is
  refused (403) without it, or with a cross-origin ``Origin``. The login form itself is
  protected the same way by a short-lived cookie of its own (double submit).
- **Scopes.** ``read``: every page, no action. ``admin``: the actions too (redrive, resolve,
  cancel). Other keys cannot log in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..._records import ApiKey
from ..state import ServerState
from .render import page, secure

__all__ = ["Form", "Viewer", "login_page", "login_submit", "logout", "require_viewer", "submit"]

SESSION_COOKIE = "jobledger_session"
LOGIN_COOKIE = "jobledger_login"
FORM_LIMIT = 64 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"


def csrf_token(secret: str) -> str:
    return hashlib.sha256(f"jobledger-csrf:{secret}".encode()).hexdigest()


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the API key of the session."""

    key: ApiKey
    token: str

    @property
    def csrf(self) -> str:
        return csrf_token(self.token)

    @property
    def can_act(self) -> bool:
        return self.key.is_admin

    @property
    def actor(self) -> str:
        """How this person is named in a job's history."""
        return f"{self.key.name} (dashboard) via {self.key.actor}"


class Form:
    """A posted urlencoded form."""

    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields

    def get(self, name: str, default: str = "") -> str:
        values = self.fields.get(name)
        return values[-1].strip() if values else default

    def getlist(self, name: str) -> list[str]:
        return [v.strip() for v in self.fields.get(name, []) if v.strip()]


class Refused(Exception):
    """A request the dashboard answers with an error page (or a redirect)."""

    def __init__(self, response: Response):
        self.response = response


def _error(status: int, title: str, detail: str, viewer: Viewer | None = None) -> Refused:
    return Refused(
        page(
            "error.html",
            status=status,
            title=title,
            detail=detail,
            viewer=viewer,
            csrf=viewer.csrf if viewer else "",
            nav="",
        )
    )


def _state(request: Request) -> ServerState:
    return request.app.state.jobledger  # type: ignore[no-any-return]


async def current_viewer(request: Request) -> Viewer | None:
    token = request.cookies.get(SESSION_COOKIE)
    if not token or len(token) > 200:
        return None
    key = await run_in_threadpool(_state(request).ledger.sessions.key_of, token)
    if key is None or not key.can_read:
        return None
    return Viewer(key, token)


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return secure(RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303))


async def require_viewer(request: Request) -> Viewer:
    """The viewer of a page; not logged in → redirect to the login form."""
    viewer = await current_viewer(request)
    if viewer is None:
        raise Refused(_login_redirect(request))
    return viewer


def same_origin(request: Request) -> bool:
    """False when the browser says the request came from another site (``Sec-Fetch-Site``,
    ``Origin``). Clients that send neither are judged by the CSRF token alone."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


async def read_form(request: Request) -> Form:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != FORM_TYPE:
        raise _error(415, "Unsupported form", f"forms are posted as {FORM_TYPE}")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > FORM_LIMIT):
        raise _error(413, "Form too large", f"a form may carry at most {FORM_LIMIT} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_LIMIT:
            raise _error(413, "Form too large", f"a form may carry at most {FORM_LIMIT} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(400, "Bad form", "the form is not UTF-8") from None
    return Form(parse_qs(text, keep_blank_values=True, max_num_fields=2000))


async def submit(request: Request, admin: bool = True) -> tuple[Viewer, Form]:
    """A form post that changes something: a session, a valid CSRF token, a same-origin request
    and (``admin``) an admin key — else an error page, and nothing changes."""
    viewer = await current_viewer(request)
    if viewer is None:
        raise _error(401, "Not logged in", "log in again; nothing was changed")
    form = await read_form(request)
    sent = form.get("csrf")
    if not same_origin(request) or not sent or not hmac.compare_digest(sent, viewer.csrf):
        raise _error(
            403,
            "Refused: missing or wrong CSRF token",
            "this form did not come from a page of this dashboard (or the page is out of date: "
            "reload it); nothing was changed",
            viewer,
        )
    if admin and not viewer.can_act:
        raise _error(
            403,
            "Read-only key",
            f"API key {viewer.key.id} has the read scope: actions need an admin key; nothing "
            "was changed",
            viewer,
        )
    return viewer, form


def safe_next(target: str | None) -> str:
    """Only a path of this site: never another host (``//evil``, ``https://…``, ``/\\evil``)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    if any(ord(ch) < 32 for ch in target):
        return "/"
    return target


async def login_page(request: Request) -> Response:
    target = safe_next(request.query_params.get("next"))
    if await current_viewer(request) is not None:
        return secure(RedirectResponse(target, status_code=303))
    return _login_form(request, target)


def _login_form(
    request: Request, target: str, error: str | None = None, status: int = 200
) -> Response:
    nonce = secrets.token_urlsafe(24)
    response = page(
        "login.html", status=status, viewer=None, next=target, csrf=csrf_token(nonce), error=error
    )
    _set_cookie(request, response, LOGIN_COOKIE, nonce, max_age=3600, path="/ui/login")
    return response


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int, path: str = "/"
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def login_submit(request: Request) -> Response:
    state = _state(request)
    try:
        form = await read_form(request)
    except Refused as refused:
        return refused.response
    target = safe_next(form.get("next"))
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    sent = form.get("csrf")
    if (
        not nonce
        or not sent
        or not same_origin(request)
        or not hmac.compare_digest(sent, csrf_token(nonce))
    ):
        return _login_form(
            request, target, "The login form expired or came from elsewhere: try again.", 403
        )
    presented = form.get("key")
    key = await run_in_threadpool(state.ledger.keys.authenticate, presented) if presented else None
    if key is None:
        return _login_form(request, target, "That API key is unknown or revoked.", 401)
    if not key.can_read:
        return _login_form(
            request,
            target,
            f"API key {key.id} cannot open the dashboard: it needs the read or admin scope.",
            403,
        )
    token = await run_in_threadpool(state.ledger.sessions.open, key, state.settings.session_seconds)
    response = secure(RedirectResponse(target, status_code=303))
    _set_cookie(request, response, SESSION_COOKIE, token, int(state.settings.session_seconds))
    response.delete_cookie(LOGIN_COOKIE, path="/ui/login")
    return response


async def logout(request: Request) -> Response:
    try:
        viewer, _ = await submit(request, admin=False)
    except Refused as refused:
        if refused.response.status_code == 401:
            return secure(RedirectResponse("/ui/login", status_code=303))
        return refused.response
    await run_in_threadpool(_state(request).ledger.sessions.close, viewer.token)
    response = secure(RedirectResponse("/ui/login", status_code=303))
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def context(viewer: Viewer, **values: Any) -> dict[str, Any]:
    """What every page's template gets."""
    return {"viewer": viewer, "csrf": viewer.csrf, **values}
