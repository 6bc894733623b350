"""PII patterns (emails, phone numbers, card numbers, ID numbers) and the SQL that redacts them.

Redaction runs inside DuckDB with ``regexp_replace``; only Luhn checking of card-like numbers
needs Python, and it is called just for the rows whose text contains a card-like number.
"""

from __future__ import annotations

import re
from typing import Literal

import duckdb
import pyarrow as pa
from duckdb.func import PythonUDFType

from aifab.data.lake import sql_string

PiiKind = Literal["email", "phone", "card", "id"]

PII_KINDS: tuple[PiiKind, ...] = ("email", "phone", "card", "id")

#: RE2 patterns (DuckDB's regex engine); Python's ``re`` accepts them too.
PATTERNS: dict[PiiKind, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    # US social security numbers (ddd-dd-dddd).
    "id": r"\b\d{3}-\d{2}-\d{4}\b",
    # 13 to 19 digits, optionally split by single spaces or dashes.
    "card": r"\b(?:\d[ -]?){12,18}\d\b",
    # Optional +country code, optional (area) or area code, then 3-4 and 4 digits; or a bare
    # 10-digit run; or +country followed by 8-14 digits.
    "phone": (
        r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\b\d{1,4}[ .-])?\b\d{3,4}[ .-]\d{4}\b"
        r"|\b\d{10}\b|\+\d{8,14}\b"
    ),
}

#: Redaction passes in order: specific shapes first, so a card number or an SSN is not
#: half-eaten by the looser phone pattern; "+" numbers go before cards, which they resemble.
_PASSES: tuple[tuple[PiiKind, str], ...] = (
    ("email", PATTERNS["email"]),
    ("id", PATTERNS["id"]),
    ("phone", r"\+\d{8,15}\b"),
    ("card", PATTERNS["card"]),
    ("phone", PATTERNS["phone"]),
)

TOKENS: dict[PiiKind, str] = {
    "email": "<EMAIL>",
    "id": "<ID>",
    "card": "<CARD>",
    "phone": "<PHONE>",
}

#: Name of the DuckDB function registered by :func:`register_functions`.
CARD_UDF = "aifab_redact_cards"

_CARD_RE = re.compile(PATTERNS["card"])
_PHONE_RE = re.compile(PATTERNS["phone"])


def luhn_valid(number: str) -> bool:
    """Whether the digits of ``number`` pass the Luhn checksum (separators ignored)."""
    digits = [int(c) for c in number if c.isdigit()]
    if len(digits) < 2:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def redact_cards(text: str | None, phones: bool = False) -> str | None:
    """Replace Luhn-valid card numbers in ``text`` with ``<CARD>``.

    Card-like numbers that fail the checksum are kept whole; with ``phones``, phone numbers
    are redacted in the text between card-like numbers (never inside one).
    """
    if text is None:
        return None
    out, last = [], 0
    for m in _CARD_RE.finditer(text):
        between = text[last : m.start()]
        out.append(_PHONE_RE.sub(TOKENS["phone"], between) if phones else between)
        out.append(TOKENS["card"] if luhn_valid(m.group(0)) else m.group(0))
        last = m.end()
    tail = text[last:]
    out.append(_PHONE_RE.sub(TOKENS["phone"], tail) if phones else tail)
    return "".join(out)


def redact_text(
    text: str | None, kinds: tuple[PiiKind, ...] = PII_KINDS, luhn: bool = True
) -> str | None:
    """Redact ``text`` in Python exactly as :func:`redact_sql` does in DuckDB."""
    if text is None:
        return None
    for kind, pattern in _PASSES:
        if kind not in kinds:
            continue
        if kind == "card" and luhn:
            return redact_cards(text, phones="phone" in kinds)
        text = re.sub(pattern, TOKENS[kind], text)
    return text


def _redact_cards_arrow(values: pa.Array, phones: pa.Array) -> pa.Array:
    return pa.array(
        [
            redact_cards(v, bool(p))
            for v, p in zip(values.to_pylist(), phones.to_pylist(), strict=True)
        ],
        type=pa.string(),
    )


def register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """Register ``aifab_redact_cards(text, phones)`` as a vectorized DuckDB function."""
    con.create_function(
        CARD_UDF,
        _redact_cards_arrow,
        ["VARCHAR", "BOOLEAN"],
        "VARCHAR",
        type=PythonUDFType.ARROW,
        side_effects=False,
    )


def redact_sql(expr: str, kinds: tuple[PiiKind, ...] = PII_KINDS, luhn: bool = True) -> str:
    """A SQL expression that redacts the PII ``kinds`` in the VARCHAR expression ``expr``.

    With ``luhn``, card-like numbers are replaced only when their checksum is valid; this calls
    the function from :func:`register_functions`, which must be registered on the connection.
    """
    for kind, pattern in _PASSES:
        if kind not in kinds:
            continue
        if kind == "card" and luhn:
            phones = "phone" in kinds
            rest = redact_sql(expr, ("phone",)) if phones else expr
            # Only rows holding a card-like number go through Python.
            return (
                f"CASE WHEN regexp_matches({expr}, {sql_string(pattern)}) "
                f"THEN {CARD_UDF}({expr}, {'TRUE' if phones else 'FALSE'}) ELSE {rest} END"
            )
        expr = f"regexp_replace({expr}, {sql_string(pattern)}, {sql_string(TOKENS[kind])}, 'g')"
    return expr
