"""The api role: declared queues (created once, then replaced), API keys by digest and their
revocation, dashboard sessions, and rate-limit buckets shared through the database."""

from __future__ import annotations

import threading

import pytest

from jobledger._records import ApiKey, QueueSettings, digest
from jobledger.errors import NotFound

from .conftest import T0, at


@pytest.fixture
def api(ledger):
    return ledger.backend.api


def key(key_id: str = "k_1", name: str = "ops", **kw) -> ApiKey:
    return ApiKey(id=key_id, name=name, scopes=("read", "publish:digests"), **kw)


def test_a_queue_is_created_once_and_then_its_settings_are_replaced(api):
    info, created = api.queue_put(QueueSettings("digests", max_attempts=3), now=T0)
    assert created and info.name == "digests" and info.settings.max_attempts == 3
    assert (info.created_at, info.updated_at) == (T0, T0)
    settings = QueueSettings("digests", task="send", max_attempts=5, require_key=True)
    info, created = api.queue_put(settings, now=at(60))
    assert not created and info.settings == settings
    assert (info.created_at, info.updated_at) == (T0, at(60))
    assert api.queue_get("digests") == info
    # Declared twice at the same time: still one creation.
    assert api.queue_put(settings, now=at(60))[1] is False
    api.queue_put(QueueSettings("alerts"), now=at(61))
    assert [q.name for q in api.queues()] == ["alerts", "digests"]
    with pytest.raises(NotFound):
        api.queue_get("nothing")


def test_concurrent_first_declarations_create_a_queue_once(ledger, api):
    created: list[bool] = []
    errors: list[BaseException] = []

    def declare(n: int) -> None:
        try:
            created.append(api.queue_put(QueueSettings("raced", max_attempts=n + 1))[1])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=declare, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sorted(created) == [False, False, False, True]


def test_keys_are_found_by_digest_listed_oldest_first_and_revoked_once(api):
    stored = api.key_insert(key(rate_per_second=2.0, burst=4.0), digest("jl_secret_1"), now=T0)
    assert (stored.id, stored.name, stored.scopes) == ("k_1", "ops", ("read", "publish:digests"))
    assert (stored.rate_per_second, stored.burst, stored.created_at) == (2.0, 4.0, T0)
    assert stored.revoked_at is None
    assert api.key_get(digest("jl_secret_1")) == stored
    assert api.key_get(digest("jl_wrong")) is None
    api.key_insert(key("k_2", "ci"), digest("jl_secret_2"), now=at(1))
    listed = api.keys()
    assert [k.id for k in listed] == ["k_1", "k_2"]
    revoked = api.key_revoke("k_1", now=at(5))
    assert revoked.revoked_at == at(5)
    assert api.key_revoke("k_1", now=at(9)).revoked_at == at(5)  # revoking again changes nothing
    assert api.key_get(digest("jl_secret_1")).revoked_at == at(5)  # found, and refused by callers
    with pytest.raises(NotFound):
        api.key_revoke("k_nope", now=at(9))


def test_a_session_names_its_key_until_it_expires(api):
    record = api.key_insert(key(), digest("jl_secret_1"), now=T0)
    expires = api.session_insert(digest("token-1"), record.id, 60, now=T0)
    assert expires == at(60)
    assert api.session_get(digest("token-1"), now=at(59)) == record
    assert api.session_get(digest("token-1"), now=at(60)) is None
    api.session_insert(digest("token-2"), record.id, 3600, now=T0)
    assert api.session_prune(now=at(60)) == 1  # expired at its expiry, as session_get says
    assert api.session_get(digest("token-2"), now=at(61)) == record
    api.session_delete(digest("token-2"))
    assert api.session_get(digest("token-2"), now=at(61)) is None
    assert api.session_prune(now=at(7200)) == 0


def test_a_rate_limit_bucket_allows_its_burst_then_refills_at_its_rate(api):
    # 2 per second, bursts of 4: four taken at once, the fifth waits half a second.
    assert [api.ratelimit_take("b", 2.0, 4.0, now=T0) for _ in range(4)] == [0.0] * 4
    wait = api.ratelimit_take("b", 2.0, 4.0, now=T0)
    assert wait == pytest.approx(0.5)
    assert api.ratelimit_take("b", 2.0, 4.0, now=at(0.25)) == pytest.approx(0.25)  # refused ...
    assert api.ratelimit_take("b", 2.0, 4.0, now=at(0.5)) == 0.0  # ... and nothing was taken
    assert api.ratelimit_take("b", 2.0, 4.0, cost=2, now=at(0.5)) == pytest.approx(1.0)
    assert api.ratelimit_take("b", 2.0, 4.0, cost=4, now=at(10)) == 0.0  # refilled to the burst
    # The idle spell refilled the bucket to its burst and no further: the next one waits.
    assert api.ratelimit_take("b", 2.0, 4.0, now=at(10)) == pytest.approx(0.5)
    assert api.ratelimit_take("other", 2.0, 4.0, cost=4, now=at(10)) == 0.0  # its own bucket
