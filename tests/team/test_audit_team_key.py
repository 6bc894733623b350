"""One audit key for a team (issue 32): events written from two working directories and from a
Ray node keep one intact chain, verified from either directory; a process on the team's DB
without the key refuses to write instead of making a key of its own. The chain's anchors are
write-once objects on the team's store, so a directory that never wrote verifies it too.

The Ray node is simulated: a separate process with its own empty working directory and the
environment a Ray replica gets from ``aifab.jobs.launch.node_env`` (node-local ``AIFAB_HOME``,
the store's URI), plus what a team sets where ``ray start`` runs (the DB URL and, when given,
``AIFAB_AUDIT_KEY``). The team's object store is a local directory standing in for a bucket.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import ENTRY  # noqa: E402

pytestmark = [pytest.mark.integration]


def _base_env() -> dict[str, str]:
    """This machine's environment without any aifab setting (each process gets its own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AIFAB_")}


def _aifab(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", ENTRY, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _node_env(shared_pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What a Ray replica of a job submitted from ``tmp_path/head`` starts with."""
    from aifab.jobs.launch import node_env

    head = tmp_path / "head" / ".aifab"
    monkeypatch.setenv("AIFAB_HOME", str(head))
    monkeypatch.setenv("AIFAB_STORAGE_URI", str(tmp_path / "store"))
    launch = {"AIFAB_HOME": str(head), "AIFAB_JOB_ID": "job_1", "AIFAB_CHECKPOINT_DIR": f"{head}/c"}
    env = node_env(launch, str(tmp_path / "node-home" / "job_1"))
    assert env["AIFAB_HOME"] != str(head)  # the node's own, empty workspace
    return {**_base_env(), **env, "AIFAB_DB_URL": shared_pg}


def test_a_process_on_the_team_db_without_the_audit_key_refuses_to_write(
    shared_pg: str, tmp_path: Path
) -> None:
    env = {**_base_env(), "AIFAB_DB_URL": shared_pg}
    r = _aifab(tmp_path / "a", env, "keys", "create", "--role", "viewer", "--name", "a")
    assert r.returncode != 0, r.stdout
    assert r.stderr.strip().splitlines() == [
        "error: AIFAB_AUDIT_KEY is not set: on a shared metadata DB every machine, Ray node and "
        "pod needs the team's audit key (from a secret) to write audit events; aifab does not "
        "make one per directory"
    ], r.stderr
    assert not (tmp_path / "a" / ".aifab" / "audit.key").exists()  # no key of its own
    from aifab.serve.keys import list_keys

    assert list_keys() == []  # the change was not made without its audit event


def test_two_directories_and_a_ray_node_keep_one_chain(
    shared_pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = {
        **_base_env(),
        "AIFAB_DB_URL": shared_pg,
        "AIFAB_STORAGE_URI": str(tmp_path / "store"),
        "AIFAB_AUDIT_KEY": secrets.token_hex(32),
    }
    a, b = tmp_path / "a", tmp_path / "b"  # each with the default ./.aifab
    for i, where in enumerate((a, b, a)):
        r = _aifab(where, team, "keys", "create", "--role", "viewer", "--name", f"k{i}")
        assert r.returncode == 0, r.stderr
    node = _node_env(shared_pg, tmp_path, monkeypatch)
    # A node given only the DB URL (the key forgotten) writes nothing rather than break the chain.
    r = _aifab(tmp_path / "node-wd", node, "keys", "create", "--role", "viewer", "--name", "n0")
    assert r.returncode != 0 and "AIFAB_AUDIT_KEY is not set" in r.stderr, r.stderr
    node["AIFAB_AUDIT_KEY"] = team["AIFAB_AUDIT_KEY"]
    r = _aifab(tmp_path / "node-wd", node, "keys", "create", "--role", "viewer", "--name", "n1")
    assert r.returncode == 0, r.stderr
    r = _aifab(b, team, "keys", "create", "--role", "viewer", "--name", "k3")
    assert r.returncode == 0, r.stderr
    # ... and from a directory that never wrote an event: the anchors are on the store.
    for where in (a, b, tmp_path / "c"):
        r = _aifab(where, team, "audit", "verify")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "audit chain intact: 5 events"
