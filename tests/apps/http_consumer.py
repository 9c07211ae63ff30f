"""A pull consumer in a process of its own, speaking plain HTTP (as one in any language would).

    python -m tests.apps.http_consumer URL KEY QUEUE COUNT

Receives with long polling until COUNT messages reached a final outcome. Each payload says what
to do: ``{"do": "ack"}``, ``{"do": "retry-once"}`` (nack with retry_after_seconds 0 on the first
delivery, ack on the second) or ``{"do": "permanent"}`` (nack permanent). Prints a JSON summary.
"""

from __future__ import annotations

import json
import sys

import httpx

from ..support.waiting import Patience


def main(url: str, key: str, queue: str, count: int) -> None:
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    finished: dict[str, str] = {}
    deliveries = 0
    patience = Patience(60, progress=lambda: len(finished))
    while len(finished) < count and not patience.expired():
        response = client.post(
            "/v1/queue/receive",
            json={"queue": queue, "max_messages": 5, "wait_seconds": 2, "consumer": "py-proc"},
        )
        response.raise_for_status()
        for message in response.json()["messages"]:
            deliveries += 1
            action = message["payload"]["do"]
            receipt = message["receipt"]
            if action == "permanent":
                body = {"receipt": receipt, "error": "cannot be done", "permanent": True}
                client.post("/v1/queue/nack", json=body).raise_for_status()
                finished[message["key"]] = "dead"
            elif action == "retry-once" and message["attempt"] == 1:
                body = {"receipt": receipt, "error": "try again", "retry_after_seconds": 0}
                client.post("/v1/queue/nack", json=body).raise_for_status()
            else:
                client.post("/v1/queue/ack", json={"receipt": receipt}).raise_for_status()
                finished[message["key"]] = "done"
    print(json.dumps({"finished": finished, "deliveries": deliveries}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
