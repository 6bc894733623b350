"""Deployment settings: which model sources and settings a deployment may have, and its name.

Validation shared by the deployment store and the ``deploy`` pipeline step; every error names
the setting at fault.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.core.names import SLUG, SLUG_RULE, is_full_match
from aifab.core.names import check_name as check_slug

__all__ = [
    "BACKENDS",
    "BUILTIN_MODELS",
    "SETTINGS",
    "check_name",
    "check_settings",
    "check_source",
    "default_name",
    "is_path",
    "model_dir_under_roots",
]

#: Sources that name a model shipped with a Python package rather than the registry.
BUILTIN_MODELS = ("builtin:all-minilm-l6-v2",)
BACKENDS = ("torch", "onnx")
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
#: Settings ``update_deployment`` accepts (``canary=None`` removes the canary).
SETTINGS = (
    "model",
    "canary",
    "canary_weight",
    "sticky_header",
    "replicas",
    "max_batch_size",
    "max_wait_ms",
    "backend",
    "options",
)


def is_path(source: str) -> bool:
    """A local directory: a path with a slash, or ``.``/``~`` first.

    The same rule as ``aifab.inference.loading`` uses, so the server reads a source as stored:
    a bare name is always a registry ref, even if a directory of that name exists here.
    """
    if source.startswith("models:/"):  # MLflow's registry URI (track.registry.MODELS_URI)
        return False
    return "/" in source or "\\" in source or source.startswith((".", "~"))


def _registry_form(source: str) -> str:
    """MLflow's ``models:/NAME/VERSION`` or ``models:/NAME@ALIAS`` as aifab's ``NAME@...``."""
    if not source.startswith("models:/"):
        return source
    from aifab.track.registry import canonical_ref

    return canonical_ref(source)


def check_source(source: str, field: str = "model") -> str:
    """Validate a model source and return it as stored (a directory becomes absolute).

    Args:
        source: ``NAME[@VERSION|@ALIAS]`` in the registry (or MLflow's ``models:/NAME/VERSION``,
            stored as ``NAME@VERSION``), ``builtin:all-minilm-l6-v2``, or a local model
            directory (``./dir`` or an absolute path).
        field: the setting being checked, for messages.

    Raises:
        InvalidInputError: an unknown builtin, a missing directory, a malformed ref.
        NotFoundError: the registry has no such model, version or alias.
    """
    if not isinstance(source, str) or not source.strip():
        raise InvalidInputError(f"{field}: a model source is required (NAME@ALIAS, a dir...)")
    source = _registry_form(source.strip())
    if source.startswith("builtin:"):
        if source not in BUILTIN_MODELS:
            raise InvalidInputError(
                f"{field}: unknown builtin model {source!r} (known: {', '.join(BUILTIN_MODELS)})"
            )
        return source
    if is_path(source):
        if len(source) > 200:
            raise InvalidInputError(f"{field}: model directory path is over 200 characters")
        path = model_dir_under_roots(source, field)
        if len(str(path)) > 200:
            raise InvalidInputError(f"{field}: model directory path is over 200 characters")
        return str(path)
    if len(source) > 200:
        raise InvalidInputError(f"{field}: a model ref is at most 200 characters")
    from aifab.track.registry import resolve_model

    resolve_model(source)  # NotFoundError names what exists
    return source


def model_dir_under_roots(source: str, field: str = "model") -> Path:
    """The model directory ``source`` names, if it is under a configured model root.

    A directory outside the roots (``AIFAB_MODEL_ROOTS``, default the workspace) gets the same
    answer as a missing one, so callers cannot probe which server paths exist.

    Raises:
        InvalidInputError: not an existing directory under a model root.
    """
    from aifab.core.settings import get_settings

    path = Path(source).expanduser().resolve()  # symlinks resolved: no escaping a root
    roots = get_settings().resolved_model_roots
    if not any(path.is_relative_to(root) for root in roots) or not path.is_dir():
        raise InvalidInputError(
            f"{field}: model directory {source!r} does not exist under the model roots "
            "(AIFAB_MODEL_ROOTS, default the workspace); deploy a registry ref instead"
        )
    return path


def default_name(source: str) -> str:
    """The deployment name a source gets by default: its model name, lower-cased."""
    source = _registry_form(source)
    if source.startswith("builtin:"):
        base = source.partition(":")[2]
    elif is_path(source):
        base = Path(source).expanduser().resolve().name
    else:
        base = source.partition("@")[0]
    name = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-._")[:100]
    if not is_full_match(SLUG, name):
        raise InvalidInputError(f"cannot derive a deployment name from {source!r}: give --name")
    return name


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid deployment name, else raise InvalidInputError."""
    return check_slug(name, "deployment", pattern=SLUG, rule=SLUG_RULE)


def _number(field: str, value: Any, lo: float, hi: float, *, integer: bool) -> Any:
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type:
        kind = "an integer" if integer else "a number"
        raise InvalidInputError(f"{field}: expected {kind}, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidInputError(f"{field}: {value} is out of range ({lo:g} to {hi:g})")
    return int(value) if integer else float(value)


def check_settings(s: dict[str, Any]) -> dict[str, Any]:
    """Validate a full settings mapping (what a row would hold) and return it normalized."""
    out = dict(s)
    out["replicas"] = _number("replicas", s["replicas"], 1, 16, integer=True)
    out["max_batch_size"] = _number("max_batch_size", s["max_batch_size"], 1, 1024, integer=True)
    out["max_wait_ms"] = _number("max_wait_ms", s["max_wait_ms"], 0, 1000, integer=False)
    out["canary_weight"] = _number("canary_weight", s["canary_weight"], 0, 100, integer=False)
    if s["backend"] not in BACKENDS:
        raise InvalidInputError(f"backend {s['backend']!r}: use one of {', '.join(BACKENDS)}")
    header = s["sticky_header"]
    if header is not None and (not isinstance(header, str) or not _HEADER_RE.fullmatch(header)):
        raise InvalidInputError(f"sticky_header {header!r}: not a valid HTTP header name")
    if s["canary"] is None and out["canary_weight"] > 0:
        raise InvalidInputError("canary_weight: there is no canary to send traffic to")
    options = s["options"] or {}
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise InvalidInputError("options: expected a mapping of names to values")
    try:
        out["options"] = json.loads(json.dumps(options, allow_nan=False))
    except (TypeError, ValueError):
        raise InvalidInputError("options: values must be JSON (numbers, text, lists...)") from None
    return out
