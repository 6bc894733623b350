"""JSON schemas of the Volcano objects aifab renders (Job, Queue) and the check against them.

Volcano ships CRDs, not a Python model, and ``kubernetes-validate`` knows only built-in kinds,
so aifab keeps its own schemas, written from Volcano's CRD field structure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from aifab.core.errors import InvalidInputError

_KINDS = {"Job": "job", "Queue": "queue", "PriorityClass": "priorityclass"}
_MAX_ERRORS = 5


@lru_cache(maxsize=len(_KINDS))
def load_schema(kind: str) -> dict[str, Any]:
    """The schema for ``"Job"``, ``"Queue"`` or ``"PriorityClass"``."""
    text = resources.files(__name__).joinpath(f"{_KINDS[kind]}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate(manifest: Mapping[str, Any]) -> None:
    """Check a Volcano Job or Queue (or a PriorityClass) manifest against the shipped schema.

    Raises:
        InvalidInputError: naming each bad field by path, e.g. ``spec.tasks[0].replicas``.
    """
    from jsonschema import Draft202012Validator

    kind = str(manifest.get("kind"))
    if kind not in _KINDS:
        expected = ", ".join(repr(k) for k in _KINDS)
        raise InvalidInputError(f"kind: expected one of {expected}, got {manifest.get('kind')!r}")
    errors = sorted(
        Draft202012Validator(load_schema(kind)).iter_errors(manifest),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    if errors:
        parts = [f"{field_path(list(e.absolute_path))}: {e.message}" for e in errors[:_MAX_ERRORS]]
        more = f" (and {len(errors) - _MAX_ERRORS} more)" if len(errors) > _MAX_ERRORS else ""
        raise InvalidInputError(f"{kind} manifest: {'; '.join(parts)}{more}")


def field_path(parts: list[str | int]) -> str:
    """``["spec", "tasks", 0, "name"]`` -> ``"spec.tasks[0].name"``."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"
