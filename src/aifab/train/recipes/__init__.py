"""Training recipes by name: each is a plain file ``<name>.py`` with ``Config`` and ``main``.

``RECIPE_CONFIGS`` lets :mod:`aifab.train.submit` validate a config before a job starts, without
importing torch. The job scheduler reaches ``main`` through ``aifab.jobs.recipes.RECIPES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aifab.core.registry import Registry

#: Recipe name -> ``"module:Config"`` (the recipe's typed config).
RECIPE_CONFIGS = Registry(
    "recipe",
    {
        "classify": "aifab.train.recipes.classify:Config",
        "contrastive": "aifab.train.recipes.contrastive:Config",
        "custom": "aifab.train.recipes.custom:Config",
        "kge": "aifab.train.recipes.kge:Config",
        "lm": "aifab.train.recipes.lm:Config",
        "lora": "aifab.train.recipes.lora:Config",
    },
)

#: Recipe name -> ``"module:main"``.
RECIPE_MAINS = Registry(
    "recipe",
    {
        "classify": "aifab.train.recipes.classify:main",
        "contrastive": "aifab.train.recipes.contrastive:main",
        "custom": "aifab.train.recipes.custom:main",
        "kge": "aifab.train.recipes.kge:main",
        "lm": "aifab.train.recipes.lm:main",
        "lora": "aifab.train.recipes.lora:main",
    },
)


def run_recipe(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """Run recipe ``name`` in this process and return its summary."""
    result: dict[str, Any] = RECIPE_MAINS.get(name)(config)
    return result
