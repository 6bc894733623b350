"""Explanations, fairness and cards of the quickstart churn model (real MLflow, real model)."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aifab.core.errors import InvalidInputError
from aifab.ops import build_card, explain_records, fairness_gate, fairness_report
from aifab.ops.explain.explainers import ShapleyExplainer
from aifab.ops.explain.model import load_tabular


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture
def model(churn_model: dict[str, Any]) -> Any:
    return load_tabular(f"churn@{churn_model['version']}")


def test_contributions_sum_to_the_change_from_the_background(model: Any) -> None:
    out = explain_records(model.ref, model.test_records[:3])
    assert out["model"] == model.ref and len(out["explanations"]) == 3
    for rec, e in zip(model.test_records[:3], out["explanations"], strict=True):
        assert {c["feature"] for c in e["contributions"]} == set(model.columns)
        total = sum(c["contribution"] for c in e["contributions"])
        assert total == pytest.approx(e["value"] - e["base"], abs=1e-9)
        # float32 matmuls differ in the last bits between batch sizes
        assert e["value"] == pytest.approx(float(model.proba([rec]).max()), abs=1e-5)
        sizes = [abs(c["contribution"]) for c in e["contributions"]]
        assert sizes == sorted(sizes, reverse=True)


def test_shapley_values_agree_with_the_shap_library(model: Any) -> None:
    """One background row: our encoded-space coalitions vs shap's Exact on the raw game."""
    import shap

    bg = model.background[:1]
    one = dataclasses.replace(model, background=bg, x_background=model.x_background[:1])
    cols = model.columns
    for rec in model.test_records[:2]:
        ours = ShapleyExplainer().explain(one, [rec])[0]
        target = model.classes.index(ours["label"])

        def game(z: np.ndarray, rec: dict[str, Any] = rec, target: int = target) -> np.ndarray:
            rows = [{c: rec[c] if keep[j] else bg[0][c] for j, c in enumerate(cols)} for keep in z]
            return model.proba(rows)[:, target]

        exact = shap.explainers.Exact(game, shap.maskers.Independent(np.zeros((1, len(cols)))))
        theirs = exact(np.ones((1, len(cols)))).values[0]
        by_feature = {c["feature"]: c["contribution"] for c in ours["contributions"]}
        np.testing.assert_allclose([by_feature[c] for c in cols], theirs, atol=1e-5)


def test_a_feature_equal_to_the_background_gets_nothing(model: Any) -> None:
    bg = model.background[:1]
    one = dataclasses.replace(model, background=bg, x_background=model.x_background[:1])
    rec = {**model.test_records[0], "country": bg[0]["country"], "plan": bg[0]["plan"]}
    e = ShapleyExplainer().explain(one, model.decode([rec]))[0]
    by_feature = {c["feature"]: c["contribution"] for c in e["contributions"]}
    assert by_feature["country"] == pytest.approx(0.0, abs=1e-12)
    assert by_feature["plan"] == pytest.approx(0.0, abs=1e-12)


def test_bad_records_are_named(model: Any) -> None:
    good = model.test_records[0]
    with pytest.raises(InvalidInputError, match="age"):
        explain_records(model.ref, [{**good, "age": "old"}])
    with pytest.raises(InvalidInputError, match="records"):
        explain_records(model.ref, [])
    with pytest.raises(InvalidInputError, match="at most 100"):
        explain_records(model.ref, [good] * 101)
    with pytest.raises(InvalidInputError, match="top"):
        explain_records(model.ref, [good], top=0)
    assert len(explain_records(model.ref, [good], top=2)["explanations"][0]["contributions"]) == 2


def test_fairness_by_group_matches_the_predictions(model: Any) -> None:
    report = fairness_report(model.ref, ["country"])
    assert report["positive"] == "churn"  # the rarer class of the test split
    predicted = np.asarray(model.classes)[model.proba(model.test_records).argmax(axis=1)]
    countries = [r.get("country") for r in model.test_raw]
    groups = {g["group"]: g for g in report["by_group"]}
    assert sum(g["count"] for g in groups.values()) == report["rows"] == len(countries)
    for name, g in groups.items():
        rows = [i for i, c in enumerate(countries) if (c if c is not None else "(missing)") == name]
        assert g["count"] == len(rows)
        assert g["selection_rate"] == pytest.approx(np.mean(predicted[rows] == "churn"))
    kept = [g["selection_rate"] for g in groups.values() if g["count"] >= 5]
    assert report["demographic_parity_difference"] == pytest.approx(max(kept) - min(kept))
    assert report["excluded"] == sorted(n for n, g in groups.items() if g["count"] < 5)
    ok, reasons = fairness_gate(report, max_demographic_parity=1.0, max_equalized_odds=1.0)
    assert ok and not reasons
    ok, reasons = fairness_gate(report, max_demographic_parity=0.0, max_equalized_odds=None)
    assert not ok and reasons[0].startswith("demographic_parity_difference")


