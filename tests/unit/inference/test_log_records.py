"""What the request log keeps of an input too big for its field: thumbnails, whole records."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
from PIL import Image

from aifab.inference.log_records import fit_records, thumbnail_of
from aifab.inference.request_log import MAX_FIELD_BYTES, _json_field


def _png(side: int, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def test_big_images_become_thumbnails_with_their_real_size() -> None:
    photo = base64.b64encode(_png(200)).decode()
    field = {"records": [{"image": "data:image/png;base64," + photo, "n": i} for i in range(5)]}
    kept = _json_field({**field, "items": 5})
    assert kept is not None and len(json.dumps(kept)) <= MAX_FIELD_BYTES
    assert kept["items"] == 5 and kept["records_dropped"] == 0
    first = kept["records"][0]["image"]
    assert (first["width"], first["height"]) == (200, 200) and first["bytes"] > 100_000
    with Image.open(io.BytesIO(base64.b64decode(first["thumbnail"]))) as im:
        assert max(im.size) == 32
    assert [r["n"] for r in kept["records"]] == list(range(5))


def test_records_that_do_not_fit_are_counted_not_silently_lost() -> None:
    text = "x" * 3000  # not an image: kept as is while it fits
    kept = fit_records({"records": [{"t": text}] * 40}, 20_000)
    assert kept is not None and len(json.dumps(kept)) <= 20_000
    assert len(kept["records"]) + kept["records_dropped"] == 40 and kept["records_dropped"] > 0
    junk = fit_records({"records": [{"t": "A" * 10_000}]}, 1000)
    assert junk is not None and junk["records"][0]["t"] == {"truncated": True, "chars": 10_000}


def test_inputs_without_records_or_unreadable_images_get_a_size_note() -> None:
    big = {"value": "y" * (MAX_FIELD_BYTES + 1)}
    assert _json_field(big) == {"truncated": True, "bytes": len(json.dumps(big))}
    assert thumbnail_of(b"\x89PNG not really") is None
    # A header claiming 30000x30000 pixels is refused before any pixel is decoded.
    bomb = io.BytesIO()
    Image.new("1", (30_000, 30_000)).save(bomb, format="PNG")
    assert thumbnail_of(bomb.getvalue()) is None
