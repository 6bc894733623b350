"""``ingest``: bring files, folders, URLs, REST APIs and crawled pages in as dataset versions.

Each source writes a Parquet file into the workspace's ``tmp/``; only the catalog moves it into
the lake (an atomic rename) and records the version, so an ingest killed at any point leaves
no partial version. Rows a source cannot parse go to the quarantine, stage ``ingest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

import duckdb

from aifab.core.config import as_config
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import VersionInfo, commit_staged
from aifab.data.image_cells import drop_image_bombs
from aifab.data.quarantine import quarantine
from aifab.data.refs import check_name
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged

__all__ = ["IngestKind", "IngestOptions", "IngestResult", "ingest", "source_kind"]

IngestKind = Literal["auto", "file", "docs", "images", "url", "api", "crawl"]
_KINDS: tuple[str, ...] = get_args(IngestKind)


@dataclass(frozen=True)
class IngestResult:
    """The version an ingest produced and what was left out of it."""

    version: VersionInfo
    created: bool
    rows: int
    rejected: int
    #: The first few rejected line numbers (all of them are in the quarantine).
    rejected_lines: tuple[int, ...] = ()
    #: Source facts: format, pages fetched, files read...
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "version": self.version.ref,
            "created": self.created,
            "rows": self.rows,
            "rejected": self.rejected,
            "rejected_lines": list(self.rejected_lines),
            "details": self.details,
            "source": self.version.source,
        }


def source_kind(source: str, kind: str = "auto", *, tabular: bool = False) -> str:
    """Decide how to read ``source``: a URL, a folder (docs or images), a document or a file.

    ``tabular`` (a format was given) reads a ``.txt`` file as a table, not as a document.

    Raises:
        InvalidInputError: unknown kind or URL scheme.
        NotFoundError: a local path that does not exist.
    """
    if kind not in _KINDS:
        raise InvalidInputError(f"unknown ingest kind {kind!r}; use one of {', '.join(_KINDS)}")
    if kind != "auto":
        return kind
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if scheme in ("http", "https"):
        return "url"
    if scheme:
        raise InvalidInputError(f"{source}: unsupported URL scheme {scheme!r} (use http/https)")
    path = Path(source).expanduser()
    if path.is_dir():
        from aifab.data.sources.folders import folder_kind

        return folder_kind(path)
    if not path.exists():
        raise NotFoundError(f"{source}: no such file or folder")
    from aifab.data.sources.folders import DOC_EXTENSIONS, IMAGE_EXTENSIONS

    # A single document or image is read as a one-row table (a folder of one, in effect).
    suffix = path.suffix.lower()
    if suffix in IMAGE_EXTENSIONS and not tabular:
        return "images"
    return "docs" if suffix in DOC_EXTENSIONS and not tabular else "file"


def _stage_url(
    con: duckdb.DuckDBPyConnection, url: str, opts: IngestOptions, dest: Path, progress: bool
) -> Staged:
    from aifab.data.sources import http
    from aifab.data.sources.files import stage_file

    with http.client(opts) as cl:
        got = http.download(cl, url, opts)
    try:
        staged = stage_file(con, got.path, opts, dest, progress=progress, fmt=got.format)
    finally:
        got.path.unlink(missing_ok=True)
    details = {**staged.details, "content_type": got.content_type, "bytes": got.bytes}
    return replace(staged, source=url, source_kind="url", details=details)


def _stage_archive(
    archive_kind: str,
    path: Path,
    opts: IngestOptions,
    con: duckdb.DuckDBPyConnection,
    dest: Path,
    progress: bool,
) -> Staged:
    """Unpack a zip/tar archive or gzip'd document and stage what it holds.

    Raises:
        InvalidInputError: an archive of several tables, of images (their rows would point
            into a scratch folder), or of nothing aifab reads.
    """
    import shutil

    from aifab.data.sources import archives
    from aifab.data.sources.files import format_of
    from aifab.data.sources.folders import DOC_EXTENSIONS, IMAGE_EXTENSIONS

    folder = lake.staging_path("")
    try:
        members = archives.unpack(path, archive_kind, folder)
        tables = [m for m in members if opts.format or format_of(m.name)]
        docs = [m for m in members if m.suffix.lower() in DOC_EXTENSIONS]
        if len(tables) == 1 or (tables and not opts.format and len(members) == 1):
            staged = _stage("file", str(tables[0]), opts, con, dest, progress)
        elif not tables and docs:
            staged = _stage("docs", str(folder), opts, con, dest, progress)
        else:
            images = [m for m in members if m.suffix.lower() in IMAGE_EXTENSIONS]
            names = ", ".join(m.name for m in (tables or images or members)[:5])
            what = (
                f"{len(tables)} tables ({names}): unpack it and ingest each file"
                if tables
                else f"images ({names}): unpack it and ingest the folder"
                if images
                else f"no table, document or image ({names or 'no files'})"
            )
            raise InvalidInputError(f"{path}: the archive holds {what}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    details = {**staged.details, "archive": path.name}
    return replace(staged, source=str(path), details=details)


def _stage(
    kind: str,
    source: str,
    opts: IngestOptions,
    con: duckdb.DuckDBPyConnection,
    dest: Path,
    progress: bool,
) -> Staged:
    """Run the source for ``kind``; sources are imported here so each pulls only its libraries."""
    if kind == "url":
        return _stage_url(con, source, opts, dest, progress)
    if kind == "api":
        from aifab.data.sources.api import stage_api

        return stage_api(con, source, opts, dest)
    path = Path(source).expanduser().resolve()
    if kind in ("file", "docs") and path.is_file():
        from aifab.data.sources.archives import kind_of
        from aifab.data.sources.folders import DOC_EXTENSIONS

        archive = kind_of(path, DOC_EXTENSIONS)
        if archive is not None and not (opts.format and archive == "gzdoc"):
            return _stage_archive(archive, path, opts, con, dest, progress)
    if kind == "crawl":
        from aifab.data.sources.crawl import stage_crawl

        return stage_crawl(path, opts, dest)
    if kind in ("docs", "images"):
        from aifab.data.sources import folders

        if kind == "docs":
            return folders.stage_documents(path, dest, opts.encoding)
        if path.is_file():
            return folders.stage_image_file(path, dest)
        return folders.stage_images(path, dest)
    from aifab.data.sources.files import stage_file

    staged = stage_file(con, path, opts, dest, progress=progress)
    if opts.image_columns:
        from aifab.data.sources.image_rows import check_image_columns

        base = path if path.is_dir() else path.parent
        staged = check_image_columns(staged, opts.image_columns, base, opts.min_kept_share)
    return staged


def ingest(
    name: str,
    source: str | Path,
    *,
    kind: str = "auto",
    options: IngestOptions | Path | str | Mapping[str, Any] | None = None,
    progress: bool = False,
) -> IngestResult:
    """Ingest ``source`` as a new version of dataset ``name``.

    Args:
        name: the dataset (created on first ingest).
        source: a csv/tsv/jsonl/json/parquet/xlsx/feather/arrow/orc/arff file, a zip/tar
            archive of one table or of documents, a document or image, a folder of documents
            or images, an http(s) URL of such a file, an API URL (``kind="api"``) or a file of
            URLs to crawl (``kind="crawl"``).
        kind: ``auto`` (from the source), ``file``, ``docs``, ``images``, ``url``, ``api`` or
            ``crawl``.
        options: :class:`IngestOptions` as an instance, a mapping or a YAML path.
        progress: show a progress bar on stderr while a file is copied.

    Returns:
        The version (an existing one when the content is identical), its row count, how
        many input lines were rejected into the quarantine, and details such as how many
        short rows were padded, which columns were widened and which folder files skipped.

    Raises:
        InvalidInputError: bad options, unknown format, empty folder, unparseable content,
            binary content, or a file of which under ``min_kept_share`` of the rows is kept
            (nothing is committed then).
        NotFoundError: a missing file or folder, an unreachable URL.
    """
    check_name(name)
    opts = as_config(IngestOptions, options, source="ingest options")
    src = str(source)
    kind = source_kind(src, kind, tabular=opts.format is not None)
    con = lake.connect()
    # DuckDB draws its own progress bar on stdout for queries over 2 s, which would corrupt
    # ``--json`` output; ours (progress=True) polls query_progress() and draws on stderr.
    con.execute("SET enable_progress_bar_print=false")
    dest = lake.staging_path()
    try:
        staged = drop_image_bombs(con, _stage(kind, src, opts, con, dest, progress))
        details = dict(staged.details)
        if staged.rejected:
            details["rejected"] = staged.rejected
        transform = {
            "kind": "ingest",
            "source_kind": staged.source_kind,
            "options": opts.recorded(),
            "details": details,
        }
        result = commit_staged(
            name, staged.path, source=staged.source, transform=transform, con=con
        )
        # Identical content means these rejects were quarantined when the version was made.
        if result.created and staged.rejected:
            quarantine(name, "ingest", staged.rejects)
    finally:
        dest.unlink(missing_ok=True)
        con.close()
    v = result.version
    return IngestResult(
        v, result.created, v.num_rows, staged.rejected, staged.rejected_lines, details
    )
