"""``list_evals``: a prompt's evaluations read back from the tracking store, newest first.

The chat model is the STAND-IN of tests/unit/agents (a scripted OpenAI-compatible server).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.agents.conftest import StandInLLM, answer

from aifab.core.errors import NotFoundError
from aifab.prompts import create_prompt, eval_prompt, list_evals


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandInLLM]:
    server = StandInLLM()
    server.scripts["paris"] = lambda messages, tools: answer("paris")
    yield server
    server.stop()


def test_evaluations_of_each_version_are_listed_newest_first(
    stand_in: StandInLLM, tmp_path: Path
) -> None:
    from aifab.data import ingest

    rows = tmp_path / "qa.csv"
    rows.write_text("q,expected\ncapital?,paris\nother?,rome\n", encoding="utf-8")
    ingest("qa", str(rows))
    with pytest.raises(NotFoundError):
        list_evals("ask_me")
    create_prompt("ask_me", "Answer {{ q }}")
    create_prompt("askXme", "Other {{ q }}")  # '_' in LIKE matches 'X': must not be listed
    assert list_evals("ask_me") == []
    chat = f"{stand_in.base_url}#paris"
    eval_prompt("askXme", "qa@1", chat)
    eval_prompt("ask_me@1", "qa@1", chat)
    create_prompt("ask_me", "Reply {{ q }}")
    eval_prompt("ask_me@2", "qa@1", chat, scorers=["exact"])
    found = list_evals("ask_me")
    assert [e["prompt"] for e in found] == ["ask_me@2", "ask_me@1"]
    assert found[0]["scores"] == {"exact": 0.5} and found[0]["dataset"] == "qa@1"
    assert found[1]["scores"] == {"exact": 0.5, "contains": 0.5}
    assert found[0]["started_at"] >= found[1]["started_at"]
