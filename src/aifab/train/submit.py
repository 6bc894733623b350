"""Validate a recipe config before any job starts; build the JobSpec dict that runs it.

Configs come as YAML or mappings plus ``key=value`` overrides; the CLI submits the JobSpec.

Imports no torch: configs are plain pydantic models, and their input checks read the catalog.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from aifab.core.config import StrictConfig, load_yaml, parse_config
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.train.recipes import RECIPE_CONFIGS

_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

__all__ = [
    "apply_overrides",
    "build_job_spec",
    "load_recipe_config",
    "parse_override",
    "validate_recipe_config",
]


@runtime_checkable
class ChecksInputs(Protocol):
    """A recipe config that can check the data it will read (dataset, columns, base model)."""

    def check_inputs(self) -> None:
        """Raise InvalidInputError naming what is missing or unusable."""


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"optim.lr=3e-4"`` -> ``(["optim", "lr"], 0.0003)``; the value is read as YAML.

    Raises:
        InvalidInputError: no ``=``, or an empty key part.
    """
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise InvalidInputError(f"override {item!r}: expected KEY=VALUE (e.g. optim.lr=0.001)")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInputError(f"override {key}: value is not valid YAML ({problem})") from None
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        value = float(value)  # YAML 1.1 reads "1e-3" as text; users mean a number
    return [p.strip() for p in parts], value


def apply_overrides(config: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``config`` with each ``dotted.key=value`` set (nested mappings created).

    Raises:
        InvalidInputError: a malformed override, or one that descends into a non-mapping.
    """
    out: dict[str, Any] = _deep_copy(config)
    for item in overrides:
        parts, value = parse_override(item)
        try:
            set_dotted(out, parts, value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"override {item!r}: {exc.message}") from None
    return out


def set_dotted(config: dict[str, Any], parts: Sequence[str], value: Any) -> None:
    """Set ``config[parts[0]]...[parts[-1]] = value`` in place, creating missing mappings.

    A key on the way that is absent or null becomes an empty mapping.

    Raises:
        InvalidInputError: a key on the way holds something other than a mapping (named).
    """
    node = config
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise InvalidInputError(f"{'.'.join(parts[: depth + 1])} is not a mapping")
        node = child
    node[parts[-1]] = value


def _deep_copy(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in config.items()}


def _config_class(recipe: str) -> type[StrictConfig]:
    try:
        cls: type[StrictConfig] = RECIPE_CONFIGS.get(recipe)
    except NotFoundError as exc:
        raise InvalidInputError(f"recipe: {exc.message}") from None
    return cls


def load_recipe_config(
    recipe: str,
    config: StrictConfig | Path | str | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
) -> StrictConfig:
    """Read ``config`` (a YAML path, a mapping or an instance), apply overrides, validate.

    Raises:
        InvalidInputError: unknown recipe; bad YAML; an unknown key or a wrong type (named).
    """
    cls = _config_class(recipe)
    source = f"{recipe} config"
    if isinstance(config, StrictConfig):
        data: Any = config.model_dump(mode="json", by_alias=True)
    elif isinstance(config, str | Path):
        source = str(config)
        data = load_yaml(Path(config))
    else:
        data = config or {}
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{source}: expected a mapping of config keys")
    return parse_config(cls, apply_overrides(data, overrides), source)


def validate_recipe_config(
    recipe: str,
    config: StrictConfig | Path | str | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    *,
    check_inputs: bool = True,
) -> StrictConfig:
    """:func:`load_recipe_config`, then the config's own input checks.

    The checks cover the dataset, columns, a single-class label and the base model directory.

    Raises:
        InvalidInputError: anything a job would otherwise fail on at start, named.
    """
    cfg = load_recipe_config(recipe, config, overrides)
    if check_inputs and isinstance(cfg, ChecksInputs):
        cfg.check_inputs()
    return cfg


def build_job_spec(
    recipe: str,
    config: StrictConfig | Path | str | Mapping[str, Any] | None,
    overrides: Sequence[str] = (),
    *,
    name: str | None = None,
    replicas: int = 1,
    resources: Mapping[str, Any] | None = None,
    job: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate a recipe config and return the JobSpec dict that runs it.

    Args:
        recipe: recipe name (``classify``, ``custom``...).
        config: the recipe config (YAML path, mapping or instance).
        overrides: ``dotted.key=value`` items applied on top (values read as YAML).
        name: job name (default: the recipe name).
        replicas: data-parallel replicas.
        resources: per-replica resources (``cpu``, ``memory``, ``gpu``).
        job: other JobSpec fields (queue, priority, max_retries, timeout, env...).

    Returns:
        ``{"name", "run": {"recipe", "config"}, "replicas", "resources", ...}`` with the
        resolved config (defaults filled in).

    Raises:
        InvalidInputError: the config is invalid or names data that is missing or unusable.
    """
    if replicas < 1:
        raise InvalidInputError(f"replicas: must be at least 1, got {replicas}")
    cfg = validate_recipe_config(recipe, config, overrides)
    spec: dict[str, Any] = {
        **dict(job or {}),
        "name": name or recipe,
        "run": {"recipe": recipe, "config": cfg.model_dump(mode="json", by_alias=True)},
        "replicas": replicas,
    }
    if resources is not None:
        spec["resources"] = dict(resources)
    return spec
