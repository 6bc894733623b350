from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.catalog import VersionInfo, commit_query, resolve
from aifab.data.features import FeatureTransform, fit_features, load_feature_transform

# Train rows: amount 1..4, country US x2 / FR / DE, dates in 2024. Test rows carry extreme
# values (amount 1e6, country ZZ three times) that must not leak into the fit.
ROWS = """
(1, 1.0, 'US', TIMESTAMP '2024-03-05 10:30', 'the cat sat', 'train', 'a'),
(2, 2.0, 'US', TIMESTAMP '2024-03-06 23:00', 'the dog sat', 'train', 'b'),
(3, 3.0, 'FR', TIMESTAMP '2024-12-31 00:00', 'a cat and a dog', 'train', 'a'),
(4, 4.0, 'DE', TIMESTAMP '2024-01-01 05:00', 'cat cat cat', 'train', 'b'),
(5, 1000000.0, 'ZZ', TIMESTAMP '2030-01-01 00:00', 'zebra zebra', 'test', 'a'),
(6, 1000000.0, 'ZZ', TIMESTAMP '2030-01-02 00:00', 'zebra', 'test', 'b'),
(7, NULL, 'ZZ', NULL, NULL, 'valid', 'a')
"""
COLUMNS = "id, amount, country, ts, text, split, label"

SPEC = {
    "features": [
        {"transform": "standardize", "column": "amount", "name": "amount_z"},
        {"transform": "minmax", "column": "amount", "name": "amount_mm"},
        {"transform": "log1p", "column": "amount", "name": "amount_log"},
        {"transform": "onehot", "column": "country", "max_categories": 2},
        {"transform": "categorical", "column": "country", "name": "country_code"},
        {"transform": "hash", "column": "country", "name": "country_h", "buckets": 8},
        {
            "transform": "bucketize",
            "column": "amount",
            "name": "amount_b",
            "boundaries": [2.0, 3.5, 100.0],
        },
        {
            "transform": "date_parts",
            "column": "ts",
            "parts": ["year", "month", "day", "dayofweek", "hour"],
        },
        {"transform": "tfidf", "column": "text", "name": "text_tfidf", "max_features": 4},
    ],
    "passthrough": ["id", "label", "split"],
}


def _data(name: str = "ds", rows: str = ROWS, columns: str = COLUMNS) -> VersionInfo:
    return commit_query(
        name,
        f"SELECT * FROM (VALUES {rows}) t({columns})",
        source="test",
        transform={"kind": "test"},
    ).version


def _table(v: VersionInfo) -> dict[str, list]:
    return duckdb.sql(f"SELECT * FROM {v.scan_sql()}").to_arrow_table().to_pydict()


def test_fit_uses_train_rows_only_and_standardizes() -> None:
    _data()
    result = fit_features("ds", SPEC)
    ft, out = result.transform, _table(result.version)
    assert ft.fitted_on_all_rows is False and ft.train_rows == 4
    assert ft.params[0] == {"mean": 2.5, "std": pytest.approx(np.std([1, 2, 3, 4]))}
    z = np.array(out["amount_z"][:4])
    assert abs(z.mean()) < 1e-12 and z.std() == pytest.approx(1.0)
    assert out["amount_mm"][:4] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert ft.params[1] == {"min": 1.0, "max": 4.0}  # not 1e6 from the test rows
    assert out["amount_log"][0] == pytest.approx(np.log1p(1.0))
    assert out["amount_z"][6] is None


def test_onehot_and_categorical_unknown_bucket() -> None:
    _data()
    out = _table(fit_features("ds", SPEC).version)
    # ZZ is the most frequent value overall but appears only in test rows
    assert [k for k in out if k.startswith("country__")] == [
        "country__US",
        "country__DE",
        "country__unknown",
    ]
    assert out["country__US"] == [1, 1, 0, 0, 0, 0, 0]
    assert out["country__DE"] == [0, 0, 0, 1, 0, 0, 0]
    assert out["country__unknown"] == [0, 0, 1, 0, 1, 1, 1]
    assert out["country_code"] == [1, 1, 3, 2, 0, 0, 0]  # US, DE, FR by frequency then value


