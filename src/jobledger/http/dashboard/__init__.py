"""The dashboard: server-rendered pages (Jinja2, autoescaped) over the ledger, for operators.
Logins with API keys (``read`` or ``admin``) become HttpOnly, SameSite=Strict session cookies;
every form that changes something carries a CSRF token. See docs/observability.md."""
