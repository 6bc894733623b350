"""Monitor results and alerts as Prometheus metrics, read from the DB at scrape time.

:class:`OpsCollector` is registered on the server's metrics registry; :data:`METRIC_NAMES` is
what it exports (the alert-rules file and dashboard may name only these and the server's own).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from aifab.core.db import session_scope
from aifab.ops.tables import AlertRow, MonitorResultRow, MonitorRow

__all__ = ["METRIC_NAMES", "OpsCollector"]

log = logging.getLogger("aifab.ops")

METRIC_NAMES = (
    "aifab_monitor_value",
    "aifab_monitor_column_drift",
    "aifab_monitor_last_run_timestamp_seconds",
    "aifab_alerts_firing",
)
_STATUS = {"ok": 0.0, "breach": 1.0, "no_data": 2.0, "error": 3.0}


class OpsCollector(Collector):
    """Latest monitor values, per-column drift flags and firing alerts."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read the latest result of every monitor; an unreadable DB yields nothing."""
        try:
            latest, firing = _read()
        except Exception:  # noqa: BLE001 - a scrape must never fail on the ops tables
            log.exception("could not read monitor results for /metrics")
            return
        value = GaugeMetricFamily(
            "aifab_monitor_value",
            "Latest value of a monitor (drift_share, accuracy, latency_p99_ms, status...).",
            labels=["monitor", "deployment", "name"],
        )
        column = GaugeMetricFamily(
            "aifab_monitor_column_drift",
            "1 when the column drifted in the monitor's latest run, else 0.",
            labels=["monitor", "deployment", "column"],
        )
        last = GaugeMetricFamily(
            "aifab_monitor_last_run_timestamp_seconds",
            "When the monitor last ran (Unix time).",
            labels=["monitor", "deployment"],
        )
        for name, deployment, row in latest:
            value.add_metric([name, deployment, "status"], _STATUS.get(row.status, 3.0))
            for k, v in (row.values or {}).items():
                if isinstance(v, int | float):
                    value.add_metric([name, deployment, k], float(v))
            cols = (row.report or {}).get("drift", {}).get("columns", {})
            for col, info in cols.items():
                column.add_metric([name, deployment, col], float(bool(info.get("drift"))))
            last.add_metric([name, deployment], row.ts)
        alerts = GaugeMetricFamily(
            "aifab_alerts_firing",
            "Alerts firing (not silenced), by monitor, rule and severity.",
            labels=["monitor", "rule", "severity"],
        )
        for (monitor, rule, severity), n in firing.items():
            alerts.add_metric([monitor, rule, severity], float(n))
        yield from (value, column, last, alerts)


def _read() -> tuple[list[tuple[str, str, Any]], dict[tuple[str, str, str], int]]:
    with session_scope() as s:
        newest = (
            select(MonitorResultRow.monitor, func.max(MonitorResultRow.id).label("id"))
            .group_by(MonitorResultRow.monitor)
            .subquery()
        )
        q = (
            select(MonitorRow.name, MonitorRow.deployment, MonitorResultRow)
            .join(newest, newest.c.monitor == MonitorRow.name)
            .join(MonitorResultRow, MonitorResultRow.id == newest.c.id)
        )
        latest = [(n, d, r) for n, d, r in s.execute(q)]
        firing: dict[tuple[str, str, str], int] = {}
        rows = s.execute(
            select(AlertRow.monitor, AlertRow.rule, AlertRow.severity, func.count())
            .where(AlertRow.state == "firing", AlertRow.silenced.is_(False))
            .group_by(AlertRow.monitor, AlertRow.rule, AlertRow.severity)
        )
        for monitor, rule, severity, n in rows:
            firing[(monitor, rule, severity)] = int(n)
    return latest, firing
