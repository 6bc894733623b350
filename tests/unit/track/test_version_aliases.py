"""Listed versions carry their aliases (MLflow's version search leaves them out)."""

from __future__ import annotations

from pathlib import Path

from aifab.track import list_versions, register_model, set_alias, start_run


def test_list_versions_names_each_versions_aliases(tmp_path: Path) -> None:
    weights = tmp_path / "weights.txt"
    weights.write_text("placeholder")
    with start_run("t-version-aliases", system_metrics=False) as run:
        run.log_artifact(weights, "model")
    for _ in range(3):
        register_model(run.id, "model", "aliased")
    set_alias("aliased", "champion", 1)
    set_alias("aliased", "challenger", 3)
    set_alias("aliased", "stable", 1)
    got = {v["version"]: v["aliases"] for v in list_versions("aliased")}
    assert got == {3: ["challenger"], 2: [], 1: ["champion", "stable"]}
    set_alias("aliased", "champion", 2)
    got = {v["version"]: v["aliases"] for v in list_versions("aliased")}
    assert got == {3: ["challenger"], 2: ["champion"], 1: ["stable"]}
