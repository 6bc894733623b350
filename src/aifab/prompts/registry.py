"""The prompt registry: immutable versions, aliases (``NAME@prod``), rendering; audited changes."""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aifab.core import workers
from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import BudgetExceededError, InvalidInputError, NotFoundError
from aifab.core.ids import digest
from aifab.core.names import is_full_match
from aifab.prompts import template as tpl
from aifab.prompts.sandbox import MAX_RENDER_S
from aifab.prompts.tables import PromptAliasRow, PromptVersionRow, as_dict

__all__ = [
    "create_prompt",
    "get_prompt",
    "list_prompts",
    "parse_prompt_ref",
    "render_prompt",
    "set_prompt_alias",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def _check_name(name: str) -> str:
    if not is_full_match(_NAME, name):
        raise InvalidInputError(
            f"prompt name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)"
        )
    return name


def _check_alias(alias: str) -> str:
    if not is_full_match(_ALIAS, alias) or alias == "latest":
        raise InvalidInputError(
            f"alias {alias!r}: start with a letter; letters, digits, '_' or '-' ('latest' is kept)"
        )
    return alias


def parse_prompt_ref(ref: str) -> tuple[str, str | None]:
    """``NAME`` | ``NAME@VERSION`` | ``NAME@ALIAS`` -> (name, version-or-alias or None)."""
    name, _, tag = ref.strip().partition("@")
    return _check_name(name), (tag or None)


def _aliases(s: Session, name: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for row in s.scalars(select(PromptAliasRow).where(PromptAliasRow.name == name)):
        out.setdefault(row.version, []).append(row.alias)
    return out


def _resolve(s: Session, ref: str) -> PromptVersionRow:
    name, tag = parse_prompt_ref(ref)
    q = select(PromptVersionRow).where(PromptVersionRow.name == name)
    if tag is None or tag == "latest":
        row = s.scalars(q.order_by(PromptVersionRow.version.desc()).limit(1)).first()
    elif tag.isdigit():
        # Longer numbers than any version would overflow the DB's integer.
        row = s.get(PromptVersionRow, (name, int(tag))) if len(tag) < 10 else None
    else:
        alias = s.get(PromptAliasRow, (name, tag))
        row = s.get(PromptVersionRow, (name, alias.version)) if alias else None
        if alias is None and s.scalars(q.limit(1)).first() is not None:
            raise NotFoundError(f"prompt {name!r} has no alias {tag!r}")
    if row is None:
        raise NotFoundError(f"prompt {ref!r} not found")
    return row


def create_prompt(
    name: str,
    template: str,
    *,
    variables: Iterable[str] | None = None,
    description: str = "",
    alias: str | None = None,
) -> dict[str, Any]:
    """Register a new version of prompt ``name`` (the same content as the latest: no new one).

    Args:
        name: prompt name.
        template: Jinja2 source (rendered in a sandbox).
        variables: declared variables; None infers them from the template.
        description: free text.
        alias: move this alias (e.g. ``prod``) to the version.

    Raises:
        InvalidInputError: a bad name or alias, a template syntax error (with its line), or a
            variable used but not declared.
    """
    _check_name(name)
    if alias is not None:
        _check_alias(alias)
    declared = tpl.check_variables(template, variables)
    content = digest({"template": template, "variables": declared})
    with session_scope() as s:
        lock_aggregate(s, "prompt", name)  # versions of one prompt are numbered in turn
        latest = s.scalars(
            select(PromptVersionRow)
            .where(PromptVersionRow.name == name)
            .order_by(PromptVersionRow.version.desc())
            .limit(1)
        ).first()
        if latest is not None and latest.digest == content:
            row = latest
        else:
            row = PromptVersionRow(
                name=name,
                version=(latest.version + 1) if latest else 1,
                template=template,
                variables=declared,
                description=description,
                digest=content,
                created_by=current_actor(),
                created_at=time.time(),
            )
            s.add(row)
            s.flush()
            record_event(s, "prompt.create", f"prompt:{name}@{row.version}", {"digest": content})
        if alias is not None:
            _move_alias(s, name, alias, row.version)
        return as_dict(row, _aliases(s, name).get(row.version, []))


def _move_alias(s: Session, name: str, alias: str, version: int) -> None:
    current = s.get(PromptAliasRow, (name, alias))
    if current is not None and current.version == version:
        return
    if current is None:
        s.add(PromptAliasRow(name=name, alias=alias, version=version, updated_at=time.time()))
    else:
        current.version = version
        current.updated_at = time.time()
    record_event(s, "prompt.alias", f"prompt:{name}@{alias}", {"version": version})


def set_prompt_alias(name: str, alias: str, version: int | str) -> dict[str, Any]:
    """Point ``NAME@ALIAS`` at ``version`` (audited); returns that version.

    Raises:
        NotFoundError: no such prompt version.
        InvalidInputError: a bad alias.
    """
    _check_alias(alias)
    with session_scope() as s:
        lock_aggregate(s, "prompt", name)  # an alias names one version of the prompt
        row = _resolve(s, f"{_check_name(name)}@{version}")
        _move_alias(s, name, alias, row.version)
        return as_dict(row, _aliases(s, name).get(row.version, []))


def get_prompt(ref: str) -> dict[str, Any]:
    """The version ``ref`` names (``NAME`` is the latest).

    Raises:
        NotFoundError: unknown prompt, version or alias.
    """
    with session_scope(readonly=True) as s:
        row = _resolve(s, ref)
        return as_dict(row, _aliases(s, row.name).get(row.version, []))


def list_prompts(name: str | None = None) -> list[dict[str, Any]]:
    """Every prompt's latest version, or every version of ``name`` (newest first)."""
    with session_scope(readonly=True) as s:
        if name is not None:
            rows = list(
                s.scalars(
                    select(PromptVersionRow)
                    .where(PromptVersionRow.name == _check_name(name))
                    .order_by(PromptVersionRow.version.desc())
                )
            )
            if not rows:
                raise NotFoundError(f"prompt {name!r} not found")
        else:
            newest = (
                select(PromptVersionRow.name, func.max(PromptVersionRow.version).label("v"))
                .group_by(PromptVersionRow.name)
                .subquery()
            )
            rows = list(
                s.scalars(
                    select(PromptVersionRow)
                    .join(
                        newest,
                        (PromptVersionRow.name == newest.c.name)
                        & (PromptVersionRow.version == newest.c.v),
                    )
                    .order_by(PromptVersionRow.name)
                )
            )
        return [as_dict(r, _aliases(s, r.name).get(r.version, [])) for r in rows]


def render_prompt(ref: str, variables: Mapping[str, Any]) -> dict[str, Any]:
    """Render prompt ``ref`` with ``variables``: ``{"ref": NAME@VERSION, "text": ...}``.

    Raises:
        NotFoundError: unknown prompt.
        InvalidInputError: missing or extra variables (named), or a template the sandbox refuses.
    """
    p = get_prompt(ref)
    with _render_slot(current_actor()):
        # In the server, a worker process killed at RENDER_KILL_S: one filter call (wordwrap
        # over a long text) runs to its end before the sandbox's own step check answers.
        text = workers.run(
            tpl.render,
            p["template"],
            p["variables"],
            dict(variables),
            timeout_s=RENDER_KILL_S,
            what="render",
        )
    return {"ref": p["ref"], "text": text}


#: A render in the worker pool is killed this long after it began (twice the sandbox's own
#: cooperative limit, :data:`~aifab.prompts.sandbox.MAX_RENDER_S`).
RENDER_KILL_S = 2 * MAX_RENDER_S


#: Renders one caller may have running at once: however slow its templates, a caller cannot
#: hold all of the server's worker threads (each render also stops at its own limits).
MAX_RENDERS_PER_CALLER = 2
_running: collections.Counter[str] = collections.Counter()
_running_lock = threading.Lock()


@contextmanager
def _render_slot(actor: str) -> Iterator[None]:
    with _running_lock:
        if _running[actor] >= MAX_RENDERS_PER_CALLER:
            raise BudgetExceededError(
                f"{MAX_RENDERS_PER_CALLER} renders of this caller are running; retry when one ends"
            )
        _running[actor] += 1
    try:
        yield
    finally:
        with _running_lock:
            _running[actor] -= 1
            if not _running[actor]:
                del _running[actor]
