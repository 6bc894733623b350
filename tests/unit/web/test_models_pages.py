"""Runs and models pages through the real app (no browser): paging, 404s, refusals, CSRF."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aifab.serve.app import create_app
from aifab.track import register_model, resolve_model, start_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import sign_in  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def runs(module_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Five runs with a loss curve (one named with markup), and model ``m`` of two versions."""
    ids = []
    weights = tmp_path_factory.mktemp("model") / "weights.txt"
    weights.write_text("not a real model")
    datasets = [{"name": "rows", "ref": "rows@3", "digest": "d" * 64, "num_rows": 10}]
    for i in range(5):
        name = XSS if i == 4 else f"run-{i}"
        with start_run(
            "pages",
            run_name=name,
            params={"lr": 0.1 * (i + 1)},
            datasets=datasets,
            system_metrics=False,
        ) as run:
            for step in range(20):
                run.log_metrics({"loss": (i + 1) / (step + 1)}, step=step)
            run.log_artifact(weights, "model")
        ids.append(run.id)
    register_model(ids[0], "model", "m")
    register_model(ids[1], "model", "m")
    return ids


@pytest.fixture
def client(runs: list[str]) -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _run_links(html: str) -> list[str]:
    return re.findall(r'href="/ui/runs/([0-9a-f]{32})"', html)


def test_runs_page_a_page_at_a_time(client: TestClient, runs: list[str]) -> None:
    sign_in(client, "viewer")
    first = client.get("/ui/runs?experiment=pages&limit=2")
    assert first.status_code == 200
    assert _run_links(first.text) == [runs[4], runs[3]]
    assert 'rel="next"' in first.text and 'rel="prev"' not in first.text
    last = client.get("/ui/runs?experiment=pages&limit=2&offset=4")
    assert _run_links(last.text) == [runs[0]]
    assert 'rel="next"' not in last.text and 'rel="prev"' in last.text
    beyond = client.get("/ui/runs?experiment=pages&offset=999999")
    assert beyond.status_code == 200 and _run_links(beyond.text) == []
    assert "No runs here yet" in beyond.text


@pytest.mark.parametrize("query", ["limit=0", "limit=-3", "limit=abc", "offset=-1", "limit=99999"])
def test_bad_paging_numbers_fall_back_to_a_bounded_page(client: TestClient, query: str) -> None:
    sign_in(client, "viewer")
    r = client.get(f"/ui/runs?experiment=pages&{query}")
    assert r.status_code == 200
    assert 1 <= len(_run_links(r.text)) <= 5


def test_unknown_things_are_404_pages(client: TestClient) -> None:
    sign_in(client, "viewer")
    for path in (
        "/ui/runs/0123456789abcdef0123456789abcdef",
        "/ui/runs?experiment=no-such-experiment",
        "/ui/models/no-such-model",
        "/ui/models/m/99",
        "/ui/models/m/latest",
    ):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert "text/html" in r.headers["content-type"]
    for path in ("/ui/runs/%3Cscript%3E", "/ui/runs/compare?run=x&run=%27%22", "/ui/models/a%20b"):
        r = client.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
        assert "<script>" not in r.text.split("</head>")[1]


def test_run_page_has_each_curve_params_and_dataset_links(
    client: TestClient, runs: list[str]
) -> None:
    sign_in(client, "viewer")
    r = client.get(f"/ui/runs/{runs[1]}")
    assert r.status_code == 200
    spec = re.search(r'<pre hidden id="metric-0-spec">(.*?)</pre>', r.text)
    assert spec is not None and '"label": "loss"' in spec.group(1)
    assert '"data": [2.0, 1.0,' in spec.group(1)  # loss = 2 / (step + 1)
    assert 'href="/ui/data/rows/versions/3"' in r.text
    assert "<td>lr</td><td>0.2</td>" in r.text


def test_markup_in_a_run_name_is_text(client: TestClient, runs: list[str]) -> None:
    sign_in(client, "viewer")
    for path in ("/ui/runs?experiment=pages", f"/ui/runs/{runs[4]}"):
        r = client.get(path)
        assert XSS not in r.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in r.text


def test_compare_draws_one_line_per_run(client: TestClient, runs: list[str]) -> None:
    sign_in(client, "viewer")
    r = client.get(f"/ui/runs/compare?run={runs[0]}&run={runs[2]}&metric=loss")
    assert r.status_code == 200
    spec = re.search(r'id="compare-chart-spec">(.*?)</pre>', r.text)
    assert spec is not None
    assert spec.group(1).count('"label": "run-') == 2
    assert "<td>lr</td>" in r.text  # the param that differs


@pytest.mark.parametrize("count", [0, 1, 11])
def test_compare_needs_two_to_ten_runs(client: TestClient, runs: list[str], count: int) -> None:
    sign_in(client, "viewer")
    ids = [f"{i:032x}" for i in range(count)] if count > 1 else runs[:count]
    query = "&".join(f"run={i}" for i in ids)
    assert client.get(f"/ui/runs/compare?{query}").status_code == 400


def test_model_and_version_pages(client: TestClient, runs: list[str]) -> None:
    sign_in(client, "viewer")
    r = client.get("/ui/models")
    assert r.status_code == 200 and 'href="/ui/models/m"' in r.text
    r = client.get("/ui/models/m")
    assert 'href="/ui/models/m/2"' in r.text and 'href="/ui/models/m/1"' in r.text
    assert "Move alias" not in r.text and "needs a developer" in r.text
    r = client.get("/ui/models/m/1")
    assert r.status_code == 200
    assert f'href="/ui/runs/{runs[0]}"' in r.text and 'href="/ui/data/rows/versions/3"' in r.text
    assert "No card built" in r.text and "Build the card" not in r.text


def _move(client: TestClient, token: str | None, version: str = "1") -> Any:
    data = {"alias": "champion", "version": version}
    if token is not None:
        data["csrf"] = token
    return client.post("/ui/models/m/alias", data=data, follow_redirects=False)


def test_moving_an_alias_needs_csrf_and_the_deploy_permission(client: TestClient) -> None:
    token = sign_in(client, "viewer").csrf
    assert _move(client, token).status_code == 403
    client.cookies.clear()
    token = sign_in(client, "developer").csrf
    assert _move(client, None).status_code == 403
    r = _move(client, token, "2")
    assert r.status_code == 303 and r.headers["location"] == "/ui/models/m"
    assert resolve_model("m@champion")["version"] == 2
    assert _move(client, token, "x").status_code == 400
    assert _move(client, token, "7").status_code == 404
    r = client.get("/ui/models/m")
    assert "Move alias" in r.text and "champion → 2</a>" in r.text


def test_building_a_card_is_refused_to_viewers(client: TestClient) -> None:
    token = sign_in(client, "viewer").csrf
    r = client.post("/ui/models/m/1/card", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 403
