"""``engine: ray`` against the DuckDB engine on messy data, on one small local Ray instance
(module-scoped: Ray starts slowly). Equality is checked on the committed content hash (rows,
order and column types), the lineage record and the quarantine."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import commit_query
from aifab.data.clean import clean
from aifab.data.engines import ray_data, ray_stats
from aifab.data.quarantine import list_quarantine

pytestmark = pytest.mark.integration

#: Object store of the test instance, the smallest Ray accepts (a few of its blocks fit).
OBJECT_STORE = 80 * 1024 * 1024

MESSY = """SELECT i % 700 AS id,
  CASE WHEN i % 97 = 0 THEN NULL WHEN i % 89 = 0 THEN 'x' || i
       ELSE CAST((i * 7919) % 1000 AS VARCHAR) END AS age,
  CASE WHEN i % 13 = 0 THEN NULL WHEN i % 501 = 0 THEN 1e9
       ELSE ((i * 104729) % 100003) / 8.0 END AS income,
  CASE WHEN i % 11 = 0 THEN NULL
       ELSE '  Ｍail ' || (i % 300) || '@x.org   call 555-123-4567 card 4111 1111 1111 1111 '
  END AS note,
  CASE WHEN i % 17 = 0 THEN NULL ELSE ['red', 'green', 'blue', 'red'][1 + i % 4] END AS color
FROM range(3000) t(i)"""

STEPS: list[dict[str, Any]] = [
    {"drop_duplicates": {"subset": ["id", "color"]}},
    {"cast": {"columns": {"age": "INTEGER"}}},
    {
        "fill_nulls": {
            "values": {"note": "?"},
            "strategy": {"income": "median", "age": "mean", "color": "mode"},
        }
    },
    {"clip": {"columns": ["income"], "lower_quantile": 0.05, "upper_quantile": 0.95}},
    {"normalize_text": {"columns": ["note"], "lower": True, "unicode": "nfkc"}},
    {"redact_pii": {"columns": ["note"]}},
    {"regex_replace": {"column": "note", "pattern": "mail (\\d+)", "replacement": "m\\1"}},
    {"drop_near_duplicates": {"column": "note", "threshold": 0.9}},
    {"filter": {"where": "age >= 10"}},
    {"drop_nulls": {"columns": ["color"]}},
    {"rename": {"columns": {"note": "text"}}},
]


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(
        num_cpus=2,
        object_store_memory=OBJECT_STORE,
        include_dashboard=False,
        log_to_driver=False,
        namespace="aifab-data",
    )
    yield ray
    ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 400 rows, so a 3000-row table is spread over eight blocks."""
    monkeypatch.setattr(ray_data, "BLOCK_ROWS", 400)


def test_ray_engine_equals_duckdb_on_messy_data(ray_local: Any, small_blocks: None) -> None:
    commit_query("raw", MESSY, source="test", transform={"kind": "test"})
    duck = clean("raw", {"steps": STEPS, "stats": True}, output="by_duckdb").version
    ray_v = clean("raw", {"steps": STEPS, "stats": True, "engine": "ray"}, output="by_ray").version
    # Same rows, order and column types (the hash covers all three).
    assert ray_v.content_hash == duck.content_hash and ray_v.num_rows == duck.num_rows > 0
    assert ray_v.schema == duck.schema
    # Same lineage: parent, source and per-step record (statistics, row counts, bounds).
    assert ray_v.parents == duck.parents == ["raw@1"] and ray_v.source == duck.source
    assert ray_v.transform["steps"] == duck.transform["steps"]
    assert ray_v.transform["spec"] == {**duck.transform["spec"], "engine": "ray"}
    # Same quarantine rows and reasons, once per run, under the input dataset.
    items = list_quarantine("raw", stage="clean", limit=10_000)
    assert len(items) % 2 == 0 and items
    half = len(items) // 2
    key = [(i["rule"], i["reason"], i["line"], i["record"], i["version_id"]) for i in items]
    assert sorted(key[:half], key=str) == sorted(key[half:], key=str)


