"""A fitted feature transform: its JSON artifact, and applying it to new rows.

:meth:`FeatureTransform.select_sql` is the one projection that built the committed features
dataset; :meth:`FeatureTransform.transform_table` runs the same SQL over an Arrow table, so a
served row gets exactly the features its training twin got. Each thread reuses one DuckDB
connection (with the UDFs registered once). Small batches (a served request) skip DuckDB: the
transform compiled once by :mod:`aifab.data.feature_eval` computes the same values in NumPy.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from aifab.core.atomic import atomic_write_text
from aifab.core.errors import InvalidInputError, first_line
from aifab.core.ids import digest
from aifab.data.feature_eval import CompiledTransform, compile_transform
from aifab.data.feature_ops import describe, output_columns, udf_name
from aifab.data.feature_spec import FeatureSpec, TfIdf
from aifab.data.feature_text import register_tfidf
from aifab.data.lake import sql_ident

FORMAT = "aifab.feature_transform/1"
_INPUT = "__aifab_features_input"
#: Tables up to this many rows are transformed in NumPy (when exact); bigger ones in DuckDB.
FAST_MAX_ROWS = 1024


@dataclass(frozen=True)
class FeatureTransform:
    """Fitted features: the spec, the fitted parameters and the data they were fitted on.

    Attributes:
        name: the feature set name (the features dataset's name).
        spec: the feature spec.
        params: fitted parameters, one dict per feature in spec order.
        input_schema: ``[{"name", "type"}]`` of the input columns used (features and
            passthrough), with their DuckDB types; new rows are cast to these types first.
        passthrough: columns copied unchanged.
        fitted_on: the dataset version fitted on (``dataset``, ``version``, ``ref``,
            ``version_id``, ``content_hash``).
        fitted_on_all_rows: True when the input had no split column, so every row was used.
        train_rows: how many rows the fit saw.
        output: the features dataset version built with this transform (``NAME@VERSION``).
    """

    name: str
    spec: FeatureSpec
    params: list[dict[str, Any]]
    input_schema: list[dict[str, str]]
    passthrough: list[str]
    fitted_on: dict[str, Any]
    fitted_on_all_rows: bool
    train_rows: int
    output: str | None = None
    _columns: list[tuple[str, str]] = field(init=False, repr=False, compare=False)
    _local: threading.local = field(init=False, repr=False, compare=False)
    _fast: list[CompiledTransform | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cols = output_columns(self.spec, self.params, self.passthrough)
        object.__setattr__(self, "_columns", cols)
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_fast", [])

    def __getstate__(self) -> dict[str, Any]:
        # Connections are per process and thread, the compiled evaluator holds closures: a
        # copy or an unpickled one makes its own.
        return {k: v for k, v in self.__dict__.items() if k not in ("_local", "_fast")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_fast", [])

    @property
    def digest(self) -> str:
        """Content digest of what was fitted (name, spec, parameters, inputs, data version)."""
        return digest(
            {
                "name": self.name,
                "spec": self.spec.model_dump(mode="json"),
                "params": self.params,
                "input_schema": self.input_schema,
                "passthrough": self.passthrough,
                "fitted_on": self.fitted_on,
                "all_rows": self.fitted_on_all_rows,
            }
        )

    @property
    def output_columns(self) -> list[str]:
        """Output column names in order (passthrough first, then features)."""
        return [name for name, _ in self._columns]

    def to_dict(self) -> dict[str, Any]:
        """The JSON artifact's content."""
        d = {f.name: deepcopy(getattr(self, f.name)) for f in fields(self) if f.init}
        d["spec"] = self.spec.model_dump(mode="json")
        return {
            "format": FORMAT,
            "digest": self.digest,
            **d,
            "output_columns": self.output_columns,
            "duckdb_version": duckdb.__version__,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], source: str = "feature artifact"
    ) -> FeatureTransform:
        """Rebuild a transform from :meth:`to_dict` output."""
        if data.get("format") != FORMAT:
            raise InvalidInputError(f"{source}: not an aifab feature transform ({FORMAT})")
        try:
            return cls(
                name=str(data["name"]),
                spec=FeatureSpec.model_validate(data["spec"]),
                params=list(data["params"]),
                input_schema=list(data["input_schema"]),
                passthrough=list(data["passthrough"]),
                fitted_on=dict(data["fitted_on"]),
                fitted_on_all_rows=bool(data["fitted_on_all_rows"]),
                train_rows=int(data["train_rows"]),
                output=data.get("output"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"{source}: malformed feature artifact ({exc})") from None

    def save(self, path: Path) -> Path:
        """Write the artifact atomically to ``path``; return ``path``."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: Path | str) -> FeatureTransform:
        """Read an artifact written by :meth:`save`."""
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidInputError(f"{p}: file not found") from None
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"{p}: not a readable JSON artifact ({exc})") from None
        return cls.from_dict(data, source=str(p))

    def register(self, con: duckdb.DuckDBPyConnection) -> None:
        """Register the functions the projection calls (TF-IDF UDFs) on ``con``."""
        for i, (f, p) in enumerate(zip(self.spec.features, self.params, strict=True)):
            if isinstance(f, TfIdf):
                register_tfidf(con, udf_name(i), f, p)

    def select_sql(self, rel: str, available: Sequence[str]) -> str:
        """The projection over ``rel``: inputs cast to their fitted types, then features.

        Passthrough columns missing from ``available`` (e.g. ``label`` when serving) are
        left out; a missing feature input fails naming the feature and column.
        """
        have = set(available)
        self._check_inputs(have)
        casts = ", ".join(
            f"CAST({sql_ident(c['name'])} AS {c['type']}) AS {sql_ident(c['name'])}"
            for c in self.input_schema
            if c["name"] in have
        )
        skip = {c for c in self.passthrough if c not in have}
        outs = ", ".join(
            f"{expr} AS {sql_ident(name)}" for name, expr in self._columns if name not in skip
        )
        return f"SELECT {outs} FROM (SELECT {casts} FROM {rel})"

    def _check_inputs(self, have: set[str]) -> None:
        for i, f in enumerate(self.spec.features):
            if f.column not in have:
                raise InvalidInputError(
                    f"{describe(f, i)}: column {f.column!r} missing from the input"
                )

    def transform_table(self, table: pa.Table, engine: str = "auto") -> pa.Table:
        """Apply the fitted transform to an Arrow table (extra columns are ignored).

        Args:
            table: the input rows.
            engine: ``auto`` (NumPy up to :data:`FAST_MAX_ROWS` rows when it is exact for
                these inputs, else DuckDB), ``sql`` (always the DuckDB projection, the
                reference) or ``numpy`` (the compiled evaluator, None-safe: falls back to
                SQL where it is not exact).
        """
        if engine not in ("auto", "sql", "numpy"):
            raise InvalidInputError(f"engine {engine!r}: expected auto, sql or numpy")
        if engine == "numpy" or (engine == "auto" and table.num_rows <= FAST_MAX_ROWS):
            self._check_inputs(set(table.column_names))
            compiled = self._compiled()
            out = compiled(table) if compiled is not None else None
            if out is not None:
                return out
        return self._transform_sql(table)

    def _compiled(self) -> CompiledTransform | None:
        """The NumPy evaluator, compiled on first use (None: this transform needs the SQL)."""
        if not self._fast:
            # Racing threads may both compile; either result is the same evaluator.
            self._fast[:] = [
                compile_transform(self.spec, self.params, self.input_schema, self.passthrough)
            ]
        return self._fast[0]

    def _transform_sql(self, table: pa.Table) -> pa.Table:
        con = self._connection()
        try:
            con.register(_INPUT, table)
            return con.sql(self.select_sql(_INPUT, table.column_names)).to_arrow_table()
        except duckdb.Error as exc:
            raise InvalidInputError(f"cannot transform the input: {first_line(exc)}") from None
        finally:
            con.unregister(_INPUT)

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """The calling thread's connection, with the projection's functions registered once."""
        con: duckdb.DuckDBPyConnection | None = getattr(self._local, "con", None)
        if con is None:
            con = duckdb.connect()
            self.register(con)
            self._local.con = con
        return con

    def transform_records(self, records: Sequence[Mapping[str, Any]]) -> pa.Table:
        """Apply the fitted transform to rows given as dicts."""
        if not records:
            table = pa.table({c["name"]: pa.nulls(0) for c in self.input_schema})
        else:
            try:
                table = pa.Table.from_pylist([dict(r) for r in records])
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise InvalidInputError(f"records: {exc}") from None
        return self.transform_table(table)
