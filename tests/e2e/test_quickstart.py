"""The quickstart pipeline end to end through the CLI: what it makes, and that reruns skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import yaml

import aifab
from aifab.data import count_quarantine, resolve
from aifab.pipeline import PipelineSpec, load_pipeline

QUICKSTART = Path(aifab.__file__).resolve().parents[2] / "examples" / "quickstart"
CHAIN = [
    ("customers_features", "features"),
    ("customers_split", "split"),
    ("customers_labeled", "label"),
    ("customers_valid", "validate"),
    ("customers_clean", "clean"),
    ("customers_raw", "ingest"),
]


def test_shipped_files_are_valid_and_small() -> None:
    spec = load_pipeline(QUICKSTART / "pipeline.yaml")
    assert isinstance(spec, PipelineSpec)
    assert [s.uses for s in spec.steps] == [
        "ingest",
        "clean",
        "validate",
        "label",
        "split",
        "features",
        "train",
        "register",
        "deploy",
    ]
    data = QUICKSTART / "data" / "customers.csv"
    assert data.stat().st_size < 300_000
    for name in ("clean.yaml", "expectations.yaml", "labeling.yaml", "features.yaml", "train.yaml"):
        assert isinstance(yaml.safe_load((QUICKSTART / name).read_text()), dict)


def test_make_data_reproduces_the_committed_csv() -> None:
    import importlib.util
    import random

    spec = importlib.util.spec_from_file_location("make_data", QUICKSTART / "make_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.render(random.Random(module.SEED))
    assert text == (QUICKSTART / "data" / "customers.csv").read_text(encoding="utf-8")


def _chain_ok() -> None:
    for (child, kind), (parent, _) in zip(CHAIN, CHAIN[1:], strict=False):
        v = resolve(child)
        assert v.transform["kind"] == kind
        assert v.parents == [f"{parent}@1"], child
    assert resolve("customers_raw").transform["kind"] == "ingest"


def test_quickstart_runs_end_to_end_then_skips(cli: Any) -> None:
    r = cli("run", QUICKSTART / "pipeline.yaml", "--json")
    assert r.exit_code == 0, r.stderr
    run = json.loads(r.stdout)
    assert run["status"] == "succeeded"
    assert [s["status"] for s in run["steps"]] == ["succeeded"] * 9
    assert run["steps"][8]["outputs"]["details"]["action"] == "created"

    raw, clean, valid = (
        resolve(n) for n in ("customers_raw", "customers_clean", "customers_valid")
    )
    labeled, split, features = (
        resolve(n) for n in ("customers_labeled", "customers_split", "customers_features")
    )
    # 1041 data lines: 5 short ones padded with nulls (validate quarantines them), 1 too long
    assert raw.num_rows == 1040
    assert '"padded": 5' in json.dumps(raw.transform)
    assert 950 <= clean.num_rows < raw.num_rows  # duplicates and re-entries dropped
    assert 900 <= valid.num_rows < clean.num_rows  # rows breaking a rule quarantined
    assert labeled.num_rows == split.num_rows == features.num_rows == valid.num_rows
    _chain_ok()

    # quarantine: malformed lines at ingest, rule breakers at validate
    assert count_quarantine("customers_raw", stage="ingest") == {"csv.too_many_columns": 1}
    assert set(count_quarantine("customers_clean", stage="validate")) == {
        "age_in_range",
        "valid_email",
        "not_null:email",  # a padded short row has no email
        "known_country",
        "not_null:ticket_text",
    }

    # every row labeled, both classes in every split
    counts = (
        duckdb.connect()
        .execute(f"SELECT split, label, count(*) FROM {features.scan_sql()} GROUP BY ALL")
        .fetchall()
    )
    assert {(s, lab) for s, lab, _ in counts} == {
        (s, lab) for s in ("train", "valid", "test") for lab in ("churn", "stay")
    }
    assert "ticket_tfidf" in features.columns and "plan__basic" in features.columns
    artifact = Path(run["steps"][5]["outputs"]["artifacts"][0])
    assert artifact.is_file() and json.loads(artifact.read_text())

    trained = run["steps"][6]["outputs"]["details"]
    assert trained["metrics"]["test_accuracy"] > 0.7  # a learnable churn label
    from aifab.train.lineage import model_lineage

    lineage = model_lineage("churn@champion")
    assert lineage["run"]["id"] == trained["run_id"]
    assert [d["ref"] for d in lineage["datasets"]] == [split.ref]
    ancestry = {n["ref"] for n in lineage["datasets"][0]["lineage"]["nodes"]}
    assert {"customers_raw@1", "customers_clean@1", split.ref} <= ancestry

    r = cli("demo")  # same pipeline file: nothing changed, so every step is skipped
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("skipped") == 8  # the deploy step always runs (a no-op here)
    assert "deployment churn -> churn@champion, unchanged" in r.stdout
    _check_demo_serving(r.stdout)
    assert f"customers_features@1 ({features.num_rows} rows)" in r.stdout
    assert "quarantined rows" in r.stdout and "csv.too_many_columns" in r.stdout
    assert str(artifact) in r.stdout
    assert "aifab data lineage customers_features" in r.stdout


def _check_demo_serving(stdout: str) -> None:
    """The demo ends with `aifab serve` and a curl command whose key and body really work."""
    import shlex

    from aifab.inference.loading import load_served_model
    from aifab.serve.keys import authenticate

    assert "  aifab serve\n" in stdout
    curl = next(line.strip() for line in stdout.splitlines() if line.strip().startswith("curl "))
    args = shlex.split(curl)
    assert args[2] == "http://127.0.0.1:8000/v1/predict/churn"
    auth = args[args.index("-H") + 1]
    key = authenticate(auth.removeprefix("Authorization: Bearer "))
    assert key is not None and key.role == "client" and key.name == "demo"
    body = json.loads(args[args.index("-d") + 1])
    assert len(body["records"]) == 1
    assert not {"label", "split"} & set(body["records"][0])
    handler = load_served_model("churn@champion").handler
    (prediction,) = handler.predict(handler.decode(body))
    assert prediction["label"] in ("churn", "stay")
    # ...and says where the dashboard is, with a key that may open it.
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "open the dashboard at" in line)
    assert "http://127.0.0.1:8000/ui" in lines[at]
    board = authenticate(lines[at + 1].strip())
    assert board is not None and board.role == "developer"
