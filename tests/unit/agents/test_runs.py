"""Agent runs end to end against a STAND-IN chat model (scripted, see conftest): tools, faults,
budgets and traces, with the real lake, metadata DB and CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.agents.conftest import StandInLLM, answer, tool_call

from aifab.agents import (
    Budgets,
    OpenAIChat,
    create_agent,
    get_trace,
    list_runs,
    run_agent,
    run_loop,
    tool_from_function,
)
from aifab.core.errors import InvalidInputError


def _agent(stand_in: StandInLLM, model: str, **extra: Any) -> dict[str, Any]:
    spec = {
        "name": extra.pop("name", model),
        "model": {"model": model, "base_url": stand_in.base_url},
        "tools": [{"use": "sql", "options": {"max_rows": 3}}],
        **extra,
    }
    return create_agent(spec)


@pytest.fixture
def customers(tmp_path: Path) -> str:
    from aifab.data import ingest

    path = tmp_path / "customers.csv"
    rows = ["plan,age"] + [f"{'pro' if i % 3 else 'free'},{20 + i}" for i in range(30)]
    path.write_text("\n".join(rows) + "\n")
    ingest("customers", str(path))
    return "customers"


def _last_tool_content(messages: list[dict[str, Any]]) -> str | None:
    tools = [m for m in messages if m["role"] == "tool"]
    return tools[-1]["content"] if tools else None


def test_sql_tool_then_answer_is_traced(stand_in_llm: StandInLLM, customers: str) -> None:
    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        result = _last_tool_content(messages)
        if result is None:
            return tool_call(
                "sql",
                {"query": "SELECT plan, count(*) AS n FROM customers GROUP BY plan ORDER BY plan"},
            )
        return answer(f"counts: {result}")

    stand_in_llm.scripts["sql-agent"] = script
    _agent(stand_in_llm, "sql-agent")
    run = run_agent("sql-agent", "How many customers per plan?")
    assert run["status"] == "completed", run["reason"]
    assert json.loads(run["answer"].removeprefix("counts: "))["rows"] == [
        {"plan": "free", "n": 10},
        {"plan": "pro", "n": 20},
    ]
    sent = stand_in_llm.requests[0]
    assert sent["tools"][0]["function"]["name"] == "sql"
    assert sent["messages"][0]["role"] == "system"
    trace = get_trace(run["id"])
    assert [(s["kind"], s["name"]) for s in trace["trace"]] == [
        ("model", "chat"),
        ("tool", "sql"),
        ("model", "chat"),
    ]
    assert trace["trace"][1]["output"]["rows"][0] == {"plan": "free", "n": 10}
    assert trace["tokens"] == 30
    assert list_runs("sql-agent")[0]["id"] == run["id"]


@pytest.mark.parametrize(
    ("call", "fault"),
    [
        (tool_call("drop_everything", {}), "'drop_everything' is not available"),
        (tool_call("sql", "{broken"), "not valid JSON"),
        (tool_call("sql", {"query": "COPY (SELECT 1) TO '/tmp/aifab-agent.csv'"}), "not COPY"),
        (tool_call("sql", {"query": "SELECT * FROM read_csv('/etc/passwd')"}), "SQL error"),
        (tool_call("sql", {"sql": "SELECT 1"}), "'query' is a required property"),
    ],
)
def test_faults_are_fed_back_and_recorded(
    stand_in_llm: StandInLLM, customers: str, call: dict[str, Any], fault: str
) -> None:
    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        result = _last_tool_content(messages)
        return call if result is None else answer(f"the tool said: {result}")

    stand_in_llm.scripts["faulty"] = script
    _agent(stand_in_llm, "faulty")
    run = run_agent("faulty", "do something")
    assert run["status"] == "completed"
    assert fault in run["answer"]
    tool_step = get_trace(run["id"])["trace"][1]
    assert tool_step["kind"] == "tool" and fault in tool_step["error"]
    assert not Path("/tmp/aifab-agent.csv").exists()


def test_step_budget_stops_a_model_that_never_answers(
    stand_in_llm: StandInLLM, customers: str
) -> None:
    stand_in_llm.scripts["looper"] = lambda m, t: tool_call("sql", {"query": "SELECT 1 AS x"})
    _agent(stand_in_llm, "looper", budgets={"max_steps": 3})
    run = run_agent("looper", "loop forever")
    assert (run["status"], run["reason"], run["steps"]) == ("budget_exceeded", "steps", 6)


def test_token_budget(stand_in_llm: StandInLLM, customers: str) -> None:
    stand_in_llm.scripts["spender"] = lambda m, t: tool_call("sql", {"query": "SELECT 1 AS x"})
    _agent(stand_in_llm, "spender", budgets={"max_tokens": 40})
    run = run_agent("spender", "spend")
    assert (run["status"], run["reason"]) == ("budget_exceeded", "tokens")
    assert run["tokens"] == 45


def test_model_down_or_slow_fails_cleanly(stand_in_llm: StandInLLM) -> None:
    create_agent({"name": "nowhere", "model": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}})
    run = run_agent("nowhere", "hello")
    assert run["status"] == "failed" and "unreachable" in run["reason"]

    stand_in_llm.scripts["slow"] = lambda m, t: {**answer("late"), "sleep": 2}
    create_agent(
        {
            "name": "slow",
            "model": {"model": "slow", "base_url": stand_in_llm.base_url, "timeout_s": 0.3},
        }
    )
    run = run_agent("slow", "hello")
    assert run["status"] == "failed" and "did not answer within 0.3 s" in run["reason"]


def test_hung_tool_times_out_and_parallel_calls_run_together(stand_in_llm: StandInLLM) -> None:
    def wait(seconds: float) -> str:
        """Sleep, then say so.

        Args:
            seconds: how long.
        """
        time.sleep(seconds)
        return f"slept {seconds}"

    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "wait", "arguments": json.dumps({"seconds": s})},
            }
            for i, s in enumerate([0.3, 0.3, 30])
        ],
    }
    stand_in_llm.scripts["parallel"] = lambda m, t: (
        calls
        if _last_tool_content(m) is None
        else answer(" | ".join(x["content"] for x in m if x["role"] == "tool"))
    )
    model = OpenAIChat(stand_in_llm.base_url, "parallel")
    started = time.monotonic()
    result = run_loop(
        model,
        {"wait": tool_from_function(wait)},
        [{"role": "user", "content": "wait"}],
        Budgets(tool_timeout_s=1.0),
    )
    assert time.monotonic() - started < 10
    assert result.status == "completed"
    assert result.answer.startswith('"slept 0.3" | "slept 0.3" | error: tool wait timed out')


def test_spec_errors_name_the_field(stand_in_llm: StandInLLM) -> None:
    with pytest.raises(InvalidInputError, match="budgets.max_steps"):
        create_agent({"name": "a", "model": {"model": "m"}, "budgets": {"max_steps": 0}})
    with pytest.raises(InvalidInputError, match="unknown tool 'shell'"):
        create_agent({"name": "a", "model": {"model": "m"}, "tools": [{"use": "shell"}]})
    with pytest.raises(InvalidInputError, match="name"):
        create_agent({"name": "a\n", "model": {"model": "m"}})
    create_agent({"name": "no-gateway", "model": {"model": "m"}})
    with pytest.raises(InvalidInputError, match="no gateway was given"):
        run_agent("no-gateway", "hi")


def test_cli_create_run_runs_trace(
    cli, stand_in_llm: StandInLLM, customers: str, tmp_path: Path
) -> None:
    stand_in_llm.scripts["cli-agent"] = lambda m, t: (
        tool_call("sql", {"query": "SELECT count(*) AS n FROM customers"})
        if _last_tool_content(m) is None
        else answer("there are 30 customers")
    )
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        f"name: cli-agent\nmodel:\n  model: cli-agent\n  base_url: {stand_in_llm.base_url}\n"
        "tools:\n  - use: sql\n"
    )
    assert cli("agents", "create", "-f", spec).exit_code == 0
    listed = cli("agents", "list", "--json")
    assert json.loads(listed.stdout)[0]["name"] == "cli-agent"
    ran = cli("agents", "run", "cli-agent", "how many customers?")
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.strip() == "there are 30 customers"
    assert "[1] tool sql" in ran.stderr
    run_id = json.loads(cli("agents", "runs", "--json").stdout)[0]["id"]
    trace = cli("agents", "trace", run_id, "--json")
    assert [s["name"] for s in json.loads(trace.stdout)["trace"]] == ["chat", "sql", "chat"]
    bad = cli("agents", "trace", "run_nope")
    assert bad.exit_code == 1 and bad.stderr.startswith("error: no agent run")
    spec.write_text("name: x\nmodel: {}\n")
    bad = cli("agents", "create", "-f", spec)
    assert bad.exit_code == 2 and "model.model" in bad.stderr


def test_kb_search_tool_returns_passages_as_data(stand_in_llm: StandInLLM, tmp_path: Path) -> None:
    from aifab.rag import create_kb

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keys.md").write_text(
        "# API keys\n\nCreate a key with aifab keys create --role client.\n"
    )
    (docs / "lake.md").write_text("# The lake\n\nDataset versions are immutable Parquet objects.\n")
    create_kb("handbook", str(docs))

    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        result = _last_tool_content(messages)
        if result is None:
            return tool_call("kb_search", {"query": "how do I create an API key"})
        return answer(json.loads(result)["results"][0]["document"])

    stand_in_llm.scripts["librarian"] = script
    create_agent(
        {
            "name": "librarian",
            "model": {"model": "librarian", "base_url": stand_in_llm.base_url},
            "tools": [{"use": "kb_search", "options": {"kb": "handbook", "k": 2, "mode": "bm25"}}],
        }
    )
    run = run_agent("librarian", "keys?")
    assert run["status"] == "completed", run["reason"]
    assert run["answer"].endswith("keys.md")
    with pytest.raises(InvalidInputError, match="option 'kb'"):
        create_agent({"name": "x", "model": {"model": "m"}, "tools": [{"use": "kb_search"}]})


def test_registered_prompt_is_the_system_message(stand_in_llm: StandInLLM) -> None:
    from aifab.prompts import create_prompt

    create_prompt(
        "analyst-rules", "Answer in French. The question was: {{ input }}", variables=["input"]
    )
    stand_in_llm.scripts["prompted"] = lambda m, t: answer(m[0]["content"])
    create_agent(
        {
            "name": "prompted",
            "model": {"model": "prompted", "base_url": stand_in_llm.base_url},
            "prompt": "analyst-rules@1",
        }
    )
    run = run_agent("prompted", "combien?")
    assert run["answer"] == "Answer in French. The question was: combien?"
    create_agent(
        {
            "name": "bare",
            "model": {"model": "prompted", "base_url": stand_in_llm.base_url},
            "instructions": "",
        }
    )
    stand_in_llm.scripts["prompted"] = lambda m, t: answer(",".join(x["role"] for x in m))
    assert run_agent("bare", "hi")["answer"] == "user"  # no empty system turn


def test_agent_pipeline_step(stand_in_llm: StandInLLM, customers: str, tmp_path: Path) -> None:
    from aifab.pipeline.runner import run_pipeline

    stand_in_llm.scripts["step-agent"] = lambda m, t: (
        tool_call("sql", {"query": "SELECT count(*) AS n FROM customers"})
        if _last_tool_content(m) is None
        else answer("30")
    )
    (tmp_path / "a.yaml").write_text(
        f"name: step-agent\nmodel: {{model: step-agent, base_url: '{stand_in_llm.base_url}'}}\n"
        "tools: [{use: sql}]\n"
    )
    (tmp_path / "p.yaml").write_text(
        "name: p\nsteps:\n  - name: ask\n    uses: agent\n"
        "    with: {agent: a.yaml, input: 'how many customers?'}\n"
    )
    result = run_pipeline(tmp_path / "p.yaml")
    assert result.ok, [(s.name, s.error) for s in result.steps]
    details = result.steps[0].outputs["details"]
    assert (details["status"], details["answer"], details["steps"]) == ("completed", "30", 3)


def test_empty_final_answer_is_retried_then_a_fault(
    stand_in_llm: StandInLLM, customers: str
) -> None:
    """Issue 22: an agent whose model answered '' after the tool result was "completed"."""
    from aifab.agents.loop import ANSWER_NUDGE

    def shy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if _last_tool_content(messages) is None:
            return tool_call("sql", {"query": "SELECT 42 AS x"})
        if messages[-1]["content"] == ANSWER_NUDGE and not tools:
            return answer("forty-two")
        return answer("")

    stand_in_llm.scripts["shy"] = shy
    _agent(stand_in_llm, "shy")
    run = run_agent("shy", "what is x?")
    assert (run["status"], run["answer"]) == ("completed", "forty-two")
    trace = get_trace(run["id"])["trace"]
    assert [s["error"] for s in trace if s["kind"] == "model"] == [None, "empty final answer", None]

    stand_in_llm.scripts["mute"] = lambda m, t: answer("  ")
    _agent(stand_in_llm, "mute")
    run = run_agent("mute", "say something")
    assert run["status"] == "failed" and run["answer"] in (None, "")
    assert "empty final answer" in run["reason"]


def test_a_streamed_run_shows_the_steps_its_trace_stores(stand_in_llm: StandInLLM) -> None:
    """A step over the trace's size bound is cut the same way in the stream and the DB."""
    stand_in_llm.scripts["long-answer"] = lambda messages, tools: answer("x" * 70_000)
    _agent(stand_in_llm, "long-answer")
    streamed: list[dict[str, Any]] = []
    run = run_agent("long-answer", "Say a lot.", on_step=streamed.append)
    stored = get_trace(run["id"])["trace"]
    assert len(streamed) == len(stored) == 1
    assert streamed[0]["output"]["truncated"] is True
    for shown, kept in zip(streamed, stored, strict=True):
        assert (shown["input"], shown["output"]) == (kept["input"], kept["output"])


