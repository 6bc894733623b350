"""``aifab data ingest``: files, folders, URLs, paginated APIs and crawls into dataset versions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, counted, emit


def _pairs(values: list[str] | None, sep: str, what: str) -> dict[str, str]:
    """Parse ``KEY<sep>VALUE`` options (``--param page_size=50``, ``-H 'Accept: x'``)."""
    from aifab.core.errors import InvalidInputError

    out: dict[str, str] = {}
    for item in values or []:
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise InvalidInputError(f"{what} {item!r}: expected KEY{sep}VALUE")
        out[key.strip()] = value.strip()
    return out


def _options(options_file: Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Options from a YAML file, overridden by the flags that were given."""
    from aifab.core.config import load_yaml
    from aifab.core.errors import InvalidInputError

    base = load_yaml(options_file) if options_file else {}
    if not isinstance(base, dict):
        raise InvalidInputError(f"{options_file}: expected a mapping of ingest options")
    return {**base, **{k: v for k, v in flags.items() if v is not None and v != {}}}


def _facts(details: dict[str, Any]) -> str:
    """Lines on what the ingest changed or left out besides rejected lines."""
    out = ""
    for note in details.get("inferred") or ():
        out += f"\n{note}"
    if details.get("encoding"):
        out += f"\nread as {details['encoding']} text (--encoding to change)"
    if details.get("padded"):
        out += f"\npadded {details['padded']} short row(s) with nulls (--strict rejects them)"
    for column, kind in (details.get("widened") or {}).items():
        out += f"\ncolumn {column!r} widened to {kind} (a value did not fit the sniffed type)"
    if details.get("skipped"):
        names = ", ".join(details.get("skipped_files", []))
        more = ", ..." if details["skipped"] > len(details.get("skipped_files", [])) else ""
        out += f"\nskipped {details['skipped']} file(s) not of the folder's kind: {names}{more}"
    return out


def _summary(result: Any) -> str:
    v = result.version
    if result.created:
        text = f"ingested {counted(result.rows, 'row')} into {v.ref} from {v.source}"
    else:
        text = f"{v.ref} already holds this content ({counted(result.rows, 'row')}): no new version"
    text += _facts(result.details)
    if result.rejected:
        shown = ", ".join(str(n) for n in result.rejected_lines)
        more = ", ..." if result.rejected > len(result.rejected_lines) else ""
        what = f"malformed line(s) (lines {shown}{more})" if shown else "unreadable file(s)"
        text += (
            f"\nrejected {result.rejected} {what}; "
            f"see 'aifab data quarantine {v.dataset} --stage ingest'"
        )
    return text


