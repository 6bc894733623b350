"""Pagination of long lists (runs, versions, audit events): offset and limit from the query."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import Request

__all__ = ["Page"]


@dataclass(frozen=True)
class Page:
    """One page of a list: ``offset`` and ``limit`` read (and bounded) from the query string."""

    offset: int
    limit: int
    path: str
    query: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, request: Request, default_limit: int = 50, max_limit: int = 500) -> Page:
        """The page the request asks for; bad or missing numbers fall back to the first page."""
        args = request.query_params
        offset = _int(args.get("offset"), 0, 0, 10**9)
        limit = _int(args.get("limit"), default_limit, 1, max_limit)
        rest = tuple((k, v) for k, v in args.multi_items() if k not in ("offset", "limit"))
        return cls(offset, limit, request.url.path, rest)

    def fetch_limit(self) -> int:
        """Ask the service for one row more than shown, to know whether a next page exists."""
        return self.offset + self.limit + 1

    def link(self, offset: int) -> str:
        """The URL of the page starting at ``offset`` (other query arguments kept)."""
        query = [*self.query, ("offset", str(max(0, offset))), ("limit", str(self.limit))]
        return f"{self.path}?{urlencode(query)}"

    def window(self, rows: list[object]) -> tuple[list[object], str | None, str | None]:
        """The rows of this page from a list fetched with :meth:`fetch_limit`, and prev/next."""
        shown = rows[self.offset : self.offset + self.limit]
        prev = self.link(self.offset - self.limit) if self.offset > 0 else None
        nxt = self.link(self.offset + self.limit) if len(rows) > self.offset + self.limit else None
        return shown, prev, nxt


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        return default
    return min(max(number, low), high)
