"""Layer 5, operations and governance: cost ledger and budgets, fairness, explanations, cards.

Service functions (the CLI, server and pipeline call these): ``collect``, ``cost_report``,
``load_prices``, ``set_budget``, ``delete_budget``, ``list_budgets``, ``budget_status``,
``fairness_report``, ``fairness_gate``, ``explain_records``, ``global_explanation``,
``build_card``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aifab.ops.budget import budget_status, delete_budget, list_budgets, set_budget
from aifab.ops.cost import collect, cost_report
from aifab.ops.cost_prices import load_prices

__all__ = [
    "budget_status",
    "build_card",
    "explain_records",
    "fairness_gate",
    "fairness_report",
    "global_explanation",
    "collect",
    "cost_report",
    "delete_budget",
    "list_budgets",
    "load_prices",
    "set_budget",
]

if TYPE_CHECKING:
    from aifab.ops.card import build_card
    from aifab.ops.explain import explain_records, global_explanation
    from aifab.ops.fairness import fairness_gate, fairness_report

#: Exported lazily: they import torch (through the model handler) when first used.
_LAZY = {
    "build_card": "aifab.ops.card",
    "explain_records": "aifab.ops.explain",
    "global_explanation": "aifab.ops.explain",
    "fairness_gate": "aifab.ops.fairness",
    "fairness_report": "aifab.ops.fairness",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aifab.ops' has no attribute {name!r}")
