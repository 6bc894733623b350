"""Table output shows data verbatim: Rich markup and emoji codes in values are not interpreted."""

from __future__ import annotations

import json

from aifab.data.catalog import commit_query

CELLS = ["[b]bold[/b]", "[/i]", ":smile: [link=http://x]y[/link]", "a\\[x]"]


def _markup_dataset() -> None:
    values = ", ".join("(" + "'" + c.replace("'", "''") + "', 1)" for c in CELLS)
    commit_query(
        "markup",
        f'SELECT v AS "[red]col[/red]", n FROM (VALUES {values}) t(v, n)',
        source="test",
        transform={"kind": "test"},
    )


def test_head_prints_markup_cells_verbatim(cli) -> None:
    _markup_dataset()
    r = cli("data", "head", "markup")
    assert r.exit_code == 0, r.stderr
    for cell in CELLS:
        assert cell in r.stdout
    assert "[red]col[/red]" in r.stdout


def test_query_and_show_print_markup_verbatim(cli) -> None:
    _markup_dataset()
    r = cli("data", "query", 'SELECT "[red]col[/red]" AS "[/i]" FROM markup')
    assert r.exit_code == 0, r.stderr
    assert "[/i]" in r.stdout and "[b]bold[/b]" in r.stdout
    r = cli("data", "show", "markup", "--profile")
    assert r.exit_code == 0, r.stderr
    assert "[red]col[/red]" in r.stdout
    r = cli("data", "head", "markup", "--json")
    assert [row["[red]col[/red]"] for row in json.loads(r.stdout)] == CELLS
