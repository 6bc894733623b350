"""Layer 3, prompts: versioned prompt templates (sandboxed Jinja2), chat models, evaluation.

Every public service is importable from here (``from aifab.prompts import render_prompt``).
"""

from __future__ import annotations

from aifab.prompts.chat import ChatModel, ChatResult, UpstreamError, UpstreamTimeout, chat_model
from aifab.prompts.evaluate import eval_prompt, list_evals
from aifab.prompts.registry import (
    create_prompt,
    get_prompt,
    list_prompts,
    parse_prompt_ref,
    render_prompt,
    set_prompt_alias,
)

__all__ = [
    "ChatModel",
    "ChatResult",
    "UpstreamError",
    "UpstreamTimeout",
    "chat_model",
    "create_prompt",
    "eval_prompt",
    "get_prompt",
    "list_evals",
    "list_prompts",
    "parse_prompt_ref",
    "render_prompt",
    "set_prompt_alias",
]
