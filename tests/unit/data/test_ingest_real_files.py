"""Ingest of tables shaped like real ones (issue 10): each test generates a file of one shape.

No header, comment preambles, other encodings, hex ids, short rows, narrow headers, types
that change after the sniffing sample, stray quotes, huge fields, binary junk, broken JSON
lines. Every row must be kept, padded (counted) or quarantined with a reason.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import resolve
from aifab.data.ingest import ingest
from aifab.data.quarantine import list_quarantine


def rows(ref: str) -> list[tuple]:
    return lake.connect().execute(f"SELECT * FROM {resolve(ref).scan_sql()}").fetchall()


def types(ref: str) -> dict[str, str]:
    return {c["name"]: c["type"] for c in resolve(ref).schema}


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


# 1. header-less files and comment lines


def test_headerless_csv_and_tsv_keep_their_first_row(tmp_path: Path) -> None:
    r = ingest("nohead", write(tmp_path / "n.csv", "1,ann,2.5\n2,bob,3.5\n3,cy,4.5\n"))
    assert r.rows == 3
    assert rows("nohead")[0] == (1, "ann", 2.5)
    assert r.version.columns == ["column0", "column1", "column2"]
    tsv = write(tmp_path / "n.tsv", "10\talpha\t1\n20\tbeta\t\n30\tgamma\t0\n")
    assert ingest("tsv", tsv).rows == 3
    assert rows("tsv")[0] == (10, "alpha", 1)


def test_comment_preamble_is_skipped_and_header_flags_win(tmp_path: Path) -> None:
    src = write(tmp_path / "c.csv", "# exported by tool 1.2\n# id,name\n1,ann\n2,bob\n")
    r = ingest("comments", src)
    assert (r.rows, rows("comments")) == (2, [(1, "ann"), (2, "bob")])
    # All-text rows cannot show a header; --no-header keeps the first one.
    words = write(tmp_path / "w.csv", "ann,x\nbob,y\ncy,z\n")
    assert ingest("words", words, options={"header": False}).rows == 3
    assert ingest("words_h", words, options={"header": True}).version.columns == ["ann", "x"]
    inline = write(tmp_path / "i.csv", "k,v\n1,a\n# a note\n2,b\n")
    assert rows(ingest("inline", inline, options={"comment": "#"}).version.ref) == [
        (1, "a"),
        (2, "b"),
    ]


# 2. encodings and binary content


def test_utf16_with_bom_and_latin1_with_encoding(tmp_path: Path) -> None:
    text = "id,name\n1,José\n2,Zoë\n3,Ærø\n"
    r = ingest("u16", write(tmp_path / "u16.csv", text.encode("utf-16")))
    assert rows("u16") == [(1, "José"), (2, "Zoë"), (3, "Ærø")]
    assert r.details["encoding"] == "utf-16"
    latin = write(tmp_path / "l1.csv", text.encode("latin-1"))
    with pytest.raises(InvalidInputError, match="not UTF-8.*--encoding"):
        ingest("l1", latin)
    ingest("l1", latin, options={"encoding": "latin-1"})
    assert rows("l1")[1] == (2, "Zoë")


def test_binary_content_named_csv_is_refused_as_not_text(tmp_path: Path) -> None:
    junk = write(tmp_path / "data.csv", gzip.compress(b"a,b\n1,2\n" * 100))
    with pytest.raises(InvalidInputError, match=r"data.csv: not text: binary byte"):
        ingest("junk", junk)
    with pytest.raises(NotFoundError):
        resolve("junk")


def test_documents_in_other_encodings_decode_or_are_quarantined(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "u16.txt", "Grüße aus Köln".encode("utf-16"))
    html = (
        '<html><head><meta charset="iso-8859-1"><title>Café</title></head>'
        "<body>Crème brûlée</body></html>"
    )
    write(docs / "page.html", html.encode("latin-1"))
    write(docs / "packed.txt", gzip.compress(b"hello " * 50))
    write(docs / "ok.md", "# fine")
    r = ingest("docs", docs)
    got = {Path(p).name: (t, x) for p, t, x, *_ in rows("docs")}
    assert got == {
        "u16.txt": (None, "Grüße aus Köln"),
        "page.html": ("Café", "Crème brûlée"),
        "ok.md": (None, "# fine"),
    }
    assert r.rejected == 1
    (bad,) = list_quarantine("docs")
    assert bad["rule"] == "doc.undecodable" and "packed.txt" in bad["reason"]
    assert "binary" in bad["reason"]
    assert not any("\ufffd" in x for _, x in got.values())


# 3. hex identifiers and numbers a DOUBLE cannot hold


def test_hex_ids_and_long_numbers_stay_exact(tmp_path: Path) -> None:
    ids = ["0x60d2a1b3c4d5e6f7", "0x0000000000000001", "0xf0d2a1b3c4d5e6f7"]
    big = ["12345678901234567890123", "1.5", "2.25"]
    body = "".join(f"{i},{b},{k}.5\n" for k, (i, b) in enumerate(zip(ids, big, strict=True)))
    ingest("ids", write(tmp_path / "ids.csv", "id,amount,x\n" + body))
    assert types("ids") == {"id": "VARCHAR", "amount": "VARCHAR", "x": "DOUBLE"}
    assert [r[:2] for r in rows("ids")] == list(zip(ids, big, strict=True))


def test_json_numbers_a_double_cannot_hold_stay_text(tmp_path: Path) -> None:
    lines = [{"id": 123456789012345678901234, "v": 1.5}, {"id": 7, "v": 2.5}]
    src = write(tmp_path / "ids.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    r = ingest("jids", src)
    assert types("jids") == {"id": "VARCHAR", "v": "DOUBLE"}
    assert rows("jids") == [("123456789012345678901234", 1.5), ("7", 2.5)]
    assert r.details["widened"] == {"id": "VARCHAR"}


# 4. rows that omit trailing empty fields


def test_short_rows_are_padded_and_counted(tmp_path: Path) -> None:
    lines = ["user,uid,gid,shell"] + [
        f"u{i},{i},{i}" if i % 3 else f"u{i},{i},{i},/bin/sh" for i in range(22)
    ]
    r = ingest("passwd", write(tmp_path / "p.csv", "\n".join(lines) + "\n"))
    assert (r.rows, r.rejected) == (22, 0)
    assert r.version.transform["details"]["padded"] == 14
    assert rows("passwd")[1] == ("u1", 1, 1, None)
    # --strict quarantines them, and so keeps too few rows to commit anything.
    with pytest.raises(InvalidInputError, match="kept 8 of 22 rows.*fewer fields than the header"):
        ingest("passwd_strict", tmp_path / "p.csv", options={"strict": True})
    keep = {"strict": True, "min_kept_share": 0.3}
    assert ingest("passwd_strict", tmp_path / "p.csv", options=keep).rejected == 14


# 5. a header narrower than its rows, and ingests that keep too little


def test_narrow_header_reads_every_row_or_fails_committing_nothing(
    tmp_path: Path, workspace: Path
) -> None:
    src = write(tmp_path / "narrow.csv", "a,b\n" + "".join(f"{i},2,3,4\n" for i in range(9)))
    r = ingest("narrow", src)
    assert (r.rows, r.rejected) == (9, 0)
    assert r.version.columns[:2] == ["a", "b"] and len(r.version.columns) == 4
    with pytest.raises(InvalidInputError) as err:
        ingest("narrow_strict", src, options={"strict": True})
    msg = str(err.value)
    assert "kept 0 of 9 rows" in msg and "nothing committed" in msg
    assert "more fields than the header" in msg and "--strict" in msg
    with pytest.raises(NotFoundError):
        resolve("narrow_strict")


def test_min_kept_share_threshold(tmp_path: Path) -> None:
    body = "".join(f"{i},x\n" if i % 5 < 2 else f"{i},x,y,z,w\n" for i in range(10))
    src = write(tmp_path / "mostly_bad.csv", "k,v\n" + body)
    with pytest.raises(InvalidInputError, match="kept 4 of 10 rows"):
        ingest("mb", src, options={"strict": True})
    r = ingest("mb", src, options={"strict": True, "min_kept_share": 0.3})
    assert (r.rows, r.rejected) == (4, 6)


# 6. types that change after the sniffing sample


def test_csv_type_change_after_sample_widens_instead_of_losing_rows(tmp_path: Path) -> None:
    n = 25_000
    body = "".join(f"{i},{i % 7},2024-01-01\n" for i in range(n))
    tail = "1.5,3,2024-01-02\n7,abc,not a date\n"
    r = ingest("late", write(tmp_path / "late.csv", "a,b,d\n" + body + tail))
    assert (r.rows, r.rejected) == (n + 2, 0)
    assert types("late") == {"a": "DOUBLE", "b": "VARCHAR", "d": "VARCHAR"}
    assert rows("late")[-2:] == [(1.5, "3", "2024-01-02"), (7.0, "abc", "not a date")]


def test_jsonl_type_change_after_sample(tmp_path: Path) -> None:
    n = 25_000
    body = "".join(json.dumps({"a": i, "b": "x"}) + "\n" for i in range(n))
    tail = json.dumps({"a": 1.5, "b": "y"}) + "\n" + json.dumps({"a": 2, "b": 7}) + "\n"
    r = ingest("latej", write(tmp_path / "late.jsonl", body + tail))
    assert r.rows == n + 2
    assert types("latej")["a"] == "DOUBLE"
    assert rows("latej")[-2:][0][0] == 1.5


# 8. stray quotes, huge fields, sniffer failures


def test_stray_quote_keeps_valid_quoted_rows_and_quarantines_the_broken_one(
    tmp_path: Path,
) -> None:
    good = "".join(f'{i},"text, with comma {i}"\n' for i in range(6))
    src = write(tmp_path / "q.csv", "k,v\n" + good + '6,"unterminated\n7,plain\n')
    r = ingest("quotes", src)
    got = rows("quotes")
    assert (0, "text, with comma 0") in got and (7, "plain") in got
    assert not any('"' in str(v) for row in got for v in row)
    assert (r.rows, r.rejected, r.rejected_lines) == (7, 1, (8,))
    (bad,) = list_quarantine("quotes")
    assert "quote" in bad["reason"]
    # The same file gzipped.
    gz = write(tmp_path / "q.csv.gz", gzip.compress(src.read_bytes()))
    assert ingest("quotes_gz", gz).rejected_lines == (8,)
    assert rows("quotes_gz") == got
    # With the quote given, DuckDB's sniffer fails; the error names the line and the fix.
    with pytest.raises(InvalidInputError, match=r"line 8 has an unbalanced quote.*--quote ''"):
        ingest("quotes2", src, options={"quote": '"', "delimiter": ","})


def test_over_long_field_names_the_option_that_reads_it(tmp_path: Path) -> None:
    src = write(tmp_path / "big.csv", "k,v\n1," + "x" * 2_100_000 + "\n2,y\n")
    with pytest.raises(InvalidInputError, match=r"line 2 is .* bytes.*--max-line-size"):
        ingest("big", src)
    r = ingest("big", src, options={"max_line_size": 3_000_000})
    assert r.rows == 2


# 9. broken JSON lines are quarantined, not fatal


def test_jsonl_bad_lines_are_quarantined_with_line_numbers(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "name": f"n{i}"}) for i in range(10)]
    lines[2] = '{"id": 2, "name": '
    lines[6] = "not json at all"
    r = ingest("jl", write(tmp_path / "j.jsonl", "\n".join(lines) + "\n"))
    assert (r.rows, r.rejected, r.rejected_lines) == (8, 2, (3, 7))
    q = sorted(list_quarantine("jl", stage="ingest"), key=lambda d: d["line"])
    assert [(d["line"], d["rule"]) for d in q] == [(3, "json.malformed"), (7, "json.malformed")]
    assert q[1]["record"]["json_line"] == "not json at all"


# 13. decimal commas, records under a key


def test_decimal_comma(tmp_path: Path) -> None:
    src = write(tmp_path / "eu.csv", "name;price;qty\nann;1,5;2\nbob;1234,25;3\n")
    ingest("eu", src, options={"decimal": ",", "delimiter": ";"})
    assert rows("eu") == [("ann", 1.5, 2), ("bob", 1234.25, 3)]


def test_json_records_field(tmp_path: Path) -> None:
    doc = {"meta": {"count": 2}, "data": {"items": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]}}
    src = write(tmp_path / "r.json", json.dumps(doc))
    r = ingest("rec", src, options={"records_field": "data.items"})
    assert (r.rows, rows("rec")) == (2, [(1, "x"), (2, "y")])
    with pytest.raises(InvalidInputError, match="no list of records at 'data.nope'"):
        ingest("rec2", src, options={"records_field": "data.nope"})
