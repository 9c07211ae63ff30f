"""The dashboard over HTTP: logins and sessions, scopes, CSRF, escaping, every page, and the
operator's actions (the browser tests drive the same pages in Chromium)."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobledger import Ledger, Permanent
from jobledger._records import Failure, Lease, MinuteStats, digest
from jobledger.http import ServerSettings
from jobledger.http.dashboard import charts
from jobledger.http.dashboard.session import csrf_token
from jobledger.http.problems import RETRY_AFTER_UNAVAILABLE

from ..support.http import api_server
from ..support.outage import SqliteCut
from ..support.processes import wait_until

XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def _csrf(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html)[1]


def login(api, key: str) -> httpx.Client:
    client = httpx.Client(base_url=api.url, timeout=30)
    form = client.get("/ui/login")
    response = client.post("/ui/login", data={"csrf": _csrf(form.text), "key": key, "next": "/"})
    assert response.status_code == 303, response.text
    return client


@pytest.fixture
def dash(ledger):
    @ledger.task(queue="mail")
    def send(ctx, n: int, note: str = "") -> None:
        if n % 2:
            raise Permanent(f"refused {n} {XSS}")

    ledger.enqueue_many(
        send, [{"payload": {"n": n, "note": XSS}, "key": f"k{n}-{XSS}"} for n in range(6)]
    )
    ledger.run_worker(["mail"], burst=True, handle_signals=False)
    ledger.task(lambda ctx, n: None, name="other", queue="other")
    ledger.enqueue("other", {"n": 1}, key="waiting")
    with api_server(ledger, ServerSettings(snapshot_seconds=0)) as api:
        yield api


def test_pages_need_a_login_and_a_read_or_admin_key(dash):
    anonymous = httpx.Client(base_url=dash.url)
    for path in ("/", "/ui/dead", "/ui/jobs/1", "/ui/schedules", "/ui/search?key=x"):
        response = anonymous.get(path)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/ui/login?next=")
    for key, status, why in [
        ("jlk_nope_nope", 401, "unknown or revoked"),
        (dash.key("publish:mail"), 403, "needs the read or admin scope"),
    ]:
        # A fresh form each time: a refused login may end the form's token, and the refusal
        # must be for the key, not for the token.
        form = anonymous.get("/ui/login")
        assert form.status_code == 200
        response = anonymous.post(
            "/ui/login", data={"csrf": _csrf(form.text), "key": key, "next": "/"}
        )
        assert response.status_code == status and why in response.text
        assert "jobledger_session" not in response.headers.get("set-cookie", "")
    # The login form itself needs its token (login CSRF), and the right one.
    assert anonymous.post("/ui/login", data={"key": dash.admin_key}).status_code == 403
    anonymous.get("/ui/login")
    forged = anonymous.post("/ui/login", data={"csrf": "forged", "key": dash.admin_key})
    assert forged.status_code == 403
    assert "jobledger_session" not in forged.headers.get("set-cookie", "")


def test_a_session_cookie_is_httponly_strict_and_ends_with_its_key(dash, ledger):
    client = httpx.Client(base_url=dash.url)
    form = client.get("/ui/login")
    key = dash.key("read")
    response = client.post(
        "/ui/login", data={"csrf": _csrf(form.text), "key": key, "next": "//evil.example/x"}
    )
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = next(
        c for c in response.headers.get_list("set-cookie") if c.startswith("jobledger_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert key not in cookie  # the cookie is a session token, never the API key
    assert client.get("/").status_code == 200
    key_id = key.split("_")[1]
    ledger.backend.api.key_revoke(key_id)
    assert client.get("/").status_code == 303  # revoking the key ends its sessions


def test_logout_ends_the_session(dash):
    client = login(dash, dash.key("read"))
    page = client.get("/")
    token = client.cookies["jobledger_session"]
    assert client.post("/ui/logout", data={"csrf": _csrf(page.text)}).status_code == 303
    stolen = httpx.Client(base_url=dash.url, cookies={"jobledger_session": token})
    assert stolen.get("/").status_code == 303


def test_a_login_form_posted_from_another_site_opens_no_session(dash):
    """The login form's own token is not enough: a browser that says the form came from
    another site (``Origin``, ``Sec-Fetch-Site``, either alone) is refused, as every other form
    is, so that a site cannot log a visitor in under its own key (login CSRF)."""
    client = httpx.Client(base_url=dash.url)
    host = dash.url.removeprefix("http://")
    for headers in (
        {"Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": f"https://{host}.evil.example"},
    ):
        form = client.get("/ui/login")
        response = client.post(
            "/ui/login",
            data={"csrf": _csrf(form.text), "key": dash.admin_key, "next": "/"},
            headers=headers,
        )
        assert response.status_code == 403 and "came from elsewhere" in response.text, headers
        assert "jobledger_session" not in response.headers.get("set-cookie", ""), headers
    # The same form from this site itself logs in.
    form = client.get("/ui/login")
    response = client.post(
        "/ui/login",
        data={"csrf": _csrf(form.text), "key": dash.admin_key, "next": "/"},
        headers={"Origin": dash.url, "Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 303
    assert client.get("/").status_code == 200


def test_a_session_token_longer_than_any_the_server_makes_is_not_looked_up(dash, ledger):
    """A session token is 43 characters; a cookie of more than 200 is refused before it is
    hashed and looked up, even if a session was stored under it."""
    key = ledger.keys.authenticate(dash.key("read"))
    for token, status in (("s" * 200, 200), ("s" * 201, 303)):
        ledger.backend.api.session_insert(digest(token), key.id, 3600)
        client = httpx.Client(base_url=dash.url, cookies={"jobledger_session": token})
        assert client.get("/").status_code == status, len(token)


def test_a_session_whose_key_cannot_read_opens_no_page_and_no_action(dash, ledger):
    """The dashboard checks the session's key at every request, not only at login: a session
    held for a key without the read or admin scope (as a publish key's would be) shows nothing
    and changes nothing."""
    publisher = ledger.keys.authenticate(dash.key("publish:mail"))
    token = ledger.sessions.open(publisher, 3600)
    client = httpx.Client(base_url=dash.url, cookies={"jobledger_session": token})
    response = client.get("/")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/ui/login")
    dead = next(j for j in ledger.jobs() if j.state.value == "dead")
    refused = client.post(
        f"/ui/jobs/{dead.id}/redrive", data={"csrf": csrf_token(token), "reason": "try"}
    )
    assert refused.status_code == 401
    assert ledger.job(dead.id).state.value == "dead"


def test_every_page_renders_and_escapes_what_it_shows(dash, ledger):
    client = login(dash, dash.key("read"))
    dead = ledger.jobs()[1]
    pages = [
        "/",
        "/ui/queues/mail",
        "/ui/queues/mail?state=dead",
        "/ui/queues/mail?state=done",
        f"/ui/jobs/{dead.id}",
        "/ui/dead",
        "/ui/dead?queue=mail&error=refused",
        "/ui/schedules",
        "/ui/subscriptions",
        "/ui/search?key=waiting",
        f"/ui/search?key={dead.id}",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        assert "<script>window" not in response.text, path
        assert "<img src=x onerror" not in response.text, path
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
    job_page = client.get(f"/ui/jobs/{dead.id}").text
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in job_page  # shown, as text
    assert "Permanent" in job_page and "Traceback" in job_page
    waiting = client.get("/ui/search?key=waiting").text
    assert "/ui/jobs/" in waiting
    assert client.get("/ui/jobs/999999").status_code == 404
    assert client.get("/ui/jobs/not-a-number").status_code == 404
    assert client.get("/ui/static/dashboard.js").status_code == 200


def test_a_job_page_says_why_a_job_is_stuck(dash, ledger):
    client = login(dash, dash.key("read"))
    job = ledger.job_by_key("waiting", "other")
    text = client.get(f"/ui/jobs/{job.id}").text
    assert "not claimed yet" in text and "no worker is taking queue" in text


def test_posts_without_the_csrf_token_change_nothing(dash, ledger):
    client = login(dash, dash.admin_key)
    dead = [j for j in ledger.jobs() if j.state.value == "dead"]
    token = _csrf(client.get("/ui/dead").text)
    target = dead[0].id
    attempts = [
        {"reason": "r", "id": str(target)},
        {"reason": "r", "id": str(target), "csrf": "0" * 64},
    ]
    for form in attempts:
        response = client.post("/ui/dead/redrive", data=form)
        assert response.status_code == 403 and "CSRF" in response.text
    cross_site = client.post(
        "/ui/dead/redrive",
        data={"reason": "r", "id": str(target), "csrf": token},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert cross_site.status_code == 403
    # Each header alone is enough to refuse: a browser may send only one of them.
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        alone = client.post(
            "/ui/dead/redrive",
            data={"reason": "r", "id": str(target), "csrf": token},
            headers=headers,
        )
        assert alone.status_code == 403, headers
    for path in (f"/ui/jobs/{target}/redrive", f"/ui/jobs/{target}/resolve"):
        assert client.post(path, data={"reason": "r", "note": "n"}).status_code == 403
    assert ledger.job(target).state.value == "dead"
    assert ledger.history(target).events == []


def test_a_read_key_cannot_act(dash, ledger):
    client = login(dash, dash.key("read"))
    dead = next(j for j in ledger.jobs() if j.state.value == "dead")
    page = client.get(f"/ui/jobs/{dead.id}").text
    assert "/redrive" not in page  # no action forms for a read-only key
    response = client.post(
        f"/ui/jobs/{dead.id}/redrive", data={"csrf": _csrf(page), "reason": "try"}
    )
    assert response.status_code == 403 and "Read-only" in response.text
    assert ledger.job(dead.id).state.value == "dead"


def test_redrive_all_dead_letters_of_one_queue_and_resolve_one(dash, ledger):
    ledger.task(lambda ctx: None, name="never", queue="elsewhere")
    other = ledger.enqueue("never", {}, key="x")
    ledger.backend.jobs.claim(["elsewhere"], "w", 1)
    lease = Lease(other.id, ledger.job(other.id).lease_token, 1)
    failure = Failure(lease, retry=False, run_at=None, error_class="Permanent", message="no")
    ledger.backend.jobs.fail([failure])
    client = login(dash, dash.admin_key)
    page = client.get("/ui/dead?queue=mail")
    dead = sorted(j.id for j in ledger.jobs() if j.state.value == "dead" and j.queue == "mail")
    assert len(dead) == 3
    response = client.post(
        "/ui/dead/resolve",
        data={"csrf": _csrf(page.text), "id": str(dead[0]), "note": "sent by hand"},
    )
    assert response.status_code == 303
    assert ledger.job(dead[0]).state.value == "done"
    response = client.post(
        "/ui/dead/redrive",
        data={"csrf": _csrf(page.text), "scope": "all", "queue": "mail", "reason": "fixed"},
    )
    assert response.status_code == 303
    assert "redriven=2" in response.headers["location"]
    assert [ledger.job(i).state.value for i in dead[1:]] == ["pending", "pending"]
    assert ledger.job(other.id).state.value == "dead"  # another queue's dead letter stays
    [event] = ledger.history(dead[1]).events
    assert event.kind == "redrive" and event.note == "fixed"
    assert event.actor.endswith(f"via apikey:{dash.admin_key.split('_')[1]}")
    shown = client.get(response.headers["location"]).text
    assert "Redriven: 2 back to pending" in shown


def test_a_queue_page_shows_its_groups_with_the_paused_one_first(dash, ledger):
    for tenant in ("acme", "globex", XSS):
        for n in range(2):
            ledger.enqueue("other", {"n": n}, key=f"{tenant}:{n}", queue="tenants", group=tenant)
    ledger.set_group_limits("tenants", max_leased=1, rate=5)
    ledger.backend.jobs.claim(["tenants"], "w1", 10, None)
    ledger.pause_group("tenants", "globex", seconds=600, reason=f"HTTP 429 {XSS}")
    client = login(dash, dash.key("read"))
    page = client.get("/ui/queues/tenants").text
    assert "<script>window" not in page and "<img src=x onerror" not in page
    rows = re.findall(r'<tr data-group="([^"]*)"( class="paused")?>', page)
    assert rows[0] == ("globex", ' class="paused"')  # paused first
    assert {name for name, paused in rows if not paused} == {
        "acme",
        XSS.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;"),
    }
    assert "at most 1 leased" in page and "5 jobs/s" in page
    globex = page[page.index('<tr data-group="globex"') :]
    globex = globex[: globex.index("</tr>")]
    assert "HTTP 429 &lt;script&gt;" in globex and "(in 9 min" in globex
    assert '<td class="n full" data-label="leased" data-field="leased">1/1</td>' in globex
    job = ledger.job_by_key("acme:1", "tenants")
    job_page = client.get(f"/ui/jobs/{job.id}").text
    assert re.search(
        r'data-field="group"><a href="/ui/queues/tenants#groups"[^>]*>acme</a>', job_page
    )
    # Why a due job of a paused group, or of a group at its limit, is not claimed.
    waiting = {
        j.group: j for j in ledger.jobs() if j.queue == "tenants" and j.state.value == "pending"
    }
    paused = client.get(f"/ui/jobs/{waiting['globex'].id}").text
    assert "Its group &#39;globex&#39; is paused until" in paused
    assert "jobledger groups resume tenants globex" in paused
    full = client.get(f"/ui/jobs/{waiting['acme'].id}").text
    assert "has 1 jobs leased, the queue&#39;s limit per group" in full
    # A queue without groups or limits has no groups section.
    assert 'id="groups"' not in client.get("/ui/queues/mail").text


# -- the charts' geometry ------------------------------------------------------------------------

NOW = datetime(2026, 8, 10, 6, 0, 30, tzinfo=UTC)
MINUTE = NOW.replace(second=0)


def _done(peak: int) -> list[MinuteStats]:
    """One minute with ``peak`` jobs done, another with fewer."""
    if not peak:
        return []
    return [
        MinuteStats(MINUTE - timedelta(minutes=3), "q", "t", claimed=peak, done=peak),
        MinuteStats(MINUTE - timedelta(minutes=9), "q", "t", claimed=1, done=peak // 2),
    ]


def _waited(longest: float) -> list[MinuteStats]:
    return [
        MinuteStats(MINUTE, "q", "t", claimed=2, wait_sum=longest, wait_max=longest),
    ]


@pytest.mark.parametrize(
    ("peak", "labels"),
    [
        (0, ["0", "1"]),
        (1, ["0", "1"]),
        (3, ["0", "1", "2", "3"]),
        (7, ["0", "2", "4", "6", "8"]),
        (1000, ["0", "500", "1,000"]),
        (1001, ["0", "500", "1,000", "1,500"]),
        (40_000, ["0", "10k", "20k", "30k", "40k"]),
    ],
)
def test_the_throughput_axis_counts_in_whole_distinct_steps_that_cover_the_peak(peak, labels):
    chart = charts.throughput_chart(_done(peak), NOW)
    assert [t.label for t in chart.y_ticks] == labels  # bottom to top
    ys = [t.at for t in chart.y_ticks]
    assert ys[0] == chart.plot_bottom and ys[-1] == chart.top
    assert ys == sorted(ys, reverse=True)
    # The tallest bar reaches its value on the scale and stays inside the plot.
    if peak:
        tallest = min(b.y for b in chart.bars)
        scale_top = float(labels[-1].replace(",", "").replace("k", "000"))
        expected = chart.plot_bottom - (chart.plot_bottom - chart.top) * peak / scale_top
        assert tallest == pytest.approx(expected) and tallest >= chart.top


@pytest.mark.parametrize(
    ("longest", "labels"),
    [
        (0.0, ["0 s", "1 s"]),
        (0.004, ["0 ms", "1 ms", "2 ms", "3 ms", "4 ms"]),
        (0.35, ["0 ms", "100 ms", "200 ms", "300 ms", "400 ms"]),
        (0.7, ["0 s", "0.2 s", "0.4 s", "0.6 s", "0.8 s"]),
        (11.5, ["0 s", "5 s", "10 s", "15 s"]),
        (179.0, ["0 s", "50 s", "100 s", "150 s", "200 s"]),
        (300.0, ["0 min", "2 min", "4 min", "6 min"]),
        (5 * 3600.0, ["0 h", "2 h", "4 h", "6 h"]),
    ],
)
def test_the_wait_axis_reads_in_one_unit_with_distinct_labels(longest, labels):
    chart = charts.wait_chart(_waited(longest) if longest else [], NOW)
    assert [t.label for t in chart.y_ticks] == labels


def test_nice_ticks_for_counts_and_for_nothing():
    assert charts.nice_ticks(0, whole=True) == [0, 1]
    assert charts.nice_ticks(0) == [0, 1]
    assert charts.nice_ticks(1, whole=True) == [0, 1]
    assert charts.nice_ticks(4, whole=True) == [0, 1, 2, 3, 4]
    assert charts.nice_ticks(0.3) == [0, 0.1, 0.2, 0.3]  # no 0.30000000000000004
    for peak in (1, 2, 3, 5, 7, 9, 10, 11, 99, 101, 999, 1000, 1001, 12_345, 10**7 + 1):
        ticks = charts.nice_ticks(peak, whole=True)
        assert ticks[0] == 0 and ticks[-1] >= peak and len(ticks) <= charts.MAX_STEPS + 1, peak
        assert all(t == int(t) for t in ticks), peak  # no fractional count
        labels = [charts.count_label(t, ticks[-1]) for t in ticks]
        assert len(set(labels)) == len(labels), (peak, labels)  # none repeated


@pytest.mark.parametrize("peak", [0, 1, 7, 1000, 9_999, 40_000, 5_000_000])
@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
def test_every_label_fits_inside_the_chart_and_none_overlaps(peak, narrow):
    """At both font sizes: on a narrow screen the stylesheet draws the labels larger."""
    font = charts.TICK_FONT_NARROW if narrow else charts.TICK_FONT
    for chart in (
        charts.throughput_chart(_done(peak), NOW),
        charts.wait_chart(_waited(peak / 10), NOW),
    ):
        spans = [t.extent(font) for t in chart.x_ticks]
        assert [t.label for t in chart.x_ticks][-1] == "now"
        assert spans[0][0] >= 0
        assert spans[-1][1] <= chart.width  # the last label ("now") is not clipped
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
        assert min(gaps) >= 4, spans  # none overlaps the next
        assert chart.x_label_y + font * 1.2 <= chart.height  # below the plot, inside the box
        for tick in chart.y_ticks:
            assert chart.y_label_x - charts.text_width(tick.label, font) >= 0, tick
            assert tick.at - font / 2 >= 0 and tick.at + font / 2 <= chart.height
        bars = chart.bars
        assert all(chart.left <= b.x and b.x + b.width <= chart.plot_right for b in bars)


def test_the_empty_chart_says_so_and_keeps_a_sensible_scale():
    chart = charts.throughput_chart([], NOW)
    assert chart.empty and chart.empty_text == "no attempt finished in the last hour"
    assert [t.label for t in chart.y_ticks] == ["0", "1"]
    assert chart.total == "0 done, 0 retried, 0 dead"
    wait = charts.wait_chart([], NOW)
    assert wait.empty and wait.total == "nothing claimed"
    for empty in (chart, wait):  # the message fits in the plot at its largest
        width = charts.text_width(empty.empty_text, charts.EMPTY_FONT_NARROW)
        assert empty.middle[0] - width / 2 >= empty.left, empty.empty_text
        assert empty.middle[0] + width / 2 <= empty.plot_right, empty.empty_text
    # Rollups older than an hour are not drawn.
    old = [MinuteStats(MINUTE - timedelta(hours=2), "q", "t", claimed=55, done=55)]
    assert charts.throughput_chart(old, NOW).empty and charts.wait_chart(old, NOW).empty


def test_the_overview_says_which_counts_are_now_and_which_are_the_last_hour(ledger):
    ledger.task(lambda ctx, n: None, name="report", queue="reports")
    ledger.enqueue_many("report", [{"payload": {"n": n}, "key": f"r{n}"} for n in range(5)])
    ledger.run_worker(["reports"], burst=True, handle_signals=False)
    # The jobs finished two hours ago, as far as the rollups know.
    ledger.backend.stats.minutes_prune(datetime.now(UTC) + timedelta(hours=1))
    two_hours_ago = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    ledger.backend.stats.minutes_add(
        [MinuteStats(two_hours_ago, "reports", "report", claimed=5, wait_sum=1.0, done=5)]
    )
    with api_server(ledger, ServerSettings(snapshot_seconds=0)) as api:
        page = login(api, api.key("read")).get("/").text
    head = page[page.index("<thead>") : page.index("</thead>")]
    assert re.search(r'<th colspan="8"[^>]*>Jobs in the ledger now</th>', head)
    assert re.search(r'<th colspan="2"[^>]*>Last hour</th>', head)
    row = page[page.index('<tr data-queue="reports"') :]
    row = row[: row.index("</tr>")]
    assert re.search(r'data-label="done" data-state="done">5<', row)
    assert re.search(r'data-label="done, last hour" data-state="done-hour">0<', row)
    assert "kept until they are pruned" in page
    assert "no attempt finished in the last hour" in page


def test_a_long_error_is_quoted_short_in_the_diagnosis_and_whole_below(ledger):
    error = "provider refused: " + "/".join(f"segment{i}" for i in range(60))

    @ledger.task(queue="mail")
    def send(ctx) -> None:
        raise Permanent(error)

    job = ledger.enqueue(send, {}, key="long")
    ledger.run_worker(["mail"], burst=True, handle_signals=False)
    with api_server(ledger, ServerSettings(snapshot_seconds=0)) as api:
        page = login(api, api.key("read")).get(f"/ui/jobs/{job.id}").text
    diagnosis = page[page.index('<div class="diagnosis">') :]
    diagnosis = diagnosis[: diagnosis.index("</div>")]
    assert "(the whole error is below)" in diagnosis and error not in diagnosis
    assert len(re.sub(r"<[^>]+>", "", diagnosis)) < len(error)
    below = page[page.index("<h2>Last error</h2>") :]
    assert error in below


@pytest.mark.parametrize(
    "target",
    [None, "", "evil.example", "https://evil.example/", "//evil.example", "/\\evil.example"]
    + ["/ui\r\nSet-Cookie: x=1", "/ui\tx"],
)
def test_a_login_s_next_is_a_path_of_this_site_or_the_home_page(target):
    # Anything a browser could read as another host, or a header split, goes home instead: the
    # login page must not be an open redirect.
    from jobledger.http.dashboard.session import safe_next

    assert safe_next(target) == "/"
    assert safe_next("/ui/dead?queue=mail") == "/ui/dead?queue=mail"


def test_a_job_page_redrives_resolves_and_cancels_its_job_with_a_reason_recorded(dash, ledger):
    client = login(dash, dash.admin_key)
    dead = sorted(j.id for j in ledger.jobs() if j.state.value == "dead")
    waiting = ledger.job_by_key("waiting", "other").id
    csrf = _csrf(client.get(f"/ui/jobs/{dead[0]}").text)

    def act(job_id: int, action: str, **form: str) -> httpx.Response:
        return client.post(f"/ui/jobs/{job_id}/{action}", data={"csrf": csrf, **form})

    # Each action needs its reason or note (it is recorded), and resolve a state it can set.
    refused = [
        (dead[0], "redrive", {}, "a reason is required"),
        (dead[1], "resolve", {}, "a note is required"),
        (dead[1], "resolve", {"note": "n", "state": "dead"}, "resolve to done or pending"),
        (waiting, "cancel", {"reason": ""}, "a reason is required"),
    ]
    for job_id, action, form, detail in refused:
        response = act(job_id, action, **form)
        assert (response.status_code, detail in response.text) == (422, True), (action, form)
    assert [ledger.job(i).state.value for i in (*dead, waiting)] == [*["dead"] * 3, "pending"]
    assert all(ledger.history(i).events == [] for i in (*dead, waiting))

    done = [
        (dead[0], "redrive", {"reason": "provider back"}, "pending", "redriven"),
        (dead[1], "resolve", {"note": "sent by hand"}, "done", "resolved"),
        (dead[2], "resolve", {"note": "run it again", "state": "pending"}, "pending", "resolved"),
        (waiting, "cancel", {"reason": "not wanted"}, "cancelled", "cancelled"),
    ]
    for job_id, action, form, state, notice in done:
        response = act(job_id, action, **form)
        assert response.status_code == 303, response.text
        assert response.headers["location"] == f"/ui/jobs/{job_id}?done={notice}"
        assert ledger.job(job_id).state.value == state
        [event] = ledger.history(job_id).events
        assert (event.kind, event.note) == (action, form.get("reason") or form.get("note"))
        assert event.actor.endswith(f"via apikey:{dash.admin_key.split('_')[1]}")
    assert "Job redriven: back to pending" in client.get(f"/ui/jobs/{dead[0]}?done=redriven").text

    # What no longer applies is 409, and changes nothing.
    for job_id, action, form in [
        (dead[0], "redrive", {"reason": "again"}),  # pending now
        (dead[1], "resolve", {"note": "again"}),  # done
        (waiting, "cancel", {"reason": "again"}),  # cancelled
    ]:
        response = act(job_id, action, **form)
        assert response.status_code == 409 and "Not possible now" in response.text, action
        assert len(ledger.history(job_id).events) == 1
    # A cancelled job's page offers a redrive too, and it takes.
    response = act(waiting, "redrive", reason="wanted after all")
    assert response.status_code == 303 and ledger.job(waiting).state.value == "pending"


def test_the_dashboard_answers_503_with_retry_after_while_the_database_is_unavailable(tmp_path):
    cut = SqliteCut(tmp_path)
    ledger = Ledger(cut.url)
    ledger.migrate()
    try:
        job = ledger.enqueue("t", {}, key="k", queue="q").id
        with api_server(ledger, ServerSettings(snapshot_seconds=0)) as api:
            client = login(api, api.admin_key)
            assert client.get(f"/ui/jobs/{job}").status_code == 200
            cut.cut()
            down = client.get(f"/ui/jobs/{job}")
            assert down.status_code == 503, down.text
            assert "Database unavailable" in down.text and "Traceback" not in down.text
            assert down.headers["retry-after"] == str(RETRY_AFTER_UNAVAILABLE)
            cut.restore()
            wait_until(
                lambda: client.get(f"/ui/jobs/{job}").status_code == 200,
                what="the job page to be served again",
            )
    finally:
        ledger.close()


def test_redrive_and_resolve_of_the_selected_dead_letters(dash, ledger):
    client = login(dash, dash.admin_key)
    token = _csrf(client.get("/ui/dead?queue=mail").text)
    dead = sorted(j.id for j in ledger.jobs() if j.state.value == "dead")
    assert len(dead) == 3
    waiting = ledger.job_by_key("waiting", "other").id

    def post(path, **form):
        fields = {k: [str(i) for i in v] if isinstance(v, list) else v for k, v in form.items()}
        return client.post(path, data={"csrf": token, **fields})

    # Refused, changing nothing: no reason; all matching without a queue; nothing selected.
    for form, said in [
        ({"id": [dead[0]], "reason": ""}, "a reason is required"),
        ({"scope": "all", "reason": "fixed"}, "choose a queue to redrive all"),
        ({"reason": "fixed"}, "select at least one dead letter"),
    ]:
        response = post("/ui/dead/redrive", **form)
        assert response.status_code == 422 and said in response.text, form
    assert {ledger.job(i).state.value for i in dead} == {"dead"}
    # The selected ones: a job that is not dead (pending here) is not redriven, nor counted.
    response = post(
        "/ui/dead/redrive", id=[dead[0], dead[1], waiting], reason="fixed", queue="mail"
    )
    assert response.status_code == 303
    location = response.headers["location"]
    assert location == "/ui/dead?queue=mail&redriven=2"
    assert "Redriven: 2 back to pending." in client.get(location).text
    assert [ledger.job(i).state.value for i in dead] == ["pending", "pending", "dead"]
    assert ledger.history(waiting).events == []
    # Resolve the selected: one resolved by someone else meanwhile, one redriven meanwhile
    # (pending: to run again, as whoever redrove it wanted), or one gone, is passed over.
    assert post("/ui/dead/resolve", id=[dead[2]], note="").status_code == 422
    assert post("/ui/dead/resolve", note="by hand").status_code == 422
    ledger.resolve(dead[0], actor="ops", note="done elsewhere")
    response = post("/ui/dead/resolve", id=[dead[0], dead[1], dead[2], 999999], note="sent by hand")
    assert response.status_code == 303 and response.headers["location"] == "/ui/dead?resolved=1"
    assert [ledger.job(i).state.value for i in dead] == ["done", "pending", "done"]
    assert [e.note for e in ledger.history(dead[0]).events] == ["fixed", "done elsewhere"]
    [event] = ledger.history(dead[2]).events
    assert (event.kind, event.note) == ("resolve", "sent by hand")


def test_a_ledger_error_without_a_page_of_its_own_is_a_500_page(dash, ledger, monkeypatch, caplog):
    from jobledger.errors import JobledgerError

    def conflict(*args, **kwargs):
        raise JobledgerError("the ledger refused: <b>conflict</b>")

    client = login(dash, dash.admin_key)
    token = _csrf(client.get("/ui/dead").text)
    dead = next(j for j in ledger.jobs() if j.state.value == "dead")
    monkeypatch.setattr(ledger, "redrive", conflict)
    response = client.post(
        "/ui/dead/redrive", data={"csrf": token, "id": str(dead.id), "reason": "fixed"}
    )
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("text/html")
    assert "the ledger refused: &lt;b&gt;conflict&lt;/b&gt;" in response.text
    assert "Traceback" not in response.text
    [record] = [r for r in caplog.records if r.getMessage().startswith("dashboard: JobledgerError")]
    assert record.levelname == "ERROR"
    assert ledger.job(dead.id).state.value == "dead"


def test_a_form_that_is_not_a_small_utf8_form_post_changes_nothing(dash, ledger):
    client = login(dash, dash.admin_key)
    token = _csrf(client.get("/ui/dead").text)
    dead = next(j for j in ledger.jobs() if j.state.value == "dead")
    form = f"csrf={token}&id={dead.id}&reason=fixed".encode()
    too_big = form + b"&pad=" + b"x" * 64 * 1024

    def chunks():  # no Content-Length: the limit is checked as the body arrives
        yield too_big[:1000]
        yield too_big[1000:]

    refused = [
        (415, "Unsupported form", {"content": form, "headers": {"Content-Type": "text/plain"}}),
        (
            415,
            "Unsupported form",
            {"json": {"csrf": token, "id": dead.id, "reason": "fixed"}, "headers": {}},
        ),
        (413, "Form too large", {"content": too_big}),
        (413, "Form too large", {"content": chunks()}),
        (400, "not UTF-8", {"content": form + b"&note=\xff\xfe"}),
    ]
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}
    for status, said, request in refused:
        request.setdefault("headers", form_type)
        response = client.post("/ui/dead/redrive", **request)
        assert response.status_code == status and said in response.text, (status, said)
        assert "text/html" in response.headers["content-type"]
    assert ledger.job(dead.id).state.value == "dead" and ledger.history(dead.id).events == []
    # The same form, as a browser posts it, is taken.
    response = client.post("/ui/dead/redrive", content=form, headers=form_type)
    assert response.status_code == 303 and ledger.job(dead.id).state.value == "pending"


def test_login_logout_and_actions_without_a_session(dash, ledger):
    anonymous = httpx.Client(base_url=dash.url, timeout=30)
    dead = next(j for j in ledger.jobs() if j.state.value == "dead")
    response = anonymous.post(f"/ui/jobs/{dead.id}/redrive", data={"reason": "r", "csrf": "x"})
    assert response.status_code == 401 and "Not logged in" in response.text
    assert ledger.job(dead.id).state.value == "dead"
    # Logging out without a session goes to the login page; a login form that is no form is
    # refused as any form is.
    response = anonymous.post("/ui/logout", data={"csrf": "x"})
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    response = anonymous.post("/ui/login", json={"key": dash.admin_key})
    assert response.status_code == 415
    client = login(dash, dash.key("read"))
    # Logged in, the login page sends the browser on to where it was going.
    response = client.get("/ui/login?next=/ui/dead")
    assert response.status_code == 303 and response.headers["location"] == "/ui/dead"
    # A logout without the page's token is refused, and the session stays open.
    response = client.post("/ui/logout", data={"csrf": "0" * 64})
    assert response.status_code == 403
    assert client.get("/ui/dead").status_code == 200


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),
        (float("nan"), "—"),
        (0.85, "850 ms"),
        (12.34, "12.3 s"),
        (245, "4 min 05 s"),
        (3 * 3600 + 20 * 60 + 59, "3 h 20 min"),
        (47 * 3600 + 59 * 60, "47 h 59 min"),
        (48 * 3600, "2 d 0 h"),
        (52 * 3600 + 1800, "2 d 4 h"),
        (-90, "-1 min 30 s"),
    ],
)
def test_durations_read_as_people_say_them(value, shown):
    from jobledger.http.dashboard.render import seconds

    assert seconds(value) == shown


def test_a_time_is_said_relative_to_now():
    from jobledger.http.dashboard.render import since

    now = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)
    assert since(None, now) == "—"
    assert since(now - timedelta(minutes=4, seconds=5), now) == "4 min 05 s ago"
    assert since(now + timedelta(hours=50), now) == "in 2 d 2 h"


ODD_VALUES = ["%00", "a" * 3000, "%ED%A0%80", "99999999999999999999999", "-1", "%F0%9F%92%A5"]


def test_odd_values_in_every_query_are_a_page_or_a_refusal_never_an_error(dash, ledger):
    """Query strings nobody means (U+0000, a lone surrogate's bytes, a very long text, numbers
    past every integer) get a page, a redirect or a 4xx that says why, on both backends: never
    a 500."""
    client = login(dash, dash.key("read"))
    pages = [
        "/ui/queues/{v}",
        "/ui/queues/mail?state={v}",
        "/ui/jobs/{v}",
        "/ui/dead?queue={v}",
        "/ui/dead?task={v}",
        "/ui/dead?key={v}",
        "/ui/dead?error={v}",
        "/ui/dead?redriven={v}&skipped={v}&resolved={v}",
        "/ui/search?key={v}",
        "/ui/login?next={v}",
    ]
    wrong = []
    for path, value in itertools.product(pages, ODD_VALUES):
        response = client.get(path.format(v=value))
        if response.status_code >= 500:
            wrong.append((path.format(v=value)[:80], response.status_code))
    assert wrong == []
