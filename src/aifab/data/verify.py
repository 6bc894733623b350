"""Checking the lake: every object a version uses is present and its rows match its hash."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from aifab.data import lake
from aifab.data.catalog import list_datasets, list_versions


@dataclass
class ObjectProblem:
    """One object that cannot be trusted, and the versions that read it."""

    object: str
    problem: str
    versions: list[str]


@dataclass
class LakeReport:
    """The outcome of :func:`verify_lake`."""

    checked: int
    problems: list[ObjectProblem] = field(default_factory=list)

    @property
    def ok(self) -> int:
        """How many objects are sound."""
        return self.checked - len(self.problems)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "checked": self.checked,
            "ok": self.ok,
            "problems": [asdict(p) for p in self.problems],
        }


def verify_lake(name: str | None = None) -> LakeReport:
    """Re-hash every lake object used by the versions of ``name`` (default: every dataset).

    Read-only: a corrupt object is reported, not repaired (committing the same content again
    repairs it, see :func:`aifab.data.lake.put_object`).

    Raises:
        NotFoundError: ``name`` is not a dataset.
    """
    names = [name] if name is not None else [d["name"] for d in list_datasets()]
    users: dict[str, list[str]] = {}
    for dataset in names:
        for v in list_versions(dataset):
            for key in v.objects:
                users.setdefault(key, []).append(v.ref)
    con = lake.connect()
    try:
        problems = [
            ObjectProblem(key, problem, refs)
            for key, refs in sorted(users.items())
            if (problem := lake.object_problem(con, key)) is not None
        ]
    finally:
        con.close()
    return LakeReport(checked=len(users), problems=problems)
