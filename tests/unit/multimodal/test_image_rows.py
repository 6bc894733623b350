"""Image columns of mixed rows at ingest (captions and fields beside image paths or bytes): a
row whose image is missing or corrupt is quarantined with a reason naming the file, in the
image folders' rule and form; the other rows land."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError


def _png(colour: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 10)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """A CSV of captions, a field and image paths: 3 good, 3 bad images (and one empty)."""
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(_png())
    (tmp_path / "img" / "b.jpg").write_bytes(_jpeg())
    (tmp_path / "img" / "half.png").write_bytes(_png()[:40])
    (tmp_path / "img" / "cut.jpg").write_bytes(_jpeg()[:-30])
    (tmp_path / "img" / "note.png").write_text("not an image at all\n")
    absolute = tmp_path / "img" / "c.png"
    absolute.write_bytes(_png((0, 0, 255)))
    rows = [
        ("a red square", 1.5, "img/a.png"),
        ("a green square", 2.0, "img/b.jpg"),
        ("a blue square", 3.0, str(absolute)),
        ("half a file", 4.0, "img/half.png"),
        ("a cut jpeg", 5.0, "img/cut.jpg"),
        ("text in disguise", 6.0, "img/note.png"),
        ("nothing there", 7.0, "img/gone.png"),
        ("no image", 8.0, ""),
    ]
    lines = ["caption,weight,image", *(f"{c},{w},{p}" for c, w, p in rows)]
    csv = tmp_path / "shots.csv"
    csv.write_text("\n".join(lines) + "\n")
    return csv


def _reasons(name: str) -> dict[str, str]:
    from aifab.data import list_quarantine

    items = list_quarantine(name, limit=50)
    assert {q["rule"] for q in items} == {"image.unreadable"}
    return {q["record"]["caption"]: q["reason"] for q in items}


def test_rows_with_unreadable_images_are_quarantined_naming_the_file(shots: Path) -> None:
    from aifab.data import head, ingest

    result = ingest("shots", str(shots), options={"image_columns": ["image"]})
    assert (result.rows, result.rejected) == (4, 4)
    reasons = _reasons("shots")
    assert reasons["half a file"].startswith("img/half.png: ")
    assert reasons["a cut jpeg"].startswith("img/cut.jpg: ")
    assert reasons["text in disguise"] == "img/note.png: not an image (no known image format)"
    assert reasons["nothing there"] == "img/gone.png: no such file"
    landed = head("shots", 10).to_pylist()
    assert [r["caption"] for r in landed] == [
        "a red square",
        "a green square",
        "a blue square",
        "no image",
    ]
    # Stored absolute, so training opens them from any working directory.
    assert landed[0]["image"] == str(shots.parent / "img" / "a.png")
    assert landed[3]["image"] is None
    assert result.details["unreadable_images"] == 4


def test_a_corrupt_image_in_a_bytes_column_names_its_row_and_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aifab.data import ingest

    images = pa.array([_png(), _png()[:-20], b"GIF89a junk", _jpeg()], pa.binary())
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"caption": ["ok", "cut", "junk", "fine"], "image": images}), path)
    result = ingest("blobs", str(path), options={"image_columns": ["image"]})
    assert (result.rows, result.rejected) == (2, 2)
    reasons = _reasons("blobs")
    assert reasons["cut"].startswith("row 1 column 'image': ")
    assert reasons["junk"].startswith("row 2 column 'image': ")
    from aifab.data import list_quarantine

    record = list_quarantine("blobs", limit=1)[0]["record"]
    assert record["image"].startswith("<") and record["image"].endswith(" bytes>")


@pytest.mark.parametrize(
    ("columns", "message"),
    [(["photo"], "'photo' is not a column"), (["weight"], "not file paths or image bytes")],
)
def test_bad_image_columns_are_named(shots: Path, columns: list[str], message: str) -> None:
    from aifab.data import ingest

    with pytest.raises(InvalidInputError, match=message):
        ingest("shots", str(shots), options={"image_columns": columns})


def test_mostly_broken_images_commit_nothing(tmp_path: Path) -> None:
    from aifab.data import ingest

    csv = tmp_path / "bad.csv"
    csv.write_text("caption,image\na,gone1.png\nb,gone2.png\nc,gone3.png\n")
    (tmp_path / "ok.png").write_bytes(_png())
    with open(csv, "a") as fh:
        fh.write("d,ok.png\n")
    with pytest.raises(InvalidInputError, match="kept 1 of 4 rows.*gone1.png: no such file"):
        ingest("bad", str(csv), options={"image_columns": ["image"]})


def test_cli_flag(cli: Any, shots: Path) -> None:
    r = cli("data", "ingest", "shots-cli", shots, "--image-column", "image", "--json")
    assert r.exit_code == 0, r.stderr
    assert '"rejected": 4' in r.stdout
