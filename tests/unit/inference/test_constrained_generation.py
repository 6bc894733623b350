"""A real (tiny, barely trained) LM under a JSON-schema constraint always emits parseable JSON
that satisfies the schema, greedy and sampled, alone and batched with unconstrained rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from aifab.inference.generation import GenerationParams, GenerationRequest, generate
from aifab.inference.json_constraint import JsonConstraint

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": ["sql", "predict"]},
        "arguments": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 24},
                "limit": {"type": "integer"},
            },
            "required": ["query"],
        },
    },
    "required": ["name", "arguments"],
}


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def lm(tiny_lm: dict[str, Any]) -> Any:
    from aifab.inference.loading import load_served_model

    handler = load_served_model("tiny-lm@1").handler
    return handler._lm


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "object" and "properties" in schema:
        props = {k: _strict(v) for k, v in schema["properties"].items()}
        return {**schema, "properties": props, "additionalProperties": False}
    return schema


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_constrained_output_always_validates(lm: Any, temperature: float) -> None:
    finished = 0
    for seed in range(4):
        params = GenerationParams(
            max_tokens=120,
            temperature=temperature,
            seed=seed,
            constraint=JsonConstraint(SCHEMA, lm.vocabulary()),
        )
        [result] = generate(lm, [GenerationRequest("the cat sat on the", params)])
        if result.finish_reason == "length":
            continue  # cut by max_tokens, as with OpenAI
        finished += 1
        jsonschema.validate(json.loads(result.text), _strict(SCHEMA))
    assert finished >= 1, "no constrained generation finished within max_tokens"


def test_batched_with_an_unconstrained_row(lm: Any) -> None:
    free = GenerationRequest("the cat sat on the", GenerationParams(max_tokens=12, temperature=0.0))
    alone = generate(lm, [free])[0]
    constrained = GenerationRequest(
        "the dog",
        GenerationParams(
            max_tokens=120,
            temperature=0.0,
            constraint=JsonConstraint({"type": "object"}, lm.vocabulary()),
        ),
    )
    together = generate(lm, [free, constrained])
    assert together[0].text == alone.text  # the constraint of one row leaves the other alone
    if together[1].finish_reason == "stop":
        assert isinstance(json.loads(together[1].text), dict)
