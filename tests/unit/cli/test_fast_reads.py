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
from aifab.data import commit_query, ingest, list_datasets, resolve

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def datasets(tmp_path: Path, workspace: Path) -> None:
    """Three datasets: one with two versions of different widths, one derived from two."""
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    (tmp_path / "b.csv").write_text("x,y,z\n1,2,3\n")
    (tmp_path / "c.jsonl").write_text('{"k": "v", "n": 1.5}\n')
    ingest("zeta", tmp_path / "a.csv")
    ingest("zeta", tmp_path / "b.csv")
    ingest("alpha", tmp_path / "c.jsonl")
    # Derived from two parents (lineage, in the parents' order), with a description.
    parents = [resolve("zeta@1"), resolve("alpha")]
    sql = "SELECT 1 AS x, 'a' AS y"
    commit_query(
        "mid", sql, source="q", transform={"kind": "q"}, parents=parents, description="as zeta@1"
    )


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


@pytest.mark.parametrize("ref", ["zeta", "zeta@1", "mid", "mid@1"])
def test_resolve_matches_the_service_function(datasets: None, ref: str) -> None:
    fast = fast_reads.resolve(ref)
    assert fast == resolve(ref).to_dict(with_profile=True)
    assert list(fast or {}) == [*resolve(ref).to_dict(with_profile=True)]  # the JSON's order
    if ref.startswith("mid"):
        assert fast is not None and fast["parents"] == ["zeta@1", "alpha@1"]


@pytest.mark.parametrize(
    "ref", ["zeta", "zeta@1", "mid", "zeta@v2", "zeta@latest", "zeta@9", "nope", "bad name"]
)
@pytest.mark.parametrize("as_json", [False, True])
def test_data_show_prints_what_the_orm_path_prints(
    datasets: None, cli, workspace: Path, monkeypatch: pytest.MonkeyPatch, ref: str, as_json: bool
) -> None:
    args = ["data", "show", ref, *(["--json"] if as_json else [])]
    fast = cli(*args)
    monkeypatch.setenv("AIFAB_DB_URL", f"sqlite:///{workspace / 'aifab.db'}")
    reset_engines()
    assert fast_reads.resolve("zeta") is None
    slow = cli(*args)
    assert (fast.exit_code, fast.stdout, fast.stderr) == (slow.exit_code, slow.stdout, slow.stderr)


def test_refs_the_fast_path_leaves_to_the_service_function(datasets: None) -> None:
    for ref in ("zeta@v2", "zeta@latest", "zeta@", " zeta", "zeta@123456", "nope", "zeta@9"):
        assert fast_reads.resolve(ref) is None, ref


@pytest.mark.parametrize(("args", "name"), [(["list"], "alpha"), (["show", "mid"], "mid")])
def test_data_list_and_show_in_a_fresh_process_import_no_orm(
    datasets: None, args: list[str], name: str
) -> None:
    probe = (
        "import sys\n"
        "from aifab.cli.main import main\n"
        f"sys.argv = ['aifab', 'data', *{args!r}, '--json']\n"
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
    out = json.loads(done.stdout[: done.stdout.index("HEAVY")])
    assert (out[0]["name"] if isinstance(out, list) else out["dataset"]) == name
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
