"""Where the shipped example pipelines are: ``examples/`` of a checkout, or the wheel's copy.

The repository's top-level ``examples/`` is the one copy in git; building the wheel copies it
into the package as ``aifab/examples`` (see setup.py), so an installed aifab finds it too.
"""

from __future__ import annotations

from pathlib import Path

import aifab
from aifab.core.errors import NotFoundError

_PACKAGE = Path(aifab.__file__).resolve().parent


def examples_dir() -> Path:
    """The directory holding the example pipelines.

    Returns:
        ``examples/`` in the current directory when it is a checkout's (what its user sees and
        edits, even when aifab was installed from a wheel), else ``examples/`` beside ``src/``
        of the checkout aifab runs from, else ``aifab/examples`` inside an installed wheel.

    Raises:
        NotFoundError: neither exists (an install made from a bare copy of ``src/``).
    """
    for candidate in (
        Path.cwd() / "examples",
        _PACKAGE.parents[1] / "examples",
        _PACKAGE / "examples",
    ):
        # A checkout's examples/ has quickstart/ in it; a stray examples/ beside site-packages
        # (parents[1] of an installed package is lib/pythonX.Y) does not.
        if (candidate / "quickstart" / "pipeline.yaml").is_file():
            return candidate
    raise NotFoundError(
        f"the example pipelines are neither in {_PACKAGE.parents[1] / 'examples'} (a source "
        f"checkout) nor in {_PACKAGE / 'examples'} (a wheel): reinstall aifab from its wheel"
    )


def example_pipeline(name: str) -> Path:
    """The pipeline file of one shipped example, e.g. ``example_pipeline("quickstart")``.

    Raises:
        NotFoundError: no example of that name has a ``pipeline.yaml``; the message lists those
            that do.
    """
    root = examples_dir()
    path = root / name / "pipeline.yaml"
    if not name or "/" in name or "\\" in name or not path.is_file():
        known = sorted(p.parent.name for p in root.glob("*/pipeline.yaml"))
        raise NotFoundError(f"no example pipeline {name!r} in {root}; known: {', '.join(known)}")
    return path
