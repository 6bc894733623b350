"""Weka ARFF files: the ``@attribute`` names become the header of a CSV that DuckDB reads.

Only the dense form is read (one comma-separated row per line after ``@data``); ``?`` is a
missing value. A sparse file (rows in braces) is refused, naming what to do instead.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from aifab.core.errors import InvalidInputError

_ATTRIBUTE = re.compile(r"@attribute\s+('(?:[^']|\\')*'|\"[^\"]*\"|\S+)", re.IGNORECASE)


def _name(token: str) -> str:
    return token[1:-1] if token[:1] in "'\"" and token[-1:] == token[:1] else token


def arff_to_csv(path: Path, dest: Path) -> int:
    """Rewrite the ARFF file ``path`` as a CSV with a header line; return the attribute count.

    Raises:
        InvalidInputError: no ``@attribute`` or ``@data`` section, or sparse rows.
    """
    names: list[str] = []
    with (
        path.open("r", encoding="utf-8", errors="strict", newline="") as fin,
        dest.open("w", encoding="utf-8", newline="") as fout,
    ):
        out = csv.writer(fout)
        in_data = False
        for number, line in enumerate(fin, 1):
            text = line.strip()
            if not text or text.startswith("%"):
                continue
            if not in_data:
                found = _ATTRIBUTE.match(text)
                if found:
                    names.append(_name(found.group(1)))
                elif text.lower().startswith("@data"):
                    if not names:
                        raise InvalidInputError(f"{path}: an ARFF file without @attribute lines")
                    out.writerow(names)
                    in_data = True
                continue
            if text.startswith("{"):
                raise InvalidInputError(
                    f"{path}: sparse ARFF rows (line {number}) are not read; save the data "
                    "dense (Weka: SparseToNonSparse) or as CSV"
                )
            try:
                fields = next(csv.reader([text], quotechar="'", skipinitialspace=True))
            except csv.Error as exc:
                raise InvalidInputError(
                    f"{path}: ARFF line {number} cannot be split ({exc}); save the data as CSV"
                ) from None
            out.writerow(["" if f == "?" else f for f in fields])
    if not in_data:
        raise InvalidInputError(f"{path}: an ARFF file without an @data section")
    return len(names)
