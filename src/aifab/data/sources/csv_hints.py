"""Second opinions on DuckDB's CSV sniffing, from the first lines of the file.

DuckDB's sniffer settles some real files wrongly: a delimiter that splits most lines but not
all (``,`` in ``/etc/passwd``-shaped files, where ``:`` splits every line), ``#`` comment lines
it reads as rows or as the header, a line of numbers taken for column names, and tables
aligned with runs of spaces read as one text column. These checks look at the lines
themselves and return the options that read the file as it is (the user's options always win).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from aifab.data.sources.csv_quotes import open_text
from aifab.data.sources.options import IngestOptions

#: Lines looked at (after the comment preamble).
SAMPLE_LINES = 200
_SAMPLE_BYTES = 1 << 20
#: Delimiters tried when DuckDB's leaves lines with unequal field counts; earlier ones win ties.
CANDIDATES = (",", "\t", ";", "|", ":")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
COMMENT = "#"


def sample_lines(path: Path) -> list[str]:
    """Up to :data:`SAMPLE_LINES` complete lines of the text file (gzip read through)."""
    if path.suffix.lower() == ".zst":
        return []  # no zstd reader in the standard library
    lines: list[str] = []
    size = 0
    with open_text(path, "replace") as fh:
        for line in fh:
            if not line.endswith("\n") and size + len(line) >= _SAMPLE_BYTES:
                break  # a line cut by the byte budget says nothing about field counts
            lines.append(line.rstrip("\r\n"))
            size += len(line)
            if len(lines) > SAMPLE_LINES or size >= _SAMPLE_BYTES:
                break
    return lines


def comment_prefix(lines: list[str]) -> str | None:
    """``#`` when the file opens with ``#`` lines and no later line holds a ``#``.

    DuckDB's ``comment`` option also cuts a ``#`` and what follows out of any line, so it is
    only safe when no data line contains one.
    """
    if not lines or not lines[0].lstrip().startswith(COMMENT):
        return None
    body = [line for line in lines if not line.lstrip().startswith(COMMENT)]
    return None if any(COMMENT in line for line in body) else COMMENT


def data_lines(lines: list[str], comment: str | None) -> list[str]:
    """The sample without blank lines and (when ``comment`` is set) comment lines."""
    return [
        line
        for line in lines
        if line.strip() and not (comment and line.lstrip().startswith(comment))
    ]


def _counts(lines: list[str], delim: str) -> Counter[int]:
    return Counter(len(row) for row in csv.reader(lines, delimiter=delim))


def _consistent(lines: list[str], delim: str) -> int:
    """The field count every line has with ``delim`` (0 when counts differ or it is 1)."""
    counts = _counts(lines, delim)
    if len(counts) != 1:
        return 0
    (fields,) = counts
    return fields if fields > 1 else 0


def better_delimiter(lines: list[str], sniffed: str) -> str | None:
    """A delimiter that splits every line alike, where the sniffed one does not, or ``None``."""
    if len(lines) < 2 or _consistent(lines, sniffed):
        return None
    for delim in CANDIDATES:
        if delim != sniffed and _consistent(lines, delim):
            return delim
    return None


#: The name of the column of row names that R's ``write.table`` leaves without a header field.
ROW_NAME = "row_name"


def row_names(lines: list[str], body: list[str], sniffed: str) -> tuple[str, list[str]] | None:
    """R's ``write.table`` shape: the delimiter and header fields, or ``None``.

    R writes row names as a first column without a name, so the header line (the file's
    first) has one field fewer than every row below it. A trailing delimiter on every row
    (an empty last field) is a different shape and does not count.
    """
    if len(body) < 2 or body[0] != lines[0] or _consistent(body, sniffed):
        return None  # the sniffed delimiter splits the header like the rows: no row names
    by_sniffed = len(next(csv.reader([body[0]], delimiter=sniffed or ","), []))
    for delim in dict.fromkeys((sniffed, *CANDIDATES, " ")):
        if delim != sniffed and by_sniffed > 1:
            continue  # the sniffed delimiter splits the header: another one is a coincidence
        header = next(csv.reader([body[0]], delimiter=delim), [])
        rows = list(csv.reader(body[1:], delimiter=delim))
        # One word above lines of two is a title or a list, not a table, when split on spaces.
        if len(header) < (2 if delim == " " else 1) or {len(r) for r in rows} != {len(header) + 1}:
            continue
        if all(not r[-1].strip() for r in rows):
            continue
        return delim, [h.strip() for h in header]
    return None


def space_columns(lines: list[str]) -> int:
    """The column count when every line splits into that many fields on runs of spaces."""
    if len(lines) < 2 or any('"' in line or "\t" in line for line in lines):
        return 0
    counts = {len(line.split()) for line in lines}
    fields = counts.pop() if len(counts) == 1 else 0
    return fields if fields >= 2 else 0


def all_numbers(line: str, delim: str) -> bool:
    """Whether every field of ``line`` is a number (so it is a row, not column names)."""
    fields = next(csv.reader([line], delimiter=delim), [])
    return bool(fields) and all(_NUMBER.fullmatch(f.strip()) for f in fields)


def _tab_lines(src: Path, skip: int, comment: str | None) -> Iterator[str]:
    with open_text(src) as fh:
        for line in fh:
            if not line.strip():
                continue
            if comment and line.lstrip().startswith(comment):
                yield line  # left whole, so the reader still sees a comment line
                continue
            if skip > 0:
                skip -= 1
                continue
            yield "\t".join(line.split()) + "\n"


def spaces_to_tabs(src: Path, dest: Path, skip: int = 0, comment: str | None = None) -> None:
    """Rewrite a space-aligned table as tab-separated text (blank lines dropped).

    Args:
        src: the text file.
        dest: the tab-separated file to write.
        skip: non-blank lines above the table (a free-text preamble) left out.
        comment: the comment-line prefix; comment lines are copied unchanged.
    """
    with dest.open("w", encoding="utf-8", newline="") as out:
        out.writelines(_tab_lines(src, skip, comment))


def second_opinion(
    path: Path, fmt: str, opts: IngestOptions, delim: str, comment: str, header: bool
) -> IngestOptions | None:
    """Options that read ``path`` better than DuckDB's sniffed dialect, or ``None``.

    Args:
        path: the (UTF-8) file.
        fmt: ``csv`` or ``tsv``.
        opts: the user's options; a field they set is never changed.
        delim: the sniffed delimiter.
        comment: the sniffed comment prefix ("" for none).
        header: whether DuckDB took the first line for the header.
    """
    try:
        return _second_opinion(sample_lines(path), fmt, opts, delim, comment, header)
    except csv.Error:
        return None  # a field over the csv module's limit: DuckDB's reading stands


def _second_opinion(
    lines: list[str], fmt: str, opts: IngestOptions, delim: str, comment: str, header: bool
) -> IngestOptions | None:
    update: dict[str, object] = {}
    if opts.comment is None and not comment and (found := comment_prefix(lines)):
        update["comment"] = comment = found
    body = data_lines(lines, comment or None)
    if opts.delimiter is None and fmt == "csv" and (better := better_delimiter(body, delim)):
        update["delimiter"] = delim = better
    if opts.header is None and header and body and all_numbers(body[0], delim):
        update["header"] = False
    if opts.header is None and opts.names is None and opts.skip_rows is None:
        shape = row_names(lines, body, delim)
        if shape is not None and (opts.delimiter is None or opts.delimiter == shape[0]):
            update |= {"delimiter": shape[0], "names": [ROW_NAME, *shape[1]], "header": False}
            update["skip_rows"] = 1
    return opts.model_copy(update=update) if update else None


def wordy(path: Path) -> bool:
    """Whether most lines of the file hold several words (a table read as one column?)."""
    lines = [line for line in sample_lines(path) if line.strip()]
    return bool(lines) and sum(len(line.split()) > 1 for line in lines) * 2 > len(lines)


#: Rows a table below a free-text preamble must show in the sample to be taken for one.
_MIN_TABLE_LINES = 3


def spaced(path: Path, fmt: str, opts: IngestOptions, columns: int) -> int | None:
    """Whether a file DuckDB reads as one column is a table aligned with runs of spaces.

    Returns:
        ``None`` when it is not; else the count of non-blank lines above the table (a
        free-text preamble, such as the description atop NIST StRD files, or the lines
        ``--skip-rows`` names), 0 for none.
    """
    if fmt != "csv" or opts.delimiter is not None or columns > 1:
        return None
    lines = sample_lines(path)
    given = 0
    if opts.skip_rows is not None:
        given = sum(1 for line in lines[: opts.skip_rows] if line.strip())
        lines = lines[opts.skip_rows :]
    if space_columns(data_lines(lines, opts.comment or comment_prefix(lines))) > 0:
        return given
    if opts.skip_rows is not None:
        return None
    filled = [line for line in lines if line.strip()]
    for start in range(1, len(filled) - _MIN_TABLE_LINES + 1):
        if space_columns(filled[start:]) > 0:
            return start
    return None
