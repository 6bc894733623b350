"""Three agent frameworks, through their own clients, finish a two-step task against an aifab LM.

Issue 22: "LangChain's and langgraph's tool-calling agents and LlamaIndex's FunctionAgent ran
without errors but their final answer was always ''". Here a tiny LM is trained (in about a
minute, one thread) on a subset of the agents example's tool-use conversations, deployed behind
a live aifab server, and each framework's agent asks it a question: the model calls the ``sql``
tool, the framework runs it (real aifab SQL over a small ingested table), the model answers in
words. The frameworks' tools have the analyst's names, descriptions and parameter schemas, so
the prompt aifab renders is the one the model was trained on. Argument values may be off (the
model is barely trained); the tool name, the call/answer shape and a non-empty answer may not.
The frameworks run at their default settings (no temperature, no max_tokens: issue 35), so the
deployment's defaults apply, as the agents example deploys agent-lm: greedy, and answers after
tool results grounded in the question's and the results' numbers.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.agents.builtin_tools import predict_tool, sql_tool
from aifab.agents.tools import Tool, ToolContext, ToolError

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).parents[2]
QUESTION = "How many customers are from GB?"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def _conversations(out: Path) -> Path:
    """A subset of the agents example's conversations, the tools prompt kept in every text.

    Country counts (the question asked here) and every conversation that goes on after the
    call to a tool result and an answer: the shapes the two steps need, in few tokens.
    """
    import jinja2

    from aifab.models.tokenizer import CHAT_TEMPLATE

    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    rows: list[dict[str, str]] = []
    with gzip.open(ROOT / "examples" / "agents" / "data" / "tool_chats.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            messages = row["messages"]
            answered = len(messages) > 3
            if row["split"] != "train" or not (answered or "customers are from" in row["text"]):
                continue
            text = template.render(messages=messages, add_generation_prompt=False)
            rows.append({"text": text, "split": "valid" if len(rows) % 50 == 0 else "train"})
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.fixture(scope="module")
def tool_lm(module_workspace: Path) -> None:
    """``tool-lm@1``: a tiny LM that learned to call ``sql`` and answer after its result."""
    from aifab.data import ingest
    from aifab.train.recipes.lm import main

    ingest("customers", str(ROOT / "examples" / "quickstart" / "data" / "customers.csv"))
    ingest("tool_chats", str(_conversations(module_workspace.parent / "tool_chats.jsonl")))
    main(
        {
            "dataset": "tool_chats",
            "text_column": "text",
            "model": {
                "preset": "tiny",
                "hidden_size": 128,
                "intermediate_size": 256,
                "max_position_embeddings": 2048,
            },
            "vocab_size": 512,
            "block_size": 512,
            "batch_size": 8,
            "max_steps": 120,
            "optim": {"lr": 0.005, "weight_decay": 0.1, "warmup_steps": 10, "min_lr_ratio": 0.1},
            "eval_every": 120,
            "register": "tool-lm",
            "system_metrics": False,
            "threads": 1,
            "progress": False,
        }
    )


@pytest.fixture(scope="module")
def server(tool_lm: None, live_server: Callable[..., Any]) -> Iterator[tuple[str, str]]:
    """The OpenAI base URL of a live aifab server with ``tool-lm`` deployed, and a key."""
    from aifab.inference.deployments import create_deployment
    from aifab.serve.keys import create_key

    # As the agents example deploys agent-lm: greedy, 160 tokens, grounded answers by default.
    options = {"temperature": 0, "max_tokens": 160, "grounded_numbers": True}
    create_deployment("tool-lm@1", name="tool-lm", max_batch_size=4, max_wait_ms=5, options=options)
    _, secret = create_key("client", name="agents", rate=None, token_quota=None)
    live = live_server(reconcile_interval_s=0.2)
    yield f"{live.url}/v1", secret


class Calls:
    """The analyst's two tools (``sql``, ``predict``), recording what the framework called."""

    def __init__(self) -> None:
        options: dict[str, Any] = {"max_rows": 20, "timeout_s": 10}
        self.tools: list[Tool] = [
            sql_tool(options, ToolContext()),
            predict_tool({"deployment": "churn"}, ToolContext()),
        ]
        self.made: list[tuple[str, dict[str, Any]]] = []
        self.results: list[str] = []

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool as aifab's agent loop would: its result (or error) as JSON text."""
        self.made.append((name, arguments))
        [tool] = [t for t in self.tools if t.name == name]
        try:
            result = json.dumps(tool.fn(**arguments))
        except (ToolError, TypeError) as exc:
            result = json.dumps({"error": str(exc)})
        self.results.append(result)
        return result


