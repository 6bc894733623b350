"""Options of ``aifab data ingest``: how to read files, page through APIs and crawl sites."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aifab.core.config import StrictConfig

FileFormat = Literal["csv", "tsv", "jsonl", "json", "parquet", "xlsx", "arrow", "orc", "arff"]


class IngestOptions(StrictConfig):
    """Every knob of an ingest; each source kind reads the fields that concern it."""

    # files (local or downloaded)
    format: FileFormat | None = Field(
        None, description="File format; default from the extension or the content-type."
    )
    delimiter: str | None = Field(
        None, min_length=1, max_length=4, description="CSV field delimiter; default sniffed."
    )
    header: bool | None = Field(
        None, description="The first CSV line holds the column names (default: sniffed)."
    )
    sample_size: int = Field(
        20480, ge=-1, description="Rows sampled to infer CSV/JSON types (-1: the whole file)."
    )
    comment: str | None = Field(
        None, min_length=1, max_length=1, description="CSV comment-line prefix (default sniffed)."
    )
    quote: str | None = Field(
        None, max_length=1, description="CSV quote character ('' for none; default sniffed)."
    )
    escape: str | None = Field(
        None, max_length=1, description="CSV escape character (default sniffed)."
    )
    skip_rows: int | None = Field(
        None,
        ge=0,
        description="CSV lines above the table to skip, e.g. a free-text preamble "
        "(default: sniffed).",
    )
    names: list[str] | None = Field(
        None,
        min_length=1,
        description="CSV column names, for a file whose first line is data (implies no header).",
    )
    text_columns: list[str] = Field(
        default_factory=list,
        description="CSV columns kept as text, never read as numbers, dates or booleans.",
    )
    date_format: str | None = Field(
        None, min_length=1, description="strptime format of CSV dates, e.g. '%m/%d/%y'."
    )
    timestamp_format: str | None = Field(
        None, min_length=1, description="strptime format of CSV timestamps."
    )
    dayfirst: bool | None = Field(
        None,
        description="CSV dates like 1/2/85 are day first (default: month first unless a "
        "value such as 13/2/85 shows day first).",
    )
    decimal: Literal[".", ","] = Field(".", description="Decimal separator of CSV numbers.")
    max_line_size: int | None = Field(
        None, ge=1, description="Longest CSV line in bytes (DuckDB's default: 2,000,000)."
    )
    encoding: str | None = Field(
        None,
        min_length=1,
        description="Text encoding of CSV files and documents (default: BOM, HTML charset, UTF-8).",
    )
    strict: bool = Field(
        False,
        description="Quarantine short CSV rows instead of padding them, never widen types, and "
        "keep as text values that read two ways (Yes/No, dates like 1/2/85).",
    )
    min_kept_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Fail, committing nothing, when fewer than this share of rows is kept.",
    )
    sheet: str | None = Field(None, description="Excel: the sheet to read (default the first).")
    image_columns: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Columns holding images (file paths, relative to the file's folder, or "
        "image bytes): a row whose image is missing or unreadable is quarantined, naming it.",
    )
    # HTTP (downloads, APIs, crawls)
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra request headers (e.g. Authorization)."
    )
    params: dict[str, str] = Field(
        default_factory=dict, description="Query parameters added to the first API request."
    )
    timeout: float = Field(30.0, gt=0, description="Seconds to wait for a server to answer.")
    retries: int = Field(3, ge=0, le=20, description="Retries on 5xx, 429 and connection errors.")
    backoff: float = Field(
        0.5, ge=0, description="First retry wait in seconds; doubles on each retry."
    )
    user_agent: str = Field("aifab-ingest/0.1", min_length=1, description="User-Agent header.")
    # REST APIs
    records_field: str | None = Field(
        None,
        description="Dotted path of the records list in each API page or JSON file "
        "(default: the body).",
    )
    next_field: str | None = Field(
        None, description="Dotted path of the next-page URL in the body (default: Link header)."
    )
    page_param: str | None = Field(
        None, description="Query parameter to increment per page instead of following links."
    )
    start_page: int = Field(1, ge=0, description="First value of page_param.")
    max_pages: int | None = Field(
        None, ge=1, description="Stop after this many API pages or crawled pages."
    )
    # crawling
    delay: float = Field(1.0, ge=0, description="Seconds between requests to the same host.")
    max_bytes: int = Field(
        5_000_000, ge=1, description="Pages larger than this are not read (recorded as skipped)."
    )
    depth: int = Field(0, ge=0, description="Follow same-host links this many hops from a seed.")
    robots: bool = Field(True, description="Obey robots.txt.")

    def recorded(self) -> dict[str, Any]:
        """The non-default options, safe to store in lineage (header values are secrets)."""
        data = self.model_dump(exclude_defaults=True)
        if "headers" in data:
            data["headers"] = sorted(data["headers"])
        return data
