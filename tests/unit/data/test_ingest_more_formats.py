"""Ingest of Excel and Arrow files, truncated images and skipped folder files (issue 10, 13)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import resolve
from aifab.data.ingest import ingest
from aifab.data.quarantine import list_quarantine


def rows(ref: str) -> list[tuple]:
    return lake.connect().execute(f"SELECT * FROM {resolve(ref).scan_sql()}").fetchall()


def _cell(ref: str, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return f'<c r="{ref}" t="inlineStr"><is><t>{escape(value)}</t></is></c>'
    if isinstance(value, bool):
        return f'<c r="{ref}" t="b"><v>{int(value)}</v></c>'
    return f'<c r="{ref}"><v>{value}</v></c>'


def write_xlsx(path: Path, sheets: dict[str, list[list[object]]]) -> Path:
    """A minimal OOXML workbook (inline strings), as spreadsheet programs write them."""
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel_ns = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
    pkg = "http://schemas.openxmlformats.org/package/2006"
    doc = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    names = list(sheets)
    with zipfile.ZipFile(path, "w") as z:
        overrides = "".join(
            f'<Override PartName="/xl/worksheets/sheet{i + 1}.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
            for i in range(len(names))
        )
        z.writestr(
            "[Content_Types].xml",
            f'<?xml version="1.0"?><Types xmlns="{pkg}/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
            f'officedocument.spreadsheetml.sheet.main+xml"/>{overrides}</Types>',
        )
        z.writestr(
            "_rels/.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{pkg}/relationships">'
            f'<Relationship Id="rId1" Type="{doc}/officeDocument" Target="xl/workbook.xml"/>'
            "</Relationships>",
        )
        z.writestr(
            "xl/workbook.xml",
            f'<?xml version="1.0"?><workbook {ns} {rel_ns}><sheets>'
            + "".join(
                f'<sheet name="{n}" sheetId="{i + 1}" r:id="rId{i + 1}"/>'
                for i, n in enumerate(names)
            )
            + "</sheets></workbook>",
        )
        z.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{pkg}/relationships">'
            + "".join(
                f'<Relationship Id="rId{i + 1}" Type="{doc}/worksheet" '
                f'Target="worksheets/sheet{i + 1}.xml"/>'
                for i in range(len(names))
            )
            + "</Relationships>",
        )
        for i, name in enumerate(names):
            body = "".join(
                f'<row r="{r + 1}">'
                + "".join(_cell(f"{chr(65 + c)}{r + 1}", v) for c, v in enumerate(row))
                + "</row>"
                for r, row in enumerate(sheets[name])
            )
            z.writestr(
                f"xl/worksheets/sheet{i + 1}.xml",
                f'<?xml version="1.0"?><worksheet {ns}><sheetData>{body}</sheetData></worksheet>',
            )
    return path


def test_xlsx_sheets_with_types(tmp_path: Path) -> None:
    book = write_xlsx(
        tmp_path / "book.xlsx",
        {
            "people": [["id", "name", "score", "ok"], [1, "ann", 1.5, True], [2, "bob", 3, False]],
            "notes": [["text"], ["hello"]],
        },
    )
    r = ingest("book", book)
    assert r.details == {"format": "xlsx", "sheet": "people"}
    assert rows("book") == [(1, "ann", 1.5, True), (2, "bob", 3.0, False)]
    assert [c["type"] for c in r.version.schema] == ["BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN"]
    assert rows(ingest("notes", book, options={"sheet": "notes"}).version.ref) == [("hello",)]
    with pytest.raises(InvalidInputError, match="no sheet 'nope' \\(sheets: people, notes\\)"):
        ingest("x", book, options={"sheet": "nope"})
    fake = tmp_path / "fake.xlsx"
    fake.write_text("id,name\n1,a\n")
    with pytest.raises(InvalidInputError, match="fake.xlsx: cannot read as xlsx"):
        ingest("x", fake)


def test_feather_and_arrow_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]})
    feather.write_feather(table, tmp_path / "t.feather")
    with (
        pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as writer,
    ):
        writer.write_table(table)
    for name in ("t.feather", "t.arrow"):
        r = ingest(name.replace(".", "_"), tmp_path / name)
        assert r.details["format"] == "arrow"
        assert rows(r.version.ref) == [(1, "a"), (2, "b"), (3, None)]
    (tmp_path / "junk.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(InvalidInputError, match="junk.arrow: cannot read as arrow"):
        ingest("junk", tmp_path / "junk.arrow")


def test_truncated_jpeg_is_quarantined_and_skipped_files_are_named(tmp_path: Path, cli) -> None:
    from PIL import Image

    root = tmp_path / "imgs"
    (root / "cat").mkdir(parents=True)
    buf = io.BytesIO()
    Image.effect_noise((64, 64), 50).convert("RGB").save(buf, "JPEG")
    data = buf.getvalue()
    (root / "cat" / "whole.jpg").write_bytes(data)
    (root / "cat" / "cut.jpg").write_bytes(data[: len(data) // 2])
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "labels.csv").write_text("a,b\n")
    r = ingest("imgs", root)
    assert (r.rows, r.rejected) == (1, 1)
    (bad,) = list_quarantine("imgs")
    assert bad["rule"] == "image.unreadable" and "cut.jpg" in bad["reason"]
    assert "truncated" in bad["reason"]
    assert r.details["skipped"] == 2
    assert r.details["skipped_files"] == ["cat/notes.txt", "labels.csv"]
    out = cli("data", "ingest", "imgs2", root)
    assert out.exit_code == 0, out.stderr
    assert "skipped 2 file(s) not of the folder's kind: cat/notes.txt, labels.csv" in out.stdout


def test_cli_reads_a_messy_csv_with_flags(tmp_path: Path, cli) -> None:
    src = tmp_path / "eu.csv"
    src.write_text("# export\nann;1,5;2\nbob;2,5\n", encoding="utf-8")
    r = cli(
        "data",
        "ingest",
        "eu",
        src,
        "--no-header",
        "--comment",
        "#",
        "--delimiter",
        ";",
        "--decimal",
        ",",
    )
    assert r.exit_code == 0, r.stderr
    assert "ingested 2 rows into eu@1" in r.stdout
    assert "padded 1 short row(s) with nulls" in r.stdout
    assert rows("eu") == [("ann", 1.5, 2), ("bob", 2.5, None)]
    # The leading '#' line is a comment even without --comment (no data line holds a '#').
    r = cli("data", "ingest", "eu2", src, "--no-header", "--delimiter", ";", "--strict")
    assert r.exit_code == 0 and "rejected 1 malformed line(s) (lines 3)" in r.stdout
    strict = ("--strict", "--min-kept-share", "0.9")
    r = cli("data", "ingest", "eu3", src, "--no-header", "--delimiter", ";", *strict)
    assert r.exit_code == 2 and "kept 1 of 2 rows" in r.stderr
    assert "nothing committed" in r.stderr
