"""The dashboard's pages and actions. Each page reads through the ledger (or the server's cached
snapshot) on a worker thread and renders a template; each action is a form post checked by
``session.submit`` (session, CSRF token, same origin, admin) and answered with a redirect."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..._records import GroupLimits, GroupStatus, JobFilter, JobState
from ...errors import (
    BackendUnavailable,
    ConfigError,
    InvalidTransition,
    JobledgerError,
    NotFound,
    PayloadError,
)
from ..models import parse_id
from ..observe import observe
from ..problems import RETRY_AFTER_UNAVAILABLE
from ..state import ServerState
from .charts import throughput_chart, wait_chart
from .diagnosis import diagnose
from .render import page, secure
from .session import Form, Refused, Viewer, context, require_viewer, submit
from .subscriptions import load_subscriptions
from .timeline import attempt_timeline

if TYPE_CHECKING:
    from ..._ledger import Ledger

log = logging.getLogger("jobledger.http")

Handler = Callable[[Request], Awaitable[Response]]

#: Dead letters listed on one page, and redriven at most by one "all matching".
DEAD_PAGE = 200
REDRIVE_ALL_LIMIT = 1000
JOBS_PAGE = 50
#: Groups shown on a queue's page: the paused ones first, then the busiest.
GROUPS_SHOWN = 100
STATES = tuple(s.value for s in JobState)


def _state(request: Request) -> ServerState:
    return request.app.state.jobledger  # type: ignore[no-any-return]


def handles(fn: Handler) -> Handler:
    """Turn refusals and ledger errors into error pages; never a traceback."""

    @functools.wraps(fn)
    async def wrapper(request: Request) -> Response:
        try:
            return await fn(request)
        except Refused as refused:
            return refused.response
        except NotFound as exc:
            return page("error.html", status=404, title="Not found", detail=str(exc), viewer=None)
        except InvalidTransition as exc:
            return page("error.html", 409, title="Not possible now", detail=str(exc), viewer=None)
        except (ConfigError, PayloadError) as exc:
            return page("error.html", 422, title="Invalid", detail=str(exc), viewer=None)
        except BackendUnavailable as exc:
            log.warning("dashboard: database unavailable: %s", exc)
            response = page(
                "error.html",
                503,
                title="Database unavailable",
                detail="the ledger's database does not answer; try again shortly",
                viewer=None,
            )
            response.headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE)
            return response
        except JobledgerError as exc:
            log.error("dashboard: %s: %s", type(exc).__name__, exc)
            return page("error.html", 500, title="Error", detail=str(exc), viewer=None)

    return wrapper


def _redirect(path: str, **query: Any) -> Response:
    params = {k: v for k, v in query.items() if v not in (None, "")}
    target = f"{path}?{urlencode(params)}" if params else path
    return secure(RedirectResponse(target, status_code=303))


def _job_id(request: Request) -> int:
    text = request.path_params.get("job_id", "")
    job_id = parse_id(text)
    if job_id is None:
        raise NotFound(f"no job with id {text!r}")
    return job_id


def _ids(form: Form) -> list[int]:
    """The job ids a form selected; anything else (not digits, beyond the id range) is left out."""
    return [i for i in map(parse_id, form.getlist("id")) if i is not None]


async def _charts(request: Request, queue: str | None) -> dict[str, Any]:
    obs = observe(_state(request))
    read_at, rows = await run_in_threadpool(obs.last_hour)
    by_queue: dict[str, dict[str, float]] = {}
    for row in rows:
        entry = by_queue.setdefault(row.queue, {"done": 0, "claimed": 0, "wait_sum": 0.0})
        entry["done"] += row.done
        entry["claimed"] += row.claimed
        entry["wait_sum"] += row.wait_sum
    return {
        "throughput": throughput_chart(rows, read_at, queue),
        "wait": wait_chart(rows, read_at, queue),
        "last_hour": by_queue,
    }


async def _live_page(
    request: Request, template: str, viewer: Viewer, queue: str | None, **values: Any
) -> Response:
    """A page of the queues that refreshes itself: with the last hour's charts of ``queue``
    (None: every queue), the refresh interval and the time it was drawn."""
    charts = await _charts(request, queue)
    return page(
        template,
        **context(
            viewer,
            nav="queues",
            refresh=_state(request).settings.dashboard_refresh_seconds,
            now=datetime.now(UTC),
            **charts,
            **values,
        ),
    )


# -- pages ---------------------------------------------------------------------------------------


@handles
async def overview(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    snap = await run_in_threadpool(observe(state).snapshots.get)
    return await _live_page(request, "overview.html", viewer, None, snap=snap)


@handles
async def queue_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    name = request.path_params["name"]
    wanted = request.query_params.get("state", "pending")
    if wanted not in STATES:
        wanted = "pending"
    snap = await run_in_threadpool(observe(state).snapshots.get)
    view = snap.queue(name)
    order = {"pending": "run_at", "leased": "id"}.get(wanted, "updated")
    jobs = await run_in_threadpool(
        state.ledger.jobs,
        JobFilter(queue=name, states=(JobState(wanted),), limit=JOBS_PAGE + 1),
        order,
    )
    if view is None and not jobs:
        raise NotFound(f"no queue named {name!r} has jobs or is declared")
    limits, groups = await run_in_threadpool(_groups, state, name)
    return await _live_page(
        request,
        "queue.html",
        viewer,
        name,
        name=name,
        view=view,
        wanted=wanted,
        states=STATES,
        jobs=jobs[:JOBS_PAGE],
        more=len(jobs) > JOBS_PAGE,
        limits=limits,
        groups=groups[:GROUPS_SHOWN],
        groups_total=len(groups),
        snap=snap,
    )


def _groups(state: ServerState, queue: str) -> tuple[GroupLimits, list[GroupStatus]]:
    """The queue's group limits and its groups: paused first, then by due and leased jobs."""
    rows = state.ledger.groups(queue)
    rows.sort(key=lambda g: (g.paused_until is None, -(g.due + g.leased), g.name))
    return state.ledger.group_limits(queue), rows


