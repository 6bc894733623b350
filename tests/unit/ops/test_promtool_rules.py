"""Issue 23 item 3: the exported alert rules pass promtool's own checks and unit tests.

promtool comes from Debian's prometheus package (``make test`` installs it when it may); the
tests skip, naming why, where it is absent.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from aifab.ops.export_rules import alert_rules, export_rules
from aifab.ops.rule_tests import rule_tests

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="no promtool (apt-get install prometheus; make system-tools)"
)


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_exported_rules_pass_promtool_check_and_unit_tests(tmp_path: Path) -> None:
    paths = export_rules(tmp_path)
    check = _promtool("check", "rules", Path(paths["rules"]).name, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    run = _promtool("test", "rules", Path(paths["tests"]).name, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_rule_has_a_firing_case() -> None:
    rules = {r["alert"] for g in alert_rules()["groups"] for r in g["rules"]}
    fired = {
        t["alertname"]
        for case in rule_tests()["tests"]
        for t in case["alert_rule_test"]
        if t["exp_alerts"]
    }
    assert rules == fired


@needs_promtool
def test_client_errors_alone_page_no_one(tmp_path: Path) -> None:
    """Only 401/403/404/429 noise (no deployment reached): the error-rate alerts stay silent.

    Before, ``AifabHighErrorRate`` divided all 4xx/5xx by all requests, so this fired as
    "More than 5% errors on " (blank deployment).
    """
    export_rules(tmp_path)
    noise = [
        {
            "series": f'aifab_requests_total{{route="/v1/predict/{{deployment}}",method="POST",'
            f'status="{code}",deployment=""}}',
            "values": "0+100x20",
        }
        for code in ("401", "403", "404", "429")
    ]
    noise.append(
        {
            "series": 'aifab_errors_total{route="/v1/predict/{deployment}",method="POST",'
            'status="401",deployment=""}',
            "values": "0+100x20",
        }
    )
    quiet = {
        "rule_files": ["aifab-alerts.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": noise,
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": name, "exp_alerts": []}
                    for name in ("AifabHighErrorRate", "AifabServerErrors")
                ],
            }
        ],
    }
    (tmp_path / "quiet.test.yml").write_text(yaml.safe_dump(quiet))
    run = _promtool("test", "rules", "quiet.test.yml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
