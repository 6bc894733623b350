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
    with pytest.raises(NotFoundError, match=r"known: agents, kg, llm, multimodal, quickstart, rag"):
        example_pipeline(name)


def test_the_current_directorys_checkout_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `aifab demo` typed in a checkout runs that checkout's examples, even with aifab installed
    # from a wheel (or from another checkout).
    (tmp_path / "examples" / "quickstart").mkdir(parents=True)
    (tmp_path / "examples" / "quickstart" / "pipeline.yaml").write_text("name: quickstart\n")
    monkeypatch.chdir(tmp_path)
    assert examples_dir() == tmp_path / "examples"


def test_a_directory_without_a_checkout_uses_aifabs_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "examples").mkdir()  # an unrelated examples/ folder
    monkeypatch.chdir(tmp_path)
    assert examples_dir() == ROOT / "examples"
