"""Layer 1, data: the versioned lake and the service functions over it.

Every public service is importable from here (``from aifab.data import ingest``). The CLI
imports this package only inside commands, so ``aifab --help`` does not pay for it. Several
modules share their main function's name (``clean.clean``); the imports below bind the package
names to the functions.
"""

from __future__ import annotations

from aifab.data.append import append_records, flush_appends
from aifab.data.browse import diff, export, head, lineage, query
from aifab.data.catalog import (
    CommitResult,
    VersionInfo,
    commit_query,
    commit_staged,
    ensure_profile,
    list_datasets,
    list_version_summaries,
    list_versions,
    resolve,
)
from aifab.data.clean import CleanSpec, clean
from aifab.data.delta import publish_delta
from aifab.data.features import FeatureSpec, FeatureTransform, fit_features, load_feature_transform
from aifab.data.ingest import IngestOptions, IngestResult, ingest
from aifab.data.label import (
    LabelSpec,
    import_labels,
    label,
    label_history,
    label_queue_next,
    submit_label,
)
from aifab.data.quarantine import count_quarantine, list_quarantine, quarantine
from aifab.data.sealer import BackgroundSealer
from aifab.data.splits import SplitSpec, split
from aifab.data.thumbnails import cell_thumbnail
from aifab.data.validate import ExpectationSuite, ValidationReport, validate
from aifab.data.verify import verify_lake

__all__ = [
    "BackgroundSealer",
    "CleanSpec",
    "CommitResult",
    "ExpectationSuite",
    "FeatureSpec",
    "FeatureTransform",
    "IngestOptions",
    "IngestResult",
    "LabelSpec",
    "SplitSpec",
    "ValidationReport",
    "VersionInfo",
    "append_records",
    "cell_thumbnail",
    "clean",
    "publish_delta",
    "commit_query",
    "commit_staged",
    "count_quarantine",
    "diff",
    "ensure_profile",
    "export",
    "fit_features",
    "flush_appends",
    "head",
    "import_labels",
    "ingest",
    "label",
    "label_history",
    "label_queue_next",
    "lineage",
    "list_datasets",
    "list_quarantine",
    "list_version_summaries",
    "list_versions",
    "load_feature_transform",
    "quarantine",
    "query",
    "resolve",
    "split",
    "submit_label",
    "validate",
    "verify_lake",
]
