"""The ``kb_build``, ``kb_eval`` and ``prompt_eval`` pipeline steps, and the shipped
``examples/rag`` pipeline run offline as ``aifab run`` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aifab.pipeline.runner import run_pipeline

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rag" / "pipeline.yaml"


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def _details(result: Any, step: str) -> dict[str, Any]:
    (s,) = [s for s in result.steps if s.name == step]
    assert s.error is None, s.error
    return dict(s.outputs.get("details", {}))


@pytest.mark.slow
def test_the_shipped_example_runs_and_hybrid_is_best(module_workspace: Path) -> None:
    first = run_pipeline(EXAMPLE)
    assert first.ok, [(s.name, s.error) for s in first.steps]
    built = _details(first, "build")
    assert built["action"] == "created" and built["quarantined"] == 0
    assert built["documents"] >= 20
    metrics = _details(first, "evaluate")["metrics"]
    assert metrics["hybrid"]["ndcg@10"] >= max(
        metrics["dense"]["ndcg@10"], metrics["bm25"]["ndcg@10"]
    )
    assert metrics["hybrid"]["recall@5"] >= 0.9
    again = run_pipeline(EXAMPLE)
    assert _details(again, "build")["action"] == "unchanged"
    assert _details(again, "build")["kb"] == built["kb"]


def test_steps_validate_and_chain(module_workspace: Path, tmp_path: Path, standin: Any) -> None:
    from aifab.data import ingest
    from aifab.prompts import create_prompt

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha is the first letter.", encoding="utf-8")
    (docs / "b.md").write_text("# Beta\n\nBeta comes second.", encoding="utf-8")
    (tmp_path / "qa.jsonl").write_text(
        '{"question": "which letter is first", "expected": "a.md"}\n', encoding="utf-8"
    )
    (tmp_path / "rows.csv").write_text("question,expected\nhi,answer\n", encoding="utf-8")
    ingest("pe_rows", str(tmp_path / "rows.csv"))
    create_prompt("pe", "Say: {{ question }}")
    (tmp_path / "pipeline.yaml").write_text(
        f"""name: steps
steps:
  - name: build
    uses: kb_build
    with: {{name: letters, from: docs, config: {{chunk_tokens: 16, chunk_overlap: 4}}}}
  - name: eval
    uses: kb_eval
    with: {{kb: letters, qa: qa.jsonl, k: 1}}
  - name: prompt
    uses: prompt_eval
    with: {{prompt: pe, data: pe_rows, chat: "{standin.url}", scorers: [contains]}}
""",
        encoding="utf-8",
    )
    result = run_pipeline(tmp_path / "pipeline.yaml")
    assert result.ok, [(s.name, s.error) for s in result.steps]
    assert _details(result, "eval")["metrics"]["hybrid"]["recall@1"] == 1.0
    assert _details(result, "prompt")["scores"] == {"contains": 1.0}
    (docs / "c.md").write_text("# Gamma\n\nGamma is third.", encoding="utf-8")
    grown = run_pipeline(tmp_path / "pipeline.yaml")
    assert _details(grown, "build")["action"] == "updated"
    assert _details(grown, "build")["documents"] == 3

    (tmp_path / "bad.yaml").write_text(
        "name: bad\nsteps:\n  - name: build\n    uses: kb_build\n    with: {name: x}\n",
        encoding="utf-8",
    )
    bad = run_pipeline(tmp_path / "bad.yaml")
    assert not bad.ok
    assert "from" in (bad.steps[0].error or "")
