"""Pipeline result tables say what every kind of step made (kb_build, tool_eval and agent cells
were empty)."""

from __future__ import annotations

from aifab.cli.pipeline import _outputs_text


def test_kb_build_cell_names_the_kb_and_its_counts() -> None:
    details = {
        "kb": "aifab-docs@1",
        "action": "created",
        "documents": 9,
        "chunks": 120,
        "quarantined": 0,
    }
    text = _outputs_text({"datasets": [], "details": details})
    assert "aifab-docs@1" in text and "120 chunks" in text


def test_kb_eval_cell_shows_each_modes_metrics() -> None:
    details = {
        "kb": "aifab-docs@1",
        "run_id": "abcdef1234567890",
        "metrics": {"hybrid": {"recall@5": 0.9, "mrr": 0.7}, "bm25": {"recall@5": 0.8}},
    }
    text = _outputs_text({"datasets": [], "details": details})
    assert "hybrid: recall@5=0.9" in text and "bm25: recall@5=0.8" in text


def test_tool_eval_cell_shows_accuracy_beside_the_baseline() -> None:
    details = {
        "rows": 40,
        "tool_accuracy": 0.95,
        "argument_exact_match": 0.825,
        "parsed_share": 1.0,
        "baseline_tool_accuracy": 0.5,
        "baseline_argument_exact_match": 0.0,
        "baseline_call": {"name": "sql"},
    }
    text = _outputs_text({"datasets": [], "details": details})
    assert "tool_accuracy=0.95" in text and "argument_exact_match=0.825" in text
    assert "baseline_tool_accuracy=0.5" in text


def test_agent_cell_shows_the_runs_status_and_answer() -> None:
    details = {
        "id": "run_1",
        "status": "completed",
        "reason": None,
        "steps": 2,
        "tokens": 300,
        "answer": "The average income in FR is 51,000.",
    }
    text = _outputs_text({"datasets": [], "details": details})
    assert "completed" in text and "51,000" in text


def test_monitor_cell_shows_status_and_values() -> None:
    text = _outputs_text({"datasets": [], "details": {"status": "breach", "psi:age": 0.31}})
    assert "monitor breach" in text and "psi:age=0.31" in text
