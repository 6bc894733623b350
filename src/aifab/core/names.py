"""The one naming rule of aifab: names are full-matched (``$`` would accept a trailing newline).

Datasets and registered models share :data:`NAME`; deployments and job queues, which appear in
URLs, metric labels and Kubernetes objects, use the lower-case :data:`SLUG`.
"""

from __future__ import annotations

import re

from aifab.core.errors import InvalidInputError

__all__ = ["LABEL", "NAME", "NAME_RULE", "SLUG", "SLUG_RULE", "check_name", "is_full_match"]

#: Datasets and registered models: ASCII letters, digits, ``_ . -``; 1-200 characters.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")
NAME_RULE = "use letters, digits, '_', '-' and '.', starting with a letter or digit (up to 200)"
#: Deployments: lower-case letters, digits, ``_ . -``; 1-100 characters.
SLUG = re.compile(r"[a-z0-9][a-z0-9._\-]{0,99}")
SLUG_RULE = (
    "use lower-case letters, digits, '.', '_' and '-' (up to 100), starting with a letter or digit"
)
#: Other platform objects (monitors, policies, schedules, knowledge bases, agents): as NAME,
#: up to 100 characters (their tables' key columns).
SHORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")
#: Teams and projects (keys, jobs, budgets): letters, digits, ``_ . -``; 1-100, no spaces.
TEAM = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
#: Free-text labels (API key names): letters, digits, spaces, ``. _ -``; up to 100.
LABEL = re.compile(r"[A-Za-z0-9_.\- ]{0,100}")


def is_full_match(pattern: re.Pattern[str], value: object) -> bool:
    """Whether ``value`` is a string matching ``pattern`` as a whole (no trailing newline)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def check_name(
    name: object, kind: str, *, pattern: re.Pattern[str] = NAME, rule: str = NAME_RULE
) -> str:
    """Return ``name`` if it full-matches ``pattern``, else raise naming the rule.

    Args:
        name: the name to check.
        kind: what is named (``dataset``, ``model``, ``deployment``...), for the message.
        pattern: the rule (default :data:`NAME`).
        rule: the rule in words.

    Raises:
        InvalidInputError: ``{kind} name '...': {rule}``.
    """
    if not is_full_match(pattern, name):
        raise InvalidInputError(f"invalid {kind} name {name!r}: {rule}")
    assert isinstance(name, str)
    return name
