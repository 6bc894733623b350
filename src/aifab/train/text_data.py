"""Language-model data: text columns as packed token blocks, chats as labeled sequences.

Instruction/chat rows become chat-template token sequences whose labels cover only the
assistant's replies.

Only the ``lm`` and ``lora`` recipes import this module (it imports torch at the top).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import VersionInfo
from aifab.train import datasets

#: Label value the loss ignores (``torch.nn.CrossEntropyLoss`` and transformers' default).
IGNORE_INDEX = -100
Message = dict[str, str]


def split_texts(
    version: VersionInfo, column: str, split_column: str = "split", seed: int = 0
) -> dict[str, list[str]]:
    """Non-empty texts of ``column`` per split (train/valid/test).

    Without a ``split_column`` in the dataset, rows are split 80/10/10 by a seeded shuffle.

    Raises:
        InvalidInputError: the text column is missing, or there are no training rows.
    """
    rows = _split_rows(version, [column], split_column, seed)
    return {
        name: [str(r[column]) for r in group if r[column] not in (None, "")]
        for name, group in rows.items()
    }


def _split_rows(
    version: VersionInfo, columns: list[str], split_column: str, seed: int
) -> dict[str, list[dict[str, Any]]]:
    has_split = split_column in version.columns
    table = datasets.read_table(version, columns + ([split_column] if has_split else []))
    rows = table.to_pylist()
    index = datasets.split_indices(
        table.column(split_column).to_pylist() if has_split else None, len(rows), seed=seed
    )
    return {name: [rows[i] for i in idx.tolist()] for name, idx in index.items()}


def token_stream(tokenizer: Any, texts: Iterable[str], eos_id: int) -> list[int]:
    """Every text's token ids, one after another, each followed by ``eos_id``."""
    stream: list[int] = []
    texts = list(texts)
    for start in range(0, len(texts), 1024):
        encoded = tokenizer(texts[start : start + 1024], add_special_tokens=False)["input_ids"]
        for ids in encoded:
            stream.extend(ids)
            stream.append(eos_id)
    return stream


def pack_blocks(stream: Sequence[int], block_size: int) -> torch.Tensor:
    """Cut a token stream into ``[n, block_size]`` blocks (the ragged tail is dropped).

    Raises:
        InvalidInputError: the stream is shorter than one block.
    """
    n = len(stream) // block_size
    if n == 0:
        raise InvalidInputError(
            f"{len(stream)} tokens is less than one block of block_size={block_size}: "
            "lower block_size or give more text"
        )
    return torch.tensor(stream[: n * block_size], dtype=torch.long).view(n, block_size)


def unigram_entropy(ids: Sequence[int]) -> float:
    """Entropy in nats of the token frequencies of ``ids``: the loss of a context-free model."""
    counts = Counter(ids)
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values())


@dataclass(frozen=True)
class LMBlocks:
    """Packed ``[n, block_size]`` token blocks per split, and the validation unigram entropy."""

    blocks: dict[str, torch.Tensor]
    #: Entropy (nats) of the validation stream's token frequencies: the loss to beat.
    unigram_entropy: float
    tokens: dict[str, int]


def lm_blocks(tokenizer: Any, texts: Mapping[str, Sequence[str]], block_size: int) -> LMBlocks:
    """Tokenize each split, add EOS after each text and pack into blocks.

    Raises:
        InvalidInputError: the training split is shorter than one block.
    """
    eos = int(tokenizer.eos_token_id)
    streams = {name: token_stream(tokenizer, group, eos) for name, group in texts.items()}
    blocks = {"train": pack_blocks(streams.get("train", []), block_size)}
    for name, stream in streams.items():
        if name != "train" and len(stream) >= block_size:
            blocks[name] = pack_blocks(stream, block_size)
    reference = streams.get("valid") or streams["train"]
    return LMBlocks(blocks, unigram_entropy(reference), {k: len(v) for k, v in streams.items()})


