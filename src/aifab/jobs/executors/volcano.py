"""The Volcano executor: each attempt becomes a ``batch.volcano.sh/v1alpha1`` Job on Kubernetes.

Volcano places the pods itself (``self_scheduling``), so aifab only renders, validates (against
the JSON schemas shipped in ``aifab/jobs/volcano_schema``) and submits. How aifab maps onto it:

- gang: ``spec.minAvailable`` = the job's ``min_available`` (default: all replicas).
- ranks: rank 0 is task ``master`` (1 pod), ranks 1.. are task ``worker``; Volcano's ``pytorch``
  plugin sets ``MASTER_ADDR``, ``MASTER_PORT`` (23456), ``WORLD_SIZE`` and ``RANK`` per pod (the
  ``svc`` plugin gives pods stable host names). One task serving as both master and worker would
  number ranks from 1, so two tasks it is. Each pod holds one replica: ``LOCAL_RANK=0``.
- priority: ``priorityClassName`` ``aifab-p<n>`` (``aifab-pm<n>`` for ``-n``); priority 0 uses the
  cluster default. Create the classes once (``volcano_schema.manifests.render_priority_class``).
- retries: a failed pod aborts the Job and aifab starts a new attempt (a new Job) while
  ``max_retries`` allows; Volcano's ``maxRetry`` only restarts Jobs whose pods were evicted.
- commands run in ``image`` (``pod.image``, option, ``AIFAB_IMAGE``, or ``python:3.11-slim``);
  recipe jobs need an image with aifab installed (the Dockerfile). ``AIFAB_*`` paths are passed
  through, and so are ``AIFAB_STORAGE_URI`` and ``AIFAB_TRACKING_URI``: with an object store a
  pod with an empty workspace reads datasets and keeps checkpoints there. Secrets (the DB URL,
  storage credentials) come from Kubernetes Secrets (``pod.env_from_secrets``), never inlined.
- ``pod`` adds volumes with mounts (PVC, hostPath, NFS, emptyDir), ``nodeSelector``,
  tolerations, ``imagePullSecrets`` and ``serviceAccountName`` (:mod:`aifab.jobs.pod_spec`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aifab.core.config import as_config
from aifab.core.errors import (
    AifabError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    first_line,
)
from aifab.core.extras import require
from aifab.core.settings import get_settings
from aifab.jobs.executors.base import AttemptStatus, Launch, ReplicaLaunch
from aifab.jobs.launch import node_env
from aifab.jobs.pod_reach import reach_warnings, store_env
from aifab.jobs.pod_spec import PodSpec
from aifab.jobs.policy import Node
from aifab.jobs.resources import Resources
from aifab.jobs.spec import JobSpec
from aifab.jobs.volcano_schema import validate
from aifab.jobs.volcano_schema.manifests import (
    k8s_name,
    priority_class_name,
    render_priority_class,
    render_queue,
    resource_list,
    to_yaml,
)

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
DEFAULT_IMAGE = "python:3.11-slim"
PYTORCH_PORT = 23456
#: A pod's local workspace when the shared one is on an object store (writable by any user).
POD_HOME = "/tmp/aifab"
#: Set per pod by Volcano's pytorch plugin, so never copied from aifab's launch environment.
_PLUGIN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_FAILED = ("Failed", "Aborted", "Terminated")


def _pod_env(
    env: Mapping[str, str], spec: Mapping[str, Any], log_key: str | None = None
) -> list[dict[str, str]]:
    settings = get_settings()
    out = {k: v for k, v in env.items() if k not in _PLUGIN_ENV}
    run = spec.get("run") or {}
    if run.get("recipe"):
        # The submitter's config file is not in the pod: the config travels in the manifest.
        out.pop("AIFAB_JOB_CONFIG", None)
        out["AIFAB_JOB_CONFIG_JSON"] = json.dumps(run.get("config") or {})
        if log_key and settings.storage_uri:
            # The recipe's runner copies its output to the store too (Kubernetes keeps it only
            # as the pod's log), for ``aifab job logs`` on any machine.
            out["AIFAB_JOB_LOG_KEY"] = log_key
    # With a store, the pod's own scratch workspace: paths under the submitter's (checkpoints)
    # map to the same store keys under the pod's, as for a Ray node.
    out = node_env(out, POD_HOME)
    # Not secrets: where runs are tracked, the store's endpoint and region (MinIO). The DB URL
    # carries a password: a Secret.
    if settings.tracking_uri:
        out.setdefault("AIFAB_TRACKING_URI", settings.tracking_uri)
    for key, value in store_env().items():
        out.setdefault(key, value)
    out.update({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    return [{"name": k, "value": v} for k, v in sorted(out.items())]


def _log_key(launch: Launch) -> str | None:
    """The store key of each pod's log, ``{rank}`` filled in by the pod (its ``RANK``)."""
    settings = get_settings()
    if not (launch.replicas and settings.storage_uri):
        return None
    try:
        folder = launch.replicas[0].log_path.parent.relative_to(settings.resolved_home)
    except ValueError:  # a dry run's launch names no workspace path
        return None
    return f"{folder.as_posix()}/replica-{{rank}}.log"


