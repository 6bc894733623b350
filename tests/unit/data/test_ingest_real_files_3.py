"""Ingest of real-world file shapes, round three (issue 34): each test generates a file of one
shape and ingests it through ``aifab data ingest``.

Nothing may be reinterpreted silently: a reading a person could take two ways (date order,
header, booleans) is settled the way they would expect and named in the summary with the
option that changes it; every other shape is read or refused naming an option that works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aifab.data import lake
from aifab.data.catalog import resolve


def rows(ref: str) -> list[tuple]:
    return lake.connect().execute(f"SELECT * FROM {resolve(ref).scan_sql()}").fetchall()


def columns(ref: str) -> list[str]:
    return list(resolve(ref).columns)


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def ingest_ok(cli: Any, name: str, src: Path, *flags: str) -> str:
    r = cli("data", "ingest", name, src, *flags)
    assert r.exit_code == 0, r.stderr
    return r.stdout


# 1. M/D/YY dates: ambiguous columns read month first, and the summary says so


def _monthly(day_first: bool = False) -> str:
    lines = ["date,value"]
    for year in range(1985, 1988):
        for month in range(1, 13):
            day = 1 if not day_first else 13
            first, second = (day, month) if day_first else (month, day)
            lines.append(f"{first}/{second}/{year % 100:02d},{year * month}")
    return "\n".join(lines) + "\n"


def test_ambiguous_dates_read_month_first_and_named_in_summary(tmp_path: Path, cli: Any) -> None:
    import datetime as dt

    src = write(tmp_path / "monthly.csv", _monthly())
    out = ingest_ok(cli, "monthly", src)
    got = rows("monthly")
    assert [r[0] for r in got[:3]] == [
        dt.date(1985, 1, 1),
        dt.date(1985, 2, 1),
        dt.date(1985, 3, 1),
    ]
    assert "month first" in out and "--dayfirst" in out
    # --dayfirst reads them day first; --strict keeps the text
    ingest_ok(cli, "monthly_d", src, "--dayfirst")
    assert rows("monthly_d")[1][0] == dt.date(1985, 1, 2)
    out = ingest_ok(cli, "monthly_s", src, "--strict")
    assert rows("monthly_s")[1][0] == "2/1/85" and "kept as text" in out


def test_a_value_that_proves_day_first_keeps_day_first(tmp_path: Path, cli: Any) -> None:
    import datetime as dt

    out = ingest_ok(cli, "dmy", write(tmp_path / "dmy.csv", _monthly(day_first=True)))
    assert rows("dmy")[1][0] == dt.date(1985, 2, 13)
    assert "day first" in out


# 2. header-less text tables: names from the '#' comment line, never the first row


def test_headerless_text_table_takes_names_from_the_comment_line(tmp_path: Path, cli: Any) -> None:
    body = "".join(f"{chr(65 + i % 26)}{chr(65 + i // 26)}\tCountry {i}\n" for i in range(40))
    src = write(tmp_path / "countries.tsv", "#country-code\tname\n" + body)
    out = ingest_ok(cli, "countries", src)
    assert columns("countries") == ["country-code", "name"]
    assert len(rows("countries")) == 40 and rows("countries")[0] == ("AA", "Country 0")
    assert "comment line" in out and "--header" in out


def test_headerless_text_table_without_names_keeps_its_first_row(tmp_path: Path, cli: Any) -> None:
    body = "".join(f"Zone/City{i}\tUTC+{i % 12}\tcomment {i}\n" for i in range(30))
    src = write(tmp_path / "zones.tab", "# time zones, one a line\n# source: a tool\n" + body)
    out = ingest_ok(cli, "zones", src, "--format", "tsv")
    assert len(rows("zones")) == 30 and rows("zones")[0][0] == "Zone/City0"
    assert "read as a row" in out


# 4. Yes/No: BOOLEAN said out loud, text under --strict


def test_yes_no_is_named_and_kept_as_text_under_strict(tmp_path: Path, cli: Any) -> None:
    src = write(
        tmp_path / "yn.csv",
        "id,flag\n" + "".join(f"{i},{'Yes' if i % 2 else 'No'}\n" for i in range(20)),
    )
    out = ingest_ok(cli, "yn", src)
    assert "BOOLEAN" in out and "--strict" in out
    out = ingest_ok(cli, "yn_s", src, "--strict")
    assert [r[1] for r in rows("yn_s")[:2]] == ["No", "Yes"]


# 3. rows of 3 then 4 fields under a commented header line padded with extra tabs


def test_three_then_four_field_rows_are_padded_not_skipped(tmp_path: Path, cli: Any) -> None:
    lines = ["# a data file", "#id\tname\tscore\t\t\ttag"]
    for i in range(418):
        fields = [f"id{i}", f"name {i}", f"{i * 0.5}"] + ([f"tag{i}"] if i >= 215 else [])
        lines.append("\t".join(fields))
    src = write(tmp_path / "ragged.tsv", "\n".join(lines) + "\n")
    out = ingest_ok(cli, "ragged", src)
    got = rows("ragged")
    assert len(got) == 418 and columns("ragged") == ["id", "name", "score", "tag"]
    assert got[0] == ("id0", "name 0", 0.0, None) and got[300][3] == "tag300"
    assert "padded 215 short row(s)" in out and "comment line" in out


# 5. UTF-16LE without a BOM: recognized by its zero bytes, and --encoding works for .txt


def test_utf16_without_bom_is_read_as_utf16(tmp_path: Path, cli: Any) -> None:
    table = "id,name\n" + "".join(f"{i},naïve {i}\n" for i in range(20))
    out = ingest_ok(cli, "u16", write(tmp_path / "t.csv", table.encode("utf-16-le")))
    assert rows("u16")[1] == (1, "naïve 1") and "utf-16-le" in out and "--encoding" in out
    doc = write(tmp_path / "d.txt", "Hello\nsecond line é\n".encode("utf-16-le"))
    ingest_ok(cli, "u16doc", doc)
    assert "second line é" in rows("u16doc")[0][2]
    ingest_ok(cli, "u16doc2", doc, "--encoding", "utf-16-le")
    assert "second line é" in rows("u16doc2")[0][2]


# 8. R's write.table: the header has one field fewer than the rows (row names)


def test_r_write_table_row_names_get_their_own_column(tmp_path: Path, cli: Any) -> None:
    body = "".join(f'"{i + 1}",{150 + i},{50.5 + i},"g{i % 3}"\n' for i in range(30))
    out = ingest_ok(cli, "rcsv", write(tmp_path / "r.csv", '"height","weight","group"\n' + body))
    assert columns("rcsv") == ["row_name", "height", "weight", "group"]
    assert rows("rcsv")[0] == (1, 150, 50.5, "g0") and "row_name" in out
    spaced = "".join(f'"r{i + 1}" {150 + i} {50.5 + i} "g{i % 3}"\n' for i in range(30))
    ingest_ok(
        cli,
        "rtxt",
        write(tmp_path / "r.txt", '"height" "weight" "group"\n' + spaced),
        "--format",
        "csv",
    )
    assert rows("rtxt")[0] == ("r1", 150, 50.5, "g0")


# 7. free-text preambles above a table aligned with spaces


def test_free_text_preamble_above_a_spaced_table_is_skipped_and_named(
    tmp_path: Path, cli: Any
) -> None:
    pre = ["NIST/ITL StRD", "Dataset Name:  Longley", "", "File Format:   ASCII"]
    pre += [f"Description line {i} of free text, with words." for i in range(50)]
    pre += ["", "Data:       y          x1           x2"]
    data = [f"    {60323 + i}     {83.0 + i:.1f}     {234289 + 7 * i}" for i in range(16)]
    src = write(tmp_path / "longley.dat", "\n".join(pre + data) + "\n")
    out = ingest_ok(cli, "longley", src, "--format", "csv")
    got = rows("longley")
    assert len(got) == 16 and got[0] == (60323, 83.0, 234289)
    assert "skipped" in out and "--skip-rows" in out
    title = "Table 3: results\n================\nname    value   count\n"
    body = "".join(f"item{i}   {i * 1.5}   {i}\n" for i in range(10))
    ingest_ok(cli, "titled", write(tmp_path / "t.txt", title + body), "--format", "csv")
    assert columns("titled") == ["name", "value", "count"] and len(rows("titled")) == 10


def test_skip_rows_reads_a_comma_table_below_prose(tmp_path: Path, cli: Any) -> None:
    prose = "This file holds the results.\nSee the report, page 3, for the method.\n\n"
    table = "a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(10))
    src = write(tmp_path / "p.csv", prose + table)
    ingest_ok(cli, "prose", src, "--skip-rows", "3")
    assert columns("prose") == ["a", "b"] and len(rows("prose")) == 10


# 9. a '#' preamble above a space- or colon-separated table


def test_comment_preamble_above_space_and_colon_tables(tmp_path: Path, cli: Any) -> None:
    spaced = "# generated list\n# fields: name value count\n" + "".join(
        f"item{i} {i} {i * 2}\n" for i in range(6)
    )
    src = write(tmp_path / "s.txt", spaced)
    for flags in ((), ("--comment", "#")):
        name = f"spaced{len(flags)}"
        ingest_ok(cli, name, src, "--format", "csv", *flags)
        assert rows(name)[0] == ("item0", 0, 0) and len(rows(name)) == 6
        assert columns(name) == ["column0", "column1", "column2"]
    aliases = "# mail aliases\n# see the manual\nmailer-daemon:postmaster\n" + "".join(
        f"alias{i}:root\n" for i in range(5)
    )
    src = write(tmp_path / "aliases", aliases)
    for flags in ((), ("--comment", "#")):
        name = f"aliases{len(flags)}"
        out = ingest_ok(cli, name, src, "--format", "csv", *flags)
        assert rows(name)[0] == ("mailer-daemon", "postmaster") and len(rows(name)) == 6
        assert "--header" in out


# 6. a single image file is a one-row image table


def test_single_image_file_is_a_one_row_image_table(tmp_path: Path, cli: Any) -> None:
    from PIL import Image

    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg")):
        src = tmp_path / f"one.{ext}"
        Image.new("RGB", (7, 5), (200, 10, 10)).save(src, fmt)
        ingest_ok(cli, f"one_{ext}", src)
        got = rows(f"one_{ext}")
        assert len(got) == 1 and got[0][0] == str(src) and got[0][2:5] == (7, 5, fmt)
    broken = write(tmp_path / "broken.png", b"\x89PNG\r\n\x1a\nnot really")
    r = cli("data", "ingest", "broken", broken)
    assert r.exit_code != 0 and "not a readable image" in r.stderr


# 10. ARFF, ORC, archives and gzip'd documents are read; XML is refused saying what to do


def test_arff_orc_archives_and_gzipped_documents(tmp_path: Path, cli: Any) -> None:
    import gzip
    import io
    import tarfile
    import zipfile

    import pyarrow as pa
    import pyarrow.orc as orc

    arff = (
        "% the iris data\n@RELATION iris\n\n@ATTRIBUTE sepallength NUMERIC\n"
        "@ATTRIBUTE 'class name' {Iris-setosa,Iris-versicolor}\n@DATA\n"
        "5.1,Iris-setosa\n?,'Iris-versicolor'\n4.9,Iris-setosa\n"
    )
    ingest_ok(cli, "iris", write(tmp_path / "iris.arff", arff))
    assert columns("iris") == ["sepallength", "class name"]
    assert rows("iris") == [(5.1, "Iris-setosa"), (None, "Iris-versicolor"), (4.9, "Iris-setosa")]
    orc.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), tmp_path / "t.orc")
    ingest_ok(cli, "orc", tmp_path / "t.orc")
    assert rows("orc") == [(1, "x"), (2, "y")]
    table = "id,name\n1,a\n2,b\n"
    with zipfile.ZipFile(tmp_path / "one.zip", "w") as zf:
        zf.writestr("data/table.csv", table)
    ingest_ok(cli, "zipped", tmp_path / "one.zip")
    assert rows("zipped") == [(1, "a"), (2, "b")]
    with tarfile.open(tmp_path / "docs.tar.xz", "w:xz") as tf:
        for name in ("a.txt", "b.md"):
            info = tarfile.TarInfo(name)
            info.size = len(f"text of {name}")
            tf.addfile(info, io.BytesIO(f"text of {name}".encode()))
    ingest_ok(cli, "tarred", tmp_path / "docs.tar.xz")
    assert sorted(r[2] for r in rows("tarred")) == ["text of a.txt", "text of b.md"]
    write(tmp_path / "notes.txt.gz", gzip.compress(b"gzip'd notes\n"))
    ingest_ok(cli, "gzdoc", tmp_path / "notes.txt.gz")
    assert rows("gzdoc")[0][2].startswith("gzip'd notes")
    r = cli("data", "ingest", "xml", write(tmp_path / "d.xml", "<a><b>1</b></a>"))
    assert r.exit_code != 0 and "convert it to CSV" in r.stderr and "--format" not in r.stderr


# 11. the quarantine list fits an 80-column terminal, reason first and whole


def test_quarantine_list_fits_80_columns_with_the_whole_reason(
    tmp_path: Path, workspace: Path
) -> None:
    import os
    import subprocess
    import sys

    table = "a,b,c\n" + "".join(f"{i},{i},{i}\n" for i in range(20)) + "1,2\n"
    src = write(tmp_path / "short.csv", table)
    env = {**os.environ, "COLUMNS": "80", "AIFAB_HOME": str(workspace)}
    aifab = [sys.executable, "-c", "from aifab.cli.main import main; main()"]
    done = subprocess.run([*aifab, "data", "ingest", "q", src, "--strict"], env=env, check=False)
    assert done.returncode == 0
    shown = subprocess.run(
        [*aifab, "data", "quarantine", "q"], env=env, capture_output=True, text=True, check=True
    )
    lines = shown.stdout.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), shown.stdout
    flat = " ".join(line.strip() for line in lines)
    assert "Expected Number of Columns: 3 Found: 2" in flat and "1,2" in flat
    assert "without --strict" in flat  # the option that keeps the row, not --delimiter


def test_header_as_wide_as_the_rows_is_not_taken_for_row_names(tmp_path: Path, cli: Any) -> None:
    # A ':' inside the first field must not make the file look like R's row-names shape.
    table = "dates, cpi, predict\n" + "".join(f"1950:{q}, {28.9 + q},\n" for q in range(1, 9))
    table += "".join(f"1952:{q}, {28.9 + q}\n" for q in range(1, 3))  # ragged on ','
    out = ingest_ok(cli, "colons", write(tmp_path / "f.csv", table))
    assert columns("colons") == ["dates", "cpi", "predict"] and "row_name" not in out


def test_text_table_whose_first_line_looks_like_its_rows_keeps_it(tmp_path: Path, cli: Any) -> None:
    # a locale list: no comment, no header, every field text shaped like the ones below
    body = "".join(f"aa_D{chr(65 + i)}.UTF-8 UTF-8\n" for i in range(12))
    src = write(tmp_path / "SUPPORTED", body)
    out = ingest_ok(cli, "locales", src, "--format", "csv")
    assert len(rows("locales")) == 12 and rows("locales")[0] == ("aa_DA.UTF-8", "UTF-8")
    assert "--header" in out
    # a header that differs in shape from its rows is still a header
    ingest_ok(cli, "named", write(tmp_path / "n.csv", "name,city\nAlice,Paris\nBob,Rome\n"))
    assert columns("named") == ["name", "city"]


def test_lowercase_text_header_stays_a_header_and_comment_labels_are_dropped(
    tmp_path: Path, cli: Any
) -> None:
    nations, relations = ["usa", "uk", "china", "brazil", "india"], ["treaties", "embargo"]
    body = "".join(
        f"{nations[i % 5]},{relations[i % 2]},{nations[(i + 1) % 5]},train\n" for i in range(30)
    )
    ingest_ok(cli, "kg", write(tmp_path / "kg.csv", "head,relation,tail,split\n" + body))
    assert columns("kg") == ["head", "relation", "tail", "split"] and len(rows("kg")) == 30
    commented = "# columns: invoice, customer\n" + "".join(f"{i},c{i}\n" for i in range(5))
    ingest_ok(cli, "inv", write(tmp_path / "inv.csv", commented))
    assert columns("inv") == ["invoice", "customer"] and len(rows("inv")) == 5
