"""``aifab data``: the versioned lake from the command line.

Browsing commands live here; ingest, quality (clean/validate), labels and features register
theirs from their own modules.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli import data_features, data_ingest, data_label, data_quality, fast_reads
from aifab.cli.output import JSON_HELP, emit, print_json, when

app = typer.Typer(
    help="Ingest, version, browse, clean, validate, label and featurize data.", no_args_is_help=True
)

data_ingest.register(app)
data_quality.register(app)
data_label.register(app)
data_features.register(app)

_VERSION_COLUMNS = ["ref", "rows", "columns", "transform", "source", "created", "hash"]


def _version_row(v: Any) -> dict[str, Any]:
    return {
        "ref": v.ref,
        "rows": v.num_rows,
        "columns": len(v.schema),
        "transform": v.transform.get("kind"),
        "source": v.source,
        "created": when(v.created_at),
        "hash": v.content_hash[:12],
    }


def _emit_table(table: Any, as_json: bool) -> None:
    rows = table.to_pylist()
    if as_json:
        print_json(rows)
    else:
        emit(rows, False, table.column_names)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List datasets with their latest version."""
    rows = fast_reads.list_datasets()
    if rows is None:
        from aifab.data import list_datasets

        rows = list_datasets()
    if not as_json:
        rows = [{**r, "updated_at": when(r["updated_at"])} for r in rows]
    emit(rows, as_json, ["name", "latest", "versions", "rows", "columns", "updated_at"])


