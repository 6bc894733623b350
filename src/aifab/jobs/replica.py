"""Entry point of one replica that runs a recipe: ``python -m aifab.jobs.replica``.

The executor passes the recipe name and a JSON config file in the environment
(``AIFAB_JOB_RECIPE``, ``AIFAB_JOB_CONFIG``) next to the distributed variables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from aifab.jobs.recipes import RECIPES


def main() -> None:
    """Load the recipe by name and call it with its config."""
    name = os.environ["AIFAB_JOB_RECIPE"]
    config_path = os.environ.get("AIFAB_JOB_CONFIG")
    config = json.loads(Path(config_path).read_text()) if config_path else {}
    RECIPES.get(name)(config)


if __name__ == "__main__":
    main()
