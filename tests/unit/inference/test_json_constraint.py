"""JSON-constrained decoding: whatever tokens are picked among the allowed ones, the output
parses and validates against the schema (random walks over a real byte-level BPE vocabulary)."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.json_constraint import JsonConstraint, TokenVocabulary, compile_schema

SCHEMAS: list[dict[str, Any]] = [
    {},
    {"type": "object"},
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": ["sql", "predict", "kb_search"]},
            "arguments": {"type": "object"},
        },
        "required": ["name", "arguments"],
    },
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 5},
            "days": {"type": "integer"},
            "temp": {"type": "number"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "note": {"type": ["string", "null"]},
        },
        "required": ["city", "days"],
    },
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
]


@pytest.fixture(scope="module")
def vocab() -> TokenVocabulary:
    from aifab.models.tokenizer import train_bpe_tokenizer

    corpus = [
        json.dumps({"name": "sql", "arguments": {"query": "SELECT 1", "n": i, "x": -1.5e3}})
        for i in range(200)
    ] + ['{"city":"Oslo","days":3,"temp":-2.5,"ok":true,"tags":["a","b"],"note":null}'] * 50
    tok = train_bpe_tokenizer(corpus, vocab_size=400)
    eos = frozenset({int(tok.eos_token_id)})
    return TokenVocabulary(tok, eos)


def _walk(schema: dict[str, Any], vocab: TokenVocabulary, rng: random.Random) -> str | None:
    texts = dict(vocab.texts)
    constraint = JsonConstraint(schema, vocab)
    out = []
    for _ in range(400):
        allowed = constraint.allowed()
        assert allowed, f"dead end after {''.join(out)!r}"
        eos = [t for t in allowed if t in vocab.eos_ids]
        # Lean towards ending once allowed so walks finish; otherwise pick at random.
        token = eos[0] if eos and rng.random() < 0.5 else rng.choice(allowed)
        if token in vocab.eos_ids:
            return "".join(out)
        constraint.advance(token, texts[token])
        out.append(texts[token])
    return None  # ran out of steps, like max_tokens: not a failure of the constraint


@pytest.mark.parametrize("schema", SCHEMAS, ids=["any", "object", "tool_call", "mixed", "array"])
def test_every_walk_ends_in_valid_json(schema: dict[str, Any], vocab: TokenVocabulary) -> None:
    rng = random.Random(7)
    finished = 0
    for _ in range(40):
        text = _walk(schema, vocab, rng)
        if text is None:
            continue
        finished += 1
        value = json.loads(text)
        jsonschema.validate(
            value, {**schema, "additionalProperties": False} if "properties" in schema else schema
        )
    assert finished >= 10


def test_known_good_and_bad_texts(vocab: TokenVocabulary) -> None:
    from aifab.inference.json_constraint import accepting, feed

    nodes = compile_schema(SCHEMAS[3]) + [("any", None)]
    start = (("val", 0),)
    good = '{"days":3,"city":"Oslo","tags":["a"],"note":null,"temp":-2.5e+3}'
    state = feed(start, good, nodes)
    assert state is not None and accepting(state)
    for bad in [
        '{"days":3.5',  # integer
        '{"city":"x","city"',  # a key twice
        '{"town"',  # not a property
        '{"city":"x"}',  # required days missing
        '{"days":1,"city":"x","tags":["a","b","c","d"]',  # maxItems
        '{ "city"',  # whitespace outside strings
        '{"days":01',  # leading zero
        '{"days":1,"city":"a\\x"',  # bad escape
        '{"days":1,"city":"abcdef"',  # maxLength
    ]:
        assert feed(start, bad, nodes) is None or not accepting(feed(start, bad, nodes) or ()), bad
    assert feed(start, '{"days":3.5', nodes) is None
    assert feed(start, '{"town"', nodes) is None
    assert feed(start, '{"city":"abcdef', nodes) is None
    assert feed(start, '{"city":"ab\\u00e9cd"', nodes) is not None


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "patternProperties": {}}, "'patternProperties'"),
        ({"anyOf": [{"type": "string"}]}, "'anyOf'"),
        ({"type": "tuple"}, "unsupported type 'tuple'"),
        ({"enum": [1, 2]}, "lists of strings"),
    ],
)
def test_unsupported_schemas_name_the_keyword(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        compile_schema(schema)


def test_a_free_objects_keys_share_options_that_allow_exactly_what_the_state_does(
    vocab: TokenVocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each character of a free object's key was a new state and a whole-vocabulary scan
    (constrained decoding at 0.66x free decoding when a tool's free arguments were written);
    the options shared by the key's characters must allow what scanning each state allows."""
    import aifab.inference.json_constraint as module

    texts = dict(vocab.texts)
    rng = random.Random(3)
    schema = {"type": "object", "properties": {"arguments": {"type": "object"}}}

    def exact(constraint: JsonConstraint, left: int) -> set[int]:
        with monkeypatch.context() as m:
            m.setattr(module, "_key_start", lambda state, nodes: None)
            return set(constraint.allowed(left))

    compared = 0
    for _ in range(25):
        constraint = JsonConstraint(schema, vocab)
        for left in range(rng.randint(12, 60), 0, -1):
            allowed = constraint.allowed(left)
            assert set(allowed) == exact(constraint, left)
            compared += 1
            token = rng.choice(allowed)
            if token in vocab.eos_ids:
                break
            constraint.advance(token, texts[token])
    assert compared > 500
    # A key typed again is refused as it closes, though its characters share the options.
    constraint = JsonConstraint({"type": "object"}, vocab)
    for ch in '{"ab":1,"ab':
        constraint.advance(next(t for t, x in vocab.texts if x == ch), ch)
    quote = next(t for t, x in vocab.texts if x == '"')
    assert quote not in constraint.allowed(30)