class VolcanoExecutor:
    """Submits each attempt as a Volcano Job; Volcano gangs, queues and places its pods."""

    name = "volcano"
    self_scheduling = True

    def __init__(
        self,
        namespace: str = "default",
        image: str | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        dry_run: bool = False,
    ) -> None:
        """Configure; the Kubernetes client is built on first use.

        Args:
            namespace: namespace of the Jobs.
            image: container image of every replica (default ``AIFAB_IMAGE`` or a Python image).
            kubeconfig: kubeconfig file (default ``KUBECONFIG``, ``~/.kube/config`` or in-cluster).
            dry_run: render only; any call that would reach the cluster raises.
        """
        self.namespace = namespace
        self.image = image or os.environ.get("AIFAB_IMAGE") or DEFAULT_IMAGE
        self.kubeconfig = str(kubeconfig) if kubeconfig is not None else None
        self.dry_run = dry_run
        self._objects: Any = None

    def nodes(self) -> list[Node]:
        """Nothing: Volcano places pods, so the worker plans no capacity of its own."""
        return []

    def render_job(self, launch: Launch) -> dict[str, Any]:
        """The Volcano Job for one attempt (not validated: see :func:`validate`)."""
        n = len(launch.replicas)
        gang = int(launch.spec.get("min_available") or n)
        name = k8s_name(launch.job_id, launch.name, launch.attempt)
        labels = {
            "app.kubernetes.io/managed-by": "aifab",
            "aifab.dev/job-id": launch.job_id,
            "aifab.dev/attempt": str(launch.attempt),
        }
        annotations = {}
        if not launch.spec.get("preemptible", True):
            annotations["volcano.sh/preemptable"] = "false"
        container = self._container(launch)
        pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        PodSpec.model_validate(launch.spec.get("pod") or {}).apply(pod, container)
        if launch.timeout_s:  # the pod fails at the deadline, and PodFailed aborts the Job
            pod["activeDeadlineSeconds"] = max(1, math.ceil(launch.timeout_s))
        template = {"metadata": {"labels": dict(labels), "annotations": annotations}, "spec": pod}
        tasks = [{"name": "master", "replicas": 1, "minAvailable": 1, "template": template}]
        if n > 1:
            worker = {"name": "worker", "replicas": n - 1, "minAvailable": gang - 1}
            tasks.append({**worker, "template": copy.deepcopy(template)})
        spec: dict[str, Any] = {
            "schedulerName": "volcano",
            "queue": launch.queue,
            "minAvailable": gang,
            "maxRetry": int(launch.spec.get("max_retries", 0)),
            "plugins": {
                "pytorch": ["--master=master", "--worker=worker", f"--port={PYTORCH_PORT}"],
                "svc": [],
            },
            "policies": [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "AbortJob"},
            ],
            "tasks": tasks,
        }
        if (pc := priority_class_name(launch.priority)) is not None:
            spec["priorityClassName"] = pc
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Job",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "spec": spec,
        }

    def _container(self, launch: Launch) -> dict[str, Any]:
        r = launch.resources
        quantities = resource_list(r.cpu, r.memory_mb, r.gpu)
        recipe = (launch.spec.get("run") or {}).get("recipe")
        return {
            "name": "replica",
            "image": self.image,
            "command": ["python", "-m", "aifab.jobs.replica"] if recipe else list(launch.argv),
            "env": _pod_env(
                launch.replicas[0].env if launch.replicas else {}, launch.spec, _log_key(launch)
            ),
            "resources": {"requests": quantities, "limits": dict(quantities)},
        }

    def launch(self, launch: Launch) -> dict[str, Any]:
        """Render, validate and create the Job; return ``{namespace, name, ...}`` as the handle."""
        manifest = self.render_job(launch)
        validate(manifest)
        for warning in manifest_warnings(manifest, launch.spec):
            log.warning("job %s: %s", launch.job_id, warning)
        name, api = manifest["metadata"]["name"], self._api()
        try:
            api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, manifest)
        except Exception as exc:
            raise _api_error(exc, f"creating Volcano Job {self.namespace}/{name}") from None
        return {
            "executor": self.name,
            "namespace": self.namespace,
            "name": name,
            "replicas": len(launch.replicas),
            "gpu": launch.resources.gpu,
            "started_at": time.time(),
        }

    def poll(self, handle: dict[str, Any]) -> AttemptStatus:
        """Map the Job's ``status.state.phase`` to a status (API errors: not done yet).

        Volcano reports pod counts, not exit codes: a failed Job reports 0 for each succeeded
        pod and 1 for the others.
        """
        n, api = int(handle.get("replicas", 1)), self._api()
        try:
            obj = api.get_namespaced_custom_object(
                GROUP, VERSION, handle["namespace"], PLURAL, handle["name"]
            )
        except Exception as exc:  # noqa: BLE001 - a flaky API server must not stop the worker
            if getattr(exc, "status", None) == 404:
                return AttemptStatus(True, [None] * n, {})
            log.warning("polling Volcano Job %s failed: %s", handle.get("name"), exc)
            return AttemptStatus(False, [None] * n, {})
        status = obj.get("status") or {}
        phase = (status.get("state") or {}).get("phase", "Pending")
        usage = _usage(status, n, int(handle.get("gpu", 0)))
        if phase == "Completed":
            return AttemptStatus(True, [0] * n, usage)
        if phase in _FAILED:
            ok = min(int(status.get("succeeded") or 0), n)
            codes: list[int | None] = [0 if i < ok else 1 for i in range(n)]
            return AttemptStatus(True, codes, usage)
        return AttemptStatus(False, [None] * n, usage)

    def stop(self, handle: dict[str, Any], grace_s: float = 5.0) -> AttemptStatus:
        """Delete the Job; its pods get ``grace_s`` seconds between SIGTERM and SIGKILL."""
        self._delete(handle, grace_s)
        return AttemptStatus(True, [None] * int(handle.get("replicas", 1)), {})

    def reap(self, handle: dict[str, Any]) -> None:
        """Delete a dead worker's Job (errors are logged: recovery of other jobs goes on)."""
        try:
            self._delete(handle, 0.0)
        except AifabError as exc:
            log.warning("could not delete Volcano Job %s: %s", handle.get("name"), exc)

    def _delete(self, handle: dict[str, Any], grace_s: float) -> None:
        from kubernetes import client

        api = self._api()
        body = client.V1DeleteOptions(
            propagation_policy="Background", grace_period_seconds=max(0, round(grace_s))
        )
        try:
            api.delete_namespaced_custom_object(
                GROUP, VERSION, handle["namespace"], PLURAL, handle["name"], body=body
            )
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise _api_error(exc, f"deleting Volcano Job {handle.get('name')}") from None

    def _api(self) -> Any:
        """The CustomObjectsApi, built on first use from the kubeconfig (or in-cluster config)."""
        if self.dry_run:
            raise InvalidInputError(
                "the Volcano executor is in dry-run mode: it renders manifests "
                "(aifab job submit --dry-run) but submits nothing"
            )
        if self._objects is None:
            require("kubernetes", "the Volcano executor")
            from kubernetes import client

            self._objects = client.CustomObjectsApi(_api_client(self.kubeconfig))
        return self._objects


