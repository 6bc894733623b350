"""Data-parallel classify through the real scheduler: a 2-replica job (gloo, per-replica batch =
global / 2) follows the loss curve of a 1-replica job step for step; rank 0 alone logs and
saves. FSDP (2 replicas) follows it too."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.data import ingest
from aifab.jobs import service
from aifab.jobs.detect import machine_resources
from aifab.jobs.launch import checkpoint_dir
from aifab.jobs.recipes import RECIPES
from aifab.jobs.worker import Worker, WorkerOptions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes"),
]

FINAL = ("succeeded", "failed", "cancelled")
STEPS = 20


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Room for the three jobs at once (1 + 2 + 2 one-CPU replicas)."""
    monkeypatch.setenv("AIFAB_WORKER_CPU", "5")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "16384")
    monkeypatch.setenv("AIFAB_WORKER_GPU", "0")
    machine_resources.cache_clear()
    yield
    machine_resources.cache_clear()


def _dataset(tmp_path: Path) -> None:
    g = np.random.default_rng(1)
    x = g.normal(size=(300, 8)).astype(np.float32)
    y = (x[:, 0] - x[:, 3] + 0.3 * g.normal(size=300) > 0).astype(np.int64)
    pq.write_table(
        pa.table({**{f"f{i}": x[:, i] for i in range(8)}, "y": y}), tmp_path / "d.parquet"
    )
    ingest("ddp-data", str(tmp_path / "d.parquet"))


def _run(name: str, strategy: str, tmp_path: Path) -> dict[str, Any]:
    config = {
        "dataset": "ddp-data",
        "label": "y",
        "epochs": 10,
        "max_steps": STEPS,
        "batch_size": 32,
        "optim": {"lr": 1e-2, "clip_norm": None},
        "model": {"config": {"hidden": [32]}},
        "strategy": strategy,
        "log_every": 1,
        "threads": 1,
        "experiment": "ddp",
        "run_name": name,
        "output_dir": str(tmp_path / name),
        "system_metrics": False,
        "progress": False,
    }
    if strategy == "fsdp":  # also gather the sharded state for best weights and checkpoints
        config.update(eval_every=5, early_stopping={"patience": 100}, checkpoint_every=10)
    if "classify" in RECIPES:  # the lead registers the train recipes in aifab.jobs.recipes
        return {"recipe": "classify", "config": config}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return {"command": [sys.executable, "-m", "aifab.train.recipes.classify", str(path)]}


def _drive(worker: Worker, job_ids: list[str], timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.step()
        if all(service.get_job(j)["state"] in FINAL for j in job_ids):
            return
        time.sleep(0.05)
    raise AssertionError(f"jobs not finished within {timeout} s")


def test_ddp_and_fsdp_follow_the_single_process_loss_curve(tmp_path: Path) -> None:
    from aifab.track.runs import list_runs, metric_history
    from aifab.track.tracking import experiment_id

    _dataset(tmp_path)
    experiment_id("ddp")  # create the MLflow store once, before the replicas race to
    jobs = {
        name: service.submit(
            {
                "name": name,
                "run": _run(name, strategy, tmp_path),
                "replicas": replicas,
                "resources": {"cpu": 1, "memory": 2048},
            }
        )["id"]
        for name, strategy, replicas in (
            ("single", "ddp", 1),
            ("ddp", "ddp", 2),
            ("fsdp", "fsdp", 2),
        )
    }
    worker = Worker(WorkerOptions(lease_s=30.0, poll_s=0.05))
    try:
        _drive(worker, list(jobs.values()))
    finally:
        stopped = threading.Event()
        stopped.set()
        worker.run(stopped)
    for name, job_id in jobs.items():
        job = service.get_job(job_id)
        assert job["state"] == "succeeded", (name, job["reason"])
        assert job["attempts"][0]["exit_codes"] == [0] * (1 if name == "single" else 2)

    runs = {r["name"]: r for r in list_runs("ddp")}
    assert sorted(runs) == ["ddp", "fsdp", "single"]  # rank 1 opened no run of its own
    curves = {
        name: [
            p["value"]
            for p in sorted(metric_history(r["id"], "train_loss"), key=lambda p: p["step"])
        ]
        for name, r in runs.items()
    }
    assert len(curves["single"]) == STEPS and curves["single"][-1] < curves["single"][0]
    for name in ("ddp", "fsdp"):
        assert len(curves[name]) == STEPS
        diff = max(abs(a - b) for a, b in zip(curves[name], curves["single"], strict=True))
        assert diff < 1e-3, (name, diff)
        assert (tmp_path / name / "model.safetensors").is_file()
    # fsdp ends on its best evaluated weights; ddp, like single, on its last ones.
    assert runs["ddp"]["metrics"]["test_accuracy"] == pytest.approx(
        runs["single"]["metrics"]["test_accuracy"], abs=0.02
    )
    fsdp_ckpts = checkpoint_dir(jobs["fsdp"])
    assert sorted(p.name for p in fsdp_ckpts.glob("step-*.pt")) == [
        "step-000000010.pt",
        "step-000000020.pt",
    ]
