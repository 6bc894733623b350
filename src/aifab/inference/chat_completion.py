"""Chat completions with tools and structured output, for the server and in-process callers.

One place decides how a chat request becomes a prompt and a constraint and how the text that
comes back becomes a choice: tools are templated into the prompt, a forced tool call
(``tool_choice`` ``required`` or a named function) is decoded under the union of the tools'
parameter schemas (the name picks the branch), ``response_format`` under its JSON schema, and
the output is parsed into ``tool_calls``. A free-text answer may be decoded with grounded
numbers (:mod:`~aifab.inference.number_grounding`): asked for per request, or by the
deployment's default for answers after tool results. The server batches the generations in
between (it owns batching); :func:`complete_chat` does the whole round trip in process.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = [
    "ChatPlan",
    "TooFewTokensError",
    "chat_choice",
    "complete_chat",
    "constrain",
    "forced_call_schema",
    "grounding_for",
    "plan_chat",
]


class TooFewTokensError(InvalidInputError):
    """``max_tokens`` cannot hold the shortest answer the schema allows (a 400, not a 422)."""

    http_status = 400


@dataclass(frozen=True)
class ChatPlan:
    """A chat request made ready to generate: its prompt and how its output is read."""

    prompt: str
    tools: list[dict[str, Any]]
    #: The JSON schema the answer is decoded under (a forced call or ``response_format``).
    schema: dict[str, Any] | None
    #: The answer is a forced call's JSON (the prompt already ends with ``<tool_call>``).
    forced: bool
    #: The last message is a tool's result: the answer may not be empty (EOS comes later).
    after_tools: bool = False
    #: The messages (grounded numbers are those of its user messages and tool results).
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def has_tool_results(self) -> bool:
        """Whether a tool's result is in the conversation (an answer may quote it)."""
        return any(m.get("role") == "tool" for m in self.messages)


def forced_call_schema(
    tools: list[dict[str, Any]], tool_choice: str | dict[str, Any] | None
) -> dict[str, Any] | None:
    """The schema a forced call is decoded under, or None when the model may answer freely.

    Raises:
        InvalidInputError: ``tool_choice`` forces a call without tools, or names no tool.
    """
    from aifab.inference.tool_calls import call_schema

    if tool_choice not in (None, "none", "auto") and not tools:
        raise InvalidInputError("tool_choice: there are no tools to call")
    return call_schema(tools, tool_choice) if tools else None


def plan_chat(
    handler: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: str | dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
) -> ChatPlan:
    """Template ``messages`` (and the tools) into the model's prompt and pick the constraint.

    Args:
        handler: an LM handler (``chat_prompt``, ``json_constraint``).
        messages: OpenAI chat messages (tool calls and results included).
        tools: OpenAI ``tools`` entries (may be empty).
        tool_choice: ``auto``/``none``/None, ``required``, or a named function.
        output_schema: ``response_format``'s schema (``{"type": "object"}`` for json_object).

    Raises:
        InvalidInputError: a bad message, tool or ``tool_choice`` (named).
    """
    from aifab.inference.tool_calls import CALL_OPEN, template_messages

    forced = forced_call_schema(tools, tool_choice)
    prompt = handler.chat_prompt(template_messages(messages, tools or None))
    if forced is not None:
        prompt += CALL_OPEN  # the model writes only the call's JSON
    after_tools = bool(messages) and messages[-1].get("role") == "tool"
    schema = forced or output_schema
    return ChatPlan(prompt, tools, schema, forced is not None, after_tools, list(messages))


def grounding_for(handler: Any, plan: ChatPlan, requested: Any = None) -> Any:
    """The number grounding of one answer, or None: the request's choice, else the default's.

    Args:
        handler: an LM handler (``grounding``: its deployment's default, or None).
        plan: the planned request.
        requested: the request's ``aifab`` option (None: not given), e.g.
            ``{"grounded_numbers": true, "round": 2}``.

    Raises:
        InvalidInputError: a bad option (the field named).
    """
    from aifab.inference.number_grounding import grounding_option

    requested = dict(requested or {})
    if requested.get("grounded_numbers") is not None:
        return grounding_option(requested, "aifab")
    # The deployment's default grounds answers after tool results, where numbers come from.
    default = getattr(handler, "grounding", None) if plan.has_tool_results else None
    if default is not None and requested.get("round") is not None:
        return grounding_option({"grounded_numbers": True, "round": requested["round"]}, "aifab")
    return default


