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
    """Build a randomly initialised ``LlamaForCausalLM``; save it with ``save_pretrained``."""
    return LlamaForCausalLM(llama_config(config))
