"""Typed configs validated at the edge: YAML in, frozen pydantic models out, errors name the key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from aifab.core.errors import InvalidInputError, first_line

M = TypeVar("M", bound=BaseModel)


class StrictConfig(BaseModel):
    """Base for every ``*Config``/spec: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def load_yaml(path: Path) -> Any:
    """Parse a YAML file, turning syntax errors into one line naming file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: file not found") from None
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise InvalidInputError(f"{path}{where}: invalid YAML: {problem}") from None


def describe_validation_error(exc: ValidationError, source: str) -> str:
    """Render a pydantic error as ``source: key.path: message`` lines joined by '; '."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{loc}: {msg}")
    return f"{source}: " + "; ".join(parts)


def parse_config(model: type[M], data: Any, source: str) -> M:
    """Validate ``data`` as ``model``; raise :class:`InvalidInputError` naming the bad keys."""
    if data is None:
        data = {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(describe_validation_error(exc, source)) from None


def load_config(model: type[M], path: Path) -> M:
    """Load and validate a YAML file as ``model``."""
    return parse_config(model, load_yaml(path), str(path))


def as_config(model: type[M], spec: M | Path | str | Mapping[str, Any] | None, source: str) -> M:
    """Accept a config as an instance, a YAML path, or a mapping; return a validated ``model``.

    Service functions take specs in any of these forms, so the CLI passes paths, the pipeline
    runner passes mappings and Python users pass objects.
    """
    if isinstance(spec, model):
        return spec
    if isinstance(spec, str | Path):
        return load_config(model, Path(spec))
    return parse_config(model, dict(spec) if spec is not None else {}, source)