@handles
async def job_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    history = await run_in_threadpool(state.ledger.history, _job_id(request))
    now = datetime.now(UTC)
    job = history.job
    group, limits = None, None
    if job.group is not None and job.state is JobState.PENDING:
        limits, groups = await run_in_threadpool(_groups, state, job.queue)
        group = next((g for g in groups if g.name == job.group), None)
    return page(
        "job.html",
        **context(
            viewer,
            nav="",
            job=job,
            history=history,
            diagnosis=diagnose(job, history.attempts, now, group, limits),
            timeline=attempt_timeline(history.attempts, job, now),
            notice=request.query_params.get("done"),
            refresh=state.settings.dashboard_refresh_seconds,
            now=now,
        ),
    )


def _dead_filter(params: Any, limit: int) -> JobFilter:
    return JobFilter(
        queue=params.get("queue") or None,
        states=(JobState.DEAD,),
        task=params.get("task") or None,
        key_prefix=params.get("key") or None,
        error_contains=params.get("error") or None,
        limit=limit,
    )


@handles
async def dead_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    q = request.query_params
    filters = {k: q.get(k, "").strip() for k in ("queue", "task", "key", "error")}
    jobs = await run_in_threadpool(
        state.ledger.jobs, _dead_filter(filters, DEAD_PAGE + 1), "updated"
    )
    snap = await run_in_threadpool(observe(state).snapshots.get)
    return page(
        "dead.html",
        **context(
            viewer,
            nav="dead",
            filters=filters,
            jobs=jobs[:DEAD_PAGE],
            more=len(jobs) > DEAD_PAGE,
            queues=[v.name for v in snap.queues if v.dead],
            redriven=q.get("redriven"),
            skipped=q.get("skipped"),
            resolved=q.get("resolved"),
            limit=REDRIVE_ALL_LIMIT,
            now=datetime.now(UTC),
        ),
    )


@handles
async def schedules_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    snap = await run_in_threadpool(observe(state).snapshots.get)
    return page(
        "schedules.html",
        **context(viewer, nav="schedules", snap=snap, now=datetime.now(UTC)),
    )


@handles
async def subscriptions_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    subscriptions = await run_in_threadpool(load_subscriptions, _state(request))
    return page(
        "subscriptions.html",
        **context(viewer, nav="subscriptions", subscriptions=subscriptions),
    )


@handles
async def search_page(request: Request) -> Response:
    viewer = await require_viewer(request)
    state = _state(request)
    text = request.query_params.get("key", "").strip()
    jobs: list[Any] = []
    tombstones: list[Any] = []
    if text:
        reads = state.ledger.job_reads
        jobs = await run_in_threadpool(reads.with_key, text)
        tombstones = await run_in_threadpool(reads.tombstones, text)
        job_id = parse_id(text)
        if job_id is not None:
            by_id = await run_in_threadpool(reads.get, job_id)
            if by_id is not None and all(j.id != by_id.id for j in jobs):
                jobs.append(by_id)
    return page(
        "search.html",
        **context(viewer, nav="search", text=text, jobs=jobs, tombstones=tombstones),
    )


