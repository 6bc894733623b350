"""Runner mechanics with tiny step types over commit_query: order, records, cache, failures."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from aifab.core.audit import AuditEvent
from aifab.core.config import StrictConfig
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError
from aifab.core.workspace import get_workspace
from aifab.data import lake
from aifab.data.catalog import commit_query, resolve
from aifab.pipeline import STEPS, PreparedStep, StepContext, StepOutputs, run_pipeline
from aifab.pipeline.tables import PipelineRunRow, StepRunRow


class SqlParams(StrictConfig):
    output: str
    sql: str
    input: str | None = None
    file: str | None = None


def sql_step(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Commit ``sql`` ({input} = the input dataset, {file} = a CSV read) as ``output``."""
    p = ctx.params(SqlParams, params)
    src = ctx.dataset(p.input) if p.input else None
    path = ctx.path(p.file) if p.file else None

    def run() -> StepOutputs:
        sql = p.sql.format(
            input=src.scan_sql() if src else "",
            file=f"read_csv({lake.sql_string(str(path))})" if path else "",
        )
        res = commit_query(
            p.output,
            sql,
            source=f"test:{ctx.step}",
            transform={"kind": "test"},
            parents=[src] if src else [],
        )
        return StepOutputs(datasets=[res.version], details={"created": res.created})

    return PreparedStep(run=run, datasets=[src] if src else [], files=[path] if path else [])


