"""Drift between a reference and a window of traffic: one report over every column kind.

:mod:`~aifab.ops.drift.report` builds the report; numbers and categories are tested by
:mod:`~aifab.ops.drift.stat_tests`, free text by :mod:`~aifab.ops.drift.text`, embeddings by
:mod:`~aifab.ops.drift.embedding` (both over the domain classifier of
:mod:`~aifab.ops.drift.domain`), images by :mod:`~aifab.ops.drift.image`;
:mod:`~aifab.ops.drift.view` shapes one column of a stored report for the dashboard.
"""

from aifab.ops.drift.report import KINDS, DriftOptions, column_kind, drift_report

__all__ = ["KINDS", "DriftOptions", "column_kind", "drift_report"]
