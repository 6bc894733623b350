"""promtool unit tests of the exported alert rules (``promtool test rules``).

Every rule of :func:`aifab.ops.export_rules.alert_rules` has a case that makes it fire and
one that must not (clients' 4xx answers never page anyone). The input series carry exactly
the labels the server exports, so a test checks them against a live ``/metrics``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RULES_FILE", "input_series", "rule_tests"]

#: The rules file the tests read (beside them, as ``export_rules`` writes both).
RULES_FILE = "aifab-alerts.rules.yml"
_PREDICT = "/v1/predict/{deployment}"


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": values}


def _requests(status: str, deployment: str, values: str, route: str = _PREDICT) -> dict[str, str]:
    labels = {"route": route, "method": "POST", "status": status, "deployment": deployment}
    return _series("aifab_requests_total", labels, values)


def _alerts(name: str, at: str, *expected: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(expected)}


def _fired(labels: dict[str, str], summary: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": {"summary": summary}}


def _serving_case() -> dict[str, Any]:
    """Model failures page; unauthenticated 401s, rate limits and bad rows do not."""
    latency = "aifab_request_latency_seconds_bucket"
    slow = {"deployment": "churn", "route": _PREDICT}
    return {
        "interval": "1m",
        "input_series": [
            _requests("200", "churn", "0+100x20"),
            _requests("500", "churn", "0+10x20"),  # a model that raises: ~9% failures
            _requests("200", "quiet", "0+10x20"),
            _requests("422", "quiet", "0+50x20"),  # bad rows: the client's mistake
            _requests("401", "", "0+1000x20"),  # unauthenticated noise, no deployment
            _requests("429", "", "0+1000x20"),
            _requests("500", "", "0+1x20", route="/v1/keys"),
            _series(latency, {**slow, "le": "0.5"}, "0+1x20"),
            _series(latency, {**slow, "le": "1.0"}, "0+100x20"),
            _series(latency, {**slow, "le": "+Inf"}, "0+100x20"),
            _series("aifab_deployment_ready", {"deployment": "churn"}, "1x20"),
            _series("aifab_deployment_ready", {"deployment": "broken"}, "0x20"),
        ],
        "alert_rule_test": [
            _alerts("AifabHighErrorRate", "4m"),  # not yet: it must last 5 minutes
            _alerts(
                "AifabHighErrorRate",
                "10m",
                _fired(
                    {"severity": "critical", "deployment": "churn"},
                    "More than 5% of the requests to churn failed (server errors)",
                ),
            ),
            _alerts(
                "AifabServerErrors",
                "10m",
                _fired({"severity": "warning", "route": "/v1/keys"}, "Server errors on /v1/keys"),
            ),
            _alerts(
                "AifabHighLatencyP99",
                "10m",
                _fired(
                    {"severity": "warning", "deployment": "churn"},
                    "p99 latency of churn above 500 ms",
                ),
            ),
            _alerts(
                "AifabDeploymentDown",
                "10m",
                _fired(
                    {"severity": "critical", "deployment": "broken"},
                    "Deployment broken is not serving",
                ),
            ),
        ],
    }


def _monitor_case() -> dict[str, Any]:
    """Drift, quality, stale monitors and aifab's own alerts, as ``OpsCollector`` exports them."""

    def value(name: str, values: str) -> dict[str, str]:
        labels = {"monitor": "churn-mon", "deployment": "churn", "name": name}
        return _series("aifab_monitor_value", labels, values)

    mon = {"monitor": "churn-mon", "deployment": "churn"}
    return {
        "interval": "1m",
        "input_series": [
            value("dataset_drift", "1x200"),
            value("prediction_drift", "0x5 1x195"),  # drifts from minute 6
            value("accuracy", "0.5x200"),
            _series("aifab_monitor_last_run_timestamp_seconds", mon, "0x200"),
            _series(
                "aifab_alerts_firing",
                {"monitor": "churn-mon", "rule": "data_drift", "severity": "warning"},
                "1x200",
            ),
        ],
        "alert_rule_test": [
            _alerts(
                "AifabDataDrift",
                "1m",
                _fired(
                    {"severity": "warning", **mon, "name": "dataset_drift"},
                    "Data drift on churn (churn-mon)",
                ),
            ),
            _alerts("AifabPredictionDrift", "1m"),  # 0: no drift yet
            _alerts(
                "AifabPredictionDrift",
                "10m",
                _fired(
                    {"severity": "warning", **mon, "name": "prediction_drift"},
                    "Prediction drift on churn",
                ),
            ),
            _alerts(
                "AifabQualityLow",
                "10m",
                _fired(
                    {"severity": "critical", **mon, "name": "accuracy"},
                    "Labelled accuracy of churn is 0.5",
                ),
            ),
            _alerts("AifabMonitorStale", "1h"),  # ran at 0 s: not 2 h ago yet
            _alerts(
                "AifabMonitorStale",
                "3h",
                _fired({"severity": "warning", **mon}, "Monitor churn-mon has not run for 2 h"),
            ),
            _alerts(
                "AifabAlertsFiring",
                "1m",
                _fired(
                    {"severity": "info", "monitor": "churn-mon", "rule": "data_drift"},
                    "aifab alert data_drift firing on churn-mon",
                ),
            ),
        ],
    }


def rule_tests() -> dict[str, Any]:
    """A promtool rule-test file (``promtool test rules FILE``) for the exported rules."""
    return {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "1m",
        "tests": [_serving_case(), _monitor_case()],
    }


def input_series() -> list[str]:
    """Every input series of :func:`rule_tests` (``name{label="value",...}``)."""
    return [s["series"] for case in rule_tests()["tests"] for s in case["input_series"]]
