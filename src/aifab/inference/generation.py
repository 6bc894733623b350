"""Text generation with a KV cache: sampling, stop sequences, streaming and left-padded batches.

The loop is explicit (prefill, then one token per step through ``past_key_values``) so the
server can stream, batch requests with different parameters and stop each row on its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aifab.core.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

__all__ = [
    "GenerationChunk",
    "GenerationParams",
    "GenerationRequest",
    "GenerationResult",
    "LanguageModel",
    "generate",
    "generate_stream",
]


@dataclass
class GenerationParams:
    """Sampling and stopping parameters of one request (temperature 0 = greedy)."""

    max_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    #: Constrained decoding, one object per request (e.g.
    #: :class:`~aifab.inference.json_constraint.JsonConstraint`): only the token ids its
    #: ``allowed(tokens_left)`` lists are sampled (or, where it has ``mask(tokens_left)``,
    #: ``(True, ids)`` allows only ``ids`` and ``(False, ids)`` bans them), and
    #: ``advance(id, text)`` follows each chosen token; a ``complete`` one ends as ``stop``
    #: even when the budget ran out.
    constraint: Any = None
    #: OpenAI's penalties: a token's logit drops by ``frequency * count + presence * (count>0)``
    #: for the times it was already generated.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: Token id -> bias added to its logit (-100 bans it, +100 all but forces it).
    logit_bias: dict[int, float] = field(default_factory=dict)
    #: EOS is banned until this many tokens are generated (vLLM's ``min_tokens``): an answer
    #: after tool results is never empty.
    min_tokens: int = 0
    #: Log probabilities to report per generated token: None for none, N >= 0 for the chosen
    #: token's plus the N most likely alternatives'.
    logprobs: int | None = None


@dataclass
class GenerationRequest:
    """One prompt to complete."""

    prompt: str
    params: GenerationParams


@dataclass
class GenerationChunk:
    """A piece of streamed text; the last chunk has ``finish_reason`` and the token counts."""

    text: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class GenerationResult:
    """A finished completion; ``finish_reason`` is ``stop`` (EOS or stop string) or ``length``."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    token_ids: list[int] = field(default_factory=list, repr=False)
    #: Per generated token, when asked for: ``{"token", "logprob", "top": [(token, logprob)]}``.
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class LanguageModel:
    """A causal LM with its tokenizer and the limits generation needs."""

    model: Any
    tokenizer: Any
    max_context: int
    eos_ids: frozenset[int]
    pad_id: int
    #: The forward() keyword of the KV cache: ``cache`` in transformers >= 5.x, before that
    #: ``past_key_values`` (still accepted, with a deprecation warning).
    cache_arg: str = field(init=False, default="past_key_values")

    def __post_init__(self) -> None:
        import inspect

        if "cache" in inspect.signature(self.model.forward).parameters:
            self.cache_arg = "cache"

    def vocabulary(self) -> Any:
        """Every token's text, built once (constrained decoding tries tokens against it)."""
        from aifab.inference.json_constraint import TokenVocabulary

        vocab = self.__dict__.get("_vocabulary")
        if vocab is None:
            vocab = self.__dict__["_vocabulary"] = TokenVocabulary(self.tokenizer, self.eos_ids)
        return vocab

    def encode(self, text: str) -> list[int]:
        """Prompt text -> token ids (BOS added by the tokenizer unless the text starts with it)."""
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))
        ids: list[int] = self.tokenizer(text, add_special_tokens=add_special)["input_ids"]
        return ids

    def prompt_ids(self, text: str) -> list[int]:
        """Token ids to prefill: never empty (an empty prompt starts from BOS)."""
        ids = self.encode(text)
        if not ids:
            bos_id = self.tokenizer.bos_token_id
            if bos_id is None:
                raise InvalidInputError("prompt: empty, and the tokenizer has no BOS token")
            ids = [int(bos_id)]
        return ids


