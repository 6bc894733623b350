"""``aifab cost``, ``aifab budget`` and ``aifab keys create --team`` through the real CLI."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from typing import Any

from aifab.inference.request_log import RequestLogger


def test_keys_carry_a_team_into_the_cost_report(cli: Callable[..., Any]) -> None:
    r = cli("keys", "create", "--role", "client", "--team", "growth", "--project", "web", "--json")
    assert r.exit_code == 0, r.stderr
    key = json.loads(r.stdout)
    assert (key["team"], key["project"]) == ("growth", "web")
    logger = RequestLogger()
    logger.log(
        {
            "ts": time.time(),
            "deployment": "chat",
            "key_id": key["id"],
            "route": "/v1/chat",
            "status": 200,
            "tokens": 4000,
            "latency_ms": 3.0,
        }
    )
    logger.close()
    r = cli("cost", "report", "--by", "project", "--format", "csv")
    assert r.exit_code == 0, r.stderr
    (row,) = list(csv.DictReader(io.StringIO(r.stdout)))
    assert row["project"] == "web" and row["tokens"] == "4000" and float(row["cost"]) > 0
    r = cli("cost", "report", "--by", "team", "--format", "json")
    assert json.loads(r.stdout)["rows"][0]["team"] == "growth"
    r = cli("cost", "report", "--by", "team")
    assert "growth" in r.stdout and "total" in r.stdout


def test_bad_key_team_and_report_options_are_one_line_errors(cli: Callable[..., Any]) -> None:
    r = cli("keys", "create", "--role", "client", "--team", "a team")
    assert r.exit_code == 2 and r.stderr.startswith("error: team 'a team'")
    r = cli("cost", "report", "--format", "xml")
    assert r.exit_code == 2 and "format 'xml'" in r.stderr
    r = cli("cost", "report", "--since", "last tuesday")
    assert r.exit_code == 2 and "since 'last tuesday'" in r.stderr


def test_budget_set_status_delete(cli: Callable[..., Any]) -> None:
    r = cli("budget", "set", "growth", "--amount", "100", "--period", "month", "--alert-at", "0.8")
    assert r.exit_code == 0, r.stderr
    r = cli("budget", "status", "--json")
    (st,) = json.loads(r.stdout)
    assert (st["team"], st["amount"], st["state"], st["spent"]) == ("growth", 100.0, "ok", 0.0)
    assert "growth" in cli("budget", "list").stdout
    r = cli("budget", "set", "growth", "--amount", "-5")
    assert r.exit_code == 2 and "amount" in r.stderr
    assert cli("budget", "delete", "growth").exit_code == 0
    r = cli("budget", "delete", "growth")
    assert r.exit_code == 1 and "no budget" in r.stderr
