"""A finished message's result over HTTP: the message route shows it, the OpenAPI document
describes it, and the Python client returns it."""

from __future__ import annotations

from jobledger import JobState
from jobledger.client import Client

from .test_consume import receive
from .test_publish import publish


def test_a_done_message_shows_what_its_handler_returned(api):
    ledger = api.ledger

    @ledger.task(queue="r")
    def render(ctx, invoice: int):  # type: ignore[no-untyped-def]
        return {"pdf": f"s3://invoices/{invoice}.pdf", "pages": [1, 2]}

    @ledger.task(queue="r")
    def quiet(ctx) -> None:
        pass

    done_id = ledger.enqueue(render, {"invoice": 4187}, key="inv").id
    quiet_id = ledger.enqueue(quiet, {}, key="quiet").id
    waiting_id = ledger.enqueue(render, {"invoice": 1}, key="later", delay=3600).id
    ledger.run_worker(["r"], burst=True, handle_signals=False)
    body = api.admin.get(f"/v1/messages/{done_id}").json()
    assert body["state"] == "done"
    assert body["result"] == {"pdf": "s3://invoices/4187.pdf", "pages": [1, 2]}
    assert api.admin.get(f"/v1/messages/{quiet_id}").json()["result"] is None
    assert api.admin.get(f"/v1/messages/{waiting_id}").json()["result"] is None
    listed = api.admin.get("/v1/queues/r/messages", params={"key": "inv"}).json()
    assert listed["messages"][0]["result"] == body["result"]
    with Client(api.url, api.admin_key) as client:
        assert client.get_message(done_id)["result"] == body["result"]


def test_a_message_acknowledged_by_a_pull_consumer_has_a_null_result(api):
    api.queue()
    publish(api.admin, {"queue": "q", "payload": {"n": 1}}, "pulled")
    [m] = receive(api.admin)
    api.admin.post("/v1/queue/ack", json={"receipt": m["receipt"]})
    body = api.admin.get(f"/v1/messages/{m['message_id']}").json()
    assert (body["state"], body["result"]) == ("done", None)
    assert api.ledger.job(int(m["message_id"])).state is JobState.DONE


def test_the_document_describes_the_result(api):
    document = api.client(None).get("/openapi.json").json()
    message = document["components"]["schemas"]["Message"]
    assert "result" in message["required"]
    assert message["properties"]["result"]["$ref"] == "#/components/schemas/JsonValue"
    assert "handler returned" in message["properties"]["result"]["description"]
    # Any JSON value, null included.
    kinds = document["components"]["schemas"]["JsonValue"]["anyOf"]
    assert {"type": ["number", "boolean", "null"]} in kinds
