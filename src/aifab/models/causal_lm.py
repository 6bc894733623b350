"""The ``causal-lm`` zoo model: a Llama-style decoder built from a config (no model hub)."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from aifab.models.zoo import CausalLMConfig


def llama_config(config: CausalLMConfig) -> LlamaConfig:
    """Translate the zoo config into a transformers ``LlamaConfig``."""
    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=config.tie_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def build_causal_lm(config: CausalLMConfig) -> LlamaForCausalLM:
    """Build a randomly initialised ``LlamaForCausalLM``; save it with ``save_pretrained``.

    With ``copy_head`` it is a :class:`~aifab.models.copy_lm.CopyLlamaForCausalLM`.
    """
    if config.copy_head:
        from aifab.models.copy_lm import build_copy_lm

        return build_copy_lm(llama_config(config))
    return LlamaForCausalLM(llama_config(config))
