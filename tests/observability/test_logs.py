"""Structured logs: one JSON line per attempt outcome carrying the correlation id given at
enqueue through every attempt; readable lines on a terminal; ``--log-format`` on the commands
that run for long (tested in a real worker process, with its metrics port)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from jobledger import Backoff, JobState, Ledger
from jobledger.cli import main
from jobledger.observability.logs import ConsoleFormatter, JsonFormatter, configure_logging

from ..support.http import ServeProcess
from ..support.metrics import parse, value
from ..support.processes import bursts_until, wait_exit, wait_until, worker_process

OUTCOME_FIELDS = {
    "job_id",
    "key",
    "queue",
    "task",
    "attempt",
    "outcome",
    "duration",
    "error_class",
    "correlation_id",
}


def _record(msg: str = "hello %s", args=("world",), **extra) -> logging.LogRecord:
    record = logging.LogRecord("jobledger.worker", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_the_extra_fields():
    line = JsonFormatter().format(_record(job_id=42, key='a"b\n', correlation_id="c-1", odd={1, 2}))
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["message"] == "hello world" and entry["level"] == "warning"
    assert entry["logger"] == "jobledger.worker" and entry["ts"].endswith("+00:00")
    assert entry["job_id"] == 42 and entry["key"] == 'a"b\n' and entry["correlation_id"] == "c-1"
    assert sorted(entry["odd"]) == [1, 2]
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(exc_info=True)
        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exc"]


def test_json_lines_write_any_extra_value_and_never_let_one_replace_a_standard_field():
    """Values JSON cannot hold become text (a time as ISO 8601, a dict's keys as strings, any
    other object as its str); an extra named like a standard field (a handler's own "message")
    leaves that field as it was; stack_info and a cached traceback are kept."""
    from datetime import UTC, datetime
    from pathlib import PurePosixPath

    at = datetime(2026, 8, 10, 4, 0, tzinfo=UTC)
    record = _record(
        at=at,
        counts={1: [at], "b": None},
        where=PurePosixPath("/srv/app"),
        ts="1999",
        logger="forged",
    )
    record.stack_info = "Stack (most recent call last):\n  here"
    record.exc_text = "Traceback (most recent call last):\nKeyError: 'x'"
    entry = json.loads(JsonFormatter().format(record))
    assert entry["at"] == "2026-08-10T04:00:00+00:00"
    assert entry["counts"] == {"1": ["2026-08-10T04:00:00+00:00"], "b": None}
    assert entry["where"] == "/srv/app"
    assert entry["logger"] == "jobledger.worker" and entry["ts"] != "1999"
    assert entry["stack"].endswith("here") and entry["exc"].endswith("KeyError: 'x'")


def test_json_access_lines_name_method_path_and_status():
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/healthz", "1.1", 200),
        None,
    )
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["method"], entry["path"], entry["status"]) == ("GET", "/healthz", 200)


def test_console_lines_end_with_the_correlation_id():
    line = ConsoleFormatter().format(_record(correlation_id="weekly-digest:2026-08-10T04:00Z"))
    assert line.endswith("hello world  [correlation_id=weekly-digest:2026-08-10T04:00Z]")
    assert "{" not in line


def test_a_console_record_with_a_traceback_keeps_the_correlation_id_on_its_first_line():
    try:
        raise RuntimeError("provider down")
    except RuntimeError:
        record = _record(correlation_id="digest:2026-W33")
        record.exc_info = sys.exc_info()
    lines = ConsoleFormatter().format(record).splitlines()
    assert lines[0].endswith("hello world  [correlation_id=digest:2026-W33]")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "RuntimeError: provider down"


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    """The root logger's handlers and level, put back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_configure_logging_takes_the_format_from_the_environment_when_none_is_given(
    root_logging, monkeypatch
):
    monkeypatch.setenv("JOBLEDGER_LOG_FORMAT", "JSON")
    stream = io.StringIO()
    handler = configure_logging(stream=stream)
    assert isinstance(handler.formatter, JsonFormatter)
    logging.getLogger("jobledger.test").info("hello %s", "env")
    assert json.loads(stream.getvalue())["message"] == "hello env"
    # A format given outright wins over the environment's.
    handler = configure_logging(fmt="console", stream=stream)
    assert isinstance(handler.formatter, ConsoleFormatter)


def test_configure_logging_replaces_the_root_logger_s_handlers(root_logging):
    earlier = io.StringIO()
    root_logging.handlers[:] = [logging.StreamHandler(earlier)]
    stream = io.StringIO()
    handler = configure_logging("warning", "json", stream)
    assert root_logging.handlers == [handler]
    assert root_logging.level == logging.WARNING
    # A logger of the application's own, made here: one configured by an earlier test in this
    # process (uvicorn's do not propagate once uvicorn has set up its logging) would not tell.
    app = logging.getLogger("test_logs.configure_logging")
    app.warning("one line, once")
    app.info("below the level")
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == [
        "one line, once"
    ]
    assert earlier.getvalue() == ""


