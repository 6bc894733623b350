"""HTTP for ingest: a configured httpx client, GET with retries and backoff, and file downloads.

Retries cover 5xx, 429 and connection errors, waiting ``backoff * 2**attempt`` seconds (or the
server's ``Retry-After``), capped at 30 s. Bodies are streamed so large files never sit in memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.sources.files import EXTENSIONS, format_of
from aifab.data.sources.options import FileFormat, IngestOptions

_MAX_WAIT = 30.0
_CHUNK = 1 << 20
#: Content-type -> format, for URLs whose path has no telling extension.
_CONTENT_TYPES: dict[str, FileFormat] = {
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "tsv",
    "application/x-ndjson": "jsonl",
    "application/ndjson": "jsonl",
    "application/jsonl": "jsonl",
    "application/json": "json",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
_SUFFIX = {fmt: ext for ext, fmt in reversed(EXTENSIONS.items())}


def client(opts: IngestOptions) -> httpx.Client:
    """An httpx client with the options' timeout, User-Agent and extra headers."""
    headers = {"User-Agent": opts.user_agent, **opts.headers}
    return httpx.Client(timeout=opts.timeout, headers=headers, follow_redirects=True)


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("Retry-After", "").strip()
    return min(float(value), _MAX_WAIT) if value.isdigit() else None


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def get(cl: httpx.Client, url: str, opts: IngestOptions) -> httpx.Response:
    """GET ``url`` as a stream, retrying transient failures; the caller closes the response.

    Raises:
        InvalidInputError: the URL is malformed or uses an unsupported scheme.
        NotFoundError: the server stayed unreachable through every retry.
    """
    for attempt in range(opts.retries + 1):
        last = attempt == opts.retries
        wait = min(opts.backoff * 2**attempt, _MAX_WAIT)
        try:
            resp = cl.send(cl.build_request("GET", url), stream=True)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise InvalidInputError(f"{url}: invalid URL ({_reason(exc)})") from None
        except httpx.TransportError as exc:
            if last:
                raise NotFoundError(
                    f"{url}: unreachable after {attempt + 1} attempt(s): {_reason(exc)}"
                ) from None
            time.sleep(wait)
            continue
        if (resp.status_code >= 500 or resp.status_code == 429) and not last:
            resp.close()
            time.sleep(_retry_after(resp) or wait)
            continue
        return resp
    raise AssertionError("unreachable")  # the loop always returns or raises


def check_status(resp: httpx.Response, url: str) -> None:
    """Raise a clear error for a 4xx/5xx answer (404 and 5xx read as "not available")."""
    code = resp.status_code
    if code < 400:
        return
    what = f"{url}: HTTP {code} {resp.reason_phrase}".rstrip()
    if code in (404, 410) or code >= 500:
        raise NotFoundError(what)
    raise InvalidInputError(what)


def _format(url: str, resp: httpx.Response) -> FileFormat | None:
    by_path = format_of(httpx.URL(url).path)
    if by_path is not None:
        return by_path
    content_type = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    return _CONTENT_TYPES.get(content_type)


@dataclass(frozen=True)
class Download:
    """A downloaded file in the workspace's ``tmp/`` and the format it was served as."""

    path: Path
    format: FileFormat
    content_type: str
    bytes: int


def download(cl: httpx.Client, url: str, opts: IngestOptions) -> Download:
    """Stream ``url`` into a scratch file named with the format's extension.

    Raises:
        InvalidInputError: the server answered 4xx or the format cannot be told.
        NotFoundError: unreachable, 404, or 5xx after retries.
    """
    resp = get(cl, url, opts)
    try:
        check_status(resp, url)
        fmt = opts.format or _format(url, resp)
        content_type = resp.headers.get("content-type", "")
        if fmt is None:
            raise InvalidInputError(
                f"{url}: cannot tell the file format (content-type {content_type or 'none'!r});"
                " pass --format, or --crawl for web pages"
            )
        name = Path(httpx.URL(url).path).name.lower()
        compressed = next((c for c in (".gz", ".zst") if name.endswith(c)), "")
        if format_of(name) != fmt:
            compressed = ""
        dest = lake.staging_path(_SUFFIX[fmt] + compressed)
        size = _save(resp, dest, url)
    finally:
        resp.close()
    return Download(dest, fmt, content_type, size)


def _save(resp: httpx.Response, dest: Path, url: str) -> int:
    size = 0
    try:
        with dest.open("wb") as fh:
            for chunk in resp.iter_bytes(_CHUNK):
                fh.write(chunk)
                size += len(chunk)
    except httpx.HTTPError as exc:
        dest.unlink(missing_ok=True)
        raise NotFoundError(f"{url}: download interrupted: {_reason(exc)}") from None
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return size