def constrain(handler: Any, plan: ChatPlan, params: Any, grounding: Any = None) -> None:
    """Set one generation's constraint (JSON answers) and ``min_tokens`` (after tool results).

    A free-text answer with ``grounding`` (a
    :class:`~aifab.inference.number_grounding.NumberGrounding`) writes only the numbers of the
    conversation's user messages and tool results; a JSON answer follows its schema alone.

    Raises:
        InvalidInputError: the schema is beyond the decoder's subset (the keyword named).
        TooFewTokensError: ``params.max_tokens`` is below the shortest valid answer.
    """
    if plan.after_tools and plan.schema is None:
        params.min_tokens = max(params.min_tokens, 1)  # frameworks read '' as "no answer"
    if plan.schema is None:
        if grounding is not None:
            from aifab.inference.number_grounding import conversation_numbers

            params.constraint = handler.grounded_numbers(
                conversation_numbers(plan.messages, grounding)
            )
        return
    where = "tool_choice" if plan.forced else "response_format"
    try:
        constraint = handler.json_constraint(plan.schema)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc.message}") from None
    if params.max_tokens < constraint.min_tokens:
        what = "a call to the tools" if plan.forced else "an answer valid for the schema"
        raise TooFewTokensError(
            f"max_tokens: {params.max_tokens} is too few for {what}; the shortest takes "
            f"{constraint.min_tokens} tokens, so ask for at least {constraint.min_tokens}"
        )
    params.constraint = constraint


def chat_choice(
    result: Any, plan: ChatPlan, parallel: bool | None = True, call_id: str = "call"
) -> dict[str, Any]:
    """One finished generation as a chat choice: ``text``, or ``tool_calls`` parsed from it."""
    from aifab.inference.tool_calls import CALL_CLOSE, CALL_OPEN, parse_tool_calls

    choice: dict[str, Any] = {"text": result.text, "finish_reason": result.finish_reason}
    if not plan.tools:
        return choice
    text = result.text
    if plan.forced:
        try:
            text = f"{CALL_OPEN}{json.dumps(json.loads(text))}{CALL_CLOSE}"
        except ValueError:
            return choice  # only a model past its context can stop a forced call short
    parsed = parse_tool_calls(text, plan.tools, parallel=parallel is not False, call_id=call_id)
    choice["content"] = parsed.content
    if parsed.tool_calls:
        choice.update(tool_calls=parsed.tool_calls, finish_reason="tool_calls")
    if parsed.errors:
        choice["tool_call_errors"] = parsed.errors
    return choice


def complete_chat(
    handler: Any,
    messages: list[dict[str, Any]],
    params: Any,
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    grounded: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], Any]:
    """One chat completion in this process: request in, the choice and the raw result out.

    Args:
        handler: an LM handler.
        messages: OpenAI chat messages.
        params: the :class:`~aifab.inference.generation.GenerationParams` (the constraint is
            set here, and ``max_tokens`` capped by what the context leaves).
        tools: OpenAI tools offered.
        tool_choice: as in OpenAI's API.
        output_schema: a JSON schema the answer must follow.
        grounded: the ``aifab`` request option (``{"grounded_numbers": true, "round": N}``);
            None leaves it to the handler's default.

    Raises:
        InvalidInputError: bad messages/tools, or a prompt too long for the context.
        TooFewTokensError: ``max_tokens`` below the shortest valid answer.
    """
    plan = plan_chat(handler, messages, tools or [], tool_choice, output_schema)
    room = handler.max_context - handler.count_tokens(plan.prompt)
    if room < 1:
        raise InvalidInputError(
            f"messages: {handler.max_context - room} tokens fill the model's context of "
            f"{handler.max_context}"
        )
    params.max_tokens = min(params.max_tokens, room)  # what the context leaves, at most
    constrain(handler, plan, params, grounding_for(handler, plan, grounded))
    [result] = handler.predict([handler.request(plan.prompt, params)])
    return chat_choice(result, plan, call_id=f"call_{uuid.uuid4().hex[:8]}"), result
