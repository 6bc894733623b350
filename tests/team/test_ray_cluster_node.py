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
class Nodes:
    """The module's one local Ray cluster and the settings its nodes share."""

    env: dict[str, str]  # the settings every node shares (DB, tracking, store, credentials)
    head: Path  # the head's AIFAB_HOME
    node_root: Path  # where Ray replicas keep their node-local workspaces
    worker_dir: Path  # the (empty) directory Ray's workers start in
    tmp: Path

    def head_env(self) -> dict[str, str]:
        """What the head's process runs with."""
        return {
            **self.env,
            "AIFAB_HOME": str(self.head),
            "AIFAB_RAY_NODE_HOME": str(self.node_root),
        }


@dataclass
class Trained:
    """What the module's one Ray-trained quickstart left behind for its tests."""

    env: dict[str, str]
    head: Path
    node_root: Path
    worker_dir: Path
    job: dict[str, Any]
    steps: dict[str, dict[str, Any]]
    cwd_listing: list[str]  # what a replica saw in its working directory


def _shared_env(pg_server: Any, s3_server: Any) -> dict[str, str]:
    return {
        **s3_server.env,
        "AIFAB_DB_URL": pg_server.new_database(),
        "AIFAB_AUDIT_KEY": "the team's audit key",
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
def nodes(
    pg_server: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Nodes]:
    tmp = tmp_path_factory.mktemp("ray-cluster")
    env = _shared_env(pg_server, s3_server)
    head, node_root, worker_dir = tmp / "head" / ".aifab", tmp / "ray-nodes", tmp / "worker-cwd"
    worker_dir.mkdir()
    # The nodes get what a team gives them (the DB URL, the audit key, the store's credentials)
    # and start in an empty directory; Ray's processes inherit nothing of the head's workspace
    # settings.
    node_settings = {k: v for k, v in env.items() if k != "AIFAB_TRACKING_URI"}
    cluster = local_ray(
        "aifab", (*env, "AIFAB_HOME"), working_dir=str(worker_dir), env_vars=node_settings
    )
    with cluster:
        yield Nodes(env, head, node_root, worker_dir, tmp)
    reset_engines()


@pytest.fixture(scope="module")
def trained(nodes: Nodes) -> Iterator[Trained]:
    from aifab.jobs.launch import attempt_dir
    from aifab.jobs.logs import tail_log
    from aifab.jobs.service import get_job, submit
    from aifab.jobs.worker import run_until_final
    from aifab.pipeline.runner import run_pipeline

    with pytest.MonkeyPatch.context() as mp:
        for key, value in nodes.head_env().items():
            mp.setenv(key, value)
        reset_engines()
        result = run_pipeline(_pipeline(nodes.tmp))
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
    yield Trained(nodes.env, nodes.head, nodes.node_root, nodes.worker_dir, job, steps, listing)
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
    # The replica's workspace was a fresh directory of its own, not the head's, removed when
    # the attempt ended (its log and checkpoints are on the store).
    assert not (trained.node_root / job["id"]).exists()
    head_ckpts = list((trained.head / "artifacts" / "jobs" / job["id"] / "checkpoints").glob("*"))
    assert head_ckpts == []
    store = get_store()
    stored = store.list(f"artifacts/jobs/{job['id']}/checkpoints")
    assert any("step-" in k for k in stored), stored
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


def _messy_csv(path: Path) -> Path:
    """Customers as exports look: duplicate lines, blanks, junk numbers, typos in the millions,
    categories in mixed case with stray spaces."""
    lines = ["customer_id,age,income,plan,tickets,label"]
    for i in range(160):
        age = "" if i % 11 == 0 else ("unknown" if i % 23 == 0 else str(20 + i % 50))
        income = "" if i % 13 == 0 else str(1e9 if i % 37 == 0 else 20000 + (i * 7919) % 60000)
        plan = [" Basic", "PRO", "basic ", "pro"][i % 4]
        tickets = i % 5
        lines.append(f"C{i},{age},{income},{plan},{tickets},{'churn' if tickets > 2 else 'stay'}")
    lines += lines[5:9]  # a double export of a few rows
    path.write_text("\n".join(lines) + "\n")
    return path


_CLEAN = """steps:
  - drop_duplicates: {}
  - normalize_text: {columns: [plan], lower: true}
  - cast: {columns: {age: INTEGER}}
  - fill_nulls: {strategy: {age: median, income: median}}
  - clip: {columns: [income], upper_quantile: 0.95}
"""

_PIPELINE = """name: rp-on-ray
steps:
  - {name: clean, uses: clean, with: {input: rp_raw, output: rp_clean, spec: clean.yaml}}
  - name: features
    uses: features
    with:
      input: rp_clean
      output: rp_features
      spec:
        features:
          - {transform: standardize, column: age}
          - {transform: log1p, column: income}
          - {transform: standardize, column: tickets}
          - {transform: onehot, column: plan}
        passthrough: [label]
"""


def test_a_clean_features_pipeline_runs_on_a_ray_worker_that_cannot_see_the_heads_disk(
    nodes: Nodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.data.catalog import resolve
    from aifab.data.ingest import ingest
    from aifab.data.quarantine import list_quarantine
    from aifab.data.verify import verify_lake
    from aifab.jobs.service import job_result, submit
    from aifab.jobs.worker import run_until_final
    from aifab.pipeline import submit_pipeline

    for key, value in nodes.head_env().items():
        monkeypatch.setenv(key, value)
    reset_engines()
    raw = ingest("rp_raw", _messy_csv(tmp_path / "customers.csv")).version
    (tmp_path / "clean.yaml").write_text(_CLEAN)  # inlined by the head: the worker has no copy
    (tmp_path / "pipeline.yaml").write_text(_PIPELINE)
    out = submit_pipeline(tmp_path / "pipeline.yaml", executor="ray")
    job, result = out["job"], out["result"]
    assert job["executor"] == "ray" and job["state"] == "succeeded", job["events"]
    assert result["status"] == "succeeded"
    assert [s["status"] for s in result["steps"].values()] == ["succeeded", "succeeded"]
    # The head sees the worker's versions, with their lineage, in the shared DB and store.
    clean_v, feats_v = resolve("rp_clean"), resolve("rp_features")
    assert result["steps"]["clean"]["datasets"][0]["ref"] == clean_v.ref
    assert clean_v.parents == [raw.ref] and feats_v.parents == [clean_v.ref]
    assert [next(iter(s)) for s in clean_v.transform["spec"]["steps"]][:2] == [
        "drop_duplicates",
        "normalize_text",
    ]
    assert 0 < clean_v.num_rows < raw.num_rows  # the double export is gone
    # The worker wrote into a workspace of its own, removed with its attempt; none of its
    # objects are on the head's disk.
    assert not (nodes.node_root / job["id"]).exists()
    assert not any((nodes.head / key).exists() for key in (*clean_v.objects, *feats_v.objects))
    # The junk ages were quarantined by the cast, with their reason, under the input dataset.
    bad = list_quarantine("rp_raw", stage="clean", limit=100)
    assert bad and all("age" in item["reason"] for item in bad)
    # `aifab data verify` on the head re-hashes what the worker stored.
    for name in ("rp_clean", "rp_features"):
        report = verify_lake(name)
        assert report.checked >= 1 and not report.problems, report.to_dict()
    # A recipe job on the Ray worker trains on the features the pipeline fitted there.
    config = {
        "dataset": clean_v.ref,
        "label": "label",
        "features": feats_v.dataset,
        "epochs": 2,
        "batch_size": 32,
        "seed": 7,
        "experiment": "rp-on-ray",
    }
    train = submit(
        {"name": "rp-train", "executor": "ray", "run": {"recipe": "classify", "config": config}}
    )
    final = run_until_final(train["id"], "ray")
    assert final["state"] == "succeeded", final["events"]
    trained = job_result(train["id"]) or {}
    assert trained["run_id"] and trained["metrics"]
    reset_engines()
