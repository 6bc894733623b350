"""Layer 2, train: recipes, shared loop pieces, exact resume, data parallelism, model lineage.

Recipes are one plain file each with ``Config`` and ``main(config) -> summary``. Importing
this package is cheap: torch loads only when a recipe or a torch module is imported.
Service functions: ``build_job_spec`` (validate a recipe config before it is submitted),
``model_lineage`` (model version -> run -> dataset versions), ``run_recipe``.
"""

from __future__ import annotations

from aifab.train.lineage import model_lineage
from aifab.train.recipes import RECIPE_CONFIGS, run_recipe
from aifab.train.submit import build_job_spec, validate_recipe_config

__all__ = [
    "RECIPE_CONFIGS",
    "build_job_spec",
    "model_lineage",
    "run_recipe",
    "validate_recipe_config",
]
