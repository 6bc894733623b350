"""Retrieval evaluation: recall@k, MRR and nDCG@10 of each search mode over a QA file.

Dense, BM25 and hybrid side by side, logged as one MLflow run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aifab.core.audit import audited
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.rag.search import MODES, embed_queries, search

__all__ = ["load_qa", "metrics_for", "eval_kb"]

MAX_QUESTIONS = 5000


def load_qa(path: str | Path) -> list[dict[str, Any]]:
    """Questions from a JSONL or YAML file: ``{"question", "expected": id | [ids]}``.

    ``expected`` names documents (as search shows them) or chunk ids. Blank lines and lines
    starting with ``#`` are skipped in JSONL.

    Raises:
        NotFoundError: no such file.
        InvalidInputError: a malformed line or entry (named by line or index).
    """
    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"{path}: no such QA file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: cannot read as UTF-8 ({exc})") from None
    items: list[Any] = []
    if p.suffix in (".yaml", ".yml"):
        import yaml

        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInputError(f"{path}: not YAML ({exc})") from None
        items = loaded if isinstance(loaded, list) else []
        where = [f"item {i + 1}" for i in range(len(items))]
    else:
        where = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise InvalidInputError(f"{path}: line {n}: not JSON ({exc})") from None
            where.append(f"line {n}")
    out = []
    for item, loc in zip(items, where, strict=True):
        q = item.get("question") if isinstance(item, dict) else None
        exp = item.get("expected") if isinstance(item, dict) else None
        exp = [exp] if isinstance(exp, str) else exp
        if not isinstance(q, str) or not q.strip():
            raise InvalidInputError(f"{path}: {loc}: 'question' must be a non-empty string")
        if not exp or not all(isinstance(e, str) for e in exp):
            raise InvalidInputError(f"{path}: {loc}: 'expected' must be an id or a list of ids")
        out.append({"question": q, "expected": list(exp)})
    if not out:
        raise InvalidInputError(f"{path}: no questions")
    if len(out) > MAX_QUESTIONS:
        raise InvalidInputError(f"{path}: over {MAX_QUESTIONS} questions")
    return out


def metrics_for(
    hits: Sequence[dict[str, Any]], expected: Sequence[str], k: int
) -> dict[str, float]:
    """recall@k, reciprocal rank and nDCG@10 of one ranked hit list (pure).

    A hit is relevant when its document or chunk id is expected; each expected id counts once.
    """
    wanted = set(expected)
    found: list[tuple[int, str]] = []  # (rank, target) of each target's first hit
    seen: set[str] = set()
    for rank, hit in enumerate(hits, 1):
        for target in (hit["document"], hit["id"]):
            if target in wanted and target not in seen:
                seen.add(target)
                found.append((rank, target))
    recall = len([1 for r, _ in found if r <= k]) / len(wanted)
    rr = 1.0 / found[0][0] if found else 0.0
    dcg = sum(1.0 / math.log2(r + 1) for r, _ in found if r <= 10)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(wanted), 10) + 1))
    return {f"recall@{k}": recall, "mrr": rr, "ndcg@10": dcg / ideal}


def eval_kb(
    name: str,
    qa: str | Path,
    *,
    k: int = 5,
    modes: Sequence[str] = MODES,
    experiment: str = "kb-eval",
) -> dict[str, Any]:
    """Score each retrieval mode over a QA file and log the means as one MLflow run.

    Returns:
        ``{"kb", "version", "questions", "k", "metrics": {mode: {recall@k, mrr, ndcg@10}},
        "run_id"}``.

    Raises:
        NotFoundError: unknown KB or QA file.
        InvalidInputError: a malformed QA file, a bad k or mode.
        EmbedderUnavailable: dense/hybrid requested and the embedder is gone.
    """
    from aifab.track import start_run

    questions = load_qa(qa)
    if not 1 <= k <= 100:
        raise InvalidInputError(f"k: must be between 1 and 100, got {k}")
    depth = max(k, 10)
    metrics: dict[str, dict[str, float]] = {}
    version = 0
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise InvalidInputError(f"modes: give some of {', '.join(MODES)}")
    vectors = (
        embed_queries(name, [q["question"] for q in questions])
        if {"dense", "hybrid"} & set(modes)
        else None
    )
    for mode in modes:
        totals: dict[str, float] = {}
        for i, item in enumerate(questions):
            qv = vectors[i] if vectors is not None else None
            result = search(name, item["question"], k=depth, mode=mode, query_vector=qv)
            version = result["version"]
            for key, value in metrics_for(result["results"], item["expected"], k).items():
                totals[key] = totals.get(key, 0.0) + value
        metrics[mode] = {key: v / len(questions) for key, v in totals.items()}
    params = {"kb": f"{name}@{version}", "qa": str(qa), "questions": len(questions), "k": k}
    with start_run(
        experiment, run_name=f"{name}@{version}", params=params, system_metrics=False
    ) as run:
        run.log_metrics(
            # MLflow keys may not hold "@": recall@5 is logged as recall_at_5.
            {
                f"{mode}/{key.replace('@', '_at_')}": v
                for mode, m in metrics.items()
                for key, v in m.items()
            },
            step=0,
        )
        run_id = run.id
    audited("kb.eval", f"kb:{name}@{version}", {**params, "run_id": run_id})
    return {
        "kb": name,
        "version": version,
        "questions": len(questions),
        "k": k,
        "metrics": metrics,
        "run_id": run_id,
    }
