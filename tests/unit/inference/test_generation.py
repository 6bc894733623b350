"""The KV-cache generation loop against transformers' own generate() on the tiny LM."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from aifab.core.errors import InvalidInputError
from aifab.inference.generation import (
    GenerationParams,
    GenerationRequest,
    LanguageModel,
    _StopText,
    generate,
    generate_stream,
)

PROMPTS = ["The", "Once upon a time there was a", "hello world, how are"]


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def lm(tiny_lm: dict[str, Any]) -> LanguageModel:
    from transformers import AutoTokenizer

    from aifab.models.checkpoint import load_model
    from aifab.track.registry import download_model

    path = download_model("tiny-lm@1")
    model, _ = load_model(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    eos = frozenset({int(tokenizer.eos_token_id)})
    return LanguageModel(model, tokenizer, 256, eos, int(tokenizer.pad_token_id))


def greedy(max_tokens: int = 12, **kw: Any) -> GenerationParams:
    return GenerationParams(max_tokens=max_tokens, temperature=0.0, **kw)


def one(lm: LanguageModel, prompt: str, params: GenerationParams) -> Any:
    return generate(lm, [GenerationRequest(prompt, params)])[0]


def test_greedy_matches_transformers_generate_token_for_token(lm: LanguageModel) -> None:
    for prompt in PROMPTS:
        ids = lm.prompt_ids(prompt)
        expected = lm.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=sorted(lm.eos_ids),
            pad_token_id=lm.pad_id,
        )[0, len(ids) :].tolist()
        result = one(lm, prompt, greedy())
        assert result.token_ids == expected
        assert result.prompt_tokens == len(ids)
        assert result.completion_tokens == len(expected)
        text_ids = [t for t in expected if t not in lm.eos_ids]
        assert result.text == lm.tokenizer.decode(text_ids, skip_special_tokens=True)


def test_batched_left_padded_greedy_equals_one_at_a_time(lm: LanguageModel) -> None:
    params = [greedy(12), greedy(5), greedy(9)]
    alone = [one(lm, p, q) for p, q in zip(PROMPTS, params, strict=True)]
    batch = generate(lm, [GenerationRequest(p, q) for p, q in zip(PROMPTS, params, strict=True)])
    assert [r.token_ids for r in batch] == [r.token_ids for r in alone]
    assert [r.text for r in batch] == [r.text for r in alone]
    assert [r.completion_tokens for r in batch] == [12, 5, 9]


def test_max_tokens_ends_with_length(lm: LanguageModel) -> None:
    result = one(lm, "The", greedy(7))
    assert (result.finish_reason, result.completion_tokens) == ("length", 7)


def test_eos_ends_with_stop_and_is_not_text(lm: LanguageModel) -> None:
    first = one(lm, "The", greedy(1)).token_ids[0]
    eos_first = LanguageModel(lm.model, lm.tokenizer, 256, frozenset({first}), lm.pad_id)
    result = one(eos_first, "The", greedy(10))
    assert (result.text, result.finish_reason, result.completion_tokens) == ("", "stop", 1)


def test_min_tokens_bans_eos_until_reached(lm: LanguageModel) -> None:
    first = one(lm, "The", greedy(1)).token_ids[0]
    eos_first = LanguageModel(lm.model, lm.tokenizer, 256, frozenset({first}), lm.pad_id)
    params = greedy(10)
    params.min_tokens = 3
    result = one(eos_first, "The", params)
    assert result.completion_tokens >= 3 and first not in result.token_ids[:3]


def test_same_seed_same_text_and_seeds_differ(lm: LanguageModel) -> None:
    params = [GenerationParams(max_tokens=16, temperature=1.0, seed=s) for s in (1, 1, 2, 3)]
    texts = [one(lm, "Once", p).text for p in params]
    assert texts[0] == texts[1]
    assert len(set(texts[1:])) > 1


def test_top_k_1_and_tiny_top_p_are_greedy(lm: LanguageModel) -> None:
    expected = one(lm, "Once", greedy(10)).token_ids
    for extra in ({"top_k": 1}, {"top_p": 1e-6}):
        params = GenerationParams(max_tokens=10, temperature=1.5, seed=7, **extra)
        assert one(lm, "Once", params).token_ids == expected


def test_concurrent_sampling_does_not_share_rng(lm: LanguageModel) -> None:
    params = GenerationParams(max_tokens=16, temperature=1.0, seed=42)
    expected = one(lm, "Once", params).text
    out: list[str] = []
    threads = [
        threading.Thread(target=lambda: out.append(one(lm, "Once", params).text)) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [expected] * 3


@pytest.mark.parametrize(
    "params",
    [greedy(20), GenerationParams(max_tokens=20, temperature=0.8, top_p=0.9, top_k=40, seed=5)],
)
def test_stream_concatenates_to_the_non_streamed_text(
    lm: LanguageModel, params: GenerationParams
) -> None:
    result = one(lm, "Once upon", params)
    chunks = list(generate_stream(lm, GenerationRequest("Once upon", params)))
    assert "".join(c.text for c in chunks) == result.text
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert (last.finish_reason, last.prompt_tokens, last.completion_tokens) == (
        result.finish_reason,
        result.prompt_tokens,
        result.completion_tokens,
    )


def test_stop_string_cuts_text_and_stream_never_leaks_it(lm: LanguageModel) -> None:
    full = one(lm, "Once upon a time", greedy(24)).text
    assert len(full) > 8
    # A stop string starting mid-text (likely across a token boundary).
    start = len(full) // 2
    stop = full[start : start + 3]
    cut = full[: full.find(stop)]
    params = greedy(24, stop=["zzzz-never", stop])
    result = one(lm, "Once upon a time", params)
    assert (result.text, result.finish_reason) == (cut, "stop")
    emitted = ""
    for chunk in generate_stream(lm, GenerationRequest("Once upon a time", params)):
        emitted += chunk.text
        assert cut.startswith(emitted)
    assert emitted == cut


def test_stop_text_holds_back_a_possible_stop_prefix(lm: LanguageModel) -> None:
    ids = lm.tokenizer("hello world", add_special_tokens=False)["input_ids"]
    stop = "lo wX"
    text = _StopText(lm.tokenizer, [stop])
    released = ""
    for k, token in enumerate(ids):
        piece, stopped = text.push(token)
        assert not stopped
        released += piece
        decoded = lm.tokenizer.decode(ids[: k + 1])
        held = decoded[len(released) :]
        assert decoded.startswith(released)
        # Whatever tail of the text could still grow into the stop string is not released.
        for n in range(1, len(stop)):
            if decoded.endswith(stop[:n]):
                assert len(held) >= n
    assert released + text.flush() == "hello world"
    hit = _StopText(lm.tokenizer, ["o w"])
    released = [hit.push(t) for t in ids]
    assert "".join(p for p, _ in released) == "hell"
    assert any(stopped for _, stopped in released)


def test_prompt_filling_the_context_is_rejected(lm: LanguageModel) -> None:
    with pytest.raises(InvalidInputError, match="prompt"):
        one(lm, "word " * 400, greedy(2))


def test_stream_can_be_resumed_on_other_threads(lm: LanguageModel) -> None:
    """The server pulls each chunk with next() on whichever worker thread is free."""
    from concurrent.futures import ThreadPoolExecutor

    params = GenerationParams(max_tokens=12, temperature=0.9, seed=11)
    expected = one(lm, "Once", params).text
    stream = generate_stream(lm, GenerationRequest("Once", params))
    texts = []
    with ThreadPoolExecutor(max_workers=3) as pool:
        while (chunk := pool.submit(next, stream, None).result()) is not None:
            texts.append(chunk.text)
    assert "".join(texts) == expected
    assert torch.is_inference_mode_enabled() is False


def test_bad_prompt_fails_when_the_stream_is_made(lm: LanguageModel) -> None:
    with pytest.raises(InvalidInputError, match="prompt"):
        generate_stream(lm, GenerationRequest("word " * 400, greedy(2)))
