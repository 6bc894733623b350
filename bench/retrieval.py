"""Retrieval: aifab's vector index vs exact faiss, hnswlib and a numpy scan; incremental adds;
hybrid vs dense vs BM25 on the shipped QA file; ``kb ask`` latency split.

Sections (``--only`` picks some):
- ``index``: N clustered 384-d unit vectors (``--n``, default 100k), 1,000 held-out queries.
  Exact faiss (IndexFlatIP) is the recall reference. aifab's index (``FaissIndex.build`` with
  the KB defaults: HNSW above 50k, M=32, efSearch=96), hnswlib (same M, efConstruction, ef)
  and a brute-force numpy scan: build time, recall@10, batched QPS at 1 and 2 threads, size.
  Goals: recall@10 >= 0.95 at >= 1.0x hnswlib's QPS.
- ``incremental``: adding 1% more vectors to aifab's index vs rebuilding it; and a KB of
  generated documents (real MiniLM embeddings) grown by 1% with ``add_documents`` vs built
  again from scratch. Goal: >= 20x faster.
- ``embed``: MiniLM sentences/s, torch vs ONNX Runtime (``onnx:`` embedder), and the smallest
  cosine between their vectors. Goal: >= 1.5x, within 1e-3.
- ``qa``: nDCG@10 of dense, BM25 and hybrid on ``examples/rag`` (goal: hybrid >= the better).
- ``ask``: ``kb ask`` through a tiny LM deployment in-process: p50/p99 of retrieval and
  generation over 20 questions.

    .venv/bin/python bench/retrieval.py --only index embed incremental qa ask
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DIM = 384


def clustered(n: int, seed: int, centers: np.ndarray) -> np.ndarray:
    """Unit vectors around random centres (embeddings of real text cluster like this)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(centers), n)
    v = centers[idx] + 0.35 * rng.standard_normal((n, DIM)).astype("float32")
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype("float32")


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)])
    )


