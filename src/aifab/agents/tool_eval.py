"""How well an LM calls tools: tool-name accuracy and argument exact match on held-out requests.

Each dataset row holds ``messages`` (ending with the assistant's expected answer) and
``expected`` (the call as JSON). The model answers the conversation without its last message,
greedily, exactly as the chat endpoint would prompt it; the answer is parsed for tool calls.
The baseline always answers the training split's most common call.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = ["evaluate_tool_calls"]


def _rows(dataset: str, split: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from aifab.data import query

    table = query(f'SELECT * FROM "{dataset}"').to_pylist()
    missing = {"messages", "expected"} - set(table[0] if table else {})
    if missing:
        raise InvalidInputError(
            f"{dataset}: needs columns messages and expected, {sorted(missing)}"
        )
    if split is None or "split" not in (table[0] if table else {}):
        return table, table
    return [r for r in table if r["split"] == split], [r for r in table if r["split"] == "train"]


def evaluate_tool_calls(
    model: str, dataset: str, *, split: str | None = "test", limit: int = 200, max_tokens: int = 160
) -> dict[str, Any]:
    """Score ``model``'s tool calls on ``dataset``'s ``split`` against the expected calls.

    Args:
        model: a registered LM (``NAME@VERSION``/``@ALIAS``) or a model directory.
        dataset: a dataset ref with ``messages`` and ``expected`` (and ``split``) columns.
        split: the rows to score (None: all); the baseline learns from ``train``.
        limit: score at most this many rows.
        max_tokens: the longest answer generated.

    Returns:
        ``tool_accuracy``, ``argument_exact_match``, ``parsed_share`` for the model and the
        baseline's ``tool_accuracy`` and ``argument_exact_match``, with the counts.
    """
    from aifab.inference.generation import GenerationParams
    from aifab.inference.loading import load_served_model
    from aifab.inference.tool_calls import parse_tool_calls, template_messages

    rows, train = _rows(dataset, split)
    rows = rows[:limit]
    if not rows:
        raise InvalidInputError(f"{dataset}: no rows in split {split!r}")
    common = Counter(r["expected"] for r in train).most_common(1)[0][0] if train else "{}"
    baseline = json.loads(common)
    handler: Any = load_served_model(model).handler
    if getattr(handler, "kind", None) != "lm":
        raise InvalidInputError(f"{model}: not a language model")
    known = _all_tools(train + rows)
    names = right_name = right_args = parsed = base_name = base_args = 0
    for row in rows:
        expected = json.loads(row["expected"])
        messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"][:-1]]
        prompt = handler.chat_prompt(template_messages(messages, None))
        params = GenerationParams(max_tokens=max_tokens, temperature=0.0)
        [result] = handler.predict([handler.request(prompt, params)])
        calls = parse_tool_calls(result.text, known).tool_calls
        names += 1
        base_name += baseline.get("name") == expected["name"]
        base_args += baseline == expected
        if calls:
            parsed += 1
            fn = calls[0]["function"]
            right_name += fn["name"] == expected["name"]
            same = fn["name"] == expected["name"]
            right_args += same and json.loads(fn["arguments"]) == expected["arguments"]
    return {
        "rows": names,
        "tool_accuracy": right_name / names,
        "argument_exact_match": right_args / names,
        "parsed_share": parsed / names,
        "baseline_tool_accuracy": base_name / names,
        "baseline_argument_exact_match": base_args / names,
        "baseline_call": baseline,
    }


def _all_tools(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool name the data knows, so a call of any of them counts as parsed."""
    names = {json.loads(r["expected"])["name"] for r in rows}
    return [{"type": "function", "function": {"name": n}} for n in sorted(names)]
