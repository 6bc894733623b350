"""Registered aifab models are MLflow models: MLflow's own loaders agree with aifab's handler."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from aifab.inference.loading import load_served_model
from aifab.track import download_model, get_client, tracking_uri

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
_NUMERIC = {"age": int, "income": float, "monthly_spend": float, "support_tickets": int}
_COLUMNS = ("age", "income", "monthly_spend", "support_tickets", "plan", "country")
_COLUMNS += ("signup_date", "ticket_text")


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def mlflow_uri(module_workspace: Path) -> Iterator[str]:
    """MLflow's global tracking URI set to the workspace store (as a user of MLflow sets it)."""
    import mlflow

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri())
    yield tracking_uri()
    mlflow.set_tracking_uri(before)


def quickstart_rows(n: int = 6) -> list[dict[str, Any]]:
    """The first ``n`` quickstart customers, typed as a JSON client sends them."""
    rows = []
    with open(EXAMPLES / "quickstart" / "data" / "customers.csv", encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            try:
                row = {c: _NUMERIC.get(c, str)(raw[c]) for c in _COLUMNS}
            except (ValueError, TypeError, KeyError):
                continue  # the file has malformed lines on purpose
            if row["income"] > 0 and row["plan"] and row["country"]:
                rows.append(row)
            if len(rows) == n:
                return rows
    raise AssertionError("quickstart data has too few clean rows")


def handler_predictions(ref: str, payload: dict[str, Any]) -> list[Any]:
    handler = load_served_model(ref).handler
    return [handler.encode(o) for o in handler.predict(handler.decode(payload))]


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [g["label"] for g in got] == [w["label"] for w in want]
    for g, w in zip(got, want, strict=True):
        assert g["probabilities"].keys() == w["probabilities"].keys()
        for k, p in w["probabilities"].items():
            assert g["probabilities"][k] == pytest.approx(p, abs=1e-6)


def test_churn_is_an_mlflow_model_linked_to_its_run(churn_model: dict, mlflow_uri: str) -> None:
    from mlflow.models import Model

    client = get_client()
    run = client.get_run(churn_model["run_id"])
    [output] = run.outputs.model_outputs  # the run's LoggedModel output
    logged = client.get_logged_model(output.model_id)
    assert logged.source_run_id == churn_model["run_id"] and logged.status == "READY"
    assert churn_model["source"] == logged.artifact_location
    linked = json.loads(logged.tags["mlflow.modelVersions"])
    assert {"name": "churn", "version": str(churn_model["version"])} in linked
    local = download_model("churn@champion")
    mlmodel = Model.load(str(local.parents[1] / "MLmodel"))
    assert {"python_function", "pytorch", "aifab"} <= set(mlmodel.flavors)
    assert mlmodel.model_id == logged.model_id and mlmodel.run_id == churn_model["run_id"]
    names = [c.name for c in mlmodel.signature.inputs.inputs]
    assert names == [
        c["name"] for c in load_served_model("churn@champion").handler.describe()["input_columns"]
    ]
    assert mlmodel.saved_input_example_info is not None
    # aifab's own loader reads the same files (the aifab flavor's directory).
    assert (local / "aifab-model.json").is_file() and local.parent.name == "artifacts"


def test_pyfunc_takes_raw_records_and_answers_like_predict(
    churn_model: dict, mlflow_uri: str
) -> None:
    import mlflow
    import pandas as pd

    rows = quickstart_rows()
    want = handler_predictions("churn@champion", {"records": rows})
    model = mlflow.pyfunc.load_model("models:/churn@champion")
    assert_same(model.predict(pd.DataFrame(rows)), want)
    assert_same(model.predict(rows), want)


def test_pytorch_flavor_loads_the_network(churn_model: dict, mlflow_uri: str) -> None:
    import mlflow.pytorch
    import torch

    rows = quickstart_rows()
    handler = load_served_model("churn@champion").handler
    inputs = handler.encode_inputs(handler.decode({"records": rows}))
    net = mlflow.pytorch.load_model("models:/churn@champion")
    with torch.inference_mode():
        logits = net(torch.from_numpy(inputs["x"])).numpy()
    np.testing.assert_allclose(logits, handler.forward(inputs), rtol=1e-5, atol=1e-5)


def test_lm_pyfunc_and_transformers_flavor(tiny_lm: dict, mlflow_uri: str) -> None:
    import mlflow.transformers

    ref = f"models:/tiny-lm/{tiny_lm['version']}"
    params = {"max_tokens": 8, "temperature": 0.0}
    want = handler_predictions("tiny-lm@1", {"prompt": ["Hello", "The cat"], **params})
    got = mlflow.pyfunc.load_model(ref).predict(
        [{"prompt": "Hello"}, {"prompt": "The cat"}], params=params
    )
    assert got == want and all(g["usage"]["completion_tokens"] > 0 for g in got)
    parts = mlflow.transformers.load_model(ref, return_type="components")
    assert type(parts["model"]).__name__.endswith("ForCausalLM") and "tokenizer" in parts


def test_a_directory_registered_without_a_sidecar_stays_as_it_is(
    churn_model: dict, tmp_path: Path
) -> None:
    from aifab.track import register_model, start_run

    (tmp_path / "weights.bin").write_bytes(b"x" * 8)
    with start_run("plain-files", system_metrics=False) as run:
        run.log_artifacts(tmp_path, "model")
    mv = register_model(run.id, "model", "plain-files")
    assert mv["source"] == f"runs:/{run.id}/model"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
def _frames(rows: list[dict[str, Any]], tmp: Path) -> dict[str, Any]:
    """``rows`` as pandas, its CSV and Parquet readers and polars make them (whole incomes)."""
    import pandas as pd
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    whole = [{**r, "income": int(r["income"])} for r in rows]
    pd.DataFrame(whole).to_csv(tmp / "rows.csv", index=False)
    table = pa.Table.from_pylist(whole).set_column(
        list(whole[0]).index("signup_date"),
        "signup_date",
        pa.array([dt.date.fromisoformat(r["signup_date"]) for r in whole], pa.date32()),
    )
    pq.write_table(table, tmp / "rows.parquet")
    return {
        "records (int income)": pd.DataFrame(whole),
        "float ages": pd.DataFrame([{**r, "age": float(r["age"])} for r in whole]),
        "read_csv": pd.read_csv(tmp / "rows.csv"),
        "read_csv parse_dates": pd.read_csv(tmp / "rows.csv", parse_dates=["signup_date"]),
        "read_parquet": pd.read_parquet(tmp / "rows.parquet"),
        "polars to_pandas": pl.read_parquet(tmp / "rows.parquet").to_pandas(),
        "polars csv to_pandas": pl.read_csv(tmp / "rows.csv", try_parse_dates=True).to_pandas(),
    }


def test_pyfunc_accepts_what_predict_accepts(
    churn_model: dict, mlflow_uri: str, tmp_path: Path
) -> None:
    """Issue 23 item 1: MLflow's schema enforcement refused int incomes (``Can not safely convert
    int64 to float64``), float ages and parsed dates; ``/v1/predict`` takes them all."""
    import mlflow

    rows = quickstart_rows()
    model = mlflow.pyfunc.load_model("models:/churn@champion")
    for name, frame in _frames(rows, tmp_path).items():
        want = handler_predictions("churn@champion", {"records": _json_records(frame)})
        try:
            got = model.predict(frame)
        except Exception as exc:  # noqa: BLE001 - name the frame that failed
            raise AssertionError(f"{name}: {exc}") from exc
        assert_same(got, want)
    assert_same(model.predict(rows), handler_predictions("churn@champion", {"records": rows}))


def _json_records(frame: Any) -> list[dict[str, Any]]:
    """A frame's rows as a JSON client sends them (dates as ``YYYY-MM-DD``)."""
    out = json.loads(frame.to_json(orient="records", date_format="iso"))
    for r in out:
        r["signup_date"] = str(r["signup_date"])[:10]
    return out


def test_the_models_requirements_install_from_what_it_carries(
    churn_model: dict, mlflow_uri: str, tmp_path: Path
) -> None:
    """Issue 23 item 2: requirements pinned ``aifab==0.1.0`` (on no index) and
    ``torch==2.13.0+cpu`` (a local version no index resolves as such).

    Now aifab is a wheel inside the model, referenced by its path there (MLflow installs the
    requirements from the model directory), and every other pin is a plain release. The
    wheel is installed alone (``--target``, no dependencies: they are this venv's) and a fresh
    interpreter that sees only that copy of aifab loads the model and answers like predict.
    """
    import mlflow

    local = Path(mlflow.artifacts.download_artifacts("models:/churn@champion", dst_path=tmp_path))
    requirements = (local / "requirements.txt").read_text().split()
    [wheel] = [r for r in requirements if r.endswith(".whl")]
    assert wheel.startswith("wheels/aifab-") and (local / wheel).is_file()
    assert not any(r.startswith("aifab==") or "+" in r for r in requirements), requirements
    assert any(r.startswith("torch==") for r in requirements)
    env = (local / "python_env.yaml").read_text()
    assert "requirements.txt" in env and "+cpu" not in env
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*pip, str(local / wheel)], check=True, timeout=300)
    rows = quickstart_rows(3)
    want = handler_predictions("churn@champion", {"records": rows})
    code = (
        "import json, sys, mlflow.pyfunc, aifab\n"
        f"assert aifab.__file__.startswith({str(target)!r}), aifab.__file__\n"
        f"m = mlflow.pyfunc.load_model({str(local)!r})\n"
        f"print(json.dumps(m.predict({rows!r})))\n"
    )
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env_vars, "PYTHONPATH": str(target)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same(json.loads(out.stdout.strip().splitlines()[-1]), want)