def _api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    try:
        return config.new_client_from_config(config_file=kubeconfig)
    except (config.ConfigException, OSError) as exc:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(cfg)
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise InvalidInputError(
            f"no usable Kubernetes configuration at {where} ({exc}): pass kubeconfig, "
            "set KUBECONFIG, or run inside the cluster"
        ) from None


def _api_error(exc: Exception, doing: str) -> Exception:
    """A one-line aifab error for a Kubernetes API failure."""
    status = getattr(exc, "status", None)
    message = first_line(exc)
    body = getattr(exc, "body", None)
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message", message)
    if status == 404:
        return NotFoundError(
            f"{doing}: not found ({message}); is Volcano installed and does the namespace exist?"
        )
    if status == 409:
        return ConflictError(f"{doing}: already exists ({message})")
    if status in (400, 422):
        return InvalidInputError(f"{doing}: rejected by the API server: {message}")
    return AifabError(f"{doing}: {message}")


def _usage(status: Mapping[str, Any], replicas: int, gpu: int) -> dict[str, Any]:
    """Wall and GPU time from ``status.runningDuration`` (a Go duration such as ``1m2.5s``)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9.]+)(ms|us|µs|ns|h|m|s)", str(status.get("runningDuration") or ""))
    if not parts:
        return {}
    seconds = sum(float(v) * units[u] for v, u in parts)
    return {"wall_s": seconds * replicas, "gpu_s": seconds * replicas * gpu}


def _dry_launch(spec: JobSpec) -> Launch:
    """A Launch for rendering only: no job id yet, nothing written to the workspace."""
    threads = str(max(1, math.floor(spec.resources.cpu)))
    env = {
        **spec.env,
        "AIFAB_JOB_NAME": spec.name,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "PYTHONUNBUFFERED": "1",
    }
    if spec.run.recipe is not None:
        env["AIFAB_JOB_RECIPE"] = spec.run.recipe
    replicas = [ReplicaLaunch(i, "cluster", env, Path(os.devnull)) for i in range(spec.replicas)]
    return Launch(
        job_id="dry-run",
        attempt=1,
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        argv=list(spec.run.command or [sys.executable, "-m", "aifab.jobs.replica"]),
        workdir=spec.workdir,
        resources=Resources(spec.resources.cpu, spec.resources.memory, spec.resources.gpu),
        replicas=replicas,
        timeout_s=spec.timeout,
        spec=spec.model_dump(mode="json"),
    )


def dry_run_manifest(
    spec: JobSpec | Path | str | Mapping[str, Any],
    *,
    namespace: str = "default",
    image: str | None = None,
) -> dict[str, Any]:
    """The validated Volcano Job a job spec would become (its id shows as ``dry-run``).

    Raises:
        InvalidInputError: a bad job spec, or a manifest the schema rejects (e.g. a queue name
            that is not a DNS name).
    """
    job = as_config(JobSpec, spec, source="job spec")
    if image and job.pod.image:  # the command line overrides the file, as every option does
        job = job.model_copy(update={"pod": job.pod.model_copy(update={"image": image})})
    manifest = VolcanoExecutor(namespace, image, dry_run=True).render_job(_dry_launch(job))
    validate(manifest)
    return manifest


def dry_run_job(
    spec: JobSpec | Path | str | Mapping[str, Any],
    *,
    namespace: str = "default",
    image: str | None = None,
) -> str:
    """The YAML ``aifab job submit --executor volcano --dry-run`` prints (``kubectl`` ready).

    The stream holds what the Job references, then the Job: its Queue (the aifab queue's
    weight and capability when it exists here), its PriorityClass (priority other than 0),
    each validated. ``image`` overrides ``pod.image``. What the pods would lack (aifab in a
    bare Python image, a setting they cannot reach) is a warning comment on top.
    """
    job = as_config(JobSpec, spec, source="job spec")
    manifest = dry_run_manifest(job, namespace=namespace, image=image)
    referenced = [_queue_manifest(job.queue)]
    if priority_class_name(job.priority) is not None:
        referenced.append(render_priority_class(job.priority))
    for m in referenced:
        validate(m)
    head = "".join(
        f"# warning: {w}\n" for w in manifest_warnings(manifest, job.model_dump(mode="json"))
    )
    return head + to_yaml(*referenced, manifest)


def manifest_warnings(manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """What the Job's pods would lack: aifab in their image, or a setting they can reach."""
    container = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    recipe = bool((spec.get("run") or {}).get("recipe"))
    out = [w] if (w := image_warning(str(container["image"]), recipe=recipe)) else []
    env = {e["name"]: e.get("value") for e in container.get("env", []) if "value" in e}
    secrets = {e["name"] for e in container.get("env", []) if "valueFrom" in e}
    return out + reach_warnings(env, secrets, recipe=recipe)