def register(app: typer.Typer) -> None:
    """Add the ingest commands to the ``aifab data`` group."""

    @app.command("ingest")
    def ingest_cmd(
        name: str = typer.Argument(..., help="Dataset to add the version to (created if new)."),
        source: str = typer.Argument(
            ..., help="File, folder, http(s) URL; an API URL with --api; a URL list with --crawl."
        ),
        api: bool = typer.Option(False, "--api", help="SOURCE is a paginated JSON REST API."),
        crawl: bool = typer.Option(False, "--crawl", help="SOURCE is a file of URLs to crawl."),
        kind: str = typer.Option("auto", help="auto, file, docs, images, url, api or crawl."),
        fmt: str | None = typer.Option(
            None, "--format", help="csv, tsv, jsonl, json, parquet, xlsx, arrow, orc, arff."
        ),
        delimiter: str | None = typer.Option(None, help="CSV delimiter (default sniffed)."),
        header: bool | None = typer.Option(
            None, "--header/--no-header", help="CSV has a header line (default sniffed)."
        ),
        sample_size: int | None = typer.Option(None, help="Rows sampled for types (-1: all)."),
        comment: str | None = typer.Option(None, help="CSV comment prefix, e.g. '#'."),
        quote: str | None = typer.Option(None, help="CSV quote character ('' for none)."),
        escape: str | None = typer.Option(None, help="CSV escape character."),
        skip_rows: int | None = typer.Option(
            None, "--skip-rows", help="CSV lines above the table to skip (default sniffed)."
        ),
        names: str | None = typer.Option(
            None, "--names", help="CSV column names, comma-separated (the first line is data)."
        ),
        text_column: list[str] | None = typer.Option(
            None, "--text-column", help="A CSV column kept as text; repeatable."
        ),
        date_format: str | None = typer.Option(
            None, "--date-format", help="strptime format of CSV dates, e.g. '%m/%d/%y'."
        ),
        timestamp_format: str | None = typer.Option(
            None, "--timestamp-format", help="strptime format of CSV timestamps."
        ),
        dayfirst: bool | None = typer.Option(
            None,
            "--dayfirst/--no-dayfirst",
            help="Dates like 1/2/85 are day first (default: month first unless a value shows).",
        ),
        decimal: str | None = typer.Option(None, help="CSV decimal separator: '.' or ','."),
        max_line_size: int | None = typer.Option(None, help="Longest CSV line in bytes."),
        encoding: str | None = typer.Option(
            None, help="Text encoding of CSVs/documents (default: BOM, charset, UTF-8)."
        ),
        strict: bool | None = typer.Option(
            None,
            "--strict/--no-strict",
            help="Quarantine short rows; never widen types; keep text that reads two ways.",
        ),
        min_kept_share: float | None = typer.Option(
            None, help="Fail when under this share of rows is kept (default 0.5)."
        ),
        sheet: str | None = typer.Option(None, help="Excel sheet (default the first)."),
        image_column: list[str] | None = typer.Option(
            None,
            "--image-column",
            help="A column of image paths or bytes, each checked; repeatable.",
        ),
        records_field: str | None = typer.Option(
            None, help="API or JSON file: dotted path of the records."
        ),
        next_field: str | None = typer.Option(None, help="API: dotted path of the next URL."),
        page_param: str | None = typer.Option(None, help="API: page number query parameter."),
        start_page: int | None = typer.Option(None, help="API: first page number (default 1)."),
        param: list[str] | None = typer.Option(None, "--param", help="API: KEY=VALUE, repeat."),
        http_header: list[str] | None = typer.Option(
            None, "--http-header", "-H", help="HTTP header 'Name: value', repeatable."
        ),
        max_pages: int | None = typer.Option(None, help="Stop after N API or crawled pages."),
        delay: float | None = typer.Option(None, help="Crawl: seconds between requests/host."),
        max_bytes: int | None = typer.Option(None, help="Crawl: skip pages larger than this."),
        depth: int | None = typer.Option(None, help="Crawl: follow same-host links N hops."),
        robots: bool | None = typer.Option(
            None, "--robots/--no-robots", help="Crawl: obey robots.txt (default yes)."
        ),
        retries: int | None = typer.Option(None, help="HTTP retries on 5xx/429/errors."),
        timeout: float | None = typer.Option(None, help="HTTP timeout in seconds."),
        options_file: Path | None = typer.Option(
            None, "--options", "-o", help="YAML file of ingest options (flags override it)."
        ),
        progress: bool | None = typer.Option(
            None, "--progress/--no-progress", help="Progress bar (default: when on a terminal)."
        ),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Ingest SOURCE as a new version of dataset NAME (identical content: same version)."""
        from aifab.core.errors import InvalidInputError
        from aifab.data.ingest import ingest

        if api and crawl:
            raise InvalidInputError("use either --api or --crawl, not both")
        flags = {
            "format": fmt,
            "delimiter": delimiter,
            "header": header,
            "sample_size": sample_size,
            "comment": comment,
            "quote": quote,
            "escape": escape,
            "skip_rows": skip_rows,
            "names": [n.strip() for n in names.split(",")] if names else None,
            "text_columns": text_column or None,
            "date_format": date_format,
            "timestamp_format": timestamp_format,
            "dayfirst": dayfirst,
            "decimal": decimal,
            "max_line_size": max_line_size,
            "encoding": encoding,
            "strict": strict,
            "min_kept_share": min_kept_share,
            "sheet": sheet,
            "image_columns": image_column or None,
            "records_field": records_field,
            "next_field": next_field,
            "page_param": page_param,
            "start_page": start_page,
            "params": _pairs(param, "=", "--param"),
            "headers": _pairs(http_header, ":", "--http-header"),
            "max_pages": max_pages,
            "delay": delay,
            "max_bytes": max_bytes,
            "depth": depth,
            "robots": robots,
            "retries": retries,
            "timeout": timeout,
        }
        result = ingest(
            name,
            source,
            kind="api" if api else "crawl" if crawl else kind,
            options=_options(options_file, flags),
            progress=sys.stderr.isatty() if progress is None else progress,
        )
        emit(result.to_dict() if as_json else _summary(result), as_json)
