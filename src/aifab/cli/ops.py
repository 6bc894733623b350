"""``aifab ops``: files for teams that run Prometheus and Grafana beside aifab."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

ops_app = typer.Typer(help="Operations: Prometheus alert rules and a Grafana dashboard.")


@ops_app.command("export-rules")
def export_rules_command(
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the files into."),
) -> None:
    """Write aifab-alerts.rules.yml (Prometheus), its promtool tests and a Grafana dashboard."""
    from aifab.ops.export_rules import export_rules

    paths = export_rules(out)
    sys.stdout.write("".join(f"wrote {paths[k]}\n" for k in ("rules", "tests", "dashboard")))


def register(app: typer.Typer) -> None:
    """Add the ``ops`` group to ``app``."""
    app.add_typer(ops_app, name="ops", no_args_is_help=True)
