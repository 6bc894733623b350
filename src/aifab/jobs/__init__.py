"""Layer 2, resources: jobs, queues with quotas, gang scheduling, preemption, executors.

Service functions (the CLI, server and pipeline call these): ``submit``, ``list_jobs``,
``get_job``, ``cancel``, ``retry``, ``create_queue``, ``update_queue``, ``delete_queue``,
``list_queues``; ``Worker`` runs the scheduling loop.
"""

from __future__ import annotations

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
]
