"""Every dashboard page, at a laptop's width and a phone's, in the states an operator meets (an
empty ledger; jobs done but nothing in the last hour; a busy queue with retries, dead letters,
long keys and long errors, a paused group, a disabled subscription): nothing is wider than the
window, and every chart's labels are inside their chart, apart from each other, and big enough
to read. Screenshots of each go to ``test-artifacts/dashboard/layout/``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import quote

import pytest

from jobledger.http import ServerSettings

from ..support.http import api_server
from . import scenes

WIDTHS = {"laptop": 1280, "phone": 390}
SETTINGS = ServerSettings(snapshot_seconds=0, dashboard_refresh_seconds=3600)

#: Elements wider than the window, or the page itself (it would scroll sideways).
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const problems = [];
  const page = document.documentElement.scrollWidth;
  if (page > width) problems.push(`the page is ${page} px wide in a ${width} px window`);
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('svg') && el.tagName !== 'svg') continue;  // the charts' own check
    const r = el.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    if (r.left < -1 || r.right > width + 1) {
      const text = (el.textContent || '').trim().slice(0, 40);
      problems.push(`<${el.tagName.toLowerCase()} class="${el.getAttribute('class') || ''}">`
        + ` "${text}" spans ${Math.round(r.left)}..${Math.round(r.right)} px`);
    }
  }
  return problems.slice(0, 8);
}"""

#: Chart and timeline labels outside their SVG's box, overlapping, or drawn too small to read.
LABELS = """() => [...document.querySelectorAll('main svg')].flatMap((svg, n) => {
  const box = svg.getBoundingClientRect();
  const scale = box.width / svg.viewBox.baseVal.width;
  const name = svg.closest('figure') ? svg.closest('figure').querySelector('strong').textContent
                                      : (svg.getAttribute('class') || `svg ${n}`);
  const texts = [...svg.querySelectorAll('text')];
  const rects = texts.map(t => t.getBoundingClientRect());
  const problems = [];
  texts.forEach((t, i) => {
    const r = rects[i];
    const label = `${name}: "${t.textContent}"`;
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5
        || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
      problems.push(`${label} is outside its box: ${Math.round(r.left)}..${Math.round(r.right)}`
        + ` × ${Math.round(r.top)}..${Math.round(r.bottom)} in ${Math.round(box.left)}..`
        + `${Math.round(box.right)} × ${Math.round(box.top)}..${Math.round(box.bottom)}`);
    }
    const px = parseFloat(getComputedStyle(t).fontSize) * scale;
    if (px < 9) problems.push(`${label} is drawn ${px.toFixed(1)} px tall`);
    for (let j = 0; j < i; j++) {
      const o = rects[j];
      if (r.left < o.right && o.left < r.right && r.top < o.bottom && o.top < r.bottom) {
        problems.push(`${label} overlaps "${texts[j].textContent}"`);
      }
    }
  });
  return problems;
})"""


class Scene:
    def __init__(self, name: str, api, pages: dict[str, str]):
        self.name, self.api, self.pages = name, api, pages


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[list[Scene]]:
    """The three ledgers, each served, with the pages worth looking at in each."""
    tmp = tmp_path_factory.mktemp("scenes")
    with ExitStack() as stack:
        found = []
        for name in ("empty", "idle", "busy"):
            ledger = getattr(scenes, name)(tmp)
            stack.callback(ledger.close)
            api = stack.enter_context(api_server(ledger, SETTINGS))
            jobs = ledger.jobs()
            pages = {
                "overview": "/",
                "dead-letters": "/ui/dead",
                "schedules": "/ui/schedules",
                "subscriptions": "/ui/subscriptions",
                "search": "/ui/search?key=" + quote(jobs[0].key if jobs else "nothing"),
                "error": "/ui/queues/nothing-here",
            }
            if name == "idle":
                pages["queue"] = "/ui/queues/reports"
                pages["queue-done"] = "/ui/queues/reports?state=done"
                pages["job-done"] = f"/ui/jobs/{jobs[0].id}"
            if name == "busy":
                dead = next(j for j in jobs if j.state.value == "dead")
                retried = next(j for j in jobs if j.state.value == "pending" and j.attempts)
                leased = next(j for j in jobs if j.state.value == "leased")
                paused = next(j for j in jobs if j.group == scenes.PAUSED_GROUP)
                pages |= {
                    "queue": "/ui/queues/mail",
                    "queue-dead": "/ui/queues/mail?state=dead",
                    "queue-groups": "/ui/queues/tenants",
                    "dead-letters-filtered": "/ui/dead?queue=mail&error=refused",
                    "job-dead": f"/ui/jobs/{dead.id}",
                    "job-retried": f"/ui/jobs/{retried.id}",
                    "job-leased": f"/ui/jobs/{leased.id}",
                    "job-paused-group": f"/ui/jobs/{paused.id}",
                    "search-long-key": "/ui/search?key=" + quote(dead.key),
                }
            found.append(Scene(name, api, pages))
        yield found


def _look(page, shots: Path, name: str) -> list[str]:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    return [f"{name}: {p}" for p in page.evaluate(OVERFLOW) + page.evaluate(LABELS)]


@pytest.mark.parametrize("device", list(WIDTHS))
def test_every_page_fits_the_window_and_its_charts_labels_fit_their_charts(
    chromium, served, artifacts, device
):
    width = WIDTHS[device]
    shots = artifacts / "layout"
    shots.mkdir(exist_ok=True)
    problems: list[str] = []
    for scene in served:
        context = chromium.new_context(viewport={"width": width, "height": 900})
        context.set_default_timeout(20_000)
        try:
            page = context.new_page()
            page.goto(scene.api.url + "/")
            assert "/ui/login" in page.url
            if scene.name == "empty":
                problems += _look(page, shots, f"login-{width}")
            page.fill('input[name="key"]', scene.api.admin_key)
            page.click('button:has-text("Log in")')
            page.wait_for_url(scene.api.url + "/")
            for name, path in scene.pages.items():
                response = page.goto(scene.api.url + path)
                assert response.status == (404 if name == "error" else 200), path
                if name == "job-dead":
                    page.click("details summary >> nth=0")  # the traceback, opened
                problems += _look(page, shots, f"{scene.name}-{name}-{width}")
        finally:
            context.close()
    assert not problems, "\n".join(problems)