def test_fairness_on_another_labelled_dataset(model: Any) -> None:
    from aifab.data.catalog import resolve

    report = fairness_report(model.ref, ["plan"], dataset="customers_labeled@1")
    assert report["data"] == "dataset customers_labeled@1"
    # Every labelled row that decodes as a request: more than the test split alone.
    assert len(model.test_records) < report["rows"] <= resolve("customers_labeled@1").num_rows
    assert {g["group"] for g in report["by_group"]} >= {"basic", "pro"}
    with pytest.raises(InvalidInputError, match="no label column 'label'"):
        fairness_report(model.ref, ["plan"], dataset="customers_raw@1")


def test_fairness_warns_when_the_model_predicts_one_class(
    cli: Callable[..., Any], model: Any, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aifab.data import ingest, lake
    from aifab.data.catalog import resolve

    # One customer, fifteen times, in three countries: the model can only give one answer.
    con = lake.connect()
    one = con.execute(f"SELECT * FROM {resolve('customers_labeled@1').scan_sql()} LIMIT 1")
    table = one.to_arrow_table()
    row = table.to_pylist()[0]
    rows = [{**row, "country": c} for c in ("DE", "FR", "GB") for _ in range(5)]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp_path / "one.parquet")
    ingest("one_customer", str(tmp_path / "one.parquet"))
    report = fairness_report(model.ref, ["country"], dataset="one_customer@1")
    assert report["demographic_parity_difference"] == 0.0
    [warning] = report["warnings"]
    assert "for all 15 rows of dataset one_customer@1" in warning
    args = ("--sensitive", "country", "--dataset", "one_customer@1")
    r = cli("models", "fairness", model.ref, *args)
    assert r.exit_code == 0, r.stderr
    assert "warning: the model predicts" in r.stdout
    assert fairness_report(model.ref, ["country"])["warnings"] == []  # the real test split


def test_fairness_bad_input(model: Any) -> None:
    with pytest.raises(InvalidInputError, match="'religion' not in the rows of the test split"):
        fairness_report(model.ref, ["religion"])
    with pytest.raises(InvalidInputError, match="positive 'maybe'"):
        fairness_report(model.ref, ["country"], positive="maybe")
    with pytest.raises(InvalidInputError, match="sensitive"):
        fairness_report(model.ref, [])


def test_the_card_is_built_from_lineage_escaped_and_attached(model: Any, tmp_path: Path) -> None:
    from aifab.data.catalog import resolve
    from aifab.track.client import get_client
    from aifab.track.registry import resolve_model

    hostile = "<script>alert(1)</script> | not for credit decisions"
    owner = tmp_path / "owner.yaml"
    owner.write_text(
        f"limitations: {json.dumps(hostile)}\nowners: [ml-team]\nsensitive: [country]\n"
    )
    result = build_card(model.ref, owner, intended_use="Rank customers for retention calls")
    card = result["card"]
    (ds,) = card["datasets"]
    assert ds["content_hash"] == resolve(ds["ref"]).content_hash
    assert card["code_version"]["git_commit"] and card["metrics"]["test_accuracy"] > 0.5
    assert card["fairness"]["sensitive"] == ["country"]
    assert card["explanation"]["permutation_importance"][0]["feature"] in model.columns
    md = (Path(result["path"]) / "card.md").read_text()
    page = (Path(result["path"]) / "card.html").read_text()
    assert "Rank customers for retention calls" in md and ds["content_hash"] in md
    assert "<script>" not in md and "<script>" not in page
    assert html.escape("<script>alert(1)</script>") in page
    assert "| country" not in md.split("## Limitations")[1].split("##")[0]  # pipe escaped
    mv = resolve_model(model.ref)
    assert mv["tags"]["aifab.export.card"] == result["artifact_uri"]
    files = {a.path for a in get_client().list_artifacts(mv["run_id"], "exports/card")}
    assert files == {"exports/card/card.md", "exports/card/card.html", "exports/card/card.json"}


