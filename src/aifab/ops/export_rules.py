"""A Prometheus alert-rules file and a Grafana dashboard built on aifab's own metric names.

For teams that run Prometheus and Grafana: the rules mirror what aifab's monitors judge (drift,
quality, objectives) plus the server's health; every metric named is one the server exports
(a test checks each name against a live ``/metrics``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from aifab.core.atomic import atomic_write_text

__all__ = [
    "alert_rules",
    "dashboard",
    "expressions",
    "export_rules",
    "label_mismatches",
    "metric_names",
]


def alert_rules() -> dict[str, Any]:
    """Prometheus alerting rules (``groups:`` file format)."""

    def rule(name: str, expr: str, severity: str, summary: str, for_: str = "5m") -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": for_,
            "labels": {"severity": severity},
            "annotations": {"summary": summary},
        }

    return {
        "groups": [
            {
                "name": "aifab-monitors",
                "rules": [
                    rule(
                        "AifabDataDrift",
                        'aifab_monitor_value{name="dataset_drift"} >= 1',
                        "warning",
                        "Data drift on {{ $labels.deployment }} ({{ $labels.monitor }})",
                        "0m",
                    ),
                    rule(
                        "AifabPredictionDrift",
                        'aifab_monitor_value{name="prediction_drift"} >= 1',
                        "warning",
                        "Prediction drift on {{ $labels.deployment }}",
                        "0m",
                    ),
                    rule(
                        "AifabQualityLow",
                        'aifab_monitor_value{name="accuracy"} < 0.8',
                        "critical",
                        "Labelled accuracy of {{ $labels.deployment }} is {{ $value }}",
                    ),
                    rule(
                        "AifabMonitorStale",
                        "time() - aifab_monitor_last_run_timestamp_seconds > 7200",
                        "warning",
                        "Monitor {{ $labels.monitor }} has not run for 2 h",
                    ),
                    rule(
                        "AifabAlertsFiring",
                        "sum by (monitor, rule) (aifab_alerts_firing) > 0",
                        "info",
                        "aifab alert {{ $labels.rule }} firing on {{ $labels.monitor }}",
                        "0m",
                    ),
                ],
            },
            {
                "name": "aifab-serving",
                "rules": [
                    # Model failures: 5xx answers of a deployment (a model that raised, one
                    # not loaded). Clients' 401/403/404/429 are their own mistakes, not ours.
                    rule(
                        "AifabHighErrorRate",
                        "sum by (deployment) "
                        '(rate(aifab_requests_total{deployment!="",status=~"5.."}[5m])) / '
                        'sum by (deployment) (rate(aifab_requests_total{deployment!=""}[5m])) '
                        "> 0.05",
                        "critical",
                        "More than 5% of the requests to {{ $labels.deployment }} failed "
                        "(server errors)",
                    ),
                    # Server errors on routes without a deployment (keys, data, admin).
                    rule(
                        "AifabServerErrors",
                        'sum by (route) (rate(aifab_requests_total{deployment="",'
                        'status=~"5.."}[5m])) > 0',
                        "warning",
                        "Server errors on {{ $labels.route }}",
                    ),
                    rule(
                        "AifabHighLatencyP99",
                        "histogram_quantile(0.99, sum by (le, deployment) "
                        "(rate(aifab_request_latency_seconds_bucket[5m]))) > 0.5",
                        "warning",
                        "p99 latency of {{ $labels.deployment }} above 500 ms",
                    ),
                    rule(
                        "AifabDeploymentDown",
                        "aifab_deployment_ready == 0",
                        "critical",
                        "Deployment {{ $labels.deployment }} is not serving",
                        "2m",
                    ),
                ],
            },
        ]
    }


def _panel(pid: int, title: str, exprs: list[str], x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "targets": [{"expr": e, "refId": chr(65 + i)} for i, e in enumerate(exprs)],
    }


def dashboard() -> dict[str, Any]:
    """A Grafana dashboard (JSON model) of serving and monitoring."""
    panels = [
        (
            "Requests per second",
            ['sum by (deployment) (rate(aifab_requests_total{deployment!=""}[5m]))'],
        ),
        (
            "p99 latency (s)",
            [
                "histogram_quantile(0.99, sum by (le, deployment) "
                "(rate(aifab_request_latency_seconds_bucket[5m])))"
            ],
        ),
        ("Errors per second", ["sum by (deployment, status) (rate(aifab_errors_total[5m]))"]),
        ("Drifted share of columns", ['aifab_monitor_value{name="drift_share"}']),
        ("Drifted columns", ["aifab_monitor_column_drift == 1"]),
        ("Labelled accuracy", ['aifab_monitor_value{name="accuracy"}']),
        ("Alerts firing", ["sum by (monitor, rule) (aifab_alerts_firing)"]),
        ("Deployments ready", ["aifab_deployment_ready"]),
    ]
    return {
        "title": "aifab: serving and monitors",
        "uid": "aifab-ops",
        "schemaVersion": 39,
        "tags": ["aifab"],
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]
        },
        "panels": [
            _panel(i + 1, title, exprs, 12 * (i % 2), 8 * (i // 2))
            for i, (title, exprs) in enumerate(panels)
        ],
    }


_METRIC = re.compile(r"\baifab_[a-z_]+\b")


def metric_names(obj: Any) -> set[str]:
    """Every ``aifab_*`` metric an expression in ``obj`` (rules or dashboard) names."""
    text = json.dumps(obj)
    return set(_METRIC.findall(text))


_BY = re.compile(r"\bby\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")
_TEMPLATE = re.compile(r"\$labels\.([a-z_]+)")


def expressions() -> list[tuple[str, str, str]]:
    """Every query exported: ``(where, expr, annotation text)`` of each rule and panel."""
    out = []
    for group in alert_rules()["groups"]:
        for rule in group["rules"]:
            out.append((rule["alert"], rule["expr"], json.dumps(rule["annotations"])))
    for panel in dashboard()["panels"]:
        out.extend((panel["title"], t["expr"], "") for t in panel["targets"])
    return out


def label_mismatches(labels_of: dict[str, set[str]]) -> list[str]:
    """The exported queries that name a metric or a label a live server does not export.

    Args:
        labels_of: each metric sample name of a live ``/metrics`` -> the label names it has.

    Returns:
        One line per problem (empty when every query matches): a metric missing, a ``by`` or
        matcher label the metric lacks, or an annotation's ``$labels.x`` the alert lacks.
    """
    problems = []
    for where, expr, notes in expressions():
        grouped = {x.strip() for m in _BY.findall(expr) for x in m.split(",") if x.strip()}
        wanted = grouped | set(_MATCHER.findall(expr))
        for metric in _METRIC.findall(expr):
            if metric not in labels_of:
                problems.append(f"{where}: {metric} is not exported")
                continue
            if wanted - labels_of[metric]:
                problems.append(f"{where}: {metric} lacks {sorted(wanted - labels_of[metric])}")
            missing = set(_TEMPLATE.findall(notes)) - (grouped or labels_of[metric])
            if missing:
                problems.append(f"{where}: {metric}: the alert carries no {sorted(missing)}")
    return problems


def export_rules(out_dir: Path | str) -> dict[str, str]:
    """Write the alert rules, their promtool tests and the Grafana dashboard into ``out_dir``.

    ``aifab-alerts.rules.yml``, ``aifab-alerts.test.yml`` (run ``promtool test rules`` on it
    there) and ``aifab-dashboard.json``.
    """
    from aifab.ops.rule_tests import RULES_FILE, rule_tests

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rules_path, dash_path = out / RULES_FILE, out / "aifab-dashboard.json"
    tests_path = out / "aifab-alerts.test.yml"
    atomic_write_text(rules_path, yaml.safe_dump(alert_rules(), sort_keys=False, width=120))
    atomic_write_text(tests_path, yaml.safe_dump(rule_tests(), sort_keys=False, width=120))
    atomic_write_text(dash_path, json.dumps(dashboard(), indent=2) + "\n")
    return {"rules": str(rules_path), "tests": str(tests_path), "dashboard": str(dash_path)}
