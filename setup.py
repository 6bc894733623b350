"""Build hook: the wheel carries the repository's top-level ``examples/`` as ``aifab/examples``.

``examples/`` stays the one copy in git (what a user of the checkout sees); building the wheel
copies it into the package so ``aifab demo`` works from an installed wheel
(``aifab.examples_dir`` finds either). Everything else is configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

EXAMPLES = Path(__file__).resolve().parent / "examples"


class BuildPyWithExamples(build_py):
    """``build_py`` that also copies ``examples/`` into the built ``aifab`` package."""

    def run(self) -> None:
        """Build the packages, then add the examples beside them."""
        super().run()
        if not EXAMPLES.is_dir():  # an sdist made without MANIFEST.in's graft
            raise FileNotFoundError(f"{EXAMPLES} is missing: the wheel must ship the examples")
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
        target = Path(self.build_lib) / "aifab" / "examples"
        shutil.copytree(EXAMPLES, target, ignore=skip, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithExamples})
