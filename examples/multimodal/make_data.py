"""Render the multimodal example: parcels whose route needs the sticker, the note and the weight.

Each row is a 32x32 PNG of a coloured sticker (with a caption saying what it shows, for the
dual encoder and text-to-image search) (circle, square or triangle; random colours,
size and place), a free-text note naming a destination city, and a weight in kg. The label is
the route: parcels over 20 kg go as ``freight``; the others go to a bay named by the city's
region (letter, A-C: only in the note) and the sticker's shape (digit, 1-3: only in the
image), e.g. ``B3``. So the image alone or the note alone gets about a third of the light
parcels right, while the three together decide every route. Deterministic (seeded),
so the committed Parquet file is exactly this script's output:

    python examples/multimodal/make_data.py          # --rows N --out FILE
    python examples/multimodal/make_data.py --images examples/multimodal/images

``--images DIR`` also writes the first 24 held-out (test split) stickers as PNG files with a
``captions.csv``: the folder an image knowledge base is built from (``aifab kb create``).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data" / "parcels.parquet"
SHAPES = ("circle", "square", "triangle")
CITIES = (("oslo", "bergen", "tromso"), ("lyon", "nice", "lille"), ("porto", "braga", "faro"))
COLOURS = ("red", "green", "blue", "orange", "purple")
RGB = {
    "red": (200, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 70, 200),
    "orange": (230, 140, 30),
    "purple": (130, 50, 160),
}
NOTES = (
    "parcel for {city}, {colour} sticker",
    "{colour} sticker; ship to {city}",
    "to {city} please ({colour} label)",
    "deliver in {city}. sticker is {colour}",
)


def sticker(rng: np.random.Generator, shape: int, colour: str) -> tuple[bytes, str]:
    """One PNG (a light background with the sticker drawn somewhere) and its caption."""
    from PIL import Image, ImageDraw

    bg = tuple(int(v) for v in rng.integers(200, 256, 3))
    im = Image.new("RGB", (32, 32), bg)
    draw = ImageDraw.Draw(im)
    r = int(rng.integers(6, 12))
    cx, cy = (int(v) for v in rng.integers(r + 1, 32 - r - 1, 2))
    box = (cx - r, cy - r, cx + r, cy + r)
    fill = RGB[colour]
    if SHAPES[shape] == "circle":
        draw.ellipse(box, fill=fill)
    elif SHAPES[shape] == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    where = f"{'top' if cy < 16 else 'bottom'} {'left' if cx < 16 else 'right'}"
    caption = f"a {'small' if r < 9 else 'large'} {colour} {SHAPES[shape]} at the {where}"
    return buf.getvalue(), caption


def rows(n: int, seed: int = 24) -> dict[str, list]:
    """``n`` parcels as columns: id, image, caption, note, weight_kg, route, split.

    ``image`` is PNG bytes; ``caption`` says what the image shows (for text-to-image search).
    """
    rng = np.random.default_rng(seed)
    keys = ("id", "image", "caption", "note", "weight_kg", "route", "split")
    out: dict[str, list] = {k: [] for k in keys}
    for i in range(n):
        shape, group = int(rng.integers(3)), int(rng.integers(3))
        colour = COLOURS[int(rng.integers(len(COLOURS)))]
        city = CITIES[group][int(rng.integers(3))]
        heavy = rng.random() < 0.15
        weight = float(rng.uniform(21, 40) if heavy else rng.uniform(0.5, 19))
        out["id"].append(i)
        image, caption = sticker(rng, shape, colour)
        out["image"].append(image)
        out["caption"].append(caption)
        out["note"].append(NOTES[int(rng.integers(len(NOTES)))].format(city=city, colour=colour))
        out["weight_kg"].append(round(weight, 2))
        out["route"].append("freight" if heavy else f"{'ABC'[group]}{shape + 1}")
        share = i / n
        out["split"].append("train" if share < 0.8 else "valid" if share < 0.9 else "test")
    return out


def main() -> None:
    """Write the Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--images", type=Path, default=None, help="also write a PNG folder")
    args = parser.parse_args()
    cols = rows(args.rows)
    table = pa.table({**cols, "image": pa.array(cols["image"], pa.binary())})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, args.out, compression="zstd")
    print(f"wrote {args.out} ({table.num_rows} rows, {args.out.stat().st_size} bytes)")
    if args.images is not None:
        write_images(cols, args.images)


def write_images(cols: dict[str, list], folder: Path, n: int = 24) -> None:
    """The first ``n`` test-split stickers as ``parcel-<id>.png`` plus ``captions.csv``."""
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    test = [i for i, s in enumerate(cols["split"]) if s == "test"][:n]
    with (folder / "captions.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["file", "caption"])
        for i in test:
            name = f"parcel-{cols['id'][i]}.png"
            (folder / name).write_bytes(cols["image"][i])
            out.writerow([name, cols["caption"][i]])
    print(f"wrote {len(test)} images and captions.csv to {folder}")


if __name__ == "__main__":
    main()
