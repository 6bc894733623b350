"""The worker loop: heartbeat, recover lost jobs, plan, launch, watch, stop, finish.

``aifab worker`` runs it in the foreground; ``aifab serve`` runs it in a thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aifab.core.registry import Registry
from aifab.jobs import scheduler
from aifab.jobs.executors import Executor, get_executor
from aifab.jobs.executors.base import AttemptStatus
from aifab.jobs.launch import build_launch
from aifab.jobs.policy import Policy
from aifab.jobs.resources import ZERO

log = logging.getLogger(__name__)

#: Periodic duties a worker hosts besides jobs: name -> ``"module:function(worker_id)"``.
#: Higher layers own them (schedules live in ``aifab.ops``), so they are reached by name.
DUTIES = Registry("worker duty", {"schedules": "aifab.ops.schedules:run_due"})
DUTY_INTERVAL_S = 1.0


@dataclass
class _Attempt:
    job_id: str
    attempt: int
    handle: dict[str, Any]
    started: float
    timeout_s: float | None


@dataclass
class WorkerOptions:
    """How a worker behaves."""

    executor: str = "local"
    lease_s: float = 15.0
    poll_s: float = 0.2
    policy: Policy = "aifab"
    #: Exit once this worker has had nothing to run for this long (None: run forever); jobs
    #: it cannot place (too big for it, or for another executor) do not keep it alive.
    exit_when_idle_s: float | None = None
    executor_options: dict[str, Any] = field(default_factory=dict)


class Worker:
    """One scheduler + executor loop bound to one executor's capacity."""

    def __init__(
        self, options: WorkerOptions | None = None, executor: Executor | None = None
    ) -> None:
        self.options = options or WorkerOptions()
        self.executor = executor or get_executor(
            self.options.executor, **self.options.executor_options
        )
        nodes = self.executor.nodes()
        capacity = ZERO
        for n in nodes:
            capacity = capacity + n.capacity
        self.id = scheduler.register_worker(self.executor.name, capacity)
        self.running: dict[tuple[str, int], _Attempt] = {}
        self._last_beat = 0.0

    def run(self, stop: threading.Event | None = None) -> None:
        """Loop until ``stop`` is set (or idle long enough); stop running attempts on exit."""
        stop = stop or threading.Event()
        idle_since = time.time()
        # Heartbeats run on their own thread: a slow stop (grace period) or launch must not
        # let this worker's leases expire and its healthy jobs be declared lost.
        beat_stop = threading.Event()
        beat = threading.Thread(
            target=self._beat, args=(beat_stop,), daemon=True, name=f"aifab-heartbeat-{self.id}"
        )
        beat.start()
        duties = threading.Thread(
            target=self._duties, args=(beat_stop,), daemon=True, name=f"aifab-duties-{self.id}"
        )
        duties.start()
        try:
            while not stop.is_set():
                busy = self.step()
                if busy or self.running:
                    idle_since = time.time()
                elif (
                    self.options.exit_when_idle_s is not None
                    and time.time() - idle_since >= self.options.exit_when_idle_s
                ):
                    break
                if not busy:
                    stop.wait(self.options.poll_s)
        finally:
            for att in list(self.running.values()):
                status = self.executor.stop(att.handle)
                scheduler.finish(
                    att.job_id, att.attempt, self.id, status, "preempted", "worker shut down"
                )
            beat_stop.set()
            beat.join()
            duties.join(timeout=5.0)
            scheduler.retire_worker(self.id)

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(self.options.lease_s / 3):
            try:
                scheduler.heartbeat(self.id, self.options.lease_s)
            except Exception:  # noqa: BLE001 - a DB hiccup must not kill the heartbeat
                log.exception("heartbeat failed")

    def _duties(self, stop: threading.Event) -> None:
        """Run each duty (due schedules...) every second, on a thread of its own."""
        while not stop.wait(DUTY_INTERVAL_S):
            for name in DUTIES.names():
                try:
                    DUTIES.get(name)(self.id)
                except ModuleNotFoundError:
                    continue  # the package providing it is not installed
                except Exception:  # noqa: BLE001 - a failing duty must not stop the worker
                    log.exception("worker duty %s failed", name)

    def step(self) -> bool:
        """One iteration; True if anything started or finished."""
        now = time.time()
        if now - self._last_beat >= self.options.lease_s / 3:
            scheduler.heartbeat(self.id, self.options.lease_s)
            scheduler.recover_lost(self.executor.reap)
            scheduler.mark_unserved()
            self._last_beat = now
        changed = self._watch()
        claims = scheduler.plan(
            self.id,
            self.executor.name,
            self.executor.nodes(),
            lease_s=self.options.lease_s,
            self_scheduling=self.executor.self_scheduling,
            policy=self.options.policy,
        )
        for claim in claims:
            self._start(claim)
        return changed or bool(claims)

    def _start(self, claim: scheduler.Claim) -> None:
        try:
            launch = build_launch(claim.job_id, claim.attempt, claim.spec, claim.nodes)
            handle = self.executor.launch(launch)
        except Exception as exc:  # noqa: BLE001 - a launch failure fails the attempt, not the worker
            log.exception("launch of %s failed", claim.job_id)
            scheduler.finish(
                claim.job_id,
                claim.attempt,
                self.id,
                AttemptStatus(True, [None] * len(claim.nodes)),
                "failed",
                f"launch failed: {exc}",
            )
            return
        scheduler.record_handle(claim.job_id, claim.attempt, handle)
        self.running[(claim.job_id, claim.attempt)] = _Attempt(
            claim.job_id, claim.attempt, handle, time.time(), claim.spec.timeout
        )

    def _watch(self) -> bool:
        changed = False
        ownership = scheduler.ownership(self.id, list(self.running))
        for key, att in list(self.running.items()):
            owned, stop_request = ownership[key]
            outcome, reason = None, None
            if not owned:
                status, outcome, reason = self.executor.stop(att.handle), "lost", "superseded"
            elif stop_request:
                status = self.executor.stop(att.handle)
                outcome = "cancelled" if stop_request == "cancel" else "preempted"
            elif att.timeout_s is not None and time.time() - att.started > att.timeout_s:
                status, outcome = self.executor.stop(att.handle), "timeout"
                reason = f"timed out after {att.timeout_s:g} s"
            else:
                try:
                    status = self.executor.poll(att.handle)
                except Exception:  # noqa: BLE001 - a flaky backend must not stop the loop
                    log.exception("polling %s attempt %s failed", att.job_id, att.attempt)
                    continue
                if status.done:
                    outcome = "succeeded" if status.succeeded else "failed"
            if outcome is None:
                continue
            if outcome != "lost":
                scheduler.finish(att.job_id, att.attempt, self.id, status, outcome, reason)
            del self.running[key]
            changed = True
        return changed


