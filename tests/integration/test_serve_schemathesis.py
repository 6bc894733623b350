"""The OpenAPI schema fuzzed with schemathesis against a real server: no 5xx, whatever the input."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from tests import live_http

from aifab.serve.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The schema of the app as built (no server needed to collect the tests).
schema = schemathesis.openapi.from_dict(create_app().openapi())


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def live(
    churn_model: dict[str, Any], module_workspace: Path, live_server: Callable[..., Any]
) -> Iterator[dict[str, Any]]:
    from aifab.inference.deployments import create_deployment, list_deployments
    from aifab.serve.keys import create_key

    if "churn" not in {d["name"] for d in list_deployments()}:  # the quickstart deploys it
        create_deployment("churn@champion", name="churn")
    _, secret = create_key("admin", name="fuzzer", rate=None)
    server = live_server(reconcile_interval_s=0.5)
    try:
        yield {"url": server.url, "headers": {"Authorization": f"Bearer {secret}"}}
    finally:
        server.stop()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: Any, live: dict[str, Any]) -> None:
    if case.path == "/v1/predict/{deployment}":
        case.path_parameters = {"deployment": "churn"}  # fuzz the rows, not the name
    response = case.call(base_url=live["url"], headers=live["headers"], timeout=30)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    if response.status_code >= 400:  # every error is the one JSON shape
        assert "error" in response.json(), response.text[:500]


def test_openapi_docs_are_served(live: dict[str, Any]) -> None:
    assert live_http.get(f"{live['url']}/docs").status_code == 200
    spec = live_http.get(f"{live['url']}/openapi.json").json()
    assert "/v1/predict/{deployment}" in spec["paths"]
