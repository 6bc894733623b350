"""Knowledge bases, prompts and agents in Debian's chromium against a live server.

The chat model behind asking, prompt evaluation and the agent is a STAND-IN for an outside LLM
API (the scripted OpenAI-compatible server of tests/unit/agents): none can be reached here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from tests.unit.agents.conftest import StandInLLM, answer, tool_call

pytestmark = pytest.mark.integration

IMG_PROBE = "<img src=x onerror=alert('xss-img')>"
SCRIPT_PROBE = "<script>alert('xss-script')</script>"


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandInLLM]:
    server = StandInLLM()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def apps(dashboard: Any, stand_in: StandInLLM, module_workspace: Any) -> Iterator[dict[str, Any]]:
    """A KB with a hostile document, a prompt with two versions and an evaluation, and an agent
    run whose trace carries hostile text; the stand-in's URL is an allowed chat URL."""
    from aifab.agents import create_agent, run_agent
    from aifab.data import ingest
    from aifab.prompts import create_prompt, eval_prompt
    from aifab.rag import create_kb

    docs = [
        {
            "id": "deploy.md",
            "text": "# Deploying\n\nUse aifab deploy churn@champion to serve a "
            "model behind the gateway. Canaries take a share of traffic.",
        },
        {
            "id": "lake.md",
            "text": "# The lake\n\nDataset versions are immutable Parquet files "
            "queried with DuckDB.",
        },
        {
            "id": "probe.md",
            "text": f"# Probe\n\nThe probe {IMG_PROBE} and {SCRIPT_PROBE} "
            "are only text about canaries.",
        },
    ]
    create_kb("docs", docs, config={"chunk_tokens": 48, "chunk_overlap": 8})

    create_prompt("support", "Answer briefly: {{ question }}", description="first try")
    create_prompt("support", "Answer in one word: {{ question }}", alias="production")
    csv = module_workspace / "support_eval.csv"
    csv.write_text("question,expected\nWhat serves models?,gateway\nWhat stores data?,lake\n")
    ingest("support_eval", str(csv))
    stand_in.scripts["eval-model"] = lambda messages, tools: answer("gateway")
    eval_prompt("support@2", "support_eval", f"{stand_in.base_url}#eval-model")

    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in messages):
            quoted = IMG_PROBE.replace("'", "''")
            return tool_call("sql", {"query": f"SELECT '{quoted}' AS probe"})
        return answer(f"Done. {SCRIPT_PROBE} {IMG_PROBE}")

    stand_in.scripts["agent-model"] = script
    create_agent(
        {
            "name": "helper",
            "model": {"model": "agent-model", "base_url": stand_in.base_url},
            "tools": [{"use": "sql", "options": {"max_rows": 3}}],
        }
    )
    run = run_agent("helper", f"Say {IMG_PROBE}")
    assert run["status"] == "completed", run
    stand_in.scripts["kb-model"] = lambda messages, tools: answer("Deploy with aifab deploy [1].")
    old = os.environ.get("AIFAB_CHAT_URLS")
    os.environ["AIFAB_CHAT_URLS"] = stand_in.base_url
    yield {"run": run, "chat": f"{stand_in.base_url}#kb-model"}
    if old is None:
        os.environ.pop("AIFAB_CHAT_URLS", None)
    else:
        os.environ["AIFAB_CHAT_URLS"] = old


def _no_dialogs(page: Any) -> list[str]:
    fired: list[str] = []
    page.on("dialog", lambda d: (fired.append(d.message), d.dismiss()))
    return fired


