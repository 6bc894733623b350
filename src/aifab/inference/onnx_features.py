r"""A classifier's preprocessing as ONNX nodes: raw fields in, the model's feature matrix out.

:func:`preprocess_graph` turns the fitted feature transform (or the plain standardizer) into
ONNX ops, one graph input per raw field (text and dates as strings, numbers as float), and an
output ``(rows, features)`` float32 equal to what serving's encoder makes. Numbers are computed
in double as DuckDB does. TF-IDF uses the standard ``TfIdfVectorizer`` op over tokens from
``StringNormalizer`` (lower case, locale ``C.UTF-8``) and onnxruntime's ``Tokenizer`` with the
RE2 pattern ``[\pL\pN_]{2,}``, the Unicode reading of sklearn's ``\b\w\w+\b``. A transform
ONNX cannot express (md5 hashing, timestamps, text of a non-text column, images, tokenizers)
raises :class:`Inexpressible` naming it; callers then keep aifab's own preprocessing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ML_OPSET", "OPSET", "Inexpressible", "Preprocess", "RawField", "preprocess_graph"]

#: ai.onnx opset of the preprocessing (StringSplit is opset 20).
OPSET = 20
ML_OPSET = 3
TOKEN_PATTERN = r"[\pL\pN_][\pL\pN_]+"
#: The bundled graph's outputs: no input field may take these names.
RESERVED = ("probabilities", "label", "logits")
#: Pads the token matrix; no vocabulary term can equal it (terms are word characters).
_PAD = "#"
# Day-of-week offsets of Sakamoto's method (0 = Sunday, as DuckDB's 'dow').
_DOW_OFFSETS = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4]


class Inexpressible(Exception):
    """The model's preprocessing has a step ONNX ops cannot reproduce (the message says which)."""


@dataclass(frozen=True)
class RawField:
    """One graph input: a raw record field."""

    name: str
    #: ``string`` (text; dates as ``YYYY-MM-DD``) or ``number`` (float).
    type: str
    #: The record may leave it out (strings: send ``""`` for a missing value).
    nullable: bool = False


@dataclass
class Preprocess:
    """Preprocessing nodes ready to sit in front of a network taking ``output``."""

    fields: list[RawField]
    features: list[str]
    output: str
    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)


