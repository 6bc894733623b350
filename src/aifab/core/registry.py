"""Name -> ``"module:attr"`` registries, resolved lazily so heavy modules load only when used."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from aifab.core.errors import NotFoundError


def load_target(target: str) -> Any:
    """Import and return the object a ``"package.module:attr"`` string names."""
    module_name, attr = target.split(":", 1)
    return getattr(importlib.import_module(module_name), attr)


class Registry:
    """A named table of lazily imported objects (steps, sources, recipes, executors)."""

    def __init__(self, kind: str, entries: dict[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, str] = dict(entries or {})
        self._loaded: dict[str, Any] = {}

    def register(self, name: str, target: str) -> None:
        """Register ``name`` to point at ``"package.module:attr"``."""
        if ":" not in target:
            raise ValueError(f"{self.kind} target must look like 'module:attr', got {target!r}")
        self._entries[name] = target
        self._loaded.pop(name, None)

    def names(self) -> Iterable[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        """Import and return the object registered as ``name``."""
        if name not in self._loaded:
            if name not in self._entries:
                known = ", ".join(self.names()) or "none"
                raise NotFoundError(f"unknown {self.kind} {name!r} (known: {known})")
            self._loaded[name] = load_target(self._entries[name])
        return self._loaded[name]