@pytest.mark.parametrize(
    ("where", "grounded", "asked"),
    [("base_url", True, True), ("base_url", None, False), ("gateway", None, True)],
)
def test_the_answer_step_asks_for_grounded_numbers(
    stand_in_llm: StandInLLM, customers: str, where: str, grounded: bool | None, asked: bool
) -> None:
    """An agent asks an aifab model for grounded numbers once tool results are in (issue 35);
    an outside base_url gets the option only when the spec asks, since OpenAI would refuse it."""

    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if _last_tool_content(messages) is None:
            return tool_call("sql", {"query": "SELECT count(*) AS n FROM customers"})
        return answer("There are 30 customers.")

    stand_in_llm.scripts["grounded"] = script
    from aifab.agents.tools import ToolContext

    model: dict[str, Any] = {"model": "grounded"}
    ctx = ToolContext()
    if where == "base_url":
        model["base_url"] = stand_in_llm.base_url
    else:  # the stand-in plays the aifab gateway
        ctx = ToolContext(gateway_url=stand_in_llm.base_url.removesuffix("/v1"))
    if grounded is not None:
        model["grounded_numbers"] = grounded
    name = f"grounded-{where}-{grounded}".lower()
    create_agent({"name": name, "model": model, "tools": [{"use": "sql"}]})
    run = run_agent(name, "How many customers?", ctx=ctx)
    assert run["status"] == "completed", run["reason"]
    first, then = [r for r in stand_in_llm.requests if r["model"] == "grounded"][-2:]
    assert "aifab" not in first  # no tool results yet: nothing to quote
    assert then.get("aifab") == ({"grounded_numbers": True} if asked else None)
