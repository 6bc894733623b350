"""Tables piped at 80 columns stay readable: one line per row, cut cells, hidden columns named."""

from __future__ import annotations

import pytest

from aifab.cli.output import emit, print_table

COLUMNS = [f"column_{i}" for i in range(12)]
ROWS = [{c: f"value-{i}-{c}-" + "x" * 30 for c in COLUMNS} for i in range(3)]


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("AIFAB_WIDE", raising=False)


def test_a_wide_table_fits_80_columns_one_line_per_row(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(ROWS, COLUMNS)
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table)
    assert len([line for line in table if line.startswith("│")]) == len(ROWS)
    assert any("more columns" in line for line in lines)
    assert "column_11" in "\n".join(lines)  # a hidden column is named, not dropped silently


def test_short_columns_show_whole_when_long_text_is_cut(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [{"id": 17, "updated_at": 1796329262.2, "text": "word " * 60}]
    print_table(rows, ["id", "updated_at", "text"])
    out = capsys.readouterr().out
    assert "2026-12-03 20:21:02" in out  # a timestamp column prints as a date, in full
    assert "…" in out


def test_wide_shows_every_cell_in_full(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIFAB_WIDE", "1")
    print_table(ROWS, COLUMNS)
    out = capsys.readouterr().out
    for row in ROWS:
        for value in row.values():
            assert value in out


def test_key_value_timestamps_print_as_dates(capsys: pytest.CaptureFixture[str]) -> None:
    emit({"team": "growth", "updated_at": 1796330000.0, "amount": 100.0}, as_json=False)
    out = capsys.readouterr().out
    assert "1.79633e+09" not in out
    assert "2026-12-03" in out


def test_wide_is_a_global_option(cli) -> None:
    r = cli("--wide", "data", "list")
    assert r.exit_code == 0, r.stderr


def test_ids_and_names_are_never_cut_at_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {
            "id": "job_01a2527e5a6e_4f1d9c2b",
            "state": "succeeded",
            "summary": "test_loss=0.41234, test_accuracy=0.9123 " * 3,
            "name": "customers_clean_spring",
            "notes": "a long free-text note " * 5,
            "run_id": "69a8954f3c2e4b1d8a7f6e5d4c3b2a19",
        }
    ]
    print_table(rows)
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table)
    for whole in (rows[0]["id"], rows[0]["name"]):
        assert whole in out, (whole, out)
    # No room left for a whole run id: it is left out and named, never shown cut.
    assert "69a8954" not in out.replace("run_id", "") and "run_id" in out.splitlines()[-1]


def test_a_rows_state_shows_before_lesser_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {
            "id": "job_01a252d36144_9da556ce",
            "name": "agents-finetune-with-a-long-name",
            "queue": "default",
            "priority": 0,
            "state": "succeeded",
            "attempt": 1,
        }
    ]
    print_table(rows)
    out = capsys.readouterr().out
    assert "succeeded" in out and "state" in out.splitlines()[1]
