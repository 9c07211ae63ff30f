"""Operator actions: redrive, resolve, cancel — each recorded in the job's history (SPEC §2)."""

from __future__ import annotations

import math
from datetime import date, datetime

import pytest

from jobledger import ConfigError, InvalidTransition, JobFilter, JobState, NotFound
from jobledger._records import Failure, QueueSettings, SubscriptionState

from .conftest import T0, at, enqueue, lease_of


def make_dead(ledger, n: int, message: str = "HTTP 400: bad request", now=T0) -> int:
    job_id = enqueue(ledger, n, now=now)
    [job] = [j for j in ledger.backend.jobs.claim(["q"], "w", 100, now=now) if j.id == job_id]
    ledger.backend.jobs.fail([Failure(lease_of(job), False, None, "HTTP 400", message)], now=now)
    return job_id


def test_redrive_gives_a_fresh_budget_and_keeps_history(api, tasks):
    job_id = make_dead(api, 1)
    result = api.redrive(
        ids=[job_id], actor="ana", reason="provider fixed the template", now=at(60)
    )
    assert result.ids == [job_id] and not result.dry_run
    row = api.job(job_id)
    assert (
        row.state is JobState.PENDING
        and row.run_at == at(60)
        and row.attempts == 1
        and row.budget_left == 3
    )
    [event] = api.backend.history.events(job_id)
    assert (event.kind, event.actor, event.note, event.at) == (
        "redrive",
        "ana",
        "provider fixed the template",
        at(60),
    )
    [job] = api.backend.jobs.claim(["q"], "w", 1, now=at(60))
    assert job.attempt == 2 and len(api.backend.history.attempts(job_id)) == 2


def test_redrive_filters_and_dry_run(api, tasks):
    a = make_dead(api, 1, "HTTP 400: template missing")
    b = make_dead(api, 2, "HTTP 401: bad credentials")
    enqueue(api, 3)  # pending: never redriven
    preview = api.redrive(
        where=JobFilter(queue="q", error_contains="template"), actor="ana", reason="r", dry_run=True
    )
    assert preview.ids == [a] and preview.dry_run
    assert api.job(a).state is JobState.DEAD  # dry run moved nothing
    everything = api.redrive(where=JobFilter(queue="q"), actor="ana", reason="r", now=at(5))
    assert everything.ids == [a, b]


def test_redrive_without_states_takes_dead_jobs_only_not_cancelled_ones(api, tasks):
    """A filter that names no state means dead jobs: a cancelled job was withdrawn on purpose,
    and only a redrive that names the cancelled state (or its id with it) brings it back."""
    dead = make_dead(api, 1)
    cancelled = enqueue(api, 2)
    api.cancel(cancelled, actor="ana", reason="customer left", now=at(1))
    enqueue(api, 3)  # pending
    everything = JobFilter(queue="q")
    preview = api.redrive(where=everything, actor="ana", reason="r", dry_run=True)
    assert preview.ids == [dead]
    assert api.redrive(where=everything, actor="ana", reason="r", now=at(5)).ids == [dead]
    assert api.redrive(ids=[cancelled], actor="ana", reason="r", now=at(6)).ids == []
    assert api.job(cancelled).state is JobState.CANCELLED


