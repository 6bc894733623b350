"""Stray quotes in CSV files: keep the valid quoted rows, quarantine the unbalanced lines.

One unterminated quote makes DuckDB's sniffer give up quoting for the whole file, so every
valid quoted field containing a delimiter splits (and its row is quarantined) while the broken
line goes in with a literal quote. When quoted fields are present but the sniffer chose no
quote, the lines with an odd number of quotes are taken out (quarantined with their line
numbers) and the rest is read with ``"`` as the quote. Quoted fields spanning lines are then
quarantined too: such a file needs ``--quote '"'`` given explicitly.
"""

from __future__ import annotations

import gzip
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import TextIO

from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.staged import Staged

_SCAN_LINES = 20_000
_SHOWN_LINES = 10
#: A field that opens and closes a quote around a delimiter: real quoting is in use.
_QUOTED_FIELD = re.compile(r'(^|[,;\t|])"[^"]*[,;\t|][^"]*"([,;\t|]|\r?$)')


def open_text(path: Path, errors: str = "strict") -> TextIO:
    """``path`` as UTF-8 text, gunzipped on the fly for ``.gz`` files."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors=errors, newline="")
    return path.open("r", encoding="utf-8", errors=errors, newline="")


def has_quoted_fields(path: Path) -> bool:
    """Whether the first lines hold both a quoted field with a delimiter and an odd quote."""
    quoted = odd = False
    with open_text(path, "replace") as fh:
        for number, line in enumerate(fh, 1):
            quoted = quoted or bool(_QUOTED_FIELD.search(line.rstrip("\n")))
            odd = odd or line.count('"') % 2 == 1
            if (quoted and odd) or number >= _SCAN_LINES:
                break
    return quoted and odd


def split_unbalanced(path: Path, good: Path, source: str) -> tuple[list[QuarantineItem], list[int]]:
    """Copy the lines of ``path`` with balanced quotes to ``good``; return the others.

    Returns:
        The quarantine items of the unbalanced lines and their (1-based) line numbers.
    """
    bad: list[QuarantineItem] = []
    with open_text(path) as fin, good.open("w", encoding="utf-8", newline="") as fout:
        for number, line in enumerate(fin, 1):
            if line.count('"') % 2 == 0:
                fout.write(line)
                continue
            bad.append(
                QuarantineItem(
                    rule="csv.unbalanced_quote",
                    reason=f"line {number} has an unterminated quote (\"); pass --quote '' to "
                    "read quotes as text, or --escape if quotes are escaped",
                    line=number,
                    record={"source": source, "csv_line": line.rstrip("\r\n")},
                )
            )
    return bad, [b.line for b in bad if b.line is not None]


def original_line(line: int, removed: list[int]) -> int:
    """The line number in the original file of ``line`` of the file without ``removed``."""
    at = line
    while at - bisect_right(removed, at) < line:
        at += 1
    return at


def merge(staged: Staged, bad: list[QuarantineItem], removed: list[int]) -> Staged:
    """``staged`` (read from the cleaned file) with the unbalanced lines added as rejects."""

    def renumbered(items: Iterable[QuarantineItem]) -> Iterator[QuarantineItem]:
        for item in items:
            line = original_line(item.line, removed) if item.line is not None else None
            yield replace(item, line=line)

    later = [original_line(n, removed) for n in staged.rejected_lines]
    staged.rejects = chain(bad, renumbered(staged.rejects))
    staged.rejected += len(bad)
    staged.rejected_lines = tuple(sorted([*removed, *later])[:_SHOWN_LINES])
    staged.details["unbalanced_quote_lines"] = len(bad)
    return staged