def test_bucketize_hash_and_date_parts() -> None:
    _data()
    out = _table(fit_features("ds", SPEC).version)
    assert out["amount_b"] == [0, 1, 1, 2, 3, 3, None]  # 2.0 is in bucket 1: [2.0, 3.5)
    h = out["country_h"]
    assert all(0 <= x < 8 for x in h) and h[0] == h[1] and h[4] == h[5] == h[6]
    assert out["ts__year"][:4] == [2024] * 4
    assert out["ts__month"][:4] == [3, 3, 12, 1]
    assert out["ts__day"][:4] == [5, 6, 31, 1]
    assert out["ts__dayofweek"][:4] == [2, 3, 2, 1]  # 0 = Sunday
    assert out["ts__hour"][:4] == [10, 23, 0, 5]


def test_tfidf_shape_and_values_match_sklearn() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    _data()
    result = fit_features("ds", SPEC)
    vectors = np.array(_table(result.version)["text_tfidf"])
    assert vectors.shape == (7, 4)
    ref = TfidfVectorizer(max_features=4).fit(
        ["the cat sat", "the dog sat", "a cat and a dog", "cat cat cat"]
    )
    assert result.transform.params[8]["vocabulary"] == ref.get_feature_names_out().tolist()
    expected = ref.transform(["the cat sat", "zebra"]).toarray()
    assert np.allclose(vectors[[0, 5]], expected)
    assert np.allclose(np.linalg.norm(vectors[:4], axis=1), 1.0)
    assert vectors[6].tolist() == [0.0] * 4  # NULL text -> an empty document


def test_serving_matches_the_committed_features_bit_for_bit() -> None:
    src = _data()
    result = fit_features("ds", SPEC)
    committed = duckdb.sql(f"SELECT * FROM {result.version.scan_sql()}").to_arrow_table()
    raw = duckdb.sql(f"SELECT * FROM {src.scan_sql()}").to_arrow_table()
    ft = load_feature_transform(result.artifact_path)
    served = ft.transform_table(raw)
    assert served.schema == committed.schema
    assert served.to_pylist() == committed.to_pylist()
    records = ft.transform_records(raw.to_pylist())
    assert records.to_pylist() == committed.to_pylist()
    # serving rows have no label/split: those passthrough columns are left out
    one = ft.transform_records(
        [{"id": 9, "amount": 2, "country": "XX", "ts": "2024-03-05", "text": "cat"}]
    ).to_pylist()[0]
    assert "label" not in one and one["amount_z"] == pytest.approx((2 - 2.5) / np.std([1, 2, 3, 4]))
    assert one["country__unknown"] == 1 and one["country_code"] == 0


def test_transform_reuses_one_connection_per_thread() -> None:
    src = _data()
    ft = fit_features("ds", SPEC).transform
    raw = duckdb.sql(f"SELECT * FROM {src.scan_sql()}").to_arrow_table()
    first = ft.transform_table(raw, engine="sql")  # the DuckDB path and its connections
    con = ft._local.con
    assert ft.transform_table(raw, engine="sql").to_pylist() == first.to_pylist()
    assert ft._local.con is con  # UDFs registered once, not per call
    seen: list = []
    worker = threading.Thread(
        target=lambda: seen.append((ft.transform_table(raw, engine="sql"), ft._local.con))
    )
    worker.start()
    worker.join()
    assert seen[0][0].to_pylist() == first.to_pylist() and seen[0][1] is not con
    copied = pickle.loads(pickle.dumps(ft))
    assert copied == ft
    assert copied.transform_table(raw, engine="sql").to_pylist() == first.to_pylist()
    assert copied._local.con is not con


