"""Volcano Jobs carry what real clusters need (env from Secrets, volumes, placement, image,
identity, the shared workspace settings), and every pod template is a valid Kubernetes PodSpec
(kubernetes-validate's upstream schemas) inside a Job valid against the Volcano CRD schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from aifab.jobs.executors.volcano import dry_run_job, dry_run_manifest
from aifab.jobs.spec import JobSpec
from aifab.jobs.volcano_schema import validate

POD = {
    "image": "registry.example.com/aifab:0.1",
    "env_from_secrets": [
        {"name": "AIFAB_DB_URL", "secret": "aifab-db", "key": "url"},
        {"name": "AWS_SECRET_ACCESS_KEY", "secret": "aifab-s3", "key": "secret"},
    ],
    "volumes": [
        {"name": "data", "mount_path": "/data", "pvc": "team-data", "read_only": True},
        {"name": "scratch", "mount_path": "/scratch", "empty_dir": True},
        {"name": "models", "mount_path": "/models", "nfs_server": "nfs.local", "nfs_path": "/m"},
        {"name": "cache", "mount_path": "/cache", "host_path": "/var/cache/aifab"},
    ],
    "node_selector": {"pool": "gpu"},
    "tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "value": "true", "effect": "NoExecute"},
    ],
    "image_pull_secrets": ["regcred"],
    "service_account": "aifab-runner",
}
JOB = {
    "name": "train-mlp",
    "replicas": 2,
    "executor": "volcano",
    "run": {"recipe": "classify", "config": {"dataset": "iris"}},
    "pod": POD,
}


def _pods(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["template"]["spec"] for t in manifest["spec"]["tasks"]]


def test_pod_settings_reach_every_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIFAB_STORAGE_URI", "s3://team-bucket/aifab")
    monkeypatch.setenv("AIFAB_TRACKING_URI", "http://mlflow.aifab:5000")
    monkeypatch.setenv("AIFAB_DB_URL", "postgresql+psycopg://u:hunter2@db/aifab")
    manifest = dry_run_manifest(JOB)
    assert "hunter2" not in json.dumps(manifest)  # the DB URL comes from its Secret
    for pod in _pods(manifest):
        (c,) = pod["containers"]
        assert c["image"] == POD["image"]
        env = {e["name"]: e for e in c["env"]}
        assert env["AIFAB_DB_URL"]["valueFrom"] == {
            "secretKeyRef": {"name": "aifab-db", "key": "url"}
        }
        assert env["AIFAB_STORAGE_URI"]["value"] == "s3://team-bucket/aifab"
        assert env["AIFAB_TRACKING_URI"]["value"] == "http://mlflow.aifab:5000"
        assert [m["mountPath"] for m in c["volumeMounts"]] == [
            "/data",
            "/scratch",
            "/models",
            "/cache",
        ]
        assert pod["volumes"][0] == {
            "name": "data",
            "persistentVolumeClaim": {"claimName": "team-data"},
        }
        assert pod["volumes"][2]["nfs"] == {"server": "nfs.local", "path": "/m"}
        assert pod["nodeSelector"] == {"pool": "gpu"}
        assert pod["tolerations"][0] == {
            "key": "nvidia.com/gpu",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["serviceAccountName"] == "aifab-runner"


def test_with_a_store_pods_use_their_own_workspace(
    monkeypatch: pytest.MonkeyPatch, workspace: Any
) -> None:
    from aifab.jobs.executors.volcano import POD_HOME, VolcanoExecutor
    from aifab.jobs.launch import build_launch

    spec = JobSpec.model_validate(JOB)
    launch = build_launch("job-7", 1, spec, ("n1", "n2"))
    monkeypatch.setenv("AIFAB_STORAGE_URI", "s3://team-bucket/aifab")
    (c,) = _pods(VolcanoExecutor(dry_run=True).render_job(launch))[0]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["AIFAB_HOME"] == POD_HOME
    assert env["AIFAB_CHECKPOINT_DIR"] == f"{POD_HOME}/artifacts/jobs/job-7/checkpoints"
    assert not any(str(workspace.resolve()) in (v or "") for v in env.values())


def test_pod_templates_are_valid_kubernetes_pods() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for spec in (JOB, {**JOB, "pod": {}}):
        manifest = dry_run_manifest(spec)
        validate(manifest)
        for task in manifest["spec"]["tasks"]:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x", **task["template"]["metadata"]},
                "spec": task["template"]["spec"],
            }
            kv.validate(pod, "1.33", strict=True)


def test_dry_run_yaml_has_no_image_warning_with_the_pod_image(workspace: Any) -> None:
    assert "# warning: image" not in dry_run_job(JOB)


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"name": "v", "mount_path": "/v"}, "exactly one of"),
        ({"name": "v", "mount_path": "/v", "pvc": "p", "empty_dir": True}, "exactly one of"),
        ({"name": "v", "mount_path": "/v", "nfs_server": "s"}, "both nfs_server and nfs_path"),
        ({"name": "v", "mount_path": "rel", "pvc": "p"}, "mount_path"),
        ({"name": "Bad_Name", "mount_path": "/v", "pvc": "p"}, "name"),
    ],
)
def test_bad_volumes_are_refused_naming_the_field(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        JobSpec.model_validate({**JOB, "pod": {"volumes": [volume]}})


def test_bad_pod_settings_are_refused() -> None:
    bad = [
        {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        {"tolerations": [{"key": "k", "operator": "Maybe"}]},
        {"env_from_secrets": [{"name": "1BAD", "secret": "s", "key": "k"}]},
        {"service_account": "Not Valid"},
        {"volumes": [POD["volumes"][0], POD["volumes"][0]]},
        {"unknown": 1},
    ]
    for pod in bad:
        with pytest.raises(ValidationError):
            JobSpec.model_validate({**JOB, "pod": pod})
