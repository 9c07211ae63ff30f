"""The dashboard: ``/`` and ``/ui/…``, server-rendered pages for operators (see
docs/observability.md). Kept out of the OpenAPI document; its scripts and styles are served from
the package (``/ui/static``), nothing from elsewhere."""

from __future__ import annotations

from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..api import RouteGroup
from ..dashboard import session, views

group = RouteGroup("dashboard", "The operators' web UI.")

group.raw_routes.extend(
    [
        Route("/", views.overview, methods=["GET"], name="dashboard"),
        Route("/ui/login", views.handles(session.login_page), methods=["GET"]),
        Route("/ui/login", views.handles(session.login_submit), methods=["POST"]),
        Route("/ui/logout", views.handles(session.logout), methods=["POST"]),
        Route("/ui/queues/{name}", views.queue_page, methods=["GET"]),
        Route("/ui/jobs/{job_id}", views.job_page, methods=["GET"]),
        Route("/ui/jobs/{job_id}/redrive", views.job_redrive, methods=["POST"]),
        Route("/ui/jobs/{job_id}/resolve", views.job_resolve, methods=["POST"]),
        Route("/ui/jobs/{job_id}/cancel", views.job_cancel, methods=["POST"]),
        Route("/ui/dead", views.dead_page, methods=["GET"]),
        Route("/ui/dead/redrive", views.dead_redrive, methods=["POST"]),
        Route("/ui/dead/resolve", views.dead_resolve, methods=["POST"]),
        Route("/ui/schedules", views.schedules_page, methods=["GET"]),
        Route("/ui/subscriptions", views.subscriptions_page, methods=["GET"]),
        Route("/ui/search", views.search_page, methods=["GET"]),
        Mount(
            "/ui/static",
            StaticFiles(packages=[("jobledger.http.dashboard", "static")]),
            name="dashboard-static",
        ),
    ]
)
