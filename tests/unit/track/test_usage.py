"""Forward lineage: the runs that read a dataset version, and the model versions they logged."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.track import model_versions_of_runs, register_model, runs_reading, start_run


def _dataset(ref: str, digest: str) -> dict[str, str]:
    return {"name": ref.split("@")[0], "ref": ref, "digest": digest}


def test_runs_reading_finds_runs_by_a_versions_full_content_hash(
    workspace: Path, tmp_path: Path
) -> None:
    a, b, other = "a1" * 32, "b2" * 32, "c3" * 32  # 64-char hashes; MLflow keeps 36 chars
    with start_run("t-usage", system_metrics=False, datasets=[_dataset("u@1", a)]) as first:
        pass
    with start_run(
        "t-usage", system_metrics=False, datasets=[_dataset("u@1", a), _dataset("w@2", b)]
    ) as second:
        pass
    with start_run("t-usage", system_metrics=False, datasets=[_dataset("x@1", other)]):
        pass

    found = runs_reading([a])
    assert [r["id"] for r in found] == [second.id, first.id]  # newest first
    assert {d["ref"] for d in found[0]["datasets"]} == {"u@1", "w@2"}
    assert [r["id"] for r in runs_reading([b])] == [second.id]
    assert runs_reading(["f" * 64]) == [] and runs_reading([]) == []
    assert len(runs_reading([a, b], limit=1)) == 1


def test_model_versions_of_runs(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)
    (tmp_path / "aifab-model.json").write_text("{}")
    ids = []
    for _ in range(2):
        with start_run("t-usage-models", system_metrics=False) as run:
            run.log_artifacts(tmp_path, "model")
        ids.append(run.id)
    register_model(ids[0], "model", "usage-m")
    register_model(ids[1], "model", "usage-m")
    found = model_versions_of_runs([ids[1]])
    assert [(m["name"], m["version"], m["run_id"]) for m in found] == [("usage-m", 2, ids[1])]
    assert {m["version"] for m in model_versions_of_runs(ids)} == {1, 2}
    assert model_versions_of_runs([]) == []


@pytest.mark.parametrize("bad", ["x' OR '1'='1", "a b", "abc)"])
def test_filter_values_are_checked_not_pasted(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="only letters"):
        runs_reading([bad])
    with pytest.raises(InvalidInputError, match="only letters"):
        model_versions_of_runs([bad])