class _StopText:
    """Decoded text of one row that releases only what can no longer become a stop string."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.ids: list[int] = []
        self.emitted = 0  # characters of the decoded text already released

    def push(self, token: int) -> tuple[str, bool]:
        """Add a token; return the text now safe to release and whether a stop string matched."""
        self.ids.append(token)
        text = self._decode()
        hits = [i for i in (text.find(s, self.emitted) for s in self.stops) if i >= 0]
        if hits:
            return self._release(text, min(hits)), True
        safe = len(text) - self._held(text)
        return self._release(text, safe), False

    def flush(self) -> str:
        """Release everything held back (the row ended without a stop string)."""
        text = self._decode()
        return self._release(text, len(text))

    def _decode(self) -> str:
        text: str = self.tokenizer.decode(
            self.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        return text

    def _held(self, text: str) -> int:
        """How many trailing characters to hold back: a stop-string prefix or a partial UTF-8."""
        held = len(text) - len(text.rstrip("\ufffd"))
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:n]):
                    held = max(held, n)
                    break
        return held

    def _release(self, text: str, end: int) -> str:
        piece = text[self.emitted : end] if end > self.emitted else ""
        self.emitted = max(self.emitted, end)
        return piece


@dataclass
class _Row:
    """Decoding state of one request in a batch."""

    params: GenerationParams
    prompt_ids: list[int]
    text: _StopText
    rng: torch.Generator | None
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    #: Tokens the context leaves after the prompt.
    context_left: int = 0


#: Below this temperature sampling is greedy (logits / T would overflow to inf).
_MIN_TEMPERATURE = 1e-5


def _sample(logits: torch.Tensor, params: GenerationParams, rng: torch.Generator | None) -> int:
    """Pick the next token from one row of logits (greedy when ``rng`` is None)."""
    import torch

    # A temperature this close to 0 is greedy in all but name; dividing by it overflows.
    if rng is None or params.temperature < _MIN_TEMPERATURE:
        return int(torch.argmax(logits))
    scores = logits.float() / params.temperature
    if 0 < params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        # Drop a token once the more likely ones already cover top_p (the first always stays).
        drop = (torch.cumsum(probs, dim=-1) - probs) >= params.top_p
        drop[0] = False  # a top_p that rounds to 0 in float32 must still leave one token
        scores = scores.scatter(0, order, ordered.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=rng))


def _adjusted(logits: torch.Tensor, row: _Row, eos_ids: frozenset[int]) -> torch.Tensor:
    """One row's logits after logit bias, penalties, ``min_tokens`` and the constraint's mask."""
    import torch

    params = row.params
    if len(row.ids) < params.min_tokens and eos_ids:
        logits = logits.clone()
        logits[torch.tensor(sorted(eos_ids), dtype=torch.long)] = float("-inf")
    if params.logit_bias:
        ids = torch.tensor(list(params.logit_bias), dtype=torch.long)
        logits = logits.clone()
        logits[ids] += torch.tensor(list(params.logit_bias.values()), dtype=logits.dtype)
    if row.ids and (params.presence_penalty or params.frequency_penalty):
        counts = torch.bincount(torch.tensor(row.ids), minlength=logits.shape[-1]).to(logits)
        penalty = params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
        logits = logits - penalty[: logits.shape[-1]]
    if params.constraint is not None:
        # The tokens left, this one included: the constraint closes the document within them.
        room = _room(row)
        mask = getattr(params.constraint, "mask", None)
        only, ids = mask(room) if mask is not None else (True, params.constraint.allowed(room))
        if only:
            allowed = torch.tensor(ids, dtype=torch.long)
            masked = torch.full_like(logits, float("-inf"))
            masked[allowed] = logits[allowed]
            logits = masked
        elif ids:
            # A constraint that bans a few tokens says which, not the thousands it allows.
            logits = logits.clone()
            logits[torch.tensor(ids, dtype=torch.long)] = float("-inf")
    return logits


def _room(row: _Row) -> int:
    """Tokens a row may still generate: what ``max_tokens`` and the context both leave."""
    left = row.params.max_tokens - len(row.ids)
    return min(left, row.context_left - len(row.ids))


def _log_probs(lm: LanguageModel, logits: torch.Tensor, token: int, top: int) -> dict[str, Any]:
    """The chosen token's log probability and the ``top`` most likely alternatives'."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    text = lm.vocabulary().text_of
    best = torch.topk(logp, min(top, logp.shape[-1])) if top else None
    alternatives = (
        [] if best is None else list(zip(best.indices.tolist(), best.values.tolist(), strict=True))
    )
    return {
        "token": text.get(token, ""),
        "logprob": max(float(logp[token]), -9999.0),
        "top": [(text.get(i, ""), max(v, -9999.0)) for i, v in alternatives],
    }


def _new_row(lm: LanguageModel, request: GenerationRequest) -> _Row:
    import torch

    params = request.params
    prompt_ids = lm.prompt_ids(request.prompt)
    if len(prompt_ids) >= lm.max_context:
        raise InvalidInputError(
            f"prompt: {len(prompt_ids)} tokens leave no room in the model's context of "
            f"{lm.max_context} tokens"
        )
    rng = None
    if params.temperature > 0:
        # One generator per request: same seed -> same text, and concurrent requests never
        # share (or race on) the global RNG.
        rng = torch.Generator(device="cpu")
        if params.seed is None:
            rng.seed()
        else:
            rng.manual_seed(params.seed)
    row = _Row(params, prompt_ids, _StopText(lm.tokenizer, params.stop), rng)
    row.context_left = lm.max_context - len(prompt_ids)
    return row


