"""The data section's pages through the real app (no browser): refusals, paging, wide tables."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aifab.data import label, label_history
from aifab.data.catalog import commit_query
from aifab.serve.app import create_app
from aifab.web.pages.data.graph import MAX_NODES, Node, layout
from aifab.web.pages.data.profile_view import COLUMNS_PER_PAGE

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import csrf, sign_in  # noqa: E402

GEN = "SELECT range AS x, 'k' || (range % 3) AS s FROM range({n})"
SPEC = {
    "key": "id",
    "text_column": "text",
    "functions": [
        {"name": "pos", "label": "good", "keyword": {"column": "text", "words": ["great"]}},
        {"name": "neg", "label": "bad", "keyword": {"column": "text", "words": ["awful"]}},
    ],
}


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _versions(n: int, name: str = "t") -> None:
    for i in range(1, n + 1):
        commit_query(name, GEN.format(n=i), source=f"gen{i}", transform={"kind": "test"})


def _refs_on(html: str) -> list[str]:
    return re.findall(r">(t@\d+)</a>", html)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/ui/data/nope", "dataset &#39;nope&#39; not found"),
        ("/ui/data/t/versions/9", "has no version"),
        ("/ui/data/t/versions/x", "has no version"),
        ("/ui/data/t/versions/99999999999", "has no version"),
        ("/ui/data/nope/versions/1", "not found"),
        ("/ui/data/nope/versions/1/lineage", "not found"),
        ("/ui/data/t/versions/7/lineage", "has no version"),
        ("/ui/data/nope/quarantine", "not found"),
        ("/ui/data/nope/diff", "not found"),
        ("/ui/data/t/diff?a=t@1&b=gone@1", "not found"),
        ("/ui/data/nope/label", "not found"),
    ],
)
def test_unknown_datasets_and_versions_are_html_404_pages(
    client: TestClient, path: str, message: str
) -> None:
    _versions(1)
    sign_in(client)
    r = client.get(path)
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "<h1>404: not found</h1>" in r.text and message in r.text


def test_versions_page_in_the_query_and_bad_bounds_fall_back(client: TestClient) -> None:
    _versions(7)
    sign_in(client)
    first = client.get("/ui/data/t?limit=3").text
    assert _refs_on(first) == ["t@7", "t@6", "t@5"]
    assert 'rel="next"' in first and 'rel="prev"' not in first
    last = client.get("/ui/data/t?offset=6&limit=3").text
    assert _refs_on(last) == ["t@1"]
    assert 'rel="prev"' in last and 'rel="next"' not in last
    assert _refs_on(client.get("/ui/data/t?offset=70&limit=3").text) == []
    for bad in ("offset=-4&limit=3", "offset=x&limit=3", "offset=1e9&limit=3"):
        assert _refs_on(client.get(f"/ui/data/t?{bad}").text) == ["t@7", "t@6", "t@5"], bad
    assert len(_refs_on(client.get("/ui/data/t?limit=0").text)) == 1  # at least one row
    assert len(_refs_on(client.get("/ui/data/t?limit=99999").text)) == 7  # capped, not refused


def test_diff_draws_changed_columns_side_by_side(client: TestClient) -> None:
    for n in (30, 60, 90):  # x spreads, s gains values
        sql = f"SELECT range AS x, 'k' || (range % {n // 15}) AS s FROM range({n})"
        commit_query("t", sql, source="g", transform={"kind": "t"})
    for n in (9, 12):
        sql = f"SELECT 'id' || range AS s FROM range({n})"
        commit_query("ids", sql, source="g", transform={"kind": "t"})
    sign_in(client)
    html = client.get("/ui/data/t/diff?a=1&b=3").text
    assert "Compare t@1 and t@3" in html
    assert 'id="diff-col-0"' in html and 'id="diff-col-1"' in html  # x (quantiles), s (shares)
    assert "x: quantiles in t@1 and t@3" in html
    assert "s: share of rows per value in t@1 and t@3" in html
    assert re.search(r"rows only in B</div>", html) and "rows only in A" in html
    same = client.get("/ui/data/t/diff?a=t@2&b=2").text
    assert "Same content" in same and 'id="diff-col-0"' not in same
    unique = client.get("/ui/data/ids/diff").text  # the last two versions: unique keys only
    assert "Compare ids@1 and ids@2" in unique and "<td>s</td>" in unique
    assert 'id="diff-col-0"' not in unique  # nothing to draw: every value is seen once
    assert client.get("/ui/data/t/diff?a=t@1;x&b=2").status_code == 400


def test_datasets_page_pages_by_name(client: TestClient) -> None:
    for name in ("b", "a", "c"):
        _versions(1, name)
    sign_in(client)
    html = client.get("/ui/data?limit=2").text
    names = re.findall(r'<a href="/ui/data/(\w)">', html)
    assert names == ["a", "b"] and 'rel="next"' in html
    assert re.findall(r'<a href="/ui/data/(\w)">', client.get("/ui/data?offset=2").text) == ["c"]


def test_a_2000_column_version_shows_a_bounded_window_of_column_charts(
    client: TestClient,
) -> None:
    cols = ", ".join(
        f"range * {i} AS n{i}" if i % 2 else f"'v' || (range % {i % 7 + 2}) AS s{i}"
        for i in range(2000)
    )
    commit_query("wide", f"SELECT {cols} FROM range(20)", source="gen", transform={"kind": "t"})
    sign_in(client)
    html = client.get("/ui/data/wide/versions/1").text
    assert html.count("<canvas") == COLUMNS_PER_PAGE
    assert "Columns 1–24 of 2,000" in html
    assert html.count('<th scope="col">s0</th>') == 1  # the preview shows the window's columns
    assert "n25" not in html  # the next window is on the next page
    tail = client.get("/ui/data/wide/versions/1?col=1990").text
    assert tail.count("<canvas") == 10 and "Columns 1991–2000 of 2,000" in tail
    assert 'rel="next"' not in tail.split("First rows")[0]
    clamped = client.get("/ui/data/wide/versions/1?col=999999999").text
    assert clamped.count("<canvas") == 1 and "Columns 2000–2000" in clamped
    assert client.get("/ui/data/wide/versions/1?col=-3").text.count("<canvas") == COLUMNS_PER_PAGE


def test_values_and_column_names_are_escaped(client: TestClient) -> None:
    commit_query(
        "xss",
        "SELECT '<img src=x onerror=alert(1)>' AS \"<script>x</script>\"",
        source="gen",
        transform={"kind": "t"},
    )
    sign_in(client)
    html = client.get("/ui/data/xss/versions/1").text
    assert "<img src=x" not in html and "<script>x" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html


def _labeled() -> None:
    rows = "('1', 'great tool'), ('2', 'awful outage'), ('3', 'hello')"
    commit_query(
        "tickets",
        f"SELECT * FROM (VALUES {rows}) t(id, text)",
        source="gen",
        transform={"kind": "t"},
    )
    label("tickets", SPEC)


def test_a_viewer_sees_no_label_form_and_its_post_is_refused(client: TestClient) -> None:
    _labeled()
    sign_in(client, "viewer")
    html = client.get("/ui/data/tickets/label").text
    assert "hello" in html  # the least confident row (no function fired) comes first
    assert "data-label-form" not in html and 'name="label"' not in html
    r = client.post(
        "/ui/data/tickets/label", data={"csrf": csrf(client), "item_key": "3", "label": "good"}
    )
    assert r.status_code == 403 and "lacks permission &#39;ingest&#39;" in r.text
    assert label_history("tickets") == []


def test_a_developer_labels_a_row_and_gets_the_next_one(client: TestClient) -> None:
    _labeled()
    record = sign_in(client, "developer").record
    html = client.get("/ui/data/tickets/label").text
    assert 'data-label-key="1"' in html and "</kbd> good</button>" in html
    r = client.post(
        "/ui/data/tickets/label", data={"item_key": "3", "label": "good"}, follow_redirects=False
    )
    assert r.status_code == 403 and "CSRF" in r.text  # no token, no label
    r = client.post(
        "/ui/data/tickets/label",
        data={"csrf": csrf(client), "item_key": "3", "label": "good"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui/data/tickets/label"
    history = label_history("tickets")
    assert [(h["item_key"], h["label"], h["labeler"]) for h in history] == [
        ("3", "good", f"key:{record['id']}")
    ]
    after = client.get("/ui/data/tickets/label").text
    assert 'name="item_key" value="3"' not in after and 'name="item_key" value=' in after
    r = client.post(
        "/ui/data/tickets/label", data={"csrf": csrf(client), "item_key": "404", "label": "good"}
    )
    assert r.status_code == 404 and "not found" in r.text
    r = client.post("/ui/data/tickets/label", data={"csrf": csrf(client), "item_key": "1"})
    assert r.status_code == 400


def test_layout_puts_children_below_parents_without_overlap() -> None:
    nodes = [Node(i, "version", i) for i in ("a", "b", "c", "d", "e")]
    edges = [("a", "b"), ("b", "c"), ("a", "d"), ("d", "c"), ("c", "e"), ("a", "e")]
    drawn = layout(nodes, edges)
    at = {p["node"].id: (p["x"], p["y"]) for p in drawn["nodes"]}
    for parent, child in edges:
        assert at[parent][1] < at[child][1], (parent, child)
    assert at["e"][1] > at["c"][1]  # longest path, not the shortest
    assert len(set(at.values())) == len(at)
    assert len(drawn["edges"]) == len(edges) and drawn["cut"] == 0
    assert drawn["width"] >= max(x for x, _ in at.values()) + 190
    assert drawn["height"] >= max(y for _, y in at.values()) + 44


def test_layout_cuts_huge_graphs_and_survives_cycles() -> None:
    nodes = [Node(str(i), "version", str(i)) for i in range(MAX_NODES + 40)]
    chain = [(str(i), str(i + 1)) for i in range(MAX_NODES + 39)]
    drawn = layout(nodes, [*chain, ("5", "2")])
    assert len(drawn["nodes"]) == MAX_NODES and drawn["cut"] == 40
    assert all(int(e["child"]) < MAX_NODES for e in drawn["edges"])


def test_choices_come_from_the_label_column_and_the_queue_empties(client: TestClient) -> None:
    commit_query(
        "plain",
        "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'a')) t(n, label)",
        source="gen",
        transform={"kind": "t"},
    )  # no labeling functions made it: the choices are its label column's values
    sign_in(client, "admin")
    html = client.get("/ui/data/plain/label").text
    assert re.findall(r'data-label-key="(\d)"', html) == ["1", "2"]
    assert "</kbd> a</button>" in html and "</kbd> b</button>" in html
    for _ in range(3):
        key = re.search(r'name="item_key" value="([^"]+)"', client.get("/ui/data/plain/label").text)
        assert key is not None
        r = client.post(
            "/ui/data/plain/label",
            data={"csrf": csrf(client), "item_key": key.group(1), "label": "b"},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
    assert len(label_history("plain")) == 3
    assert "Every row of plain has a human label." in client.get("/ui/data/plain/label").text


def test_a_version_whose_transform_names_no_kind_renders(client: TestClient) -> None:
    # Found by bench/ui.py: versions committed by other tools carry any transform record, and
    # the version page answered 500 for one without a "kind".
    commit_query("plain", GEN.format(n=3), source="elsewhere", transform={"op": "copy"})
    sign_in(client)
    r = client.get("/ui/data/plain/versions/1")
    assert r.status_code == 200, r.text[:300]
    assert "elsewhere" in r.text
