"""Model directories: weights plus an ``aifab-model.json`` sidecar (builder, config, lineage).

Zoo models are saved as ``model.safetensors``; ``causal-lm`` with ``save_pretrained`` so Hugging
Face tools load the directory as is. Directories are written beside the target, then renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.atomic import atomic_write_text
from aifab.core.config import StrictConfig
from aifab.core.errors import ConflictError, InvalidInputError, first_line
from aifab.models.zoo import build_model, model_config, task_of

if TYPE_CHECKING:
    from torch import nn

SIDECAR = "aifab-model.json"
WEIGHTS = "model.safetensors"
FORMAT = "aifab-model/1"
_HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' per-shard progress bars while saving or loading."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside ``torch.compile`` / DDP wrappers (their keys carry prefixes)."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    model = getattr(model, "_orig_mod", model)
    if isinstance(model, DataParallel | DistributedDataParallel):
        inner: nn.Module = model.module
        return inner
    return model


def _publish(tmp: Path, target: Path) -> None:
    """Rename the finished ``tmp`` directory to ``target``, replacing an older model there."""
    if target.exists():
        is_model = (target / SIDECAR).is_file() or (target / "config.json").is_file()
        if not target.is_dir() or (any(target.iterdir()) and not is_model):
            raise ConflictError(f"{target} exists and is not a model directory; not replacing it")
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def save_model(
    directory: Path | str,
    model: nn.Module,
    *,
    builder: str,
    config: StrictConfig | Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
) -> Path:
    """Save ``model`` with its config and lineage so :func:`load_model` can rebuild it.

    Args:
        directory: The model directory (created; an older model directory there is replaced).
        model: A zoo model (for ``causal-lm`` a plain, merged ``PreTrainedModel``).
        builder: Its zoo name.
        config: Its zoo config (validated again and stored resolved, defaults included).
        meta: JSON-serialisable lineage: dataset refs, run id, code version, metrics...
        tokenizer: Optional tokenizer, saved beside with ``save_pretrained``.

    Returns:
        The model directory.

    Raises:
        InvalidInputError: Bad config or non-JSON ``meta``.
        ConflictError: ``directory`` exists and is neither empty nor a model directory.
    """
    target = Path(directory)
    cfg = model_config(builder, config)
    module = _unwrap(model)
    sidecar = {
        "format": FORMAT,
        "builder": builder,
        "task": task_of(builder),
        "config": cfg.model_dump(mode="json"),
        "meta": dict(meta or {}),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "weights": WEIGHTS,
        "num_parameters": sum(p.numel() for p in module.parameters()),
        "tokenizer": tokenizer is not None,
    }
    try:
        sidecar_text = json.dumps(sidecar, indent=2, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"meta: not JSON-serialisable ({exc})") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        _write_weights(tmp, module, builder)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        atomic_write_text(tmp / SIDECAR, sidecar_text + "\n")
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_weights(directory: Path, module: nn.Module, builder: str) -> None:
    if builder == "causal-lm":
        with quiet_transformers():
            module.save_pretrained(str(directory))  # type: ignore[operator]
        return
    from safetensors.torch import save_model as save_safetensors

    # save_model (not save_file) drops duplicate names of tied tensors instead of failing.
    save_safetensors(module, str(directory / WEIGHTS))


def read_sidecar(directory: Path | str) -> dict[str, Any]:
    """Read and check a model directory's ``aifab-model.json``.

    Raises:
        InvalidInputError: Missing, unreadable or malformed sidecar.
    """
    path = Path(directory) / SIDECAR
    if not path.is_file():
        raise InvalidInputError(f"{Path(directory)} is not a model directory: no {SIDECAR}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{path}: corrupt sidecar ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path}: corrupt sidecar (not a JSON object)")
    for key in ("builder", "config"):
        if key not in data:
            raise InvalidInputError(f"{path}: corrupt sidecar (no {key!r})")
    return data


def load_model(directory: Path | str) -> tuple[nn.Module, dict[str, Any]]:
    """Load a model directory, in eval mode, on the CPU.

    An aifab directory is rebuilt from its sidecar through the zoo; a plain Hugging Face
    causal-LM directory (``config.json``, no sidecar) loads as a base model, with a sidecar-like
    dict (``builder="hf-causal-lm"``, ``base=True``).

    Returns:
        ``(model, sidecar)``.

    Raises:
        InvalidInputError: Not a model directory, or its sidecar or weights are missing or
            corrupt (the message names the file).
    """
    path = Path(directory)
    if not path.is_dir():
        raise InvalidInputError(f"{path} is not a model directory: it does not exist")
    if (path / SIDECAR).is_file():
        sidecar = read_sidecar(path)
        if sidecar["builder"] == "causal-lm":
            return _load_hf(path), sidecar
        return _load_zoo(path, sidecar), sidecar
    if (path / "config.json").is_file():
        return _load_hf(path), _base_sidecar(path)
    raise InvalidInputError(f"{path} is not a model directory: no {SIDECAR} or config.json")


def _load_zoo(path: Path, sidecar: dict[str, Any]) -> nn.Module:
    from safetensors import SafetensorError
    from safetensors.torch import load_model as load_safetensors

    try:
        model = build_model(str(sidecar["builder"]), sidecar["config"])
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path / SIDECAR}: {exc.message}") from None
    weights = path / str(sidecar.get("weights") or WEIGHTS)
    if not weights.is_file():
        raise InvalidInputError(f"{path}: weights file {weights.name} is missing")
    try:
        load_safetensors(model, str(weights))
    except SafetensorError as exc:
        raise InvalidInputError(f"{weights}: corrupt weights file ({exc})") from None
    except RuntimeError as exc:
        first = first_line(exc)
        raise InvalidInputError(f"{weights}: weights do not fit the model: {first}") from None
    return model.eval()


def _load_hf(path: Path) -> nn.Module:
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    import aifab.models.copy_lm  # noqa: F401 - registers the copy-head LM with the Auto classes

    if not any((path / name).is_file() for name in _HF_WEIGHTS):
        raise InvalidInputError(f"{path}: weights file missing (no {', '.join(_HF_WEIGHTS)})")
    try:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    except (SafetensorError, OSError, ValueError, RuntimeError, KeyError) as exc:
        first = first_line(exc)
        raise InvalidInputError(f"{path}: cannot load the causal LM: {first}") from None
    module: nn.Module = model.eval()
    return module


def _base_sidecar(path: Path) -> dict[str, Any]:
    """What a sidecar would say about a plain Hugging Face directory."""
    # Only called once the model loaded, so config.json is known to parse.
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    return {
        "format": None,
        "builder": "hf-causal-lm",
        "task": "lm",
        "base": True,
        "config": config,
        "meta": {"source": str(path)},
        "created_at": None,
        "tokenizer": (path / "tokenizer.json").is_file(),
    }