def _advance(lm: LanguageModel, row: _Row, token: int) -> GenerationChunk | None:
    """Feed one sampled token to its row; a chunk with ``finish_reason`` ends the row."""
    row.ids.append(token)
    if row.params.constraint is not None:
        row.params.constraint.advance(token, lm.vocabulary().text_of.get(token, ""))
    finish = None
    if token in lm.eos_ids:
        piece, finish = row.text.flush(), "stop"
    else:
        piece, stopped = row.text.push(token)
        if stopped:
            finish = "stop"
        elif len(row.ids) >= row.params.max_tokens or (
            len(row.prompt_ids) + len(row.ids) >= lm.max_context
        ):
            piece, finish = piece + row.text.flush(), "length"
            constraint = row.params.constraint
            if constraint is not None and getattr(constraint, "complete", False):
                finish = "stop"  # the budget closed the document: it is whole, not cut
    if finish is not None:
        return GenerationChunk(piece, finish, len(row.prompt_ids), len(row.ids))
    return GenerationChunk(piece) if piece else None


def _steps(lm: LanguageModel, rows: list[_Row]) -> Iterator[tuple[int, GenerationChunk]]:
    """Decode ``rows`` together as one left-padded batch; yield ``(row index, chunk)`` events."""
    import torch

    device = next(lm.model.parameters()).device
    width = max(len(r.prompt_ids) for r in rows)
    ids = torch.full((len(rows), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
        mask[i, width - len(row.prompt_ids) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    # Positions count real tokens only, so a left-padded row sees the same positions alone.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = None
    active = list(range(len(rows)))
    while True:
        # A fresh inference_mode block per step: the caller may resume this generator on
        # another thread, and the grad mode is thread-local.
        with torch.inference_mode():
            out = lm.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
                **{lm.cache_arg: cache},
            )
            # Sampling runs on the CPU, where the per-request generators live.
            logits = out.logits[:, -1, :].float().cpu()
            cache = getattr(out, lm.cache_arg)
            adjusted = [_adjusted(logits[j], rows[i], lm.eos_ids) for j, i in enumerate(active)]
            tokens = [
                _sample(adjusted[j], rows[i].params, rows[i].rng) for j, i in enumerate(active)
            ]
            for j, i in enumerate(active):
                top = rows[i].params.logprobs
                if top is not None:
                    rows[i].logprobs.append(_log_probs(lm, adjusted[j], tokens[j], top))
        keep: list[int] = []
        for j, (i, token) in enumerate(zip(active, tokens, strict=True)):
            chunk = _advance(lm, rows[i], token)
            if chunk is not None:
                yield i, chunk
            if chunk is None or chunk.finish_reason is None:
                keep.append(j)
        if not keep:
            return
        if len(keep) < len(active):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, positions = mask[index], positions[index]
            active = [active[j] for j in keep]
        ids = torch.tensor([[tokens[j]] for j in keep], dtype=torch.long, device=device)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        positions = positions[:, -1:] + 1


def generate_stream(lm: LanguageModel, request: GenerationRequest) -> Iterator[GenerationChunk]:
    """Stream one completion; the chunks' texts concatenate to :func:`generate`'s text.

    Text that could still turn out to start a stop string is held back until it cannot; the
    last chunk carries ``finish_reason`` and the prompt/completion token counts.

    Raises:
        InvalidInputError: The prompt fills the model's context.
    """
    row = _new_row(lm, request)  # here, so a bad prompt fails at the call, not at first next()
    return (chunk for _, chunk in _steps(lm, [row]))


def generate(lm: LanguageModel, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
    """Complete several prompts as one left-padded batch (each with its own parameters).

    Greedy results equal those of generating each prompt alone.

    Raises:
        InvalidInputError: A prompt fills the model's context.
    """
    if not requests:
        return []
    rows = [_new_row(lm, r) for r in requests]
    finish: dict[int, str] = {}
    for i, chunk in _steps(lm, rows):
        rows[i].pieces.append(chunk.text)
        if chunk.finish_reason is not None:
            finish[i] = chunk.finish_reason
    return [
        GenerationResult(
            text="".join(row.pieces),
            prompt_tokens=len(row.prompt_ids),
            completion_tokens=len(row.ids),
            finish_reason=finish[i],
            token_ids=list(row.ids),
            logprobs=row.logprobs if row.params.logprobs is not None else None,
        )
        for i, row in enumerate(rows)
    ]
