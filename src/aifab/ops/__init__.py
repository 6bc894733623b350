"""Layer 5, operations and governance: cost ledger and budgets, fairness, explanations, cards.

Service functions (the CLI, server and pipeline call these): ``collect``, ``cost_report``,
``load_prices``, ``set_budget``, ``delete_budget``, ``list_budgets``, ``budget_status``.
"""

from __future__ import annotations

from aifab.ops.budget import budget_status, delete_budget, list_budgets, set_budget
from aifab.ops.cost import collect, cost_report
from aifab.ops.cost_prices import load_prices

__all__ = [
    "budget_status",
    "collect",
    "cost_report",
    "delete_budget",
    "list_budgets",
    "load_prices",
    "set_budget",
]
