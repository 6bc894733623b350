"""Layer 2, resources: jobs, queues with quotas, gang scheduling, preemption, executors.

Service functions (the CLI, server and pipeline call these): ``submit``, ``list_jobs``,
``get_job``, ``cancel``, ``retry``, ``create_queue``, ``update_queue``, ``delete_queue``,
``list_queues``; ``tail_log`` follows a job's log; ``queue_usage`` and ``attempt_timeline``
show what the scheduler holds and held; ``Worker`` runs the scheduling loop.
"""

from __future__ import annotations

from aifab.jobs.logs import LogCursor, LogTail, log_path, tail_log
from aifab.jobs.service import (
    cancel,
    create_queue,
    delete_queue,
    get_job,
    list_jobs,
    list_queues,
    retry,
    submit,
    update_queue,
)
from aifab.jobs.spec import JobSpec
from aifab.jobs.usage import attempt_timeline, queue_usage

__all__ = [
    "JobSpec",
    "cancel",
    "create_queue",
    "delete_queue",
    "get_job",
    "list_jobs",
    "list_queues",
    "retry",
    "submit",
    "update_queue",
    "LogCursor",
    "LogTail",
    "log_path",
    "tail_log",
    "attempt_timeline",
    "queue_usage",
]
