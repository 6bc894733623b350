"""Checked casts from text: a value is converted only when the conversion is exact.

A sniffed type holds for the rows DuckDB sampled; later rows may carry ``1.5`` in an integer
column (DuckDB would round it to 2), a hex id (read as a number, losing its form) or a
20-digit id in a DOUBLE column. These expressions stop the query with a :data:`WIDEN_MARK`
error naming the column and the value, and :func:`wider_type` names the type to read it as.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from aifab.data import lake
from aifab.data.sources.options import IngestOptions

INTEGERS = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT"}
    | {"UINTEGER", "UBIGINT", "UHUGEINT"}
)
_MARK = "aifab-widen"
#: Matches the error a checked expression raises: the column index and the value.
WIDEN_MARK = re.compile(_MARK + r":(\d+):(.*)", re.DOTALL)
_INT_RE = r"'^\s*[+-]?[0-9]+\s*$'"
#: Integers beyond 2**53 are not exact in a DOUBLE.
_EXACT_DOUBLE_INT = 2**53


def _checked(col_type: str) -> bool:
    return col_type in INTEGERS or col_type == "DOUBLE"


def _lossy_double(c: str) -> str:
    """SQL: the text ``c`` has more significant digits than a DOUBLE keeps."""
    return (
        # Cheap length test first: only long texts can carry 18+ significant digits.
        f"(length({c}) > 15 AND "
        f"(length(replace(regexp_extract({c}, '[1-9][0-9.]*'), '.', '')) > 17 OR "
        f"(regexp_full_match({c}, {_INT_RE}) AND "
        f"abs(TRY_CAST(trim({c}) AS HUGEINT)) > {_EXACT_DOUBLE_INT})))"
    )


def checked_expr(
    i: int, name: str, col_type: str, opts: IngestOptions, as_text: bool = True
) -> str:
    """The select expression of column ``i``: a checked cast to ``col_type`` of its text.

    Integer and DOUBLE columns stop the query with a :data:`WIDEN_MARK` error naming ``i`` and
    the value that the type would round or hold inexactly; other types pass through. A DOUBLE
    column read as a DOUBLE (``as_text=False``, much cheaper) stops on a whole number beyond
    2**53, the one sign that its text may have had more digits than a DOUBLE keeps.
    """
    c = lake.sql_ident(name)
    if not _checked(col_type):
        return c
    stop = f"error('{_MARK}:{i}:' || {c})"
    if not as_text:
        big = f"isfinite({c}) AND abs({c}) >= {_EXACT_DOUBLE_INT} AND {c} = trunc({c})"
        return f"CASE WHEN {big} THEN {stop} ELSE {c} END AS {c}"
    if col_type in INTEGERS:
        cast = f"TRY_CAST(trim({c}) AS {col_type})"
        # A decimal point, exponent or hex prefix: the cast would round or reinterpret it.
        ok = f"NOT regexp_matches({c}, '[.eExX]')"
    else:
        text = f"replace({c}, ',', '.')" if opts.decimal == "," else c
        cast = f"TRY_CAST(trim({text}) AS DOUBLE)"
        ok = f"NOT {_lossy_double(text)}"
    return (
        f"CASE WHEN {c} IS NULL THEN NULL WHEN {ok} THEN coalesce({cast}, {stop}) "
        f"ELSE {stop} END AS {c}"
    )


def wider_type(current: str, value: str, decimal: str = ".") -> str:
    """The narrowest type at least as wide as ``current`` that holds ``value`` exactly."""
    text = value.strip().replace(",", ".") if decimal == "," else value.strip()
    if re.fullmatch(r"[+-]?[0-9]+", text):
        if current in INTEGERS and abs(int(text)) < 2**127:
            return "HUGEINT"
        return "DOUBLE" if abs(int(text)) <= _EXACT_DOUBLE_INT else "VARCHAR"
    try:
        number = Decimal(text)
    except InvalidOperation:
        return "VARCHAR"
    exact = number.is_finite() and len(number.as_tuple().digits) <= 17
    return "DOUBLE" if exact or number.is_nan() or number.is_infinite() else "VARCHAR"
