"""Knowledge-graph embeddings: the aifab ``kge`` recipe (RotatE) vs PyKEEN's RotatE pipeline.

On PyKEEN's bundled Nations, Kinships and UMLS graphs, with the same train/valid/test split,
embedding dimension, epochs, batch size, negatives per positive, self-adversarial loss (margin
gamma, temperature 1), Adam learning rate, seed and torch threads, in one process. Both rank
every test triple's head and tail against all entities, filtering the other known triples of
train + valid + test, with ties counted half ("realistic" rank). Printed per graph: filtered MRR,
Hits@10, training seconds and wall seconds of the whole call (aifab: its recipe end to end,
including MLflow tracking and saving the model; PyKEEN: ``pipeline()``), and the aifab/PyKEEN
ratios.

    .venv/bin/python bench/kge.py --threads 1
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "kg"
#: graph -> epochs (fewer on the larger graphs, so the whole bench stays within minutes).
GRAPHS = {"nations": 60, "kinships": 20, "umls": 20}
DIM, BATCH, NEGATIVES, GAMMA, LR = 64, 256, 16, 6.0, 0.05


def export(graph: str, directory: Path) -> Path:
    """Write the graph's triples (head, relation, tail, split) with the example's exporter."""
    spec = importlib.util.spec_from_file_location("kg_make_data", EXAMPLES / "make_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = directory / f"{graph}.csv"
    module.write_csv(path, module.triples(graph))
    return path


def run_aifab(graph: str, epochs: int, threads: int) -> dict[str, float]:
    from aifab.train.recipes.kge import main

    config = {
        "dataset": graph,
        "model": {"name": "rotate", "config": {"dim": DIM, "gamma": GAMMA}},
        "epochs": epochs,
        "batch_size": BATCH,
        "negatives": NEGATIVES,
        "lr": LR,
        "threads": threads,
        "progress": False,
    }
    t0 = time.perf_counter()
    m = main(config)["metrics"]
    wall = time.perf_counter() - t0
    return {
        "mrr": m["test_mrr"],
        "hits10": m["test_hits_at_10"],
        "train_s": m["train_time_s"],
        "wall_s": wall,
    }


def run_pykeen(graph: str, epochs: int) -> dict[str, float]:
    from pykeen.datasets import get_dataset
    from pykeen.pipeline import pipeline

    ds = get_dataset(dataset=graph)
    t0 = time.perf_counter()
    result: Any = pipeline(
        dataset=ds,
        model="RotatE",
        model_kwargs={"embedding_dim": DIM},
        loss="NSSA",
        loss_kwargs={"margin": GAMMA, "adversarial_temperature": 1.0},
        optimizer="Adam",
        optimizer_kwargs={"lr": LR},
        negative_sampler="basic",
        negative_sampler_kwargs={"num_negs_per_pos": NEGATIVES},
        training_kwargs={"num_epochs": epochs, "batch_size": BATCH, "use_tqdm": False},
        evaluation_kwargs={
            "additional_filter_triples": [ds.validation.mapped_triples],
            "use_tqdm": False,
        },
        random_seed=0,
        device="cpu",
    )
    wall = time.perf_counter() - t0
    metric = result.metric_results.get_metric
    return {
        "mrr": metric("both.realistic.inverse_harmonic_mean_rank"),
        "hits10": metric("both.realistic.hits_at_10"),
        "train_s": result.train_seconds,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=list(GRAPHS))
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="aifab-bench-"))
    os.environ["AIFAB_HOME"] = str(home / "ws")
    import torch

    from aifab.data import ingest

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("pykeen").setLevel(logging.ERROR)
    rows = []
    for graph in args.graphs:
        ingest(graph, str(export(graph, home)))
        ours, theirs = (
            run_aifab(graph, GRAPHS[graph], args.threads),
            run_pykeen(graph, GRAPHS[graph]),
        )
        rows.append((graph, ours, theirs))
    print(
        f"RotatE dim {DIM}, batch {BATCH}, {NEGATIVES} negatives, gamma {GAMMA}, lr {LR}, "
        f"{args.threads} thread(s); filtered, realistic ranks on test"
    )
    print(f"{'graph':10}{'epochs':>7}  {'':7}{'MRR':>7}{'Hits@10':>9}{'train s':>9}{'wall s':>8}")
    for graph, ours, theirs in rows:
        for name, r in (("aifab", ours), ("PyKEEN", theirs)):
            label = graph if name == "aifab" else ""
            epochs = str(GRAPHS[graph]) if name == "aifab" else ""
            print(
                f"{label:10}{epochs:>7}  {name:7}{r['mrr']:>7.3f}{r['hits10']:>9.3f}"
                f"{r['train_s']:>9.1f}{r['wall_s']:>8.1f}"
            )
        ratios = [ours[k] / theirs[k] for k in ("mrr", "hits10", "train_s", "wall_s")]
        print(f"{'':19}ratio  {ratios[0]:>7.2f}{ratios[1]:>9.2f}{ratios[2]:>9.2f}{ratios[3]:>8.2f}")


if __name__ == "__main__":
    main()
