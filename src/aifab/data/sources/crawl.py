"""A polite crawler: seed URLs from a file, robots.txt, per-host delay, size cap, same-host links.

One row per page: url, status, title, text, fetched_at, plus depth, bytes, content_type and
``skipped`` (why a page has no text: robots.txt, over max_bytes, an HTTP error...).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx

from aifab.core.errors import AifabError, InvalidInputError, NotFoundError
from aifab.data.sources import http
from aifab.data.sources.html_text import extract
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged, write_rows

_HTML_TYPES = ("text/html", "application/xhtml+xml")


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("url", pa.string()),
            ("status", pa.int32()),
            ("title", pa.string()),
            ("text", pa.string()),
            ("fetched_at", pa.timestamp("us", tz="UTC")),
            ("depth", pa.int32()),
            ("bytes", pa.int64()),
            ("content_type", pa.string()),
            ("skipped", pa.string()),
        ]
    )


def read_seeds(path: Path) -> list[str]:
    """The URLs listed in ``path``, one per line (blank lines and ``#`` comments ignored)."""
    if not path.is_file():
        raise NotFoundError(f"{path}: no such file (expected a file of URLs, one per line)")
    seeds: list[str] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if urlsplit(line).scheme not in ("http", "https") or not urlsplit(line).netloc:
            raise InvalidInputError(f"{path}:{number}: not an http(s) URL: {line!r}")
        url = urldefrag(line).url
        if url not in seeds:
            seeds.append(url)
    if not seeds:
        raise InvalidInputError(f"{path}: no URLs in the file")
    return seeds


class _Throttle:
    """Spaces requests to one host at least ``delay`` seconds apart."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.last: dict[str, float] = {}

    def wait(self, url: str, delay: float | None = None) -> None:
        host = urlsplit(url).netloc
        gap = self.delay if delay is None else delay
        due = self.last.get(host, float("-inf")) + gap
        if (pause := due - time.monotonic()) > 0:
            time.sleep(pause)
        self.last[host] = time.monotonic()


class _Robots:
    """robots.txt per site, fetched once (through the throttle) and cached."""

    def __init__(self, cl: httpx.Client, opts: IngestOptions, throttle: _Throttle) -> None:
        self.cl, self.opts, self.throttle = cl, opts, throttle
        self.sites: dict[str, RobotFileParser] = {}

    def parser(self, url: str) -> RobotFileParser:
        """The parsed robots.txt of ``url``'s site."""
        parts = urlsplit(url)
        site = f"{parts.scheme}://{parts.netloc}"
        if site not in self.sites:
            self.sites[site] = self._fetch(site)
        return self.sites[site]

    def _fetch(self, site: str) -> RobotFileParser:
        self.throttle.wait(site)
        try:
            resp = http.get(self.cl, site + "/robots.txt", self.opts)
            try:
                body = resp.read().decode("utf-8", errors="replace")
            finally:
                resp.close()
            code = resp.status_code
        except AifabError:
            code, body = 503, ""
        # As urllib does: 401/403 forbid everything, other 4xx allow everything; a site whose
        # robots.txt fails (5xx, unreachable) is treated as forbidding everything.
        if code in (401, 403) or code >= 500:
            body = "User-agent: *\nDisallow: /"
        elif code >= 400:
            body = ""
        rp = RobotFileParser(site + "/robots.txt")
        rp.parse(body.splitlines())
        return rp


def _row(url: str, depth: int, **fields: Any) -> dict[str, Any]:
    row = {
        "url": url,
        "depth": depth,
        "status": None,
        "title": None,
        "text": None,
        "fetched_at": datetime.now(UTC),
        "bytes": None,
        "content_type": None,
        "skipped": None,
    }
    row.update(fields)
    return row


def _body(resp: httpx.Response, limit: int) -> bytes | None:
    """Read at most ``limit`` bytes; ``None`` when the page is larger (it is not read further)."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def fetch(
    cl: httpx.Client, url: str, depth: int, opts: IngestOptions
) -> tuple[dict[str, Any], list[str]]:
    """Fetch one page: its row and the absolute URLs it links to."""
    try:
        resp = http.get(cl, url, opts)
    except AifabError as exc:
        return _row(url, depth, skipped=f"error: {exc.message}"), []
    try:
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        row = _row(url, depth, status=resp.status_code, content_type=ctype or None)
        if resp.status_code >= 400:
            return {**row, "skipped": f"HTTP {resp.status_code}"}, []
        if ctype and ctype not in _HTML_TYPES and not ctype.startswith("text/"):
            return {**row, "skipped": f"content-type {ctype}"}, []
        body = _body(resp, opts.max_bytes)
    except httpx.HTTPError as exc:
        return _row(url, depth, status=resp.status_code, skipped=f"error: {exc}"), []
    finally:
        resp.close()
    if body is None:
        return {**row, "skipped": f"truncated: over max_bytes ({opts.max_bytes})"}, []
    try:
        text = body.decode(resp.encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", errors="replace")
    row["bytes"] = len(body)
    if ctype and ctype not in _HTML_TYPES:
        return {**row, "text": text}, []
    page = extract(text)
    base = str(resp.url)
    links = [urldefrag(urljoin(base, href)).url for href in page.links]
    return {**row, "title": page.title, "text": page.text}, links


def crawl(cl: httpx.Client, seeds: list[str], opts: IngestOptions) -> Iterator[dict[str, Any]]:
    """Breadth-first crawl yielding one row per page (``max_pages`` counts fetched pages)."""
    throttle = _Throttle(opts.delay)
    robots = _Robots(cl, opts, throttle)
    queue = deque((url, 0) for url in seeds)
    seen = set(seeds)
    fetched = 0
    while queue and (opts.max_pages is None or fetched < opts.max_pages):
        url, depth = queue.popleft()
        rules = robots.parser(url) if opts.robots else None
        if rules is not None and not rules.can_fetch(opts.user_agent, url):
            yield _row(url, depth, skipped="robots.txt", fetched_at=None)
            continue
        site_delay = rules.crawl_delay(opts.user_agent) if rules is not None else None
        throttle.wait(url, max(opts.delay, float(site_delay or 0)))
        fetched += 1
        row, links = fetch(cl, url, depth, opts)
        yield row
        if depth >= opts.depth:
            continue
        host = urlsplit(url).netloc
        for link in links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https") and parts.netloc == host and link not in seen:
                seen.add(link)
                queue.append((link, depth + 1))


def stage_crawl(seeds_file: Path, opts: IngestOptions, dest: Path) -> Staged:
    """Crawl from the URLs in ``seeds_file`` and stage one row per page at ``dest``."""
    seeds = read_seeds(seeds_file)
    with http.client(opts) as cl:
        rows = write_rows(crawl(cl, seeds, opts), _schema(), dest)
    return Staged(dest, str(seeds_file), "crawl", {"seeds": len(seeds), "pages": rows})
