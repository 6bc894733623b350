"""Turning a claimed job into a :class:`Launch`: command line, environment, logs, checkpoints."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from collections import Counter
from pathlib import Path

from aifab.core.settings import get_settings
from aifab.core.workspace import get_workspace
from aifab.jobs.executors.base import Launch, ReplicaLaunch
from aifab.jobs.spec import JobSpec


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for MASTER_PORT)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def attempt_dir(job_id: str, attempt: int) -> Path:
    """Where an attempt's logs and config live."""
    return get_workspace().logs / "jobs" / job_id / f"attempt-{attempt}"


def result_path(job_id: str, attempt: int) -> Path:
    """Where rank 0 of a recipe writes what its ``main`` returned (run id, metrics, model)."""
    return attempt_dir(job_id, attempt) / "result.json"


def checkpoint_dir(job_id: str) -> Path:
    """Checkpoints survive attempts, so a preempted or re-queued job resumes where it stopped."""
    return get_workspace().artifacts / "jobs" / job_id / "checkpoints"


def build_launch(
    job_id: str, attempt: int, spec: JobSpec, nodes: tuple[str, ...], master_addr: str = "127.0.0.1"
) -> Launch:
    """Prepare one attempt: argv, per-replica environment (torch.distributed style) and logs."""
    adir = attempt_dir(job_id, attempt)
    adir.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint_dir(job_id)
    ckpt.mkdir(parents=True, exist_ok=True)
    base = {
        **spec.env,
        "AIFAB_HOME": str(get_workspace().root),
        "AIFAB_JOB_ID": job_id,
        "AIFAB_JOB_NAME": spec.name,
        "AIFAB_JOB_ATTEMPT": str(attempt),
        "AIFAB_CHECKPOINT_DIR": str(ckpt),
        "AIFAB_JOB_RESULT": str(result_path(job_id, attempt)),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(len(nodes)),
        # Limit each replica's math libraries to the cores it was given.
        "OMP_NUM_THREADS": str(max(1, math.floor(spec.resources.cpu))),
        "MKL_NUM_THREADS": str(max(1, math.floor(spec.resources.cpu))),
        "PYTHONUNBUFFERED": "1",
    }
    if spec.run.recipe is not None:
        config = adir / "config.json"
        config.write_text(json.dumps(spec.run.config))
        argv = [sys.executable, "-m", "aifab.jobs.replica"]
        base.update({"AIFAB_JOB_RECIPE": spec.run.recipe, "AIFAB_JOB_CONFIG": str(config)})
    else:
        argv = list(spec.run.command or [])
    per_node = Counter(nodes)
    seen: Counter[str] = Counter()
    replicas = []
    for rank, node in enumerate(nodes):
        env = {
            **base,
            "RANK": str(rank),
            "LOCAL_RANK": str(seen[node]),
            "LOCAL_WORLD_SIZE": str(per_node[node]),
        }
        seen[node] += 1
        replicas.append(ReplicaLaunch(rank, node, env, adir / f"replica-{rank}.log"))
    return Launch(
        job_id=job_id,
        attempt=attempt,
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        argv=argv,
        workdir=spec.workdir or os.getcwd(),
        resources=spec.resources.to_resources(),
        replicas=replicas,
        timeout_s=spec.timeout,
        spec=spec.model_dump(mode="json"),
    )


def node_env(env: dict[str, str], node_home: str) -> dict[str, str]:
    """A replica's environment for a node that cannot see this machine's workspace.

    With ``AIFAB_STORAGE_URI`` set, paths under the submitter's ``AIFAB_HOME`` (checkpoints,
    the result file) map to the same keys under ``node_home``, which the store mirrors; the
    recipe config travels inline (``AIFAB_JOB_CONFIG_JSON``). Without a store the environment
    is returned as it is (the workspace must then be a shared path).
    """
    settings = get_settings()
    if not settings.storage_uri:
        return dict(env)
    out = dict(env)
    if config := out.pop("AIFAB_JOB_CONFIG", None):
        out["AIFAB_JOB_CONFIG_JSON"] = Path(config).read_text()
    head = str(settings.resolved_home)
    out = {k: node_home + v[len(head) :] if v.startswith(head) else v for k, v in out.items()}
    out["AIFAB_HOME"] = node_home
    out["AIFAB_STORAGE_URI"] = settings.storage_uri
    if settings.tracking_uri:
        out["AIFAB_TRACKING_URI"] = settings.tracking_uri
    return out
