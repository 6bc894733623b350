"""Data-parallel lm, lora and kge through the real scheduler: each 2-replica job (gloo, every
rank on its shard of the same global batch) follows the loss curve of the same config run in a
single process, and only rank 0 opens an MLflow run and saves the model."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.data import ingest
from aifab.jobs import service
from aifab.jobs.detect import machine_resources
from aifab.jobs.worker import Worker, WorkerOptions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "llm" / "data"
FINAL = ("succeeded", "failed", "cancelled")
FAST = {"threads": 1, "system_metrics": False, "progress": False, "device": "cpu"}
LM_STEPS, LORA_STEPS, KGE_EPOCHS = 6, 4, 3


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Room for the three 2-replica jobs at once (one CPU each)."""
    monkeypatch.setenv("AIFAB_WORKER_CPU", "6")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "32768")
    monkeypatch.setenv("AIFAB_WORKER_GPU", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    machine_resources.cache_clear()
    yield
    machine_resources.cache_clear()


def _datasets(tmp_path: Path) -> None:
    """A 300-text corpus, the instruction set, and 300 triples over 40 entities."""
    lines = (EXAMPLES / "corpus.jsonl").read_text().splitlines()[:300]
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    ingest("ddp-corpus", str(tmp_path / "corpus.jsonl"))
    ingest("ddp-chat", str(EXAMPLES / "instructions.jsonl"))
    g = np.random.default_rng(2)
    heads, tails = g.integers(0, 40, 300), g.integers(0, 40, 300)
    split = np.where(np.arange(300) < 240, "train", np.where(np.arange(300) < 270, "valid", "test"))
    triples = pa.table(
        {
            "head": [f"e{h}" for h in heads],
            "relation": [f"r{r}" for r in g.integers(0, 3, 300)],
            "tail": [f"e{t}" for t in tails],
            "split": split.tolist(),
        }
    )
    pq.write_table(triples, tmp_path / "triples.parquet")
    ingest("ddp-triples", str(tmp_path / "triples.parquet"))


def _base_model(directory: Path) -> None:
    """A tiny causal LM with its tokenizer: the LoRA base."""
    from aifab.models.checkpoint import save_model
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.models.zoo import build_model, model_config

    texts = [json.loads(line)["text"] for line in (EXAMPLES / "corpus.jsonl").open()][:200]
    tok = train_bpe_tokenizer(texts, 320)
    cfg = model_config(
        "causal-lm",
        {
            "vocab_size": len(tok),
            "pad_token_id": tok.pad_token_id,
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
        },
    )
    save_model(
        directory, build_model("causal-lm", cfg), builder="causal-lm", config=cfg, tokenizer=tok
    )


def _configs(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """One config per recipe; odd global batches give the two ranks unequal shards."""
    return {
        "lm": {
            "dataset": "ddp-corpus",
            "vocab_size": 300,
            "block_size": 32,
            "batch_size": 7,
            "max_steps": LM_STEPS,
            "eval_every": 1000,
            "log_every": 1,
            "optim": {"lr": 3e-3, "warmup_steps": 2, "grad_accum": 2, "clip_norm": None},
            **FAST,
        },
        "lora": {
            "dataset": "ddp-chat",
            "base": str(tmp_path / "base"),
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
            "max_length": 64,
            "batch_size": 5,
            "max_steps": LORA_STEPS,
            "eval_every": 1000,
            "log_every": 1,
            "optim": {"lr": 1e-2, "warmup_steps": 0, "clip_norm": None},
            **FAST,
        },
        "kge": {
            "dataset": "ddp-triples",
            "model": {"name": "rotate", "config": {"dim": 16}},
            "epochs": KGE_EPOCHS,
            "batch_size": 61,
            "negatives": 4,
            "eval_every": 1000,
            **FAST,
        },
    }


def _drive(worker: Worker, job_ids: list[str], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.step()
        if all(service.get_job(j)["state"] in FINAL for j in job_ids):
            return
        time.sleep(0.05)
    raise AssertionError(f"jobs not finished within {timeout} s")


def _curve(run_id: str) -> list[float]:
    """Train loss by step (lora logs its last one again with the final metrics)."""
    from aifab.track.runs import metric_history

    by_step = {p["step"]: p["value"] for p in metric_history(run_id, "train_loss")}
    return [by_step[step] for step in sorted(by_step)]


def _single(recipe: str, config: dict[str, Any]) -> None:
    """The same config in this process: one replica, no process group."""
    import importlib

    importlib.import_module(f"aifab.train.recipes.{recipe}").main(config)


def test_lm_lora_kge_follow_their_single_process_loss_curves(tmp_path: Path) -> None:
    from aifab.track.runs import list_runs
    from aifab.track.tracking import experiment_id

    _datasets(tmp_path)
    _base_model(tmp_path / "base")
    experiment_id("ddp-recipes")  # create the MLflow store once, before the replicas race to
    jobs: dict[str, str] = {}
    for recipe, config in _configs(tmp_path).items():
        for replicas in (1, 2):
            name = f"{recipe}-{replicas}"
            run_cfg = {
                **config,
                "experiment": "ddp-recipes",
                "run_name": name,
                "output_dir": str(tmp_path / name),
            }
            if replicas == 1:
                _single(recipe, run_cfg)
                continue
            spec = {
                "name": name,
                "run": {"recipe": recipe, "config": run_cfg},
                "replicas": replicas,
                "resources": {"cpu": 1, "memory": 2048},
            }
            jobs[name] = service.submit(spec)["id"]
    worker = Worker(WorkerOptions(lease_s=30.0, poll_s=0.05))
    try:
        _drive(worker, list(jobs.values()))
    finally:
        stopped = threading.Event()
        stopped.set()
        worker.run(stopped)
    for name, job_id in jobs.items():
        job = service.get_job(job_id)
        assert job["state"] == "succeeded", (name, job["reason"])
        assert job["attempts"][0]["exit_codes"] == [0, 0]

    runs = {r["name"]: r for r in list_runs("ddp-recipes")}
    assert len(runs) == 6  # rank 1 opened no run of its own
    for recipe, points in (("lm", LM_STEPS), ("lora", LORA_STEPS), ("kge", KGE_EPOCHS)):
        single, ddp = _curve(runs[f"{recipe}-1"]["id"]), _curve(runs[f"{recipe}-2"]["id"])
        assert len(single) == len(ddp) == points, recipe
        assert single[-1] < single[0], (recipe, single)
        diff = max(abs(a - b) for a, b in zip(single, ddp, strict=True))
        assert diff < 1e-4, (recipe, diff, single, ddp)
        assert (tmp_path / f"{recipe}-2").is_dir()  # rank 0 saved the model
    lm_single, lm_ddp = runs["lm-1"]["metrics"], runs["lm-2"]["metrics"]
    assert lm_ddp["valid_loss"] == pytest.approx(lm_single["valid_loss"], abs=1e-3)
    assert runs["kge-2"]["metrics"]["test_mrr"] == pytest.approx(
        runs["kge-1"]["metrics"]["test_mrr"], abs=0.02
    )