class _Graph:
    """Nodes and constants being collected, with fresh tensor names."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, value: Any, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], outs: int = 1, **attrs: Any) -> Any:
        from onnx import helper

        domain = str(attrs.pop("domain", ""))
        names = [self.name(op_type.lower()) for _ in range(outs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, domain=domain, **attrs))
        return names[0] if outs == 1 else names


# A block: a (rows, width) double tensor and its feature columns (name, width) in order.
Block = tuple[str, list[tuple[str, int]]]


def _column(g: _Graph, x: str) -> str:
    """``(rows,)`` float -> ``(rows, 1)`` double."""
    return g.op("Unsqueeze", [g.op("Cast", [x], to=11), g.const(np.array([1], np.int64))])


def _affine(g: _Graph, x: str, shift: float, scale: float) -> str:
    centered = g.op("Sub", [_column(g, x), g.const(np.array(float(shift)))])
    return g.op("Div", [centered, g.const(np.array(float(scale)))])


def _log1p(g: _Graph, x: str) -> str:
    # DuckDB's CASE WHEN x > -1 THEN ln(1 + x): serving refuses x <= -1, so ln is enough.
    return g.op("Log", [g.op("Add", [_column(g, x), g.const(np.array(1.0))])])


def _bucketize(g: _Graph, x: str, boundaries: Sequence[float]) -> str:
    col = _column(g, x)
    edges = g.const(np.asarray(boundaries, np.float64))
    above = g.op("Cast", [g.op("GreaterOrEqual", [col, edges])], to=11)
    count = g.op("ReduceSum", [above, g.const(np.array([1], np.int64))], keepdims=1)
    # NaN sorts above every number in DuckDB: the last bucket.
    last = g.const(np.array(float(len(boundaries))))
    return g.op("Where", [g.op("IsNaN", [col]), last, count])


def _codes(g: _Graph, x: str, keys: list[str], values: list[int], default: int) -> str:
    return g.op(
        "LabelEncoder",
        [x],
        domain="ai.onnx.ml",
        keys_strings=keys,
        values_int64s=values,
        default_int64=default,
    )


def _onehot(g: _Graph, x: str, categories: list[str]) -> str:
    """``(rows, k + 1)``: one column per category, then the unknown column."""
    k = len(categories)
    codes = _codes(g, x, categories, list(range(k)), k)
    # float values: onnxruntime's OneHot kernels do not make doubles.
    depth = g.const(np.array(k + 1, np.int64))
    values = g.const(np.array([0.0, 1.0], np.float32))
    return g.op("Cast", [g.op("OneHot", [codes, depth, values], axis=-1)], to=11)


def _categorical(g: _Graph, x: str, categories: list[str]) -> str:
    first: dict[str, int] = {}
    for code, c in enumerate(categories, start=1):
        first.setdefault(c, code)  # the SQL CASE takes the first WHEN that matches
    codes = _codes(g, x, list(first), list(first.values()), 0)
    return g.op("Cast", [g.op("Unsqueeze", [codes, g.const(np.array([1], np.int64))])], to=11)


def _date_parts(g: _Graph, x: str, parts: Sequence[str]) -> str:
    """Parts of ``YYYY-MM-DD`` strings, ``(rows, len(parts))`` double."""
    pieces, _ = g.op("StringSplit", [x], outs=2, delimiter="-", maxsplit=2)
    ymd = g.op("Cast", [pieces], to=7)

    def part(i: int) -> str:
        return g.op("Gather", [ymd, g.const(np.array([i], np.int64))], axis=1)

    year, month, day = part(0), part(1), part(2)
    cols = {"year": year, "month": month, "day": day, "hour": g.op("Mul", [day, g.const(0)])}
    if "dayofweek" in parts:
        before_march = g.op("Cast", [g.op("Less", [month, g.const(3)])], to=7)
        y = g.op("Sub", [year, before_march])

        def div(n: int) -> str:
            return g.op("Div", [y, g.const(n)])

        offset = g.op(
            "Gather",
            [g.const(np.asarray(_DOW_OFFSETS, np.int64)), g.op("Sub", [month, g.const(1)])],
        )
        total = y
        for term in (div(4), div(400), offset, day):
            total = g.op("Add", [total, term])
        total = g.op("Sub", [total, div(100)])
        cols["dayofweek"] = g.op("Mod", [total, g.const(7)])
    picked = [cols[p] for p in parts]
    joined = picked[0] if len(picked) == 1 else g.op("Concat", picked, axis=1)
    return g.op("Cast", [joined], to=11)


def _tfidf(g: _Graph, x: str, feature: Any, params: Mapping[str, Any]) -> str:
    """The l2-normalised TF-IDF (as sklearn's) of each text, ``(rows, len(vocabulary))`` double."""
    vocabulary = [str(t) for t in params["vocabulary"]]
    text = x
    if feature.lowercase:
        text = g.op("StringNormalizer", [x], case_change_action="LOWER", locale="C.UTF-8")
    tokens = g.op(
        "Tokenizer",
        [text],
        domain="com.microsoft",
        tokenexp=TOKEN_PATTERN,
        mark=0,
        mincharnum=1,
        pad_value=_PAD,
    )
    by_n: dict[int, list[int]] = {}
    for j, term in enumerate(vocabulary):
        by_n.setdefault(len(term.split(" ")), []).append(j)
    top = int(feature.ngram_max)
    pool: list[str] = []
    counts: list[int] = []
    indexes: list[int] = []
    for n in range(1, top + 1):
        counts.append(len(pool))  # where the n-grams start in the pool
        for j in by_n.get(n, []):
            pool.extend(vocabulary[j].split(" "))
            indexes.append(j)
    tf = g.op(
        "TfIdfVectorizer",
        [tokens],
        mode="TF",
        min_gram_length=1,
        max_gram_length=top,
        max_skip_count=0,
        ngram_counts=counts,
        ngram_indexes=indexes,
        pool_strings=pool,
    )
    tf = g.op("Cast", [tf], to=11)
    if feature.sublinear_tf:
        # As aifab's fitted function computes it (what the model was trained on): ln(tf), then
        # +1 where that is positive, so a term counted once weighs 0 (sklearn gives it 1).
        safe = g.op("Where", [g.op("Greater", [tf, g.const(0.0)]), tf, g.const(1.0)])
        log = g.op("Log", [safe])
        shifted = g.op("Add", [log, g.const(1.0)])
        tf = g.op("Where", [g.op("Greater", [log, g.const(0.0)]), shifted, g.const(0.0)])
    weighted = g.op("Mul", [tf, g.const(np.asarray(params["idf"], np.float64))])
    squares = g.op("Mul", [weighted, weighted])
    axis = g.const(np.array([1], np.int64))
    norm = g.op("Sqrt", [g.op("ReduceSum", [squares, axis], keepdims=1)])
    nonzero = g.op("Where", [g.op("Greater", [norm, g.const(0.0)]), norm, g.const(1.0)])
    return g.op("Div", [weighted, nonzero])


def _transform_blocks(
    g: _Graph, ft: Any, types: Mapping[str, str]
) -> tuple[list[RawField], list[Block]]:
    """Graph inputs and one block per feature of a fitted ``FeatureTransform``."""
    from aifab.data.feature_ops import category_columns, describe
    from aifab.data.feature_spec import (
        Bucketize,
        Categorical,
        DateParts,
        Log1p,
        MinMax,
        OneHot,
        Standardize,
        TfIdf,
        output_name,
    )

    fields: dict[str, RawField] = {}
    blocks: list[Block] = []
    for i, (f, p) in enumerate(zip(ft.spec.features, ft.params, strict=True)):
        t, out, x = str(types.get(f.column, "")).upper(), output_name(f), f.column
        numeric = isinstance(f, Standardize | MinMax | Log1p | Bucketize)
        if numeric and t in ("VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP"):
            raise Inexpressible(f"{describe(f, i)}: a {t} column as a number")
        if isinstance(f, Standardize):
            blocks.append((_affine(g, x, p["mean"], p["std"] or 1.0), [(out, 1)]))
        elif isinstance(f, MinMax):
            blocks.append((_affine(g, x, p["min"], (p["max"] - p["min"]) or 1.0), [(out, 1)]))
        elif isinstance(f, Log1p):
            blocks.append((_log1p(g, x), [(out, 1)]))
        elif isinstance(f, Bucketize):
            blocks.append((_bucketize(g, x, f.boundaries), [(out, 1)]))
        elif isinstance(f, DateParts) and t == "DATE":
            blocks.append((_date_parts(g, x, f.parts), [(f"{out}__{q}", 1) for q in f.parts]))
        elif t != "VARCHAR":
            raise Inexpressible(f"{describe(f, i)}: {f.transform} of a {t or 'untyped'} column")
        elif isinstance(f, OneHot):
            cats = [str(c) for c in p["categories"]]
            names = [*category_columns(out, cats), f"{out}__unknown"]
            blocks.append((_onehot(g, x, cats), [(n, 1) for n in names]))
        elif isinstance(f, Categorical):
            blocks.append((_categorical(g, x, [str(c) for c in p["categories"]]), [(out, 1)]))
        elif isinstance(f, TfIdf):
            blocks.append((_tfidf(g, x, f, p), [(out, len(p["idf"]))]))
        else:
            raise Inexpressible(f"{describe(f, i)}: {f.transform} has no ONNX form")
        # NULL text is one-hot unknown or an empty document; a NULL date or number fails.
        kind = "string" if t in ("VARCHAR", "DATE") else "number"
        fields.setdefault(x, RawField(x, kind, nullable=t == "VARCHAR"))
    return list(fields.values()), blocks


def _assemble(g: _Graph, blocks: list[Block], features: list[str]) -> str:
    """Concatenate the model's feature columns in training order, as float32."""
    where: dict[str, tuple[str, int, int]] = {}
    total: dict[str, int] = {}
    for tensor, columns in blocks:
        offset = 0
        for name, width in columns:
            where[name] = (tensor, offset, width)
            offset += width
        total[tensor] = offset
    runs: list[list[Any]] = []  # [tensor, start, stop] in block columns
    for name in features:
        if name not in where:
            raise Inexpressible(f"feature {name!r}: not made by the feature transform")
        tensor, start, width = where[name]
        if runs and runs[-1][0] == tensor and runs[-1][2] == start:
            runs[-1][2] = start + width
        else:
            runs.append([tensor, start, start + width])
    parts = []
    for tensor, start, stop in runs:
        if start == 0 and stop == total[tensor]:
            parts.append(tensor)
            continue
        bounds = [g.const(np.array([v], np.int64)) for v in (start, stop)]
        parts.append(g.op("Slice", [tensor, *bounds, g.const(np.array([1], np.int64))]))
    joined = parts[0] if len(parts) == 1 else g.op("Concat", parts, axis=1)
    return g.op("Cast", [joined], to=1)


def preprocess_graph(
    model_dir: Path, sidecar: Mapping[str, Any], *, prefix: str = "pre/", output: str = "features"
) -> Preprocess:
    """The classifier's record -> features preprocessing as ONNX nodes.

    Args:
        model_dir: The model directory (sidecar, feature transform).
        sidecar: Its ``aifab-model.json``.
        prefix: Prefix of every intermediate tensor name.
        output: Name of the ``(rows, features)`` float32 tensor the nodes produce.

    Raises:
        Inexpressible: a step ONNX cannot express (the message names it).
        InvalidInputError: the model's preprocessing files are missing or corrupt.
    """
    pre = (sidecar.get("meta") or {}).get("preprocess") or {}
    if pre.get("modality") != "tabular" or pre.get("image_column") or pre.get("image_shape"):
        raise Inexpressible(f"{pre.get('modality') or 'this'} preprocessing has no ONNX form")
    features = [str(f) for f in pre.get("features") or []]
    g = _Graph(prefix)
    if "feature_transform" in pre:
        from aifab.data.feature_transform import FeatureTransform

        ft = FeatureTransform.load(Path(model_dir) / str(pre["feature_transform"]["file"]))
        types = {c["name"]: c["type"] for c in ft.input_schema}
        fields, blocks = _transform_blocks(g, ft, types)
        last = _assemble(g, blocks, features)
    else:
        fields, last = _plain(g, pre, features, sidecar)
    taken = (*RESERVED, output)
    clash = [
        f.name for f in fields if f.name in taken or f.name.startswith((prefix, "net/", "head/"))
    ]
    if clash:
        raise Inexpressible(f"input field {clash[0]!r} has the name of a graph output or tensor")
    g.nodes.append(_rename(last, output))
    return Preprocess(fields, features, output, g.nodes, g.inits)


def _plain(
    g: _Graph, pre: Mapping[str, Any], features: list[str], sidecar: Mapping[str, Any]
) -> tuple[list[RawField], str]:
    """Plain numeric columns, standardized in float32 as ``Standardizer`` does."""
    width = (sidecar.get("config") or {}).get("in_features")
    if width is not None and int(width) != len(features):
        raise Inexpressible("list-valued feature columns have no ONNX form here")
    axis = g.const(np.array([1], np.int64))
    cols = [g.op("Unsqueeze", [f, axis]) for f in features]
    x = cols[0] if len(cols) == 1 else g.op("Concat", cols, axis=1)
    if "standardize" in pre:
        mean = np.asarray(pre["standardize"]["mean"], np.float32)
        std = np.asarray(pre["standardize"]["std"], np.float32)
        x = g.op("Div", [g.op("Sub", [x, g.const(mean)]), g.const(std)])
    return [RawField(f, "number") for f in features], x


def _rename(src: str, dst: str) -> Any:
    from onnx import helper

    return helper.make_node("Identity", [src], [dst])
