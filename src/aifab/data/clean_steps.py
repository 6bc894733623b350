"""Clean steps: their typed options (one YAML key per step) and the SQL each compiles to.

Every compile function is pure: it takes the SQL of the rows so far and returns the SQL after
the step. Statistics a step needs (quantiles, means) are computed by the caller and passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from aifab.core.config import StrictConfig
from aifab.data.lake import sql_ident, sql_string
from aifab.data.pii import PII_KINDS, PiiKind, redact_sql

#: Hidden column carrying each row's 1-based position in the input version.
RN = "__aifab_rn"

Scalar = bool | int | float | str


class DropDuplicates(StrictConfig):
    """Drop rows equal to an earlier row on ``subset`` (default: all columns); keep the first."""

    op: Literal["drop_duplicates"] = "drop_duplicates"
    subset: list[str] | None = Field(None, min_length=1, description="Columns compared.")


class DropNearDuplicates(StrictConfig):
    """Drop rows whose text is a near-duplicate (MinHash Jaccard) of an earlier kept row."""

    op: Literal["drop_near_duplicates"] = "drop_near_duplicates"
    column: str = Field(description="Text column compared.")
    threshold: float = Field(0.85, gt=0.0, le=1.0, description="Jaccard similarity to drop at.")
    shingle: Literal["char", "word"] = Field("char", description="Shingle unit.")
    size: int = Field(5, ge=1, le=64, description="Shingle length in units.")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    seed: int = Field(1, description="Seed of the hash functions.")


class DropNulls(StrictConfig):
    """Drop rows with nulls in ``columns`` (default: any column)."""

    op: Literal["drop_nulls"] = "drop_nulls"
    columns: list[str] | None = Field(None, min_length=1)
    how: Literal["any", "all"] = Field("any", description="Drop if any / all of them are null.")


class FillNulls(StrictConfig):
    """Replace nulls by a constant (``values``) or a statistic of the column (``strategy``)."""

    op: Literal["fill_nulls"] = "fill_nulls"
    values: dict[str, Scalar] = Field(default_factory=dict)
    strategy: dict[str, Literal["mean", "median", "mode"]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> FillNulls:
        if not self.values and not self.strategy:
            raise ValueError("give 'values' or 'strategy'")
        both = sorted(set(self.values) & set(self.strategy))
        if both:
            raise ValueError(f"column {both[0]!r} is in both 'values' and 'strategy'")
        return self


class Cast(StrictConfig):
    """Cast columns to DuckDB types; non-null values that fail to cast are quarantined."""

    op: Literal["cast"] = "cast"
    columns: dict[str, Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_ (),\[\]]*$")]] = Field(
        min_length=1
    )


class Rename(StrictConfig):
    """Rename columns (``old: new``)."""

    op: Literal["rename"] = "rename"
    columns: dict[str, Annotated[str, Field(min_length=1)]] = Field(min_length=1)


class Filter(StrictConfig):
    """Keep the rows for which the SQL predicate is true."""

    op: Literal["filter"] = "filter"
    where: str = Field(min_length=1, description="A DuckDB boolean expression.")


class Clip(StrictConfig):
    """Clip numeric columns to quantiles of their data (winsorize) or to fixed bounds."""

    op: Literal["clip"] = "clip"
    columns: list[str] = Field(min_length=1)
    lower_quantile: float | None = Field(None, ge=0.0, le=1.0)
    upper_quantile: float | None = Field(None, ge=0.0, le=1.0)
    lower: float | None = None
    upper: float | None = None

    @model_validator(mode="after")
    def _check(self) -> Clip:
        quantiles = (self.lower_quantile, self.upper_quantile)
        bounds = (self.lower, self.upper)
        if any(q is not None for q in quantiles) == any(b is not None for b in bounds):
            raise ValueError(
                "give quantiles (lower_quantile/upper_quantile) or bounds "
                "(lower/upper), not both or neither"
            )
        for lo, hi in (quantiles, bounds):
            if lo is not None and hi is not None and lo > hi:
                raise ValueError("the lower bound is above the upper bound")
        return self


class RegexReplace(StrictConfig):
    """Replace matches of an RE2 ``pattern`` in a text column (backslash-1 is group 1)."""

    op: Literal["regex_replace"] = "regex_replace"
    column: str
    pattern: str = Field(min_length=1)
    replacement: str = ""
    first_only: bool = Field(False, description="Replace only the first match.")


class NormalizeText(StrictConfig):
    """Normalize text columns: unicode form, collapsed whitespace, trimmed, lower-cased."""

    op: Literal["normalize_text"] = "normalize_text"
    columns: list[str] = Field(min_length=1)
    trim: bool = True
    lower: bool = False
    collapse_whitespace: bool = True
    unicode: Literal["nfc", "nfkc"] | None = Field(None, description="Unicode normal form.")


class RedactPii(StrictConfig):
    """Replace emails, phone numbers, card numbers and ID numbers with tokens like <EMAIL>."""

    op: Literal["redact_pii"] = "redact_pii"
    columns: list[str] = Field(min_length=1)
    kinds: list[PiiKind] = Field(default_factory=lambda: list(PII_KINDS), min_length=1)
    luhn: bool = Field(True, description="Redact card-like numbers only if Luhn-valid.")


STEP_TYPES = (
    DropDuplicates,
    DropNearDuplicates,
    DropNulls,
    FillNulls,
    Cast,
    Rename,
    Filter,
    Clip,
    RegexReplace,
    NormalizeText,
    RedactPii,
)


def one_key_form(ops: Sequence[str], what: str) -> Callable[[Any], Any]:
    """A before-validator turning YAML's ``{op_name: {options}}`` into ``{"op": op_name, ...}``.

    Errors then carry the op name in their path (``steps.2.filter.wher: unknown key``).
    """

    def unwrap(value: Any) -> Any:
        if not isinstance(value, Mapping) or "op" in value:
            return value
        names = ", ".join(ops)
        if len(value) != 1:
            raise PydanticCustomError("one_key", f"a {what} has exactly one key, one of: {names}")
        ((op, body),) = value.items()
        if op not in ops:
            raise PydanticCustomError("one_key", f"unknown {what} {op!r}; expected one of: {names}")
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise PydanticCustomError("one_key", f"the options of {op!r} must be a mapping")
        return {**body, "op": op}

    return unwrap


Step = Annotated[
    Annotated[
        DropDuplicates
        | DropNearDuplicates
        | DropNulls
        | FillNulls
        | Cast
        | Rename
        | Filter
        | Clip
        | RegexReplace
        | NormalizeText
        | RedactPii,
        Field(discriminator="op"),
    ],
    BeforeValidator(one_key_form([t.model_fields["op"].default for t in STEP_TYPES], "step")),
]


def sql_literal(value: Any) -> str:
    """A SQL literal for a YAML scalar (strings quoted, non-finite floats spelled out)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"CAST('{value}' AS DOUBLE)"
    return sql_string(str(value))


