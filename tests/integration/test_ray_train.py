"""The classify recipe under Ray Train on a small local Ray: two workers form one torch process
group, rank 0 alone logs one MLflow run, and the summary comes back to the driver."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.data import ingest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def ray_local(workspace: Path) -> Iterator[Any]:
    """Local Ray started after the workspace env is set (its workers inherit it)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.train.torch")
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


def _config(workspace: Path) -> dict[str, Any]:
    """The breast-cancer table ingested as ``bc``, and a short classify config on it."""
    from sklearn.datasets import load_breast_cancer

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    csv = workspace.parent / "bc.csv"
    frame.to_csv(csv, index=False)
    ingest("bc", str(csv))
    return {
        "dataset": "bc",
        "label": "target",
        "epochs": 10,
        "optim": {"lr": 3e-3},
        "experiment": "ray-train",
        "system_metrics": False,
        "threads": 1,
        "progress": False,
    }


def test_classify_on_two_ray_train_workers(ray_local: Any, workspace: Path) -> None:
    from aifab.core.workspace import get_workspace
    from aifab.track.runs import list_runs
    from aifab.train.distributed_ray import run_with_ray_train

    summary = run_with_ray_train("classify", _config(workspace), num_workers=2)

    assert summary["metrics"]["test_accuracy"] >= 0.9
    ray_train = summary["ray_train"]
    assert ray_train["world_size"] == 2
    assert ray_train["backend"] == "gloo"
    assert sorted(w["rank"] for w in ray_train["workers"]) == [0, 1]
    assert len({w["pid"] for w in ray_train["workers"]}) == 2
    assert Path(ray_train["path"]).is_relative_to(get_workspace().artifacts / "ray-train")
    runs = list_runs("ray-train")
    assert [r["id"] for r in runs] == [summary["run_id"]]


def test_ray_train_keeps_its_results_on_the_object_store(
    s3_storage: str, ray_local: Any, workspace: Path
) -> None:
    """With a store (moto's S3 server, the stand-in for S3/MinIO) Ray Train's storage path is
    on it: workers on other nodes could not upload to the driver's disk."""
    from aifab.core.storage import get_store
    from aifab.train.distributed_ray import run_with_ray_train

    summary = run_with_ray_train("classify", _config(workspace), num_workers=2)
    assert summary["metrics"]["test_accuracy"] >= 0.9
    assert summary["ray_train"]["world_size"] == 2
    stored = get_store().list("artifacts/ray-train")
    assert stored and not (workspace / "artifacts" / "ray-train").exists()
