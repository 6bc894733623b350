"""The agents example's shipped conversations: reproducible, and a test split of unseen values."""

from __future__ import annotations

import gzip
import json
import re
import runpy
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "agents"
DATA = EXAMPLE / "data" / "tool_chats.jsonl.gz"


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def _slot_values(call: dict[str, Any]) -> set[str]:
    """The values a call copies from its request: SQL literals and the record's fields."""
    args = call["arguments"]
    if call["name"] == "sql":
        return set(re.findall(r"'([^']*)'|[<>=] (\d+)", args["query"])) - {("", "")}
    return {f"{k}={v}" for record in args["records"] for k, v in record.items()}


def test_the_committed_data_is_the_scripts_output(tmp_path: Path, monkeypatch: Any) -> None:
    module = runpy.run_path(str(EXAMPLE / "make_data.py"))
    monkeypatch.setitem(module["main"].__globals__, "HERE", tmp_path)
    module["main"]()
    assert (tmp_path / "data" / "tool_chats.jsonl.gz").read_bytes() == DATA.read_bytes()


def test_every_test_request_holds_a_value_the_training_split_never_saw() -> None:
    rows = _rows(DATA)
    seen: set[Any] = set()
    for row in rows:
        if row["split"] == "train":
            seen |= _slot_values(json.loads(row["expected"]))
    test = [row for row in rows if row["split"] == "test"]
    assert len(test) >= 100
    for row in test:
        call = json.loads(row["expected"])
        assert _slot_values(call) - seen, row["messages"][1]["content"]
        # the value is in the request: the model copies it, nothing to guess
        assert row["messages"][-1]["content"].endswith("</tool_call>")
    names = {json.loads(row["expected"])["name"] for row in test}
    assert names == {"sql", "predict"}


def test_every_value_of_every_call_is_written_verbatim_in_its_request() -> None:
    # Copyable: each SQL literal and record field is in the user's words as the call writes it
    # (numbers as JSON numbers), so nothing is to be guessed or reformatted.
    for row in _rows(DATA):
        call, request = json.loads(row["expected"]), row["messages"][1]["content"]
        if call["name"] == "sql":
            literals = re.findall(r"'([^']*)'|[<>=] (\d+)", call["arguments"]["query"])
            values = [quoted or number for quoted, number in literals]
        else:
            values = [
                v if isinstance(v, str) else json.dumps(v)
                for record in call["arguments"]["records"]
                for v in record.values()
            ]
        for value in values:
            assert value in request, (value, request)
