"""LMHandler: loading a registered tiny LM, chat prompts, validation, batching and streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.generation import GenerationParams, GenerationRequest
from aifab.inference.handler import HANDLERS, StreamingHandler
from aifab.inference.lm import LMHandler


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def handler(tiny_lm: dict[str, Any]) -> LMHandler:
    from aifab.models.checkpoint import read_sidecar
    from aifab.track.registry import download_model

    path = download_model("tiny-lm@1")
    h = HANDLERS.get(read_sidecar(path)["builder"])()
    h.setup(path, read_sidecar(path), {"model_id": "tiny-lm@1", "max_tokens_limit": 100})
    assert isinstance(h, LMHandler)
    return h


def greedy(max_tokens: int = 8, **kw: Any) -> GenerationParams:
    return GenerationParams(max_tokens=max_tokens, temperature=0.0, **kw)


def test_describe_and_protocol(handler: LMHandler) -> None:
    assert isinstance(handler, StreamingHandler)
    info = handler.describe()
    assert info["kind"] == "lm"
    assert info["model_id"] == "tiny-lm@1"
    assert info["max_context"] == handler.max_context == 256
    assert info["vocab_size"] == 384
    assert info["max_tokens_limit"] == 100


def test_chat_prompt_uses_the_chat_template(handler: LMHandler) -> None:
    prompt = handler.chat_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    assert prompt == "<|system|>\nBe brief.<|eos|>\n<|user|>\nHi<|eos|>\n<|assistant|>\n"
    assert handler.count_tokens(prompt) > 4


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ("hi", "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "messages[1].role"),
        ([{"content": "a"}], "messages[0].role"),
        ([{"role": "user", "content": ["a"]}], "messages[0].content"),
        ([{"role": "user"}], "messages[0].content"),
    ],
)
def test_bad_messages_are_named(handler: LMHandler, messages: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        handler.chat_prompt(messages)
    assert err.value.message.startswith(f"{field}:")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (GenerationParams(max_tokens=0), "max_tokens"),
        (GenerationParams(max_tokens=101), "max_tokens"),
        (GenerationParams(max_tokens=True), "max_tokens"),  # type: ignore[arg-type]
        (GenerationParams(temperature=2.5), "temperature"),
        (GenerationParams(temperature=-0.1), "temperature"),
        (GenerationParams(temperature="hot"), "temperature"),  # type: ignore[arg-type]
        (GenerationParams(top_p=0.0), "top_p"),
        (GenerationParams(top_p=1.1), "top_p"),
        (GenerationParams(top_k=-1), "top_k"),
        (GenerationParams(top_k=1.5), "top_k"),  # type: ignore[arg-type]
        (GenerationParams(stop=["a", "b", "c", "d", "e"]), "stop"),
        (GenerationParams(stop=[""]), "stop"),
        (GenerationParams(seed="x"), "seed"),  # type: ignore[arg-type]
    ],
)
def test_bad_params_are_named(handler: LMHandler, params: GenerationParams, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        handler.request("Hello", params)
    assert err.value.message.startswith(f"{field}:")


def test_prompt_and_max_tokens_must_fit_the_context(handler: LMHandler) -> None:
    long_prompt = "word " * 300
    with pytest.raises(InvalidInputError, match=r"^prompt: .* tokens"):
        handler.request(long_prompt, greedy())
    n = handler.count_tokens("word " * 100)
    assert 160 < n < 256
    with pytest.raises(InvalidInputError, match=r"^max_tokens: prompt \(\d+ tokens\)"):
        handler.request("word " * 100, greedy(min(100, 256 - n + 1)))
    assert handler.request("word " * 100, greedy(256 - n)).params.max_tokens == 256 - n


def test_decode_prompts_and_messages(handler: LMHandler) -> None:
    reqs = handler.decode({"prompt": ["a", "bb"], "max_tokens": 3, "stop": "x", "seed": 1})
    assert [r.prompt for r in reqs] == ["a", "bb"]
    assert reqs[0].params == GenerationParams(max_tokens=3, stop=["x"], seed=1)
    (nulls,) = handler.decode({"prompt": "a", "stop": None, "seed": None, "max_tokens": None})
    assert nulls.params == GenerationParams()
    (chat,) = handler.decode({"messages": [{"role": "user", "content": "Hi"}]})
    assert chat.prompt.endswith("<|assistant|>\n")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([], "body"),
        ({}, "prompt"),
        ({"prompt": "a", "messages": []}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": ["a", 3]}, "prompt[1]"),
        ({"prompt": 3}, "prompt"),
        ({"prompt": "a", "n": 2}, "n"),
        ({"prompt": "a", "stop": 3}, "stop"),
        ({"prompt": "a", "max_tokens": "3"}, "max_tokens"),
    ],
)
def test_decode_rejects_bad_payloads(handler: LMHandler, payload: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        handler.decode(payload)
    assert err.value.message.startswith(f"{field}:")


def test_batched_predict_equals_one_at_a_time(handler: LMHandler) -> None:
    reqs = [
        handler.request("The", greedy(10)),
        handler.request("Once upon a time there", greedy(4)),
        handler.request(handler.chat_prompt([{"role": "user", "content": "Hello"}]), greedy(7)),
    ]
    batch = handler.predict(reqs)
    alone = [handler.predict([r])[0] for r in reqs]
    assert [r.text for r in batch] == [r.text for r in alone]
    assert [r.finish_reason for r in batch] == [r.finish_reason for r in alone]
    assert [r.completion_tokens for r in batch] == [r.completion_tokens for r in alone]


def test_stream_matches_predict_and_encode_counts_usage(handler: LMHandler) -> None:
    req = handler.request("Once", GenerationParams(max_tokens=12, temperature=0.7, seed=3))
    result = handler.predict([req])[0]
    chunks = list(handler.stream(req))
    assert "".join(c.text for c in chunks) == result.text
    assert chunks[-1].finish_reason == result.finish_reason
    body = handler.encode(result)
    assert body["text"] == result.text
    assert body["usage"] == {
        "prompt_tokens": handler.count_tokens("Once"),
        "completion_tokens": result.completion_tokens,
        "total_tokens": handler.count_tokens("Once") + result.completion_tokens,
    }


def test_bad_model_directory_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        LMHandler().setup(tmp_path, {"builder": "causal-lm"}, {})


def test_request_type_is_generation_request(handler: LMHandler) -> None:
    assert isinstance(handler.request("x", greedy()), GenerationRequest)


def test_corrupt_tokenizer_is_invalid_input(tiny_lm: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    from aifab.track.registry import download_model

    broken = Path(shutil.copytree(download_model("tiny-lm@1"), tmp_path / "m"))
    (broken / "tokenizer.json").write_text("{bad", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="cannot load the tokenizer"):
        LMHandler().setup(broken, {"builder": "causal-lm"}, {})


def test_concurrent_loads_keep_tied_weights(tiny_lm: dict[str, Any]) -> None:
    """The server loads deployments on threads; transformers' loading is not thread-safe."""
    from concurrent.futures import ThreadPoolExecutor

    from aifab.inference.loading import load_served_model

    with ThreadPoolExecutor(3) as pool:
        loaded = list(pool.map(lambda _: load_served_model("tiny-lm@1"), range(3)))
    for one in loaded:
        assert isinstance(one.handler, LMHandler) and one.handler.lm is not None
        model = one.handler.lm.model
        assert model.lm_head.weight is model.get_input_embeddings().weight


