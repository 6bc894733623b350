"""``aifab keys`` and ``aifab deploy`` / ``aifab deployments`` through the real entry point."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aifab.inference.request_log import RequestLogger
from aifab.track import register_model, resolve_model, set_alias


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def versions(churn_model: dict[str, Any]) -> dict[str, Any]:
    """``churn@champion`` (the quickstart's) plus a second version to use as a canary."""
    second = register_model(churn_model["run_id"], "model", "churn")
    return {"champion": churn_model["version"], "second": second["version"]}


def _raw_db_bytes(workspace: Path) -> bytes:
    """Every byte of the metadata DB files, read by another process.

    Opening and closing the DB (or its -shm) file in this process would drop the POSIX locks
    SQLite holds on it here (locks are per process, released on any close), and a job process
    sharing the DB could then wreck the WAL index ("disk I/O error").
    """
    code = (
        "import sys, pathlib; sys.stdout.buffer.write(b''.join("
        "p.read_bytes() for p in sorted(pathlib.Path(sys.argv[1]).glob('aifab.db*'))))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(workspace)], capture_output=True, check=True
    ).stdout


def _one_error_line(r: Any) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    return str(lines[0])


# --- keys ------------------------------------------------------------------------------------


def test_keys_create_shows_the_secret_once_and_stores_only_its_hash(
    cli: Any, workspace: Path
) -> None:
    r = cli("keys", "create", "--role", "client", "--name", "app", "--rate", "10/s", "--json")
    assert r.exit_code == 0, r.stderr
    key = json.loads(r.stdout)
    secret = key["secret"]
    assert secret.startswith("aifab-") and key["prefix"] == secret[:12]
    assert key["role"] == "client" and key["rate_per_min"] == 600.0

    stored = _raw_db_bytes(workspace)
    assert secret.encode() not in stored
    assert hashlib.sha256(secret.encode()).hexdigest().encode() in stored

    r = cli("keys", "create", "--role", "viewer", "--token-quota", "5000/day")
    assert r.exit_code == 0, r.stderr
    assert "secret: aifab-" in r.stdout and "will not be shown again" in r.stdout
    assert "5000/day" in r.stdout

    r = cli("keys", "list", "--json")
    listed = json.loads(r.stdout)
    assert [k["role"] for k in listed][-2:] == ["client", "viewer"]
    assert all("hash" not in k and "secret" not in k for k in listed)
    assert secret not in r.stdout
    table = cli("keys", "list").stdout
    assert key["prefix"] in table and "600/min" in table and secret not in table


def test_keys_revoke(cli: Any) -> None:
    key = json.loads(cli("keys", "create", "--role", "admin", "--rate", "none", "--json").stdout)
    r = cli("keys", "revoke", key["id"])
    assert r.exit_code == 0 and f"revoked key {key['id']}" in r.stdout
    listed = {k["id"]: k for k in json.loads(cli("keys", "list", "--json").stdout)}
    assert listed[key["id"]]["active"] is False
    assert "revoked" in cli("keys", "list").stdout
    r = cli("keys", "revoke", "key_missing")
    assert r.exit_code == 1 and "no API key 'key_missing'" in _one_error_line(r)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "root"], "role 'root'"),
        (["--role", "client", "--rate", "lots"], "rate 'lots'"),
        (["--role", "client", "--token-quota", "-5"], "token quota"),
    ],
)
def test_keys_bad_input_is_one_line_exit_2(cli: Any, args: list[str], message: str) -> None:
    r = cli("keys", "create", *args)
    assert r.exit_code == 2
    assert message in _one_error_line(r)


# --- deployments -----------------------------------------------------------------------------


def test_the_quickstart_deployed_churn(cli: Any, versions: dict[str, Any]) -> None:
    deps = json.loads(cli("deployments", "list", "--json").stdout)
    churn = next(d for d in deps if d["name"] == "churn")
    assert churn["model"] == "churn@champion" and churn["status"] == "pending"
    assert "churn@champion" in cli("deployments", "list").stdout


