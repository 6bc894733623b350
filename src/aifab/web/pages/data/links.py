"""URLs of the data pages and of the pages other sections serve, and list windows."""

from __future__ import annotations

from typing import TypeVar
from urllib.parse import quote

from aifab.core.errors import NotFoundError
from aifab.web.paging import Page

__all__ = [
    "dataset_url",
    "deployment_url",
    "model_url",
    "parse_version",
    "run_url",
    "version_url",
    "window",
]

T = TypeVar("T")


def _q(part: str) -> str:
    return quote(str(part), safe="")


def dataset_url(name: str) -> str:
    """The page of a dataset (its versions)."""
    return f"/ui/data/{_q(name)}"


def version_url(ref: str) -> str:
    """The page of a version, from ``NAME@VERSION``."""
    name, _, version = ref.rpartition("@")
    return f"/ui/data/{_q(name)}/versions/{_q(version)}"


def run_url(run_id: str) -> str:
    """A training run's page (served by the runs and models section)."""
    return f"/ui/runs/{_q(run_id)}"


def model_url(name: str, version: int | str) -> str:
    """A model version's page (served by the runs and models section)."""
    return f"/ui/models/{_q(name)}/{_q(str(version))}"


def deployment_url(name: str) -> str:
    """A deployment's page (served by the deployments section)."""
    return f"/ui/deployments/{_q(name)}"


def parse_version(name: str, version: str) -> str:
    """``NAME@N`` for a version number from a URL; anything else is not found."""
    if not version.isdigit() or len(version) > 9:
        raise NotFoundError(f"dataset {name!r} has no version {version!r}")
    return f"{name}@{int(version)}"


def window(page: Page, rows: list[T]) -> tuple[list[T], str | None, str | None]:
    """A page of rows fetched from ``page.offset`` with ``page.limit + 1``: rows, prev, next."""
    prev = page.link(page.offset - page.limit) if page.offset > 0 else None
    nxt = page.link(page.offset + page.limit) if len(rows) > page.limit else None
    return rows[: page.limit], prev, nxt
