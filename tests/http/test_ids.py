"""Ids beyond the id range (a PostgreSQL bigint, 2^63 - 1) are refused with a 4xx wherever an id
is taken — path, query, body, receipt, dashboard form — on both backends, never a 500. (A
receipt naming such an id is well formed and names no lease: 409, like any stale receipt.)

The routes are found by walking the OpenAPI document and the dashboard's routes, so a route
added later that takes an id is walked too."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobledger.http.models import MAX_ID, MESSAGE_ID
from jobledger.http.routes.consume import RECEIPT

from ..observability.test_dashboard import _csrf, login

#: Just past the range, the value the issue reported, and the largest the old pattern let by.
BEYOND = [str(MAX_ID + 1), "9829211166014628318", "9999999999999999999"]
TOKEN = "9b2f0c3e5d6a47b8a1c2d3e4f5a6b7c8"


def _is_id(schema: dict[str, Any]) -> bool:
    """A message id: the pattern of MESSAGE_ID, or an integer whose maximum is MAX_ID."""
    return schema.get("pattern") == MESSAGE_ID.pattern or (
        schema.get("type") == "integer" and schema.get("maximum") == MAX_ID
    )


def _id_inputs(document: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(method, path, where, name) of every input that carries a message id."""
    schemas = document["components"]["schemas"]

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        return schemas[ref.rsplit("/", 1)[1]] if ref else schema

    found = []
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            for param in op.get("parameters", []):
                if _is_id(param["schema"]):
                    found.append((method.upper(), path, param["in"], param["name"]))
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if content is None:
                continue
            for name, field in resolve(content["schema"]).get("properties", {}).items():
                field = resolve(field)
                if field.get("type") == "array" and _is_id(resolve(field["items"])):
                    found.append((method.upper(), path, "body-list", name))
                elif _is_id(field) or field.get("pattern") == RECEIPT.pattern:
                    found.append((method.upper(), path, "body", name))
    return found


def _request(api, method: str, path: str, where: str, name: str, value: str):
    path_params = re.findall(r"{(\w+)}", path)
    url = path
    for param in path_params:
        url = url.replace(f"{{{param}}}", value if param == name and where == "path" else "q")
    body: dict[str, Any] | None = None
    params = {name: value} if where == "query" else None
    if method != "GET":
        body = {
            "/v1/queues/{name}/redrive": {"reason": "ids"},
            "/v1/messages/{message_id}/resolve": {"note": "ids"},
            "/v1/queue/extend": {"lease_seconds": 30},
        }.get(path, {})
        if where == "body-list":
            body[name] = [value]
        elif name == "receipt":
            body[name] = f"{value}.{TOKEN}"
        elif where == "body":
            body[name] = value
    return api.admin.request(method, url, params=params, json=body)


def test_every_route_taking_an_id_refuses_one_beyond_the_range(api):
    api.queue("q")
    document = api.admin.get("/openapi.json").json()
    inputs = _id_inputs(document)
    # The walk finds what is there today (and whatever is added later).
    assert {(m, p) for m, p, _, _ in inputs} >= {
        ("GET", "/v1/messages/{message_id}"),
        ("POST", "/v1/messages/{message_id}/resolve"),
        ("POST", "/v1/queues/{name}/redrive"),
        ("GET", "/v1/queues/{name}/messages"),
        ("POST", "/v1/queue/ack"),
        ("POST", "/v1/queue/nack"),
        ("POST", "/v1/queue/extend"),
    }
    for method, path, where, name in inputs:
        for value in BEYOND:
            response = _request(api, method, path, where, name, value)
            assert 400 <= response.status_code < 500, (method, path, name, value, response.text)
    # The largest id is an id like any other: not found, not refused as invalid.
    assert api.admin.get(f"/v1/messages/{MAX_ID}").status_code == 404
    redrive = api.admin.post(
        "/v1/queues/q/redrive", json={"reason": "ids", "message_ids": [str(MAX_ID)]}
    )
    assert redrive.status_code == 200 and redrive.json()["message_ids"] == []


def test_the_id_pattern_holds_exactly_the_id_range():
    pattern = re.compile(MESSAGE_ID.pattern)
    for good in ["1", "9", "10", str(2**31), str(10**18), str(MAX_ID - 1), str(MAX_ID)]:
        assert pattern.match(good), good
    for bad in ["0", "01", "-1", "", str(MAX_ID + 1), "9223372036854775810", "9300000000000000000"]:
        assert not pattern.match(bad), bad
    for n in range(1, 20):
        for text in (str(MAX_ID)[:n], "9" * n, str(int("9" * n) // 7 + 1)):
            assert bool(pattern.match(text)) == (0 < int(text) <= MAX_ID), text


@pytest.fixture
def dashboard(api):
    return login(api, api.admin_key)


def test_dashboard_routes_taking_an_id_refuse_one_beyond_the_range(api, dashboard):
    app_paths = [getattr(r, "path", "") for r in api.server.app.routes]
    job_paths = [p for p in app_paths if "{job_id}" in p]
    assert set(job_paths) >= {
        "/ui/jobs/{job_id}",
        "/ui/jobs/{job_id}/redrive",
        "/ui/jobs/{job_id}/resolve",
        "/ui/jobs/{job_id}/cancel",
    }
    csrf = _csrf(dashboard.get("/ui/dead").text)
    form = {"csrf": csrf, "reason": "ids", "note": "ids", "queue": "q"}
    for value in BEYOND:
        for path in job_paths:
            url = path.replace("{job_id}", value)
            is_page = url.count("/") == 3
            response = dashboard.get(url) if is_page else dashboard.post(url, data=form)
            assert 400 <= response.status_code < 500, (url, response.status_code)
        for action in ("/ui/dead/redrive", "/ui/dead/resolve"):
            response = dashboard.post(action, data={**form, "id": value})
            assert 400 <= response.status_code < 500, (action, value, response.status_code)
        search = dashboard.get("/ui/search", params={"key": value})
        assert search.status_code == 200, (value, search.status_code)
