"""A replica on a node that cannot see the submitter's disk gets a self-contained environment
when the workspace is on an object store (moto's S3 server, the stand-in for S3/MinIO)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aifab.core.storage import local_file
from aifab.jobs.launch import build_launch, node_env
from aifab.jobs.spec import JobSpec

SPEC = JobSpec.model_validate({"name": "t", "run": {"recipe": "noop", "config": {"a": 1}}})


def test_without_a_store_the_environment_is_unchanged(workspace: Path) -> None:
    env = build_launch("job-1", 1, SPEC, ("n",)).replicas[0].env
    assert node_env(env, "/elsewhere") == env


def test_with_a_store_paths_map_to_the_node_and_the_config_travels_inline(
    s3_storage: str, workspace: Path
) -> None:
    env = node_env(build_launch("job-1", 1, SPEC, ("n",)).replicas[0].env, "/node/ws")
    assert env["AIFAB_HOME"] == "/node/ws"
    assert env["AIFAB_STORAGE_URI"] == s3_storage
    assert env["AIFAB_CHECKPOINT_DIR"] == "/node/ws/artifacts/jobs/job-1/checkpoints"
    assert env["AIFAB_JOB_RESULT"] == "/node/ws/logs/jobs/job-1/attempt-1/result.json"
    assert "AIFAB_JOB_CONFIG" not in env and json.loads(env["AIFAB_JOB_CONFIG_JSON"]) == {"a": 1}
    assert not any(str(workspace.resolve()) in v for v in env.values())


def test_a_result_written_on_the_node_reaches_the_submitter(
    s3_storage: str, workspace: Path, tmp_path: Path
) -> None:
    env = node_env(build_launch("job-2", 1, SPEC, ("n",)).replicas[0].env, str(tmp_path / "node"))
    code = (
        "import os, pathlib; from aifab.jobs.replica import _mirror; "
        "p = pathlib.Path(os.environ['AIFAB_JOB_RESULT']); p.parent.mkdir(parents=True); "
        'p.write_text(\'{"run_id": "r1"}\'); _mirror(p)'
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = local_file("logs/jobs/job-2/attempt-1/result.json")
    assert json.loads(got.read_text()) == {"run_id": "r1"}
