"""A unique prefix of an id names its job, key or run in every command, as git's short hashes."""

from __future__ import annotations

import json
import sys
from typing import Any

from aifab.jobs import submit
from aifab.serve.keys import create_key
from aifab.track import start_run


def _job() -> str:
    spec = {"command": [sys.executable, "-c", "pass"]}
    return str(submit({"name": "noop", "run": spec, "resources": {"cpu": 0.25}})["id"])


def test_a_unique_prefix_names_a_job_a_key_and_a_run(cli: Any) -> None:
    job = _job()
    r = cli("job", "show", job[:-3], "--json")  # the random tail differs per job
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["id"] == job
    assert cli("job", "cancel", job[:-3]).exit_code == 0
    assert json.loads(cli("job", "show", job, "--json").stdout)["state"] == "cancelled"

    key, _ = create_key("client", name="short")
    r = cli("keys", "revoke", key["id"][:-2], "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["id"] == key["id"] and json.loads(r.stdout)["revoked_at"]

    with start_run("t-prefix", system_metrics=False) as run:
        pass
    r = cli("runs", "show", run.id[:8], "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["id"] == run.id


def test_an_ambiguous_or_unknown_prefix_is_one_clear_error(cli: Any) -> None:
    first, second = _job(), _job()
    common = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
    r = cli("job", "show", first[:common])
    assert r.exit_code != 0
    assert "is ambiguous" in r.stderr and first in r.stderr and second in r.stderr
    r = cli("job", "show", "job_zzzz")
    assert r.exit_code != 0 and "not found" in r.stderr