def test_cli_card_fairness_explain_and_audit(
    cli: Callable[..., Any], model: Any, tmp_path: Path
) -> None:
    r = cli("models", "card", model.ref, "--no-explain", "--limitations", "small data")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"# Model card: {model.ref}") and "small data" in r.stdout
    assert "<html" in cli("models", "card", model.ref, "--no-explain", "--html").stdout
    r = cli(
        "models", "fairness", model.ref, "--sensitive", "country", "--sensitive", "plan", "--json"
    )
    assert r.exit_code == 0, r.stderr
    assert any(" | " in g["group"] for g in json.loads(r.stdout)["by_group"])
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in model.test_records[:2]) + "\n")
    r = cli("explain", "churn", "--records", records, "--top", "3", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"] == model.ref and len(out["explanations"][1]["contributions"]) == 3
    assert "ticket_text" in cli("explain", model.ref, "--records", records).stdout
    records.write_bytes(b"\xff\xfe junk")
    r = cli("explain", model.ref, "--records", records)
    assert r.exit_code == 2 and r.stderr.startswith("error: ")
    r = cli("audit", "list", "--object", f"model:{model.ref}", "--since", "1h", "--json")
    assert {"model.export"} <= {e["action"] for e in json.loads(r.stdout)}
    assert json.loads(cli("audit", "list", "--actor", "user:nobody", "--json").stdout) == []


def test_pipeline_card_step(model: Any, tmp_path: Path) -> None:
    from aifab.pipeline.runner import run_pipeline

    pipeline = tmp_path / "card.yaml"
    pipeline.write_text(
        "name: cards\nsteps:\n  - name: card\n    uses: card\n    with:\n"
        "      model: churn@champion\n      sensitive: [country]\n      explain: false\n"
    )
    result = run_pipeline(pipeline)
    assert result.ok, [s.error for s in result.steps]
    (step,) = result.steps
    assert (Path(step.outputs["details"]["path"]) / "card.md").is_file()
    again = run_pipeline(pipeline)
    assert again.steps[0].status == "skipped"


def test_broadcast_coalitions_equal_the_per_background_row_path(
    model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records whose columns all have owners take one broadcast; the result is the same."""
    import torch

    import aifab.ops.explain.explainers as explain

    rows = model.test_records[:4]
    fast = ShapleyExplainer().explain(model, rows)
    # Explanations' coalition batches run torch on one thread (robust on busy machines).
    assert torch.get_num_threads() == 1
    monkeypatch.setattr(explain, "_needs_probe", lambda *_: True)
    slow = ShapleyExplainer().explain(model, rows)
    for a, b in zip(fast, slow, strict=True):
        assert a["label"] == b["label"] and a["value"] == b["value"] and a["base"] == b["base"]
        assert [c["contribution"] for c in a["contributions"]] == [
            c["contribution"] for c in b["contributions"]
        ]


def test_a_card_built_on_another_node_has_the_export_figures(model: Any, workspace: Path) -> None:
    """The export's report is read from the version's run (on the store in team mode) when this
    machine has no exports directory: the card used to list the export without its figures."""
    import shutil

    from aifab.inference.export import export_model

    report = export_model(model.ref, "onnx", batch_size=4, repeats=2)
    shutil.rmtree(workspace / "exports")  # another node: only the registry and the store
    (entry,) = [x for x in build_card(model.ref)["card"]["exports"] if x["format"] == "onnx"]
    assert entry["size_ratio"] == report["size_ratio"] and entry["accuracy"] == report["accuracy"]


def test_cli_card_keeps_the_owners_intended_use_when_rebuilt_for_html(
    cli: Callable[..., Any], model: Any
) -> None:
    use = "Weekly churn triage by the retention team"
    r = cli("models", "card", model.ref, "--no-explain", "--intended-use", use)
    assert r.exit_code == 0, r.stderr
    page = cli("models", "card", model.ref, "--no-explain", "--html").stdout
    assert f"<h2>Intended use</h2><p>{use}</p>" in page
    assert (
        f"<h2>Intended use</h2><p>{use}</p>"
        in cli(
            "models", "card", model.ref, "--no-explain", "--html", "--limitations", "small data"
        ).stdout
    )
