"""LlamaIndex's ``FunctionAgent`` against an aifab server, in an interpreter of its own.

LlamaIndex's OpenAI client needs openai<3 and the rest of the dev extra openai 3, so
``make install`` puts LlamaIndex and openai 2 in a side folder that only this process puts first
on its path (``test_agent_frameworks.py`` runs it)::

    PYTHONPATH=.venv/llamaindex:. python tests/integration/llamaindex_agent.py BASE_URL KEY

It prints ``{"answer": ..., "made": [[tool, arguments], ...], "openai": version}`` as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import openai
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool, ToolMetadata
from llama_index.llms.openai_like import OpenAILike
from tests.integration.test_agent_frameworks import QUESTION, Calls

from aifab.agents.tools import Tool


@dataclass
class Metadata(ToolMetadata):
    """The analyst's parameter schema as is (LlamaIndex would derive one from a model)."""

    parameters: dict[str, Any] = field(default_factory=dict)

    def get_parameters_dict(self) -> dict[str, Any]:
        return self.parameters


def main(base_url: str, key: str) -> None:
    calls = Calls()

    def make(t: Tool) -> FunctionTool:
        return FunctionTool(
            fn=lambda **kw: calls.run(t.name, kw),
            metadata=Metadata(name=t.name, description=t.description, parameters=t.parameters),
        )

    llm = OpenAILike(
        model="tool-lm",
        api_base=base_url,
        api_key=key,
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0,
        max_tokens=160,
        max_retries=0,
        context_window=2048,
    )
    agent = FunctionAgent(tools=[make(t) for t in calls.tools], llm=llm)

    async def ask() -> Any:  # the workflow's handler needs a running event loop
        return await agent.run(QUESTION, max_iterations=4)

    answer = str(asyncio.run(ask()))
    print(json.dumps({"answer": answer, "made": calls.made, "openai": openai.__version__}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
