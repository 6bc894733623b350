"""Spine, data, jobs, registry and serving suites run again on a real PostgreSQL server.

The same test files run on SQLite in the normal suite; here a pytest subprocess runs them with
``AIFAB_TEST_PG_SERVER`` set, so every workspace gets a fresh PostgreSQL database
(``tests/conftest.py``). Multi-process cases in them are the team-mode checks: two workers on
one database never run a job twice; concurrent submitters, dataset committers and audit writers
lose nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = [
    "tests/unit/core",
    "tests/unit/data/test_catalog.py",
    "tests/unit/jobs/test_service.py",
    "tests/unit/jobs/test_worker.py",
    "tests/integration/test_worker_durability.py",
    "tests/unit/track/test_registry.py",
    "tests/unit/serve/test_keys.py",
    "tests/unit/serve/test_limits.py",
    "tests/integration/test_serve.py",
    "tests/unit/jobs/test_logs_usage.py",
]
#: Cases about the SQLite file itself, not about aifab's behaviour on a database.
SQLITE_ONLY = {
    "tests/unit/core/test_core.py::test_init_creates_workspace_and_db": "checks aifab.db exists",
    "tests/unit/core/test_core.py::test_sqlite_runs_in_wal_mode": "SQLite's journal mode",
    "tests/unit/core/test_workspace_modes.py::test_workspace_and_db_are_owner_only": "the mode "
    "of aifab.db, a file only SQLite has",
    "tests/integration/test_serve.py::test_aifab_serve_command": "a fresh AIFAB_HOME means "
    "a fresh DB only with SQLite (with AIFAB_DB_URL the keys of other tests are there)",
}

#: Cases about the workspace's ``audit.key`` file, which a process on a team's DB never makes:
#: the suites run there with ``AIFAB_AUDIT_KEY`` set, as a team's processes do
#: (``tests/team/test_audit_team_key.py`` checks the team's key).
KEY_FILE_ONLY = {
    f"tests/unit/core/{case}": "the workspace's audit.key file"
    for case in (
        "test_audit_keyed.py::test_key_file_is_owner_only_and_env_key_is_used",
        "test_audit_keyed.py::test_unkeyed_events_of_an_old_workspace_still_verify",
        "test_audit_wiped.py::test_losing_the_key_and_anchors_then_rehashing_is_detected",
        "test_audit_wiped.py::test_a_wiped_log_is_not_an_empty_one",
    )
}

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.mark.timeout(1500)
def test_suites_pass_on_postgresql(pg_server: Any) -> None:
    deselect = [arg for case in {**SQLITE_ONLY, **KEY_FILE_ONLY} for arg in ("--deselect", case)]
    env = {**os.environ, "AIFAB_TEST_PG_SERVER": pg_server.url}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *deselect, *SUITES]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary, summary
