"""An operator in a real browser: log in, watch a queue drain while a worker runs, find why a job
is stuck, open a dead job and redrive it, redrive the dead letters of one queue and watch them
drain; an XSS payload renders inert; a form posted without its CSRF token is refused."""

from __future__ import annotations

import re

from jobledger import Ledger, Permanent
from jobledger.http import ServerSettings

from ..support.http import api_server
from ..support.processes import terminate, wait_exit, worker_process
from ..support.waiting import Patience

JOBS = 60
POISON = {7, 19, 31, 43, 55}  # refused by the provider on their first attempt
SETTINGS = ServerSettings(snapshot_seconds=0.2, dashboard_refresh_seconds=0.5)


def cell(page, queue: str, state: str) -> int:
    text = page.text_content(f'tr[data-queue="{queue}"] [data-state="{state}"]')
    return int(text.strip().replace(",", ""))  # counts are shown as 1,234


def log_in(page, url: str, key: str, artifacts=None) -> None:
    page.goto(url + "/")
    assert "/ui/login" in page.url
    if artifacts is not None:
        page.screenshot(path=str(artifacts / "login.png"))
    page.fill('input[name="key"]', key)
    page.click('button:has-text("Log in")')
    page.wait_for_url(url + "/")


def test_postgres_operator_watches_a_queue_finds_a_stuck_job_and_redrives_dead_letters(
    pg, page, artifacts
):
    schema, url = pg.new_schema_url()
    ledger = Ledger(url)
    ledger.migrate()
    worker = None
    try:
        ledger.enqueue_many(
            "slow",
            [
                {"payload": {"n": n, "poison": n in POISON}, "key": f"message-{n}"}
                for n in range(JOBS)
            ],
            queue="slow",
        )
        ledger.enqueue("slow", {"n": 999}, key="stuck-1", queue="stalled")
        with api_server(ledger, SETTINGS) as api:
            log_in(page, api.url, api.admin_key, artifacts)
            page.wait_for_selector('tr[data-queue="slow"]')
            assert cell(page, "slow", "pending") == JOBS
            page.evaluate("window.__notReloaded = true")

            # A worker starts: the page's counts change by themselves while it runs.
            worker = worker_process(
                "tests.apps.observed_app:ledger",
                url,
                "--queues",
                "slow",
                "--concurrency",
                "2",
                "--poll-interval",
                "0.05",
                env={"OBSERVED_DELAY": "0.05"},
            )
            seen = set()

            def finished() -> int:
                return cell(page, "slow", "done") + cell(page, "slow", "dead")

            patience = Patience(60, progress=finished)
            while finished() < JOBS:
                seen.add(cell(page, "slow", "pending"))
                assert not patience.expired(), f"the queue did not drain: {patience.describe()}"
                page.wait_for_timeout(100)
            seen.add(cell(page, "slow", "pending"))
            assert len({n for n in seen if 0 < n < JOBS}) >= 2, seen  # watched it go down
            assert page.evaluate("window.__notReloaded") is True  # live refresh, no reload
            page.wait_for_function(
                """() => document.querySelector('tr[data-queue="slow"] [data-state="dead"]')
                        .textContent.trim() === '5'"""
            )
            assert cell(page, "slow", "done") == JOBS - len(POISON)
            page.screenshot(path=str(artifacts / "overview.png"), full_page=True)

            # Why is stuck-1 stuck? Search for it by key and read the job page.
            page.fill('input[name="key"][type="search"]', "stuck-1")
            page.press('input[name="key"][type="search"]', "Enter")
            page.wait_for_url(re.compile(r"/ui/search\?key=stuck-1"))
            page.screenshot(path=str(artifacts / "search.png"), full_page=True)
            page.click('td.key a:has-text("stuck-1")')
            page.wait_for_selector(".diagnosis")
            diagnosis = page.text_content(".diagnosis")
            assert "not claimed yet" in diagnosis and "'stalled'" in diagnosis
            page.screenshot(path=str(artifacts / "job-stuck.png"), full_page=True)

            page.goto(api.url + "/ui/queues/slow")
            page.screenshot(path=str(artifacts / "queue.png"), full_page=True)

            # The dead letters of the queue; open one, see its error, redrive it.
            page.goto(api.url + "/")
            page.click('tr[data-queue="slow"] [data-state="dead"] a')
            page.wait_for_url(re.compile(r"/ui/dead\?queue=slow"))
            assert page.locator("table.dead tbody tr").count() == len(POISON)
            page.screenshot(path=str(artifacts / "dead-letters.png"), full_page=True)
            page.click("table.dead tbody tr >> nth=0 >> td.key a")
            page.wait_for_selector("text=provider refused")
            assert page.text_content('[data-field="state"]').strip() == "dead"
            page.click("details summary >> nth=0")  # the last error's traceback
            assert "Permanent: provider refused" in page.inner_text(
                "details pre.traceback >> nth=0"
            )
            page.screenshot(path=str(artifacts / "job-dead.png"), full_page=True)
            job_url = page.url
            page.fill('form[action$="/redrive"] input[name="reason"]', "provider fixed")
            page.click('form[action$="/redrive"] button')
            page.wait_for_url(re.compile(r"done=redriven"))
            assert job_url.split("?")[0] in page.url
            page.wait_for_function(
                """() => document.querySelector('[data-field="state"]').textContent.trim()
                        === 'done'"""
            )
            assert page.text_content('[data-field="attempts"]').startswith("2 of")
            page.screenshot(path=str(artifacts / "job-redriven.png"), full_page=True)

            # Redrive every remaining dead letter of the queue, then watch them drain.
            page.goto(api.url + "/ui/dead?queue=slow")
            assert page.locator("table.dead tbody tr").count() == len(POISON) - 1
            page.check('input[name="scope"][value="all"]')
            page.fill('fieldset input[name="reason"]', "provider fixed for all")
            page.click('fieldset button:has-text("Redrive")')
            page.wait_for_selector("text=Redriven: 4 back to pending")
            page.goto(api.url + "/")
            page.wait_for_function(
                f"""() => {{
                    const row = document.querySelector('tr[data-queue="slow"]');
                    return row.querySelector('[data-state="dead"]').textContent.trim() === '0'
                        && row.querySelector('[data-state="done"]').textContent.trim() === '{JOBS}';
                }}"""
            )
            page.screenshot(path=str(artifacts / "overview-drained.png"), full_page=True)
            for name in ("schedules", "subscriptions"):
                page.goto(f"{api.url}/ui/{name}")
                page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert ledger.job_by_key("message-7", "slow").state.value == "done"
    finally:
        if worker is not None:
            terminate(worker)
            wait_exit(worker, timeout=30)
        ledger.close()
        pg.drop_schema(schema)


