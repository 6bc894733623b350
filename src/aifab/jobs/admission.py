"""Admission checks run at job submit, by name: ``jobs`` never imports the layers that own them.

A check takes the validated :class:`~aifab.jobs.spec.JobSpec` and raises an ``AifabError``
naming why the job may not be queued (``ops`` adds the team budget check here by name).
"""

from __future__ import annotations

from aifab.core.registry import Registry
from aifab.jobs.spec import JobSpec

#: Check name -> ``"module:function"``; the function takes a JobSpec and returns nothing.
ADMISSION_CHECKS = Registry("admission check", {"budget": "aifab.ops.cost.budget:check_job_budget"})


def check_admission(job: JobSpec) -> None:
    """Run every admission check on ``job``; the first refusal propagates."""
    for name in ADMISSION_CHECKS.names():
        ADMISSION_CHECKS.get(name)(job)
