"""The Ray executor: one placement group per attempt, one actor per replica running its command.

aifab's policy picks the nodes (from ``ray.nodes()``); each bundle is pinned to its node with
Ray's ``node:<ip>`` resource, so Ray reserves exactly what the scheduler accounted for. Each
actor (:class:`~aifab.jobs.executors.ray_replica.ReplicaProcess`) runs its replica's argv as a
process group appending to the replica's log file: on a multi-node cluster either the workspace
is shared storage, or ``AIFAB_STORAGE_URI`` is set and each replica writes its log on its node
and ships it to the store in chunks (:mod:`aifab.jobs.log_ship`); aifab must be importable on
every node. Only this module imports ``ray``, and only inside functions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aifab.core.extras import quiet_ray_auth_notice, require
from aifab.core.settings import get_settings
from aifab.jobs.executors.base import AttemptStatus, Launch, remember_done, unknown_status
from aifab.jobs.executors.procs import kill_group
from aifab.jobs.executors.ray_replica import ReplicaProcess
from aifab.jobs.launch import node_env
from aifab.jobs.policy import Node
from aifab.jobs.resources import Resources

log = logging.getLogger(__name__)

NAMESPACE = "aifab"
#: Seconds to wait for Ray to reserve an attempt's placement group before the launch fails.
READY_TIMEOUT_S = 60.0
#: Seconds the other replicas of a failed gang get after SIGTERM before SIGKILL.
GANG_GRACE_S = 5.0
_KILL_WAIT_S = 10.0
_MIB = 1 << 20


@dataclass
class _Run:
    actors: list[Any]
    refs: list[Any]
    pg: Any
    ranks: list[int]
    gpus: int
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Replicas stopped because another of their gang failed (reported with exit code None).
    peer_stopped: set[int] = field(default_factory=set)


def _node_log(path: Path, node_home: str) -> tuple[str, tuple[str, str] | None]:
    """Where a replica writes its log on its node, and where it ships it (store URI, key).

    Without a store the workspace is a shared path and the log goes straight there; with one
    the log is written under the node's own workspace and shipped to the log's key.
    """
    settings = get_settings()
    if not settings.storage_uri:
        return str(path), None
    key = path.relative_to(settings.resolved_home).as_posix()
    return f"{node_home}/{key}", (settings.storage_uri, key)


def node_home(root: str, job_id: str, attempt: int, rank: int) -> str:
    """A replica's own ``AIFAB_HOME`` on its node (with a store), removed when it ends.

    One folder per replica: two replicas of a job on one node never share it, so each one's
    log and lake cache go with it without waiting for the other.
    """
    return f"{root}/{job_id}/attempt-{attempt}/replica-{rank}"


def _status(run: _Run) -> AttemptStatus:
    codes: list[int | None] = []
    reps: list[dict[str, Any]] = []
    for i, rank in enumerate(run.ranks):
        res = run.results.get(i, {})
        codes.append(None if i in run.peer_stopped else res.get("exit_code"))
        wall = float(res.get("wall_s", 0.0))
        reps.append(
            {"rank": rank, "exit_code": codes[-1], "wall_s": wall, "gpu_s": run.gpus * wall}
            | {k: float(res.get(k, 0.0)) for k in ("cpu_s", "peak_rss_mb")}
        )
    usage: dict[str, Any] = {k: sum(r[k] for r in reps) for k in ("wall_s", "cpu_s", "gpu_s")}
    usage["peak_rss_mb"] = max((float(r["peak_rss_mb"]) for r in reps), default=0.0)
    usage["replicas"] = reps
    return AttemptStatus(len(run.results) == len(run.ranks), codes, usage)


def runtime_env(address: str | None) -> dict[str, Any] | None:
    """The Ray ``runtime_env`` that lets nodes without aifab at this path run its replicas.

    Joining a cluster (any address), this aifab package is shipped as a ``py_modules`` entry:
    Ray uploads it once and puts it on every actor's ``PYTHONPATH``, which the replica
    processes inherit. Third-party packages (torch...) come from the nodes' image. A local
    instance (no address) shares this file system and needs nothing.
    """
    if not address or address == "local":
        return None
    import aifab

    package = Path(aifab.__file__).resolve().parent
    return {"py_modules": [str(package)], "env_vars": {"PYTHONUNBUFFERED": "1"}}


class RayExecutor:
    """Runs each attempt's replicas as Ray actors inside one placement group."""

    name = "ray"
    self_scheduling = False

    def __init__(
        self,
        address: str | None = None,
        *,
        namespace: str = NAMESPACE,
        ready_timeout_s: float = READY_TIMEOUT_S,
        num_cpus: int | None = None,
    ) -> None:
        """Connect on first use to ``address`` (None: ``RAY_ADDRESS`` or a local instance).

        Args:
            address: ``"auto"``, ``"ray://host:10001"``, ``"host:6379"``, or None.
            namespace: Ray namespace of the actors (named so another worker can reap them).
            ready_timeout_s: how long a launch waits for Ray to reserve its bundles.
            num_cpus: CPUs of a local instance this executor starts (default: all).
        """
        self.address = address
        self.namespace = namespace
        self.ready_timeout_s = ready_timeout_s
        self.num_cpus = num_cpus
        self._node_ips: dict[str, str] = {}
        self._runs: dict[str, _Run] = {}
        self._done: dict[str, AttemptStatus] = {}
        self._actor_cls: Any = None

    def _ray(self) -> Any:
        ray = require("ray", "the ray executor")

        if not ray.is_initialized():
            if (self.address or os.environ.get("RAY_ADDRESS") or "").startswith("ray://"):
                require("grpc", "the Ray client (a ray:// address)")
            quiet_ray_auth_notice()
            ray.init(
                address=self.address,
                namespace=self.namespace,
                num_cpus=None if self.address else self.num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env=runtime_env(self.address or os.environ.get("RAY_ADDRESS")),
            )
        return ray

    def nodes(self) -> list[Node]:
        """Alive Ray nodes with their CPU, memory and GPU totals, named by IP."""
        alive = [n for n in self._ray().nodes() if n.get("Alive")]
        per_ip = Counter(str(n["NodeManagerAddress"]) for n in alive)
        out = []
        for n in alive:
            ip = str(n["NodeManagerAddress"])
            name = ip if per_ip[ip] == 1 else f"{ip}/{str(n['NodeID'])[:8]}"
            self._node_ips[name] = ip
            res = n.get("Resources") or {}
            cap = Resources(
                float(res.get("CPU", 0.0)),
                float(res.get("memory", 0.0)) / _MIB,
                int(res.get("GPU", 0)),
            )
            out.append(Node(name, cap))
        return out

    def _bundle(self, r: Resources, node: str) -> dict[str, float]:
        bundle = {"CPU": r.cpu, "memory": float(int(r.memory_mb * _MIB))}
        if r.gpu:
            bundle["GPU"] = float(r.gpu)
        if node in self._node_ips:
            bundle[f"node:{self._node_ips[node]}"] = 0.001  # pins the bundle to that node
        return bundle

    def launch(self, launch: Launch) -> dict[str, Any]:
        """Reserve a placement group, start one actor per replica, start the replicas.

        Raises:
            TimeoutError: Ray could not reserve the bundles within ``ready_timeout_s``.
            OSError: a replica could not start (e.g. a missing working directory).
        """
        ray = self._ray()
        from ray.util.placement_group import placement_group, remove_placement_group

        r, reps = launch.resources, launch.replicas
        nodes = [rl.node for rl in reps]
        strategy = "STRICT_SPREAD" if len(set(nodes)) == len(nodes) > 1 else "PACK"
        tag = f"aifab-{launch.job_id}-{launch.attempt}"
        settings = get_settings()
        node_root = settings.ray_node_home.rstrip("/")
        pg = placement_group([self._bundle(r, n) for n in nodes], strategy=strategy, name=tag)
        actors: list[Any] = []
        try:
            ready, _ = ray.wait([pg.ready()], timeout=self.ready_timeout_s)
            if not ready:
                raise TimeoutError(
                    f"Ray could not reserve {len(reps)} x (cpu {r.cpu:g}, memory "
                    f"{r.memory_mb:g} MiB, gpu {r.gpu}) ({strategy}) within "
                    f"{self.ready_timeout_s:g} s"
                )
            ips = self._bundle_ips(pg)
            actors = [self._actor(pg, i, f"{tag}-r{rl.rank}", r) for i, rl in enumerate(reps)]
            port = ray.get(actors[0].free_port.remote(), timeout=self.ready_timeout_s)
            rendezvous = {"MASTER_ADDR": ips[0], "MASTER_PORT": str(port)}
            started = ray.get(
                [
                    a.start.remote(
                        launch.argv,
                        {**node_env(rl.env, home), **rendezvous},
                        None if settings.storage_uri else launch.workdir,
                        *_node_log(rl.log_path, home),
                        node_home=home if settings.storage_uri else None,
                    )
                    for a, rl in zip(actors, reps, strict=True)
                    for home in [node_home(node_root, launch.job_id, launch.attempt, rl.rank)]
                ],
                timeout=self.ready_timeout_s,
            )
        except BaseException as exc:
            for actor in actors:
                ray.kill(actor)
            remove_placement_group(pg)
            cause = getattr(exc, "cause", None)  # a RayTaskError: show what failed on the node
            if isinstance(cause, Exception):
                raise cause from None
            raise
        for rl, st in zip(reps, started, strict=True):
            if why := st.get("log_not_shipped"):
                log.warning(
                    "job %s replica %d: its log stays on its node, not shipped to the store: %s",
                    launch.job_id,
                    rl.rank,
                    why,
                )
        key = f"{launch.job_id}/{launch.attempt}"
        refs = [a.wait.remote() for a in actors]
        self._runs[key] = _Run(actors, refs, pg, [rl.rank for rl in reps], r.gpu)
        return {
            "executor": self.name,
            "key": key,
            "address": self.address,
            "namespace": self.namespace,
            "placement_group": pg.id.hex(),
            "actors": [f"{tag}-r{rl.rank}" for rl in reps],
            "master_addr": ips[0],
            "started_at": time.time(),
            "replicas": [
                {"rank": rl.rank, "node_ip": ip, "log": str(rl.log_path), **st}
                for rl, ip, st in zip(reps, ips, started, strict=True)
            ],
        }

    def _bundle_ips(self, pg: Any) -> list[str]:
        """The IP of the node Ray put each bundle on."""
        import ray
        from ray.util.placement_group import placement_group_table

        ip_of = {str(n["NodeID"]): str(n["NodeManagerAddress"]) for n in ray.nodes()}
        where = placement_group_table(pg)["bundles_to_node_id"]
        return [ip_of[str(where[i])] for i in range(len(where))]

    def _actor(self, pg: Any, index: int, name: str, r: Resources) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._actor_cls is None:
            self._actor_cls = ray.remote(ReplicaProcess)
        return self._actor_cls.options(
            name=name,
            namespace=self.namespace,
            max_concurrency=2,  # so that stop() runs while wait() waits on the replica
            num_cpus=r.cpu,
            num_gpus=r.gpu,
            memory=int(r.memory_mb * _MIB),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=index
            ),
        ).remote()

    def poll(self, handle: dict[str, Any]) -> AttemptStatus:
        """Collect finished replicas; if one of a gang failed, stop the others."""
        key = str(handle.get("key", ""))
        if key in self._done:
            return self._done[key]
        run = self._runs.get(key)
        if run is None:
            return unknown_status(handle)
        self._collect(run, timeout=0)
        failed = any(
            res.get("exit_code") not in (0, None) and i not in run.peer_stopped
            for i, res in run.results.items()
        )
        if failed and not run.peer_stopped:
            for i, actor in enumerate(run.actors):
                if i not in run.results:
                    run.peer_stopped.add(i)
                    actor.stop.remote(GANG_GRACE_S)
        status = _status(run)
        if status.done:
            self._close(key, run, status)
        return status

    def _collect(self, run: _Run, timeout: float) -> None:
        ray = self._ray()
        pending = [i for i in range(len(run.refs)) if i not in run.results]
        if not pending:
            return
        refs = [run.refs[i] for i in pending]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        for i in pending:
            if run.refs[i] in ready:
                try:
                    run.results[i] = dict(ray.get(run.refs[i]))
                except Exception as exc:  # noqa: BLE001 - a dead actor ends its replica
                    log.warning("replica %s of a Ray attempt died: %s", run.ranks[i], exc)
                    run.results[i] = {"exit_code": None}

    def stop(self, handle: dict[str, Any], grace_s: float = 5.0) -> AttemptStatus:
        """SIGTERM every replica, SIGKILL after ``grace_s``; kill the actors, free the group."""
        key = str(handle.get("key", ""))
        if key in self._done:
            return self._done[key]
        run = self._runs.get(key)
        if run is None:
            self.reap(handle)
            return unknown_status(handle)
        for i, actor in enumerate(run.actors):
            if i not in run.results:
                actor.stop.remote(grace_s)
        self._collect(run, timeout=grace_s + _KILL_WAIT_S)
        for i in range(len(run.refs)):
            run.results.setdefault(i, {"exit_code": None})  # unresponsive: its actor is killed
        status = _status(run)
        self._close(key, run, status)
        return status

    def _close(self, key: str, run: _Run, status: AttemptStatus) -> None:
        ray = self._ray()
        from ray.util.placement_group import remove_placement_group

        for actor in run.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        with contextlib.suppress(Exception):
            remove_placement_group(run.pg)
        self._runs.pop(key, None)
        remember_done(self._done, key, status)

    def reap(self, handle: dict[str, Any]) -> None:
        """Kill what is left of a dead worker's attempt, if Ray is reachable.

        Stops and kills its actors, kills its replicas' process groups on their nodes (actors
        die with their owner, orphaning what their replicas started) and frees its placement
        group.
        """
        try:
            ray = self._ray()
        except Exception as exc:  # noqa: BLE001 - Ray unreachable: nothing of it can be reached
            log.warning("cannot reach Ray to reap %s: %s", handle.get("key"), exc)
            return
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        for name in handle.get("actors", []):
            with contextlib.suppress(ValueError):  # ValueError: the actor is gone already
                actor = ray.get_actor(name, namespace=handle.get("namespace", self.namespace))
                with contextlib.suppress(Exception):
                    ray.get(actor.stop.remote(0.0), timeout=_KILL_WAIT_S)
                ray.kill(actor)
        kill = ray.remote(kill_group)
        refs = [
            kill.options(num_cpus=0, resources={f"node:{rep['node_ip']}": 0.001}).remote(
                rep["pgid"], rep.get("start")
            )
            for rep in handle.get("replicas", [])
            if rep.get("node_ip") and rep.get("pgid")
        ]
        with contextlib.suppress(Exception):
            ray.get(refs, timeout=_KILL_WAIT_S)
        if handle.get("placement_group"):
            pg_id = ray.PlacementGroupID(bytes.fromhex(handle["placement_group"]))
            with contextlib.suppress(Exception):
                remove_placement_group(PlacementGroup(pg_id))
