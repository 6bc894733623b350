"""Ingest of a Parquet BLOB column of images: a cell whose header claims 100,000 x 100,000
pixels is quarantined with its reason and the other rows are kept (issue 31, item 6)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from aifab.data import ingest, list_quarantine


def _png(side: int = 4) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (side, side), (200, 10, 10)).save(buf, format="PNG")
    return buf.getvalue()


def _claims(width: int, height: int) -> bytes:
    """A small PNG whose IHDR (CRC fixed) claims ``width`` x ``height``."""
    png = bytearray(_png())
    ihdr = bytes(png[12:16]) + struct.pack(">II", width, height) + bytes(png[24:29])
    png[16:24] = struct.pack(">II", width, height)
    png[29:33] = struct.pack(">I", zlib.crc32(ihdr))
    return bytes(png)


def test_a_bomb_cell_is_quarantined_and_the_rest_kept(workspace: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "photos.parquet"
    images = [_png(), _claims(100_000, 100_000), _png(8)]
    pq.write_table(pa.table({"id": [1, 2, 3], "image": pa.array(images, pa.binary())}), path)
    result = ingest("photos", str(path))
    assert result.rows == 2 and result.rejected == 1
    (item,) = list_quarantine("photos")
    assert item["rule"] == "image_pixels"
    assert "column 'image'" in item["reason"] and "too large" in item["reason"]
    from aifab.data.catalog import ensure_profile

    assert ensure_profile(result.version)["columns"]["image"]["images"]["width"] == [4, 8]
