from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from aifab.core import get_engine, init_workspace, session_scope
from aifab.core.atomic import atomic_path, atomic_write_text
from aifab.core.config import StrictConfig, as_config, load_config
from aifab.core.db import SCHEMA_REVISION, VERSION_TABLE, Base
from aifab.core.errors import InvalidInputError, NotFoundError, first_line
from aifab.core.migrate import head_revision
from aifab.core.registry import Registry


def test_init_creates_workspace_and_db(workspace: Path, cli) -> None:
    r = cli("init", "--json")
    assert r.exit_code == 0, r.stderr
    assert (workspace / "aifab.db").exists()
    for sub in ("lake", "artifacts", "logs", "indexes", "exports", "tmp"):
        assert (workspace / sub).is_dir()
    assert SCHEMA_REVISION in r.stdout


def test_schema_revision_is_migration_head() -> None:
    assert head_revision() == SCHEMA_REVISION


def test_migrations_match_the_orm_tables() -> None:
    """The shipped migrations create exactly the tables and columns the code declares."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    import aifab.agents.tables  # noqa: F401 - registers tables on Base
    import aifab.data.tables  # noqa: F401
    import aifab.inference.tables  # noqa: F401
    import aifab.jobs.tables  # noqa: F401
    import aifab.ops.cost.tables  # noqa: F401
    import aifab.ops.tables  # noqa: F401
    import aifab.pipeline.tables  # noqa: F401
    import aifab.prompts.tables  # noqa: F401
    import aifab.rag.tables  # noqa: F401
    import aifab.serve.tables  # noqa: F401

    with get_engine().connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        diffs = compare_metadata(ctx, Base.metadata)
    assert diffs == []


def test_sqlite_runs_in_wal_mode() -> None:
    with get_engine().connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_db_url_setting_switches_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "elsewhere.db"
    monkeypatch.setenv("AIFAB_DB_URL", f"sqlite:///{other}")
    info = init_workspace()
    assert info["db_url"].endswith("elsewhere.db")
    assert other.exists()


class _Cfg(StrictConfig):
    size: int
    name: str = "x"


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("size: 3\nnmae: y\n")
    with pytest.raises(InvalidInputError, match=r"c.yaml: nmae: unknown key"):
        load_config(_Cfg, p)
    p.write_text("size: big\n")
    with pytest.raises(InvalidInputError, match=r"size: .*integer"):
        load_config(_Cfg, p)
    p.write_text("size: [1,\n")
    with pytest.raises(InvalidInputError, match=r"c.yaml:\d+:\d+: invalid YAML"):
        load_config(_Cfg, p)
    assert as_config(_Cfg, {"size": 2}, "inline").size == 2
    with pytest.raises(InvalidInputError, match="missing.yaml: file not found"):
        load_config(_Cfg, tmp_path / "missing.yaml")


def test_first_line_of_long_or_empty_errors() -> None:
    assert first_line(ValueError("\n  Binder Error: no column x\nLINE 1: SELECT x\n")) == (
        "Binder Error: no column x"
    )
    assert first_line(RuntimeError()) == "RuntimeError"


def test_registry_resolves_lazily_and_names_unknowns() -> None:
    reg = Registry("step", {"join": "os.path:join"})
    assert reg.get("join") is os.path.join
    with pytest.raises(NotFoundError, match="unknown step 'nope' \\(known: join\\)"):
        reg.get("nope")
    with pytest.raises(ValueError):
        reg.register("bad", "no_colon")


def test_atomic_write_keeps_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_session_scope_rolls_back_on_error() -> None:
    from aifab.core.audit import AuditEvent, record_event

    with pytest.raises(RuntimeError), session_scope() as s:
        record_event(s, "x.y", "thing:1")
        raise RuntimeError("boom")
    with session_scope() as s:
        assert s.query(AuditEvent).count() == 0


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys; from aifab.cli.main import app; "
        "heavy = [m for m in ('duckdb', 'sqlalchemy', 'pyarrow', 'torch', 'sklearn') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_through_main_does_not_import_heavy_libraries() -> None:
    # main() itself (the console script), not just the app: its error handling must not pull
    # aifab.core's package face (sqlalchemy, pydantic-settings) before a command needs it.
    code = (
        "import sys; sys.argv = ['aifab', '--help']; from aifab.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('duckdb', 'sqlalchemy', 'pydantic_settings', 'pyarrow', 'torch') "
        "if m in sys.modules]; print(heavy, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "[]"


def test_unexpected_error_is_one_line_and_debug_shows_traceback(cli, tmp_path: Path) -> None:
    r = cli("data", "show", "nope")
    assert r.exit_code == 1
    assert r.stderr.strip() == "error: dataset 'nope' not found (see 'aifab data list')"
    env = {**os.environ, "AIFAB_HOME": str(tmp_path / "w2")}
    out = subprocess.run(
        [sys.executable, "-m", "aifab", "--debug", "data", "show", "nope"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode != 0
    assert "Traceback" in out.stderr


def test_init_sweeps_stale_scratch_files(workspace: Path) -> None:
    from aifab.core import get_workspace

    tmp = get_workspace().tmp
    old, new = tmp / "stage_old.parquet", tmp / "stage_new.parquet"
    old.write_text("x")
    new.write_text("y")
    os.utime(old, (1, 1))
    assert init_workspace()["stale_tmp_files_removed"] == 1
    assert not old.exists() and new.exists()


def test_init_with_the_lake_on_an_object_store_prints_the_store(
    s3_storage: str, workspace: Path, cli: Any
) -> None:
    """docs/team.md step 3: with AIFAB_STORAGE_URI, `aifab init` printed a local lake path."""
    r = cli("init", "--json")
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["storage"] == s3_storage
    assert info["lake"] == f"{s3_storage}/lake"
    assert info["lake_cache"] == str(workspace / "lake")  # this machine's read-through cache
