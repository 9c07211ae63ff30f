"""CLI edges (issue 16, item 10): a port in use, an app that fails to import, Ctrl-C during
start-up and during a paced redrive, listings read through a pipe."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from jobledger import JobState
from jobledger._records import Failure, Lease

from ..support.processes import ROOT, wait_exit, wait_until
from .conftest import assert_one_line_error

BOX = set("─│┃━┏┓┗┛┡┩╇╋╭╮╰╯┌┐└┘├┤┬┴┼═║")


def _jobledger(*args: str, cwd=ROOT, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``jobledger ARGS`` in a process of its own, stdout and stderr piped."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    for name in ("JOBLEDGER_URL", "COLUMNS", "LINES"):
        full.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobledger", *args],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_on_a_port_in_use_is_one_line(cli, db_url, ledger):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = cli("serve", "--port", str(port), "--url", db_url)
    assert_one_line_error(run, f"cannot listen on 127.0.0.1:{port}", "in use")
    assert run.out == ""


@pytest.mark.parametrize("command", ["push", "worker"])
def test_a_metrics_port_in_use_is_one_line(cli, db_url, ledger, tmp_path, monkeypatch, command):
    # As serve's --port: a port in use is the command's mistake (exit 2), not a bug (exit 1).
    (tmp_path / "metricsapp.py").write_text(
        "from jobledger import Ledger\n\nledger = Ledger()\n"
        "ledger.task(lambda ctx, n: None, name='t', queue='q')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "metricsapp", raising=False)
    args = ["push"] if command == "push" else ["worker", "metricsapp:ledger", "--burst"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            run = cli(*args, "--metrics-port", str(port), "--url", db_url)
        finally:
            sys.modules.pop("metricsapp", None)
    assert_one_line_error(run, f"cannot serve metrics on 127.0.0.1:{port}", "in use")


@pytest.mark.parametrize(
    "source, attribute, expected",
    [
        (
            'import os\n\nSETTINGS = os.environ["JOBLEDGER_TEST_NO_SUCH_SETTING"]\n',
            "ledger",
            (
                "importing brokenapp failed: KeyError: 'JOBLEDGER_TEST_NO_SUCH_SETTING'",
                "brokenapp.py:3)",
            ),
        ),
        (
            "from jobledger import Ledger\n\n\ndef make():\n    return 1 / 0\n",
            "make",
            ("calling brokenapp:make failed: ZeroDivisionError", "brokenapp.py:5)"),
        ),
        (
            "def broken(:\n    pass\n",
            "ledger",
            ("importing brokenapp failed: SyntaxError", "brokenapp.py:1)"),
        ),
        (
            "import jobledger_no_such_dependency\n",
            "ledger",
            ("ModuleNotFoundError", "jobledger_no_such_dependency", "brokenapp.py:1)"),
        ),
    ],
    ids=["KeyError", "factory", "SyntaxError", "missing-dependency"],
)
def test_an_app_that_fails_to_import_is_reported_where_it_failed(
    cli, tmp_path, monkeypatch, source, attribute, expected
):
    (tmp_path / "brokenapp.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "brokenapp", raising=False)
    try:
        run = cli(
            "worker", f"brokenapp:{attribute}", "--burst", "--url", f"sqlite:///{tmp_path}/x.db"
        )
    finally:
        sys.modules.pop("brokenapp", None)
    assert_one_line_error(run, *expected)


APP = "from jobledger import Ledger\n\nledger = Ledger()\nSETTINGS = {'debug': True}\n"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("goodapp", "expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got 'goodapp'"),
        ("goodapp:", "expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got 'goodapp:'"),
        (":ledger", "expected MODULE:LEDGER (e.g. myapp.jobs:ledger), got ':ledger'"),
        ("goodapp:ledgr", "module 'goodapp' has no attribute 'ledgr'"),
        ("goodapp:ledger.nope", "module 'goodapp' has no attribute 'ledger.nope'"),
        ("goodapp:SETTINGS", "'goodapp:SETTINGS' is a dict, not a jobledger.Ledger"),
    ],
    ids=["no-colon", "no-attribute", "no-module", "misspelt", "dotted", "not-a-ledger"],
)
def test_an_app_spec_that_names_no_ledger_is_one_line(cli, tmp_path, monkeypatch, spec, expected):
    # The module imports fine: what is wrong is the name after it, and the error says which.
    (tmp_path / "goodapp.py").write_text(APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "goodapp", raising=False)
    try:
        run = cli("worker", spec, "--burst", "--url", f"sqlite:///{tmp_path}/x.db")
    finally:
        sys.modules.pop("goodapp", None)
    assert_one_line_error(run)
    assert run.err.strip() == f"error: {expected}"
    assert not (tmp_path / "x.db").exists()


# The console script's start-up, with an import hook that stalls where jobledger imports click,
# so that Ctrl-C lands while jobledger's own modules are being imported.
STALLED_START = """
import pathlib, sys, time

