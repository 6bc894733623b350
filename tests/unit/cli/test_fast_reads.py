"""The listing commands' fast path answers exactly as the service functions, without the ORM."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from aifab.cli import fast_reads
from aifab.core.db import reset_engines
from aifab.core.schema_version import VERSION_TABLE
from aifab.core.settings import get_settings
from aifab.core.sqlite_read import metadata_db_path
from aifab.data import ingest, list_datasets

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def datasets(tmp_path: Path, workspace: Path) -> None:
    """Three datasets, one with two versions of different widths, one with a description."""
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp_path / "b.csv").write_text("x,y,z\n1,2,3\n")
    (tmp_path / "c.jsonl").write_text('{"k": "v", "n": 1.5}\n')
    ingest("zeta", tmp_path / "a.csv")
    ingest("zeta", tmp_path / "b.csv")
    ingest("alpha", tmp_path / "c.jsonl")
    ingest("mid", tmp_path / "a.csv")
    # Derived datasets get descriptions (commit_query's); set one directly for brevity.
    with sqlite3.connect(workspace / "aifab.db") as conn:
        conn.execute("UPDATE datasets SET description = 'as zeta@1' WHERE name = 'mid'")


def test_list_datasets_matches_the_service_function(datasets: None) -> None:
    fast = fast_reads.list_datasets()
    assert fast is not None
    assert fast == list_datasets()
    assert [r["name"] for r in fast] == ["alpha", "mid", "zeta"]
    assert fast[1]["description"] == "as zeta@1"
    assert fast[2] | {"updated_at": 0} == {
        "name": "zeta",
        "latest": "zeta@2",
        "versions": 2,
        "rows": 1,
        "columns": 3,
        "updated_at": 0,
        "description": "",
    }


@pytest.mark.parametrize("as_json", [False, True])
def test_data_list_prints_what_the_orm_path_prints(
    datasets: None, cli, workspace: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    args = ["data", "list", *(["--json"] if as_json else [])]
    fast = cli(*args)
    # A DB URL naming the same file turns the fast path off: the service function answers.
    monkeypatch.setenv("AIFAB_DB_URL", f"sqlite:///{workspace / 'aifab.db'}")
    reset_engines()
    assert fast_reads.list_datasets() is None
    slow = cli(*args)
    assert fast.exit_code == slow.exit_code == 0
    assert fast.stdout == slow.stdout
    assert "zeta@2" in fast.stdout


def test_data_list_in_a_fresh_process_imports_no_orm(datasets: None) -> None:
    probe = (
        "import sys\n"
        "from aifab.cli.main import main\n"
        "sys.argv = ['aifab', 'data', 'list', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "heavy = [m for m in ('sqlalchemy', 'pyarrow', 'duckdb', 'pydantic_settings', 'mlflow')\n"
        "         if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout[: done.stdout.index("HEAVY")])[0]["name"] == "alpha"
    assert done.stdout.strip().endswith("HEAVY []")


def test_a_fresh_workspace_takes_the_orm_path_which_creates_the_db(cli, workspace: Path) -> None:
    assert fast_reads.list_datasets() is None
    out = cli("data", "list", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout) == []
    assert (workspace / "aifab.db").is_file()
    assert fast_reads.list_datasets() == []


def test_a_db_at_another_revision_takes_the_orm_path(datasets: None, workspace: Path) -> None:
    with sqlite3.connect(workspace / "aifab.db") as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0001'")
    assert fast_reads.list_datasets() is None


def test_settings_spelled_otherwise_take_the_orm_path(
    datasets: None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIFAB_HOME")
    monkeypatch.setenv("aifab_home", str(workspace))
    assert metadata_db_path() is None
    assert fast_reads.list_datasets() is None


@pytest.mark.parametrize("home", ["rel/ws", "~/ws", "", None])
def test_the_fast_path_reads_the_file_the_settings_name(
    home: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    if home is None:
        monkeypatch.delenv("AIFAB_HOME")
    else:
        monkeypatch.setenv("AIFAB_HOME", home)
    expected = get_settings().resolved_db_url.removeprefix("sqlite:///")
    assert str(metadata_db_path()) == expected
