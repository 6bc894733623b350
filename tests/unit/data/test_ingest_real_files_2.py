"""Ingest of real-world file shapes, round two (issue 21): each test generates a file of one shape.

Silent loss or hangs (very wide one-line files, header-less ragged tables under comments,
colon-separated files, JSONL with integer columns, folders of mixed encodings) and refusals
that must name an option that reads the file (each test then tries that option).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import resolve
from aifab.data.ingest import ingest
from aifab.data.quarantine import list_quarantine


def rows(ref: str) -> list[tuple]:
    return lake.connect().execute(f"SELECT * FROM {resolve(ref).scan_sql()}").fetchall()


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# 1. a very wide one-line file: cost must grow linearly with the columns (it hung at 20k)


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard, not a speed assertion: 5,000 columns took minutes
def test_one_line_of_thousands_of_numbers_is_read_and_profiled(tmp_path: Path) -> None:
    n = 5000
    src = write(tmp_path / "wide.csv", ",".join(f"{i}.5" for i in range(n)) + "\n")
    r = ingest("wide", src)
    assert (r.rows, len(r.version.columns)) == (1, n)
    assert rows("wide")[0][-1] == n - 1 + 0.5
    profile = resolve("wide").profile
    assert profile is not None and len(profile["columns"]) == n


def test_wide_table_doubles_checked_after_the_copy_keep_long_ids_exact(tmp_path: Path) -> None:
    # Past 200 columns DOUBLE columns are checked after the copy: a 20-digit whole number
    # there must still come out as text with every digit, not rounded.
    header = ",".join(f"c{i}" for i in range(300))
    first = ",".join(f"{i}.5" for i in range(300))
    second = ",".join(["12345678901234567890"] + [f"{i}.25" for i in range(1, 300)])
    r = ingest("wide_ids", write(tmp_path / "w.csv", f"{header}\n{first}\n{second}\n"))
    assert (r.rows, len(r.version.columns)) == (2, 300)
    got = rows("wide_ids")
    assert [row[0] for row in got] == ["0.5", "12345678901234567890"]
    assert got[1][299] == 299.25


# 2. header-less tab-separated tables under '#' comment lines, with 3 or 4 fields


def _commented_tsv(ragged: bool) -> str:
    lines = ["# exported by tool 2.1", "# columns: id name score [tag]"]
    for i in range(40):
        fields = [str(i), f"name{i}", f"{i * 0.5}"]
        if ragged and i % 2:
            fields.append(f"tag{i}")
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


def test_headerless_ragged_tsv_under_comments_keeps_every_row(tmp_path: Path) -> None:
    r = ingest("ragged", write(tmp_path / "r.tsv", _commented_tsv(ragged=True)))
    assert (r.rows, r.rejected) == (40, 0)
    got = rows("ragged")
    assert got[0] == (0, "name0", 0.0, None)
    assert got[1] == (1, "name1", 0.5, "tag1")
    assert r.version.columns == ["column0", "column1", "column2", "column3"]
    r = ingest("even", write(tmp_path / "e.tsv", _commented_tsv(ragged=False)))
    assert (r.rows, rows("even")[0]) == (40, (0, "name0", 0.0))


# 3. a colon-separated file with no header (/etc/passwd-shaped), read as --format csv


def test_colon_separated_passwd_shape_keeps_every_line(tmp_path: Path) -> None:
    lines = [
        f"user{i}:x:{1000 + i}:{1000 + i}:User {i},,,:/home/user{i}:/bin/bash" for i in range(25)
    ]
    lines.insert(3, "sys:x:3:3:sys:/dev:/usr/sbin/nologin")
    src = write(tmp_path / "passwd", "\n".join(lines) + "\n")
    r = ingest("passwd", src, options={"format": "csv"})
    assert (r.rows, r.rejected, len(r.version.columns)) == (26, 0, 7)
    assert rows("passwd")[3] == ("sys", "x", 3, 3, "sys", "/dev", "/usr/sbin/nologin")


# 4. JSON lines with an integer column (and a broken line)


def test_jsonl_with_integer_and_double_columns_and_a_broken_line(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "score": i + 0.25, "name": f"n{i}"}) for i in range(6)]
    lines[2] = '{"id": 2, "score": '
    r = ingest("jl", write(tmp_path / "b.jsonl", "\n".join(lines) + "\n"))
    assert (r.rows, r.rejected) == (5, 1)
    assert rows("jl")[0] == (0, 0.25, "n0")


# 5. a folder of documents in mixed encodings, read with --encoding latin-1


def test_explicit_encoding_is_a_fallback_not_an_override(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "a.txt", "Café in latin-1".encode("latin-1"))
    write(docs / "b.md", "Zoë in UTF-8")
    write(docs / "c.txt", "\ufeffNaïve with a BOM".encode())
    html = '<html><head><meta charset="UTF-8"><title>Ærø</title></head><body>Ærø</body></html>'
    write(docs / "d.html", html.encode("utf-8"))
    r = ingest("docs", docs, options={"encoding": "latin-1"})
    assert (r.rows, r.rejected) == (4, 0)
    text = {Path(p).name: t for p, _, t, *_ in rows("docs")}
    assert text["a.txt"] == "Café in latin-1"
    assert text["b.md"] == "Zoë in UTF-8"
    assert text["c.txt"] == "Naïve with a BOM"
    assert "Ærø" in text["d.html"]


# 6. a key/value preamble with a multi-line quoted field, then a table with quoted commas


def test_preamble_with_a_multiline_field_before_a_padded_table(tmp_path: Path) -> None:
    pre = 'Report,Sales,,\nNotes,"line one\nline two",,\n,,,\n'
    table = "id,name,value\n" + "".join(f'{i},"n, {i}",{i * 1.5}\n' for i in range(58))
    r = ingest("pre", write(tmp_path / "p.csv", pre + table))
    # Every record is kept: 3 preamble records, the table's header line and its 58 rows.
    assert (r.rows, r.rejected) == (62, 0)
    got = rows("pre")
    assert got[1][:2] == ("Notes", "line one\nline two")
    assert got[-1][:3] == ("57", "n, 57", "85.5")


# 7. stray opening quotes past the sniffing sample: no row may vanish into a quoted field


def test_stray_quotes_past_the_sample_lose_no_line(tmp_path: Path) -> None:
    lines = ["id\tname\tnote"]
    for i in range(30_000):
        if i % 100 == 0:
            note = f'"quoted note, {i}"'
        elif i > 25_000 and i % 250 == 1:
            note = f'"starts with a quote {i}'
        else:
            note = f"note {i}"
        lines.append(f"{i}\tn{i}\t{note}")
    src = write(tmp_path / "q.tsv", "\n".join(lines) + "\n")
    r = ingest("quotes", src)
    assert r.rows + r.rejected == 30_000
    assert r.rejected == 20
    reasons = {q["reason"] for q in list_quarantine("quotes", stage="ingest")}
    assert all("--quote ''" in reason for reason in reasons)
    # The named option reads every line, the stray quotes as text.
    r = ingest("quotes_text", src, options={"quote": ""})
    assert (r.rows, r.rejected) == (30_000, 0)


# 8. gzip'd CSV in cp1252


def test_encoding_applies_to_compressed_files(tmp_path: Path) -> None:
    text = "id,name\n1,Café “quoted”\n2,Zoë\n"
    src = write(tmp_path / "w.csv.gz", gzip.compress(text.encode("cp1252")))
    with pytest.raises(InvalidInputError, match="--encoding"):
        ingest("gz", src)
    r = ingest("gz", src, options={"encoding": "cp1252"})
    assert (r.rows, rows("gz")) == (2, [(1, "Café “quoted”"), (2, "Zoë")])
    # No zstd decoder to transcode through: refused, not silently read as UTF-8.
    zst = write(tmp_path / "w.csv.zst", b"(zstd bytes)")
    with pytest.raises(InvalidInputError, match="decompress"):
        ingest("zst", zst, options={"encoding": "cp1252"})


# 9. one line of numbers


def test_one_line_of_numbers_is_a_row_and_header_refusal_names_no_header(
    tmp_path: Path,
) -> None:
    src = write(tmp_path / "one.csv", ",".join(str(i) for i in range(300)) + "\n")
    r = ingest("one", src)
    assert (r.rows, rows("one")[0][:3]) == (1, (0, 1, 2))
    with pytest.raises(InvalidInputError, match="--no-header"):
        ingest("one_h", src, options={"header": True})


# 10. a single document file


def test_single_documents_are_ingested_as_files(tmp_path: Path) -> None:
    from tests.unit.rag.conftest import pdf_bytes

    md = write(tmp_path / "notes.md", "# Notes\n\nA single markdown file.\n")
    r = ingest("md", md)
    assert (r.rows, rows("md")[0][2]) == (1, "# Notes\n\nA single markdown file.\n")
    html = write(tmp_path / "p.html", "<html><title>T</title><body><p>Hello page</p></body></html>")
    ingest("html", html)
    assert rows("html")[0][1:3] == ("T", "Hello page")
    pdf = write(tmp_path / "f.pdf", pdf_bytes("Quotas limit tokens per day."))
    ingest("pdf", pdf)
    assert "Quotas limit tokens" in rows("pdf")[0][2]


# space-delimited tables and the JSON records hint


def test_space_aligned_table_is_split_on_runs_of_spaces(tmp_path: Path) -> None:
    text = "name    size   count\nalpha   1.5    10\nbeta    22.25  3\ngamma   0.5    7\n"
    r = ingest("spaces", write(tmp_path / "t.txt", text), options={"format": "csv"})
    assert r.version.columns == ["name", "size", "count"]
    assert rows("spaces") == [("alpha", 1.5, 10), ("beta", 22.25, 3), ("gamma", 0.5, 7)]


def test_json_object_with_one_list_names_the_records_field(tmp_path: Path) -> None:
    body = {"meta": {"count": 2}, "items": [{"a": 1}, {"a": 2}]}
    src = write(tmp_path / "o.json", json.dumps(body))
    with pytest.raises(InvalidInputError, match=re.escape("--records-field items")):
        ingest("obj", src)
    assert ingest("obj", src, options={"records_field": "items"}).rows == 2