def test_an_xss_payload_is_inert_and_a_post_without_csrf_is_refused(tmp_path, page, artifacts):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.migrate()
    script = "<script>window.__xss = 1</script>"
    image = '<img src=x onerror="window.__xss = 2">'

    @ledger.task(queue="mail")
    def send(ctx, note: str) -> None:
        raise Permanent(f"refused {script}{image}")

    job = ledger.enqueue(send, {"note": script + image}, key=f"key-{image}")
    ledger.run_worker(["mail"], burst=True, handle_signals=False)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        with api_server(ledger, SETTINGS) as api:
            log_in(page, api.url, api.admin_key)
            page.goto(f"{api.url}/ui/jobs/{job.id}")
            page.wait_for_selector("pre.payload")
            assert script in page.inner_text("pre.payload")  # shown as text
            assert image in page.inner_text("h1")
            assert page.evaluate("window.__xss") is None
            assert page.locator("main img").count() == 0
            page.goto(f"{api.url}/ui/dead")
            assert page.evaluate("window.__xss") is None
            page.goto(f"{api.url}/ui/jobs/{job.id}")
            page.screenshot(path=str(artifacts / "job-xss-inert.png"), full_page=True)
            assert dialogs == []

            # The same form, its CSRF token removed: refused, and the job stays dead.
            page.evaluate("document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
            page.fill('form[action$="/redrive"] input[name="reason"]', "sneaky")
            with page.expect_response(re.compile(r"/redrive$")) as answer:
                page.click('form[action$="/redrive"] button')
            assert answer.value.status == 403
            page.wait_for_selector("text=missing or wrong CSRF token")
            page.screenshot(path=str(artifacts / "csrf-refused.png"), full_page=True)
            assert ledger.job(job.id).state.value == "dead"
            assert ledger.history(job.id).events == []
    finally:
        ledger.close()


def test_the_queue_page_shows_a_paused_group_and_sees_it_resumed(tmp_path, page, artifacts):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    ledger.migrate()
    for tenant, count in (("flood", 40), ("throttled", 3), ("quiet", 1)):
        for n in range(count):
            ledger.enqueue("send", {"n": n}, key=f"{tenant}:{n}", queue="tenants", group=tenant)
    ledger.set_group_limits("tenants", max_leased=2, rate=5)
    ledger.backend.jobs.claim(["tenants"], "w1", 4, None)
    ledger.pause_group("tenants", "throttled", seconds=900, reason="HTTP 429 from the provider")
    try:
        with api_server(ledger, SETTINGS) as api:
            log_in(page, api.url, api.admin_key)
            page.goto(f"{api.url}/ui/queues/tenants")
            page.wait_for_selector("table.groups")
            rows = page.locator("table.groups tbody tr")
            assert rows.count() == 3
            # The paused group comes first, highlighted, with its reason and when it ends.
            first = rows.nth(0)
            assert first.get_attribute("data-group") == "throttled"
            assert first.get_attribute("class") == "paused"
            assert first.locator(".badge.paused").is_visible()
            assert "HTTP 429 from the provider" in first.inner_text()
            assert re.search(r"\(in 1[45] min", first.inner_text())
            background = first.locator("td >> nth=0").evaluate(
                "e => getComputedStyle(e).backgroundColor"
            )
            assert background not in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)"), background
            flood = page.locator('table.groups tr[data-group="flood"]')
            assert flood.locator('[data-field="leased"]').inner_text() == "2/2"
            assert flood.locator('[data-field="pending"]').inner_text() == "38"
            assert "at most 2 leased" in page.inner_text('[data-field="group-limits"]')
            page.screenshot(path=str(artifacts / "queue-groups.png"), full_page=True)

            # Resumed elsewhere (the CLI, a colleague): the live section shows it unpaused.
            page.evaluate("window.__notReloaded = true")
            ledger.resume_group("tenants", "throttled")
            page.wait_for_function(
                """() => !document.querySelector('table.groups tr[data-group="throttled"]')
                        .classList.contains('paused')"""
            )
            assert page.evaluate("window.__notReloaded") is True

            # A job's page names its group and links to the queue's groups.
            job = ledger.job_by_key("quiet:0", "tenants")
            page.goto(f"{api.url}/ui/jobs/{job.id}")
            assert page.inner_text('[data-field="group"]').strip() == "quiet"
            page.click('[data-field="group"] a')
            page.wait_for_url(re.compile(r"/ui/queues/tenants#groups$"))
    finally:
        ledger.close()
