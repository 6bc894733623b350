"""Zip and tar archives, and gzip'd documents, unpacked into the workspace's ``tmp/``.

An archive of one table is that table; an archive of documents or images is that folder.
Members are extracted with the standard library's safe filters (no paths outside the
folder, no links or devices).
"""

from __future__ import annotations

import gzip
import shutil
import tarfile
import zipfile
from pathlib import Path

from aifab.core.errors import InvalidInputError

_TAR = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def kind_of(path: Path, doc_extensions: frozenset[str]) -> str | None:
    """``zip``, ``tar`` or ``gzdoc`` (a gzip'd document such as ``notes.txt.gz``), or ``None``."""
    name = path.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith(_TAR):
        return "tar"
    if name.endswith(".gz") and Path(name[:-3]).suffix in doc_extensions:
        return "gzdoc"
    return None


def unpack(path: Path, kind: str, into: Path) -> list[Path]:
    """Extract ``path`` into the folder ``into``; return the regular files extracted.

    Raises:
        InvalidInputError: a corrupt archive.
    """
    into.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    target = (into / info.filename).resolve()
                    if not info.is_dir() and target.is_relative_to(into.resolve()):
                        zf.extract(info, into)
        elif kind == "tar":
            with tarfile.open(path) as tf:
                tf.extractall(into, filter="data")
        else:
            with gzip.open(path, "rb") as fin, (into / path.name[:-3]).open("wb") as fout:
                shutil.copyfileobj(fin, fout)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise InvalidInputError(f"{path}: cannot unpack: {exc}") from None
    return sorted(
        p for p in into.rglob("*") if p.is_file() and not p.name.startswith((".", "__MACOSX"))
    )
