"""Paginated JSON REST APIs: follow next links (body field or Link header) or count pages.

Records are appended to a JSON Lines scratch file page by page, then DuckDB infers the schema
over all of them and writes the staged Parquet file, so memory stays bounded by one page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import duckdb
import httpx

from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.sources import http
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged


def _at_path(body: Any, path: str) -> tuple[bool, Any]:
    """Walk a dotted path (``data.items``, ``results.0``) through dicts and lists."""
    node = body
    for key in path.split("."):
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return False, None
    return True, node


def _records(body: Any, field: str | None, url: str) -> list[Any]:
    if field is not None:
        found, value = _at_path(body, field)
        if not found or not isinstance(value, list):
            what = "is missing" if not found else f"is a {type(value).__name__}, not a list"
            raise InvalidInputError(f"{url}: records_field {field!r} {what} in the response")
        return value
    if isinstance(body, list):
        return body
    lists = [k for k, v in body.items() if isinstance(v, list)] if isinstance(body, dict) else []
    if len(lists) == 1:
        # One list in an object ({"data": [...], "next": ...}) is unambiguous.
        return list(body[lists[0]])
    keys = ", ".join(sorted(body)) if isinstance(body, dict) else type(body).__name__
    raise InvalidInputError(
        f"{url}: the response is not a list of records; set records_field (keys: {keys})"
    )


def _next_url(body: Any, resp: httpx.Response, field: str | None, current: str) -> str | None:
    if field is not None:
        _, value = _at_path(body, field)
        return urljoin(current, value) if isinstance(value, str) and value else None
    link = resp.links.get("next", {}).get("url")
    return urljoin(current, link) if link else None


def _page(cl: httpx.Client, url: str, opts: IngestOptions) -> tuple[Any, httpx.Response]:
    resp = http.get(cl, url, opts)
    try:
        http.check_status(resp, url)
        resp.read()
    finally:
        resp.close()
    try:
        return resp.json(), resp
    except ValueError as exc:
        raise InvalidInputError(f"{url}: the response is not JSON ({exc})") from None


def pages(cl: httpx.Client, url: str, opts: IngestOptions) -> Iterator[list[Any]]:
    """Yield each page's records until an empty page, no next link, or ``max_pages``."""
    first = str(httpx.URL(url).copy_merge_params(opts.params))
    page_no = opts.start_page
    target: str | None = first
    seen: set[str] = set()
    count = 0
    while target is not None and (opts.max_pages is None or count < opts.max_pages):
        if opts.page_param:
            target = str(httpx.URL(first).copy_set_param(opts.page_param, page_no))
        if target in seen:  # a server whose next link points back: stop instead of looping
            return
        seen.add(target)
        body, resp = _page(cl, target, opts)
        records = _records(body, opts.records_field, target)
        count += 1
        yield records
        if not records:
            return
        page_no += 1
        if not opts.page_param:
            target = _next_url(body, resp, opts.next_field, target)


def stage_api(con: duckdb.DuckDBPyConnection, url: str, opts: IngestOptions, dest: Path) -> Staged:
    """Fetch every page of ``url`` and stage the records as Parquet at ``dest``.

    Raises:
        InvalidInputError: a page is not JSON, lacks the records field, or there are no records.
        NotFoundError: the API is unreachable (after retries) or answers 404.
    """
    scratch = lake.staging_path(".jsonl")
    n_pages = n_records = 0
    try:
        with http.client(opts) as cl, scratch.open("w", encoding="utf-8") as fh:
            for records in pages(cl, url, opts):
                n_pages += 1
                for rec in records:
                    # Scalars become one-column rows so every line is a JSON object.
                    fh.write(json.dumps(rec if isinstance(rec, dict) else {"value": rec}) + "\n")
                n_records += len(records)
        if n_records == 0:
            raise InvalidInputError(f"{url}: the API returned no records ({n_pages} page(s))")
        reader = (
            f"read_json({lake.sql_string(str(scratch))}, "
            "format='newline_delimited', sample_size=-1)"
        )
        try:
            lake.copy_to_parquet(con, f"SELECT * FROM {reader}", dest)
        except duckdb.Error as exc:
            raise InvalidInputError(
                f"{url}: cannot tabulate the records: {first_line(exc)}"
            ) from None
    finally:
        scratch.unlink(missing_ok=True)
    return Staged(dest, url, "api", {"pages": n_pages, "records": n_records})
