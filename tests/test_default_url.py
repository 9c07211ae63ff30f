"""A missing URL is said, not guessed (issue 17, item 8): ``Ledger()`` without a URL and without
``JOBLEDGER_URL`` still uses ``sqlite:///jobledger.db`` (the tour, the demo), naming the file in
a warning when it is first opened; ``JOBLEDGER_REQUIRE_URL=1`` refuses that default."""

from __future__ import annotations

import logging

import pytest

from jobledger import ConfigError, Ledger


@pytest.fixture
def no_url(monkeypatch, tmp_path):
    monkeypatch.delenv("JOBLEDGER_URL", raising=False)
    monkeypatch.delenv("JOBLEDGER_REQUIRE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _default_url_warnings(caplog) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "jobledger.ledger" and "no database URL given" in r.getMessage()
    ]


def test_the_default_is_used_and_named_once(no_url, caplog):
    caplog.set_level(logging.INFO, logger="jobledger")
    ledger = Ledger()
    assert _default_url_warnings(caplog) == []  # nothing is said before the database is used
    with ledger:
        ledger.enqueue("send", key="k1")
        ledger.enqueue("send", key="k2")
        [record] = _default_url_warnings(caplog)
        assert record.levelno == logging.WARNING
        assert str(no_url / "jobledger.db") in record.getMessage()
        assert "JOBLEDGER_REQUIRE_URL=1" in record.getMessage()
        assert ledger.job_by_key("k1").key == "k1"
    assert (no_url / "jobledger.db").exists()


@pytest.mark.parametrize("how", ["argument", "environment", "use_url"])
def test_a_given_url_says_nothing(no_url, caplog, monkeypatch, how):
    caplog.set_level(logging.INFO, logger="jobledger")
    url = f"sqlite:///{no_url}/given.db"
    if how == "environment":
        monkeypatch.setenv("JOBLEDGER_URL", url)
    ledger = Ledger(url if how == "argument" else None)
    if how == "use_url":
        ledger.use_url(url)
    with ledger.open():
        assert ledger.url.path.endswith("given.db")
    assert _default_url_warnings(caplog) == []
    assert not (no_url / "jobledger.db").exists()


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
@pytest.mark.parametrize("first_use", ["open", "enqueue", "migrate"])
def test_a_deployment_can_forbid_the_default(no_url, monkeypatch, value, first_use):
    monkeypatch.setenv("JOBLEDGER_REQUIRE_URL", value)
    ledger = Ledger()  # an app's module-level ledger: the CLI's --url may still come
    with pytest.raises(ConfigError) as info:
        if first_use == "open":
            ledger.open()
        elif first_use == "enqueue":
            ledger.enqueue("send", key="k")
        else:
            ledger.migrate()
    message = str(info.value)
    assert "no database URL given" in message and "JOBLEDGER_REQUIRE_URL" in message
    assert "JOBLEDGER_URL" in message
    assert list(no_url.iterdir()) == []  # no file made


@pytest.mark.parametrize("how", ["argument", "environment", "use_url"])
def test_forbidding_the_default_leaves_a_given_url_alone(no_url, monkeypatch, how):
    monkeypatch.setenv("JOBLEDGER_REQUIRE_URL", "1")
    url = f"sqlite:///{no_url}/given.db"
    if how == "environment":
        monkeypatch.setenv("JOBLEDGER_URL", url)
    ledger = Ledger(url if how == "argument" else None)
    if how == "use_url":
        ledger.use_url(url)
    with ledger:
        ledger.enqueue("send", key="k")
    assert sorted(p.name for p in no_url.iterdir() if p.suffix == ".db") == ["given.db"]


@pytest.mark.parametrize("value", ["0", "false", "no", "off", ""])
def test_a_no_allows_the_default(no_url, monkeypatch, value):
    monkeypatch.setenv("JOBLEDGER_REQUIRE_URL", value)
    with Ledger().open() as ledger:
        ledger.enqueue("send", key="k")


def test_a_value_that_is_neither_yes_nor_no_is_an_error(no_url, monkeypatch):
    monkeypatch.setenv("JOBLEDGER_REQUIRE_URL", "sometimes")
    with pytest.raises(ConfigError, match="JOBLEDGER_REQUIRE_URL must be 1 or 0.*'sometimes'"):
        Ledger().open()