@app.command("show")
def show(
    ref: str = typer.Argument(..., help="NAME or NAME@VERSION."),
    profile: bool = typer.Option(False, "--profile", help="Include the column profile."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show one version: schema, row count, source, transform, parents (and profile)."""
    d = None if profile else fast_reads.resolve(ref)
    if d is None:
        from dataclasses import replace

        from aifab.data import resolve
        from aifab.data.catalog import ensure_profile

        v = resolve(ref)
        if profile:
            v = replace(v, profile=ensure_profile(v))
        d = v.to_dict(with_profile=True)
    if as_json:
        print_json(d if profile else {k: value for k, value in d.items() if k != "profile"})
        return
    emit(
        {
            "ref": d["ref"],
            "rows": d["num_rows"],
            "bytes": d["num_bytes"],
            "hash": d["content_hash"],
            "source": d["source"],
            "transform": d["transform"],
            "parents": ", ".join(d["parents"]),
            "created": f"{when(d['created_at'])} by {d['created_by']}",
        },
        False,
        title=d["ref"],
    )
    cols = d["profile"].get("columns", {})
    emit(
        [
            {
                "column": c["name"],
                "type": c["type"],
                "nulls": f"{cols.get(c['name'], {}).get('null_share', 0):.1%}",
                "distinct": cols.get(c["name"], {}).get("distinct"),
                "min": cols.get(c["name"], {}).get("min"),
                "max": cols.get(c["name"], {}).get("max"),
                "mean": cols.get(c["name"], {}).get("mean"),
            }
            for c in d["schema"]
        ],
        False,
        title="schema" + (" and profile" if profile else ""),
    )


@app.command("head")
def head(
    ref: str = typer.Argument(..., help="NAME or NAME@VERSION."),
    n: int = typer.Option(10, "-n", help="Rows to show."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show the first rows of a version."""
    from aifab.data import head as head_

    _emit_table(head_(ref, n), as_json)


@app.command("query")
def query(
    sql: str = typer.Argument(..., help='SQL over datasets by name: FROM iris or FROM "iris@2".'),
    limit: int = typer.Option(1000, help="At most this many rows."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run a SQL query (DuckDB dialect) over datasets."""
    from aifab.data import query as query_

    _emit_table(query_(sql, limit=limit), as_json)


@app.command("versions")
def versions(
    name: str = typer.Argument(..., help="Dataset name."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List every version of a dataset."""
    from aifab.data import list_versions

    vs = list_versions(name)
    if as_json:
        print_json([v.to_dict() for v in vs])
    else:
        emit([_version_row(v) for v in vs], False, _VERSION_COLUMNS)


@app.command("lineage")
def lineage(
    ref: str = typer.Argument(..., help="NAME or NAME@VERSION."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show where a version came from and what was derived from it."""
    from aifab.data import lineage as lineage_

    graph = lineage_(ref)
    if as_json:
        print_json(graph)
        return
    emit(
        [{**n, "created_at": when(n["created_at"])} for n in graph["nodes"]],
        False,
        ["ref", "transform", "rows", "source", "created_at"],
        title=f"lineage of {graph['root']}",
    )
    emit(graph["edges"], False, ["parent", "child"], title="derived from")


@app.command("diff")
def diff(
    a: str = typer.Argument(..., help="First version, e.g. iris@1."),
    b: str = typer.Argument(..., help="Second version, e.g. iris@2."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Compare two versions: schema, rows added/removed, profile changes."""
    from aifab.data import diff as diff_

    emit(diff_(a, b), as_json, title=f"{a} -> {b}")


@app.command("export")
def export(
    ref: str = typer.Argument(..., help="NAME or NAME@VERSION."),
    path: Path = typer.Argument(
        ..., help="Output file (.parquet, .csv, .tsv, .json, .jsonl, .arrow, .feather)."
    ),
    fmt: str | None = typer.Option(
        None, "--format", help="parquet, csv, tsv, json, jsonl, arrow or feather."
    ),
) -> None:
    """Write a version to a file."""
    from aifab.data import export as export_

    emit(f"wrote {export_(ref, path, fmt)}", False)


@app.command("publish")
def publish(
    ref: str = typer.Argument(..., help="NAME (its latest version) or NAME@VERSION."),
    uri: str = typer.Argument(..., help="Table location: a directory or file:// URI."),
    fmt: str = typer.Option("delta", "--format", help="Open table format: delta."),
    history: bool = typer.Option(
        False, "--history", help="Every version of NAME the table does not hold yet, in order."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Publish versions as an open table (Delta Lake) whose versions follow aifab's."""
    from aifab.core.errors import InvalidInputError
    from aifab.data import publish_delta

    if fmt != "delta":
        raise InvalidInputError(f"--format {fmt!r}: only 'delta' is supported")
    out = publish_delta(ref, uri, history=history)
    if as_json:
        emit(out, True)
        return
    done = ", ".join(f"{p['ref']} -> Delta version {p['delta_version']}" for p in out["published"])
    emit(f"{out['uri']}: {done or 'nothing new to publish'}", False)


@app.command("append")
def append(
    name: str = typer.Argument(..., help="Dataset to append to (created if new)."),
    source: str = typer.Argument("-", help="JSONL file of records, or - for stdin."),
    flush: bool = typer.Option(False, "--flush", help="Seal a version now."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Append JSON records (one per line) as pushed events, sealed into versions in batches."""
    from aifab.core.errors import InvalidInputError
    from aifab.data import append_records

    if source == "-":
        lines = sys.stdin.read()
    else:
        try:
            lines = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError(f"{source}: cannot read ({exc.strerror})") from None
    records = []
    for i, line in enumerate(lines.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{source}:{i}: invalid JSON: {exc.msg}") from None
    emit(append_records(name, records, flush=flush).to_dict(), as_json)


@app.command("verify")
def verify(
    name: str | None = typer.Argument(None, help="Dataset to check (default: every dataset)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Re-hash the lake objects of every version; exit 3 if any is missing or corrupt."""
    from aifab.core.errors import IntegrityError
    from aifab.data import verify_lake

    report = verify_lake(name)
    if as_json:
        print_json(report.to_dict())
    elif report.problems:
        emit(
            [{**p.__dict__, "versions": ", ".join(p.versions)} for p in report.problems],
            False,
            ["object", "problem", "versions"],
        )
    if report.problems:
        first = report.problems[0]
        raise IntegrityError(
            f"{len(report.problems)} of {report.checked} lake objects cannot be trusted "
            f"(first: {first.object} {first.problem}, used by {', '.join(first.versions)})"
        )
    if not as_json:
        emit(f"lake intact: {report.checked} objects match their content hash", False)
