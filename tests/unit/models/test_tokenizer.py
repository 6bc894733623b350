"""Byte-level BPE tokenizers: training, exact round trips, special tokens, chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.models.tokenizer import load_tokenizer, train_bpe_tokenizer

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a knowledge graph links entities with relations",
    "training small models on small data is quick",
] * 10


@pytest.fixture(scope="module")
def tok():
    return train_bpe_tokenizer(CORPUS, vocab_size=320)


def test_vocab_and_special_tokens(tok):
    assert 263 < len(tok) <= 320  # 256 bytes + 7 specials + learned merges
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_ids_to_tokens(tok.encode("<|user|><|assistant|>")) == [
        "<|user|>",
        "<|assistant|>",
    ]
    # Merges learned from the corpus make frequent words short.
    assert len(tok.encode("the quick")) < len("the quick")


@pytest.mark.parametrize(
    "text",
    ["the quick brown fox", "  leading and   inner spaces\n\ttabs", "unseen: Zürich ☃ 你好 🙂", ""],
)
def test_encode_decode_round_trip(tok, text: str):
    ids = tok.encode(text)
    assert tok.unk_token_id not in ids  # byte-level: nothing is unknown
    assert tok.decode(ids) == text


def test_batch_padding_uses_pad_id(tok):
    batch = tok(["a", "the quick brown fox"], padding=True)
    short, long_ = batch["input_ids"]
    assert len(short) == len(long_)
    assert short[-1] == tok.pad_token_id and batch["attention_mask"][0][-1] == 0


def test_chat_template(tok):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|user|>\nhi<|eos|>\n<|assistant|>\nhello<|eos|>\n"
    prompt = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>\nhi<|eos|>\n<|assistant|>\n"
    ids = tok.apply_chat_template(messages[:1], add_generation_prompt=True, return_dict=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|user|>")
    assert tok.eos_token_id in ids


def test_save_and_load(tok, tmp_path: Path):
    tok.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    text = "the lazy dog ☃"
    assert loaded.encode(text) == tok.encode(text)
    assert loaded.pad_token_id == 0 and loaded.eos_token == "<|eos|>"
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    )


def test_bad_input(tmp_path: Path):
    with pytest.raises(InvalidInputError, match="vocab_size: 100 is too small"):
        train_bpe_tokenizer(CORPUS, vocab_size=100)
    with pytest.raises(InvalidInputError, match="special_tokens: need at least 4"):
        train_bpe_tokenizer(CORPUS, special_tokens=["<pad>", "<s>"])
    with pytest.raises(InvalidInputError, match="holds no tokenizer"):
        load_tokenizer(tmp_path)


# ---- pre-tokenizer: values tokenize the same in a request and in a JSON call ------------------

REQUESTS = [
    "How many customers are from GB? Age 47, income 124100, spend 19.5, signed up 2023-09-06",
    'SELECT count(*) FROM customers WHERE country = \'GB\'"}} {"age":47,"income":124100}',
] * 20


def _pieces(tok, text: str) -> list[str]:
    return tok.convert_ids_to_tokens(tok.encode(text))


VALUES = ["GB", "47", "124100", "2023-09-06", "Ravi Bianchi"]
CONTEXTS = [" ", "'", '"', ":", "= '", "from "]


def _context_free(tok) -> list[bool]:
    """For each value and context: is the value's token sequence a suffix of the whole?"""
    out = []
    for value in VALUES:
        bare = tok.encode(value)
        out += [tok.encode(before + value)[-len(bare) :] == bare for before in CONTEXTS]
    return out


def test_isolated_pre_tokenizer_makes_a_value_the_same_tokens_in_every_context():
    tok = train_bpe_tokenizer(REQUESTS, vocab_size=400, pre_tokenizer="isolated")
    # after a space (a request), a quote or a colon (a JSON call): the very same ids
    assert all(_context_free(tok))
    assert _pieces(tok, "124100") == list("124100")  # one digit a token
    text = 'from GB? {"age":47} 😀'
    assert tok.decode(tok.encode(text)) == text  # still exact round trips


def test_the_default_words_pre_tokenizer_glues_the_space_to_the_value():
    # Why the option exists: with GPT-2's rule " GB" and "GB" are different tokens.
    tok = train_bpe_tokenizer(REQUESTS, vocab_size=400)
    assert not all(_context_free(tok))


def test_isolated_pre_tokenizer_survives_save_and_load(tmp_path: Path):
    tok = train_bpe_tokenizer(REQUESTS, vocab_size=400, pre_tokenizer="isolated")
    tok.save_pretrained(str(tmp_path))
    again = load_tokenizer(tmp_path)
    assert (
        again.encode(" GB 47")
        == tok.encode(" GB 47")
        == tok.encode(" ") + tok.encode("GB") + tok.encode(" ") + tok.encode("4") + tok.encode("7")
    )


def test_unknown_pre_tokenizer_is_refused():
    with pytest.raises(InvalidInputError, match="pre_tokenizer"):
        train_bpe_tokenizer(REQUESTS, vocab_size=400, pre_tokenizer="chars")  # type: ignore[arg-type]
