"""Recipes that jobs can run, by name: ``jobs`` never imports training code directly."""

from __future__ import annotations

from aifab.core.registry import Registry

#: Recipe name -> ``"module:function"``; the function takes the recipe config (a dict).
#: Later layers (``aifab.train``, ``aifab.pipeline``) add their recipes here by name.
RECIPES = Registry(
    "recipe",
    {
        "noop": "aifab.jobs.builtin:noop",
        "sleep": "aifab.jobs.builtin:sleep",
        "echo": "aifab.jobs.builtin:echo",
        "classify": "aifab.train.recipes.classify:main",
        "custom": "aifab.train.recipes.custom:main",
        "lm": "aifab.train.recipes.lm:main",
        "lora": "aifab.train.recipes.lora:main",
        "kge": "aifab.train.recipes.kge:main",
        "contrastive": "aifab.train.recipes.contrastive:main",
        "pipeline": "aifab.pipeline.remote:main",
    },
)
