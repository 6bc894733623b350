"""docs/team.md's Volcano example, run as written: ``aifab job submit job.yaml --executor
volcano --dry-run --image ...`` on the YAML block the doc shows, with a team's settings."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

DOC = Path(__file__).resolve().parents[3] / "docs" / "team.md"
IMAGE = "registry.example.com/aifab:0.2.0"  # not the example's pod.image: --image wins
TEAM_ENV = {
    "AIFAB_STORAGE_URI": "s3://team-bucket/aifab",
    "AIFAB_TRACKING_URI": "http://mlflow-host:5000",
    "AWS_ENDPOINT_URL_S3": "http://minio:9000",
    "AWS_DEFAULT_REGION": "eu-west-1",
}


def doc_example() -> dict[str, Any]:
    """The YAML block of docs/team.md that defines a Volcano job."""
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S):
        data = yaml.safe_load(textwrap.dedent(block))
        if isinstance(data, dict) and data.get("executor") == "volcano":
            return data
    raise AssertionError("docs/team.md has no Volcano job example")


@pytest.fixture
def team(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in TEAM_ENV.items():
        monkeypatch.setenv(key, value)


def _dry_run(cli: Any, tmp_path: Path, spec: dict[str, Any], *extra: str) -> Any:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return cli("job", "submit", path, "--executor", "volcano", "--dry-run", *extra)


def _containers(stream: str) -> list[dict[str, Any]]:
    job = [d for d in yaml.safe_load_all(stream) if d and d["kind"] == "Job"][0]
    return [c for t in job["spec"]["tasks"] for c in t["template"]["spec"]["containers"]]


def test_the_volcano_example_dry_runs_as_written(team: None, cli: Any, tmp_path: Path) -> None:
    out = _dry_run(cli, tmp_path, doc_example(), "--image", IMAGE)
    assert out.exit_code == 0, out.stderr
    assert not out.stdout.startswith("# warning"), out.stdout.splitlines()[0]
    kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]
    assert kinds == ["Queue", "Job"]  # priority 0: the cluster's default class
    for c in _containers(out.stdout):
        assert c["image"] == IMAGE
        env = {e["name"]: e.get("value") for e in c["env"]}
        # What a pod needs to reach MinIO, passed as the submitter has them (no secrets).
        assert env["AWS_ENDPOINT_URL_S3"] == "http://minio:9000"
        assert env["AWS_DEFAULT_REGION"] == "eu-west-1"
        assert env["AIFAB_TRACKING_URI"] == "http://mlflow-host:5000"
    prioritised = _dry_run(cli, tmp_path, doc_example(), "--image", IMAGE, "--priority", "5")
    kinds = [d["kind"] for d in yaml.safe_load_all(prioritised.stdout) if d]
    assert kinds == ["Queue", "PriorityClass", "Job"]


def test_a_dry_run_refuses_a_config_the_recipe_refuses(
    team: None, cli: Any, tmp_path: Path
) -> None:
    spec = doc_example()
    spec["run"]["config"] = {"dataset": "churn@1", "target": "churned"}
    out = _dry_run(cli, tmp_path, spec)
    assert out.exit_code != 0 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert "target" in line


def test_a_dry_run_warns_about_what_pods_cannot_reach(
    team: None, cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIFAB_TRACKING_URI", "http://127.0.0.1:5000")
    spec = doc_example()
    del spec["pod"]["env_from_secrets"]
    out = _dry_run(cli, tmp_path, spec)
    assert out.exit_code == 0, out.stderr
    warnings = [line for line in out.stdout.splitlines() if line.startswith("# warning")]
    assert any("127.0.0.1" in w and "AIFAB_TRACKING_URI" in w for w in warnings), warnings
    assert any("AIFAB_DB_URL" in w for w in warnings), warnings
    monkeypatch.delenv("AIFAB_TRACKING_URI")
    out = _dry_run(cli, tmp_path, spec)
    assert any("AIFAB_TRACKING_URI is not set" in w for w in out.stdout.splitlines()), out.stdout
