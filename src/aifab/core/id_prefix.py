"""Ids typed short: a unique prefix names its row, as git and docker take abbreviated ids."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute, Session

from aifab.core.errors import InvalidInputError

__all__ = ["MIN_PREFIX", "complete_id"]

#: Shortest prefix looked up (git's minimum): shorter ones would match half the table.
MIN_PREFIX = 4
#: Matches named in the "ambiguous" error.
_SHOWN = 5


def complete_id(session: Session, column: InstrumentedAttribute[Any], given: str, what: str) -> str:
    """The full id in ``column`` that ``given`` names: itself, or the one id it prefixes.

    Args:
        session: an open session.
        column: the id column (``JobRow.id``).
        given: what the user typed.
        what: the kind of id, for messages ("job", "API key").

    Returns:
        ``given`` when no id starts with it (the caller reports it missing), else the id.

    Raises:
        InvalidInputError: several ids start with ``given`` (the message lists some).
    """
    if len(given) < MIN_PREFIX or session.scalar(select(column).where(column == given)):
        return given
    escaped = given.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = list(
        session.scalars(
            select(column).where(column.like(f"{escaped}%", escape="\\")).limit(_SHOWN + 1)
        )
    )
    if len(found) > 1:
        shown = ", ".join(sorted(found)[:_SHOWN]) + (", ..." if len(found) > _SHOWN else "")
        raise InvalidInputError(f"{what} {given!r} is ambiguous: it starts {shown}")
    return found[0] if found else given
