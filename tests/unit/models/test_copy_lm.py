"""The copy-head causal LM: cache == full forward, save/load round trip (a fresh interpreter too),
and the behaviour it exists for: copying values never seen as values in training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from aifab.models.zoo import build_model

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "layers": 2,
    "copy_head": True,
}


def _model(**over: Any) -> Any:
    torch.manual_seed(0)
    model = build_model("causal-lm", {**TINY, **over}).eval()
    with torch.no_grad():  # a random gate near 0.5 would hide a broken pointer half the time
        model.copy_gate.bias.fill_(-1.0)
    return model


def test_config_flag_builds_the_copy_model_with_a_distribution_as_logits() -> None:
    from aifab.models.copy_lm import MODEL_TYPE, CopyLlamaForCausalLM

    model = _model()
    assert isinstance(model, CopyLlamaForCausalLM) and model.config.model_type == MODEL_TYPE
    assert type(build_model("causal-lm", {**TINY, "copy_head": False})).__name__ == (
        "LlamaForCausalLM"
    )
    ids = torch.tensor([[1, 9, 10, 11, 9]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert torch.allclose(logits.exp().sum(-1), torch.ones(1, 5), atol=1e-5)  # logits = log p
    # A token that is in the context gets the pointer's mass on top of the generator's.
    with torch.no_grad():
        generator_only = torch.log_softmax(model.lm_head(model.model(ids).last_hidden_state), -1)
    gain = logits[0, -1] - generator_only[0, -1]
    assert gain[[9, 10, 11]].min() > gain[[40, 41]].max()


def _full(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
    logits: torch.Tensor = out.logits
    return logits


def test_cached_steps_equal_one_full_forward_with_left_padding_and_a_dropped_row() -> None:
    model = _model()
    pad = model.config.pad_token_id
    prompts = [[1, 20, 21, 22], [1, 30, 31, 32, 33, 34]]
    steps = [[40, 41, 42], [50, 51, 52]]
    width = max(map(len, prompts))
    ids = torch.full((2, width), pad)
    mask = torch.zeros((2, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
    full_ids = torch.cat([ids, torch.tensor(steps)], 1)
    full_mask = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
    expected = _full(model, full_ids, full_mask)
    # The generation loop's calls: prefill, one token per step, then row 0 is dropped.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    got, cache, step = [], None, ids
    with torch.no_grad():
        for k in range(4):
            if k == 3:
                index = torch.tensor([1])
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
            if k:
                step = torch.tensor([[steps[r][k - 1]] for r in ([0, 1] if k < 3 else [1])])
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], -1)
                positions = positions[:, -1:] + 1
            out = model(
                input_ids=step,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                cache=cache,
            )
            cache = out.cache
            assert type(cache).__name__ == "CopyCache"
            got.append(out.logits[:, -1])
    for k in range(3):  # prefill + two steps with both rows
        assert torch.allclose(got[k], expected[:, width - 1 + k], atol=1e-5), k
    assert torch.allclose(got[3], expected[1:, width + 2], atol=1e-5)
    # The padded row alone (no padding) gives the same logits: padding is masked everywhere.
    alone = torch.tensor([prompts[0] + steps[0]])
    assert torch.allclose(
        _full(model, alone, torch.ones_like(alone))[0], expected[0, width - 4 :], atol=1e-5
    )


def test_generation_loop_runs_the_copy_model_batched_like_alone(tmp_path: Path) -> None:
    from aifab.inference.generation import (
        GenerationParams,
        GenerationRequest,
        LanguageModel,
        generate,
    )
    from aifab.models.tokenizer import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(["abc def ghi: jkl mno pqr"] * 20, 300)
    model = _model(vocab_size=len(tokenizer))
    lm = LanguageModel(model, tokenizer, 256, frozenset({2}), 0)
    assert lm.cache_arg == "cache"
    params = GenerationParams(max_tokens=6, temperature=0)
    prompts = ["abc def", "ghi: jkl mno pqr abc"]
    together = generate(lm, [GenerationRequest(p, params) for p in prompts])
    alone = [generate(lm, [GenerationRequest(p, params)])[0] for p in prompts]
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]


def test_save_and_load_round_trip_also_in_a_fresh_interpreter(tmp_path: Path) -> None:
    from aifab.models.checkpoint import load_model, save_model

    model = _model()
    target = save_model(tmp_path / "m", model, builder="causal-lm", config=TINY)
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == "aifab-copy-llama"
    loaded, sidecar = load_model(target)
    assert sidecar["config"]["copy_head"] is True
    ids = torch.tensor([[1, 9, 10, 11, 9, 10]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        assert torch.equal(loaded(input_ids=ids).logits, expected)
    # What MLflow's pyfunc loader does: load in a new process that never imported copy_lm.
    code = (
        "import sys, torch\n"
        "from aifab.models.checkpoint import load_model\n"
        "m, _ = load_model(sys.argv[1])\n"
        "print(type(m).__name__, m(input_ids=torch.tensor([[1, 9, 10, 11, 9, 10]])).logits"
        "[0, -1].argmax().item())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["CopyLlamaForCausalLM", str(int(expected[0, -1].argmax()))]


# ---- behaviour: copying values never seen as values -----------------------------------------

BOS, EOS, COLON, SEP = 1, 2, 3, 4
FILLER = list(range(8, 64))
TRAIN_VALUES, TEST_VALUES = list(range(8, 44)), list(range(44, 64))  # test values: filler only


def _rows(g: torch.Generator, n: int, values: list[int]) -> list[tuple[list[int], list[int]]]:
    """``BOS filler : v1 v2 v3 filler SEP`` -> ``v1 v2 v3 EOS``."""

    def some(pool: list[int], k: int) -> list[int]:
        return [pool[int(i)] for i in torch.randint(len(pool), (k,), generator=g)]

    rows = []
    for _ in range(n):
        value = some(values, 3)
        before = some(FILLER, int(torch.randint(2, 8, (1,), generator=g)))
        after = some(FILLER, int(torch.randint(2, 8, (1,), generator=g)))
        rows.append(([BOS, *before, COLON, *value, *after, SEP], [*value, EOS]))
    return rows


def _copy_task_exact_match(copy_head: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = build_model("causal-lm", {**TINY, "hidden_size": 64, "copy_head": copy_head})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        rows = _rows(g, 32, TRAIN_VALUES)
        width = max(len(p) + len(a) for p, a in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100)
        for i, (prompt, answer) in enumerate(rows):
            ids[i, : len(prompt) + len(answer)] = torch.tensor(prompt + answer)
            labels[i, len(prompt) : len(prompt) + len(answer)] = torch.tensor(answer)
        loss = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    test = _rows(torch.Generator().manual_seed(1), 40, TEST_VALUES)
    hits = 0
    with torch.no_grad():
        for prompt, answer in test:
            ids = list(prompt)
            for _ in answer:
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
            hits += ids[len(prompt) :] == answer
    return hits / len(test)


def test_copy_head_copies_unseen_values_where_the_plain_model_cannot() -> None:
    assert _copy_task_exact_match(copy_head=True, steps=150) >= 0.9
    assert _copy_task_exact_match(copy_head=False, steps=150) <= 0.2


@pytest.mark.parametrize("bad", [{"copy_head": "maybe"}])
def test_copy_head_flag_is_validated(bad: dict[str, Any]) -> None:
    from aifab.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="copy_head"):
        build_model("causal-lm", bad)
