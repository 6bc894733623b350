"""A STAND-IN for an outside LLM API: a tiny scripted OpenAI-compatible chat server.

aifab's own small LMs cannot be relied on to call tools in a fixed way, and no outside model
is reachable here; this server answers ``/v1/chat/completions`` from a script chosen by the
request's ``model`` and records every request, so tests can check what the agent sent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

Script = Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """An assistant message calling one tool."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


def answer(text: str) -> dict[str, Any]:
    """An assistant message with a final answer."""
    return {"role": "assistant", "content": text}


class StandInLLM:
    """The scripted server: ``scripts[model](messages, tools) -> assistant message``."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.requests: list[dict[str, Any]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            script = self.scripts.get(body["model"])
            if script is None:
                return JSONResponse({"error": {"message": "no such model"}}, status_code=404)
            message = script(body["messages"], body.get("tools") or [])
            if message.get("sleep"):
                await asyncio.sleep(message.pop("sleep"))
            return JSONResponse(
                {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            )

        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "stand-in LLM did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def stand_in_llm() -> Iterator[StandInLLM]:
    server = StandInLLM()
    yield server
    server.stop()