def _check(calls: Calls, answer: str) -> None:
    assert [name for name, _ in calls.made] == ["sql"], calls.made
    assert isinstance(calls.made[0][1].get("query"), str)
    assert answer.strip() != ""
    if calls.results:  # every number of the answer is the question's or the result's
        number = re.compile(r"[0-9]+(?:\.[0-9]+)?")
        allowed = set(number.findall(QUESTION + " ".join(calls.results)))
        assert set(number.findall(answer)) <= allowed, (answer, calls.results)


def test_langgraph_react_agent_finishes(server: tuple[str, str]) -> None:
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    base_url, key = server
    calls = Calls()

    def make(t: Tool) -> StructuredTool:
        return StructuredTool.from_function(
            func=lambda **kw: calls.run(t.name, kw),
            name=t.name,
            description=t.description,
            args_schema=t.parameters,
        )

    llm = ChatOpenAI(
        model="tool-lm",
        base_url=base_url,
        api_key=key,
        max_retries=0,  # no temperature or max_tokens: the deployment's defaults apply
    )
    agent = create_react_agent(llm, [make(t) for t in calls.tools])
    state = agent.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 6})
    kinds = [m.type for m in state["messages"]]
    assert kinds == ["human", "ai", "tool", "ai"], kinds
    _check(calls, str(state["messages"][-1].content))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_openai_agents_sdk_finishes(server: tuple[str, str], api: str, stream: bool) -> None:
    from agents import (
        Agent,
        FunctionTool,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no internet: the SDK would export traces to OpenAI
    base_url, key = server
    calls = Calls()

    def make(t: Tool) -> FunctionTool:
        async def invoke(_ctx: Any, arguments: str) -> str:
            return calls.run(t.name, json.loads(arguments or "{}"))

        return FunctionTool(
            name=t.name,
            description=t.description,
            params_json_schema=t.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    agent = Agent(
        name="analyst",
        model=(
            OpenAIChatCompletionsModel(model="tool-lm", openai_client=client)
            if api == "chat_completions"
            else OpenAIResponsesModel(model="tool-lm", openai_client=client)
        ),
        model_settings=ModelSettings(),  # the SDK's defaults: no temperature, no max_tokens
        tools=[make(t) for t in calls.tools],
    )

    async def ask() -> Any:
        if not stream:
            return await Runner.run(agent, QUESTION, max_turns=4)
        streamed = Runner.run_streamed(agent, QUESTION, max_turns=4)
        async for _ in streamed.stream_events():
            pass
        return streamed

    _check(calls, str(asyncio.run(ask()).final_output))


def test_llamaindex_function_agent_finishes(server: tuple[str, str]) -> None:
    # LlamaIndex's OpenAI integration (llama-index-llms-openai 0.8.3, the newest) needs openai<3
    # and the dev extra openai 3: `make install` puts it, with openai 2, in a side folder, and
    # the agent runs in an interpreter that has that folder first on its path.
    side = Path(sys.prefix) / "llamaindex"
    if not (side / "llama_index").is_dir():
        pytest.skip(f"no {side}: `make install` installs LlamaIndex there")
    base_url, key = server
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(side), str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "integration" / "llamaindex_agent.py"),
            base_url,
            key,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["openai"].startswith("2.")  # LlamaIndex's own client, not the suite's
    calls = Calls()
    calls.made = [(name, arguments) for name, arguments in out["made"]]
    _check(calls, out["answer"])


def test_responses_include_is_accepted_or_refused_by_name(server: tuple[str, str]) -> None:
    """The Agents SDK's Responses model sends ``include`` on every request: it was a 400 (an
    unknown field); values aifab cannot honour are refused, named, never dropped silently."""
    import openai

    base_url, key = server
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    out = client.responses.create(
        model="tool-lm",
        input=QUESTION,
        include=["reasoning.encrypted_content"],
        max_output_tokens=4,
    )
    assert out.status in ("completed", "incomplete")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="tool-lm", input=QUESTION, include=["message.output_text.logprobs"]
        )
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == "include"
