"""The fake provider the demo, drill and chaos tests measure effects with: it must count only
whole requests, and absorb repeats by Idempotency-Key."""

from __future__ import annotations

import json
import socket

import httpx

from jobledger.testing.fakeprovider import FakeProvider

from .support.processes import wait_until


def test_repeats_with_one_key_are_absorbed():
    with FakeProvider() as provider:
        for _ in range(3):
            r = httpx.post(
                f"{provider.url}/send", json={"to": "a"}, headers={"Idempotency-Key": "k"}
            )
            assert r.status_code == 200
        stats = provider.stats()
    assert (stats["accepted"], stats["duplicates"], stats["duplicate_sends"]) == (1, 2, 0)


def test_a_request_cut_off_before_its_body_is_not_a_message():
    """A worker SIGKILLed mid-request leaves headers and a partial body: nothing is sent."""
    with FakeProvider() as provider:
        host, port = provider.url.removeprefix("http://").split(":")
        body = json.dumps({"to": "customer-1"}).encode()
        with socket.create_connection((host, int(port))) as conn:
            conn.sendall(
                b"POST /send HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body) + 20}\r\n\r\n".encode()
                + body
            )
        wait_until(lambda: provider.stats()["incomplete"] == 1, what="the cut-off request")
        assert provider.stats()["accepted"] == 0
        whole = httpx.post(
            f"{provider.url}/send", json={"to": "customer-1"}, headers={"Idempotency-Key": "k1"}
        )
        assert whole.status_code == 200 and "replayed" not in whole.json()
        assert provider.stats()["accepted"] == 1
