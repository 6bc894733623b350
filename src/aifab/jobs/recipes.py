"""Recipes that jobs can run, by name: ``jobs`` never imports training code directly."""

from __future__ import annotations

from aifab.core.registry import Registry

#: Recipe name -> ``"module:function"``; the function takes the recipe config (a dict).
#: Later layers (``aifab.train``) add their recipes here by name.
RECIPES = Registry(
    "recipe",
    {
        "noop": "aifab.jobs.builtin:noop",
        "sleep": "aifab.jobs.builtin:sleep",
    },
)
