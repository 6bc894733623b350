"""Filtered link-prediction metrics, the kge recipe on PyKEEN's Nations (quality bar, saved model,
registry, exact resume) and its bad-input errors. One workspace (and MLflow DB) per module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from aifab.core.errors import InvalidInputError
from aifab.data import commit_query, ingest
from aifab.train.kge_eval import evaluate_link_prediction, link_prediction_ranks

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "kg"
FAST = {"system_metrics": False, "threads": 1, "progress": False}


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    """Overrides the per-test workspace: every test here shares one."""
    return module_workspace


# ---- metrics ---------------------------------------------------------------------------------

#: score[h][t] for the single relation 0 of a 4-entity graph (higher = more plausible).
TABLE = torch.tensor(
    [
        [0.0, 5.0, 4.0, 4.0],
        [1.0, 0.0, 3.0, 2.0],
        [2.0, 2.0, 0.0, 2.0],
        [9.0, 1.0, 1.0, 0.0],
    ]
)


def table_score(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    h, r, t = torch.broadcast_tensors(h, r, t)
    return TABLE[h, t]


def test_ranks_are_filtered_and_ties_count_half() -> None:
    test = torch.tensor([[0, 0, 2]])
    # Tail query (0, r, ?): scores 0, 5, 4, 4 -> entity 1 is better, entity 3 ties (half).
    # Head query (?, r, 2): scores 4, 3, 0, 1 -> the target, entity 0, is best.
    assert link_prediction_ranks(table_score, test, test, 4).tolist() == [2.5, 1.0]
    # With (0, r, 1) known true too, entity 1 leaves the tail ranking.
    known = torch.cat([test, torch.tensor([[0, 0, 1]])])
    assert link_prediction_ranks(table_score, test, known, 4).tolist() == [1.5, 1.0]
    # Head query (?, r, 2) for entity 1 (score 3): entity 0 (score 4) beats it unless known.
    one = torch.tensor([[1, 0, 2]])
    assert link_prediction_ranks(table_score, one, one, 4).tolist() == [1.0, 2.0]
    both = torch.cat([one, test])
    assert link_prediction_ranks(table_score, one, both, 4).tolist() == [1.0, 1.0]


def test_metrics_from_ranks() -> None:
    test = torch.tensor([[0, 0, 1], [3, 0, 0]])
    metrics = evaluate_link_prediction(table_score, test, test, 4, prefix="test_")
    ranks = link_prediction_ranks(table_score, test, test, 4)
    assert metrics["test_mrr"] == pytest.approx(float((1 / ranks).mean()))
    assert metrics["test_hits_at_1"] == pytest.approx(float((ranks <= 1).double().mean()))
    assert set(metrics) == {"test_mrr", "test_hits_at_1", "test_hits_at_3", "test_hits_at_10"}
    assert metrics["test_hits_at_10"] == 1.0  # 4 entities: every rank is within 10


def test_perfect_scores_give_mrr_one() -> None:
    triples = torch.tensor([[0, 0, 1], [1, 0, 2], [2, 0, 3]])
    truth = torch.zeros(4, 4)
    truth[triples[:, 0], triples[:, 2]] = 1.0

    def oracle(h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h, r, t = torch.broadcast_tensors(h, r, t)
        return truth[h, t]

    assert evaluate_link_prediction(oracle, triples, triples, 4)["mrr"] == 1.0


# ---- the recipe ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nations(module_workspace: Path) -> str:
    return ingest("nations", str(EXAMPLES / "data" / "nations.csv")).version.ref


@pytest.fixture(scope="module")
def rotate(nations: str) -> dict[str, Any]:
    from aifab.train.recipes.kge import main

    return main(
        {
            "dataset": nations,
            "model": {"name": "rotate", "config": {"dim": 64}},
            "epochs": 60,
            "lr": 0.05,
            "register": "nations-rotate",
            **FAST,
        }
    )


def test_rotate_on_nations_reaches_filtered_mrr(rotate: dict[str, Any]) -> None:
    m = rotate["metrics"]
    assert m["test_mrr"] >= 0.55, m
    assert m["test_hits_at_10"] >= m["test_hits_at_3"] >= m["test_hits_at_1"]
    assert (m["num_entities"], m["num_relations"]) == (14, 55)
    assert rotate["epochs"] == 60 and rotate["model_version"] == 1


def test_saved_model_reloads_with_vocab_and_same_scores(rotate: dict[str, Any]) -> None:
    from aifab.models.checkpoint import load_model
    from aifab.track.registry import resolve_model

    model, sidecar = load_model(rotate["model_dir"])
    assert sidecar["builder"] == "rotate"
    assert sidecar["meta"]["datasets"][0]["ref"] == "nations@1"
    vocab = json.loads((Path(rotate["model_dir"]) / "vocab.json").read_text())
    assert len(vocab["entities"]) == 14 and "usa" in vocab["entities"]
    assert resolve_model("nations-rotate")["run_id"] == rotate["run_id"]
    from aifab.data import resolve
    from aifab.train.recipes.kge import Config, evaluate, load_triples

    data = load_triples(Config(dataset="nations"), resolve("nations"))
    assert evaluate(model, data, "test")["test_mrr"] == pytest.approx(rotate["metrics"]["test_mrr"])


def test_resume_from_a_checkpoint_matches_an_uninterrupted_run(
    nations: str, tmp_path: Path
) -> None:
    from aifab.train.checkpointing import list_checkpoints
    from aifab.train.recipes.kge import main

    config = {
        "dataset": nations,
        "model": {"name": "transe", "config": {"dim": 16}},
        "epochs": 4,
        "checkpoint_every": 2,
        "checkpoint_dir": str(tmp_path / "ck"),
        **FAST,
    }
    full = main(config)
    steps = list_checkpoints(tmp_path / "ck")
    assert [p.name for p in steps] == ["step-000000002.pt", "step-000000004.pt"]
    steps[-1].unlink()  # as if the job died during epochs 3-4
    resumed = main(config)
    assert resumed["resumed_from"] == 2 and resumed["run_id"] == full["run_id"]
    assert resumed["metrics"]["test_mrr"] == full["metrics"]["test_mrr"]


def test_bad_inputs_are_named(module_workspace: Path) -> None:
    from aifab.train.recipes.kge import main

    commit_query(
        "kg_bad",
        "SELECT * FROM (VALUES ('a', 'r', 'b', 'train'), (NULL, 'r', 'a', 'test')) "
        "t(head, relation, tail, split)",
        source="test",
        transform={"kind": "test"},
    )
    with pytest.raises(InvalidInputError, match="head.*NULL in row 1"):
        main({"dataset": "kg_bad", **FAST})
    with pytest.raises(InvalidInputError, match="tail_column.*'object'"):
        main({"dataset": "kg_bad", "tail_column": "object", **FAST})
    with pytest.raises(InvalidInputError, match="dataset: .*nope"):
        main({"dataset": "nope", **FAST})
    with pytest.raises(InvalidInputError, match="model.name"):
        main({"dataset": "kg_bad", "model": {"name": "distmult"}, **FAST})


def test_make_data_exports_the_bundled_nations_split() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kg_make_data", EXAMPLES / "make_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.triples("nations")
    counts = {s: sum(1 for r in rows if r[3] == s) for s in ("train", "valid", "test")}
    assert counts == {"train": 1592, "valid": 199, "test": 201}
    shipped = (EXAMPLES / "data" / "nations.csv").read_text().splitlines()
    assert shipped[0] == "head,relation,tail,split"
    assert shipped[1:] == [",".join(r) for r in rows]


def test_shipped_kg_pipeline_config_validates() -> None:
    from aifab.pipeline.spec import load_pipeline
    from aifab.train.recipes.kge import Config

    spec = load_pipeline(EXAMPLES / "pipeline.yaml")
    (train,) = [s.with_ for s in spec.steps if s.uses == "train"]
    assert train["recipe"] == "kge"
    assert Config.model_validate(train["config"]).model.name == "rotate"
