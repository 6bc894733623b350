"""Entry point of one replica that runs a recipe: ``python -m aifab.jobs.replica``.

The executor passes the recipe name and its config in the environment (``AIFAB_JOB_RECIPE``, and
``AIFAB_JOB_CONFIG`` naming a JSON file or ``AIFAB_JOB_CONFIG_JSON`` holding it inline, for pods
that share no filesystem with the submitter) next to the distributed variables.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

from aifab.core.atomic import atomic_write_text
from aifab.jobs.recipes import RECIPES


def main() -> None:
    """Run the recipe; with ``AIFAB_JOB_LOG_KEY`` (pods) its output is also shipped to the store."""
    key = os.environ.get("AIFAB_JOB_LOG_KEY")
    uri = os.environ.get("AIFAB_STORAGE_URI")
    if not (key and uri):
        _run()
        return
    from aifab.core.settings import get_settings
    from aifab.core.storage import store_at
    from aifab.jobs.log_ship import shipped_output

    key = key.replace("{rank}", os.environ.get("RANK", "0"))
    with shipped_output(key, get_settings().resolved_home / key, store_at(uri)):
        try:
            _run()
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()  # into the shipped log, before it is closed
            raise SystemExit(1) from None


def _run() -> None:
    """Load the recipe by name, call it with its config, and keep rank 0's returned summary."""
    name = os.environ["AIFAB_JOB_RECIPE"]
    config_path = os.environ.get("AIFAB_JOB_CONFIG")
    if config_path:
        config = json.loads(Path(config_path).read_text())
    else:
        config = json.loads(os.environ.get("AIFAB_JOB_CONFIG_JSON") or "{}")
    result = RECIPES.get(name)(config)
    target = os.environ.get("AIFAB_JOB_RESULT")
    if target and os.environ.get("RANK", "0") == "0" and isinstance(result, dict):
        atomic_write_text(Path(target), json.dumps(result, default=str))
        _mirror(Path(target))


def _mirror(path: Path) -> None:
    """Put the result on the object store when there is one (the submitter reads it there)."""
    from aifab.core.settings import get_settings
    from aifab.core.storage import mirror_file

    try:
        key = path.resolve().relative_to(get_settings().resolved_home).as_posix()
    except ValueError:
        return
    mirror_file(key)


if __name__ == "__main__":
    main()
