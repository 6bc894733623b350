"""The MLflow dataset source of aifab lake versions, so ``mlflow.data.get_source`` reads them.

Registered with MLflow through the ``mlflow.dataset_source`` entry point (``pyproject.toml``)
in every process where aifab is installed, and by :func:`register` in this one.
"""

from __future__ import annotations

from typing import Any

from mlflow.data.dataset_source import DatasetSource

from aifab.core.registry import load_target

#: aifab's query over the lake, reached by name (``data`` sits beside ``track``).
_QUERY = "aifab.data:query"


class AifabDatasetSource(DatasetSource):
    """A dataset version in aifab's lake: ``NAME@VERSION``, its content hash and origin."""

    def __init__(self, ref: str, digest: str | None = None, source: str | None = None) -> None:
        self.ref = ref
        self.digest = digest
        self.source = source

    @staticmethod
    def _get_source_type() -> str:
        return "aifab"

    def load(self) -> Any:
        """The version's rows as a pyarrow Table (read from the current workspace's lake)."""
        name = self.ref.replace('"', '""')
        return load_target(_QUERY)(f'SELECT * FROM "{name}"')

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return isinstance(raw_source, str) and raw_source.startswith("aifab:")

    @classmethod
    def _resolve(cls, raw_source: Any) -> AifabDatasetSource:
        return cls(str(raw_source).removeprefix("aifab:"))

    def to_dict(self) -> dict[str, Any]:
        """``{"ref", "digest", "source"}``."""
        return {"ref": self.ref, "digest": self.digest, "source": self.source}

    @classmethod
    def from_dict(cls, source_dict: dict[Any, Any]) -> AifabDatasetSource:
        """The source of a stored dataset input."""
        return cls(str(source_dict["ref"]), source_dict.get("digest"), source_dict.get("source"))


def register() -> None:
    """Make the source known to MLflow in this process (the entry point does it elsewhere)."""
    from mlflow.data.dataset_source_registry import _dataset_source_registry

    # MLflow registers classes (as its entry points load them); its hint says instance.
    _dataset_source_registry.register(AifabDatasetSource)  # type: ignore[arg-type]