def boom_step(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Fail when run: InvalidInputError by default, a plain bug with ``bug: true``."""

    def run() -> StepOutputs:
        if params.get("interrupt"):
            raise KeyboardInterrupt
        if params.get("bug"):
            raise ValueError("division by zero somewhere")
        raise InvalidInputError("kaput")

    return PreparedStep(run=run)


def artifact_step(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Write a file artifact (its existence is checked before reuse)."""
    target = get_workspace().artifacts / f"{ctx.step}.txt"

    def run() -> StepOutputs:
        target.write_text(str(params.get("text", "")))
        return StepOutputs(artifacts=[target])

    return PreparedStep(run=run, always_run=bool(params.get("always")))


STEPS.register("test.sql", f"{__name__}:sql_step")
STEPS.register("test.boom", f"{__name__}:boom_step")
STEPS.register("test.artifact", f"{__name__}:artifact_step")


def _steps() -> list[dict[str, Any]]:
    return [
        {
            "name": "load",
            "uses": "test.sql",
            "with": {"output": "raw", "file": "data/people.csv", "sql": "SELECT * FROM {file}"},
        },
        {
            "name": "adults",
            "uses": "test.sql",
            "with": {
                "input": "raw",
                "output": "adults",
                "sql": "SELECT * FROM {input} WHERE age >= 18 ORDER BY id",
            },
        },
        {
            "name": "count",
            "uses": "test.sql",
            "with": {
                "input": "adults",
                "output": "summary",
                "sql": "SELECT count(*) AS n FROM {input}",
            },
        },
    ]


def _write(path: Path, steps: list[dict[str, Any]], name: str = "people") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"name": name, "steps": steps}, sort_keys=False))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pipeline file in proj/ with a CSV beside it; the cwd is elsewhere."""
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    (root / "data" / "people.csv").write_text("id,age\n1,30\n2,12\n3,45\n4,17\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return _write(root / "pipeline.yaml", _steps())


def _statuses(result: Any) -> list[tuple[str, str]]:
    return [(s.name, s.status) for s in result.steps]


def test_runs_steps_in_order_and_records_them(project: Path) -> None:
    result = run_pipeline(project)
    assert result.ok
    assert _statuses(result) == [
        ("load", "succeeded"),
        ("adults", "succeeded"),
        ("count", "succeeded"),
    ]
    assert resolve("adults").num_rows == 2
    assert resolve("adults").parents == ["raw@1"]
    with session_scope() as s:
        run = s.get(PipelineRunRow, result.run_id)
        assert run is not None and run.status == "succeeded" and run.finished_at
        rows = s.scalars(select(StepRunRow).order_by(StepRunRow.id)).all()
        events = s.scalars(select(AuditEvent).where(AuditEvent.action == "pipeline.run")).all()
    assert [r.step for r in rows] == ["load", "adults", "count"]
    load, adults = rows[0], rows[1]
    # relative path resolved against the pipeline file, fingerprinted by content
    (fp,) = load.inputs["files"]
    assert fp["path"] == str(project.parent / "data" / "people.csv")
    assert len(fp["sha256"]) == 64 and fp["size"] > 0
    assert load.outputs["datasets"][0]["ref"] == "raw@1"
    assert load.outputs["datasets"][0]["rows"] == 4
    assert adults.inputs["datasets"] == [
        {"ref": "raw@1", "content_hash": resolve("raw@1").content_hash}
    ]
    assert [e.object for e in events] == ["pipeline:people"]


def test_second_run_skips_unchanged_steps_and_reuses_outputs(project: Path) -> None:
    first = run_pipeline(project)
    second = run_pipeline(project)
    assert [s for _, s in _statuses(second)] == ["skipped"] * 3
    assert [s.outputs["datasets"] for s in second.steps] == [
        s.outputs["datasets"] for s in first.steps
    ]
    assert [s.cache_key for s in second.steps] == [s.cache_key for s in first.steps]
    with session_scope() as s:
        skipped = s.scalars(select(StepRunRow).where(StepRunRow.run_id == second.run_id)).all()
    assert all(r.skipped and r.status == "skipped" for r in skipped)


def test_the_same_pipeline_from_another_copy_skips_unchanged_steps(project: Path) -> None:
    """`aifab run examples/...` then `aifab demo` (the installed copy) must not retrain."""
    import shutil

    run_pipeline(project)
    copy = project.parent.parent / "installed-copy"
    shutil.copytree(project.parent, copy)
    again = run_pipeline(copy / "pipeline.yaml")
    assert [s for _, s in _statuses(again)] == ["skipped"] * 3


def test_changed_source_file_reruns_it_and_downstream(project: Path) -> None:
    run_pipeline(project)
    (project.parent / "data" / "people.csv").write_text("id,age\n1,30\n2,12\n3,45\n4,19\n")
    result = run_pipeline(project)
    assert [s for _, s in _statuses(result)] == ["succeeded"] * 3
    assert result.step("load").outputs["datasets"][0]["ref"] == "raw@2"
    assert result.step("adults").inputs["datasets"][0]["ref"] == "raw@2"
    assert resolve("summary").version == 2


def test_changed_params_rerun_only_that_step(project: Path) -> None:
    run_pipeline(project)
    steps = _steps()
    steps[2]["with"]["sql"] = "SELECT count(*) AS n, max(age) AS oldest FROM {input}"
    _write(project, steps)
    result = run_pipeline(project)
    assert _statuses(result) == [("load", "skipped"), ("adults", "skipped"), ("count", "succeeded")]


def test_upstream_output_unchanged_keeps_downstream_skipped(project: Path) -> None:
    run_pipeline(project)
    # adults gets a new spec but produces the same rows: count still sees adults@1
    steps = _steps()
    steps[1]["with"]["sql"] = "SELECT * FROM {input} WHERE age > 17 ORDER BY id"
    _write(project, steps)
    result = run_pipeline(project)
    assert _statuses(result) == [("load", "skipped"), ("adults", "succeeded"), ("count", "skipped")]


def test_force_reruns_everything_and_only_runs_one_step(project: Path) -> None:
    run_pipeline(project)
    result = run_pipeline(project, force=True)
    assert [s for _, s in _statuses(result)] == ["succeeded"] * 3
    assert all(s.outputs["details"] == {"created": False} for s in result.steps)
    assert _statuses(run_pipeline(project, only="adults")) == [("adults", "skipped")]
    assert _statuses(run_pipeline(project, only="adults", force=True)) == [("adults", "succeeded")]
    with pytest.raises(InvalidInputError, match="no step named 'nope'"):
        run_pipeline(project, only="nope")


def test_missing_artifact_reruns_and_always_run_never_skips(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.yaml",
        [
            {"name": "art", "uses": "test.artifact", "with": {"text": "hi"}},
            {"name": "fresh", "uses": "test.artifact", "with": {"always": True}},
        ],
    )
    first = run_pipeline(path)
    assert _statuses(run_pipeline(path)) == [("art", "skipped"), ("fresh", "succeeded")]
    Path(first.steps[0].outputs["artifacts"][0]).unlink()
    assert run_pipeline(path).steps[0].status == "succeeded"


def test_failure_stops_later_steps_and_names_the_step(project: Path, cli: Any) -> None:
    steps = _steps()
    steps.insert(1, {"name": "explode", "uses": "test.boom"})
    _write(project, steps)
    result = run_pipeline(project)
    assert not result.ok and result.status == "failed"
    assert _statuses(result) == [
        ("load", "succeeded"),
        ("explode", "failed"),
        ("adults", "not_run"),
        ("count", "not_run"),
    ]
    assert result.error == f"{project}: step 'explode': kaput"
    with session_scope() as s:
        run = s.get(PipelineRunRow, result.run_id)
        failed = s.scalar(select(StepRunRow).where(StepRunRow.step == "explode"))
    assert run is not None and run.status == "failed" and "explode" in (run.error or "")
    assert failed is not None and failed.status == "failed" and failed.error == "kaput"

    r = cli("run", project)
    assert r.exit_code == 2
    said = r.stderr.strip().splitlines()  # each step's start and end, then the one error line
    assert said[-1] == f"error: {project}: step 'explode': kaput"
    assert [line for line in said if line.startswith("error")] == said[-1:]
    assert "step 2/4 explode: failed in " in r.stderr
    assert "load" in r.stdout and "skipped" in r.stdout


def test_unexpected_exception_fails_with_type(tmp_path: Path, cli: Any) -> None:
    path = _write(tmp_path / "p.yaml", [{"name": "x", "uses": "test.boom", "with": {"bug": True}}])
    r = cli("run", path)
    assert r.exit_code == 1
    assert f"{path}: step 'x': ValueError: division by zero somewhere" in r.stderr


def test_interrupted_run_is_marked_failed(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.yaml", [{"name": "x", "uses": "test.boom", "with": {"interrupt": True}}]
    )
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(path)
    with session_scope() as s:
        run = s.scalar(select(PipelineRunRow))
    assert run is not None and run.status == "failed"
    assert run.error == f"{path}: interrupted (KeyboardInterrupt)"


def test_unknown_step_type_is_named_with_the_file(tmp_path: Path, cli: Any) -> None:
    path = _write(
        tmp_path / "p.yaml",
        [
            {"name": "a", "uses": "test.sql", "with": {"output": "x", "sql": "SELECT 1 AS a"}},
            {"name": "teach", "uses": "trian"},
        ],
    )
    with pytest.raises(
        InvalidInputError,
        match=r"p\.yaml: step 'teach': unknown step type "
        r"'trian' \(known: .*clean",
    ):
        run_pipeline(path)
    with session_scope() as s:
        assert s.scalar(select(PipelineRunRow)) is None  # nothing ran
    r = cli("run", path)
    assert r.exit_code == 2 and "step 'teach': unknown step type 'trian'" in r.stderr


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"name": "a", "uses": "test.sql", "wiht": {}}], "step 'a': wiht: unknown key"),
        (
            [{"name": "a", "uses": "test.sql"}, {"name": "a", "uses": "test.sql"}],
            "steps: step name 'a' is used twice",
        ),
        ([{"name": "bad name!", "uses": "test.sql"}], "step 'bad name!': name: String should"),
        ([], "steps: List should have at least 1 item"),
    ],
)
def test_malformed_pipeline_names_the_key(tmp_path: Path, steps: list[Any], message: str) -> None:
    path = _write(tmp_path / "p.yaml", steps)
    with pytest.raises(InvalidInputError) as err:
        run_pipeline(path)
    assert err.value.message.startswith(f"{path}: ")
    assert message in err.value.message


def test_wrong_step_param_is_named_with_file_and_step(tmp_path: Path, cli: Any) -> None:
    path = _write(
        tmp_path / "p.yaml",
        [{"name": "q", "uses": "test.sql", "with": {"output": "x", "sqll": "SELECT 1"}}],
    )
    r = cli("run", path)
    assert r.exit_code == 2
    assert f"error: {path}: step 'q': with.sql: Field required; with.sqll: unknown key" in r.stderr


def test_missing_input_dataset_fails_the_step(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.yaml",
        [
            {
                "name": "q",
                "uses": "test.sql",
                "with": {"input": "ghost", "output": "x", "sql": "SELECT * FROM {input}"},
            }
        ],
    )
    result = run_pipeline(path)
    assert result.error == f"{path}: step 'q': dataset 'ghost' not found (see 'aifab data list')"


def test_cli_json_and_table(project: Path, cli: Any) -> None:
    r = cli("run", project, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["status"] == "succeeded"
    assert [s["status"] for s in data["steps"]] == ["succeeded"] * 3
    r = cli("run", project)
    assert r.exit_code == 0
    assert "adults@1 (2 rows)" in r.stdout and "skipped" in r.stdout
    r = cli("run", project, "--force", "--only", "count")
    assert r.exit_code == 0 and "summary@1 (1 rows)" in r.stdout


# --- the data-layer steps: parameters, spec files, and what counts as an input -----------------


def _data_project(root: Path, clean_spec: Any = "clean.yaml") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rows.csv").write_text(
        "id,text,score\n1,good stuff,3\n2,bad stuff,9\n2,bad stuff,9\n3,so good,4\n"
    )
    (root / "clean.yaml").write_text("steps:\n  - drop_duplicates: {}\n")
    return _write(
        root / "pipeline.yaml",
        [
            {"name": "ingest", "uses": "ingest", "with": {"source": "rows.csv", "output": "rows"}},
            {
                "name": "clean",
                "uses": "clean",
                "with": {"input": "rows", "output": "rows_clean", "spec": clean_spec},
            },
            {
                "name": "label",
                "uses": "label",
                "with": {
                    "input": "rows_clean",
                    "output": "rows_labeled",
                    "spec": {
                        "key": "id",
                        "functions": [
                            {
                                "name": "good",
                                "label": "pos",
                                "keyword": {"column": "text", "words": ["good"]},
                            },
                            {
                                "name": "bad",
                                "label": "neg",
                                "keyword": {"column": "text", "words": ["bad"]},
                            },
                        ],
                    },
                },
            },
        ],
        name="tiny",
    )


def test_data_steps_run_and_rerun_when_a_spec_file_changes(tmp_path: Path) -> None:
    path = _data_project(tmp_path / "d")
    first = run_pipeline(path)
    assert first.ok, first.error
    assert resolve("rows_clean").num_rows == 3 and resolve("rows_labeled").parents == [
        "rows_clean@1"
    ]
    spec_file = first.step("clean").inputs["files"][0]
    assert spec_file["path"] == str(tmp_path / "d" / "clean.yaml") and spec_file["sha256"]
    assert [s.status for s in run_pipeline(path).steps] == ["skipped"] * 3

    (tmp_path / "d" / "clean.yaml").write_text(
        "steps:\n  - drop_duplicates: {}\n  - filter: {where: score < 9}\n"
    )
    again = run_pipeline(path)
    assert _statuses(again) == [
        ("ingest", "skipped"),
        ("clean", "succeeded"),
        ("label", "succeeded"),
    ]
    assert resolve("rows_labeled").num_rows == 2


def test_human_label_makes_the_label_step_rerun(tmp_path: Path) -> None:
    from aifab.data.label import submit_label

    path = _data_project(tmp_path / "d")
    run_pipeline(path)
    submit_label("rows_labeled", "3", "neg")
    result = run_pipeline(path)
    assert result.step("label").status == "succeeded"
    con = lake.connect()
    v = resolve("rows_labeled")
    assert con.execute(f"SELECT label FROM {v.scan_sql()} WHERE id = 3").fetchall() == [("neg",)]
    assert run_pipeline(path).step("label").status == "skipped"


def test_wrong_key_in_a_spec_file_names_pipeline_step_and_file(tmp_path: Path) -> None:
    path = _data_project(tmp_path / "d")
    (tmp_path / "d" / "clean.yaml").write_text("steps:\n  - filter: {wher: score > 1}\n")
    result = run_pipeline(path)
    assert result.step("clean").status == "failed"
    assert result.error is not None
    assert result.error.startswith(f"{path}: step 'clean': clean.yaml: ")
    assert "steps.0.filter.wher: unknown key" in result.error


def test_wrong_key_in_an_inline_spec_is_named(tmp_path: Path) -> None:
    path = _data_project(tmp_path / "d", clean_spec={"steps": [{"filter": {"wher": "x"}}]})
    result = run_pipeline(path)
    assert result.error is not None
    assert result.error.startswith(f"{path}: step 'clean': with.spec.steps.0.filter.")
    assert "with.spec.steps.0.filter.wher: unknown key" in result.error


def test_output_must_not_overwrite_an_unpinned_input(tmp_path: Path) -> None:
    path = _data_project(tmp_path / "d")
    steps = yaml.safe_load(path.read_text())["steps"]
    steps[1]["with"]["output"] = "rows"
    _write(path, steps)
    result = run_pipeline(path)
    assert result.error is not None
    assert "step 'clean': with: output 'rows' is the input dataset" in result.error


def test_failing_suite_fails_the_validate_step(tmp_path: Path) -> None:
    path = _data_project(tmp_path / "d")
    steps = yaml.safe_load(path.read_text())["steps"][:1] + [
        {
            "name": "check",
            "uses": "validate",
            "with": {
                "input": "rows",
                "output": "rows_ok",
                "spec": {"expectations": [{"row_count": {"min": 100}}]},
            },
        },
    ]
    _write(path, steps)
    result = run_pipeline(path)
    assert result.step("check").status == "failed"
    assert result.error is not None
    assert result.error.startswith(f"{path}: step 'check': validation of rows@1 failed: ")
