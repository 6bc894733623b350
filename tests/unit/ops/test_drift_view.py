"""``drift_distribution``'s refusals: each names what is missing (the happy path, with a real
deployment's reference and request log, is drawn in tests/e2e/ui/test_ops_pages.py)."""

from __future__ import annotations

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.ops import create_monitor, drift_distribution, monitor_history, run_monitor


def test_unknown_monitor_result_or_feature_and_bad_bins_are_named() -> None:
    with pytest.raises(NotFoundError, match="no monitor 'ghost'"):
        drift_distribution("ghost", 1, "age")
    create_monitor("idle", {"deployment": "nowhere"})
    with pytest.raises(NotFoundError, match="has no result 7"):
        drift_distribution("idle", 7, "age")
    result = run_monitor("idle")  # no traffic: a result without drift
    assert result["status"] == "no_data"
    with pytest.raises(NotFoundError, match="compared no feature 'age' \\(compared: none\\)"):
        drift_distribution("idle", result["id"], "age")
    with pytest.raises(InvalidInputError, match="bins 1"):
        drift_distribution("idle", result["id"], "age", bins=1)


def test_history_carries_reports_only_when_asked() -> None:
    create_monitor("idle", {"deployment": "nowhere"})
    run_monitor("idle")
    assert "report" not in monitor_history("idle")[0]
    assert monitor_history("idle", reports=True)[0]["report"]["notes"] == [
        "no traffic in the window"
    ]
