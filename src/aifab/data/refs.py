"""Dataset references: ``NAME`` (latest), ``NAME@3``, ``NAME@v3``, ``NAME@<hash>``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from aifab.core import names
from aifab.core.errors import InvalidInputError

_HASH = re.compile(r"^[0-9a-f]{6,64}$")


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid dataset name (:data:`aifab.core.names.NAME`)."""
    return names.check_name(name, "dataset")


@dataclass(frozen=True)
class DatasetRef:
    """A parsed reference; ``version`` and ``content_hash`` are both ``None`` for latest."""

    name: str
    version: int | None = None
    content_hash: str | None = None

    def __str__(self) -> str:
        if self.version is not None:
            return f"{self.name}@{self.version}"
        if self.content_hash is not None:
            return f"{self.name}@{self.content_hash}"
        return self.name


def parse_ref(text: str) -> DatasetRef:
    """Parse ``NAME[@VERSION]``; raise :class:`InvalidInputError` on a malformed reference."""
    name, sep, ver = text.strip().partition("@")
    check_name(name)
    if not sep or ver in ("", "latest"):
        return DatasetRef(name)
    digits = ver[1:] if ver[:1] in ("v", "V") else ver
    if digits.isdigit() and (ver[:1] in ("v", "V") or len(digits) < 6):
        return DatasetRef(name, version=int(digits))
    if _HASH.fullmatch(ver):
        return DatasetRef(name, content_hash=ver)
    if digits.isdigit():
        return DatasetRef(name, version=int(digits))
    raise InvalidInputError(
        f"invalid version {ver!r} in {text!r}: use a number (3 or v3), 'latest' or a content hash"
    )
