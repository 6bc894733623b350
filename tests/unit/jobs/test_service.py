"""Job and queue service functions: validation, state rules, queue CRUD and audit events.

The machine is the 4-CPU, 8 GiB, GPU-less one of the ``machine`` fixture (conftest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aifab.core import audit_events
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.jobs import (
    cancel,
    create_queue,
    delete_queue,
    get_job,
    list_jobs,
    list_queues,
    retry,
    scheduler,
    submit,
    update_queue,
)
from aifab.jobs.executors.base import AttemptStatus
from aifab.jobs.policy import Node
from aifab.jobs.resources import Resources


def spec(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "t",
        "run": {"command": ["true"]},
        "resources": {"cpu": 1, "memory": "64Mi"},
    }
    base.update(over)
    return base


def start_one(job_id: str) -> tuple[str, int]:
    """Run one real scheduling cycle that claims ``job_id``; return (worker id, attempt)."""
    wid = scheduler.register_worker("local", Resources(4, 4096, 0))
    claims = scheduler.plan(wid, "local", [Node("local", Resources(4, 4096, 0))], lease_s=30)
    assert [c.job_id for c in claims] == [job_id]
    return wid, claims[0].attempt


# --- submit ----------------------------------------------------------------------------------


def test_submit_queues_a_pending_job_with_an_event() -> None:
    job = submit(spec(priority=3))
    assert job["state"] == "pending" and job["queue"] == "default" and job["priority"] == 3
    assert job["spec"]["workdir"]  # filled with the submitter's directory
    shown = get_job(job["id"])
    assert [e["kind"] for e in shown["events"]] == ["submitted"]
    assert shown["attempts"] == []
    assert shown["reason"] == "waiting for a scheduling cycle"


def test_submit_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: y\nrun:\n  recipe: noop\nresources:\n  cpu: 0.5\n  memory: 128Mi\n")
    job = submit(path)
    assert job["name"] == "y" and job["spec"]["resources"] == {
        "cpu": 0.5,
        "memory": 128.0,
        "gpu": 0,
    }


def test_submit_names_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: y\nrun:\n  command: [true]\nresources:\n  cpus: 2\n")
    with pytest.raises(InvalidInputError) as err:
        submit(path)
    assert str(path) in err.value.message
    assert "resources.cpus: unknown key" in err.value.message


def test_submit_names_a_bad_value() -> None:
    with pytest.raises(InvalidInputError, match=r"resources\.memory.*cannot read memory 'lots'"):
        submit(spec(resources={"memory": "lots"}))
    with pytest.raises(InvalidInputError, match="give exactly one of 'recipe' or 'command'"):
        submit(spec(run={}))
    with pytest.raises(InvalidInputError, match=r"min_available \(3\) exceeds replicas \(2\)"):
        submit(spec(replicas=2, min_available=3))


def test_submit_rejects_an_unknown_recipe() -> None:
    with pytest.raises(InvalidInputError) as err:
        submit(spec(run={"recipe": "train-the-world"}))
    assert "run.recipe: unknown recipe 'train-the-world'" in err.value.message
    assert "noop" in err.value.message and "sleep" in err.value.message


def test_submit_rejects_a_gang_bigger_than_the_machine() -> None:
    with pytest.raises(InvalidInputError) as err:
        submit(spec(replicas=3, resources={"cpu": 2, "memory": "64Mi"}))
    assert "this machine has cpu 4" in err.value.message
    assert "cpu 6 > 4" in err.value.message
    with pytest.raises(InvalidInputError, match="gpu 1 > 0"):
        submit(spec(resources={"gpu": 1}))


def test_submit_rejects_a_gang_bigger_than_the_queue_capability() -> None:
    create_queue("small", cpu=1, memory="1Gi")
    with pytest.raises(InvalidInputError) as err:
        submit(spec(queue="small", replicas=2, resources={"cpu": 1, "memory": "64Mi"}))
    assert "queue 'small' capability allows less: cpu 2 > 1" in err.value.message


def test_submit_to_a_missing_queue_lists_the_queues() -> None:
    with pytest.raises(NotFoundError, match=r"queue 'nope' does not exist \(queues: default\)"):
        submit(spec(queue="nope"))


def test_volcano_jobs_skip_the_local_machine_check() -> None:
    job = submit(spec(executor="volcano", resources={"cpu": 64, "gpu": 8}))
    assert job["executor"] == "volcano"


# --- list / show -----------------------------------------------------------------------------


def test_list_filters_and_orders_newest_first() -> None:
    create_queue("other")
    a = submit(spec(name="a"))
    b = submit(spec(name="b", queue="other"))
    c = submit(spec(name="c"))
    cancel(c["id"])
    assert [j["id"] for j in list_jobs()] == [c["id"], b["id"], a["id"]]
    assert [j["id"] for j in list_jobs(state="pending")] == [b["id"], a["id"]]
    assert [j["id"] for j in list_jobs(queue="other")] == [b["id"]]
    assert [j["id"] for j in list_jobs(limit=1)] == [c["id"]]
    assert list_jobs(state="running") == []


def test_show_missing_job() -> None:
    with pytest.raises(NotFoundError, match="job 'job-nope' not found"):
        get_job("job-nope")


# --- cancel / retry --------------------------------------------------------------------------


def test_cancel_pending_then_retry() -> None:
    job = submit(spec())
    done = cancel(job["id"])
    assert done["state"] == "cancelled" and done["finished_at"] is not None
    with pytest.raises(ConflictError, match="already cancelled"):
        cancel(job["id"])
    again = retry(job["id"])
    assert again["state"] == "pending" and again["finished_at"] is None
    assert [e["kind"] for e in get_job(job["id"])["events"]] == ["submitted", "cancel", "retry"]


def test_retry_refuses_active_and_succeeded_jobs() -> None:
    job = submit(spec())
    with pytest.raises(ConflictError, match="is pending: only failed or cancelled jobs retry"):
        retry(job["id"])
    wid, attempt = start_one(job["id"])
    with pytest.raises(ConflictError, match="is running"):
        retry(job["id"])
    scheduler.finish(job["id"], attempt, wid, AttemptStatus(True, [0]), "succeeded")
    with pytest.raises(ConflictError, match="is succeeded"):
        retry(job["id"])
    with pytest.raises(ConflictError, match="already succeeded"):
        cancel(job["id"])


def test_cancel_running_asks_the_worker_then_it_is_cancelled() -> None:
    job = submit(spec())
    wid, attempt = start_one(job["id"])
    asked = cancel(job["id"])
    assert asked["state"] == "running" and asked["stop_request"] == "cancel"
    assert scheduler.ownership(wid, [(job["id"], attempt)]) == {
        (job["id"], attempt): (True, "cancel")
    }
    scheduler.finish(job["id"], attempt, wid, AttemptStatus(True, [-15]), "cancelled")
    shown = get_job(job["id"])
    assert shown["state"] == "cancelled"
    assert shown["attempts"][0]["state"] == "cancelled"


def test_failed_job_retries_with_the_next_attempt() -> None:
    job = submit(spec())
    wid, attempt = start_one(job["id"])
    scheduler.finish(job["id"], attempt, wid, AttemptStatus(True, [3]), "failed")
    failed = get_job(job["id"])
    assert failed["state"] == "failed" and failed["exit_code"] == 3
    assert failed["reason"] == "exit code 3"
    retry(job["id"])
    _, second = start_one(job["id"])
    assert second == 2


# --- queues ----------------------------------------------------------------------------------


def test_queue_crud() -> None:
    made = create_queue("team", weight=2, cpu=8, memory="16Gi", gpu=1, reclaimable=False)
    assert made == {
        "name": "team",
        "weight": 2.0,
        "capability": {"cpu": 8.0, "memory_mb": 16384.0, "gpu": 1},
        "reclaimable": False,
        "pending": 0,
        "running": 0,
    }
    changed = update_queue("team", weight=0.5, reclaimable=True)
    assert changed["weight"] == 0.5 and changed["reclaimable"] is True
    assert changed["capability"] == made["capability"]  # untouched when not given
    assert update_queue("team", gpu=2)["capability"] == {"gpu": 2}
    assert [q["name"] for q in list_queues()] == ["default", "team"]
    delete_queue("team")
    assert [q["name"] for q in list_queues()] == ["default"]


def test_queue_errors() -> None:
    create_queue("team")
    with pytest.raises(ConflictError, match="queue 'team' already exists"):
        create_queue("team")
    with pytest.raises(InvalidInputError, match="weight must be > 0"):
        create_queue("zero", weight=0)
    with pytest.raises(InvalidInputError, match="capability memory: cannot read memory"):
        create_queue("bad", memory="much")
    with pytest.raises(InvalidInputError, match="weight must be > 0"):
        update_queue("team", weight=-1)
    with pytest.raises(NotFoundError, match="queue 'ghost' does not exist"):
        update_queue("ghost", weight=2)
    with pytest.raises(NotFoundError):
        delete_queue("ghost")


def test_default_queue_cannot_be_deleted() -> None:
    with pytest.raises(ConflictError, match="default queue cannot be deleted"):
        delete_queue("default")


def test_queue_with_active_jobs_cannot_be_deleted() -> None:
    create_queue("busy")
    job = submit(spec(queue="busy"))
    assert {q["name"]: q["pending"] for q in list_queues()} == {"busy": 1, "default": 0}
    with pytest.raises(ConflictError, match=r"queue 'busy' still has 1 pending or running job"):
        delete_queue("busy")
    cancel(job["id"])
    delete_queue("busy")


# --- audit -----------------------------------------------------------------------------------


def test_mutations_are_audited() -> None:
    job = submit(spec())
    cancel(job["id"])
    retry(job["id"])
    create_queue("team")
    update_queue("team", weight=3)
    delete_queue("team")
    events = audit_events(limit=20)
    got = [(e["action"], e["object"]) for e in reversed(events)]
    assert got == [
        ("job.submit", f"job:{job['id']}"),
        ("job.cancel", f"job:{job['id']}"),
        ("job.retry", f"job:{job['id']}"),
        ("queue.create", "queue:team"),
        ("queue.update", "queue:team"),
        ("queue.delete", "queue:team"),
    ]
    assert {e["actor"] for e in events} == {"user:test"}


def test_rejected_submit_records_nothing() -> None:
    with pytest.raises(InvalidInputError):
        submit(spec(run={"recipe": "nope"}))
    assert audit_events(action="job.") == []
    assert list_jobs() == []