def test_artifact_registry_and_loading() -> None:
    src = _data()
    result = fit_features("ds", SPEC)
    path = result.artifact_path
    assert path.parent.name == "features" and path.name == f"{result.transform.digest}.json"
    art = json.loads(path.read_text())
    assert art["fitted_on"]["ref"] == src.ref and art["fitted_on_all_rows"] is False
    assert art["output"] == "ds.features@1"
    assert {c["name"] for c in art["input_schema"]} == {
        "id",
        "label",
        "split",
        "amount",
        "country",
        "ts",
        "text",
    }
    assert result.version.dataset == "ds.features"
    assert result.version.parents == [src.ref]
    assert result.version.transform["feature_set"] == result.transform.digest
    by_prefix = load_feature_transform(result.transform.digest[:10])
    by_name = load_feature_transform("ds.features")
    assert by_prefix.digest == by_name.digest == FeatureTransform.load(path).digest
    with session_scope() as s:
        assert [e.object for e in list_events(s, action="features.fit")] == [
            "feature_set:ds.features"
        ]
    again = fit_features("ds", SPEC)  # same data and spec: same artifact, same version
    assert again.version.id == result.version.id and again.artifact_path == path
    with pytest.raises(NotFoundError):
        load_feature_transform("nope")


def test_without_split_column_fits_on_all_rows() -> None:
    _data("plain", "(1, 1.0), (2, 3.0)", "id, x")
    result = fit_features(
        "plain", {"features": [{"transform": "standardize", "column": "x"}]}, output="plain_feats"
    )
    assert result.transform.fitted_on_all_rows is True
    assert result.transform.train_rows == 2
    assert _table(result.version) == {"x": [-1.0, 1.0]}  # no split/label: nothing passed through


@pytest.mark.parametrize(
    ("feature", "message"),
    [
        (
            {"transform": "standardize", "column": "nope"},
            "feature 0 'nope' (standardize): column 'nope' not found",
        ),
        (
            {"transform": "log1p", "column": "country"},
            "feature 0 'country' (log1p): column 'country' has type VARCHAR",
        ),
        ({"transform": "date_parts", "column": "amount"}, "needs a temporal column"),
        (
            {"transform": "bucketize", "column": "amount", "boundaries": [3, 1]},
            "strictly increasing",
        ),
        ({"transform": "scale", "column": "amount"}, "does not match any of the expected tags"),
        ({"transform": "hash", "column": "amount", "bucket": 3}, "bucket: unknown key"),
    ],
)
def test_bad_features_are_named(feature: dict, message: str) -> None:
    _data()
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fit_features("ds", {"features": [feature]})


def test_clashing_outputs_and_missing_train_rows() -> None:
    _data()
    spec = {
        "features": [
            {"transform": "standardize", "column": "amount"},
            {"transform": "log1p", "column": "amount"},
        ]
    }
    with pytest.raises(InvalidInputError, match="output column 'amount' is also made by"):
        fit_features("ds", spec)
    with pytest.raises(InvalidInputError, match="passthrough: column 'user' not found"):
        fit_features("ds", {**spec, "features": spec["features"][:1], "passthrough": ["user"]})
    with pytest.raises(InvalidInputError, match="no row has split = 'training'"):
        fit_features("ds", {"features": spec["features"][:1], "train_value": "training"})
    ft = fit_features("ds", {"features": spec["features"][:1]}).transform
    with pytest.raises(InvalidInputError, match="column 'amount' missing from the input"):
        ft.transform_records([{"id": 1}])


def test_cli_features(cli, tmp_path: Path) -> None:
    _data()
    spec = tmp_path / "features.yaml"
    spec.write_text(json.dumps(SPEC))
    r = cli("data", "features", "ds", "-f", spec, "--output", "feats", "--json")
    assert r.exit_code == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["version"] == "feats@1" and body["train_rows"] == 4
    assert Path(body["artifact"]).is_file()
    r = cli("data", "feature-sets", "--json")
    assert [(s["name"], s["fitted_on"]) for s in json.loads(r.stdout)] == [("feats", "ds@1")]
    r = cli("data", "feature-sets")
    assert r.exit_code == 0 and "feats" in r.stdout
    assert resolve("feats").num_rows == 7


def test_cli_features_bad_input(cli, tmp_path: Path) -> None:
    _data()
    spec = tmp_path / "features.yaml"
    spec.write_text("features:\n  - {transform: log1p, column: text}\n")
    r = cli("data", "features", "ds", "-f", spec)
    assert r.exit_code == 2
    assert "(log1p): column 'text' has type VARCHAR" in r.stderr
    spec.write_text("features:\n  - {transform: minmax, column: amount}\npassthru: [id]\n")
    r = cli("data", "features", "ds", "-f", spec)
    assert r.exit_code == 2 and "passthru: unknown key" in r.stderr
