"""``aifab data``: the versioned lake from the command line.

Browsing commands live here; ingest, quality (clean/validate), labels and features register
theirs from their own modules.
"""

from __future__ import annotations

import typer

from aifab.cli import data_features, data_ingest, data_label, data_quality

app = typer.Typer(help="Ingest, version, browse, clean, validate, label and featurize data.",
                  no_args_is_help=True)

data_ingest.register(app)
data_quality.register(app)
data_label.register(app)
data_features.register(app)