def run_until_final(
    job_id: str,
    executor: str = "local",
    stop: threading.Event | None = None,
    *,
    cancel_on_interrupt: bool = False,
    on_log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run a worker in this thread until ``job_id`` is final; return the job.

    Call it from a thread that outlives the job (the main thread): local replicas die with
    the thread that started them. The worker also runs other pending jobs meanwhile, and
    re-queues whatever is still running when it returns. ``stop`` ends it early.

    Args:
        job_id: the job to wait for.
        executor: the executor the worker runs attempts on.
        stop: set to end the wait early (the job is re-queued).
        cancel_on_interrupt: a foreground caller's job: Ctrl-C cancels it rather than leave it
            re-queued for the next worker, and the KeyboardInterrupt re-raised names it.
        on_log: called with each line the job's first replica logs meanwhile (its progress).
    """
    following = threading.Event()
    if on_log is not None:
        from aifab.jobs.logs import follow_lines

        follower = follow_lines(job_id, on_log, following)
    try:
        return _run_until_final(job_id, executor, stop)
    except KeyboardInterrupt:
        if not cancel_on_interrupt:
            raise
        raise KeyboardInterrupt(_cancel_interrupted(job_id)) from None
    finally:
        following.set()
        if on_log is not None:
            follower.join(timeout=5.0)  # the log's last lines, read after the job ended


def _cancel_interrupted(job_id: str) -> str:
    """Cancel ``job_id`` after Ctrl-C (the worker has just re-queued it); say what happened."""
    from aifab.core.errors import ConflictError
    from aifab.jobs.service import cancel, get_job

    job = get_job(job_id)
    try:
        cancel(job_id)
    except ConflictError:  # it ended on its own just before the interrupt
        return f"job {job_id} ({job['name']}) already {job['state']}"
    return f"cancelled job {job_id} ({job['name']})"


def _run_until_final(job_id: str, executor: str, stop: threading.Event | None) -> dict[str, Any]:
    from aifab.jobs.service import FINAL, get_job

    stop = stop or threading.Event()
    done = threading.Event()

    def watch() -> None:
        while not (stop.wait(0.25) or done.is_set()):
            if get_job(job_id)["state"] in FINAL:
                stop.set()

    if get_job(job_id)["state"] not in FINAL:
        worker = Worker(WorkerOptions(executor=executor, poll_s=0.05))
        watcher = threading.Thread(target=watch, name="aifab-wait", daemon=True)
        watcher.start()
        try:
            worker.run(stop)
        finally:
            done.set()
    return get_job(job_id)
