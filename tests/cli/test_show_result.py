"""``jobledger show`` prints a done job's result, cut when long; ``--json`` has it whole."""

from __future__ import annotations


def test_show_prints_the_result_short_and_json_in_full(cli, db_url, ledger):
    @ledger.task(queue="r")
    def render(ctx, n: int):  # type: ignore[no-untyped-def]
        return {"pdf": f"s3://invoices/{n}.pdf"} if n else {"text": "x" * 1000}

    ledger.enqueue(render, {"n": 4187}, key="short")
    ledger.enqueue(render, {"n": 0}, key="long")
    ledger.enqueue(render, {"n": 1}, key="pending", delay=3600)
    ledger.run_worker(["r"], burst=True, handle_signals=False)

    run = cli("show", "short", "--url", db_url)
    assert run.code == 0, run.err
    [line] = [x for x in run.out.splitlines() if x.strip().startswith("result")]
    assert line.split(None, 1)[1] == '{"pdf": "s3://invoices/4187.pdf"}'

    long = cli("show", "long", "--url", db_url)
    [line] = [x for x in long.out.splitlines() if x.strip().startswith("result")]
    shown = line.split(None, 1)[1]
    assert shown.endswith("…") and len(shown) == 201

    [line] = [x for x in cli("show", "pending", "--url", db_url).out.splitlines() if "result" in x]
    assert line.split() == ["result", "-"]

    assert cli("show", "long", "--url", db_url, "--json").json()["job"]["result"] == {
        "text": "x" * 1000
    }
    assert cli("show", "pending", "--url", db_url, "--json").json()["job"]["result"] is None