def test_knowledge_base_search_shows_hybrid_results_with_hostile_text_inert(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    apps: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("viewer")
    fired = _no_dialogs(page)
    page.get_by_role("link", name="Knowledge").click()
    page.get_by_role("link", name="docs").click()
    expect(page.get_by_role("heading", name="Knowledge base docs", level=1)).to_be_visible()
    page.get_by_label("Query").fill("canary traffic probe")
    page.get_by_role("button", name="Search").click()
    results = page.locator("#kb-results")
    expect(results.get_by_text("deploy.md")).to_be_visible()
    assert "dense rank" in results.inner_text() or "bm25 rank" in results.inner_text()
    probe = results.locator("li", has_text="probe.md")
    assert IMG_PROBE in probe.inner_text() and SCRIPT_PROBE in probe.inner_text()
    assert page.locator("#kb-results img").count() == 0
    assert fired == []
    # A viewer may search but not ask (asking calls a model: the invoke permission).
    assert page.locator("#ask-form").count() == 0
    screenshot(page, "kb-search")
    page.goto(dashboard.url + "/ui/kb")
    screenshot(page, "kb-list")


def test_asking_shows_the_answer_with_citations_or_the_models_error(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], apps: dict[str, Any]
) -> None:
    page = sign_in("developer")
    page.get_by_role("link", name="Knowledge").click()
    page.get_by_role("link", name="docs").click()
    page.get_by_label("Question").fill("How do I deploy a model?")
    page.get_by_label("Chat model (an LM deployment)").fill(apps["chat"])
    page.get_by_role("button", name="Ask").click()
    assert "Deploy with aifab deploy [1]." in page.locator("#kb-answer").inner_text()
    assert page.locator("#kb-answer li", has_text="deploy.md").count() >= 1
    screenshot(page, "kb-ask")
    page.get_by_label("Chat model (an LM deployment)").fill("no-such-lm")
    page.get_by_role("button", name="Ask").click()
    error = page.locator("#kb-answer-error").inner_text()
    assert "could not be answered" in error and "no-such-lm" in error


def test_prompts_show_versions_aliases_template_and_evaluations(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    apps: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Prompts").click()
    row = page.locator("tr", has_text="support")
    expect(row.get_by_text("production")).to_be_visible()
    screenshot(page, "prompts-list")
    row.get_by_role("link", name="support").click()
    assert page.locator("#prompt-template").inner_text() == "Answer in one word: {{ question }}"
    evals = page.locator("#prompt-evals").inner_text()
    assert "support@2" in evals and "support_eval@1" in evals and "0.5" in evals
    screenshot(page, "prompt")
    page.get_by_role("link", name="support@1").click()
    assert page.locator("#prompt-template").inner_text() == "Answer briefly: {{ question }}"
    page.goto(dashboard.url + "/ui/prompts/support?version=9")
    assert "not found" in page.get_by_role("alert").inner_text()


def test_an_agent_run_is_a_step_by_step_trace_with_hostile_text_inert(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], apps: dict[str, Any]
) -> None:
    page = sign_in("viewer")
    fired = _no_dialogs(page)
    page.get_by_role("link", name="Agents").click()
    agent = page.locator("tr", has_text="agent-model").inner_text()
    assert "agent-model" in agent and "sql" in agent
    screenshot(page, "agents")
    page.get_by_role("link", name=apps["run"]["id"]).click()
    steps = page.locator("#run-trace > li")
    expect(steps).to_have_count(3)
    assert "model call: chat" in steps.nth(0).inner_text()
    tool = steps.nth(1).inner_text()
    assert "tool call: sql" in tool and "ms" in tool and "SELECT" in tool
    assert "Error" not in tool and f'"probe": "{IMG_PROBE}"' in tool  # the rows it returned
    assert "tokens" in steps.nth(2).inner_text()
    assert SCRIPT_PROBE in page.locator("#run-answer").inner_text()
    assert IMG_PROBE in page.locator("#run-input").inner_text()
    assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
    assert fired == []
    screenshot(page, "agent-trace")
    page.get_by_role("link", name="helper").click()
    expect(page.get_by_role("heading", name="Agent helper", level=1)).to_be_visible()


def test_knowledge_prompts_and_agents_pages_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any],
    axe_findings: Callable[..., Any],
    apps: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("developer", bypass_csp=True)
    for path in (
        "/ui/kb",
        "/ui/kb/docs?q=canary",
        "/ui/prompts",
        "/ui/prompts/support",
        "/ui/agents",
        f"/ui/agents/runs/{apps['run']['id']}",
    ):
        page.goto(dashboard.url + path)
        assert axe_findings(page) == [], path