def test_one_json_line_per_attempt_outcome_with_the_enqueued_correlation_id(ledger):
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("info", "json", stream)
    try:

        @ledger.task(queue="q", max_attempts=3, backoff=Backoff(base=0.001, cap=0.001))
        def flaky(ctx, n: int) -> None:
            if ctx.attempt < 3:
                raise ConnectionError("provider hiccup")  # transient: retried

        job_id = ledger.enqueue(flaky, {"n": 1}, key="k1", correlation_id="order-4187").id
        bursts_until(
            ledger,
            lambda: ledger.job(job_id).state is JobState.DONE,
            "three attempts",
            queues=["q"],
        )
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    outcomes = [e for e in lines if "outcome" in e and e.get("logger") == "jobledger.worker"]
    assert [(e["attempt"], e["outcome"]) for e in outcomes] == [
        (1, "retry"),
        (2, "retry"),
        (3, "done"),
    ]
    for entry in outcomes:
        assert set(entry) >= OUTCOME_FIELDS
        assert entry["correlation_id"] == "order-4187" and entry["key"] == "k1"
        assert entry["queue"] == "q" and entry["task"] == "flaky"
        assert isinstance(entry["duration"], float)
    assert [e["error_class"] for e in outcomes] == ["ConnectionError", "ConnectionError", None]


