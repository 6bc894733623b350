"""Error types shared by every layer; each maps to one HTTP status and one CLI exit code."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (library errors run to many), else its type."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class AifabError(Exception):
    """Base class for errors that users can act on (shown as one line, never a traceback)."""

    http_status = 400
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(AifabError):
    """Bad input: a wrong config key or type, a malformed file, a SQL error in user SQL."""

    http_status = 422
    exit_code = 2


class NotFoundError(AifabError):
    """A named thing (dataset, version, job, model) does not exist."""

    http_status = 404


class ConflictError(AifabError):
    """The request conflicts with the current state (e.g. a name already taken)."""

    http_status = 409


class IntegrityError(AifabError):
    """Stored state failed a consistency check (e.g. a broken audit chain)."""

    http_status = 500
    exit_code = 3


class BudgetExceededError(AifabError):
    """A team's budget for the current period is spent: no new jobs or gateway calls."""

    http_status = 429
    exit_code = 4