def stream_batch(
    n: int,
    index: int,
    batch_size: int,
    seed: int,
    drop_last: bool = False,
    lengths: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Row indices of batch number ``index`` in an endless stream of seeded epochs over ``n`` rows.

    It depends on nothing but its arguments, so a run resumed at step ``s`` trains on exactly
    the batches an uninterrupted run would. With ``lengths`` (one per row) each batch holds
    rows of similar length (see :func:`group_by_length`).
    """
    size = min(batch_size, n)
    per_epoch = n // size if drop_last else -(-n // size)
    epoch, b = divmod(index, per_epoch)
    if lengths is not None:
        return _grouped_epoch(lengths, size, seed, epoch, drop_last)[b]
    return _epoch(n, size, seed, epoch, drop_last)[b]


@functools.lru_cache(maxsize=2)
def _epoch(n: int, size: int, seed: int, epoch: int, drop_last: bool) -> list[np.ndarray]:
    # Cached: shuffling all n rows on every step would cost O(n) per step on a large corpus.
    return datasets.epoch_batches(n, size, seed=seed, epoch=epoch, drop_last=drop_last)


@functools.lru_cache(maxsize=2)
def _grouped_epoch(
    lengths: tuple[int, ...], size: int, seed: int, epoch: int, drop_last: bool
) -> list[np.ndarray]:
    return group_by_length(lengths, size, seed=seed, epoch=epoch, drop_last=drop_last)


def group_by_length(
    lengths: Sequence[int], batch_size: int, *, seed: int, epoch: int, drop_last: bool = False
) -> list[np.ndarray]:
    """One epoch's batches of rows of similar length, in a seeded order (pure).

    The epoch's permutation is cut into mega-batches of 16 batches, each sorted by length and
    cut into batches, and the batches are shuffled: a batch is padded to its longest row, so
    a 1,000-token prompt no longer makes seven 50-token rows cost 1,000 tokens each.
    """
    rng = np.random.default_rng([seed, epoch, 1])
    order = np.random.default_rng([seed, epoch]).permutation(len(lengths))
    by_length = np.asarray(lengths)
    mega = batch_size * 16
    batches: list[np.ndarray] = []
    for start in range(0, len(order), mega):
        part = order[start : start + mega]
        part = part[np.argsort(-by_length[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    if drop_last:
        batches = [b for b in batches if len(b) == batch_size]
    return [batches[i] for i in rng.permutation(len(batches))]


def lm_loss(
    model: torch.nn.Module,
    blocks: torch.Tensor,
    device: torch.device,
    batch_size: int,
    bf16: bool = False,
) -> float:
    """Mean next-token cross-entropy (nats) of a causal LM over ``blocks``."""
    from aifab.train import loop

    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for part in loop.iterate_chunks(len(blocks), batch_size):
            x = blocks[part].to(device)
            with loop.autocast(device, bf16):
                total += float(model(input_ids=x, labels=x).loss) * len(x)
    model.train(was_training)
    return total / len(blocks)


def row_messages(row: Mapping[str, Any]) -> list[Message]:
    """One dataset row as chat messages.

    Accepted shapes: ``messages`` (a list of ``{role, content}``), ``instruction`` [+ ``input``]
    + ``output``, or ``prompt`` + ``response``; an optional ``system`` column comes first.
    """
    if row.get("messages") is not None:
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in row["messages"]]
    system = [{"role": "system", "content": str(row["system"])}] if row.get("system") else []
    if row.get("instruction") is not None:
        extra = row.get("input")
        user = str(row["instruction"]) + (f"\n\n{extra}" if extra else "")
        return [*system, {"role": "user", "content": user}, _assistant(row, "output")]
    return [*system, {"role": "user", "content": str(row["prompt"])}, _assistant(row, "response")]


def _assistant(row: Mapping[str, Any], column: str) -> Message:
    return {"role": "assistant", "content": str(row.get(column) or "")}


def chat_columns(columns: Sequence[str]) -> list[str]:
    """The columns :func:`row_messages` reads from a dataset with ``columns``.

    Raises:
        InvalidInputError: the dataset has none of the accepted shapes.
    """
    have = set(columns)
    for needed in (["messages"], ["instruction", "output"], ["prompt", "response"]):
        if have.issuperset(needed):
            optional = [c for c in ("input", "system") if c in have and needed != ["messages"]]
            return [*needed, *optional]
    raise InvalidInputError(
        "an instruction dataset needs a 'messages' column, or 'instruction' and 'output' "
        f"(optional 'input'), or 'prompt' and 'response'; got: {', '.join(columns)}"
    )


@dataclass(frozen=True)
class ChatExample:
    """One tokenized conversation: ``labels`` is ``IGNORE_INDEX`` outside assistant replies."""

    input_ids: list[int]
    labels: list[int]


def encode_chat(tokenizer: Any, messages: Sequence[Message], max_length: int) -> ChatExample:
    """Render ``messages`` with the tokenizer's chat template and label the assistant parts.

    Each assistant reply's character span is found by rendering the conversation up to it
    (with the generation prompt) and up to its end; tokens overlapping a span are labeled, so
    the reply's end-of-turn marker is learned too and the model learns to stop.

    Raises:
        InvalidInputError: the template is not prefix-stable (rendering fewer messages does
            not give a prefix of the full rendering), or the conversation has no reply.
    """
    text = _render(tokenizer, messages, generation_prompt=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(_render(tokenizer, messages[:i], generation_prompt=True))
        end_text = _render(tokenizer, messages[: i + 1], generation_prompt=False)
        if not text.startswith(end_text):
            raise InvalidInputError("the tokenizer's chat template is not prefix-stable")
        spans.append((start, len(end_text)))
    if not spans:
        raise InvalidInputError("a conversation has no assistant message to learn from")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = enc["input_ids"][:max_length]
    labels = [
        tok if any(a < e and b > s for s, e in spans) else IGNORE_INDEX
        for tok, (a, b) in zip(ids, enc["offset_mapping"], strict=False)
    ]
    return ChatExample(ids, labels)


def _render(tokenizer: Any, messages: Sequence[Message], generation_prompt: bool) -> str:
    if not messages:
        return ""
    rendered = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=generation_prompt
    )
    return str(rendered)


def chat_splits(
    version: VersionInfo, split_column: str = "split", seed: int = 0
) -> dict[str, list[list[Message]]]:
    """An instruction/chat dataset's rows as conversations, per split.

    Raises:
        InvalidInputError: the dataset has no accepted shape (see :func:`chat_columns`).
    """
    rows = _split_rows(version, chat_columns(version.columns), split_column, seed)
    return {name: [row_messages(r) for r in group] for name, group in rows.items()}


def encode_chats(
    tokenizer: Any, conversations: Sequence[Sequence[Message]], max_length: int
) -> tuple[list[ChatExample], int]:
    """Encode conversations.

    Returns:
        The examples, and how many were left out because truncation to ``max_length`` cut
        away every assistant token.
    """
    examples = [encode_chat(tokenizer, c, max_length) for c in conversations]
    kept = [e for e in examples if any(label != IGNORE_INDEX for label in e.labels)]
    return kept, len(examples) - len(kept)


def collate(examples: Sequence[ChatExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: ``input_ids``, ``attention_mask`` and ``labels`` tensors."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        labels[i, :n] = torch.tensor(e.labels)
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def chat_loss(
    model: torch.nn.Module,
    examples: Sequence[ChatExample],
    pad_id: int,
    device: torch.device,
    batch_size: int,
    bf16: bool = False,
) -> float:
    """Mean cross-entropy per assistant token of a causal LM over ``examples``."""
    from aifab.train import loop

    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for part in loop.iterate_chunks(len(examples), batch_size):
            batch = {k: v.to(device) for k, v in collate(examples[part], pad_id).items()}
            # The model shifts labels by one: the first position is never predicted.
            n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
            with loop.autocast(device, bf16):
                total += float(model(**batch).loss) * n
            tokens += n
    model.train(was_training)
    return total / max(1, tokens)