#: Images without aifab: official Python images, by any registry path or tag.
_BARE_PYTHON = re.compile(r"^(?:[\w.\-]+(?::\d+)?/)*(?:library/)?python(?:[:@].*)?$")


def image_warning(image: str, *, recipe: bool) -> str | None:
    """Why ``image`` cannot run a recipe job (a bare Python image has no aifab), or None."""
    if not recipe or not _BARE_PYTHON.match(image):
        return None
    return (
        f"image {image!r} is a bare Python image without aifab; recipe jobs run "
        "`python -m aifab.jobs.replica` and need the aifab image (Dockerfile in the source "
        "tree): pass --image or set AIFAB_IMAGE"
    )


def _queue_manifest(name: str) -> dict[str, Any]:
    """The Volcano Queue for aifab queue ``name`` (its settings when it exists here)."""
    from aifab.jobs.service import list_queues

    known = {q["name"]: q for q in list_queues()}
    return render_queue(known.get(name, name))


def dry_run_queue(name: str) -> str:
    """The validated Volcano Queue YAML for the aifab queue ``name``.

    Raises:
        NotFoundError: no such queue.
    """
    from aifab.jobs.service import list_queues

    queues = {q["name"]: q for q in list_queues()}
    if name not in queues:
        raise NotFoundError(f"queue {name!r} does not exist (queues: {', '.join(sorted(queues))})")
    manifest = render_queue(queues[name])
    validate(manifest)
    return to_yaml(manifest)
