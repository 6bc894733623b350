"""Thumbnails of image columns on the data pages: a route of its own that answers a PNG made
from the cell (downscaled, capped, ``nosniff``), and a 4xx, never the stored bytes, for a cell
that is not an image. Browser-free: HTTP requests through the app."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aifab.serve.app import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import sign_in  # noqa: E402

HTML = b"<html><script>alert(document.cookie)</script></html>"


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aifab.data import ingest

    path = tmp_path / "shots.parquet"
    images = pa.array([_png(600, 400), HTML, None, _png(20, 10)], pa.binary())
    pq.write_table(pa.table({"id": [0, 1, 2, 3], "image": images}), path)
    ingest("shots", str(path))
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        sign_in(c)
        yield c


def test_the_preview_shows_thumbnails_served_as_small_pngs(client: TestClient) -> None:
    from PIL import Image

    page = client.get("/ui/data/shots/versions/1")
    assert page.status_code == 200
    assert page.text.count('<img class="thumb" src="/ui/data/shots/versions/1/thumbnail?') == 3
    r = client.get("/ui/data/shots/versions/1/thumbnail", params={"column": "image", "row": 0})
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/png"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in r.headers["content-security-policy"]
    with Image.open(io.BytesIO(r.content)) as im:
        assert im.format == "PNG" and max(im.size) == 128 and im.size == (128, 85)
    small = client.get("/ui/data/shots/versions/1/thumbnail", params={"column": "image", "row": 3})
    with Image.open(io.BytesIO(small.content)) as im:
        assert im.size == (20, 10)  # never upscaled


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({"column": "image", "row": 1}, 400, "not a readable image (no known image format)"),
        ({"column": "image", "row": 2}, 400, "empty (no image)"),
        ({"column": "id", "row": 0}, 400, "not images"),
        ({"column": "nope", "row": 0}, 400, "no column"),
        ({"column": "image", "row": 9}, 404, "has no row 9"),
    ],
)
def test_anything_but_an_image_is_a_4xx_never_the_stored_bytes(
    client: TestClient, params: dict[str, object], status: int, message: str
) -> None:
    r = client.get("/ui/data/shots/versions/1/thumbnail", params=params)
    assert r.status_code == status, r.text
    assert message in r.text
    assert not r.headers["content-type"].startswith("image/")
    assert b"<script>alert" not in r.content