def test_sampling_defaults_from_options_then_generation_config(
    tiny_lm: dict[str, Any], tmp_path: Path
) -> None:
    """What a request that omits them gets (issue 35): the deployment's options first, then the
    keys the model's generation_config.json sets (``do_sample: false`` is greedy), as vLLM."""
    import json
    import shutil

    from aifab.models.checkpoint import read_sidecar
    from aifab.track.registry import download_model

    path = tmp_path / "model"
    shutil.copytree(download_model("tiny-lm@1"), path)
    (path / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "top_p": 0.9, "max_new_tokens": 4096})
    )
    h = LMHandler()
    h.setup(path, read_sidecar(path), {"max_tokens_limit": 100})
    assert h.defaults == {"temperature": 0.0, "top_p": 0.9, "max_tokens": 100}
    h.setup(path, read_sidecar(path), {"temperature": 0.7, "max_tokens": 20})
    assert h.defaults == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 20}
    [request] = h.decode({"prompt": "the cat"})
    assert (request.params.temperature, request.params.max_tokens) == (0.7, 20)
    assert h.decode({"prompt": "the cat", "temperature": 0})[0].params.temperature == 0
    with pytest.raises(InvalidInputError, match="^temperature:"):
        h.setup(path, read_sidecar(path), {"temperature": 5})
    with pytest.raises(InvalidInputError, match="^grounded_numbers"):
        h.setup(path, read_sidecar(path), {"grounded_numbers": "yes"})