def test_ray_data_keeps_its_own_logs_out_of_the_users_output(
    ray_local: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    commit_query("quiet", "SELECT i AS id FROM range(50) t(i)", source="test", transform={})
    capfd.readouterr()
    clean("quiet", {"steps": [{"filter": {"where": "id > 3"}}], "engine": "ray"}, output="q2")
    err = capfd.readouterr().err
    # Ray Data logged every execution plan at INFO (37 lines for a 1,000-row pipeline).
    noise = [line for line in err.splitlines() if "streaming_executor" in line or " INFO " in line]
    assert noise == [], noise[:5]
    assert "Progress bars disabled" not in err


def test_ray_engine_rejects_bad_input_like_duckdb(ray_local: Any) -> None:
    commit_query("raw", MESSY, source="test", transform={"kind": "test"})
    for steps in (
        [{"fill_nulls": {"strategy": {"nope": "mean"}}}],
        [{"clip": {"columns": ["note"], "lower": 0}}],
        [{"filter": {"where": "read_csv('/etc/passwd') IS NOT NULL"}}],
        [{"cast": {"columns": {"age": "NOTATYPE"}}}],
    ):
        messages = []
        for engine in ("duckdb", "ray"):
            with pytest.raises(InvalidInputError) as err:
                clean("raw", {"steps": steps, "engine": engine}, output="out")
            messages.append(str(err.value))
        assert messages[0] == messages[1]


@pytest.mark.parametrize(
    "values",
    [
        "SELECT (i * 7919) % 10007 / 3.0 AS v FROM range(5000) t(i)",  # spread out
        "SELECT CASE WHEN i % 50 = 0 THEN 1e12 ELSE i % 7 END AS v FROM range(5000) t(i)",  # ties
        "SELECT CASE WHEN i % 3 = 0 THEN NULL ELSE exp(i / 400.0) END AS v FROM range(5000) t(i)",
        "SELECT CAST(i % 2 AS BIGINT) AS v FROM range(5001) t(i)",
        "SELECT CAST(NULL AS DOUBLE) AS v FROM range(10) t(i)",
    ],
)
def test_quantiles_are_exact(
    ray_local: Any, small_blocks: None, monkeypatch: pytest.MonkeyPatch, values: str
) -> None:
    """Exact, not sketched. Stated tolerance: one ulp for quantiles and medians (DuckDB's
    interpolation rounds as its compiler fuses it; we emulate this build's fused form and
    match it to the bit here), 1e-12 relative for means (the engines sum in other orders)."""
    # A bin is refined, not gathered, past 64 values: the refinement passes run too.
    monkeypatch.setattr(ray_stats, "GATHER_MAX", 64)
    v = commit_query("q", values, source="test", transform={"kind": "test"}).version
    ds, _ = ray_data.read_version(v, "__aifab_rn")
    qs = [0.0, 0.01, 0.25, 0.5, 0.77, 0.99, 1.0]
    got = ray_stats.quantiles(ds, "v", qs)
    con = duckdb.connect()
    want = con.execute(f"SELECT quantile_cont(v, {qs}), avg(v) FROM {v.scan_sql()}").fetchone()
    assert want is not None
    if want[0] is None:
        assert got == [None] * len(qs)
    else:
        assert [abs(g - w) <= math.ulp(w) for g, w in zip(got, want[0], strict=True)] == [True] * 7
    mean = ray_stats.mean(ds, "v")
    if want[1] is None:
        assert mean is None
    else:
        assert mean is not None and math.isclose(mean, want[1], rel_tol=1e-12)


FEATURE_ROWS = """SELECT i AS id,
  CASE WHEN i % 19 = 0 THEN NULL WHEN i % 97 = 0 THEN 'inf'::DOUBLE
       ELSE ((i * 7919) % 1009) / 3.0 END AS amount,
  ['us', 'de', 'fr', 'us', 'jp', NULL][1 + i % 6] AS country,
  TIMESTAMP '2030-01-01' + INTERVAL (i) HOUR AS ts,
  ['red fox', 'lazy dog', 'quick red fox', NULL][1 + i % 4] AS text,
  CASE WHEN i % 5 = 0 THEN 'test' ELSE 'train' END AS split,
  ['a', 'b'][1 + i % 2] AS label
FROM range(3000) t(i)"""

FEATURES = {
    "features": [
        {"transform": "standardize", "column": "amount", "name": "amount_z"},
        {"transform": "minmax", "column": "amount", "name": "amount_mm"},
        {"transform": "log1p", "column": "amount", "name": "amount_log"},
        {"transform": "onehot", "column": "country", "max_categories": 3},
        {"transform": "categorical", "column": "country", "name": "country_code"},
        {"transform": "hash", "column": "country", "name": "country_h", "buckets": 8},
        {"transform": "bucketize", "column": "amount", "name": "b", "boundaries": [2.0, 99.0]},
        {"transform": "date_parts", "column": "ts", "parts": ["year", "dayofweek", "hour"]},
        {"transform": "tfidf", "column": "text", "name": "text_tfidf", "max_features": 4},
    ],
    "passthrough": ["id", "label", "split"],
}


def test_ray_features_equal_duckdb(ray_local: Any, small_blocks: None) -> None:
    """Same transform shape and categories; mean/std within 1e-12 relative (exact sums vs
    DuckDB's streaming avg/stddev_pop), hence feature values within 1e-9."""
    import numpy as np

    from aifab.data.features import fit_features, load_feature_transform

    commit_query("f", FEATURE_ROWS, source="test", transform={"kind": "test"})
    duck = fit_features("f", FEATURES, output="f_duck")
    ray_r = fit_features("f", {**FEATURES, "engine": "ray"}, output="f_ray")
    d, r = duck.transform, ray_r.transform
    assert r.input_schema == d.input_schema and r.train_rows == d.train_rows
    assert r.spec == d.spec.model_copy(update={"engine": "ray"})
    assert r.spec.model_dump() == d.spec.model_dump()  # the engine is not in the artifact
    for pd_, pr in zip(d.params, r.params, strict=True):
        assert pd_.keys() == pr.keys()
        for k, want in pd_.items():
            if isinstance(want, float):
                assert math.isclose(pr[k], want, rel_tol=1e-12), k
            else:
                assert pr[k] == want, k
    assert load_feature_transform(ray_r.artifact_path).params == r.params
    dv, rv = duck.version, ray_r.version
    assert rv.schema == dv.schema and rv.num_rows == dv.num_rows and rv.parents == dv.parents
    con = duckdb.connect()
    a = con.execute(f"SELECT * FROM {dv.scan_sql()}").fetchall()
    b = con.execute(f"SELECT * FROM {rv.scan_sql()}").fetchall()
    for ra, rb in zip(a, b, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float):
                assert np.isclose(x, y, rtol=1e-9, equal_nan=True)
            else:
                assert x == y


BIG = """SELECT i AS id,
  CASE WHEN i % 23 = 0 THEN NULL ELSE ((i * 104729) % 1000003) / 7.0 END AS x,
  '  Row ' || i || '   of the table that is four times the object store ' || (i % 977) AS text
FROM range({rows}) t(i)"""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 4M rows through both engines; the machine may be shared
def test_ray_engine_streams_a_table_four_times_its_object_store(ray_local: Any) -> None:
    """Bounded memory: the table is 4x the instance's object store; it streams (and Ray spills
    what a statistics pass keeps), and the result still equals the DuckDB engine's."""
    import pyarrow.parquet as pq

    from aifab.data import lake

    v = commit_query("big", BIG.format(rows=4_000_000), source="t", transform={"kind": "t"})
    meta = [pq.read_metadata(lake.object_path(k)) for k in v.version.objects]
    size = sum(m.row_group(i).total_byte_size for m in meta for i in range(m.num_row_groups))
    assert size >= 4 * OBJECT_STORE
    steps = [
        {"fill_nulls": {"strategy": {"x": "median"}}},
        {"clip": {"columns": ["x"], "lower_quantile": 0.01, "upper_quantile": 0.99}},
        {"filter": {"where": "id % 10 <> 3"}},
        {"normalize_text": {"columns": ["text"], "lower": True}},
    ]
    ray_v = clean("big", {"steps": steps, "engine": "ray"}, output="big_ray").version
    duck = clean("big", {"steps": steps}, output="big_duckdb").version
    assert ray_v.content_hash == duck.content_hash and ray_v.num_rows == duck.num_rows


def test_pipeline_steps_choose_the_ray_engine(ray_local: Any, tmp_path: Any) -> None:
    """``engine: ray`` in a pipeline step's spec: clean + features run on Ray."""
    import json

    from aifab.data.catalog import resolve
    from aifab.pipeline.runner import run_pipeline

    commit_query("f", FEATURE_ROWS, source="test", transform={"kind": "test"})
    clean_spec = {"engine": "ray", "steps": [{"fill_nulls": {"strategy": {"amount": "median"}}}]}
    features = {**FEATURES, "engine": "ray"}
    steps = [
        {
            "name": "clean",
            "uses": "clean",
            "with": {"input": "f", "output": "fc", "spec": clean_spec},
        },
        {
            "name": "feats",
            "uses": "features",
            "with": {"input": "fc", "output": "ff", "spec": features},
        },
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps({"name": "on-ray", "steps": steps}))  # JSON is YAML
    result = run_pipeline(path)
    assert result.ok, result.to_dict()
    duck = clean("f", {"steps": clean_spec["steps"]}, output="fc_duckdb").version
    assert resolve("fc").content_hash == duck.content_hash
    assert resolve("fc").transform["spec"]["engine"] == "ray"
    assert resolve("ff").transform["kind"] == "features" and resolve("ff").parents == ["fc@1"]


SUITE: dict[str, Any] = {
    "expectations": [
        {"not_null": {"columns": ["age", "color"]}},
        {"between": {"column": "income", "min": 0, "max": 12000}},
        {"in_set": {"column": "color", "values": ["red", "green"], "level": "warn"}},
        {"regex": {"column": "note", "pattern": ".*@x\\.org.*"}},
        {"unique": {"columns": ["id", "color"]}},
        {"sql": {"where": "length(coalesce(note, '')) < 70 OR id % 2 = 0"}},
        {"row_count": {"min": 10}},
        {"sql": {"assert": "SELECT count(DISTINCT color) <= 3 FROM data"}},
    ],
    "max_failure_share": 1.0,
    "examples": 3,
}


def _quarantined(dataset: str, stage: str) -> list[tuple[Any, ...]]:
    items = list_quarantine(dataset, stage=stage, limit=100_000)
    return sorted(((i["rule"], i["reason"], i["line"], str(i["record"])) for i in items), key=str)


def test_ray_validate_equals_duckdb_on_messy_data(ray_local: Any, small_blocks: None) -> None:
    """Row rules per block, ``unique`` on a shuffle, dataset rules on the driver: the same
    report, passing rows (content hash), lineage record and quarantine as DuckDB's."""
    from aifab.data.validate import validate

    commit_query("vraw", MESSY, source="test", transform={"kind": "test"})
    duck = validate("vraw", SUITE, output="v_duck")
    before = _quarantined("vraw", "validate")
    ray_r = validate("vraw", {**SUITE, "engine": "ray"}, output="v_ray")
    assert duck.version is not None and ray_r.version is not None
    assert duck.failed_rows > 0 and duck.warned_rows > 0
    d, r = duck.to_dict(), ray_r.to_dict()
    assert {**r, "version": None} == {**d, "version": None}
    assert ray_r.version.content_hash == duck.version.content_hash
    assert ray_r.version.parents == duck.version.parents == ["vraw@1"]
    assert ray_r.version.transform == duck.version.transform
    assert _quarantined("v_ray", "validate") == _quarantined("v_duck", "validate") == before
    # A failing run fails the same way and commits nothing on either engine.
    strict = {**SUITE, "max_failure_share": 0.0}
    reasons = []
    for engine in ("duckdb", "ray"):
        failed = validate("vraw", {**strict, "engine": engine}, output="never")
        assert not failed.passed and failed.version is None
        reasons.append(failed.reasons)
    assert reasons[0] == reasons[1] and reasons[0][0].startswith(f"{duck.failed_rows} of")


@pytest.mark.parametrize(
    "spec",
    [
        {"seed": 11},
        {
            "method": "stratified",
            "by": "color",
            "seed": 5,
            "fractions": {"train": 0.6, "valid": 0.25, "test": 0.15},
        },
        {"fractions": {"train": 1.0, "valid": 0.0, "test": 0.0}},
    ],
)
def test_ray_split_equals_duckdb(
    ray_local: Any, small_blocks: None, monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]
) -> None:
    """Hash ranks by distributed selection: the same rows in the same splits, same record.

    Fewer hash bins here, so several rows share the bins the cuts fall in.
    """
    from aifab.data.engines import ray_split
    from aifab.data.splits import split

    monkeypatch.setattr(ray_split, "_SHIFT", 60)
    raw = commit_query("sraw", MESSY, source="test", transform={"kind": "test"}).version
    duck = split(raw.ref, spec, output="s_duck").version
    ray_v = split(raw.ref, {**spec, "engine": "ray"}, output="s_ray").version
    assert ray_v.content_hash == duck.content_hash and ray_v.schema == duck.schema
    assert ray_v.transform == duck.transform and ray_v.parents == duck.parents == [raw.ref]


