from pathlib import Path

import pytest

from aifab.core.errors import NotFoundError
from aifab.pipeline import example_pipeline, examples_dir

ROOT = Path(__file__).resolve().parents[3]


def test_a_checkout_uses_its_own_examples() -> None:
    # The copy a checkout's user edits, not a stale one inside a built package.
    assert examples_dir() == ROOT / "examples"
    assert example_pipeline("quickstart") == ROOT / "examples" / "quickstart" / "pipeline.yaml"


@pytest.mark.parametrize("name", ["nope", "", "../quickstart", "drift"])
def test_an_unknown_example_names_the_known_ones(name: str) -> None:
    with pytest.raises(NotFoundError, match=r"known: agents, kg, llm, quickstart, rag"):
        example_pipeline(name)
