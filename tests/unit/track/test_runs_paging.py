"""Paging through runs in the store's own query, and reading one artifact file back."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.track import list_runs, read_artifact, start_run


@pytest.fixture(scope="module")
def twelve_runs(home: Path) -> list[str]:
    """Twelve runs in their own experiment, oldest first."""
    ids = []
    for i in range(12):
        with start_run("t-paging", run_name=f"r{i:02d}", system_metrics=False) as run:
            run.log_metrics({"loss": 1.0 / (i + 1)}, step=0)
        ids.append(run.id)
    return ids


def test_pages_cover_every_run_once_newest_first(twelve_runs: list[str]) -> None:
    everything = [r["id"] for r in list_runs("t-paging", limit=100)]
    assert set(everything) == set(twelve_runs)
    paged = []
    for offset in range(0, 12, 5):
        paged += [r["id"] for r in list_runs("t-paging", limit=5, offset=offset)]
    assert paged == everything
    assert list_runs("t-paging", limit=5, offset=10) == list_runs("t-paging", limit=100)[10:]
    assert list_runs("t-paging", limit=5, offset=12) == []
    assert list_runs("t-paging", limit=5, offset=500) == []


def test_bad_paging_is_named(twelve_runs: list[str]) -> None:
    with pytest.raises(InvalidInputError, match="offset"):
        list_runs("t-paging", offset=-1)
    with pytest.raises(InvalidInputError, match="limit"):
        list_runs("t-paging", limit=0)


def test_read_artifact_returns_the_file_and_names_what_is_missing(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text('{"ok": true}')
    with start_run("t-paging-artifacts", system_metrics=False) as run:
        run.log_artifact(report, "exports/onnx")
    assert read_artifact(run.id, "exports/onnx/report.json") == b'{"ok": true}'
    with pytest.raises(NotFoundError, match="no artifact file"):
        read_artifact(run.id, "exports/onnx/missing.json")
    with pytest.raises(NotFoundError, match="no artifact file"):
        read_artifact(run.id, "exports/onnx")  # a directory is not a file
    with pytest.raises(InvalidInputError, match="over 4"):
        read_artifact(run.id, "exports/onnx/report.json", max_bytes=4)