class Stall:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            pathlib.Path(sys.argv.pop()).touch()
            while True:
                time.sleep(0.01)

sys.meta_path.insert(0, Stall())
from jobledger.cli import main
main()
"""


@pytest.fixture
def interruptible() -> Iterator[None]:
    """The processes a test starts take SIGINT as from a terminal's Ctrl-C even when the test
    run itself ignores it (started in the background by a shell without job control): an
    ignored signal stays ignored across exec, one with a handler goes back to its default."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("command", [("--help",), ("status",), ("worker", "x:y")])
def test_ctrl_c_while_jobledger_starts_prints_no_traceback(tmp_path, interruptible, command):
    started = tmp_path / "importing"
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    full.pop("JOBLEDGER_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLED_START, *command, str(started)],
        cwd=tmp_path,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(started.exists, 60, what="the start-up to reach its imports")
    proc.send_signal(signal.SIGINT)
    code, out, err = wait_exit(proc)
    assert code == 130, err
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err


def test_ctrl_c_while_the_app_imports_prints_no_traceback(tmp_path, interruptible):
    started = tmp_path / "importing"
    (tmp_path / "slowapp.py").write_text(
        textwrap.dedent(
            f"""
            import pathlib, time
            pathlib.Path({str(started)!r}).touch()
            while True:
                time.sleep(0.01)
            """
        )
    )
    proc = _jobledger(
        "worker", "slowapp:ledger", "--url", f"sqlite:///{tmp_path}/x.db", cwd=tmp_path
    )
    wait_until(started.exists, 60, what="the app's import to start")
    proc.send_signal(signal.SIGINT)
    code, out, err = wait_exit(proc)
    assert code == 130, err
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err


def test_ctrl_c_during_a_paced_redrive_says_how_many_moved(db_url, ledger):
    """Two jobs a second: Ctrl-C after the first ones moved stops between two batches, says how
    many moved, and that is what the ledger shows."""
    for n in range(30):
        ledger.enqueue("send", {"n": n}, key=f"k{n}", queue="q")
    for job in ledger.backend.jobs.claim(["q"], "w", 30, None):
        ledger.backend.jobs.fail(
            [Failure(Lease(job.id, job.lease_token, job.attempt), False, None, "E", "e")]
        )
    proc = _jobledger("redrive", "--all", "--reason", "r", "--rate", "2", "--url", db_url)

    def moved() -> int:
        return sum(j.state is not JobState.DEAD for j in ledger.jobs())

    wait_until(lambda: moved() >= 2, 60, what="the first batch to move")
    proc.send_signal(signal.SIGINT)
    code, out, err = wait_exit(proc)
    assert code == 130, err
    assert "Traceback" not in err
    now = moved()
    assert 2 <= now < 30
    assert f"interrupted: moved {now} of 30 job(s)" in err
    assert f"{30 - now} not reached are still as they were" in err


LONG_URL = "https://hooks.example.com/" + "receiver/" * 12 + "weekly-digest-deliveries"


def test_keys_and_subscriptions_list_stay_readable_through_a_pipe(cli, db_url, ledger):
    assert cli("keys", "create", "--name", "billing-service", "--scope", "publish:invoices",
               "--scope", "consume:invoices", "--scope", "read", "--url", db_url).code == 0  # fmt: skip
    made = cli(
        "subscriptions", "create", "-q", "invoices", "--to", LONG_URL, "--url", db_url, "--json"
    )
    assert made.code == 0, made.err
    for args, wanted in (
        (("keys", "list"), ("billing-service", "publish:invoices consume:invoices read")),
        (("subscriptions", "list"), (made.json()["id"], "invoices", LONG_URL)),
    ):
        proc = _jobledger(*args, "--url", db_url)
        code, out, err = wait_exit(proc)
        assert code == 0, err
        assert not BOX & set(out), out
        assert "…" not in out, out
        header, *rows = out.splitlines()
        assert len(rows) == 1, out  # one line per record, whole: what grep needs
        assert all(part in rows[0] for part in wanted), out


def test_a_queue_lease_below_a_second_is_refused_as_over_http(cli, db_url, ledger):
    """`queues create --lease-seconds` has the HTTP API's floor (1 s): a shorter lease would
    expire before its message could be acked."""
    refused = cli("queues", "create", "q", "--lease-seconds", "0.0001", "--url", db_url)
    assert refused.code == 2, refused.out
    assert "--lease-seconds" in refused.err and "1" in refused.err, refused.err
    assert not ledger.queue_settings.list()
    assert cli("queues", "create", "q", "--lease-seconds", "1", "--url", db_url).code == 0
    [declared] = ledger.queue_settings.list()
    assert declared.settings.lease_seconds == 1.0


@pytest.mark.slow
def test_ctrl_c_at_the_terminal_stops_worker_processes_gracefully(db_url, ledger, tmp_path):
    """A terminal's Ctrl-C goes to its whole foreground process group. The children of
    `worker --processes` get it once, from their parent — not once from the terminal and once
    passed on, which would be two signals, "stop at once" — so running jobs finish."""
    from jobledger import JobState

    started, go = tmp_path / "started", tmp_path / "go"
    ledger.task(lambda ctx, n: None, name="send", queue="drill")
    jobs = [ledger.enqueue("send", {"n": n}, key=f"block{n}").id for n in range(2)]
    env = {"LIFECYCLE_STARTED": str(started), "LIFECYCLE_GO": str(go), "JOBLEDGER_URL": db_url}
    full = {**os.environ, **env}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    command = ["worker", "tests.apps.lifecycle_app:ledger", "--processes", "2", "--concurrency"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobledger", *command, "1", "--poll-interval", "0.05"],
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a shell runs a job
    )
    try:
        wait_until(
            lambda: len({ledger.job(i).leased_by for i in jobs} - {None}) == 2,
            timeout=60,
            what="each worker process to hold one job",
        )
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole group
        go.touch()
        code, out, err = wait_exit(proc)
    finally:
        go.touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert code == 0, err
    assert [ledger.job(i).state for i in jobs] == [JobState.DONE, JobState.DONE], err


@pytest.mark.parametrize(
    "text, seconds",
    [("1h30m", 5400), ("30D", 30 * 86400), (" 2w ", 14 * 86400), ("2.5s", 2.5), ("45", 45)],
)
def test_durations_combine_units_in_either_case(text, seconds):
    from jobledger.cli.params import parse_duration

    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(
    "text, message",
    [
        ("soon", "is not a duration; write e.g. 30d"),
        ("10x", "is not a duration; write e.g. 30d"),
        ("-1", "is not a duration >= 0"),
        ("nan", "is not a duration >= 0"),
        ("inf", "is not a duration >= 0"),
    ],
)
def test_a_duration_that_is_not_one_is_refused_saying_so(text, message):
    from jobledger.cli.params import parse_duration
    from jobledger.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_duration(text)