def qps(fn: Any, queries: np.ndarray, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(queries)
        times.append(time.perf_counter() - t)
    return len(queries) / statistics.median(times)


def set_threads(n: int) -> None:
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(n)
    threadpool_limits(n)


def bench_index(n: int) -> dict[str, Any]:
    import faiss
    import hnswlib

    from aifab.rag.config import KBConfig
    from aifab.rag.index import FaissIndex

    cfg = KBConfig()
    centers = np.random.default_rng(0).standard_normal((max(n // 100, 10), DIM)).astype("float32")
    data, queries = clustered(n, 1, centers), clustered(1000, 2, centers)
    set_threads(2)
    exact = faiss.IndexFlatIP(DIM)
    exact.add(data)
    _, truth = exact.search(queries, 10)
    rows: list[dict[str, Any]] = []

    t = time.perf_counter()
    ours = FaissIndex.build(data, cfg.hnsw_threshold, m=cfg.hnsw_m, ef_search=cfg.hnsw_ef_search)
    build = time.perf_counter() - t
    size = len(faiss.serialize_index(ours.index))
    rows.append(
        {
            "name": f"aifab ({ours.kind})",
            "build_s": build,
            "bytes": size,
            "search": lambda q: ours.search(q, 10)[1],
        }
    )

    t = time.perf_counter()
    h = hnswlib.Index(space="ip", dim=DIM)
    h.init_index(max_elements=n, M=cfg.hnsw_m, ef_construction=80)
    h.set_num_threads(2)
    h.add_items(data)
    h.set_ef(cfg.hnsw_ef_search)
    build = time.perf_counter() - t
    with tempfile.NamedTemporaryFile() as f:
        h.save_index(f.name)
        hsize = os.path.getsize(f.name)

    def hsearch(q: np.ndarray) -> np.ndarray:
        return h.knn_query(q, k=10)[0]

    rows.append({"name": "hnswlib", "build_s": build, "bytes": hsize, "search": hsearch})
    rows.append(
        {
            "name": "faiss exact",
            "build_s": 0.0,
            "bytes": data.nbytes,
            "search": lambda q: exact.search(q, 10)[1],
        }
    )

    def brute(q: np.ndarray) -> np.ndarray:
        scores = q @ data.T
        return np.argpartition(-scores, 10, axis=1)[:, :10]

    rows.append({"name": "numpy scan", "build_s": 0.0, "bytes": data.nbytes, "search": brute})
    for r in rows:
        r["recall@10"] = recall(r["search"](queries), truth)
        for threads in (1, 2):
            set_threads(threads)
            if r["name"] == "hnswlib":
                h.set_num_threads(threads)
            r[f"qps_{threads}t"] = qps(r["search"], queries)
    print(f"\n## index: {n} x {DIM} clustered unit vectors, 1000 queries, k=10")
    print(f"{'index':<16}{'build s':>9}{'recall@10':>11}{'QPS 1t':>10}{'QPS 2t':>10}{'MB':>8}")
    for r in rows:
        print(
            f"{r['name']:<16}{r['build_s']:>9.2f}{r['recall@10']:>11.4f}{r['qps_1t']:>10.0f}"
            f"{r['qps_2t']:>10.0f}{r['bytes'] / 2**20:>8.1f}"
        )
    ours_r, h_r = rows[0], rows[1]
    for t in (1, 2):
        print(
            f"aifab / hnswlib QPS at {t} thread(s): {ours_r[f'qps_{t}t'] / h_r[f'qps_{t}t']:.2f}x"
        )
    return {"data": data, "centers": centers}


def bench_incremental(n: int, docs: int) -> None:
    from aifab.rag.config import KBConfig
    from aifab.rag.index import FaissIndex

    cfg = KBConfig()
    centers = np.random.default_rng(0).standard_normal((max(n // 100, 10), DIM)).astype("float32")
    data, extra = clustered(n, 1, centers), clustered(n // 100, 3, centers)
    set_threads(2)
    base = FaissIndex.build(data, cfg.hnsw_threshold, m=cfg.hnsw_m)
    t = time.perf_counter()
    base.add(extra)
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    FaissIndex.build(np.vstack([data, extra]), cfg.hnsw_threshold, m=cfg.hnsw_m)
    rebuild_s = time.perf_counter() - t
    print(f"\n## incremental: index of {n} vectors + 1% ({len(extra)})")
    print(f"add {add_s:.3f} s   rebuild {rebuild_s:.3f} s   ratio {rebuild_s / add_s:.1f}x")
    _bench_kb_incremental(docs)


def _corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [
        "model",
        "data",
        "queue",
        "index",
        "lake",
        "token",
        "deploy",
        "canary",
        "shard",
        "vector",
        "chunk",
        "prompt",
        "metric",
        "alias",
        "job",
        "worker",
        "cluster",
        "gateway",
        "quota",
        "drift",
    ]
    return [" ".join(rng.choice(words, 40)) + f" doc {seed}-{i}." for i in range(n)]


def _bench_kb_incremental(docs: int) -> None:
    from aifab.rag import add_documents, create_kb, delete_kb

    first = [{"id": f"d{i}", "text": t} for i, t in enumerate(_corpus(docs, 1))]
    more = [{"id": f"n{i}", "text": t} for i, t in enumerate(_corpus(max(docs // 100, 1), 2))]
    create_kb("warm", first[:10])  # load MiniLM outside the timings
    t = time.perf_counter()
    kb = create_kb("inc", first)
    full_s = time.perf_counter() - t
    t = time.perf_counter()
    added = add_documents("inc", more)
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    create_kb("rebuilt", first + more)
    rebuild_s = time.perf_counter() - t
    print(
        f"KB of {docs} generated documents (MiniLM): build {full_s:.2f} s "
        f"({docs / full_s:.0f} docs/s, {kb['counts']['chunks']} chunks)"
    )
    print(
        f"add 1% ({len(more)} docs, {added['counts']['embedded']} chunks embedded) "
        f"{add_s:.2f} s   rebuild {rebuild_s:.2f} s   ratio {rebuild_s / add_s:.1f}x"
    )
    for name in ("warm", "inc", "rebuilt"):
        delete_kb(name)


def bench_embed(n: int) -> None:
    from aifab.rag.embedders import get_embedder

    texts = _corpus(n, 5)
    torch_e = get_embedder("builtin:all-minilm-l6-v2")
    onnx_e = get_embedder("onnx:builtin:all-minilm-l6-v2")
    set_threads(2)
    rates, vectors = {}, {}
    for name, e in (("torch", torch_e), ("onnx", onnx_e), ("torch ", torch_e)):
        e.embed(texts[:64])  # warm-up
        t = time.perf_counter()
        vectors[name.strip()] = e.embed(texts)
        rates[name] = n / (time.perf_counter() - t)
    cos = float(np.min((vectors["torch"] * vectors["onnx"]).sum(axis=1)))
    torch_rate = (rates["torch"] + rates["torch "]) / 2  # before and after, for fairness
    print(f"\n## embed: MiniLM on {n} generated sentences, batch 64, 2 threads")
    print(
        f"torch {torch_rate:.0f} sent/s   onnx {rates['onnx']:.0f} sent/s   "
        f"ratio {rates['onnx'] / torch_rate:.2f}x   min cosine {cos:.6f}"
    )


def bench_qa() -> None:
    from aifab.rag import create_kb, eval_kb

    create_kb("qa-docs", str(EXAMPLES / "rag" / "docs"))
    out = eval_kb("qa-docs", EXAMPLES / "rag" / "qa.jsonl", k=5)
    print(f"\n## qa: examples/rag ({out['questions']} questions)")
    for mode, m in out["metrics"].items():
        print(
            f"{mode:<8} recall@5 {m['recall@5']:.3f}  MRR {m['mrr']:.3f}  "
            f"nDCG@10 {m['ndcg@10']:.3f}"
        )
    best = max(out["metrics"]["dense"]["ndcg@10"], out["metrics"]["bm25"]["ndcg@10"])
    print(f"hybrid / best single nDCG@10: {out['metrics']['hybrid']['ndcg@10'] / best:.3f}x")


def bench_ask() -> None:
    from aifab.data import ingest
    from aifab.inference.deployments import create_deployment
    from aifab.rag import ask
    from aifab.train.recipes.lm import main as train_lm

    ingest("lm_corpus", str(EXAMPLES / "llm" / "data" / "corpus.jsonl"))
    train_lm(
        {
            "dataset": "lm_corpus",
            "text_column": "text",
            "model": {"preset": "tiny"},
            "vocab_size": 384,
            "block_size": 64,
            "batch_size": 16,
            "max_steps": 20,
            "eval_every": 20,
            "register": "bench-lm",
            "system_metrics": False,
            "threads": 1,
            "progress": False,
        }
    )
    create_deployment("bench-lm@1", name="bench-chat")
    questions = [
        q for q in (EXAMPLES / "rag" / "qa.jsonl").read_text().splitlines() if q.startswith("{")
    ][:20]
    import json

    ask("qa-docs", "warm up", chat="bench-chat", max_tokens=16)
    ret, gen = [], []
    for line in questions:
        out = ask("qa-docs", json.loads(line)["question"], chat="bench-chat", max_tokens=16)
        ret.append(out["timings_ms"]["retrieval"])
        gen.append(out["timings_ms"]["generation"])

    def p(xs: list[float], q: float) -> float:
        return float(np.percentile(xs, q))

    print(f"\n## ask: {len(ret)} questions, tiny LM in-process, 16 new tokens")
    print(
        f"retrieval p50 {p(ret, 50):.1f} ms p99 {p(ret, 99):.1f} ms; "
        f"generation p50 {p(gen, 50):.1f} ms p99 {p(gen, 99):.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=["index", "embed", "incremental", "qa", "ask"])
    ap.add_argument("--n", type=int, default=100_000, help="Vectors in the index benchmark.")
    ap.add_argument("--sentences", type=int, default=1000, help="Texts in the embed benchmark.")
    ap.add_argument("--docs", type=int, default=1000, help="Documents in the KB increment test.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["AIFAB_HOME"] = home
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("AIFAB_ACTOR", "user:bench")
        if "index" in args.only:
            bench_index(args.n)
        if "embed" in args.only:
            bench_embed(args.sentences)
        if "incremental" in args.only:
            bench_incremental(args.n, args.docs)
        if "qa" in args.only or "ask" in args.only:
            bench_qa()
        if "ask" in args.only:
            bench_ask()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
