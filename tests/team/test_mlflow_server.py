"""An MLflow tracking server (PostgreSQL backend, local artifact root) as ``AIFAB_TRACKING_URI``.

The quickstart trains, registers, moves the champion alias and deploys through the server; the
model then loads with aifab's loader and with MLflow's, and the server answers predictions.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.core.db import reset_engines

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import free_port, http_process  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.integration]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def mlflow_server(pg_server: Any, tmp_path: Path) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with a PostgreSQL store; its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--backend-store-uri", pg_server.new_database("mlflow"), "--workers", "1"]
    cmd += ["--artifacts-destination", str(tmp_path / "mlartifacts")]
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PATH": path}
    with http_process(
        cmd, f"{url}/health", env=env, log=tmp_path / "mlflow-server.log", timeout_s=120
    ):
        yield url


def test_train_register_alias_deploy_serve_through_an_mlflow_server(
    mlflow_server: str, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    from aifab.inference.loading import load_served_model
    from aifab.pipeline.runner import run_pipeline
    from aifab.track import get_client, resolve_model

    monkeypatch.setenv("AIFAB_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("AIFAB_DB_URL", pg_server.new_database())
    reset_engines()
    result = run_pipeline(EXAMPLES / "quickstart" / "pipeline.yaml")
    assert result.ok, [(s.name, s.error) for s in result.steps if s.error]
    mv = resolve_model("churn@champion")
    exp = get_client().get_experiment(get_client().get_run(mv["run_id"]).info.experiment_id)
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # the server chose it
    record = {"age": 54, "income": 33500.0, "monthly_spend": 28.1, "support_tickets": 0}
    record |= {"plan": "basic", "country": "GB", "signup_date": "2019-06-03"}
    record |= {"ticket_text": "Thanks for the quick fix"}
    handler = load_served_model("churn@champion").handler
    want = handler.predict(handler.decode({"records": [record]}))
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(mlflow_server)
    try:
        got = mlflow.pyfunc.load_model("models:/churn@champion").predict([record])
    finally:
        mlflow.set_tracking_uri(before)
    assert got[0]["label"] == want[0]["label"]
    assert got[0]["probabilities"] == pytest.approx(want[0]["probabilities"], abs=1e-6)
    reset_engines()
