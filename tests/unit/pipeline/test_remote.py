"""A pipeline as a job (``aifab run FILE --executor X``): sent self-contained, run by a replica.

The ``local`` executor runs the replica as another process, in a working directory of its own
(the Ray worker test in tests/team runs it on a node that cannot see this workspace at all).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import ingest
from aifab.data.catalog import resolve
from aifab.pipeline import inline_pipeline

RAW = "id,age,plan\n1,34,basic\n2,,PRO \n2,,PRO \n3,x,basic\n4,51,pro\n"
CLEAN = "steps:\n  - drop_duplicates: {}\n  - normalize_text: {columns: [plan], lower: true}\n"
PIPELINE = """name: Remote.Run
steps:
  - {name: clean, uses: clean, with: {input: raw, output: raw_clean, spec: specs/clean.yaml}}
  - name: features
    uses: features
    with:
      input: raw_clean
      output: raw_features
      spec: {features: [{transform: onehot, column: plan}], passthrough: [id]}
"""


def _files(tmp_path: Path, pipeline: str = PIPELINE) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "clean.yaml").write_text(CLEAN)
    path = tmp_path / "pipeline.yaml"
    path.write_text(pipeline)
    return path


def test_spec_files_are_inlined_so_the_pipeline_needs_no_file_beside_it(tmp_path: Path) -> None:
    spec = inline_pipeline(_files(tmp_path))
    clean = spec.steps[0].with_["spec"]
    assert clean == {
        "steps": [{"drop_duplicates": {}}, {"normalize_text": {"columns": ["plan"], "lower": True}}]
    }
    assert spec.steps[1].with_["spec"]["passthrough"] == ["id"]


def test_a_step_reading_a_local_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    local = "name: p\nsteps:\n  - {name: i, uses: ingest, with: {source: d.csv, output: raw}}\n"
    with pytest.raises(InvalidInputError, match="step 'i': source 'd.csv' is a file on this"):
        inline_pipeline(_files(tmp_path, local))
    other = tmp_path / "b"
    other.mkdir()
    missing = PIPELINE.replace("specs/clean.yaml", "specs/nope.yaml")
    with pytest.raises(InvalidInputError, match="nope.yaml: file not found"):
        inline_pipeline(_files(other, missing))


def test_aifab_run_with_an_executor_runs_the_pipeline_as_a_job(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "raw.csv").write_text(RAW)
    raw = ingest("raw", str(tmp_path / "raw.csv")).version
    path = _files(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the spec file's relative path must not matter to the job
    got = cli("run", path, "--executor", "local")
    assert got.exit_code == 0, got.stderr
    assert "job_" in got.stdout and "raw_features@1" in got.stdout
    clean, feats = resolve("raw_clean"), resolve("raw_features")
    assert clean.parents == [raw.ref] and feats.parents == [clean.ref]
    assert clean.num_rows == 4  # the duplicate is gone; the failed cast was never asked for
    # Unchanged inputs: the job's run skips both steps, and the CLI says so.
    again = cli("run", path, "--executor", "local", "--json")
    assert again.exit_code == 0 and again.stdout.count('"skipped"') == 2
    assert os.listdir(elsewhere) == []


def test_a_failing_pipeline_job_exits_non_zero_with_one_line(cli, tmp_path: Path) -> None:
    got = cli("run", _files(tmp_path), "--executor", "local")  # dataset "raw" does not exist
    assert got.exit_code != 0
    assert got.stderr.strip().count("\n") == 0 and "pipeline job job_" in got.stderr
    assert "step 'clean': dataset 'raw' not found" in got.stderr  # the replica's own error
    assert cli(
        "run", tmp_path / "pipeline.yaml", "--executor", "local", "--only", "clean"
    ).exit_code


def test_the_pipeline_engine_applies_to_data_specs_that_name_none(tmp_path: Path) -> None:
    """``engine:`` of the pipeline reaches each data step's spec; a step's own wins."""
    from aifab.pipeline import StepContext
    from aifab.pipeline.spec import PipelineSpec
    from aifab.pipeline.steps import _spec

    ctx = StepContext("p", "s", tmp_path, engine="ray")
    steps = {"steps": [{"drop_duplicates": {}}]}
    assert _spec(ctx, "aifab.data.clean:CleanSpec", steps)[0].engine == "ray"
    own = {**steps, "engine": "duckdb"}
    assert _spec(ctx, "aifab.data.clean:CleanSpec", own)[0].engine == "duckdb"
    (tmp_path / "suite.yaml").write_text("expectations: [{not_null: {columns: [a]}}]\n")
    assert _spec(ctx, "aifab.data.validate:ExpectationSuite", "suite.yaml")[0].engine == "ray"
    split = _spec(ctx, "aifab.data.splits:SplitSpec", {"seed": 3})[0]
    assert split.engine == "ray" and "engine" not in split.model_dump()
    spec = PipelineSpec.model_validate(
        {"name": "p", "engine": "ray", "steps": [{"name": "a", "uses": "clean"}]}
    )
    assert spec.engine == "ray"
    with pytest.raises(ValueError, match="engine"):
        PipelineSpec.model_validate(
            {"name": "p", "engine": "spark", "steps": [{"name": "a", "uses": "clean"}]}
        )


def test_the_shipped_ray_pipeline_can_be_sent_to_another_node() -> None:
    """examples/quickstart/data-on-ray.yaml (README): self-contained once inlined, on Ray."""
    path = Path(__file__).resolve().parents[3] / "examples" / "quickstart" / "data-on-ray.yaml"
    spec = inline_pipeline(path)
    assert spec.engine == "ray"
    assert all(isinstance(s.with_["spec"], dict) for s in spec.steps)
