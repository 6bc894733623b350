"""A recipe job on a Ray worker that cannot use the head's disk, served from a third directory.

The head (this process) shares with the others only a PostgreSQL server (metadata and MLflow
tracking) and an object store (moto's standalone S3 server, the named stand-in for S3/MinIO).
The cluster is a real local Ray instance whose workers start in an empty working directory
(Ray's ``working_dir``) and get only the settings a team gives its nodes (DB URL, storage
credentials). The quickstart's data steps run on the head; its ``train`` step runs as a
``classify`` job on the Ray executor, whose replica keeps a fresh node-local ``AIFAB_HOME``:
it reads the dataset versions and the fitted transform from the store, checkpoints to it and
logs its MLflow run and model there. The head then registers, aliases and deploys the model,
and ``aifab serve`` started in a third directory with a fresh ``AIFAB_HOME`` answers
``/v1/predict/churn`` for it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from aifab.core.db import reset_engines

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ray_local import local_ray  # noqa: E402
from serve_proc import aifab_serve  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECORD = {
    "age": 54,
    "income": 33500.0,
    "monthly_spend": 28.1,
    "support_tickets": 0,
    "plan": "basic",
    "country": "GB",
    "signup_date": "2019-06-03",
    "ticket_text": "Thanks for the quick fix",
}


@dataclass
class Trained:
    """What the module's one Ray-trained quickstart left behind for its tests."""

    env: dict[str, str]  # the settings every node shares (DB, tracking, store, credentials)
    head: Path  # the head's AIFAB_HOME
    node_root: Path  # where Ray replicas keep their node-local workspaces
    worker_dir: Path  # the (empty) directory Ray's workers start in
    job: dict[str, Any]
    steps: dict[str, dict[str, Any]]
    cwd_listing: list[str]  # what a replica saw in its working directory


def _shared_env(pg_server: Any, s3_server: Any) -> dict[str, str]:
    return {
        **s3_server.env,
        "AIFAB_DB_URL": pg_server.new_database(),
        "AIFAB_TRACKING_URI": pg_server.new_database("mlflow"),
        "AIFAB_STORAGE_URI": f"s3://{s3_server.new_bucket()}/team",
    }


def _pipeline(tmp: Path) -> Path:
    """The quickstart with its train step on the Ray executor, checkpointing every 20 steps."""
    quick = tmp / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", quick)
    spec = yaml.safe_load((quick / "pipeline.yaml").read_text())
    for step in spec["steps"]:
        if step["name"] == "train":
            step["with"]["executor"] = "ray"
    with (quick / "train.yaml").open("a") as fh:
        fh.write("checkpoint_every: 20\n")
    path = quick / "on-ray.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def trained(
    pg_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trained]:
    from aifab.jobs.launch import attempt_dir
    from aifab.jobs.logs import tail_log
    from aifab.jobs.service import get_job, submit
    from aifab.jobs.worker import run_until_final
    from aifab.pipeline.runner import run_pipeline

    tmp = tmp_path_factory.mktemp("ray-cluster")
    env = _shared_env(pg_server, s3_server)
    head, node_root, worker_dir = tmp / "head" / ".aifab", tmp / "ray-nodes", tmp / "worker-cwd"
    worker_dir.mkdir()
    # The nodes get what a team gives them (the DB URL and the store's credentials) and start
    # in an empty directory; Ray's processes inherit nothing of the head's workspace settings.
    node_settings = {k: v for k, v in env.items() if k != "AIFAB_TRACKING_URI"}
    cluster = local_ray(
        "aifab", (*env, "AIFAB_HOME"), working_dir=str(worker_dir), env_vars=node_settings
    )
    with cluster, pytest.MonkeyPatch.context() as mp:
        head_env = {**env, "AIFAB_HOME": str(head), "AIFAB_RAY_NODE_HOME": str(node_root)}
        for key, value in head_env.items():
            mp.setenv(key, value)
        reset_engines()
        result = run_pipeline(_pipeline(tmp))
        assert result.ok, [(s.name, s.error) for s in result.steps if s.error]
        steps = {s.name: s.outputs for s in result.steps}
        job = get_job(steps["train"]["details"]["job_id"])
        command = [sys.executable, "-c", _LIST_CWD]
        probe = submit({"name": "cwd-probe", "executor": "ray", "run": {"command": command}})
        assert run_until_final(probe["id"], "ray")["state"] == "succeeded"
        # The replica wrote its log on its node and shipped it: the head reads it from the store.
        assert not (attempt_dir(probe["id"], 1) / "replica-0.log").exists()
        log = tail_log(probe["id"])
        assert log.final
        listing = json.loads(log.text.strip().splitlines()[-1])
    yield Trained(env, head, node_root, worker_dir, job, steps, listing)
    reset_engines()


_LIST_CWD = "import json, os; print(json.dumps(sorted(os.listdir('.'))))"


def test_a_recipe_job_runs_on_a_ray_worker_that_cannot_use_the_heads_disk(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.core.storage import get_store
    from aifab.inference.loading import load_served_model

    for key, value in {**trained.env, "AIFAB_HOME": str(trained.head)}.items():
        monkeypatch.setenv(key, value)
    reset_engines()
    job = trained.job
    assert job["state"] == "succeeded", job["events"]
    assert job["executor"] == "ray" and job["attempts"][-1]["usage"]["replicas"]
    assert trained.cwd_listing == []  # the Ray worker's working directory is empty
    # The replica's workspace was a fresh directory of its own, not the head's.
    node_home = trained.node_root / job["id"]
    assert node_home.is_dir()
    head_ckpts = list((trained.head / "artifacts" / "jobs" / job["id"] / "checkpoints").glob("*"))
    assert head_ckpts == []
    store = get_store()
    stored = store.list(f"artifacts/jobs/{job['id']}/checkpoints")
    assert any("step-" in k for k in stored), stored
    # The dataset's lake objects reached the node through the store (its read-through cache).
    assert list((node_home / "lake").rglob("*.parquet"))
    assert store.list("artifacts/mlflow")  # the run's model went to the store
    # The head sees the run, registers the model and deploys it.
    details = trained.steps["train"]["details"]
    assert details["run_id"] and details["metrics"]
    assert trained.steps["register"]["details"]["model"].startswith("churn@")
    handler = load_served_model("churn@champion").handler
    (pred,) = handler.predict(handler.decode({"records": [RECORD]}))
    assert pred["label"] in ("churn", "stay")
    reset_engines()


def test_aifab_serve_in_a_third_directory_serves_the_model_trained_on_ray(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.serve.keys import create_key

    for key, value in {**trained.env, "AIFAB_HOME": str(trained.head)}.items():
        monkeypatch.setenv(key, value)
    reset_engines()
    _, secret = create_key("client", name="third-node", rate=None)  # in the shared DB
    third = tmp_path / "node-c"
    third.mkdir()
    env = {**os.environ, **trained.env, "AIFAB_HOME": str(third / ".aifab")}
    with aifab_serve(env, third, "--no-worker") as url:
        deadline = time.monotonic() + 180
        while True:  # the deployment loads in the background: 503 until it has
            answer = httpx.post(
                f"{url}/v1/predict/churn",
                json={"records": [RECORD]},
                headers={"Authorization": f"Bearer {secret}"},
                timeout=60,  # a loaded 2-core machine: the first predict loads the model
            )
            if answer.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    (pred,) = answer.json()["predictions"]
    assert pred["label"] in ("churn", "stay")
    reset_engines()
