"""``aifab run`` and ``aifab demo``: execute pipeline YAML files and show what they made."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from aifab.cli.output import JSON_HELP, emit, error_line, print_json, print_table

if TYPE_CHECKING:
    from aifab.pipeline import RunResult

_FORCE_HELP = "Run every step, even those whose inputs are unchanged."
_ONLY_HELP = "Run just this step (it reads the latest versions of its inputs)."
_EXECUTOR_HELP = (
    "Run the pipeline as a job on this executor (ray, volcano, local) and wait for it: a node "
    "that shares only the DB and the object store; spec files are sent inline."
)
_NEXT_COMMANDS = [
    "aifab data list",
    "aifab data lineage {features}",
    "aifab data quarantine {quarantined}",
    "aifab data head {features}",
    "aifab models lineage churn@champion",
    "aifab runs list",
    "aifab run {pipeline} --force",
]


def register(app: typer.Typer) -> None:
    """Add the pipeline commands to the root app."""

    @app.command("run")
    def run(
        pipeline: Path = typer.Argument(..., help="Pipeline YAML file."),
        force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
        only: str | None = typer.Option(None, "--only", help=_ONLY_HELP),
        executor: str | None = typer.Option(None, "--executor", help=_EXECUTOR_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Run a pipeline's steps in order, skipping those whose inputs have not changed."""
        from aifab.pipeline import run_pipeline

        _check_example_path(pipeline)
        if executor is not None:
            with _say_interrupted():
                _submit(pipeline, executor, force, only, as_json)
            return
        with _say_interrupted():
            result = run_pipeline(pipeline, force=force, only=only, say=_say)
        if as_json:
            print_json(result.to_dict())
        else:
            _show_run(result, f"pipeline {result.pipeline} ({result.run_id})")
        _exit_on_failure(result)

    @app.command("demo")
    def demo(
        force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Run the quickstart pipeline in this workspace and show what it made.

        It ingests examples/quickstart's customers file, cleans, validates, labels, splits and
        featurizes it, trains the churn classifier, registers it as churn@champion and deploys
        it as `churn`, then prints a client key and a curl to try it. The pipeline is the one in
        ./examples when this directory is a checkout, else the copy installed with aifab. Steps
        whose inputs did not change are skipped, so running it again makes nothing new (only
        new keys); --force runs every step.
        """
        from aifab.pipeline import run_pipeline

        path = _quickstart()
        with _say_interrupted():
            result = run_pipeline(path, force=force, say=_say)
        serving = _demo_serving(result) if result.ok else None
        if as_json:
            quarantine = _quarantine_counts(result)
            print_json({**result.to_dict(), "quarantine": quarantine, "serving": serving})
        else:
            _show_demo(result, path)
            if serving is not None:
                _show_serving(serving)
        _exit_on_failure(result)


def _say(line: str) -> None:
    """A step's start, end and progress, on stderr: stdout stays the result (--json too)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@contextmanager
def _say_interrupted() -> Iterator[None]:
    """On Ctrl-C, say what the run cancelled on its way out ("interrupted: cancelled job ...").

    click turns a KeyboardInterrupt into a silent exit 130, so the message is printed here.
    """
    try:
        yield
    except KeyboardInterrupt as exc:
        error_line(f"interrupted: {exc}" if str(exc) else "interrupted")
        raise typer.Exit(130) from None


def _quickstart() -> Path:
    """The shipped quickstart pipeline (a checkout's examples/, else the wheel's copy)."""
    from aifab.pipeline.examples import example_pipeline

    return example_pipeline("quickstart")


def _check_example_path(pipeline: Path) -> None:
    """A README command (``aifab run examples/...``) typed outside a checkout names the copy."""
    if pipeline.exists() or pipeline.parts[:1] != ("examples",):
        return
    from aifab.core.errors import NotFoundError
    from aifab.pipeline.examples import examples_dir

    shipped = examples_dir().joinpath(*pipeline.parts[1:])
    hint = f"; the installed copy is: aifab run {shipped}" if shipped.is_file() else ""
    raise NotFoundError(f"{pipeline}: file not found in {Path.cwd()}{hint}")


def _exit_on_failure(result: RunResult) -> None:
    if result.ok:
        return
    if os.environ.get("AIFAB_DEBUG") == "1" and result.exception is not None:
        raise result.exception
    sys.stdout.flush()  # the step table first, then the error line
    error_line(result.error or f"pipeline {result.pipeline!r} failed")
    raise typer.Exit(result.exit_code or 1)


def _outputs_text(outputs: dict[str, Any]) -> str:
    """One cell saying what a step made: datasets, then what its kind of result is about."""
    parts = [f"{d['ref']} ({d['rows']} rows)" for d in outputs.get("datasets", [])]
    details = outputs.get("details", {})
    summary = _details_text(details)
    if summary:
        parts.append(summary)
    return ", ".join(parts)


def _numbers(values: dict[str, Any], keys: Any = None) -> str:
    """``k=v`` for the numeric values of a mapping (all of them, or ``keys`` in that order)."""
    chosen = keys if keys is not None else values
    shown = [
        f"{k}={values[k]:.3g}"
        for k in chosen
        if isinstance(values.get(k), int | float) and not isinstance(values.get(k), bool)
    ]
    return ", ".join(shown)


def _details_text(details: dict[str, Any]) -> str:
    if "deployment" in details:  # deploy
        return (
            f"deployment {details['deployment']} -> {details['model']}, {details.get('action', '')}"
        )
    if "answer" in details:  # agent
        answer = " ".join(str(details.get("answer") or "").split())
        return f"agent run {details['id']}: {details['status']}, answer: {answer[:80]!r}"
    if "tool_accuracy" in details:  # tool_eval
        keys = ("tool_accuracy", "argument_exact_match", "baseline_tool_accuracy")
        return f"{details['rows']} calls: " + _numbers(details, keys)
    if "kb" in details and "chunks" in details:  # kb_build
        return (
            f"kb {details['kb']} {details['action']}: {details['documents']} documents, "
            f"{details['chunks']} chunks, {details['quarantined']} quarantined"
        )
    if "kb" in details and "metrics" in details:  # kb_eval: one mode's figures each
        modes = "; ".join(f"{m}: {_numbers(v)}" for m, v in details["metrics"].items())
        return f"kb {details['kb']} run {details['run_id'][:12]}: {modes}"
    if "scores" in details:  # prompt_eval
        return f"prompt {details['prompt']} run {details['run_id'][:12]}: " + _numbers(
            details["scores"]
        )
    if "model" in details and "passed" in details:  # gate
        return f"gate passed for {details['model']}"
    if "model" in details and "path" in details:  # card
        return f"card of {details['model']}: {details['path']}"
    if "model" in details:  # register
        alias = f" ({details['alias']})" if details.get("alias") else ""
        return f"model {details['model']}{alias}"
    if "run_id" in details:  # train
        metrics = details.get("metrics") or {}
        shown = ", ".join(f"{k}={v:.3g}" for k, v in metrics.items() if k.startswith("test_"))
        return f"run {details['run_id'][:12]}" + (f" ({shown})" if shown else "")
    if "status" in details:  # monitor
        values = _numbers({k: v for k, v in details.items() if k != "status"})
        return f"monitor {details['status']}" + (f": {values}" if values else "")
    return ""


def _show_run(result: RunResult, title: str) -> None:
    """The step table, then the artifacts the steps wrote (paths are too long for a cell)."""
    rows = [
        {
            "step": s.name,
            "uses": s.uses,
            "status": s.status,
            "outputs": _outputs_text(s.outputs),
            "seconds": round(s.seconds, 2),
        }
        for s in result.steps
    ]
    print_table(rows, ["step", "uses", "status", "outputs", "seconds"], title=title)
    for s in result.steps:
        for artifact in s.outputs.get("artifacts", []):
            emit(f"artifact of step {s.name!r}: {artifact}", False)


def _submit(pipeline: Path, executor: str, force: bool, only: str | None, as_json: bool) -> None:
    """``aifab run FILE --executor X``: the pipeline as a job; show its steps when it is done."""
    from aifab.core.errors import InvalidInputError
    from aifab.pipeline import submit_pipeline

    if only is not None:
        raise InvalidInputError("--only runs a step here: leave it out with --executor")
    out = submit_pipeline(pipeline, executor=executor, force=force)
    if as_json:
        print_json(out)
        return
    result = out["result"] or {}
    rows = [
        {"step": name, "status": step["status"], "outputs": _outputs_text(step)}
        for name, step in result.get("steps", {}).items()
    ]
    title = f"pipeline {result.get('pipeline')} ({result.get('run_id')}) as job {out['job']['id']}"
    print_table(rows, ["step", "status", "outputs"], title=title)


def _quarantine_counts(result: RunResult) -> dict[str, dict[str, int]]:
    """Quarantined rows per rule for every dataset the run read or wrote."""
    from aifab.data.quarantine import count_quarantine

    names: list[str] = []
    for s in result.steps:
        for d in s.inputs.get("datasets", []) + s.outputs.get("datasets", []):
            name = d["ref"].partition("@")[0]
            if name not in names:
                names.append(name)
    counts = {name: count_quarantine(name) for name in names}
    return {name: c for name, c in counts.items() if c}


def _show_demo(result: RunResult, path: Path) -> None:
    _show_run(result, f"quickstart pipeline ({path})")
    if not result.ok:
        return
    counts = _quarantine_counts(result)
    rows = [
        {"dataset": name, "rule": rule, "rows": n}
        for name, rules in counts.items()
        for rule, n in sorted(rules.items())
    ]
    if rows:
        print_table(rows, ["dataset", "rule", "rows"], title="quarantined rows")
    datasets = [d["ref"].partition("@")[0] for s in result.steps for d in s.outputs["datasets"]]
    names = {
        "features": datasets[-1] if datasets else "DATASET",
        "quarantined": max(counts, key=lambda n: sum(counts[n].values())) if counts else "DATASET",
        "pipeline": path,
    }
    emit("next, try:", False)
    for cmd in _NEXT_COMMANDS:
        emit("  " + cmd.format(**names), False)


def _demo_serving(result: RunResult) -> dict[str, Any] | None:
    """A fresh client key and a ready-to-paste request for the deployment the demo made."""
    import shlex

    from aifab.serve.keys import create_key

    deployed = [s.outputs["details"] for s in result.steps if s.uses == "deploy" and s.outputs]
    if not deployed or "deployment" not in deployed[-1]:
        return None
    name, model = deployed[-1]["deployment"], deployed[-1]["model"]
    # A secret is shown only once, so every demo run makes (and prints) a new key.
    key, secret = create_key("client", name="demo")
    # The dashboard needs a key that may read (and, on one's own laptop, deploy and promote).
    board_key, board_secret = create_key("developer", name="demo-dashboard")
    body = json.dumps({"records": [_example_record(model)]}, default=_json_value)
    curl = (
        f"curl -s http://127.0.0.1:8000/v1/predict/{name} "
        f'-H "Authorization: Bearer {secret}" -H "Content-Type: application/json" '
        f"-d {shlex.quote(body)}"
    )
    return {
        "deployment": name,
        "model": model,
        "key_id": key["id"],
        "key": secret,
        "curl": curl,
        "dashboard": "http://127.0.0.1:8000/ui",
        "dashboard_key_id": board_key["id"],
        "dashboard_key": board_secret,
    }


def _example_record(model: str) -> dict[str, Any]:
    """One raw row of the model's training data with just the columns the model takes."""
    from aifab.data import head
    from aifab.models.checkpoint import read_sidecar
    from aifab.track.registry import download_model

    model_dir = download_model(model)
    meta = read_sidecar(model_dir).get("meta") or {}
    preprocess = meta.get("preprocess") or {}
    transform = preprocess.get("feature_transform") or {}
    if transform.get("file"):
        # The serving handler takes the transform's input columns (plus its passthrough ones).
        saved = json.loads((model_dir / transform["file"]).read_text(encoding="utf-8"))
        columns = [f["column"] for f in saved["spec"]["features"]] + saved["passthrough"]
    else:
        columns = [*(preprocess.get("features") or []), preprocess.get("text_column")]
    drop = {preprocess.get("label"), (preprocess.get("split") or {}).get("column"), None}
    ref = (meta.get("datasets") or [{}])[0].get("ref")
    row = (head(ref, 1).to_pylist() or [{}])[0] if ref else {}
    return {c: row[c] for c in dict.fromkeys(columns) if c not in drop and c in row}


def _json_value(value: Any) -> Any:
    """Dates as ISO strings (what the server's JSON decoding expects), anything else as text."""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _show_serving(serving: dict[str, Any]) -> None:
    emit("", False)
    emit(f"deployed {serving['model']} as {serving['deployment']!r}; serve it with:", False)
    emit("  aifab serve", False)
    emit(
        f"a client API key was made for this demo (id {serving['key_id']}); its secret is shown "
        "only now, and each 'aifab demo' run makes a new one:",
        False,
    )
    emit(f"  {serving['key']}", False)
    emit("then, in another terminal, ask the model about one customer:", False)
    emit(f"  {serving['curl']}", False)
    emit(
        f"and open the dashboard at {serving['dashboard']} (while 'aifab serve' runs); sign in "
        f"with this developer key (id {serving['dashboard_key_id']}, also shown only now):",
        False,
    )
    emit(f"  {serving['dashboard_key']}", False)
