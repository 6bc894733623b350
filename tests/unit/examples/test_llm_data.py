"""The LLM example's docs questions: reproducible, prompts as kb ask renders them, held out."""

from __future__ import annotations

import gzip
import json
import runpy
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llm"
DATA = EXAMPLE / "data"


def _rows(name: str) -> list[dict[str, Any]]:
    raw = (DATA / name).read_bytes()
    text = gzip.decompress(raw) if name.endswith(".gz") else raw
    return [json.loads(line) for line in text.splitlines()]


def test_the_committed_data_is_the_scripts_output(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))  # as `python examples/llm/make_data.py` runs it
    module = runpy.run_path(str(EXAMPLE / "make_data.py"))
    monkeypatch.setitem(module["main"].__globals__, "OUT", tmp_path)
    module["main"]()
    for path in sorted(DATA.iterdir()):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_held_out_questions_and_commands_are_never_trained_on() -> None:
    docs = _rows("docs_qa.jsonl")
    train = [r for r in docs if r["split"] == "train"]
    held = [r for r in docs if r["split"] != "train"]
    assert {r["split"] for r in held} == {"new-command", "paraphrase"}
    assert len(held) >= 100
    trained_commands = {r["expected"] for r in train}
    for r in held:
        if r["split"] == "new-command":  # no question about this command was trained on
            assert r["expected"] not in trained_commands
        else:  # a trained command, asked a way it never was
            assert r["expected"] in trained_commands
    # No held-out question appears anywhere in the training text (chats or pre-training).
    instructions = {r["instruction"] for r in _rows("chats.jsonl.gz")}
    text = "\n".join(instructions) + "\n".join(r["text"] for r in _rows("pretrain.jsonl.gz"))
    for r in held:
        assert r["question"] not in instructions
        assert f"Question: {r['question']}\n" not in text


def test_the_rag_chats_are_the_prompt_kb_ask_sends() -> None:
    from aifab.rag.answer import SYSTEM, TEMPLATE

    kb = [r for r in _rows("chats.jsonl.gz") if r["system"]]
    assert kb and all(r["system"] == SYSTEM for r in kb)
    head, _, tail = TEMPLATE.partition("{{ context }}")
    for r in kb:
        assert r["instruction"].startswith(head + '<source n="1" document="')
        assert tail.split("{{")[0] in r["instruction"] and r["instruction"].endswith("\nAnswer:")
        n = int(r["output"].rsplit("[", 1)[1].rstrip("]."))  # the cited source holds the answer
        assert f'<source n="{n}" ' in r["instruction"]