def test_ray_split_refuses_what_duckdb_refuses(ray_local: Any) -> None:
    from aifab.data.splits import split

    commit_query("one", "SELECT i, i AS c FROM range(5) t(i)", source="t", transform={"kind": "t"})
    messages = []
    for engine in ("duckdb", "ray"):
        with pytest.raises(InvalidInputError) as err:
            split("one", {"method": "stratified", "by": "c", "engine": engine}, output="o")
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "only one row" in messages[0]
    with pytest.raises(InvalidInputError, match="'time' runs on the duckdb engine only"):
        split("one", {"method": "time", "by": "c", "engine": "ray"}, output="o")


def test_a_pipeline_engine_runs_its_data_steps_on_ray(ray_local: Any, tmp_path: Any) -> None:
    """``engine: ray`` on the pipeline: clean, validate and split run on Ray (a step's own
    ``engine: duckdb`` wins) and every version equals the one of the same pipeline on DuckDB."""
    import json

    from aifab.data.catalog import resolve
    from aifab.pipeline.runner import run_pipeline

    commit_query("praw", MESSY, source="test", transform={"kind": "test"})
    suite = {**SUITE, "max_failure_share": 1.0}
    split_spec = {"method": "stratified", "by": "color", "seed": 3}
    features = {"features": [{"transform": "standardize", "column": "income"}], "engine": "duckdb"}

    def steps(prefix: str) -> list[dict[str, Any]]:
        return [
            {
                "name": "clean",
                "uses": "clean",
                "with": {"input": "praw", "output": f"{prefix}c", "spec": {"steps": STEPS[:4]}},
            },
            {
                "name": "validate",
                "uses": "validate",
                "with": {"input": f"{prefix}c", "output": f"{prefix}v", "spec": suite},
            },
            {
                "name": "split",
                "uses": "split",
                "with": {"input": f"{prefix}v", "output": f"{prefix}s", "spec": split_spec},
            },
            {
                "name": "feats",
                "uses": "features",
                "with": {"input": f"{prefix}s", "output": f"{prefix}f", "spec": features},
            },
        ]

    for name, engine, prefix in (("on-ray", "ray", "r_"), ("on-duckdb", None, "d_")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(json.dumps({"name": name, "engine": engine, "steps": steps(prefix)}))
        result = run_pipeline(path)
        assert result.ok, result.to_dict()
    assert resolve("r_c").transform["spec"]["engine"] == "ray"  # inherited from the pipeline
    assert "engine" not in resolve("d_c").transform["spec"]
    for suffix in ("c", "v", "s", "f"):
        r, d = resolve(f"r_{suffix}"), resolve(f"d_{suffix}")
        assert r.content_hash == d.content_hash and r.num_rows == d.num_rows > 0, suffix
    assert resolve("r_s").transform == resolve("d_s").transform


LABELS: dict[str, Any] = {
    "key": "id",
    "text_column": "note",
    "functions": [
        {"name": "mail", "label": "contact", "keyword": {"column": "note", "words": ["mail"]}},
        {"name": "card", "label": "payment", "regex": {"column": "note", "pattern": "card \\d+"}},
        {"name": "rich", "label": "payment", "weight": 0.5, "sql": "income > 5000"},
        {"name": "red", "label": "contact", "weight": 2.0, "sql": "color = 'red'"},
    ],
}


def test_ray_label_equals_duckdb(ray_local: Any, small_blocks: None) -> None:
    """Labeling functions per block, human labels sent to every block, statistics summed."""
    from aifab.data.label import label, submit_label

    raw = commit_query("lraw", MESSY, source="test", transform={"kind": "test"}).version
    submit_label("lraw", "5", "human-says")
    submit_label("lraw", "650", "other")
    duck = label(raw.ref, LABELS, output="l_duck").version
    ray_v = label(raw.ref, {**LABELS, "engine": "ray"}, output="l_ray").version
    assert ray_v.content_hash == duck.content_hash and ray_v.schema == duck.schema
    assert ray_v.transform == duck.transform and ray_v.parents == duck.parents == [raw.ref]
    assert duck.transform["stats"]["human"] > 0 and duck.transform["stats"]["covered"] > 0
    bad = {**LABELS, "functions": [{"name": "x", "label": "y", "sql": "nope > 1"}]}
    messages = []
    for engine in ("duckdb", "ray"):
        with pytest.raises(InvalidInputError) as err:
            label(raw.ref, {**bad, "engine": engine}, output="never")
        messages.append(str(err.value))
    assert messages[0] == messages[1]