def test_redrive_reports_as_skipped_a_job_resolved_after_it_was_matched(api, tasks):
    """A job that an operator resolves while a redrive runs is left as the operator made it,
    and the redrive says it skipped it rather than that it moved it."""
    first, second = make_dead(api, 1), make_dead(api, 2)

    calls = []

    def resolve_the_second(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 1:  # after the first batch, before the second
            api.backend.history.resolve(second, JobState.DONE, "bob", "checked", at(2))

    result = api.redrive(
        ids=[first, second], actor="ana", reason="r", batch=1, progress=resolve_the_second
    )
    assert (result.ids, result.skipped, result.left) == ([first], [second], [])
    assert api.job(second).state is JobState.DONE


def test_redrive_with_a_rate_reports_progress(api, tasks):
    ids = [make_dead(api, n) for n in range(6)]
    progress = []
    result = api.redrive(
        ids=ids,
        actor="ana",
        reason="r",
        rate=1000,
        batch=2,
        progress=lambda done, total: progress.append((done, total)),
    )
    assert result.ids == ids and progress[-1] == (6, 6) and len(progress) >= 3


def test_redrive_skips_what_is_no_longer_dead(api, tasks):
    job_id = make_dead(api, 1)
    assert api.backend.history.redrive([job_id], "ana", "first", now=at(1)) == [job_id]
    assert api.backend.history.redrive([job_id], "bob", "second", now=at(2)) == []
    assert [e.actor for e in api.backend.history.events(job_id)] == ["ana"]


def test_redrive_moves_only_dead_and_cancelled_jobs_whatever_the_filter_names(api, tasks):
    """A filter may name any state, but a redrive never moves a job that is pending, leased or
    done: a done job run again would repeat its effect, a leased one would be run twice."""
    leased, done = enqueue(api, 1), enqueue(api, 2)
    claimed = {j.id: j for j in api.backend.jobs.claim(["q"], "w", 2, now=T0)}
    api.backend.jobs.complete([lease_of(claimed[done])], now=T0)
    pending = enqueue(api, 3)
    others = (JobState.PENDING, JobState.LEASED, JobState.DONE)
    result = api.redrive(
        ids=[pending, leased, done], where=JobFilter(states=others), actor="ana", reason="r"
    )
    assert result.ids == []
    assert [api.job(i).state for i in (pending, leased, done)] == list(others)
    assert all(api.backend.history.events(i) == [] for i in (pending, leased, done))


def test_redrive_needs_actor_and_reason(api, tasks):
    with pytest.raises(ConfigError):
        api.redrive(ids=[1], actor="", reason="x")


@pytest.mark.parametrize("who", [("", "checked"), ("ana", "")], ids=["no-actor", "no-reason"])
def test_operator_actions_without_actor_or_reason_are_refused_and_change_nothing(api, tasks, who):
    """SPEC §2: every operator action is recorded with who did it and why, so one that lacks
    either is refused before it touches the job."""
    actor, why = who
    dead, pending = make_dead(api, 1), enqueue(api, 2)
    calls = [
        lambda: api.redrive(ids=[dead], actor=actor, reason=why),
        lambda: api.resolve(dead, actor=actor, note=why),
        lambda: api.cancel(pending, actor=actor, reason=why),
    ]
    for call in calls:
        with pytest.raises(ConfigError, match="needs an actor and a"):
            call()
    assert (api.job(dead).state, api.job(pending).state) == (JobState.DEAD, JobState.PENDING)
    assert api.backend.history.events(dead) == api.backend.history.events(pending) == []


@pytest.mark.parametrize(
    "options",
    [
        {"rate": 0},
        {"rate": -1},
        {"rate": math.inf},
        {"rate": math.nan},
        {"rate": True},
        {"budget": 0},
        {"budget": 1001},
    ],
    ids=str,
)
def test_redrive_refuses_a_rate_or_budget_out_of_range_and_moves_nothing(api, tasks, options):
    """A rate of zero would not pace the redrive at all (it would be read as no rate), an
    infinite one was an internal error, and a budget outside 1..1000 is none a task could
    have."""
    dead = make_dead(api, 1)
    with pytest.raises(ConfigError):
        api.redrive(ids=[dead], actor="ana", reason="r", **options)
    assert api.job(dead).state is JobState.DEAD and api.backend.history.events(dead) == []


def test_resolve_dead_to_done_with_a_note(api, tasks):
    job_id = make_dead(api, 1)
    row = api.resolve(
        job_id, actor="ana", note="checked the provider: message was delivered", now=at(9)
    )
    assert row.state is JobState.DONE and row.finished_at == at(9)
    [event] = api.backend.history.events(job_id)
    assert (event.kind, event.note, event.detail) == (
        "resolve",
        "checked the provider: message was delivered",
        {"state": "done"},
    )


def test_resolve_by_key_to_pending(api, tasks):
    job_id = make_dead(api, 1)
    row = api.resolve("k1", actor="ana", note="run it again", state="pending", now=at(9))
    assert row.id == job_id and row.state is JobState.PENDING and row.budget_left == 3


def test_resolve_of_a_pending_job_to_pending_gives_a_fresh_budget_and_makes_it_due(api, tasks):
    """A job that spent two of its three attempts and waits for its last retry: an operator who
    fixed the cause resolves it to pending, and it is due now with a fresh budget, as a dead
    job resolved to pending is (docs/concepts.md)."""
    job_id = enqueue(api, 1)
    for attempt in range(2):
        [job] = api.backend.jobs.claim(["q"], "w", 1, now=at(100 * attempt))
        failure = Failure(lease_of(job), True, at(100 * attempt + 50), "HTTP 503", "down")
        [result] = api.backend.jobs.fail([failure], now=at(100 * attempt))
        assert result.state is JobState.PENDING
    assert api.job(job_id).budget_left == 1
    row = api.resolve(job_id, actor="ana", note="provider is back", state="pending", now=at(120))
    assert row.state is JobState.PENDING and row.run_at == at(120) and row.budget_left == 3
    assert row.attempts == 2  # the attempts it made stay counted, and in its history


def test_resolve_only_dead_refuses_a_job_redriven_meanwhile(api, tasks):
    """What the dead letters page resolves: the jobs that are dead when the write happens. One
    that someone redrove after the page was read is pending again, and stays so, with its
    history unchanged; a dead one is resolved as without the option."""
    redriven, dead = make_dead(api, 1), make_dead(api, 2)
    api.redrive(ids=[redriven], actor="ana", reason="provider fixed", now=at(5))
    with pytest.raises(InvalidTransition, match="pending"):
        api.resolve(redriven, actor="bo", note="sent by hand", only_dead=True, now=at(6))
    assert api.job(redriven).state is JobState.PENDING
    assert [e.kind for e in api.backend.history.events(redriven)] == ["redrive"]
    row = api.resolve(dead, actor="bo", note="sent by hand", only_dead=True, now=at(6))
    assert row.state is JobState.DONE


def test_resolve_refuses_leased_and_done_jobs(api, tasks):
    job_id = enqueue(api, 1)
    [job] = api.backend.jobs.claim(["q"], "w", 1, now=T0)
    with pytest.raises(InvalidTransition, match="leased"):
        api.resolve(job_id, actor="ana", note="n")
    api.backend.jobs.complete([lease_of(job)], now=T0)
    with pytest.raises(InvalidTransition, match="done"):
        api.resolve(job_id, actor="ana", note="n")


def test_resolve_refuses_a_cancelled_job(api, tasks):
    """A cancelled job was withdrawn before it ran: resolve repairs dead and pending jobs only,
    and a mistaken cancel is undone by a redrive, recorded as such."""
    job_id = enqueue(api, 1)
    api.cancel(job_id, actor="ana", reason="customer left", now=at(1))
    before = api.job(job_id)
    for state in ("done", "pending"):
        with pytest.raises(InvalidTransition, match="cancelled"):
            api.resolve(job_id, actor="ana", note="n", state=state, now=at(2))
    assert api.job(job_id) == before
    assert [e.kind for e in api.backend.history.events(job_id)] == ["cancel"]


def test_cancel_pending_only(api, tasks):
    job_id = enqueue(api, 1)
    row = api.cancel(job_id, actor="ana", reason="customer left", now=at(1))
    assert row.state is JobState.CANCELLED
    assert api.backend.jobs.claim(["q"], "w", 1, now=at(2)) == []
    with pytest.raises(InvalidTransition):
        api.cancel(job_id, actor="ana", reason="again")
    assert [e.kind for e in api.backend.history.events(job_id)] == ["cancel"]
    # A mistaken cancel can be undone by a redrive.
    assert api.redrive(
        ids=[job_id], where=JobFilter(states=(JobState.CANCELLED,)), actor="ana", reason="undo"
    ).ids == [job_id]


def test_cancel_refuses_leased_dead_and_done_jobs(api, tasks):
    """The ledger looks at the job's state first; the backend's cancel refuses all the same, for
    a job can be claimed between that look and the cancel's write."""
    leased, done = enqueue(api, 1), enqueue(api, 2)
    claimed = {j.id: j for j in api.backend.jobs.claim(["q"], "w", 2, now=T0)}
    api.backend.jobs.complete([lease_of(claimed[done])], now=T0)
    dead = make_dead(api, 3)
    for job_id, state in ((leased, "leased"), (done, "done"), (dead, "dead")):
        with pytest.raises(InvalidTransition, match=state):
            api.cancel(job_id, actor="ana", reason="not needed")
        with pytest.raises(InvalidTransition, match=state):
            api.backend.history.cancel(job_id, "ana", "not needed")
        assert api.job(job_id).state is JobState(state)
        assert api.backend.history.events(job_id) == []


def test_unknown_job(api, tasks):
    with pytest.raises(NotFound):
        api.find("no-such-key")
    with pytest.raises(NotFound):
        api.job(12345)


def test_a_key_in_several_queues_is_found_only_with_its_queue(api, tasks):
    """Keys are unique per queue, not across queues: a key alone that names jobs in two queues
    is refused rather than taken to mean one of them, so no operator acts on the wrong job."""
    in_q, in_r = enqueue(api, 1), enqueue(api, 1, queue="r")
    with pytest.raises(NotFound, match=r"several queues \(q, r\); name the queue"):
        api.find("k1")
    with pytest.raises(NotFound, match="several queues"):
        api.cancel("k1", actor="ana", reason="not needed")
    assert api.find("k1", queue="r").id == in_r and api.find("k1", queue="q").id == in_q
    assert api.job(in_q).state is api.job(in_r).state is JobState.PENDING


@pytest.mark.parametrize("job_id", [2**63, 10**20, 0, -1])
def test_an_id_beyond_the_range_of_ids_names_no_job(api, tasks, job_id):
    """No job has such an id: every operator call by id says not found (on SQLite such a
    number could not even be sent: OverflowError), and a redrive of it moves nothing."""
    enqueue(api, 1)
    calls = [
        lambda: api.job(job_id),
        lambda: api.find(str(job_id)) if job_id > 0 else api.job(job_id),
        lambda: api.history(job_id),
        lambda: api.cancel(job_id, actor="ana", reason="x"),
        lambda: api.resolve(job_id, actor="ana", note="x"),
    ]
    for call in calls:
        with pytest.raises(NotFound, match=f"no job with id {job_id}"):
            call()
    assert api.redrive(ids=[job_id], actor="ana", reason="x").ids == []


def test_history_shows_attempts_events_and_effects(api, tasks):
    job_id = make_dead(api, 1)
    api.redrive(ids=[job_id], actor="ana", reason="retry", now=at(1))
    [job] = api.backend.jobs.claim(["q"], "w2", 1, now=at(2))
    api.backend.effects.record("q", "k1", "email", lease_of(job), {"message_id": "m1"}, now=at(3))
    api.backend.jobs.complete([lease_of(job)], now=at(4))
    history = api.history(job_id)
    assert history.job.state is JobState.DONE
    assert [(a.attempt, a.worker, a.outcome.value) for a in history.attempts] == [
        (1, "w", "dead"),
        (2, "w2", "done"),
    ]
    assert [e.kind for e in history.events] == ["redrive"]
    assert [(e["effect"], e["attempt"], e["detail"]) for e in history.effects] == [
        ("email", 2, {"message_id": "m1"})
    ]


@pytest.mark.parametrize(
    "action",
    ["redrive-actor", "redrive-reason", "resolve-note", "cancel-reason", "pause-reason"],
)
def test_operator_text_with_u0000_is_refused_alike_and_changes_nothing(api, tasks, action):
    """An actor, a reason or a note holding U+0000: PostgreSQL cannot store it (the call was
    its one-line refusal) and SQLite stored it. Both refuse it now, naming the argument,
    before anything is written."""
    dead, pending = make_dead(api, 1), enqueue(api, 2)
    nul = "ana\x00"
    calls = {
        "redrive-actor": lambda: api.redrive(ids=[dead], actor=nul, reason="r"),
        "redrive-reason": lambda: api.redrive(ids=[dead], actor="ana", reason=nul),
        "resolve-note": lambda: api.resolve(dead, actor="ana", note=nul),
        "cancel-reason": lambda: api.cancel(pending, actor="ana", reason=nul),
        "pause-reason": lambda: api.pause_group("q", "g", seconds=60, reason=nul, now=T0),
    }
    what = action.split("-")[1]
    with pytest.raises(ConfigError, match=f"^{what} may not contain U\\+0000"):
        calls[action]()
    assert (api.job(dead).state, api.job(pending).state) == (JobState.DEAD, JobState.PENDING)
    assert api.backend.history.events(dead) == api.backend.history.events(pending) == []
    assert all(g.paused_until is None for g in api.groups("q", now=T0))


def test_operator_text_with_half_a_surrogate_pair_is_refused_alike(api, tasks):
    """Neither driver can encode it: each raised its own UnicodeEncodeError mid-call."""
    dead = make_dead(api, 1)
    for call in (
        lambda: api.redrive(ids=[dead], actor="ana\ud800", reason="r"),
        lambda: api.resolve(dead, actor="ana", note="n\udcff"),
        lambda: JobFilter(queue="q\ud800"),
    ):
        with pytest.raises(ConfigError, match="may not contain half of a surrogate pair"):
            call()
    assert api.job(dead).state is JobState.DEAD and api.backend.history.events(dead) == []


@pytest.mark.parametrize("field", ["queue", "task", "key_prefix", "group", "error_contains"])
def test_a_filter_with_u0000_is_refused_alike(api, tasks, field):
    """A filter's text with U+0000 matched nothing on SQLite and was refused by PostgreSQL;
    both refuse it now, when the filter is made, so a redrive by it moves nothing."""
    make_dead(api, 1)
    with pytest.raises(ConfigError, match=f"^{field} may not contain U\\+0000"):
        JobFilter(**{field: "x\x00"})
    assert [j.state for j in api.jobs()] == [JobState.DEAD]


def test_a_key_or_queue_with_u0000_names_no_job(api, tasks):
    """No job can have such a key or queue (neither holds a control character): a lookup by
    one is not found on every backend, as a lookup by an id past the range of ids is."""
    enqueue(api, 1)
    calls = [
        lambda: api.find("k1\x00"),
        lambda: api.job_by_key("k1\x00"),
        lambda: api.job_by_key("k1", queue="q\x00"),
        lambda: api.cancel("k1\x00", actor="ana", reason="x"),
        lambda: api.resolve("k1", queue="q\x00", actor="ana", note="x"),
    ]
    for call in calls:
        with pytest.raises(NotFound, match="no job with key"):
            call()
    assert api.find("k1").state is JobState.PENDING


@pytest.mark.parametrize(
    "odd", [7, 2**70, b"ana", ["ana"], object()], ids=["int", "bigint", "bytes", "list", "object"]
)
def test_operator_text_that_is_no_text_is_refused_and_changes_nothing(api, tasks, odd):
    """A number as an actor, a reason or a note was stored as a number by SQLite (past its
    integers an OverflowError) and was psycopg's ProgrammingError on PostgreSQL."""
    dead, pending = make_dead(api, 1), enqueue(api, 2)
    calls = [
        lambda: api.redrive(ids=[dead], actor=odd, reason="r"),
        lambda: api.resolve(dead, actor="ana", note=odd),
        lambda: api.cancel(pending, actor="ana", reason=odd),
        lambda: api.pause_group("q", "g", seconds=60, reason=odd, now=T0),
    ]
    for call in calls:
        with pytest.raises(ConfigError, match="must be a text"):
            call()
    assert (api.job(dead).state, api.job(pending).state) == (JobState.DEAD, JobState.PENDING)
    assert api.backend.history.events(dead) == api.backend.history.events(pending) == []


@pytest.mark.parametrize("ref", [1.5, True, "abc", "", math.nan, math.inf, "١"], ids=repr)
def test_a_job_id_that_is_no_whole_number_is_refused(api, tasks, ref):
    """``int()`` made job 1 of 1.5 and of True, and a ValueError or an OverflowError of the
    others; "١" (an Arabic-Indic one) is a digit to Python, not an id."""
    enqueue(api, 1)
    for call in (
        lambda: api.job(ref),
        lambda: api.history(ref),
        lambda: api.redrive(ids=[ref], actor="ana", reason="r"),
    ):
        with pytest.raises(ConfigError, match="a job id is a whole number"):
            call()


@pytest.mark.parametrize("ref", [1.5, True, {}, ["k1"], None], ids=repr)
def test_a_job_named_by_neither_id_nor_key_is_refused(api, tasks, ref):
    enqueue(api, 1)
    for call in (
        lambda: api.find(ref),
        lambda: api.cancel(ref, actor="ana", reason="r"),
        lambda: api.resolve(ref, actor="ana", note="n"),
        lambda: api.result(ref),
    ):
        with pytest.raises(ConfigError, match="named by its id or its key"):
            call()
    with pytest.raises(ConfigError, match="^a queue's name must be a text"):
        api.job_by_key("k1", queue={})
    assert api.find("k1").state is JobState.PENDING


@pytest.mark.parametrize(
    "options", [{"state": "bogus"}, {"state": 3}, {"only_dead": ""}, {"only_dead": 1}], ids=str
)
def test_a_resolve_with_a_state_or_only_dead_that_means_nothing_is_refused(api, tasks, options):
    """On PostgreSQL an ``only_dead`` of "" reached the server (InvalidTextRepresentation)."""
    dead = make_dead(api, 1)
    with pytest.raises(ConfigError):
        api.resolve(dead, actor="ana", note="n", **options)
    assert api.job(dead).state is JobState.DEAD and api.backend.history.events(dead) == []


@pytest.mark.parametrize("where", [7, "queue=q", {"queue": "q"}], ids=repr)
def test_a_selection_that_is_no_filter_is_refused(api, tasks, where):
    dead = make_dead(api, 1)
    with pytest.raises(ConfigError, match="where must be a JobFilter"):
        api.jobs(where)
    with pytest.raises(ConfigError, match="where must be a JobFilter"):
        api.redrive(where=where, actor="ana", reason="r")
    assert api.job(dead).state is JobState.DEAD


def _lookups(ledger, name):
    """Every call that finds a record by a name or an id the caller gives, with ``name``."""
    return {
        "job_by_key": lambda: ledger.job_by_key(name),
        "job_by_key-queue": lambda: ledger.job_by_key("k1", queue=name),
        "subscriptions.get": lambda: ledger.subscriptions.get(name),
        "subscriptions.set_state": lambda: ledger.subscriptions.set_state(
            name, SubscriptionState.PAUSED, "ana"
        ),
        "subscriptions.delete": lambda: ledger.subscriptions.delete(name),
        "subscriptions.rotate": lambda: ledger.subscriptions.rotate(name),
        "keys.revoke": lambda: ledger.keys.revoke(name),
        "queue_settings.get": lambda: ledger.queue_settings.get(name),
        "schedules.row": lambda: ledger.schedules.row(name),
        "schedules.ticks": lambda: ledger.schedules.ticks(name),
        "schedules.pause": lambda: ledger.schedules.pause(name, actor="ana"),
        "schedules.resume": lambda: ledger.schedules.resume(name, actor="ana"),
    }


LOOKUPS = list(_lookups(None, None))


@pytest.mark.parametrize(
    ("lookup", "odd"),
    [
        (lookup, odd)
        for lookup in LOOKUPS
        for odd in (7, None, b"k1", ["k1"])
        # None is no name there: every schedule's ticks, the key in its only queue.
        if odd is not None or lookup not in ("schedules.ticks", "job_by_key-queue")
    ],
    ids=repr,
)
def test_a_lookup_by_a_name_that_is_no_text_is_refused_alike(ledger, tasks, lookup, odd):
    """One rule for every lookup by a name or an id (``lookup_text``): a number was psycopg's
    or the server's error on PostgreSQL and a record not found (or found) on SQLite, and the
    lookups disagreed among themselves (a ConfigError for a key, NotFound for a subscription)."""
    enqueue(ledger, 1)
    with pytest.raises(ConfigError, match="must be a text, got"):
        _lookups(ledger, odd)[lookup]()
    assert ledger.find("k1").state is JobState.PENDING


@pytest.mark.parametrize("odd", ["k1\x00", "k1\ud800"], ids=["nul", "surrogate"])
@pytest.mark.parametrize("lookup", LOOKUPS)
def test_a_lookup_by_a_name_with_u0000_finds_nothing_alike(ledger, tasks, lookup, odd):
    """No record's name or id holds U+0000 or half of a surrogate pair, and PostgreSQL could
    not even compare one (and neither driver encode the other): it names nothing, on every
    backend, and nothing changes."""
    enqueue(ledger, 1)
    with pytest.raises(NotFound, match="^no "):
        _lookups(ledger, odd)[lookup]()
    assert ledger.find("k1").state is JobState.PENDING


def _clocked(ledger, now):
    """Every call of the ledger that takes an explicit ``now``, given ``now``."""

    return {
        "enqueue": lambda: ledger.enqueue("work", {}, key="k9", now=now),
        "enqueue_many": lambda: ledger.enqueue_many("work", [{"key": "k9"}], now=now),
        "stats": lambda: ledger.stats(now=now),
        "rescue": lambda: ledger.rescue(now=now),
        "redrive": lambda: ledger.redrive(actor="ana", reason="r", now=now),
        "resolve": lambda: ledger.resolve("k1", actor="ana", note="n", now=now),
        "cancel": lambda: ledger.cancel("k1", actor="ana", reason="r", now=now),
        "set_group_limits": lambda: ledger.set_group_limits("q", max_leased=1, now=now),
        "groups": lambda: ledger.groups("q", now=now),
        "pause_group": lambda: ledger.pause_group("q", "g", seconds=60, now=now),
        "resume_group": lambda: ledger.resume_group("q", "g", now=now),
        "prune": lambda: ledger.prune(older_than=0, now=now),
        "queue_settings.declare": lambda: ledger.queue_settings.declare(
            QueueSettings("q9"), now=now
        ),
        "subscriptions.create": lambda: ledger.subscriptions.create(
            "q9", "https://hooks.example/in", now=now
        ),
        "schedules.status": lambda: ledger.schedules.status(now=now),
        "schedules.leaders": lambda: ledger.schedules.leaders(now=now),
    }


@pytest.mark.parametrize("call", list(_clocked(None, None)))
@pytest.mark.parametrize(
    "now",
    [datetime(2026, 8, 10, 9, 0), "2026-08-10", 5, date(2026, 8, 10)],
    ids=["naive", "text", "int", "date"],
)
def test_a_now_that_is_no_aware_datetime_is_refused_alike(ledger, tasks, call, now):
    """A call's explicit clock: PostgreSQL read a naive one in its session's time zone and
    parsed a text (an enqueue with now="2026-08-10" was written), where SQLite refused a naive
    one with a ValueError and failed on the others with an AttributeError or a TypeError. Both
    refuse it now, before anything is read or written."""
    enqueue(ledger, 1)
    before = [(j.id, j.state, j.updated_at) for j in ledger.jobs()]
    with pytest.raises(ConfigError, match="^now must be an aware datetime"):
        _clocked(ledger, now)[call]()
    assert [(j.id, j.state, j.updated_at) for j in ledger.jobs()] == before
    assert ledger.subscriptions.list() == [] and ledger.queue_settings.list() == []