def test_mlflow_models_serve_answers_like_predict(churn_model: dict, mlflow_uri: str) -> None:
    rows = quickstart_rows()
    want = handler_predictions("churn@champion", {"records": rows})
    port = _free_port()
    mlflow_cli = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/churn@champion"]
    # As in an activated venv: MLflow execs the venv's ``uvicorn`` by name.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_uri, "PATH": path}
    proc = subprocess.Popen(
        [*mlflow_cli, "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "mlflow models serve did not start in 120 s"
            time.sleep(0.25)
        r = httpx.post(f"{url}/invocations", json={"dataframe_records": rows}, timeout=60)
        assert r.status_code == 200, r.text
        assert_same(r.json()["predictions"], want)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_model_logged_by_plain_mlflow_is_refused_at_deploy_with_the_reason(
    churn_model: dict, mlflow_uri: str, tmp_path: Path
) -> None:
    import mlflow
    import mlflow.pytorch
    import torch

    from aifab.core.errors import InvalidInputError

    # MLflow's fluent API puts a new experiment's artifacts in ./mlruns unless told otherwise.
    mlflow.create_experiment("plain-mlflow", artifact_location=str(tmp_path / "plain"))
    mlflow.set_experiment("plain-mlflow")
    with mlflow.start_run():
        info = mlflow.pytorch.log_model(
            torch.nn.Linear(3, 2),
            name="net",
            input_example=np.zeros((1, 3), dtype=np.float32),
            pip_requirements=["torch"],
        )
    mlflow.register_model(info.model_uri, "plain-net")
    with pytest.raises(InvalidInputError) as err:
        load_served_model("plain-net@1")
    assert "MLflow model" in err.value.message and "pytorch" in err.value.message


def test_an_aifab_directory_that_does_not_load_is_registered_with_the_reason(
    churn_model: dict, tmp_path: Path
) -> None:
    from aifab.track import register_model, start_run

    (tmp_path / "aifab-model.json").write_text('{"builder": "mlp", "config": {}}')
    with start_run("broken-files", system_metrics=False) as run:
        run.log_artifacts(tmp_path, "model")
    mv = register_model(run.id, "model", "broken-files")
    assert mv["source"] == f"runs:/{run.id}/model"
    assert mv["tags"]["aifab.mlflow_model"].startswith("not built: ")
    assert not get_client().get_run(run.id).outputs.model_outputs  # no FAILED LoggedModel left


def test_mlflow_get_source_reads_the_training_dataset(churn_model: dict) -> None:
    import mlflow.data

    from aifab.track.dataset_source import register

    # What the wheel's ``mlflow.dataset_source`` entry point does where aifab is installed
    # (this venv's aifab metadata comes from another checkout; test_wheel checks the entry).
    register()
    inputs = get_client().get_run(churn_model["run_id"]).inputs.dataset_inputs
    assert inputs, "the training run logged its dataset versions"
    source = mlflow.data.get_source(inputs[0])
    assert source.ref == inputs[0].dataset.name + "@" + source.ref.split("@")[1]
    rows = source.load()
    assert rows.num_rows == json.loads(inputs[0].dataset.profile)["num_rows"]


def test_building_the_mlflow_model_warns_about_no_type_hint(
    churn_model: dict, mlflow_uri: str, tmp_path: Path
) -> None:
    """Every registration printed two red MLflow UserWarnings about predict's type hints."""
    import warnings

    from aifab.core.workspace import get_workspace
    from aifab.track.mlflow_model import build_mlflow_model

    model_dir = get_workspace().artifacts / "models" / churn_model["run_id"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_mlflow_model(model_dir, tmp_path / "m", run_id=churn_model["run_id"], model_id="m-1")
    hints = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught]
    assert not [h for h in hints if "type hint" in h.lower()], hints