# -- actions -------------------------------------------------------------------------------------


def _required(value: str, what: str) -> str:
    if not value:
        raise ConfigError(f"{what} is required: it is recorded in the job's history")
    return value


@handles
async def dead_redrive(request: Request) -> Response:
    viewer, form = await submit(request)
    state = _state(request)
    reason = _required(form.get("reason"), "a reason")
    filters = {k: form.get(k) for k in ("queue", "task", "key", "error")}
    if form.get("scope") == "all":
        if not filters["queue"]:
            raise ConfigError("choose a queue to redrive all its dead letters")
        ids = None
        where = _dead_filter(filters, REDRIVE_ALL_LIMIT)
    else:
        ids = _ids(form)
        if not ids:
            raise ConfigError("select at least one dead letter, or redrive all matching")
        where = JobFilter(states=(JobState.DEAD,))
    result = await run_in_threadpool(
        lambda: state.ledger.redrive(actor=viewer.actor, reason=reason, ids=ids, where=where)
    )
    observe(state).snapshots.invalidate()
    return _redirect(
        "/ui/dead", **filters, redriven=len(result.ids), skipped=len(result.skipped) or None
    )


@handles
async def dead_resolve(request: Request) -> Response:
    viewer, form = await submit(request)
    state = _state(request)
    note = _required(form.get("note"), "a note")
    ids = _ids(form)
    if not ids:
        raise ConfigError("select at least one dead letter to resolve")
    resolved = 0
    for job_id in ids:
        try:
            await run_in_threadpool(
                functools.partial(
                    state.ledger.resolve, job_id, actor=viewer.actor, note=note, only_dead=True
                )
            )
            resolved += 1
        except (InvalidTransition, NotFound):
            continue  # redriven or resolved by someone else meanwhile
    observe(state).snapshots.invalidate()
    filters = {k: form.get(k) for k in ("queue", "task", "key", "error")}
    return _redirect("/ui/dead", **filters, resolved=resolved)


async def _act_on_job(
    request: Request, done: str, act: Callable[[Ledger, Viewer, Form, int], object]
) -> Response:
    """A form post about one job: checked by ``submit``, then ``act`` on a worker thread, then
    back to the job's page saying what was ``done``."""
    viewer, form = await submit(request)
    state = _state(request)
    job_id = _job_id(request)
    await run_in_threadpool(act, state.ledger, viewer, form, job_id)
    observe(state).snapshots.invalidate()
    return _redirect(f"/ui/jobs/{job_id}", done=done)


def _redrive(ledger: Ledger, viewer: Viewer, form: Form, job_id: int) -> None:
    reason = _required(form.get("reason"), "a reason")
    result = ledger.redrive(
        actor=viewer.actor,
        reason=reason,
        ids=[job_id],
        where=JobFilter(states=(JobState.DEAD, JobState.CANCELLED)),
    )
    if not result.ids:
        raise InvalidTransition(f"job {job_id} is not dead or cancelled: nothing to redrive")


def _resolve(ledger: Ledger, viewer: Viewer, form: Form, job_id: int) -> None:
    note = _required(form.get("note"), "a note")
    target = form.get("state", "done")
    if target not in ("done", "pending"):
        raise ConfigError("resolve to done or pending")
    ledger.resolve(job_id, actor=viewer.actor, note=note, state=target)


def _cancel(ledger: Ledger, viewer: Viewer, form: Form, job_id: int) -> None:
    reason = _required(form.get("reason"), "a reason")
    ledger.cancel(job_id, actor=viewer.actor, reason=reason)


@handles
async def job_redrive(request: Request) -> Response:
    return await _act_on_job(request, "redriven", _redrive)


@handles
async def job_resolve(request: Request) -> Response:
    return await _act_on_job(request, "resolved", _resolve)


@handles
async def job_cancel(request: Request) -> Response:
    return await _act_on_job(request, "cancelled", _cancel)


__all__ = [
    "Viewer",
    "dead_page",
    "dead_redrive",
    "dead_resolve",
    "job_cancel",
    "job_page",
    "job_redrive",
    "job_resolve",
    "overview",
    "queue_page",
    "schedules_page",
    "search_page",
    "subscriptions_page",
]
