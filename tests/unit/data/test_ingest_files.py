"""Ingest of local files and folders: formats, rejected CSV lines, dedupe, errors, the CLI."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import list_versions, resolve
from aifab.data.ingest import IngestOptions, ingest
from aifab.data.quarantine import list_quarantine

CSV = "id,name,when\n1,ann,2024-01-01\n2,bob,2024-01-02\n3,cy,2024-01-03\n"


def rows(ref: str) -> list[tuple]:
    v = resolve(ref)
    con = lake.connect()
    return con.execute(f"SELECT * FROM {v.scan_sql()}").fetchall()


def lake_objects(home: Path) -> list[Path]:
    return [p for p in (home / "lake").rglob("*") if p.is_file()]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_ingest_types_values_and_lineage(tmp_path: Path) -> None:
    src = write(tmp_path / "people.csv", CSV)
    r = ingest("people", src)
    assert (r.created, r.rows, r.rejected) == (True, 3, 0)
    v = r.version
    assert v.ref == "people@1"
    assert [c["type"] for c in v.schema] == ["BIGINT", "VARCHAR", "DATE"]
    assert [row[:2] for row in rows("people")] == [(1, "ann"), (2, "bob"), (3, "cy")]
    assert v.source == str(src)
    assert v.transform["kind"] == "ingest"
    assert v.transform["source_kind"] == "file"
    assert v.transform["details"]["format"] == "csv"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("t.tsv", "id\tname\n1\tann\n2\tbob\n"),
        ("t.jsonl", '{"id": 1, "name": "ann"}\n{"id": 2, "name": "bob"}\n'),
        ("t.json", '[{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}]'),
        ("t.txt", "id;name\n1;ann\n2;bob\n"),  # unknown extension, --format csv
    ],
)
def test_text_formats(tmp_path: Path, name: str, content: str) -> None:
    opts = {"format": "csv", "delimiter": ";"} if name.endswith(".txt") else None
    r = ingest("t", write(tmp_path / name, content), options=opts)
    assert rows("t") == [(1, "ann"), (2, "bob")]
    assert r.version.columns == ["id", "name"]


def test_parquet_and_gzip_csv(tmp_path: Path) -> None:
    pq = tmp_path / "x.parquet"
    lake.connect().execute(f"COPY (SELECT range AS i FROM range(5)) TO '{pq}' (FORMAT parquet)")
    assert ingest("p", pq).rows == 5
    gz = tmp_path / "x.csv.gz"
    gz.write_bytes(gzip.compress(CSV.encode()))
    r = ingest("g", gz)
    assert r.rows == 3 and r.version.columns == ["id", "name", "when"]


def test_malformed_csv_lines_are_quarantined_with_line_numbers(tmp_path: Path) -> None:
    src = write(
        tmp_path / "bad.csv",
        "k,v\n1,x\n2,y,EXTRA\n3,z\n4\n5,w\n",  # line 3: too many columns, line 5: too few
    )
    # Line 5 is padded with a null (counted); line 3 is quarantined.
    r = ingest("bad", src)
    assert (r.rows, r.rejected, r.rejected_lines) == (4, 1, (3,))
    assert r.details["padded"] == 1
    assert rows("bad") == [(1, "x"), (3, "z"), (4, None), (5, "w")]
    # --strict quarantines the short line too, as before.
    s = ingest("strict", src, options={"strict": True})
    assert (s.rows, s.rejected, s.rejected_lines) == (3, 2, (3, 5))
    assert rows("strict") == [(1, "x"), (3, "z"), (5, "w")]
    q = sorted(list_quarantine("strict", stage="ingest"), key=lambda d: d["line"])
    assert [(d["line"], d["rule"]) for d in q] == [
        (3, "csv.too_many_columns"),
        (5, "csv.missing_columns"),
    ]
    assert q[0]["record"]["csv_line"] == "2,y,EXTRA"
    assert q[1]["version_id"] is None
    # Re-ingesting the same file gives the same version and does not quarantine twice.
    again = ingest("bad", src)
    assert (again.created, again.version.id, again.rejected) == (False, r.version.id, 1)
    assert len(list_quarantine("bad")) == 1


def test_reingest_identical_content_returns_existing_version(tmp_path: Path) -> None:
    first = ingest("d", write(tmp_path / "a.csv", CSV))
    copy = ingest("d", write(tmp_path / "copy" / "a.csv", CSV))
    assert (copy.created, copy.version.ref) == (False, "d@1")
    changed = ingest("d", write(tmp_path / "b.csv", CSV + "4,dee,2024-01-04\n"))
    assert (changed.created, changed.version.ref, changed.rows) == (True, "d@2", 4)
    assert [v.version for v in list_versions("d")] == [1, 2]
    assert first.version.content_hash != changed.version.content_hash


def test_progress_bar_copy_gives_the_same_rows(tmp_path: Path) -> None:
    src = write(tmp_path / "p.csv", CSV)
    r = ingest("p", src, progress=True)
    assert rows("p") == rows(ingest("p2", src).version.ref)
    assert r.rows == 3


def test_document_folder(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "a.txt", "plain text")
    write(docs / "sub" / "b.md", "# Title\n\nbody")
    write(
        docs / "c.html",
        "<html><head><title>Page C</title><script>var x=1;</script></head>"
        "<body><h1>Head</h1><p>Para one.</p><p>Para two.</p></body></html>",
    )
    write(docs / ".hidden.txt", "skip me")
    write(docs / "data.bin", "ignored")
    r = ingest("docs", docs)
    assert r.version.transform["source_kind"] == "docs"
    assert r.version.columns == ["path", "title", "text", "bytes", "modified"]
    got = {
        Path(p).relative_to(docs.resolve()).as_posix(): (t, x, b) for p, t, x, b, _ in rows("docs")
    }
    assert got == {
        "a.txt": (None, "plain text", 10),
        "c.html": ("Page C", "Head\n\nPara one.\n\nPara two.", got["c.html"][2]),
        "sub/b.md": (None, "# Title\n\nbody", 13),
    }
    assert ingest("docs", docs).created is False


def test_image_folder_labels_sizes_and_unreadable_files(tmp_path: Path) -> None:
    from PIL import Image

    root = tmp_path / "imgs"
    for label, size, fmt in [("cat", (4, 3), "PNG"), ("dog", (5, 6), "JPEG")]:
        (root / label).mkdir(parents=True)
        Image.new("RGB", size, "red").save(root / label / f"one.{fmt.lower()}", fmt)
    Image.new("L", (2, 2)).save(root / "loose.png")
    write(root / "dog" / "broken.png", "not an image")
    r = ingest("imgs", root)
    assert (r.rows, r.rejected) == (3, 1)
    got = sorted((Path(p).name, lab, w, h, f, m) for p, lab, w, h, f, m, _ in rows("imgs"))
    assert got == [
        ("loose.png", None, 2, 2, "PNG", "L"),
        ("one.jpeg", "dog", 5, 6, "JPEG", "RGB"),
        ("one.png", "cat", 4, 3, "PNG", "RGB"),
    ]
    (bad,) = list_quarantine("imgs")
    assert bad["rule"] == "image.unreadable" and "broken.png" in bad["reason"]


def test_bad_inputs_raise_one_clear_error(tmp_path: Path, workspace: Path) -> None:
    with pytest.raises(NotFoundError, match="nope.csv: no such file or folder"):
        ingest("x", tmp_path / "nope.csv")
    with pytest.raises(InvalidInputError, match=r"unknown file type '\.xyz'"):
        ingest("x", write(tmp_path / "f.xyz", "a\n1\n"))
    with pytest.raises(InvalidInputError, match="empty.csv: file is empty"):
        ingest("x", write(tmp_path / "empty.csv", ""))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InvalidInputError, match="empty_dir: no text, markdown, html or image"):
        ingest("x", tmp_path / "empty_dir")
    # Malformed JSONL lines are quarantined, but a file that keeps under half its rows fails.
    with pytest.raises(InvalidInputError, match=r"bad.jsonl: kept 1 of 3 rows .*line 2"):
        ingest("x", write(tmp_path / "bad.jsonl", '{"a": 1}\n{"a": \n{"a" 3}\n'))
    with pytest.raises(InvalidInputError, match="max_pages: Input should be greater"):
        ingest("x", write(tmp_path / "ok.csv", CSV), options={"max_pages": 0})
    with pytest.raises(InvalidInputError, match="colour: unknown key"):
        ingest("x", tmp_path / "ok.csv", options={"colour": "red"})
    with pytest.raises(InvalidInputError, match="invalid dataset name"):
        ingest("bad name", tmp_path / "ok.csv")
    with pytest.raises(InvalidInputError, match="unsupported URL scheme 'ftp'"):
        ingest("x", "ftp://example.com/a.csv")
    # Failed ingests leave nothing in the lake and no staged files behind.
    assert lake_objects(workspace) == []
    assert [p for p in (workspace / "tmp").glob("stage_*")] == []


def test_options_object_and_yaml(tmp_path: Path) -> None:
    src = write(tmp_path / "semi.csv", "k|v\n1|2\n")
    assert ingest("o", src, options=IngestOptions(delimiter="|")).version.columns == ["k", "v"]
    spec = write(tmp_path / "opts.yaml", "delimiter: '|'\nheader: false\n")
    assert ingest("o2", src, options=spec).rows == 2
    assert IngestOptions(headers={"Authorization": "secret"}).recorded() == {
        "headers": ["Authorization"]
    }


def test_cli_ingest_reports_rows_and_rejected_lines(tmp_path: Path, cli) -> None:
    src = write(tmp_path / "bad.csv", "k,v\n1,x\n2,y,EXTRA\n3,z\n")
    r = cli("data", "ingest", "ds", src, "--no-progress")
    assert r.exit_code == 0, r.stderr
    assert "ingested 2 rows into ds@1" in r.stdout
    assert "rejected 1 malformed line(s) (lines 3); see 'aifab data quarantine ds" in r.stdout
    r = cli("data", "ingest", "ds", src, "--json")
    out = json.loads(r.stdout)
    assert (out["version"], out["created"], out["rows"], out["rejected_lines"]) == (
        "ds@1",
        False,
        2,
        [3],
    )
    assert "already holds this content" in cli("data", "ingest", "ds", src).stdout


def test_cli_ingest_counts_in_english(tmp_path: Path, cli) -> None:
    one = write(tmp_path / "one.csv", "k,v\n1,x\n")
    r = cli("data", "ingest", "one", one, "--no-progress")
    assert "ingested 1 row into one@1" in r.stdout  # not "1 rows"
    r = cli("data", "ingest", "one", one, "--no-progress")
    assert "one@1 already holds this content (1 row): no new version" in r.stdout


def test_cli_errors_exit_codes(tmp_path: Path, cli) -> None:
    r = cli("data", "ingest", "ds", tmp_path / "missing.csv")
    assert r.exit_code == 1
    assert r.stderr.strip() == f"error: {tmp_path / 'missing.csv'}: no such file or folder"
    r = cli("data", "ingest", "ds", write(tmp_path / "a.weird", "x"))
    assert r.exit_code == 2 and "unknown file type '.weird'" in r.stderr
    r = cli("data", "ingest", "ds", tmp_path / "a.weird", "--format", "xml")
    assert r.exit_code == 2 and "format" in r.stderr
    r = cli("data", "ingest", "ds", "http://x", "--api", "--crawl")
    assert r.exit_code == 2 and "either --api or --crawl" in r.stderr
    r = cli("data", "ingest", "ds", "http://x", "--api", "--param", "nokey")
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.stderr


def test_cli_options_file_and_flags(tmp_path: Path, cli) -> None:
    src = write(tmp_path / "d.csv", "k;v\n1;2\n")
    opts = write(tmp_path / "o.yaml", "delimiter: ','\n")
    r = cli("data", "ingest", "ds", src, "-o", opts, "--delimiter", ";", "--json")
    assert r.exit_code == 0, r.stderr
    assert resolve("ds").columns == ["k", "v"]
    assert resolve("ds").transform["options"] == {"delimiter": ";"}
    assert os.path.exists(tmp_path / "d.csv")
