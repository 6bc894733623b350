"""The invariants the team's writers share hold with several processes writing at once, on SQLite
and on PostgreSQL (where writers run concurrently, each kept in line by the lock on what it
contends: the job planner's and job rows', the audit chain's, one dataset's, one prompt's).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from sqlalchemy import func, select

from aifab.core import verify_audit
from aifab.core.db import get_engine, session_scope
from aifab.data.catalog import list_versions
from aifab.jobs import service
from aifab.jobs.tables import AttemptRow
from aifab.prompts.registry import list_prompts

#: Seconds from now at which the processes start their work together (after their imports).
_START_IN_S = 6.0


def _run_together(code: str, args: list[list[str]]) -> list[str]:
    """Run ``code`` in one process per argument list, starting their work at one moment;
    return each one's stdout (each must exit 0)."""
    get_engine()  # migrate before the processes start
    at = str(time.time() + _START_IN_S)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, at, *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for a in args
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [e.decode()[-2000:] for _, e in outs]
    return [o.decode() for o, _ in outs]


# A worker's cycle without processes: claim what fits (two jobs), finish them, plan again.
_PLANNER = textwrap.dedent(
    """
    import sys, time
    from aifab.jobs import scheduler, service
    from aifab.jobs.executors.base import AttemptStatus
    from aifab.jobs.placement import Node
    from aifab.jobs.resources import Resources
    room = Resources(0.2, 1024.0, 0)
    worker = scheduler.register_worker("local", room)
    nodes = [Node(f"node-{sys.argv[2]}", room)]
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    claimed = []
    while service.list_jobs(state="pending", limit=1):
        for c in scheduler.plan(worker, "local", nodes, lease_s=600.0):
            claimed.append(c.job_id)
            scheduler.finish(c.job_id, c.attempt, worker, AttemptStatus(True, [0]), "succeeded")
    print(" ".join(claimed))
    """
)


def test_two_planners_start_each_job_once(db_url: str) -> None:
    spec = {"run": {"command": ["true"]}, "resources": {"cpu": 0.1, "memory": 16}}
    ids = {service.submit({**spec, "name": f"j{i}"})["id"] for i in range(40)}
    a, b = (set(out.split()) for out in _run_together(_PLANNER, [["a"], ["b"]]))
    assert a | b == ids and not a & b
    with session_scope() as s:
        per_job = dict(
            s.execute(select(AttemptRow.job_id, func.count()).group_by(AttemptRow.job_id)).all()
        )
    assert per_job == dict.fromkeys(ids, 1)
    jobs = service.list_jobs(limit=100)
    assert {(j["state"], j["attempt"]) for j in jobs} == {("succeeded", 1)}


_SUBMITTER = textwrap.dedent(
    """
    import sys, time
    from aifab.jobs import service
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    for i in range(int(sys.argv[2])):
        service.submit({"name": f"s{i}", "run": {"command": ["true"]},
                        "resources": {"cpu": 0.1, "memory": 16}})
    """
)


def test_concurrent_audited_calls_keep_one_chain(db_url: str) -> None:
    before = verify_audit().events
    _run_together(_SUBMITTER, [["15"]] * 3)  # each submit appends its event in its transaction
    report = verify_audit()
    assert report.ok, report.problems
    assert report.events == before + 45


_COMMITTER = textwrap.dedent(
    """
    import sys, time
    from aifab.data.catalog import commit_query
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    tag = sys.argv[2]
    for i in range(4):
        commit_query("shared", f"SELECT '{tag}' AS w, {i} AS i", source=tag,
                     transform={"kind": "test"})
    """
)


def test_concurrent_commits_to_one_dataset_get_distinct_versions(db_url: str) -> None:
    _run_together(_COMMITTER, [["a"], ["b"]])
    versions = list_versions("shared")
    assert [v.version for v in versions] == list(range(1, 9))
    assert len({v.content_hash for v in versions}) == 8
    assert sorted(v.source for v in versions) == ["a"] * 4 + ["b"] * 4
    assert verify_audit().ok


_PROMPTER = textwrap.dedent(
    """
    import sys, time
    from aifab.prompts.registry import create_prompt
    time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
    for i in range(10):
        create_prompt("greet", f"Hello {{{{ name }}}} from {sys.argv[2]} #{i}")
    """
)


def test_concurrent_prompt_versions_are_numbered_in_turn(db_url: str) -> None:
    _run_together(_PROMPTER, [["a"], ["b"]])
    versions = list_prompts("greet")
    assert sorted(v["version"] for v in versions) == list(range(1, 21))
    assert len({v["template"] for v in versions}) == 20
