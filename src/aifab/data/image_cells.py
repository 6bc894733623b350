"""Image cells at ingest: a row whose image header claims a decompression bomb is quarantined.

A BLOB cell is read for its header only (allowed formats, :mod:`aifab.data.image_decode`);
one whose claimed width x height is over :data:`INGEST_MAX_PIXELS` would stop every later
step that decodes it (the profile, thumbnails, training), so its row goes to the quarantine
with the reason and the rest of the file is kept. Cells that are not images are left alone.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import duckdb

from aifab.data.image_decode import ImageTooLarge, image_header
from aifab.data.lake import sql_ident, sql_string
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.staged import Staged

__all__ = ["INGEST_MAX_PIXELS", "drop_image_bombs"]

#: Pillow's own decompression-bomb limit (2 x its MAX_IMAGE_PIXELS): the size it refuses.
INGEST_MAX_PIXELS = 178_956_970
_FETCH = 256


def drop_image_bombs(con: duckdb.DuckDBPyConnection, staged: Staged) -> Staged:
    """``staged`` without the rows whose image cells are over :data:`INGEST_MAX_PIXELS`.

    The staged Parquet file is rewritten only when such a row exists; the rows join the
    staged rejects (rule ``image_pixels``) with the column and the reason.
    """
    scan = f"read_parquet({sql_string(str(staged.path))}, file_row_number = true)"
    blobs = [
        str(name)
        for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
        if str(kind).upper() == "BLOB" and name != "file_row_number"
    ]
    bad: dict[int, QuarantineItem] = {}
    for column in blobs:
        cur = con.execute(
            f"SELECT file_row_number, {sql_ident(column)} FROM {scan} "
            f"WHERE {sql_ident(column)} IS NOT NULL"
        )
        while rows := cur.fetchmany(_FETCH):
            for row, value in rows:
                try:
                    image_header(bytes(value), INGEST_MAX_PIXELS)
                except ImageTooLarge as exc:
                    reason = f"column {column!r}: {exc}"
                    bad.setdefault(int(row), QuarantineItem("image_pixels", reason, {"row": row}))
                except ValueError:
                    continue  # not an image (or not one we open): the cell stays as it is
    if not bad:
        return staged
    kept = staged.path.with_name(staged.path.stem + "-kept.parquet")
    dropped = ", ".join(str(r) for r in sorted(bad))
    con.execute(
        f"COPY (SELECT * EXCLUDE (file_row_number) FROM {scan} "
        f"WHERE file_row_number NOT IN ({dropped}) ORDER BY file_row_number) "
        f"TO {sql_string(str(kept))} (FORMAT parquet)"
    )
    Path(kept).replace(staged.path)
    return replace(
        staged,
        rejected=staged.rejected + len(bad),
        rejects=itertools.chain(staged.rejects, bad.values()),
    )
