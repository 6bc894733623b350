"""Classifier request bodies -> checked records: one typed column per model input.

``decode`` accepts ``{"records": [{...}]}`` or ``{"rows": [[...]]}`` and names the row and
field at fault; values come back JSON-ready (dates stay ISO strings) for the request log.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.core import workers
from aifab.core.errors import InvalidInputError
from aifab.data.image_decode import IMAGE_TIMEOUT_S, decode_pixels
from aifab.data.image_text import decode_image_text

__all__ = [
    "Column",
    "ImageData",
    "RecordDecoder",
    "Reject",
    "column_for_type",
    "decode_image",
    "image_tokens",
]


class Reject(Exception):
    """A value a column cannot take; the decoder adds the row and field to the message."""


@dataclass(frozen=True)
class Column:
    """One model input column of a request record."""

    name: str
    #: Shown by ``describe``: number | integer | string | boolean | date | timestamp | text |
    #: image | any.
    type: str
    #: value -> the value kept in the record; raises :class:`Reject`.
    check: Callable[[Any], Any]
    nullable: bool = False
    #: Arrow type of the column when records become a table (None: inferred).
    arrow_type: pa.DataType | None = None


#: Image work is priced like OpenAI's vision input: a base charge plus one per 512 x 512 tile
#: of the image as sent, so a token quota bounds how many pixels a key has decoded.
TILE_PX = 512
TOKENS_PER_IMAGE = 85
TOKENS_PER_TILE = 170


def image_tokens(width: int, height: int) -> int:
    """Tokens an image of ``width`` x ``height`` costs: 85 + 170 per 512 x 512 tile."""
    tiles = -(-width // TILE_PX) * -(-height // TILE_PX)
    return TOKENS_PER_IMAGE + TOKENS_PER_TILE * tiles


class ImageData(str):
    """A base64 image (still the caller's string, so it logs as JSON) with its decoded pixels."""

    pixels: np.ndarray
    #: The image's own width and height, as sent (before resizing).
    size: tuple[int, int]

    @property
    def tokens(self) -> int:
        """What decoding this image costs against a token quota (:func:`image_tokens`)."""
        return image_tokens(*self.size)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def check_number(value: Any) -> Any:
    """A finite int or float (booleans are not numbers here)."""
    t = type(value)
    if t is float:
        if math.isfinite(value):
            return value
        raise Reject(f"expected a finite number, got {value}")
    if t is int:
        return value
    if isinstance(value, bool):
        raise Reject(f"expected a number, got {_kind(value)}")
    if isinstance(value, numbers.Integral):
        return int(value)  # NumPy integers from Python callers; plain ints log as JSON
    if isinstance(value, numbers.Real):
        return check_number(float(value))
    raise Reject(f"expected a number, got {_kind(value)}")


def check_feature(value: Any) -> Any:
    """A plain feature: a number, or a boolean (training read boolean columns as 0/1)."""
    return value if type(value) is bool else check_number(value)


def _integer(lo: int, hi: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if type(value) is not int:
            value = check_number(value)
            if not float(value).is_integer():
                raise Reject(f"expected an integer, got {value}")
            value = int(value)
        if not lo <= value <= hi:
            raise Reject(f"{value} is out of range [{lo}, {hi}]")
        return value

    return check


def check_string(value: Any) -> Any:
    """A string."""
    if isinstance(value, str):
        return value
    raise Reject(f"expected a string, got {_kind(value)}")


def _check_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    raise Reject(f"expected true or false, got {_kind(value)}")


def _check_date(value: Any) -> Any:
    if isinstance(value, str):
        try:
            date.fromisoformat(value)
        except ValueError:
            raise Reject(f"expected a date (YYYY-MM-DD), got {value[:40]!r}") from None
        return value
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    raise Reject(f"expected a date (YYYY-MM-DD), got {_kind(value)}")


def _check_timestamp(value: Any) -> Any:
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise Reject(f"expected an ISO timestamp, got {value[:40]!r}") from None
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    raise Reject(f"expected an ISO timestamp, got {_kind(value)}")


def _any(value: Any) -> Any:
    return value


_INTS = {
    "TINYINT": (pa.int8(), -(2**7), 2**7 - 1),
    "SMALLINT": (pa.int16(), -(2**15), 2**15 - 1),
    "INTEGER": (pa.int32(), -(2**31), 2**31 - 1),
    "BIGINT": (pa.int64(), -(2**63), 2**63 - 1),
    "UTINYINT": (pa.uint8(), 0, 2**8 - 1),
    "USMALLINT": (pa.uint16(), 0, 2**16 - 1),
    "UINTEGER": (pa.uint32(), 0, 2**32 - 1),
    "UBIGINT": (pa.uint64(), 0, 2**64 - 1),
}
_FLOATS = {"DOUBLE": pa.float64(), "FLOAT": pa.float32(), "REAL": pa.float32()}


def column_for_type(name: str, sql_type: str, *, nullable: bool) -> Column:
    """The column for a feature transform input of DuckDB type ``sql_type``."""
    t = sql_type.upper()
    if t in _INTS:
        arrow, lo, hi = _INTS[t]
        return Column(name, "integer", _integer(lo, hi), nullable, arrow)
    if t in _FLOATS or t.startswith("DECIMAL"):
        return Column(name, "number", check_number, nullable, _FLOATS.get(t, pa.float64()))
    if t == "VARCHAR":
        return Column(name, "string", check_string, nullable, pa.string())
    if t == "BOOLEAN":
        return Column(name, "boolean", _check_boolean, nullable, pa.bool_())
    if t == "DATE":
        return Column(name, "date", _check_date, nullable, pa.date32())
    if t == "TIMESTAMP":
        return Column(name, "timestamp", _check_timestamp, nullable, pa.timestamp("us"))
    return Column(name, "any", _any, nullable, None)


def arrow_column(column: Column, values: list[Any]) -> pa.Array:
    """Values of one checked column as Arrow (dates and timestamps parsed from ISO text)."""
    if column.type == "date":
        values = [None if v is None else date.fromisoformat(v) for v in values]
    elif column.type == "timestamp":
        values = [None if v is None else datetime.fromisoformat(v) for v in values]
    try:
        return pa.array(values, type=column.arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise InvalidInputError(f"field {column.name!r}: {exc}") from None


def decode_image(data: bytes, size: int, channels: int) -> np.ndarray:
    """Image bytes -> ``(channels, size, size)`` float32 in [0, 1].

    Exactly what training did to image files (``aifab.models.inputs.image_files``): convert
    to L or RGB, resize, divide by 255. Only allowed formats open
    (:data:`~aifab.data.image_decode.ALLOWED_FORMATS`).
    """
    return decode_pixels(data, size, channels, None)[0]


def image_column(
    name: str,
    size: int,
    channels: int,
    *,
    max_bytes: int | None = None,
    max_pixels: int | None = None,
) -> Column:
    """A column of base64 images (optionally ``data:`` URLs), decoded while checking.

    ``max_bytes`` caps the encoded file and ``max_pixels`` its width x height; both are checked
    before any pixel is decoded (the size from the base64 length, the pixels from the header
    of an allowed format), so an oversized image costs no decoding.
    """

    def check(value: Any) -> Any:
        if isinstance(value, ImageData):
            return value
        if not isinstance(value, str):
            raise Reject(f"expected a base64-encoded image, got {_kind(value)}")
        try:
            data = decode_image_text(value, max_bytes=max_bytes)
        except ValueError as exc:
            raise Reject(f"image of {exc}" if "max_image_bytes" in str(exc) else str(exc)) from None
        try:
            # In a memory-capped worker (killed at its time limit) when the server runs one.
            pixels, shape = workers.run(
                decode_pixels,
                data,
                size,
                channels,
                max_pixels,
                timeout_s=IMAGE_TIMEOUT_S,
                what="image decode",
            )
        except ValueError as exc:
            raise Reject(str(exc)) from None
        except InvalidInputError as exc:
            raise Reject(exc.message) from None
        out = ImageData(value)
        out.pixels, out.size = pixels, shape
        return out

    return Column(name, "image", check)


class RecordDecoder:
    """Checks request bodies against the model's input columns."""

    def __init__(
        self,
        columns: list[Column],
        *,
        optional: Iterable[str] = (),
        max_items: int = 1000,
        limit_name: str | None = None,
    ) -> None:
        self.columns = columns
        self.limit_name = limit_name
        self.names = [c.name for c in columns]
        self.max_items = max_items
        self._keys = frozenset(self.names)
        self._optional = frozenset(optional) - self._keys
        self._expected = ", ".join(self.names)

    def decode(self, payload: Any) -> list[dict[str, Any]]:
        """``{"records": [...]}`` or ``{"rows": [...]}`` -> checked records.

        Raises:
            InvalidInputError: naming the row and field at fault.
        """
        if not isinstance(payload, Mapping):
            raise InvalidInputError("body: expected an object with 'records' or 'rows'")
        keys = set(payload)
        if len(keys) != 1 or not keys <= {"records", "rows"}:
            extra = sorted(keys - {"records", "rows"})
            what = f"unknown field {extra[0]!r}" if extra else "exactly one is needed"
            raise InvalidInputError(f"body: send 'records' or 'rows' ({what})")
        field = next(iter(keys))
        items = payload[field]
        if not isinstance(items, list):
            raise InvalidInputError(f"field {field!r}: expected a list, got {_kind(items)}")
        if not items:
            raise InvalidInputError(f"field {field!r}: empty (send at least one row)")
        if len(items) > self.max_items:
            cap = f" ({self.limit_name})" if self.limit_name else ""
            raise InvalidInputError(
                f"field {field!r}: {len(items)} rows are over the limit of {self.max_items}{cap}"
            )
        if field == "rows":
            return [self._record(self._row(i, r), i) for i, r in enumerate(items)]
        return [self._record(r, i) for i, r in enumerate(items)]

    def _row(self, i: int, row: Any) -> dict[str, Any]:
        if not isinstance(row, list):
            raise InvalidInputError(f"row {i}: expected a list of values, got {_kind(row)}")
        if len(row) != len(self.names):
            raise InvalidInputError(
                f"row {i}: expected {len(self.names)} values ({self._expected}), got {len(row)}"
            )
        return dict(zip(self.names, row, strict=True))

    def _record(self, record: Any, i: int) -> dict[str, Any]:
        if not isinstance(record, Mapping):
            raise InvalidInputError(f"row {i}: expected an object, got {_kind(record)}")
        if record.keys() != self._keys:
            self._check_keys(record, i)
        out: dict[str, Any] = {}
        for col in self.columns:
            value = record[col.name]
            if value is None:
                if not col.nullable:
                    raise InvalidInputError(
                        f"row {i}, field {col.name!r}: is null, but the model needs a value"
                    )
                out[col.name] = None
                continue
            try:
                out[col.name] = col.check(value)
            except Reject as exc:
                raise InvalidInputError(f"row {i}, field {col.name!r}: {exc}") from None
        return out

    def _check_keys(self, record: Mapping[str, Any], i: int) -> None:
        missing = [n for n in self.names if n not in record]
        if missing:
            raise InvalidInputError(f"row {i}, field {missing[0]!r}: missing")
        extra = [str(k) for k in record if k not in self._keys and k not in self._optional]
        if extra:
            raise InvalidInputError(
                f"row {i}, field {extra[0]!r}: unknown (expected: {self._expected})"
            )
