"""``aifab job``, ``aifab queue`` and ``aifab worker`` through the real CLI entry point."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.jobs.detect import machine_resources

Cli = Callable[..., Any]


@pytest.fixture(autouse=True)
def small_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIFAB_WORKER_CPU", "4")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "4096")
    monkeypatch.setenv("AIFAB_WORKER_GPU", "0")
    machine_resources.cache_clear()
    yield
    machine_resources.cache_clear()


def job_file(tmp_path: Path, body: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def command_job(tmp_path: Path, command: str, **extra: str) -> Path:
    lines = [
        "name: t",
        "run:",
        f"  command: {json.dumps(command)}",
        "resources:",
        "  cpu: 0.1",
        "  memory: 64Mi",
    ]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return job_file(tmp_path, "\n".join(lines) + "\n")


def submit(cli: Cli, path: Path, *args: str) -> dict[str, Any]:
    r = cli("job", "submit", path, "--json", *args)
    assert r.exit_code == 0, r.stderr
    return dict(json.loads(r.stdout))


def show(cli: Cli, job_id: str) -> dict[str, Any]:
    r = cli("job", "show", job_id, "--json")
    assert r.exit_code == 0, r.stderr
    return dict(json.loads(r.stdout))


# --- queues ----------------------------------------------------------------------------------


def test_queue_lifecycle(cli: Cli) -> None:
    r = cli("queue", "create", "team", "--weight", "2", "--cpu", "8", "--memory", "8Gi", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["capability"] == {"cpu": 8.0, "memory_mb": 8192.0}
    r = cli("queue", "update", "team", "--gpu", "2", "--no-reclaimable", "--json")
    q = json.loads(r.stdout)
    assert q["capability"] == {"gpu": 2} and q["reclaimable"] is False and q["weight"] == 2.0
    r = cli("queue", "list")
    assert r.exit_code == 0 and "team" in r.stdout and "default" in r.stdout
    assert cli("queue", "delete", "team").stdout == "deleted queue team\n"
    names = [q["name"] for q in json.loads(cli("queue", "list", "--json").stdout)]
    assert names == ["default"]


def test_queue_errors_are_one_line(cli: Cli) -> None:
    r = cli("queue", "delete", "default")
    assert r.exit_code == 1 and r.stderr == "error: the default queue cannot be deleted\n"
    r = cli("queue", "create", "bad", "--memory", "lots")
    assert r.exit_code == 2 and r.stderr.startswith("error: capability memory: cannot read")
    r = cli("queue", "update", "ghost", "--weight", "2")
    assert r.exit_code == 1 and "queue 'ghost' does not exist" in r.stderr


# --- submit ----------------------------------------------------------------------------------


def test_submit_list_show_cancel_retry(cli: Cli, tmp_path: Path) -> None:
    r = cli("job", "submit", command_job(tmp_path, "true"))
    assert r.exit_code == 0, r.stderr
    job_id = r.stdout.strip()
    assert job_id.startswith("job")
    listed = json.loads(cli("job", "list", "--state", "pending", "--json").stdout)
    assert [j["id"] for j in listed] == [job_id]
    r = cli("job", "list")
    assert job_id in r.stdout and "pending" in r.stdout
    r = cli("job", "show", job_id)
    assert r.exit_code == 0 and "waiting for a scheduling cycle" in r.stdout
    assert "submitted" in r.stdout  # the events table
    r = cli("job", "cancel", job_id)
    assert r.stdout == f"{job_id} cancelled: cancelled by user\n"
    r = cli("job", "cancel", job_id)
    assert r.exit_code == 1 and r.stderr == f"error: job {job_id} already cancelled\n"
    r = cli("job", "retry", job_id, "--json")
    assert json.loads(r.stdout)["state"] == "pending"
    assert [e["kind"] for e in show(cli, job_id)["events"]] == ["submitted", "cancel", "retry"]


def test_submit_options_override_the_file(cli: Cli, tmp_path: Path) -> None:
    cli("queue", "create", "fast")
    job = submit(cli, command_job(tmp_path, "true"), "--queue", "fast", "--priority", "7")
    assert (job["queue"], job["priority"]) == ("fast", 7)
    assert job["spec"]["queue"] == "fast"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("name: t\nrun: {command: 'true'}\nresources: {cpus: 2}\n", "resources.cpus: unknown key"),
        (
            "name: t\nrun: {recipe: fly}\n",
            "run.recipe: unknown recipe 'fly' (known: classify, contrastive, custom, echo, kge, "
            "lm, lora, noop, pipeline, sleep)",
        ),
        (
            "name: t\nrun: {command: 'true'}\nreplicas: 3\nresources: {cpu: 2}\n",
            "this machine has cpu 4, memory 4096 MiB, gpu 0: cpu 6 > 4",
        ),
        ("- just\n- a list\n", "a job spec must be a mapping"),
        ("name: t\nrun: {command: [true]\n", "invalid YAML"),
    ],
)
def test_bad_submissions_exit_2_with_one_line(
    cli: Cli, tmp_path: Path, body: str, expected: str
) -> None:
    r = cli("job", "submit", job_file(tmp_path, body))
    assert r.exit_code == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ")
    assert expected in r.stderr
    assert json.loads(cli("job", "list", "--json").stdout) == []


def test_bad_executor_override_is_named(cli: Cli, tmp_path: Path) -> None:
    r = cli("job", "submit", command_job(tmp_path, "true"), "--executor", "mainframe")
    assert r.exit_code == 2 and "executor: Input should be 'local', 'ray' or 'volcano'" in r.stderr


def test_capability_rejection_names_the_numbers(cli: Cli, tmp_path: Path) -> None:
    cli("queue", "create", "tiny", "--cpu", "0.5")
    path = job_file(tmp_path, "name: t\nrun: {command: 'true'}\nreplicas: 2\nresources: {cpu: 1}\n")
    r = cli("job", "submit", path, "--queue", "tiny")
    assert r.exit_code == 2
    assert "queue 'tiny' capability allows less: cpu 2 > 0.5" in r.stderr


def test_missing_file_and_missing_job(cli: Cli, tmp_path: Path) -> None:
    r = cli("job", "submit", tmp_path / "nope.yaml")
    assert r.exit_code == 2 and "nope.yaml: file not found" in r.stderr
    r = cli("job", "show", "job-nope")
    assert (
        r.exit_code == 1 and r.stderr == "error: job 'job-nope' not found (see 'aifab job list')\n"
    )


def test_dry_run_validates_without_submitting(cli: Cli, tmp_path: Path) -> None:
    r = cli("job", "submit", command_job(tmp_path, "echo hi"), "--dry-run", "--priority", "3")
    assert r.exit_code == 0, r.stderr
    assert "priority: 3" in r.stdout and "- echo" in r.stdout
    assert "nothing was submitted" in r.stderr
    assert json.loads(cli("job", "list", "--json").stdout) == []


def test_volcano_dry_run_prints_manifests(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("aifab.jobs.executors.volcano")
    r = cli("job", "submit", command_job(tmp_path, "true"), "--executor", "volcano", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "kind: Job" in r.stdout and "batch.volcano.sh" in r.stdout
    assert json.loads(cli("job", "list", "--json").stdout) == []


# --- running jobs ----------------------------------------------------------------------------


def test_submit_wait_with_local_worker_then_logs(cli: Cli, tmp_path: Path) -> None:
    r = cli(
        "job", "submit", command_job(tmp_path, "echo hello-from-job"), "--wait", "--local-worker"
    )
    assert r.exit_code == 0, r.stderr
    job_id, final = r.stdout.splitlines()
    assert final == f"{job_id} succeeded"
    assert cli("job", "logs", job_id).stdout == "hello-from-job\n"
    assert cli("job", "logs", job_id, "-f").stdout == "hello-from-job\n"  # final: returns at once
    job = show(cli, job_id)
    assert job["attempts"][0]["state"] == "succeeded"
    assert job["usage"]["wall_s"] > 0
    r = cli("job", "show", job_id)
    assert "succeeded" in r.stdout and "attempts" in r.stdout


def test_submit_wait_reports_failure(cli: Cli, tmp_path: Path) -> None:
    path = job_file(
        tmp_path, "name: t\nrun: {command: [sh, -c, 'exit 3']}\nresources: {cpu: 0.1}\n"
    )
    r = cli("job", "submit", path, "--wait", "--local-worker", "--json")
    assert r.exit_code == 1
    job = json.loads(r.stdout)
    assert (job["state"], job["exit_code"], job["reason"]) == ("failed", 3, "exit code 3")


def test_submit_wait_without_a_worker_gives_up(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.cli import jobs

    monkeypatch.setattr(jobs, "NO_WORKER_GRACE_S", 0.3)
    r = cli("job", "submit", command_job(tmp_path, "true"), "--wait")
    assert r.exit_code == 1
    assert "no 'local' worker is running" in r.stderr and "aifab worker" in r.stderr


def test_logs_errors(cli: Cli, tmp_path: Path) -> None:
    job_id = submit(cli, command_job(tmp_path, "true"))["id"]
    r = cli("job", "logs", job_id)
    assert r.exit_code == 1 and "no log yet" in r.stderr
    r = cli("job", "logs", job_id, "--replica", "1")
    assert r.exit_code == 2 and "has ranks 0..0" in r.stderr


def test_worker_runs_jobs_then_exits_when_idle(cli: Cli, tmp_path: Path) -> None:
    first = submit(cli, command_job(tmp_path, "echo one"))["id"]
    second = submit(cli, command_job(tmp_path, "echo two"))["id"]
    r = cli("worker", "--exit-when-idle", "0.3", "--lease", "3", "--poll", "0.05")
    assert r.exit_code == 0, r.stderr
    assert "executor local, cpu 4" in r.stdout and r.stdout.endswith("stopped\n")
    assert [show(cli, j)["state"] for j in (first, second)] == ["succeeded", "succeeded"]
    assert cli("job", "logs", second).stdout == "two\n"


def test_worker_stops_cleanly_on_sigterm(cli: Cli, tmp_path: Path) -> None:
    job_id = submit(cli, command_job(tmp_path, "sleep 30"))["id"]

    def term_once_running() -> None:
        from aifab.jobs.service import get_job

        while get_job(job_id)["state"] != "running":
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=term_once_running, daemon=True).start()
    r = cli("worker", "--lease", "3", "--poll", "0.05")
    assert r.exit_code == 0, r.stderr
    job = show(cli, job_id)
    assert job["state"] == "pending" and "worker shut down" in job["reason"]
    assert job["attempts"][0]["state"] == "preempted"
    assert signal.getsignal(signal.SIGTERM) is before  # handler restored


def test_invalid_worker_options(cli: Cli) -> None:
    r = cli("worker", "--policy", "random")
    assert r.exit_code == 2 and "expected aifab or fifo" in r.stderr


def test_logs_follow_streams_a_running_job(cli: Cli, tmp_path: Path) -> None:
    from aifab.jobs.worker import Worker, WorkerOptions

    path = command_job(tmp_path, "sh -c 'echo start; sleep 0.5; echo end'")
    job_id = submit(cli, path)["id"]
    stop = threading.Event()
    worker = Worker(WorkerOptions(lease_s=3, poll_s=0.05))
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        r = cli("job", "logs", job_id, "-f")
    finally:
        stop.set()
        thread.join(10)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "start\nend\n"
    assert show(cli, job_id)["state"] == "succeeded"
