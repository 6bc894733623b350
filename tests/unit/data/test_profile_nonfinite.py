"""Profiles of numeric columns holding NaN and ±inf next to finite numbers (issue 10, fault 7)."""

from __future__ import annotations

import math
from pathlib import Path

from aifab.data import lake
from aifab.data.ingest import ingest
from aifab.data.profile import profile_relation


def test_csv_with_nan_and_inf_ingests_and_counts_them(tmp_path: Path) -> None:
    src = tmp_path / "readings.csv"
    src.write_text("sensor,value\na,1.5\nb,nan\nc,inf\nd,-inf\ne,2.5\nf,NaN\n")
    r = ingest("readings", src)
    assert r.rows == 6
    col = r.version.profile["columns"]["value"]
    assert (col["nan_count"], col["posinf_count"] + col["neginf_count"]) == (2, 2)
    assert (col["min"], col["max"], col["mean"]) == (1.5, 2.5, 2.0)
    assert sum(col["histogram"]["counts"]) == 2


def test_every_float_type_and_extreme_ranges(tmp_path: Path) -> None:
    con = lake.connect()
    rel = (
        "(SELECT CAST(v AS FLOAT) AS f, v AS d, w FROM (VALUES "
        "('nan'::DOUBLE, 1e308), ('inf'::DOUBLE, -1e308), (1.0, 0.0), ('-inf'::DOUBLE, NULL)) "
        "AS t(v, w))"
    )
    prof = profile_relation(con, rel)["columns"]
    for name in ("f", "d"):
        col = prof[name]
        infinite = col["posinf_count"] + col["neginf_count"]
        assert (col["nan_count"], infinite, col["min"]) == (1, 2, 1.0)
        assert prof[name]["histogram"]["counts"][0] == 1
    # A finite range wider than DOUBLE's max still gets finite bin edges and all its values.
    w = prof["w"]
    assert (w["nan_count"], w["posinf_count"], w["min"], w["max"]) == (0, 0, -1e308, 1e308)
    assert sum(w["histogram"]["counts"]) == 3
    assert all(math.isfinite(e) for e in w["histogram"]["edges"])
