"""A Llama causal LM with a copy (pointer-generator) head, for tiny models that must copy.

A small decoder trained for minutes on a CPU never grows the induction head that copies an
unseen value (a country code, an email) from the request into a tool call. This model adds a
pointer over the context instead (See et al. 2017, "Get To The Point"), so copying is built in.

Alignment. At position ``t`` the model predicts ``x_{t+1}``. It scores every earlier position
``s <= t`` (padding masked) with::

    q_t = W_q [h_t ; e(x_t)]        k_s = W_k [h_s ; e(x_{s-1})]
    a_t = softmax_s(q_t . k_s / sqrt(d))

and pointing at ``s`` means "emit the token AT s", ``x_s``. Because the key holds the embedding
of the token *before* ``s``, "I just wrote ``x_t``; continue with what followed ``x_t`` in the
request" is a bilinear match ``e(x_t) . e(x_{s-1})``: a multi-token value is copied one token
after the other without an induction head. ``h_s`` and ``h_t`` choose where a value starts.
``e(x_{-1})`` (and the one after padding) is a zero vector.

Mixture. A gate ``g_t = sigmoid(w . h_t + b)`` mixes the generator and the pointer::

    p(w) = g_t softmax(lm_head h_t)(w) + (1 - g_t) sum_{s<=t} a_{t,s} [x_s = w]

and ``logits = log p`` (float32). ``softmax(log p) == p``, so Hugging Face's loss, sampling,
logit bias, penalties and constrained decoding all work on these logits unchanged.

KV cache. Keys and token ids of the context live in :class:`CopyCache`, a ``DynamicCache``
whose ``batch_select_indices``/``reorder_cache``/``crop`` also cut them; the model creates one
when ``use_cache`` is on and none (or an empty plain cache) is passed.

Importing this module registers the config and model with ``AutoConfig`` and
``AutoModelForCausalLM`` (model type :data:`MODEL_TYPE`), so ``from_pretrained`` finds it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
)
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "aifab-copy-llama"
#: The copy head's modules: the LoRA recipe trains them fully (``modules_to_save``).
COPY_MODULES = ("copy_query", "copy_key", "copy_gate")
#: Floor of the pointer's probability before the log (a token absent from the context).
_FLOOR = 1e-30


class CopyLlamaConfig(LlamaConfig):
    """``LlamaConfig`` of a :class:`CopyLlamaForCausalLM` (same fields, its own model type)."""

    model_type = MODEL_TYPE


class CopyCache(DynamicCache):
    """A ``DynamicCache`` that also keeps the copy head's keys, token ids and padding mask."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.copy_keys: torch.Tensor | None = None  # (batch, seen, hidden)
        self.copy_ids: torch.Tensor | None = None  # (batch, seen)
        self.copy_mask: torch.Tensor | None = None  # (batch, seen), 1 = a real token

    def _each(self, fn: Any) -> None:
        for name in ("copy_keys", "copy_ids", "copy_mask"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, fn(value))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices`` (the attention cache and the copy state)."""
        super().batch_select_indices(indices)
        self._each(lambda t: t[indices.to(t.device)])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Reorder the batch for beam search (the attention cache and the copy state)."""
        super().reorder_cache(beam_idx)
        self._each(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions (negative: drop that many from the end)."""
        super().crop(max_length)
        seen = self.copy_ids.shape[1] if self.copy_ids is not None else 0
        keep = max_length if max_length >= 0 else seen + max_length
        self._each(lambda t: t[:, :keep])


class CopyLlamaForCausalLM(LlamaForCausalLM):
    """``LlamaForCausalLM`` whose next-token distribution mixes in a pointer over the context."""

    config_class = CopyLlamaConfig
    #: Trained in full by the lora recipe (``modules_to_save``), merged back with the adapters.
    copy_modules = COPY_MODULES

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__(config)
        width = config.hidden_size
        self.copy_query = nn.Linear(2 * width, width, bias=False)
        self.copy_key = nn.Linear(2 * width, width, bias=False)
        self.copy_gate = nn.Linear(width, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        """The forward pass of ``LlamaForCausalLM``, with ``logits = log p`` of the mixture."""
        if input_ids is None:
            raise ValueError("the copy head copies token ids: pass input_ids, not inputs_embeds")
        cache = kwargs.pop("past_key_values", cache)
        if use_cache is None:
            use_cache = bool(self.config.use_cache) and not self.training
        if use_cache and not isinstance(cache, CopyCache):
            if cache is not None and cache.get_seq_length() > 0:
                raise ValueError("the copy head needs its own CopyCache, not a filled plain cache")
            cache = CopyCache(config=self.config)
        past = cache.copy_ids if isinstance(cache, CopyCache) else None
        past_mask = cache.copy_mask if isinstance(cache, CopyCache) else None
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = out.last_hidden_state
        batch, n = input_ids.shape
        seen = 0 if past is None else past.shape[1]
        mask_new = (
            torch.ones_like(input_ids)
            if attention_mask is None
            else attention_mask[:, -n:].to(input_ids.dtype)
        )
        ids_all = input_ids if past is None else torch.cat([past, input_ids], 1)
        mask_all = mask_new if past_mask is None else torch.cat([past_mask, mask_new], 1)
        keys = self._keys(hidden, ids_all, mask_all, seen, cache)
        if isinstance(cache, CopyCache):
            cache.copy_ids, cache.copy_mask = ids_all, mask_all
        logits = self._mixture(hidden, input_ids, ids_all, mask_all, keys, seen, logits_to_keep)
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs
            )
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)

    def _keys(
        self,
        hidden: torch.Tensor,
        ids_all: torch.Tensor,
        mask_all: torch.Tensor,
        seen: int,
        cache: Any,
    ) -> torch.Tensor:
        """Keys ``W_k [h_s ; e(x_{s-1})]`` of every position so far (cached ones reused)."""
        n = hidden.shape[1]
        # One leading (pad, 0) column: position s reads the token before it at index s.
        ids_prev = nn.functional.pad(ids_all, (1, 0))[:, seen : seen + n]
        mask_prev = nn.functional.pad(mask_all, (1, 0))[:, seen : seen + n]
        e_prev = self.model.embed_tokens(ids_prev) * mask_prev.unsqueeze(-1).to(hidden.dtype)
        new = self.copy_key(torch.cat([hidden, e_prev], -1))
        old = cache.copy_keys if isinstance(cache, CopyCache) else None
        keys = new if old is None else torch.cat([old, new], 1)
        if isinstance(cache, CopyCache):
            cache.copy_keys = keys
        return keys

    def _mixture(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        ids_all: torch.Tensor,
        mask_all: torch.Tensor,
        keys: torch.Tensor,
        seen: int,
        logits_to_keep: int | torch.Tensor,
    ) -> torch.Tensor:
        """``log(g p_gen + (1 - g) p_copy)`` at the positions ``logits_to_keep`` selects."""
        n = hidden.shape[1]
        where = torch.arange(n, device=hidden.device)
        where = (
            where[-logits_to_keep:] if isinstance(logits_to_keep, int) else where[logits_to_keep]
        )
        h = hidden[:, where]
        query = self.copy_query(torch.cat([h, self.model.embed_tokens(input_ids[:, where])], -1))
        scores = (query @ keys.transpose(1, 2)).float() / math.sqrt(keys.shape[-1])
        positions = torch.arange(ids_all.shape[1], device=hidden.device)
        allowed = (positions[None, :] <= (seen + where)[:, None])[None] & mask_all[:, None].bool()
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        attention = torch.softmax(scores, -1)
        vocab = self.config.vocab_size
        index = ids_all[:, None, :].expand(-1, h.shape[1], -1)
        p_copy = attention.new_zeros(h.shape[0], h.shape[1], vocab).scatter_add_(
            2, index, attention
        )
        gen = torch.log_softmax(self.lm_head(h).float(), -1)
        gate = self.copy_gate(h).float()
        return torch.logaddexp(
            nn.functional.logsigmoid(gate) + gen,
            nn.functional.logsigmoid(-gate) + torch.log(p_copy.clamp_min(_FLOOR)),
        )


def build_copy_lm(config: LlamaConfig) -> CopyLlamaForCausalLM:
    """A randomly initialised :class:`CopyLlamaForCausalLM` with the fields of ``config``."""
    fields = {k: v for k, v in config.to_dict().items() if k not in ("model_type", "architectures")}
    return CopyLlamaForCausalLM(CopyLlamaConfig(**fields))


AutoConfig.register(MODEL_TYPE, CopyLlamaConfig, exist_ok=True)
AutoModelForCausalLM.register(CopyLlamaConfig, CopyLlamaForCausalLM, exist_ok=True)
