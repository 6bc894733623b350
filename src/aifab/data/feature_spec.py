"""The feature spec: which transform makes which output columns from which input column.

Output columns: ``standardize``, ``minmax``, ``log1p`` (DOUBLE), ``bucketize``, ``hash`` and
``categorical`` (one integer column) are named ``name`` (default: the input column);
``onehot`` makes ``<name>__<category>`` per kept category plus ``<name>__unknown``;
``date_parts`` makes ``<name>__<part>``; ``tfidf`` makes one ``LIST<DOUBLE>`` column ``name``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from aifab.core.config import StrictConfig
from aifab.data.engines import Engine

_NAME = Field(None, description="Output column (or prefix); default: the input column.")


class Standardize(StrictConfig):
    """``(x - mean) / std`` with the training mean and population std (std 0 -> 1)."""

    transform: Literal["standardize"]
    column: str
    name: str | None = _NAME


class MinMax(StrictConfig):
    """``(x - min) / (max - min)`` with the training min and max (not clipped; range 0 -> 1)."""

    transform: Literal["minmax"]
    column: str
    name: str | None = _NAME


class Log1p(StrictConfig):
    """``ln(1 + x)``; NULL where ``x <= -1``."""

    transform: Literal["log1p"]
    column: str
    name: str | None = _NAME


class OneHot(StrictConfig):
    """0/1 columns for the ``max_categories`` most frequent training values.

    Any other value, and NULL, sets ``<name>__unknown`` instead.
    """

    transform: Literal["onehot"]
    column: str
    name: str | None = _NAME
    max_categories: int = Field(20, ge=1, le=10_000)


class Categorical(StrictConfig):
    """One integer code per row, 0 being the unknown bucket.

    Codes 1..k go to the ``max_categories`` most frequent training values (most frequent
    first); any other value, and NULL, gets 0.
    """

    transform: Literal["categorical"]
    column: str
    name: str | None = _NAME
    max_categories: int = Field(100, ge=1, le=1_000_000)


class Hash(StrictConfig):
    """One integer column: ``md5(value as text) % buckets`` (NULL hashes as the empty string).

    md5 rather than DuckDB's ``hash()`` so buckets stay the same across DuckDB versions.
    """

    transform: Literal["hash"]
    column: str
    name: str | None = _NAME
    buckets: int = Field(ge=2, le=1 << 30)


class Bucketize(StrictConfig):
    """Bucket index ``i`` such that ``boundaries[i-1] <= x < boundaries[i]`` (0..len)."""

    transform: Literal["bucketize"]
    column: str
    name: str | None = _NAME
    boundaries: list[float] = Field(min_length=1)

    @field_validator("boundaries")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError("boundaries must be strictly increasing")
        return v


DatePart = Literal["year", "month", "day", "dayofweek", "hour"]


def _default_parts() -> list[DatePart]:
    return ["year", "month", "day", "dayofweek"]


class DateParts(StrictConfig):
    """Integer parts of a DATE/TIMESTAMP column (``dayofweek``: 0 = Sunday .. 6 = Saturday)."""

    transform: Literal["date_parts"]
    column: str
    name: str | None = _NAME
    parts: list[DatePart] = Field(default_factory=_default_parts, min_length=1)


class TfIdf(StrictConfig):
    """TF-IDF of a text column (sklearn tokenization, l2-normalised).

    One LIST<DOUBLE> column of ``len(vocabulary)`` values (at most ``max_features``).
    """

    transform: Literal["tfidf"]
    column: str
    name: str | None = _NAME
    max_features: int = Field(1000, ge=1, le=100_000)
    ngram_max: int = Field(1, ge=1, le=3, description="Longest word n-gram.")
    min_df: int = Field(1, ge=1, description="Ignore terms in fewer training documents.")
    lowercase: bool = True
    sublinear_tf: bool = False


Feature = Annotated[
    Standardize | MinMax | Log1p | OneHot | Categorical | Hash | Bucketize | DateParts | TfIdf,
    Field(discriminator="transform"),
]


class FeatureSpec(StrictConfig):
    """Features to compute, columns to carry through, and which rows the fit may see."""

    features: list[Feature] = Field(min_length=1)
    passthrough: list[str] | None = Field(
        None,
        description="Columns copied unchanged (e.g. id, label, split). Default: the split "
        "column and label columns that the input has.",
    )
    split_column: str = Field("split", description="Column that marks training rows.")
    train_value: str = Field("train", description="Value of split_column on training rows.")
    # Left out of dumps: the transform (its artifact and digest) is the same whichever engine
    # fitted it, so serving and lineage do not see it.
    engine: Engine = Field(
        "duckdb",
        exclude=True,
        description="duckdb (in-process) or ray (Ray Data, for tables beyond one node).",
    )


def output_name(feature: Feature) -> str:
    """The output column (or column prefix) of ``feature``."""
    return feature.name or feature.column
