"""Grounded numbers over a real byte-level BPE vocabulary (hypothesis property tests): every
allowed number can be written, as the tokenizer splits it and one character at a time; a random
walk over the allowed tokens writes no other number, and within any budget never stops inside
an unfinished one."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from aifab.core.errors import InvalidInputError
from aifab.inference.json_constraint import TokenVocabulary
from aifab.inference.number_grounding import (
    GroundedNumbers,
    NumberGrounding,
    conversation_numbers,
    grounding_option,
)

NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def tokenizer() -> object:
    from aifab.models.tokenizer import train_bpe_tokenizer

    rng = random.Random(0)
    corpus = []
    for i in range(400):
        rows = [{"n": rng.randint(0, 999_999), "avg": rng.random() * 10 ** rng.randint(0, 6)}]
        corpus.append(f"The answer is {rng.randint(0, 9999)}. Result: {json.dumps(rows)} {i}")
        corpus.append(f"On 2024-0{i % 9 + 1}-1{i % 10}, mail noah.berg{i}@example.com: 90.0")
    return train_bpe_tokenizer(corpus, vocab_size=600)


@pytest.fixture(scope="module")
def vocab(tokenizer: object) -> TokenVocabulary:
    return TokenVocabulary(tokenizer, frozenset({int(tokenizer.eos_token_id)}))  # type: ignore[attr-defined]


def _token_ids(tokenizer: object, text: str) -> list[int]:
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    return ids


def _repr_number(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["count", "average", "date"]))
    if kind == "count":
        return str(draw(st.integers(0, 999_999)))
    if kind == "average":
        return repr(draw(st.floats(0.001, 1e6, allow_nan=False, allow_infinity=False)))
    return draw(st.sampled_from(["2024", "03", "17", "1999"]))


@st.composite
def allowed_sets(draw: st.DrawFn) -> list[str]:
    values = [_repr_number(draw) for _ in range(draw(st.integers(1, 6)))]
    # A float repr like 1e-05 holds the numbers 1 and 05: what the conversation would give.
    return sorted({m.group() for v in values for m in NUMBER.finditer(v)})


def walk(constraint: GroundedNumbers, vocab: TokenVocabulary, budget: int, seed: int) -> str:
    """Sample uniformly among the allowed tokens (EOS as likely as a digit) until EOS/budget."""
    rng = random.Random(seed)
    out: list[str] = []
    digits = [t for t, text in vocab.numeric]
    for used in range(budget):
        allowed = constraint.allowed(budget - used)
        assert allowed, f"dead end after {''.join(out)!r}"
        numeric = [t for t in allowed if t in set(digits) or t in vocab.eos_ids]
        token = rng.choice(numeric if numeric and rng.random() < 0.8 else allowed)
        if token in vocab.eos_ids:
            break
        constraint.advance(token, vocab.text_of[token])
        out.append(vocab.text_of[token])
    return "".join(out)


@SETTINGS
@given(numbers=allowed_sets(), pick=st.integers(0, 10), data=st.data())
def test_any_allowed_number_can_be_written(
    tokenizer: object, vocab: TokenVocabulary, numbers: list[str], pick: int, data: st.DataObject
) -> None:
    target = numbers[pick % len(numbers)]
    text = f"The answer is {target}."
    note(text)
    constraint = GroundedNumbers(numbers, vocab)
    ids = _token_ids(tokenizer, text)
    slack = data.draw(st.integers(0, 5))
    budget = len(text) + slack  # one character per token is what the budget counts on
    for used, token in enumerate(ids):
        assert token in constraint.allowed(budget - used), (vocab.text_of[token], text)
        constraint.advance(token, vocab.text_of[token])
    assert constraint.closed
    assert vocab.eos_ids <= set(constraint.allowed(budget - len(ids)))


@SETTINGS
@given(numbers=allowed_sets(), pick=st.integers(0, 10))
def test_any_allowed_number_can_be_written_a_character_at_a_time_in_exactly_its_length(
    vocab: TokenVocabulary, numbers: list[str], pick: int
) -> None:
    target = numbers[pick % len(numbers)]
    single = {text: t for t, text in vocab.texts if len(text) == 1}
    constraint = GroundedNumbers(numbers, vocab)
    for used, char in enumerate(target):
        assert single[char] in constraint.allowed(len(target) - used)
        constraint.advance(single[char], char)
    assert constraint.closed


@SETTINGS
@given(numbers=allowed_sets(), other=st.integers(0, 10**7), budget=st.integers(1, 40))
def test_no_other_number_can_be_written(
    tokenizer: object, vocab: TokenVocabulary, numbers: list[str], other: int, budget: int
) -> None:
    stranger = str(other)
    if stranger in numbers:
        return
    text = f"The answer is {stranger} customers."
    constraint = GroundedNumbers(numbers, vocab)
    for token in _token_ids(tokenizer, text):
        if token not in constraint.allowed():
            return  # refused, as it must be
        constraint.advance(token, vocab.text_of[token])
    pytest.fail(f"{stranger} was written though only {numbers} are allowed")


@SETTINGS
@given(numbers=allowed_sets(), budget=st.integers(1, 60), seed=st.integers(0, 2**16))
def test_random_walks_write_only_allowed_numbers_and_end_them_within_the_budget(
    vocab: TokenVocabulary, numbers: list[str], budget: int, seed: int
) -> None:
    constraint = GroundedNumbers(numbers, vocab)
    text = walk(constraint, vocab, budget, seed)
    note(repr(text))
    assert constraint.closed, f"budget {budget} ran out inside a number: {text!r}"
    written = NUMBER.findall(text)
    assert set(written) <= set(numbers), (written, numbers)


def test_a_full_stop_after_a_number_and_a_decimal_point_are_told_apart(
    vocab: TokenVocabulary,
) -> None:
    constraint = GroundedNumbers({"90", "176466.65555555557"}, vocab)
    state = constraint.state
    assert constraint.feed(state, "There are 90.") is not None
    assert constraint.feed(state, "There are 90. Next") is not None
    assert constraint.feed(state, "It is 176466.65555555557.") is not None
    assert constraint.feed(state, "It is 176466.65555 ") is None  # cut short
    assert constraint.feed(state, "It is 176666.65555555557") is None  # a digit changed
    assert constraint.feed(state, "There are 900") is None
    assert constraint.feed(state, "There are 90.5") is None


def test_a_tool_call_block_is_not_constrained(vocab: TokenVocabulary) -> None:
    constraint = GroundedNumbers({"3"}, vocab)
    for piece in ["Let me look: ", "<tool_", "call>", '{"n": 12345}']:
        # advance() raises for a number that is not allowed; the call block is free
        constraint.advance(-1, piece)
    assert constraint.free and constraint.mask(1) == (False, [])


def test_advance_refuses_what_the_mask_would_have_banned(vocab: TokenVocabulary) -> None:
    constraint = GroundedNumbers({"90"}, vocab)
    with pytest.raises(InvalidInputError, match="not in the conversation"):
        constraint.advance(-1, "900")


def test_the_numbers_of_the_question_and_the_tool_results_only() -> None:
    messages = [
        {"role": "system", "content": "Tools: max_rows 20"},
        {"role": "user", "content": "How many customers are older than 40?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "sql"}}]},
        {"role": "tool", "content": '[{"n": 90, "avg": 176466.65555555557, "d": "2024-03-05"}]'},
    ]
    found = conversation_numbers(messages, NumberGrounding())
    assert found == {"40", "90", "176466.65555555557", "2024", "03", "05"}
    rounded = conversation_numbers(messages, NumberGrounding(round_to=2))
    assert rounded - found == {"176466.66"}
    assert "176467" in conversation_numbers(messages, NumberGrounding(round_to=0))
    assert "90" in conversation_numbers([{"role": "tool", "content": "90.0"}], NumberGrounding())


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, NumberGrounding()),
        (False, None),
        ({"grounded_numbers": True, "round": 2}, NumberGrounding(2)),
        ({"grounded_numbers": False, "round": 2}, None),
    ],
)
def test_grounding_option_reads_the_setting(value: object, expected: object) -> None:
    assert grounding_option(value, "aifab") == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"grounded_numbers": "yes"}, "aifab.grounded_numbers"),
        ({"grounded_numbers": True, "round": 13}, "aifab.round"),
        ({"grounded_numbers": True, "round": True}, "aifab.round"),
        ({"grounded": True}, "aifab.grounded"),
        ("on", "aifab"),
    ],
)
def test_a_bad_grounding_option_names_the_field(value: object, field: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^{re.escape(field)}:"):
        grounding_option(value, "aifab")
