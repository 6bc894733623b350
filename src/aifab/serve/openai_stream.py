"""OpenAI response shapes (completions, chunks) and streaming generation as Server-Sent Events.

A streamed request runs ``handler.stream`` on a thread of its own; its chunks reach the event
loop through an asyncio queue. When the client goes away the response task is cancelled and
the generator's ``finally`` tells the thread to stop after the current token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from aifab.core.errors import AifabError
from aifab.serve.errors import ApiError, as_api_error, error_body
from aifab.serve.invoke import record

log = logging.getLogger("aifab.serve")

__all__ = ["Completion", "sse_events"]

#: HTTP status recorded for a stream the client abandoned (nginx's "client closed request").
CLIENT_CLOSED = 499
_END = object()


@dataclass
class Completion:
    """One completion's identity and how its responses and chunks look (chat or text)."""

    kind: str  # "chat" | "text"
    id: str
    model: str
    fingerprint: str
    echo: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def _head(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
        }

    def response(self, choices: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
        """The non-streamed body: one choice per ``{"text", "finish_reason"}``.

        Chat choices may also carry ``content``, ``tool_calls``, ``tool_call_errors`` and
        ``logprobs``.
        """
        if self.kind == "chat":
            out = [
                {
                    "index": i,
                    "message": _message(c),
                    "logprobs": c.get("logprobs"),
                    "finish_reason": c["finish_reason"],
                }
                for i, c in enumerate(choices)
            ]
            return {**self._head("chat.completion"), "choices": out, "usage": usage}
        out = [
            {"index": i, "text": c["text"], "logprobs": None, "finish_reason": c["finish_reason"]}
            for i, c in enumerate(choices)
        ]
        return {**self._head("text_completion"), "choices": out, "usage": usage}

    def replay(self, choices: list[dict[str, Any]], usage: dict[str, int] | None) -> list[str]:
        """Finished chat choices as the chunks of a stream (tool calls as ``delta.tool_calls``).

        Used when the answer must be complete before it can be sent: tool calls are parsed
        from the whole text.
        """
        events = []
        for i, c in enumerate(choices):
            head = {**self._head("chat.completion.chunk")}
            deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
            if c.get("content"):
                deltas.append({"content": c["content"]})
            calls = c.get("tool_calls") or []
            if calls:
                deltas.append(
                    {"tool_calls": [{"index": k, **call} for k, call in enumerate(calls)]}
                )
            for delta in deltas:
                choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}
                events.append(_event({**head, "choices": [choice]}))
            end = {"index": i, "delta": {}, "logprobs": None, "finish_reason": c["finish_reason"]}
            events.append(_event({**head, "choices": [end]}))
        if usage is not None:
            events.append(_event(self.usage_chunk(usage)))
        events.append("data: [DONE]\n\n")
        return events

    def chunk(
        self, text: str | None = None, finish: str | None = None, *, first: bool = False
    ) -> dict[str, Any]:
        """One streamed chunk (the chat stream opens with the assistant role)."""
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if first:
                delta = {"role": "assistant", "content": ""}
            elif text:
                delta = {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {**self._head("text_completion"), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        """The last chunk of a stream with ``include_usage``: no choices, the token counts."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage}


def _message(choice: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": choice.get("content", choice.get("text")),
        "refusal": None,
    }
    if choice.get("tool_calls"):
        message["tool_calls"] = choice["tool_calls"]
    if choice.get("tool_call_errors"):
        # Not in OpenAI's schema (clients ignore unknown fields): why a call was not made.
        message["tool_call_errors"] = choice["tool_call_errors"]
    return message


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def _chunks(handler: Any, item: Any, stop: threading.Event, name: str) -> AsyncIterator[Any]:
    """``handler.stream(item)`` run on its own thread, its chunks handed over one by one."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(value: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, value)
        except RuntimeError:  # the loop is gone (server shut down): nobody is listening
            stop.set()

    def work() -> None:
        pieces: Iterator[Any] | None = None
        try:
            pieces = iter(handler.stream(item))
            for piece in pieces:
                if stop.is_set():
                    break
                put(piece)
        except BaseException as exc:  # noqa: BLE001 - handed to the request, not lost here
            put(exc)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # frees the generator's KV cache now, not at garbage collection
            put(_END)

    threading.Thread(target=work, name=f"aifab-stream-{name}", daemon=True).start()
    while True:
        value = await queue.get()
        if value is _END:
            return
        if isinstance(value, BaseException):
            raise value
        yield value


async def sse_events(
    request: Request,
    deployment: str,
    target: Any,
    item: Any,
    done: Completion,
    *,
    include_usage: bool,
    started: float,
) -> AsyncIterator[str]:
    """The Server-Sent Events of one streamed completion, ending with ``data: [DONE]``.

    The request is recorded (metrics, tokens, quota, request log) when the stream ends,
    fails (an ``error`` event, which OpenAI's SDKs raise) or is abandoned by the client.
    """
    stop = threading.Event()
    status, received = CLIENT_CLOSED, 0
    prompt = completion = None
    metrics = getattr(request.app.state, "metrics", None)
    last = started
    try:
        if done.kind == "chat":
            yield _event(done.chunk(first=True))
        elif done.echo:
            yield _event(done.chunk(done.echo))
        async for piece in _chunks(target.handler, item, stop, deployment):
            received += 1
            if metrics is not None and piece.text:
                now = time.perf_counter()
                metrics.observe_token(deployment, now - last, first=last == started)
                last = now
            if piece.finish_reason is not None:
                prompt, completion = piece.prompt_tokens, piece.completion_tokens
                if piece.text:
                    yield _event(done.chunk(piece.text))
                yield _event(done.chunk(finish=piece.finish_reason))
            elif piece.text:
                yield _event(done.chunk(piece.text))
        if include_usage:
            p, c = int(prompt or 0), int(completion or 0)
            usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
            yield _event(done.usage_chunk(usage))
        yield "data: [DONE]\n\n"
        status = 200
    except Exception as exc:  # noqa: BLE001 - the stream has started: report it in-band
        if isinstance(exc, ApiError | AifabError):
            err = as_api_error(exc)
        else:
            log.exception("deployment %s (%s) failed while streaming", deployment, target.model)
            err = ApiError(500, f"model {target.model} failed on this request")
        status = err.status
        yield _event(error_body(err.status, err.message, param=err.param, code=err.code))
    finally:
        stop.set()
        prompt_tokens = int(prompt if prompt is not None else _prompt_tokens(target, item))
        # An abandoned stream is charged at least one token per chunk it produced.
        completion_tokens = int(completion if completion is not None else received)
        record(
            request,
            deployment,
            status=status,
            started=started,
            model=target.model,
            input={"prompt_tokens": prompt_tokens},
            output={"completion_tokens": completion_tokens},
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )


def _prompt_tokens(target: Any, item: Any) -> int:
    try:
        return int(target.handler.count_tokens(item.prompt))
    except Exception:  # noqa: BLE001 - bookkeeping must not mask the stream's own outcome
        return 0
