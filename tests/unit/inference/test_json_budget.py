"""Budget-aware constrained decoding: for random schemas and random budgets no smaller than the
shortest valid instance, every random walk over a real byte-level BPE vocabulary ends, within
the budget, in JSON that validates against the schema (hypothesis property tests)."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from aifab.core.errors import InvalidInputError
from aifab.inference.json_constraint import JsonConstraint, TokenVocabulary

NAMES = st.sampled_from(["a", "id", "city", "count", "tags", "note", "q", "limit"])


def _scalar() -> st.SearchStrategy[dict[str, Any]]:
    bounded_int = st.tuples(st.integers(-50, 50), st.integers(0, 2000)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}
    )
    bounded_num = st.tuples(st.integers(-9, 9), st.integers(1, 400)).map(
        lambda t: {"type": "number", "minimum": t[0] / 4, "maximum": t[0] / 4 + t[1] / 8}
    )
    text = st.tuples(st.integers(0, 3), st.integers(0, 8)).map(
        lambda t: {"type": "string", "minLength": t[0], "maxLength": t[0] + t[1]}
    )
    return st.one_of(
        st.just({"type": "string"}),
        text,
        st.just({"type": "integer"}),
        st.just({"type": "number"}),
        bounded_int,
        bounded_num,
        st.just({"type": "boolean"}),
        st.just({"type": ["string", "null"]}),
        st.lists(st.sampled_from(["GB", "ES", "FR", "Germany"]), min_size=1, unique=True).map(
            lambda v: {"enum": v}
        ),
        st.just({}),
    )


def _compound(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.dictionaries(NAMES, children, max_size=4).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props) or ["_"]), unique=True).map(
            lambda req: {
                "type": "object",
                "properties": props,
                "required": [r for r in req if r in props],
            }
        )
    )
    arrays = st.tuples(children, st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]}
    )
    return st.one_of(objects, arrays, st.just({"type": "object"}))


SCHEMAS = st.recursive(_scalar(), _compound, max_leaves=8)


@pytest.fixture(scope="module")
def vocab() -> TokenVocabulary:
    from aifab.models.tokenizer import train_bpe_tokenizer

    rng = random.Random(0)
    corpus = [
        json.dumps(
            {
                "name": rng.choice(["sql", "predict", "kb_search"]),
                "arguments": {"query": f"SELECT {i} FROM t", "n": i * 37, "x": -1.5e3},
                "city": rng.choice(["Oslo", "Madrid", "London"]),
                "tags": ["alpha", "beta"][: i % 3],
            },
            separators=(",", ":"),
        )
        for i in range(300)
    ]
    tok = train_bpe_tokenizer(corpus, vocab_size=600)
    return TokenVocabulary(tok, frozenset({int(tok.eos_token_id)}))


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    if "properties" in schema:
        props = {k: _strict(v) for k, v in schema["properties"].items()}
        return {**schema, "properties": props, "additionalProperties": False}
    if "items" in schema:
        return {**schema, "items": _strict(schema["items"])}
    if "anyOf" in schema:
        return {**schema, "anyOf": [_strict(b) for b in schema["anyOf"]]}
    return schema


def walk(
    constraint: JsonConstraint, vocab: TokenVocabulary, budget: int, rng: random.Random
) -> str:
    """Sample uniformly among the allowed tokens (EOS as likely as any) until EOS or budget."""
    text = dict(vocab.texts)
    out: list[str] = []
    for used in range(budget):
        allowed = constraint.allowed(budget - used)
        assert allowed, f"dead end after {''.join(out)!r}"
        token = rng.choice(allowed)
        if token in vocab.eos_ids:
            break
        constraint.advance(token, text[token])
        out.append(text[token])
    assert constraint.complete, f"budget {budget} ran out inside {''.join(out)!r}"
    return "".join(out)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schema=SCHEMAS, slack=st.integers(0, 40), seed=st.integers(0, 2**16))
def test_random_schemas_close_within_random_budgets(
    vocab: TokenVocabulary, schema: dict[str, Any], slack: int, seed: int
) -> None:
    note(json.dumps(schema))
    constraint = JsonConstraint(schema, vocab)
    budget = constraint.min_tokens + slack
    text = walk(constraint, vocab, budget, random.Random(seed))
    jsonschema.validate(json.loads(text), _strict(schema))


TOOLS_UNION = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "name": {"const": "sql"},
                "arguments": {
                    "type": "object",
                    "properties": {"query": {"type": "string", "maxLength": 40}},
                    "required": ["query"],
                },
            },
            "required": ["name", "arguments"],
        },
        {
            "type": "object",
            "properties": {
                "name": {"const": "forecast"},
                "arguments": {
                    "type": "object",
                    "properties": {
                        "country": {"enum": ["GB", "ES"]},
                        "days": {"type": "integer", "minimum": 1, "maximum": 14},
                    },
                    "required": ["country", "days"],
                },
            },
            "required": ["name", "arguments"],
        },
    ]
}


@pytest.mark.parametrize("slack", [0, 1, 5, 30])
def test_the_name_picks_the_arguments_schema(vocab: TokenVocabulary, slack: int) -> None:
    names = set()
    for seed in range(40):
        constraint = JsonConstraint(TOOLS_UNION, vocab)
        text = walk(constraint, vocab, constraint.min_tokens + slack, random.Random(seed))
        value = json.loads(text)
        jsonschema.validate(value, _strict(TOOLS_UNION))
        names.add(value["name"])
    assert names == {"sql", "forecast"} or slack < 30  # tight budgets leave only the shorter one


def test_min_tokens_is_the_shortest_instance(vocab: TokenVocabulary) -> None:
    shortest = '{"name":"sql","arguments":{"query":""}}'
    assert JsonConstraint(TOOLS_UNION, vocab).min_tokens == len(shortest)
    assert JsonConstraint({"type": "integer", "minimum": 100}, vocab).min_tokens == 3
    assert JsonConstraint({"type": "string", "minLength": 4}, vocab).min_tokens == 6


@pytest.mark.parametrize(
    ("schema", "bad", "good"),
    [
        ({"type": "integer", "maximum": 12}, "13", "12"),
        ({"type": "integer", "minimum": -3, "maximum": 40}, "-4", "-3"),
        ({"type": "number", "minimum": 0.5, "maximum": 0.75}, "0.8", "0.625"),
        ({"type": "string", "maxLength": 3}, '"abcd"', '"abc"'),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "[1,2,3]", "[1,2]"),
        ({"type": "integer"}, "1" * 16, "1" * 15),  # a run of digits is cut at 15
    ],
)
def test_bounds_are_respected(vocab: TokenVocabulary, schema: Any, bad: str, good: str) -> None:
    from aifab.inference.json_constraint import accepting, feed

    constraint = JsonConstraint(schema, vocab)
    start = constraint.state
    after_bad = feed(start, bad, constraint.nodes)
    assert after_bad is None or not accepting(after_bad, constraint.nodes)
    after_good = feed(start, good, constraint.nodes)
    assert after_good is not None and accepting(after_good, constraint.nodes)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "integer", "minimum": 0.2, "maximum": 0.8},
        {"anyOf": [{"type": "string"}]},
        {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]},
    ],
)
def test_impossible_or_unsupported_schemas_are_refused(vocab: TokenVocabulary, schema: Any) -> None:
    with pytest.raises(InvalidInputError):
        JsonConstraint(schema, vocab)
