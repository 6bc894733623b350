"""Ingest over HTTP against a real local server: downloads, paginated APIs, retries, crawling."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import resolve
from aifab.data.ingest import ingest
from aifab.data.sources.html_text import extract

CSV = "id,name\n1,ann\n2,bob\n3,cy\n"
FAST = {"backoff": 0.01, "delay": 0}


def page(title: str, body: str) -> str:
    return f"<html><head><title>{title}</title></head><body>{body}</body></html>"


SITE = {
    "/site/index.html": page(
        "Index",
        '<p>Welcome</p><a href="/site/a.html">a</a> <a href="b.html#top">b</a> '
        '<a href="/site/private/secret.html">s</a> <a href="/site/big.html">big</a> '
        '<a href="http://other.invalid/x.html">elsewhere</a> <a href="mailto:x@y">m</a>',
    ),
    "/site/a.html": page(
        "A", '<script>var hidden = 1;</script><p>Page A</p><a href="/site/deep.html">deeper</a>'
    ),
    "/site/b.html": page("B", '<p>Page B</p><a href="/site/index.html">home</a>'),
    "/site/deep.html": page("Deep", "<p>deep</p>"),
    "/site/private/secret.html": page("Secret", "<p>secret</p>"),
}


class Site:
    """What the server serves and what it saw (path and arrival time of every request)."""

    def __init__(self) -> None:
        self.base = ""
        self.log: list[tuple[str, float]] = []
        self.hits: Counter[str] = Counter()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def paths(self) -> list[str]:
        return [p for p, _ in self.log]

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        path, query = parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.log.append((h.path, time.monotonic()))
        self.hits[path] += 1
        if path == "/robots.txt":
            return send(h, 200, "User-agent: *\nDisallow: /site/private/\n", "text/plain")
        if path in SITE:
            return send(h, 200, SITE[path], "text/html; charset=utf-8")
        if path == "/site/big.html":
            # No Content-Length: the crawler must stop reading on its own past max_bytes.
            h.send_response(200)
            h.send_header("Content-Type", "text/html")
            h.end_headers()
            h.wfile.write(b"<p>" + b"x" * 5000 + b"</p>")
            return None
        if path.startswith("/slow/"):
            return send(h, 200, page(path, "<p>slow</p>"), "text/html")
        if path == "/files/data.csv":
            return send(h, 200, CSV, "application/octet-stream")
        if path == "/download":
            return send(h, 200, CSV, "text/csv; charset=utf-8")
        if path == "/files/page":
            return send(h, 200, page("P", "hi"), "text/html")
        if path == "/api/next":
            cursor = int(query.get("cursor", 0))
            nxt = f"/api/next?cursor={cursor + 2}" if cursor < 4 else None
            items = [{"id": i, "name": f"n{i}"} for i in range(cursor, cursor + 2)]
            return send_json(h, {"items": items, "meta": {"next": nxt}})
        if path == "/api/link":
            n = int(query.get("page", 1))
            link = {"Link": f'<{self.base}/api/link?page={n + 1}>; rel="next"'} if n < 3 else {}
            return send_json(h, [{"id": n * 10 + i} for i in range(2)], link)
        if path == "/api/pages":
            n, size = int(query["page"]), int(query.get("size", 2))
            items = [{"id": (n - 1) * size + i} for i in range(size)] if n <= 3 else []
            return send_json(h, {"data": items, "total": 3 * size})
        if path == "/flaky":
            if self.hits[path] <= 2:
                return send(h, 503, "busy", "text/plain")
            return send_json(h, [{"ok": True}, {"ok": False}])
        if path == "/limited":
            if self.hits[path] == 1:
                return send(h, 429, "slow down", "text/plain", {"Retry-After": "0"})
            return send_json(h, {"rows": [{"n": 1}]})
        if path == "/down":
            return send(h, 503, "down", "text/plain")
        if path == "/stall.csv":
            h.send_response(200)
            h.send_header("Content-Type", "text/csv")
            h.send_header("Content-Length", "100000")
            h.end_headers()
            h.wfile.write(b"id\n" + b"1\n" * 1000)
            h.wfile.flush()
            self.stalled.set()
            self.release.wait(30)
            return None
        return send(h, 404, "not found", "text/plain")


def send(
    h: BaseHTTPRequestHandler,
    code: int,
    body: str,
    ctype: str,
    headers: dict[str, str] | None = None,
) -> None:
    data = body.encode()
    h.send_response(code)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


def send_json(
    h: BaseHTTPRequestHandler, obj: object, headers: dict[str, str] | None = None
) -> None:
    send(h, 200, json.dumps(obj), "application/json", headers)


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            state.handle(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


def table(ref: str) -> list[tuple]:
    return lake.connect().execute(f"SELECT * FROM {resolve(ref).scan_sql()}").fetchall()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- files by URL -------------------------------------------------------------------------


def test_url_download_by_extension_and_content_type(site: Site) -> None:
    r = ingest("web", f"{site.base}/files/data.csv")
    assert (r.created, r.rows) == (True, 3)
    assert r.version.source == f"{site.base}/files/data.csv"
    assert r.version.transform["source_kind"] == "url"
    assert table("web") == [(1, "ann"), (2, "bob"), (3, "cy")]
    again = ingest("web", f"{site.base}/download")  # same bytes, told by content-type
    assert (again.created, again.version.ref) == (False, "web@1")


def test_url_errors_name_the_url(site: Site) -> None:
    with pytest.raises(NotFoundError, match=r"/missing\.csv: HTTP 404"):
        ingest("x", f"{site.base}/missing.csv")
    with pytest.raises(InvalidInputError, match=r"/files/page: cannot tell the file format"):
        ingest("x", f"{site.base}/files/page")
    port = free_port()
    with pytest.raises(NotFoundError, match=rf"127.0.0.1:{port}/a.csv: unreachable after 2"):
        ingest("x", f"http://127.0.0.1:{port}/a.csv", options={"retries": 1, "backoff": 0})


# --- REST APIs ------------------------------------------------------------------------------


def test_api_follows_next_field(site: Site) -> None:
    opts = {"records_field": "items", "next_field": "meta.next", **FAST}
    r = ingest("users", f"{site.base}/api/next?cursor=0", kind="api", options=opts)
    assert r.rows == 6 and r.details["pages"] == 3
    assert [row[0] for row in table("users")] == [0, 1, 2, 3, 4, 5]
    assert r.version.transform["options"]["next_field"] == "meta.next"
    again = ingest("users", f"{site.base}/api/next?cursor=0", kind="api", options=opts)
    assert (again.created, again.version.ref) == (False, "users@1")


def test_api_follows_link_header_and_respects_max_pages(site: Site) -> None:
    r = ingest("l", f"{site.base}/api/link?page=1", kind="api", options=FAST)
    assert [row[0] for row in table("l")] == [10, 11, 20, 21, 30, 31]
    r = ingest("l2", f"{site.base}/api/link?page=1", kind="api", options={"max_pages": 2})
    assert (r.rows, r.details["pages"]) == (4, 2)


def test_api_page_param_stops_on_empty_page(site: Site) -> None:
    opts = {"page_param": "page", "params": {"size": "3"}, **FAST}
    r = ingest("p", f"{site.base}/api/pages", kind="api", options=opts)
    assert [row[0] for row in table("p")] == list(range(9))
    assert r.details["pages"] == 4  # three full pages, then the empty one that stops it
    assert site.paths()[-1] == "/api/pages?size=3&page=4"


def test_api_retries_5xx_and_429_with_backoff(site: Site) -> None:
    r = ingest("f", f"{site.base}/flaky", kind="api", options=FAST)
    assert r.rows == 2 and site.hits["/flaky"] == 3
    assert ingest("l", f"{site.base}/limited", kind="api", options=FAST).rows == 1
    assert site.hits["/limited"] == 2
    with pytest.raises(NotFoundError, match=r"/down: HTTP 503"):
        ingest("d", f"{site.base}/down", kind="api", options={"retries": 2, "backoff": 0.01})
    assert site.hits["/down"] == 3


def test_api_bad_records_field(site: Site) -> None:
    with pytest.raises(InvalidInputError, match="records_field 'rows' is missing"):
        ingest("x", f"{site.base}/api/next", kind="api", options={"records_field": "rows"})


# --- crawling -------------------------------------------------------------------------------


def seeds(tmp_path: Path, *urls: str) -> Path:
    path = tmp_path / "seeds.txt"
    path.write_text("# seeds\n" + "\n".join(urls) + "\n", encoding="utf-8")
    return path


def test_crawl_depth_robots_and_size_cap(site: Site, tmp_path: Path) -> None:
    opts = {"depth": 1, "max_bytes": 1000, **FAST}
    r = ingest("crawl", seeds(tmp_path, f"{site.base}/site/index.html"), kind="crawl", options=opts)
    got = {row[0].removeprefix(site.base): row for row in table("crawl")}
    assert list(got) == [
        "/site/index.html",
        "/site/a.html",
        "/site/b.html",
        "/site/private/secret.html",
        "/site/big.html",
    ]
    url, status, title, text, fetched_at, depth, *_, skipped = got["/site/a.html"]
    assert (status, title, text, depth, skipped) == (200, "A", "Page A\n\ndeeper", 1, None)
    assert fetched_at is not None
    assert got["/site/index.html"][2:4] == ("Index", "Welcome\n\na b s big elsewhere m")
    assert got["/site/private/secret.html"][-1] == "robots.txt"
    assert got["/site/big.html"][-1].startswith("truncated: over max_bytes")
    assert got["/site/big.html"][3] is None
    assert "/site/private/secret.html" not in site.paths()  # robots.txt obeyed
    assert "/site/deep.html" not in site.paths()  # beyond depth 1
    assert r.version.transform["source_kind"] == "crawl"


def test_crawl_max_pages(site: Site, tmp_path: Path) -> None:
    opts = {"depth": 3, "max_pages": 2, **FAST}
    r = ingest("c", seeds(tmp_path, f"{site.base}/site/index.html"), kind="crawl", options=opts)
    assert r.rows == 2
    assert [p for p in site.paths() if p != "/robots.txt"] == ["/site/index.html", "/site/a.html"]


def test_crawl_per_host_delay(site: Site, tmp_path: Path) -> None:
    urls = [f"{site.base}/slow/{i}" for i in range(3)]
    r = ingest("slow", seeds(tmp_path, *urls), kind="crawl", options={"delay": 0.2})
    assert r.rows == 3
    times = [t for _, t in site.log]
    assert len(times) == 4  # robots.txt, then the three pages
    assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= 0.2 * 0.8


def test_crawl_bad_seed_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"seeds.txt:3: not an http\(s\) URL"):
        ingest("c", seeds(tmp_path, "http://127.0.0.1:1/ok", "ftp://x/y"), kind="crawl")
    with pytest.raises(NotFoundError, match="no such file"):
        ingest("c", tmp_path / "none.txt", kind="crawl")


def test_html_text_extraction() -> None:
    doc = extract(
        "<title> A &amp; B </title><style>p {}</style><h1>Head</h1><p>one  two<br>three</p>"
        "<ul><li>x</li><li>y</li></ul><table><tr><td>1</td><td>2</td></tr></table>"
        '<a href="/l#f">link</a>'
    )
    assert doc.title == "A & B"
    assert doc.text == "Head\n\none two\nthree\n\nx\ny\n\n1 2\n\nlink"
    assert doc.links == ("/l#f",)


# --- CLI and crash safety -------------------------------------------------------------------


def test_cli_api_and_crawl(site: Site, tmp_path: Path, cli) -> None:
    r = cli(
        "data",
        "ingest",
        "users",
        f"{site.base}/api/next?cursor=0",
        "--api",
        "--records-field",
        "items",
        "--next-field",
        "meta.next",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == 6
    r = cli(
        "data",
        "ingest",
        "pages",
        seeds(tmp_path, f"{site.base}/site/index.html"),
        "--crawl",
        "--depth",
        "1",
        "--delay",
        "0",
        "--max-pages",
        "3",
    )
    assert r.exit_code == 0, r.stderr
    assert "ingested 3 rows into pages@1" in r.stdout
    r = cli("data", "ingest", "x", f"{site.base}/missing.csv")
    assert r.exit_code == 1 and "HTTP 404" in r.stderr


def test_kill_9_during_ingest_leaves_no_version(site: Site, workspace: Path) -> None:
    code = f"from aifab.data import ingest; ingest('killed', '{site.base}/stall.csv')"
    env = {**os.environ, "AIFAB_HOME": str(workspace)}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert site.stalled.wait(60), "the child never started downloading"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        site.release.set()
        if child.poll() is None:
            child.kill()
    with pytest.raises(NotFoundError):
        resolve("killed")
    assert [p for p in (workspace / "lake").rglob("*") if p.is_file()] == []
