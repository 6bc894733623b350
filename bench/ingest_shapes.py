"""Messy files for ``bench/ingest.py``: one generated file per shape real tables come in.

Each shape knows how many data rows it holds, so every row can be accounted for: kept
(possibly padded), quarantined with a reason, or refused with the whole file.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """A generated file: its name, its data rows and how to write it."""

    name: str
    file: str
    rows: int
    write: Callable[[Path], None]


def _text(text: str, encoding: str = "utf-8") -> Callable[[Path], None]:
    return lambda path: path.write_bytes(text.encode(encoding))


def _people(n: int, sep: str = ",") -> list[str]:
    return [f"{i}{sep}name{i}{sep}{i * 1.5}" for i in range(n)]


def _late_type_csv(n: int) -> str:
    return "a,b\n" + "".join(f"{i},x\n" for i in range(n)) + "1.5,y\nseven,z\n"


def _late_type_jsonl(n: int) -> str:
    rows = [{"a": i, "b": "x"} for i in range(n)] + [{"a": 1.5, "b": "y"}, {"a": "7b", "b": 1}]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _broken_jsonl(n: int) -> str:
    lines = [json.dumps({"id": i, "v": f"v{i}"}) for i in range(n)]
    for i in range(3, n, 17):
        lines[i] = lines[i][:-4]  # cut off: not JSON any more
    return "\n".join(lines) + "\n"


def _short_rows(n: int) -> str:
    rows = [f"u{i},{i},{i}" + (",/bin/sh" if i % 3 == 0 else "") for i in range(n)]
    return "user,uid,gid,shell\n" + "\n".join(rows) + "\n"


def _stray_quote(n: int) -> str:
    rows = [f'{i},"quoted, with comma {i}"' for i in range(n)]
    rows[n // 2] = f'{n // 2},"unterminated'
    return "k,v\n" + "\n".join(rows) + "\n"


def _hex_ids(n: int) -> str:
    return "id,v\n" + "".join(f"0x{(i * 0x9E3779B97F4A7C15) % 2**64:016x},{i}\n" for i in range(n))


def shapes(late_rows: int = 25_000) -> list[Shape]:
    """Every messy shape of issue 10, smallest first."""
    n = 200
    return [
        Shape("no header", "no_header.csv", n, _text("\n".join(_people(n)) + "\n")),
        Shape(
            "comment preamble",
            "comments.csv",
            n,
            _text("# exported 2024-01-01\n# by tool\n" + "\n".join(_people(n)) + "\n"),
        ),
        Shape(
            "utf-16 with BOM",
            "utf16.csv",
            n,
            _text("id,name,x\n" + "\n".join(_people(n)).replace("name", "Zoë") + "\n", "utf-16"),
        ),
        Shape(
            "latin-1, no BOM",
            "latin1.csv",
            n,
            _text("id,name,x\n" + "\n".join(_people(n)).replace("name", "Zoë") + "\n", "latin-1"),
        ),
        Shape("64-bit hex ids", "hex.csv", n, _text(_hex_ids(n))),
        Shape("short trailing rows", "short.csv", n, _text(_short_rows(n))),
        Shape(
            "narrow header",
            "narrow.csv",
            n,
            _text("a,b\n" + "".join(f"{i},2,3,4\n" for i in range(n))),
        ),
        Shape(
            "type change after sample", "late.csv", late_rows + 2, _text(_late_type_csv(late_rows))
        ),
        Shape(
            "NaN and inf",
            "nan.csv",
            n,
            _text(
                "x\n" + "".join(("nan", "inf", "-inf", f"{i}.5")[i % 4] + "\n" for i in range(n))
            ),
        ),
        Shape("stray quote", "quote.csv", n, _text(_stray_quote(n))),
        Shape(
            "field over 2 MB",
            "long.csv",
            2,
            _text("k,v\n1," + "x" * 2_100_000 + "\n2,y\n"),
        ),
        Shape(
            "gzip bytes named .csv",
            "binary.csv",
            n,
            lambda p: p.write_bytes(gzip.compress("\n".join(_people(n)).encode())),
        ),
        Shape(
            "decimal comma",
            "eu.csv",
            n,
            _text("a;b\n" + "".join(f"{i};{i},5\n" for i in range(n))),
        ),
        Shape("broken JSONL lines", "broken.jsonl", n, _text(_broken_jsonl(n))),
        Shape(
            "JSONL type change",
            "late.jsonl",
            late_rows + 2,
            _text(_late_type_jsonl(late_rows)),
        ),
    ]
