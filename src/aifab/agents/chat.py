"""Talking to a chat model over the OpenAI chat-completions protocol (any compatible server).

The loop sees a :class:`ChatModel`; :class:`OpenAIChat` is the implementation over HTTP, used
for aifab's own gateway and for any OpenAI-compatible base URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ChatModel", "ChatReply", "ModelCallError", "OpenAIChat", "ToolCall", "answers_tools"]


class ModelCallError(Exception):
    """The model endpoint failed, timed out or answered something that is not a chat reply."""


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for (``arguments`` as the model wrote it)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatReply:
    """One assistant turn."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None

    @property
    def total_tokens(self) -> int:
        """Tokens this call cost."""
        return self.prompt_tokens + self.completion_tokens


class ChatModel(Protocol):
    """Anything that answers a list of messages with an assistant turn."""

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int,
        timeout_s: float,
    ) -> ChatReply:
        """Call the model once."""
        ...


def answers_tools(model: Any, messages: list[dict[str, Any]]) -> bool:
    """Whether this call grounds its answer's numbers: asked to, with tool results to quote."""
    return bool(getattr(model, "grounded_numbers", False)) and any(
        m.get("role") == "tool" for m in messages
    )


def _parse_reply(body: Any) -> ChatReply:
    try:
        choice = body["choices"][0]
        message = choice["message"]
        calls = [
            ToolCall(
                id=str(c.get("id") or f"call_{i}"),
                name=str(c["function"]["name"]),
                arguments=c["function"].get("arguments") or "",
            )
            for i, c in enumerate(message.get("tool_calls") or [])
        ]
        usage = body.get("usage") or {}
        return ChatReply(
            content=message.get("content"),
            tool_calls=calls,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
        )
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ModelCallError(f"the model's reply is not a chat completion ({exc!r})") from None


class OpenAIChat:
    """A chat model behind ``POST {base_url}/chat/completions``, with tools.

    The HTTP client is :class:`aifab.prompts.chat.OpenAIChat` (one client for agents, prompts
    and RAG); its failures become :class:`ModelCallError`.

    Args:
        base_url: the API root, ending in ``/v1``.
        model: the ``model`` field of each request.
        api_key: sent as a Bearer token when given.
        temperature: sampling temperature.
        grounded_numbers: after tool results, ask for grounded numbers (aifab's ``aifab``
            body field: only for an aifab gateway, which OpenAI's API would refuse).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        grounded_numbers: bool = False,
    ) -> None:
        from aifab.prompts.chat import DEFAULT_TIMEOUT_S
        from aifab.prompts.chat import OpenAIChat as Endpoint

        self.endpoint = Endpoint(base_url, model, api_key or "", DEFAULT_TIMEOUT_S)
        self.model = model
        self.temperature = temperature
        self.grounded_numbers = grounded_numbers

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int,
        timeout_s: float,
    ) -> ChatReply:
        """One chat completion (tools offered when there are any)."""
        from aifab.core.errors import AifabError

        extra: dict[str, Any] = {"temperature": self.temperature}
        if tools:
            extra["tools"] = tools
        if answers_tools(self, messages):
            extra["aifab"] = {"grounded_numbers": True}
        try:
            payload = self.endpoint.post_json(
                messages, max_tokens=max_tokens, extra=extra, timeout_s=timeout_s
            )
        except AifabError as exc:
            raise ModelCallError(exc.message) from None
        return _parse_reply(payload)
