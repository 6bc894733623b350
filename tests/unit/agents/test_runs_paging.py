"""Agent runs listed a page at a time (the dashboard's runs table), newest first."""

from __future__ import annotations

from tests.unit.agents.conftest import StandInLLM, answer

from aifab.agents import create_agent, list_runs, run_agent


def test_runs_page_by_offset_without_gaps_or_repeats(stand_in_llm: StandInLLM) -> None:
    stand_in_llm.scripts["pager"] = lambda messages, tools: answer("ok")
    create_agent({"name": "pager", "model": {"model": "pager", "base_url": stand_in_llm.base_url}})
    ids = [run_agent("pager", f"hello {i}")["id"] for i in range(5)]
    pages = [[r["id"] for r in list_runs("pager", limit=2, offset=o)] for o in (0, 2, 4, 6)]
    assert pages == [ids[:2:-1][:2], ids[2:0:-1], ids[:1], []]
    assert [r["id"] for r in list_runs(limit=5, offset=-3)] == ids[::-1]