def test_a_worker_process_logs_json_and_serves_metrics(db_url):
    ledger = Ledger(db_url)
    ledger.migrate()
    ledger.enqueue("flaky", {"n": 1}, key="f1", correlation_id="corr-f1", queue="observed")
    ledger.enqueue("refused", {"n": 2}, key="r2", queue="observed")
    proc = worker_process(
        "tests.apps.observed_app:ledger",
        db_url,
        "--log-format",
        "json",
        "--metrics-port",
        "0",
        "--poll-interval",
        "0.05",
    )
    try:
        wait_until(
            lambda: ledger.job_by_key("f1", "observed").state.value == "done",
            timeout=30,
            what="the flaky job to be done",
        )
        # The port is in the log: read it from the JSON lines so far without ending the process.
        proc.send_signal(signal.SIGTERM)
        code, out, err = wait_exit(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        ledger.close()
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    outcomes = [e for e in lines if e.get("outcome") in ("done", "retry", "dead")]
    assert {(e["key"], e["attempt"], e["outcome"]) for e in outcomes} == {
        ("f1", 1, "retry"),
        ("f1", 2, "done"),
        ("r2", 1, "dead"),
    }
    assert {e["correlation_id"] for e in outcomes if e["key"] == "f1"} == {"corr-f1"}
    assert all(set(e) >= OUTCOME_FIELDS for e in outcomes)
    assert any(e.get("metrics_port") for e in lines)
    assert lines[-1]["message"].startswith("worker done:") and lines[-1]["completed"] == 1


def test_the_metrics_port_of_a_running_worker_process(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    ledger = Ledger(url)
    ledger.migrate()
    ledger.enqueue("refused", {"n": 1}, key="r1", queue="observed")
    proc = worker_process("tests.apps.observed_app:ledger", url, "--metrics-port", "0")
    lines: list[str] = []
    try:
        assert proc.stderr is not None

        def port() -> int | None:
            line = proc.stderr.readline()
            lines.append(line)
            match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
            return int(match[1]) if match else None

        metrics_port = wait_until(port, timeout=30, what="the worker to say its metrics port")

        def dead_counted():
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
            families = parse(text)
            dead = value(families, "jobledger_attempts_total", outcome="dead")
            # The gauge comes from a snapshot cached for 5 s: it may trail the counter.
            depth = value(families, "jobledger_dead_letters", queue="observed")
            return families if (dead, depth) == (1, 1) else None

        wait_until(dead_counted, timeout=30, what="the dead job in the worker's metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        wait_exit(proc, timeout=30)
        ledger.close()


def test_serve_logs_json(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    Ledger(url).migrate()
    server = ServeProcess(url, "--log-format", "json")
    try:
        httpx.get(server.url + "/healthz").raise_for_status()
        wait_until(lambda: "/healthz" in server.output, timeout=10, what="the access line")
    finally:
        server.stop()
    entries = [json.loads(line) for line in server.output.splitlines() if line.strip()]
    assert any(e.get("path") == "/healthz" and e.get("status") == 200 for e in entries)
    assert any("jobledger serving" in e["message"] for e in entries)


def test_an_unknown_log_format_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["worker", "x:y", "--log-format", "xml"])
    assert exit_info.value.code == 2
    assert "'xml' is not one of 'console', 'json'" in capsys.readouterr().err


@contextlib.contextmanager
def json_lines() -> Iterator[list[dict[str, Any]]]:
    """The JSON lines logged in the block (``configure_logging("info", "json")``), read when it
    ends; the root logger's handlers and level as they were afterwards."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("info", "json", stream)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        lines.extend(json.loads(line) for line in stream.getvalue().splitlines())


def _outcome_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if "outcome" in e and e.get("logger") == "jobledger.worker"]


def test_an_outcome_line_has_the_attempt_s_duration_its_worker_and_a_level_by_outcome(ledger):
    """``duration`` is how long the handler ran, ``worker`` the worker that ran it; a failed
    attempt is a warning, a done one is info."""

    @ledger.task(queue="q", max_attempts=2, backoff=Backoff(base=0.001, cap=0.001))
    def slow(ctx) -> None:
        time.sleep(0.05)  # the run the line measures, not a wait for something to happen
        if ctx.attempt == 1:
            raise ConnectionError("provider hiccup")

    job_id = ledger.enqueue(slow, {}, key="slow-1").id
    with json_lines() as lines:
        bursts_until(
            ledger,
            lambda: ledger.job(job_id).state is JobState.DONE,
            "two attempts",
            queues=["q"],
            name="logs-worker-1",
        )
    outcomes = _outcome_lines(lines)
    assert [(e["attempt"], e["outcome"], e["level"]) for e in outcomes] == [
        (1, "retry", "warning"),
        (2, "done", "info"),
    ]
    assert all(e["worker"] == "logs-worker-1" for e in outcomes)
    assert all(e["duration"] >= 0.05 for e in outcomes)


def test_a_job_completed_in_its_handler_s_transaction_has_its_outcome_line(ledger):
    """``ctx.transaction()`` completes the job with the handler's writes: logged as any
    completion, once."""

    @ledger.task(queue="q")
    def in_transaction(ctx) -> None:
        with ctx.transaction():
            pass

    job_id = ledger.enqueue(in_transaction, {}, key="tx-1", correlation_id="corr-tx").id
    with json_lines() as lines:
        bursts_until(
            ledger, lambda: ledger.job(job_id).state is JobState.DONE, "the job", queues=["q"]
        )
    [entry] = _outcome_lines(lines)
    assert (entry["job_id"], entry["key"], entry["outcome"]) == (job_id, "tx-1", "done")
    assert (entry["attempt"], entry["correlation_id"]) == (1, "corr-tx")


def test_a_refused_completion_is_logged_as_a_lost_lease_of_the_job(ledger, db_url):
    """The worker's completion of a job another host took over is refused: the line says
    ``lease_lost`` with the job's id, key, queue and attempt."""

    @ledger.task(queue="w", lease_seconds=60)
    def overtaken(ctx) -> None:
        # Another host, its clock 2 minutes ahead, sees the lease as expired and takes the job.
        later = datetime.now(UTC) + timedelta(minutes=2)
        other = Ledger(db_url)
        try:
            other.backend.jobs.rescue(now=later)
            other.backend.jobs.claim(["w"], "other-host", 1, now=later)
        finally:
            other.close()

    job_id = ledger.enqueue(overtaken, {}, key="taken-1").id
    with json_lines() as lines:
        bursts_until(
            ledger,
            lambda: ledger.job(job_id).leased_by == "other-host",
            "the takeover",
            queues=["w"],
        )
    [entry] = [e for e in lines if e.get("outcome") == "lease_lost"]
    assert entry["level"] == "warning"
    assert (entry["job_id"], entry["key"], entry["queue"], entry["attempt"]) == (
        job_id,
        "taken-1",
        "w",
        1,
    )
    assert not _outcome_lines([e for e in lines if e.get("outcome") != "lease_lost"])


def test_an_attempt_past_its_timeout_is_logged_as_timed_out(ledger):
    """The line of an attempt the task's timeout ended says ``timed_out``, and what it became."""
    release = threading.Event()

    @ledger.task(queue="q", timeout=0.05, max_attempts=1)
    def stuck(ctx) -> None:
        release.wait(30)

    job_id = ledger.enqueue(stuck, {}, key="stuck-1").id
    try:
        with json_lines() as lines:
            bursts_until(
                ledger,
                lambda: ledger.job(job_id).state is JobState.DEAD,
                "the timeout",
                queues=["q"],
            )
    finally:
        release.set()
    [entry] = _outcome_lines(lines)
    assert (entry["job_id"], entry["outcome"], entry["level"]) == (job_id, "timed_out", "warning")
    assert entry["message"].endswith("-> dead)")
