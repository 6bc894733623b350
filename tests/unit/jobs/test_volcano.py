"""Volcano executor: manifests (gang, queue, priority, resources), schema checks, dry runs, and
submission to a stand-in for a Kubernetes API server."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.jobs.executors.volcano import (
    VolcanoExecutor,
    dry_run_job,
    dry_run_manifest,
    dry_run_queue,
)
from aifab.jobs.launch import build_launch
from aifab.jobs.service import create_queue, get_job, submit
from aifab.jobs.spec import JobSpec
from aifab.jobs.volcano_schema import validate
from aifab.jobs.volcano_schema.manifests import priority_class_name, render_queue

JOB_ID = "job_0192f1c3a4b5_9f8e7d6c"
DDP = {
    "name": "train.ddp",
    "executor": "volcano",
    "replicas": 3,
    "min_available": 2,
    "queue": "gpu-q",
    "priority": 7,
    "preemptible": False,
    "max_retries": 2,
    "resources": {"cpu": 1.5, "memory": "3Gi", "gpu": 1},
    "env": {"FOO": "bar"},
    "run": {"command": ["python", "train.py", "--epochs", "2"]},
}


def render(spec: dict[str, Any] = DDP, attempt: int = 2, **options: Any) -> dict[str, Any]:
    job = JobSpec.model_validate(spec)
    launch = build_launch(JOB_ID, attempt, job, ("cluster",) * job.replicas)
    return VolcanoExecutor(**options).render_job(launch)


def env_of(manifest: dict[str, Any], task: int = 0) -> dict[str, str]:
    container = manifest["spec"]["tasks"][task]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"]}


def test_job_maps_gang_queue_priority_ranks_and_resources() -> None:
    m = render(namespace="ml", image="registry.example/aifab:1")
    validate(m)
    assert m["metadata"]["name"] == "train-ddp-9f8e7d6c-2"
    assert m["metadata"]["namespace"] == "ml"
    spec = m["spec"]
    assert spec["schedulerName"] == "volcano"
    assert (spec["minAvailable"], spec["queue"], spec["maxRetry"]) == (2, "gpu-q", 2)
    assert spec["priorityClassName"] == "aifab-p7"
    # Rank 0 is the pytorch plugin's master task, ranks 1-2 its workers.
    assert [(t["name"], t["replicas"], t["minAvailable"]) for t in spec["tasks"]] == [
        ("master", 1, 1),
        ("worker", 2, 1),
    ]
    assert spec["plugins"]["pytorch"] == ["--master=master", "--worker=worker", "--port=23456"]
    pod = spec["tasks"][1]["template"]
    assert pod["metadata"]["annotations"] == {"volcano.sh/preemptable": "false"}
    assert pod["metadata"]["labels"]["aifab.dev/job-id"] == JOB_ID
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example/aifab:1"
    assert container["command"] == ["python", "train.py", "--epochs", "2"]
    quantities = {"cpu": "1500m", "memory": "3072Mi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": quantities, "limits": quantities}
    env = env_of(m, 1)
    assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} & set(env)
    assert (env["FOO"], env["AIFAB_JOB_ID"], env["LOCAL_RANK"], env["OMP_NUM_THREADS"]) == (
        "bar",
        JOB_ID,
        "0",
        "1",
    )


def test_defaults_single_replica_and_priority_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIFAB_IMAGE", "from-env:2")
    m = render({"name": "one", "run": {"command": "echo hi"}, "priority": 0}, attempt=1)
    validate(m)
    spec = m["spec"]
    assert [t["name"] for t in spec["tasks"]] == ["master"]
    assert spec["minAvailable"] == 1 and spec["queue"] == "default"
    assert "priorityClassName" not in spec  # priority 0: the cluster's default class
    container = spec["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["image"] == "from-env:2"
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    assert [priority_class_name(p) for p in (0, 3, -3)] == [None, "aifab-p3", "aifab-pm3"]


def test_recipe_job_carries_its_config_and_the_boot_command_runs_it() -> None:
    spec = {"name": "noop-job", "run": {"recipe": "noop", "config": {"x": 1}}}
    m = render(spec, attempt=1)
    validate(m)
    env = env_of(m)
    assert json.loads(env["AIFAB_JOB_CONFIG_JSON"]) == {"x": 1}
    assert "AIFAB_JOB_CONFIG" not in env  # a path on the submitting machine
    command = m["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"]
    assert command == ["python", "-m", "aifab.jobs.replica"]
    # The pod's command, run here with the pod's environment, runs the recipe.
    done = subprocess.run(
        [sys.executable, *command[1:]],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_queue_manifest_from_an_aifab_queue() -> None:
    create_queue("gpu-q", weight=2.6, cpu=8, memory="16Gi", gpu=2, reclaimable=False)
    q = yaml.safe_load(dry_run_queue("gpu-q"))
    validate(q)
    assert q["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert q["metadata"]["name"] == "gpu-q"
    assert q["spec"] == {
        "weight": 3,
        "reclaimable": False,
        "capability": {"cpu": "8", "memory": "16384Mi", "nvidia.com/gpu": "2"},
    }
    assert render_queue("default")["spec"] == {"weight": 1, "reclaimable": True}
    with pytest.raises(NotFoundError, match="queue 'nope' does not exist"):
        dry_run_queue("nope")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda m: m["spec"].update(minAvailable="2"),
            "spec.minAvailable: '2' is not of type 'integer'",
        ),
        (lambda m: m["spec"].pop("tasks"), "spec: 'tasks' is a required property"),
        (lambda m: m["spec"].update(tasks=[]), "spec.tasks: [] should be non-empty"),
        (
            lambda m: m["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"][
                "limits"
            ].update(cpu="lots"),
            "spec.tasks[1].template.spec.containers[0].resources.limits.cpu: 'lots'",
        ),
        (lambda m: m["spec"].update(queue="GPU_q"), "spec.queue: 'GPU_q' does not match"),
        (lambda m: m["spec"].update(minAvaliable=2), "'minAvaliable' was unexpected"),
        (lambda m: m["spec"]["tasks"][0].update(name="Master"), "spec.tasks[0].name:"),
        (lambda m: m.update(kind="Pod"), "kind: expected one of 'Job', 'Queue', 'PriorityClass'"),
    ],
)
def test_broken_job_manifest_names_the_field(mutate: Any, message: str) -> None:
    m = copy.deepcopy(render())
    mutate(m)
    with pytest.raises(InvalidInputError) as err:
        validate(m)
    assert message in str(err.value)


def test_broken_queue_manifest_names_the_field() -> None:
    q = render_queue("ok")
    q["spec"]["weight"] = 0
    q["spec"]["capability"] = {"cpu": "-x"}
    with pytest.raises(InvalidInputError) as err:
        validate(q)
    assert "spec.capability.cpu" in str(err.value) and "spec.weight: 0 is less than" in str(
        err.value
    )


def test_dry_run_yaml_round_trips_and_rejects_bad_input(workspace: Path) -> None:
    text = dry_run_job(DDP, namespace="ml")
    assert "&id" not in text and "*id" not in text  # no YAML anchors for kubectl readers
    *_, job = yaml.safe_load_all(text)
    assert job == dry_run_manifest(DDP, namespace="ml")
    assert job["metadata"]["name"] == "train-ddp-dry-run-1"
    assert not (workspace / "logs").exists()  # a dry run writes nothing
    with pytest.raises(InvalidInputError, match="replicas"):
        dry_run_job({**DDP, "replicas": 0})
    with pytest.raises(InvalidInputError, match="spec.queue"):
        dry_run_job({**DDP, "queue": "Not_A_DNS_Name"})
    with pytest.raises(InvalidInputError, match="dry-run mode"):
        VolcanoExecutor(dry_run=True).poll({"namespace": "ml", "name": "x", "replicas": 1})


# --- a stand-in for a Kubernetes API server: only Volcano Job create/get/delete -------------

JOBS_PATH = "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs"


class _StandInApi(BaseHTTPRequestHandler):
    jobs: dict[str, dict[str, Any]]
    tokens: list[str]

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _name(self) -> str | None:
        prefix = JOBS_PATH + "/"
        return self.path.split("?")[0][len(prefix) :] if self.path.startswith(prefix) else None

    def do_POST(self) -> None:
        self.tokens.append(self.headers.get("Authorization", ""))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.path.startswith(JOBS_PATH):
            return self._reply(404, {"kind": "Status", "message": "the server could not find it"})
        name = body["metadata"]["name"]
        if name in self.jobs:
            return self._reply(409, {"kind": "Status", "message": f'jobs "{name}" exists'})
        self.jobs[name] = body
        self._reply(201, body)

    def do_GET(self) -> None:
        name = self._name()
        if name not in self.jobs:
            return self._reply(404, {"kind": "Status", "message": "not found"})
        self._reply(200, self.jobs[name])

    def do_DELETE(self) -> None:
        name = self._name()
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        if self.jobs.pop(name or "", None) is None:
            return self._reply(404, {"kind": "Status", "message": "not found"})
        self._reply(200, {"kind": "Status", "status": "Success"})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in_cluster(tmp_path: Path) -> Iterator[tuple[Path, type[_StandInApi]]]:
    """A kubeconfig pointing at a local stand-in API server; yields it and the handler class."""
    handler: type[_StandInApi] = type("Api", (_StandInApi,), {"jobs": {}, "tokens": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "stand-in",
                        "cluster": {"server": f"http://127.0.0.1:{server.server_port}"},
                    }
                ],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "stand-in", "user": "tester"}}],
                "current-context": "ctx",
            }
        )
    )
    yield kubeconfig, handler
    server.shutdown()
    server.server_close()


def test_submit_poll_stop_against_a_stand_in_api(stand_in_cluster: Any) -> None:
    kubeconfig, api = stand_in_cluster
    ex = VolcanoExecutor(namespace="ml", kubeconfig=kubeconfig)
    job = JobSpec.model_validate(DDP)
    launch = build_launch(JOB_ID, 1, job, ("cluster",) * 3)
    handle = ex.launch(launch)
    name = handle["name"]
    assert api.jobs[name] == ex.render_job(launch)
    assert api.tokens == ["Bearer test-token"]
    assert not ex.poll(handle).done  # no status yet: Pending
    api.jobs[name]["status"] = {"state": {"phase": "Running"}, "running": 3}
    assert not ex.poll(handle).done
    api.jobs[name]["status"] = {
        "state": {"phase": "Completed"},
        "succeeded": 3,
        "runningDuration": "1m2.5s",
    }
    status = ex.poll(handle)
    assert status.succeeded and status.exit_codes == [0, 0, 0]
    assert status.usage == {"wall_s": 187.5, "gpu_s": 187.5}
    api.jobs[name]["status"] = {"state": {"phase": "Failed"}, "succeeded": 1, "failed": 2}
    assert ex.poll(handle).exit_codes == [0, 1, 1]
    stopped = ex.stop(handle)
    assert stopped.done and name not in api.jobs
    assert ex.poll(handle).done  # the Job is gone
    ex.reap(handle)  # deleting a deleted Job is fine
    ex.launch(launch)
    with pytest.raises(ConflictError, match="already exists"):
        ex.launch(launch)


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    ex = VolcanoExecutor(kubeconfig=tmp_path / "nope")
    launch = build_launch(JOB_ID, 1, JobSpec.model_validate(DDP), ("cluster",) * 3)
    with pytest.raises(InvalidInputError, match="no usable Kubernetes configuration"):
        ex.launch(launch)
    assert ex.nodes() == []


def test_worker_runs_a_volcano_job_through_the_stand_in_api(
    stand_in_cluster: Any, make_worker: Any, drive_until: Any
) -> None:
    kubeconfig, api = stand_in_cluster
    worker = make_worker(
        executor="volcano", executor_options={"namespace": "ml", "kubeconfig": str(kubeconfig)}
    )
    job = submit({**DDP, "queue": "default", "resources": {"cpu": 64, "gpu": 8}})
    drive_until(worker, lambda: len(api.jobs) == 1)  # no local capacity needed: Volcano places
    (manifest,) = api.jobs.values()
    assert manifest["metadata"]["labels"]["aifab.dev/job-id"] == job["id"]
    manifest["status"] = {"state": {"phase": "Completed"}, "succeeded": 3}
    drive_until(worker, lambda: get_job(job["id"])["state"] == "succeeded")
    assert get_job(job["id"])["attempts"][0]["exit_codes"] == [0, 0, 0]


def test_dry_run_prints_the_queue_and_priority_class_the_job_references(workspace: Path) -> None:
    create_queue("gpu-q", weight=3.0)
    docs = list(yaml.safe_load_all(dry_run_job(DDP, namespace="ml", image="reg.example/aifab:1")))
    assert [d["kind"] for d in docs] == ["Queue", "PriorityClass", "Job"]
    queue, pclass, job = docs
    assert queue["metadata"]["name"] == job["spec"]["queue"] == "gpu-q"
    assert queue["spec"]["weight"] == 3
    assert pclass["metadata"]["name"] == job["spec"]["priorityClassName"] == "aifab-p7"
    assert pclass["value"] == 7
    for doc in docs:
        validate(doc)  # each against its schema
    low = list(yaml.safe_load_all(dry_run_job({**DDP, "priority": 0, "queue": "elsewhere"})))
    assert [d["kind"] for d in low] == ["Queue", "Job"]  # priority 0: the cluster default
    assert low[0]["metadata"]["name"] == "elsewhere"


def test_priority_class_schema_rejects_what_kubernetes_would() -> None:
    from aifab.jobs.volcano_schema.manifests import render_priority_class

    good = render_priority_class(-3)
    validate(good)
    with pytest.raises(InvalidInputError, match="value"):
        validate({**good, "value": 2_000_000_000})  # above the user range (1e9)
    with pytest.raises(InvalidInputError, match="preemptionPolicy"):
        validate({**good, "preemptionPolicy": "Sometimes"})


def test_job_timeout_is_the_pods_active_deadline() -> None:
    m = render({**DDP, "timeout": 90.5})
    validate(m)
    for task in m["spec"]["tasks"]:
        assert task["template"]["spec"]["activeDeadlineSeconds"] == 91
    assert "activeDeadlineSeconds" not in render(DDP)["spec"]["tasks"][0]["template"]["spec"]


def test_recipe_job_in_a_bare_python_image_is_warned_about(workspace: Path) -> None:
    recipe = {"name": "noop-job", "executor": "volcano", "run": {"recipe": "noop"}}
    text = dry_run_job(recipe, image="python:3.11-slim")
    assert text.startswith("# warning: image 'python:3.11-slim' is a bare Python image")
    assert "--image" in text.splitlines()[0]
    assert list(yaml.safe_load_all(text))[-1]["kind"] == "Job"  # still applies as is
    # (it still warns that no Secret gives the pods AIFAB_DB_URL: this spec has no pod section)
    assert "# warning: image" not in dry_run_job(recipe, image="ghcr.io/acme/aifab:0.1.0")
    assert dry_run_job(recipe, image="docker.io/library/python:3.12").startswith("# warning")
    assert not dry_run_job(DDP, image="python:3.11").startswith("#")  # a command job


def test_cli_dry_run_takes_an_image(cli: Any, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "noop-job", "run": {"recipe": "noop"}}))
    r = cli("job", "submit", spec, "--executor", "volcano", "--dry-run", "--image", "acme/aifab:2")
    assert r.exit_code == 0, r.stderr
    *_, job = yaml.safe_load_all(r.stdout)
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] == "acme/aifab:2"