def project(src: str, exprs: Sequence[tuple[str, str]], rn: bool) -> str:
    """``SELECT expr AS name, ...`` over ``src``, carrying the hidden row number if present."""
    items = [f"{e} AS {sql_ident(n)}" for e, n in exprs] + ([sql_ident(RN)] if rn else [])
    return f"SELECT {', '.join(items)} FROM ({src}) AS t"


def replace_columns(src: str, columns: Sequence[str], exprs: Mapping[str, str], rn: bool) -> str:
    """Project ``columns`` in order, swapping in ``exprs`` for some of them."""
    return project(src, [(exprs.get(c, sql_ident(c)), c) for c in columns], rn)


def drop_duplicates_sql(src: str, subset: Sequence[str]) -> str:
    """Keep the first row (by row number) of each group of equal ``subset`` values."""
    keys = ", ".join(sql_ident(c) for c in subset)
    return (
        f"SELECT * FROM ({src}) AS t "
        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {sql_ident(RN)}) = 1"
    )


def drop_nulls_sql(src: str, columns: Sequence[str], how: str) -> str:
    """Drop rows with a null in any (or all) of ``columns``."""
    joiner = " OR " if how == "any" else " AND "
    nulls = joiner.join(f"{sql_ident(c)} IS NULL" for c in columns)
    return f"SELECT * FROM ({src}) AS t WHERE NOT ({nulls})"


def where_sql(src: str, predicate: str) -> str:
    """Keep rows where ``predicate`` is true (newlines guard against a trailing comment)."""
    return f"SELECT * FROM ({src}) AS t WHERE (\n{predicate}\n)"


def fill_expr(column: str, col_type: str, value: Any) -> str:
    """``column`` with nulls replaced by ``value`` cast to the column's type."""
    return f"coalesce({sql_ident(column)}, CAST({sql_literal(value)} AS {col_type}))"


def clip_expr(column: str, col_type: str, lower: float | None, upper: float | None) -> str:
    """``column`` clipped to ``[lower, upper]`` (either optional); nulls stay null."""
    c = sql_ident(column)
    cases = []
    if lower is not None:
        lo = f"CAST({sql_literal(lower)} AS {col_type})"
        cases.append(f"WHEN {c} < {lo} THEN {lo}")
    if upper is not None:
        hi = f"CAST({sql_literal(upper)} AS {col_type})"
        cases.append(f"WHEN {c} > {hi} THEN {hi}")
    return f"CASE {' '.join(cases)} ELSE {c} END"


def regex_replace_expr(step: RegexReplace) -> str:
    """The ``regexp_replace`` call of a regex_replace step."""
    flags = "" if step.first_only else ", 'g'"
    return (
        f"regexp_replace({sql_ident(step.column)}, {sql_string(step.pattern)}, "
        f"{sql_string(step.replacement)}{flags})"
    )


def normalize_expr(column: str, step: NormalizeText, nfkc_function: str) -> str:
    """The text normalization of ``column``: unicode form, whitespace, trim, case."""
    e = sql_ident(column)
    if step.unicode == "nfc":
        e = f"nfc_normalize({e})"
    elif step.unicode == "nfkc":
        e = f"{nfkc_function}({e})"
    if step.collapse_whitespace:
        e = f"regexp_replace({e}, '\\s+', ' ', 'g')"
    if step.trim:
        e = f"trim({e}, ' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13))"
    if step.lower:
        e = f"lower({e})"
    return e


def redact_expr(column: str, step: RedactPii) -> str:
    """The PII redaction of ``column``."""
    return redact_sql(sql_ident(column), tuple(step.kinds), step.luhn)


def cast_failure_sql(column: str, col_type: str) -> str:
    """True where a non-null value of ``column`` cannot be cast to ``col_type``."""
    c = sql_ident(column)
    return f"({c} IS NOT NULL AND TRY_CAST({c} AS {col_type}) IS NULL)"
