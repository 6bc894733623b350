"""Layer 5, operations and governance: monitors, drift, alerts, schedules, the closed loop.

Service functions (the CLI, server and pipeline call these) are exported here.
"""

from __future__ import annotations

from aifab.ops.alerts import alert_history, list_alerts, list_silences, silence_alerts
from aifab.ops.drift import DriftOptions, drift_report
from aifab.ops.feedback import record_feedback
from aifab.ops.monitors import (
    create_monitor,
    delete_monitor,
    get_monitor,
    list_monitors,
    monitor_history,
    run_monitor,
)

__all__ = [
    "DriftOptions",
    "alert_history",
    "create_monitor",
    "delete_monitor",
    "drift_report",
    "get_monitor",
    "list_alerts",
    "list_monitors",
    "list_silences",
    "monitor_history",
    "record_feedback",
    "run_monitor",
    "silence_alerts",
]
