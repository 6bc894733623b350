"""Layer 1, data: the versioned lake and the service functions over it.

Every public service is importable from here (``from aifab.data import ingest``); the modules
load on first use so importing the package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # catalog and browsing
    "VersionInfo": "catalog",
    "CommitResult": "catalog",
    "resolve": "catalog",
    "list_datasets": "catalog",
    "list_versions": "catalog",
    "commit_query": "catalog",
    "commit_staged": "catalog",
    "head": "browse",
    "query": "browse",
    "diff": "browse",
    "export": "browse",
    "lineage": "browse",
    "append_records": "append",
    "flush_appends": "append",
    "quarantine": "quarantine",
    "list_quarantine": "quarantine",
    "count_quarantine": "quarantine",
    # ingest
    "ingest": "ingest",
    "IngestOptions": "ingest",
    "IngestResult": "ingest",
    # clean and validate
    "clean": "clean",
    "CleanSpec": "clean",
    "validate": "validate",
    "ExpectationSuite": "validate",
    "ValidationReport": "validate",
    # labels
    "label": "label",
    "LabelSpec": "label",
    "import_labels": "label",
    "label_queue_next": "label",
    "submit_label": "label",
    "label_history": "label",
    # features and splits
    "fit_features": "features",
    "FeatureSpec": "features",
    "FeatureTransform": "features",
    "load_feature_transform": "features",
    "split": "splits",
    "SplitSpec": "splits",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'aifab.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"aifab.data.{module}"), name)
    globals()[name] = value
    return value
