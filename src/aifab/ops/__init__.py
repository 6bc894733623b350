"""Layer 5, operations and governance: watching, reacting, costing and explaining.

Monitors, drift, alerts, schedules, the closed loop, the cost ledger and budgets, fairness,
explanations and model cards. Service functions (the CLI, server and pipeline call these) are
exported here; those that import torch through a model handler are exported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aifab.ops.alerts import alert_history, list_alerts, list_silences, silence_alerts
from aifab.ops.cost.budget import budget_status, delete_budget, list_budgets, set_budget
from aifab.ops.cost.ledger import collect, cost_report
from aifab.ops.cost.prices import load_prices
from aifab.ops.drift import DriftOptions, drift_report
from aifab.ops.drift.view import drift_distribution
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
    "budget_status",
    "build_card",
    "collect",
    "cost_report",
    "create_monitor",
    "delete_budget",
    "delete_monitor",
    "drift_distribution",
    "drift_report",
    "explain_records",
    "fairness_gate",
    "fairness_report",
    "get_monitor",
    "global_explanation",
    "list_alerts",
    "list_budgets",
    "list_monitors",
    "list_silences",
    "load_prices",
    "monitor_history",
    "record_feedback",
    "run_monitor",
    "set_budget",
    "silence_alerts",
]

if TYPE_CHECKING:
    from aifab.ops.card.build import build_card
    from aifab.ops.explain.explainers import explain_records, global_explanation
    from aifab.ops.fairness import fairness_gate, fairness_report

#: Exported lazily: they import torch (through the model handler) when first used.
_LAZY = {
    "build_card": "aifab.ops.card.build",
    "explain_records": "aifab.ops.explain.explainers",
    "global_explanation": "aifab.ops.explain.explainers",
    "fairness_gate": "aifab.ops.fairness",
    "fairness_report": "aifab.ops.fairness",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aifab.ops' has no attribute {name!r}")
