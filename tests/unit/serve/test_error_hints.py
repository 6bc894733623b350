"""A JSON body sent without ``Content-Type: application/json`` (curl -d) gets a 422 that says so."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from aifab.serve.errors import install_error_handlers


class Body(BaseModel):
    request_id: str


def _client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/thing")
    def thing(body: Body) -> dict[str, str]:
        return {"id": body.request_id}

    return TestClient(app)


def test_a_form_encoded_json_body_names_the_missing_header() -> None:
    # What `curl -d '{"request_id": "r1"}'` sends: form encoding.
    r = _client().post(
        "/v1/thing",
        content=b'{"request_id": "r1"}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 422
    assert "Content-Type: application/json" in r.json()["error"]["message"]


def test_a_json_body_with_the_header_is_read() -> None:
    r = _client().post("/v1/thing", json={"request_id": "r1"})
    assert r.status_code == 200 and r.json() == {"id": "r1"}


def test_a_wrong_json_body_does_not_blame_the_header() -> None:
    r = _client().post("/v1/thing", json={"nope": 1})
    assert r.status_code == 422
    assert "Content-Type" not in r.json()["error"]["message"]
