"""The prompt registry: sandboxed rendering, checked variables, immutable versions, aliases,
audit events, the CLI and ``/v1/prompts`` with roles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.prompts import (
    create_prompt,
    get_prompt,
    list_prompts,
    render_prompt,
    set_prompt_alias,
)
from aifab.prompts.template import render

QA = "Answer from the context.\nContext: {{ context }}\nQuestion: {{ question }}\n"


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ x.__class__.__mro__ }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ joiner.__init__.__globals__ }}",
        "{{ x.__init__.__globals__['__builtins__'] }}",
        "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
        "{{ x|attr('__class__') }}",
        "{{ lipsum.__globals__ }}",
    ],
)
def test_templates_cannot_reach_python_internals(attack: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        render(attack, ["x"], {"x": "s"})
    assert "template" in err.value.message
    assert "<class" not in err.value.message  # no class listing leaked into the error


def test_templates_cannot_mutate_their_variables() -> None:
    with pytest.raises(InvalidInputError, match="sandbox"):
        render("{{ items.append(1) }}", ["items"], {"items": []})


def test_missing_and_extra_variables_name_themselves() -> None:
    with pytest.raises(InvalidInputError, match="missing variable.*question"):
        render(QA, ["context", "question"], {"context": "c"})
    with pytest.raises(InvalidInputError, match="unknown variable.*colour"):
        render(QA, ["context", "question"], {"context": "c", "question": "q", "colour": "red"})


def test_create_checks_declared_variables_and_syntax() -> None:
    with pytest.raises(InvalidInputError, match="undeclared variable.*question"):
        create_prompt("qa", QA, variables=["context"])
    with pytest.raises(InvalidInputError, match="line 2"):
        create_prompt("qa", "ok\n{{ broken ", variables=None)
    p = create_prompt("qa", QA)
    assert p["variables"] == ["context", "question"]


def test_versions_are_immutable_and_aliases_move() -> None:
    v1 = create_prompt("qa", QA, alias="prod")
    same = create_prompt("qa", QA)
    assert same["version"] == v1["version"] == 1  # same content, no new version
    v2 = create_prompt("qa", QA + "Be brief.\n")
    assert v2["version"] == 2
    assert get_prompt("qa@prod")["template"] == QA  # the alias still names v1's text
    assert get_prompt("qa")["version"] == 2
    set_prompt_alias("qa", "prod", 2)
    assert get_prompt("qa@prod")["version"] == 2
    assert get_prompt("qa@1")["template"] == QA
    assert [r["version"] for r in list_prompts("qa")] == [2, 1]
    with pytest.raises(NotFoundError, match="no alias 'staging'"):
        get_prompt("qa@staging")
    with pytest.raises(NotFoundError):
        set_prompt_alias("qa", "prod", 9)
    with session_scope() as s:
        actions = [e.action for e in list_events(s, action="prompt.")]
    assert actions.count("prompt.create") == 2
    assert actions.count("prompt.alias") == 2


def test_render_through_the_registry() -> None:
    create_prompt("qa", QA)
    out = render_prompt("qa", {"context": "aifab is a platform", "question": "what?"})
    assert out["ref"] == "qa@1"
    assert "Context: aifab is a platform" in out["text"]


def test_cli_create_render_list_and_errors(cli, tmp_path: Path) -> None:
    f = tmp_path / "qa.j2"
    f.write_text(QA, encoding="utf-8")
    r = cli("prompts", "create", "qa", "-f", f, "--var", "context", "--var", "question", "--json")
    assert r.exit_code == 0, r.stderr
    r = cli("prompts", "render", "qa@1", "--set", "context=C", "--set", "question=Q")
    assert r.exit_code == 0, r.stderr
    assert "Question: Q" in r.stdout
    r = cli("prompts", "render", "qa", "--set", "context=C")
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: missing variable(s): question"
    r = cli("prompts", "create", "x", "-f", tmp_path / "nope.j2")
    assert r.exit_code == 2 and "no such file" in r.stderr
    junk = tmp_path / "junk.j2"
    junk.write_bytes(b"\xff\xfe\x00junk")
    r = cli("prompts", "create", "x", "-f", junk)
    assert r.exit_code == 2 and "UTF-8" in r.stderr
    r = cli("prompts", "list", "--json")
    assert '"qa"' in r.stdout


@pytest.fixture
def client() -> Iterator[TestClient]:
    from aifab.serve.app import create_app

    with TestClient(create_app()) as c:
        yield c


def _key(role: str) -> dict[str, str]:
    from aifab.serve.keys import create_key

    _, secret = create_key(role, rate=None)
    return {"Authorization": f"Bearer {secret}"}


def test_http_roles_and_errors(client: TestClient) -> None:
    dev, cl = _key("developer"), _key("client")
    body = {"name": "qa", "template": QA, "alias": "prod"}
    assert client.post("/v1/prompts", json=body, headers=cl).status_code == 403
    r = client.post("/v1/prompts", json=body, headers=dev)
    assert r.status_code == 201, r.text
    r = client.post(
        "/v1/prompts/qa@prod/render",
        headers=cl,
        json={"variables": {"context": "c", "question": "q"}},
    )
    assert r.status_code == 200 and "Question: q" in r.json()["text"]
    r = client.post("/v1/prompts/qa/render", headers=cl, json={"variables": {"context": "c"}})
    assert r.status_code == 422
    assert "question" in r.json()["error"]["message"]
    r = client.post(
        "/v1/prompts", headers=dev, json={"name": "evil", "template": "{{ ''.__class__.__mro__ }}"}
    )
    assert r.status_code == 201  # storing is fine; rendering is refused
    r = client.post("/v1/prompts/evil/render", headers=cl, json={"variables": {}})
    assert r.status_code == 422
    assert client.get("/v1/prompts/nope", headers=cl).status_code == 404
    r = client.put("/v1/prompts/qa/aliases/prod", headers=cl, json={"version": 1})
    assert r.status_code == 403
    r = client.post("/v1/prompts", headers=dev, json={"name": "bad", "template": "{% if %}"})
    assert r.status_code == 422


def test_hostile_templates_are_bounded() -> None:
    with pytest.raises(InvalidInputError, match="sandbox"):
        render("{% set n = 10 %}{{ n ** 100000000 }}", [], {})
    with pytest.raises(InvalidInputError, match="sandbox"):
        render("{{ 'x' * 10000000000 }}", [], {})
    with pytest.raises(InvalidInputError, match="over"):
        render("{% for i in range(99999) %}{{ 'y' * 99 }}{% endfor %}", [], {})
    assert render("{{ 2 ** 10 }} {{ 'ab' * 3 }}", [], {}) == "1024 ababab"


def test_http_odd_refs_are_4xx(client: TestClient) -> None:
    dev = _key("developer")
    client.post("/v1/prompts", json={"name": "qa", "template": QA}, headers=dev)
    assert client.get("/v1/prompts/qa@99999999999999999999999", headers=dev).status_code == 404
    r = client.put("/v1/prompts/qa/aliases/prod", headers=dev, json={"version": 2**70})
    assert r.status_code == 422
