"""The dashboard's sections, in menu order: each is shown when its page module is installed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from typing import Protocol

__all__ = ["SECTIONS", "Section", "installed_sections", "visible_nav"]


class _Viewer(Protocol):
    def can(self, permission: str) -> bool: ...


@dataclass(frozen=True)
class Section:
    """A menu entry: its label, URL, the page module serving it and the permission to see it."""

    label: str
    path: str
    module: str
    permission: str = "read"


#: Every section in menu order. A page module that is not installed leaves its entry out.
SECTIONS: tuple[Section, ...] = (
    Section("Home", "/ui", "aifab.web.pages.home"),
    Section("Runs", "/ui/runs", "aifab.web.pages.runs"),
    Section("Models", "/ui/models", "aifab.web.pages.models"),
    Section("Deployments", "/ui/deployments", "aifab.web.pages.deployments"),
)


@cache
def installed_sections() -> tuple[Section, ...]:
    """The sections whose page module exists in this installation."""
    return tuple(s for s in SECTIONS if importlib.util.find_spec(s.module) is not None)


def visible_nav(viewer: _Viewer | None) -> list[Section]:
    """The sections ``viewer`` may open (none before signing in)."""
    if viewer is None:
        return []
    return [s for s in installed_sections() if viewer.can(s.permission)]
