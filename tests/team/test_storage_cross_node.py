"""The workspace from any node: three working directories that share only a PostgreSQL DB
(metadata and MLflow tracking) and an object store (moto's standalone S3 server, the named
stand-in for S3/MinIO). The head prepares the quickstart's features; a second node with an
empty AIFAB_HOME trains the classify recipe as a job (reads the dataset versions and the fitted
transform from the store, checkpoints to it) and registers the model; a third node loads the
registered model through the serving loader and predicts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aifab.core.db import reset_engines

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

_PREDICT = """
import json
from aifab.inference.loading import load_served_model
record = {"age": 54, "income": 33500.0, "monthly_spend": 28.1, "support_tickets": 0,
          "plan": "basic", "country": "GB", "signup_date": "2019-06-03",
          "ticket_text": "Thanks for the quick fix"}
handler = load_served_model("churn@champion").handler
print(json.dumps(handler.predict(handler.decode({"records": [record]}))))
"""


def _node(home: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True)
    env = {**os.environ, "AIFAB_HOME": str(home / ".aifab")}
    return subprocess.run(
        argv, cwd=home, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_train_on_a_node_with_an_empty_workspace_and_serve_from_a_third(
    pg_server, s3_storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.core.storage import get_store
    from aifab.pipeline.runner import run_pipeline

    monkeypatch.setenv("AIFAB_DB_URL", pg_server.new_database())
    monkeypatch.setenv("AIFAB_TRACKING_URI", pg_server.new_database("mlflow"))
    reset_engines()
    quick = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", quick)
    spec = yaml.safe_load((quick / "pipeline.yaml").read_text())
    steps = {s["name"]: s for s in spec["steps"]}
    head = {
        **spec,
        "steps": [s for s in spec["steps"] if s["name"] not in ("train", "register", "deploy")],
    }
    (quick / "head.yaml").write_text(yaml.safe_dump(head))
    result = run_pipeline(quick / "head.yaml")
    assert result.ok, [(s.name, s.error) for s in result.steps if s.error]

    with (quick / "train.yaml").open("a") as fh:
        fh.write("checkpoint_every: 20\n")  # so the job checkpoints (to the store)
    train = {**spec, "name": "node-b", "steps": [steps["train"], steps["register"]]}
    (quick / "node_b.yaml").write_text(yaml.safe_dump(train))
    cmd = [sys.executable, "-m", "aifab", "run", str(quick / "node_b.yaml")]
    b = _node(tmp_path / "node-b", cmd)
    assert b.returncode == 0, b.stdout[-2000:] + b.stderr[-3000:]
    store = get_store()
    assert any("/checkpoints/step-" in k for k in store.list("artifacts/jobs"))
    assert store.list("artifacts/mlflow")  # the model's files went to the store

    c = _node(tmp_path / "node-c", [sys.executable, "-c", _PREDICT])
    assert c.returncode == 0, c.stderr[-3000:]
    (pred,) = __import__("json").loads(c.stdout.strip().splitlines()[-1])
    assert pred["label"] in ("churn", "stay")
    reset_engines()
