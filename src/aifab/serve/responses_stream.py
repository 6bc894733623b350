"""A finished Responses-API response as the Server-Sent Events the OpenAI SDKs read.

The events and their order are the Responses API's: ``response.created`` and
``response.in_progress``, then per output item ``output_item.added``, its text
(``content_part.added``, ``output_text.delta``/``.done``, ``content_part.done``) or its
call's arguments (``function_call_arguments.delta``/``.done``), ``output_item.done``, and
last ``response.completed`` (or ``response.incomplete``). Each event has a
``sequence_number``. The text is sent once generation has finished, in one delta per item.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["response_events"]


def _sse(kind: str, payload: dict[str, Any], seq: list[int]) -> str:
    body = {"type": kind, "sequence_number": seq[0], **payload}
    seq[0] += 1
    return f"event: {kind}\ndata: {json.dumps(body)}\n\n"


def _item_events(index: int, item: dict[str, Any], seq: list[int]) -> Iterator[str]:
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        yield _sse(
            "response.output_item.added",
            {"output_index": index, "item": {**item, "arguments": "", "status": "in_progress"}},
            seq,
        )
        yield _sse(
            "response.function_call_arguments.delta", {**where, "delta": item["arguments"]}, seq
        )
        yield _sse(
            "response.function_call_arguments.done",
            {**where, "name": item["name"], "arguments": item["arguments"]},
            seq,
        )
    else:
        text = item["content"][0]["text"]
        yield _sse(
            "response.output_item.added",
            {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
            seq,
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {**where, "content_index": 0}
        yield _sse("response.content_part.added", {**at, "part": part}, seq)
        yield _sse("response.output_text.delta", {**at, "delta": text, "logprobs": []}, seq)
        yield _sse("response.output_text.done", {**at, "text": text, "logprobs": []}, seq)
        yield _sse("response.content_part.done", {**at, "part": {**part, "text": text}}, seq)
    yield _sse("response.output_item.done", {"output_index": index, "item": item}, seq)


def response_events(response: dict[str, Any]) -> Iterator[str]:
    """The SSE events of a finished response object (``object: "response"``)."""
    seq = [0]
    opening = {**response, "status": "in_progress", "output": [], "incomplete_details": None}
    yield _sse("response.created", {"response": opening}, seq)
    yield _sse("response.in_progress", {"response": opening}, seq)
    for index, item in enumerate(response["output"]):
        yield from _item_events(index, item, seq)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield _sse(final, {"response": response}, seq)
