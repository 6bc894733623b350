"""A chat model run in this process: an aifab LM answering the OpenAI tools protocol locally.

The same function as the server's chat endpoint (``aifab.inference.chat_completion``),
so an agent behaves the same with ``local: true`` as through the gateway, with no server.
"""

from __future__ import annotations

from typing import Any

from aifab.agents.chat import ChatReply, ModelCallError, ToolCall, answers_tools

__all__ = ["LocalChat"]


class LocalChat:
    """A registered LM loaded here, behind :class:`~aifab.agents.chat.ChatModel`.

    Args:
        source: a registered LM (``NAME``, ``NAME@VERSION``, ``NAME@ALIAS``).
        temperature: sampling temperature (0 = greedy).
        grounded_numbers: an answer after tool results writes only the conversation's numbers.
    """

    def __init__(
        self, source: str, temperature: float = 0.0, grounded_numbers: bool = True
    ) -> None:
        from aifab.core.errors import InvalidInputError
        from aifab.inference.loading import shared_model

        handler: Any = shared_model(source).handler
        if getattr(handler, "kind", None) != "lm":
            raise InvalidInputError(f"model {source}: not a language model")
        self.handler = handler
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
        """One completion with the tools offered; tool calls parsed out of the text."""
        from aifab.core.errors import InvalidInputError
        from aifab.inference.chat_completion import complete_chat
        from aifab.inference.generation import GenerationParams

        params = GenerationParams(max_tokens=max(1, max_tokens), temperature=self.temperature)
        grounded = {"grounded_numbers": True} if answers_tools(self, messages) else None
        try:
            choice, result = complete_chat(
                self.handler, messages, params, tools=tools or None, grounded=grounded
            )
        except InvalidInputError as exc:
            raise ModelCallError(f"the local model refused the request: {exc.message}") from None
        calls = [
            ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in choice.get("tool_calls") or []
        ]
        return ChatReply(
            content=choice.get("content") if tools else result.text,
            tool_calls=calls,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            finish_reason=choice["finish_reason"],
        )
