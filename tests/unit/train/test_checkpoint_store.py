"""Checkpoints in the workspace are mirrored to the object store (moto's S3 server, the
stand-in for S3/MinIO), so an attempt on another node with an empty workspace resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aifab.core.storage import get_store
from aifab.train import checkpointing


def _save(directory: Path, step: int) -> Path:
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return checkpointing.save_checkpoint(
        directory,
        step=step,
        model=model.state_dict(),
        optimizer=opt.state_dict(),
        scheduler=None,
        position={"epoch": 0, "batch": step},
        keep=2,
    )


def test_checkpoints_reach_another_node(
    s3_storage: str, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = workspace / "artifacts" / "jobs" / "job-1" / "checkpoints"
    for step in (1, 2, 3):
        _save(ckpt, step)
    keys = get_store().list("artifacts/jobs/job-1/checkpoints")
    assert [k.rsplit("/", 1)[-1] for k in keys] == ["step-000000002.pt", "step-000000003.pt"]
    node2 = tmp_path / "node2"
    monkeypatch.setenv("AIFAB_HOME", str(node2))
    there = node2 / "artifacts" / "jobs" / "job-1" / "checkpoints"
    latest = checkpointing.latest_checkpoint(there)
    assert latest == there / "step-000000003.pt"
    assert checkpointing.load_checkpoint(latest)["position"] == {"epoch": 0, "batch": 3}


def test_a_directory_outside_the_workspace_stays_local(s3_storage: str, tmp_path: Path) -> None:
    _save(tmp_path / "mine", 1)
    assert get_store().list("") == []


def test_mlflow_artifacts_go_to_the_store(s3_storage: str) -> None:
    from aifab.track.client import artifact_root

    assert artifact_root("exp") == f"{s3_storage}/artifacts/mlflow/exp"


def test_mlflow_artifact_root_is_unchanged_without_a_store(workspace: Path) -> None:
    from aifab.track.client import artifact_root

    assert artifact_root("exp") == str(workspace.resolve() / "artifacts" / "mlflow" / "exp")