def test_deploy_show_update_delete(cli: Any, versions: dict[str, Any]) -> None:
    r = cli(
        "deploy", "churn@champion", "--name", "fast", "--max-batch-size", "16",
        "--max-wait-ms", "2", "--replicas", "2", "--option", "max_request_items=50", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    dep = json.loads(r.stdout)
    assert (dep["name"], dep["model"], dep["replicas"]) == ("fast", "churn@champion", 2)
    assert (dep["max_batch_size"], dep["max_wait_ms"]) == (16, 2.0)
    assert dep["options"] == {"max_request_items": 50} and dep["generation"] == 1

    shown = cli("deployments", "show", "fast")
    assert shown.exit_code == 0 and "churn@champion" in shown.stdout
    assert json.loads(cli("deployments", "show", "fast", "--json").stdout) == dep

    r = cli("deployments", "update", "fast", "--backend", "onnx", "--option", "x=1", "--json")
    dep = json.loads(r.stdout)
    assert dep["backend"] == "onnx" and dep["generation"] == 2
    assert dep["options"] == {"max_request_items": 50, "x": 1}
    r = cli("deployments", "update", "fast", "--backend", "onnx", "--json")
    assert json.loads(r.stdout)["generation"] == 2  # no change, no new generation
    r = cli("deployments", "update", "fast", "--option", "x=null", "--json")
    assert json.loads(r.stdout)["options"] == {"max_request_items": 50}

    r = cli("deployments", "delete", "fast")
    assert r.exit_code == 0 and "deleted deployment fast" in r.stdout
    r = cli("deployments", "show", "fast")
    assert r.exit_code == 1 and "no deployment 'fast'" in _one_error_line(r)


def test_canary_weight_promote_and_rollback(cli: Any, versions: dict[str, Any]) -> None:
    second = f"churn@{versions['second']}"
    r = cli("deploy", "churn@champion", "--name", "canaried", "--canary", second, "--json")
    dep = json.loads(r.stdout)
    assert dep["canary"] == second and dep["canary_weight"] == 10.0
    r = cli(
        "deployments", "update", "canaried", "--weight", "30", "--sticky-header", "X-User",
        "--json",
    )  # fmt: skip
    dep = json.loads(r.stdout)
    assert dep["canary_weight"] == 30.0 and dep["sticky_header"] == "X-User"
    assert "30%" in cli("deployments", "list").stdout

    dep = json.loads(cli("deployments", "rollback", "canaried", "--json").stdout)
    assert dep["canary"] is None and dep["canary_weight"] == 0.0

    cli("deployments", "update", "canaried", "--canary", second)
    assert (
        json.loads(cli("deployments", "show", "canaried", "--json").stdout)["canary_weight"] == 10
    )
    dep = json.loads(cli("deployments", "update", "canaried", "--canary", "none", "--json").stdout)
    assert dep["canary"] is None

    cli("deployments", "update", "canaried", "--canary", second, "--weight", "50")
    try:
        dep = json.loads(cli("deployments", "promote", "canaried", "--json").stdout)
        assert dep["model"] == "churn@champion" and dep["canary"] is None
        assert resolve_model("churn@champion")["version"] == versions["second"]  # alias moved
    finally:
        set_alias("churn", "champion", versions["champion"])
    r = cli("deployments", "promote", "canaried")
    assert r.exit_code == 1 and "no canary to promote" in _one_error_line(r)
    cli("deployments", "delete", "canaried")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["churn@champion", "--name", "x1", "--replicas", "0"], 2, "replicas: 0 is out of range"),
        (["churn@champion", "--name", "x2", "--backend", "tpu"], 2, "backend 'tpu'"),
        (["churn@champion", "--name", "Bad Name"], 2, "name 'Bad Name'"),
        (["churn@champion", "--name", "x3", "--weight", "5"], 2, "no canary"),
        (["churn@champion", "--name", "x4", "--option", "novalue"], 2, "expected KEY=VALUE"),
        (["churn@champion", "--name", "x5", "--max-wait-ms", "5000"], 2, "max_wait_ms"),
        (["churn@nope"], 1, "no alias 'nope'"),
        (["./no/such/dir"], 2, "does not exist"),
        (["churn@champion"], 1, "deployment 'churn' exists"),
    ],
)
def test_deploy_bad_input_is_one_line(
    cli: Any, versions: dict[str, Any], args: list[str], code: int, message: str
) -> None:
    r = cli("deploy", *args)
    assert r.exit_code == code, r.stdout + r.stderr
    assert message in _one_error_line(r)
    names = [d["name"] for d in json.loads(cli("deployments", "list", "--json").stdout)]
    assert not {"x1", "x2", "x3", "x4", "x5"} & set(names)


def test_update_and_lifecycle_errors(cli: Any, versions: dict[str, Any]) -> None:
    r = cli("deployments", "update", "churn", "--max-batch-size", "5000")
    assert r.exit_code == 2 and "max_batch_size" in _one_error_line(r)
    r = cli("deployments", "rollback", "churn")
    assert r.exit_code == 1 and "no canary to roll back" in _one_error_line(r)
    r = cli("deployments", "delete", "ghost")
    assert r.exit_code == 1 and "no deployment 'ghost'" in _one_error_line(r)


def test_requests_shows_the_sampled_log(cli: Any) -> None:
    logger = RequestLogger()
    for i, status in enumerate((200, 200, 422)):
        logger.log(
            {
                "deployment": "churn",
                "model_version": "churn@1",
                "key_id": "key_abc",
                "route": "/v1/predict/churn",
                "status": status,
                "latency_ms": 1.0 + i,
                "input": {"age": 40 + i},
                "output": {"label": "stay"},
            }
        )
    logger.close()
    rows = json.loads(cli("deployments", "requests", "churn", "--limit", "2", "--json").stdout)
    assert [r["status"] for r in rows] == [422, 200]
    table = cli("deployments", "requests").stdout
    assert "key_abc" in table and "churn@1" in table
    r = cli("deployments", "requests", "--limit", "0")
    assert r.exit_code == 2 and "limit" in _one_error_line(r)


def test_rollback_does_not_print_what_the_servers_served_before_it(
    cli: Any, versions: dict[str, Any]
) -> None:
    from aifab.inference.deployments import get_deployment, report_status

    second = f"churn@{versions['second']}"
    cli("deploy", "churn@champion", "--name", "stale", "--canary", second)
    dep = get_deployment("stale")
    # A running server reports the primary and the canary it serves.
    report_status("stale", dep["generation"], "ready", serving={"canary": "churn@9-served"})
    r = cli("deployments", "rollback", "stale")
    assert r.exit_code == 0, r.stderr
    assert "churn@9-served" not in r.stdout  # the dropped canary is not shown as served
    assert "pending" in r.stdout
    cli("deployments", "delete", "stale")
