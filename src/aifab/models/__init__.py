"""Layer 1, models: the model zoo, tokenizers and model directories (weights + sidecar).

Names are resolved lazily, so importing ``aifab.models`` (or listing the zoo) imports no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aifab.models.checkpoint import load_model, read_sidecar, save_model
    from aifab.models.tokenizer import load_tokenizer, train_bpe_tokenizer
    from aifab.models.zoo import ZOO, build_model, list_zoo, model_config

#: Public name -> defining module.
_EXPORTS = {
    "ZOO": "aifab.models.zoo",
    "build_model": "aifab.models.zoo",
    "list_zoo": "aifab.models.zoo",
    "model_config": "aifab.models.zoo",
    "save_model": "aifab.models.checkpoint",
    "load_model": "aifab.models.checkpoint",
    "read_sidecar": "aifab.models.checkpoint",
    "train_bpe_tokenizer": "aifab.models.tokenizer",
    "load_tokenizer": "aifab.models.tokenizer",
}

__all__ = [
    "ZOO",
    "build_model",
    "list_zoo",
    "load_model",
    "load_tokenizer",
    "model_config",
    "read_sidecar",
    "save_model",
    "train_bpe_tokenizer",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aifab.models' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
