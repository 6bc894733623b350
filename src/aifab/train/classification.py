"""The classify recipe's named pieces: input checks, data, the zoo model, the rank-0 finish.

Input checks run before a job starts; a dataset version becomes model inputs, labels and splits;
the zoo model is sized from the data; rank 0 saves the model directory, logs and registers it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.catalog import VersionInfo, resolve
from aifab.train import datasets

if TYPE_CHECKING:
    from aifab.data.feature_transform import FeatureTransform
    from aifab.train.classify_config import ClassifyConfig as Config

_DEFAULT_FILE_SHAPE = (3, 32, 32)
_NUMERIC = re.compile(r"^(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?|FLOAT|DOUBLE|REAL|DECIMAL|BOOLEAN)")
#: The zoo model each modality trains.
MODELS = {
    "tabular": "mlp",
    "image": "cnn",
    "text": "transformer-classifier",
    "multimodal": "fusion-classifier",
}


@dataclass
class ClassifyData:
    """Every row's model inputs and label, the split of rows, and how inputs were made."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray
    index: dict[str, np.ndarray]
    classes: list[str]
    modality: str
    #: Zoo config keys the data decides (input width, classes, vocabulary...).
    model_defaults: dict[str, Any]
    #: What serving needs to turn a raw row into model input (stored in the model sidecar).
    preprocess: dict[str, Any]
    dataset_inputs: list[dict[str, Any]]
    transform: FeatureTransform | None = None
    tokenizer: Any = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def epoch_batches(self, batch_size: int, *, seed: int, epoch: int) -> list[np.ndarray]:
        """The global batches of row indices of one epoch (seeded by seed and epoch)."""
        train = self.index["train"]
        return [
            train[b] for b in datasets.epoch_batches(len(train), batch_size, seed=seed, epoch=epoch)
        ]

    def forward(
        self, model: torch.nn.Module, rows: np.ndarray, device: torch.device
    ) -> torch.Tensor:
        """Logits of ``model`` for ``rows``."""
        batch = {k: torch.from_numpy(v[rows]).to(device) for k, v in self.inputs.items()}
        if "x" in batch:  # zoo mlp/cnn take one positional tensor
            out: torch.Tensor = model(batch["x"])
            return out
        out = model(**batch)
        return out

    def targets(self, rows: np.ndarray, device: torch.device) -> torch.Tensor:
        """Class indices of ``rows``."""
        return torch.from_numpy(self.labels[rows]).to(device)

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, split: str, device: torch.device, batch: int = 1024
    ) -> dict[str, float]:
        """``{split}_loss`` and ``{split}_accuracy`` over the whole split ({} when empty)."""
        rows = self.index[split]
        if len(rows) == 0:
            return {}
        was_training = model.training
        model.eval()
        loss, correct = 0.0, 0
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            logits = self.forward(model, part, device).float()
            y = self.targets(part, device)
            loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(dim=1) == y).sum())
        model.train(was_training)
        return {f"{split}_loss": loss / len(rows), f"{split}_accuracy": correct / len(rows)}


def modality(cfg: Config) -> str:
    """The configured modality, or the one the config implies."""
    if cfg.modality != "auto":
        return cfg.modality
    if cfg.text_column and cfg.image_column:
        return "multimodal"
    if cfg.text_column:
        return "text"
    return "image" if cfg.image_column or cfg.image_shape else "tabular"


@contextlib.contextmanager
def _named(what: str) -> Iterator[None]:
    """Report a missing dataset or transform as bad input naming the config key."""
    try:
        yield
    except NotFoundError as exc:
        raise InvalidInputError(f"{what}: {exc.message}") from None


def _needed_columns(cfg: Config, kind: str) -> list[str]:
    cols = [cfg.label]
    if kind == "multimodal":
        from aifab.train.multimodal_data import input_columns

        cols += input_columns(cfg)
    elif kind == "text":
        cols.append(str(cfg.text_column))
    elif kind == "image" and cfg.image_column:
        cols.append(cfg.image_column)
    elif isinstance(cfg.features, list):
        cols += cfg.features
    return cols


def check_inputs(cfg: Config) -> None:
    """Validate what a job would read, before it starts.

    Raises:
        InvalidInputError: the dataset, a column, the feature transform or the base model is
            missing; the label has fewer than two classes.
    """
    with _named("dataset"):
        v = resolve(cfg.dataset)
    kind = modality(cfg)
    if kind == "text" and not cfg.text_column:
        raise InvalidInputError("text_column: required for text classification")
    if kind == "multimodal":
        from aifab.train.multimodal_data import check_config

        check_config(cfg)
    for col in _needed_columns(cfg, kind):
        if col not in v.columns:
            raise InvalidInputError(
                f"dataset {v.ref}: column {col!r} not found (columns: {', '.join(v.columns)})"
            )
    if isinstance(cfg.features, dict) and kind != "multimodal":
        from aifab.core.config import as_config
        from aifab.data.feature_ops import check_columns
        from aifab.data.feature_spec import FeatureSpec

        spec = as_config(FeatureSpec, cfg.features, source="features")
        check_columns(spec, {c["name"]: c["type"] for c in v.schema})
    elif isinstance(cfg.features, str):
        from aifab.data.features import load_feature_transform

        with _named("features"):
            load_feature_transform(cfg.features)
    labels = datasets.read_table(v, [cfg.label]).column(cfg.label).to_pylist()
    datasets.encode_labels(labels, cfg.label)
    if cfg.base_model:
        from aifab.models.checkpoint import read_sidecar

        read_sidecar(cfg.base_model)
    if cfg.strategy == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise InvalidInputError("strategy: deepspeed is not installed (pip install deepspeed)")


def load_data(cfg: Config) -> ClassifyData:
    """Read the dataset version, split it and turn every row into model input.

    Raises:
        InvalidInputError: as :func:`check_inputs`, plus non-numeric or NULL features.
    """
    check_inputs(cfg)
    v = resolve(cfg.dataset)
    table = datasets.read_table(v)
    y, classes = datasets.encode_labels(table.column(cfg.label).to_pylist(), cfg.label)
    has_split = cfg.split_column in v.columns
    index = datasets.split_indices(
        table.column(cfg.split_column).to_pylist() if has_split else None,
        table.num_rows,
        seed=cfg.seed,
        fractions=cfg.split_fractions,
    )
    kind = modality(cfg)
    pre: dict[str, Any] = {
        "modality": kind,
        "label": cfg.label,
        "classes": classes,
        # How rows were split, so an export or an evaluation can find the same test rows.
        "split": {
            "column": cfg.split_column if has_split else None,
            "seed": cfg.seed,
            "fractions": list(cfg.split_fractions),
        },
    }
    data = ClassifyData({}, y, index, classes, kind, {}, pre, [datasets.dataset_input(v)])
    if kind == "multimodal":
        from aifab.train.multimodal_data import multimodal_inputs

        multimodal_inputs(cfg, table, data)
    elif kind == "text":
        _text_inputs(cfg, table, data)
    elif kind == "image" and cfg.image_column:
        shape = cfg.image_shape or _DEFAULT_FILE_SHAPE
        _check_square(shape)
        paths = [str(p) for p in table.column(cfg.image_column).to_pylist()]
        data.inputs["x"] = datasets.image_files(paths, shape[1], shape[0])
        pre.update(image_column=cfg.image_column, image_shape=list(shape), scale=1 / 255)
        data.model_defaults = _image_defaults(shape, len(classes))
    else:
        x = _tabular_inputs(cfg, v, table, data)
        if kind == "image":
            assert cfg.image_shape is not None
            _check_square(cfg.image_shape)
            if x.shape[1] != int(np.prod(cfg.image_shape)):
                raise InvalidInputError(
                    f"image_shape: {list(cfg.image_shape)} needs {int(np.prod(cfg.image_shape))} "
                    f"pixel columns, the features have {x.shape[1]}"
                )
            x = x.reshape(-1, *cfg.image_shape)
            pre["image_shape"] = list(cfg.image_shape)
            data.model_defaults = _image_defaults(cfg.image_shape, len(classes))
        else:
            data.model_defaults = {"in_features": x.shape[1], "out_features": len(classes)}
        data.inputs["x"] = x
    return data


def _check_square(shape: tuple[int, int, int]) -> None:
    if shape[1] != shape[2]:
        raise InvalidInputError(f"image_shape: the cnn needs square images, got {list(shape)}")


def _image_defaults(shape: tuple[int, int, int], classes: int) -> dict[str, Any]:
    return {"in_channels": shape[0], "image_size": shape[1], "num_classes": classes}


def _default_features(v: VersionInfo, cfg: Config) -> list[str]:
    skip = {cfg.label, cfg.split_column, "label_confidence", "label_source"}
    cols = [c["name"] for c in v.schema if c["name"] not in skip and _NUMERIC.match(c["type"])]
    if not cols:
        raise InvalidInputError(f"features: dataset {v.ref} has no numeric columns; list them")
    return cols


def _tabular_inputs(cfg: Config, v: VersionInfo, table: Any, data: ClassifyData) -> np.ndarray:
    """Feature matrix from plain columns (standardized on train rows) or a feature transform."""
    if isinstance(cfg.features, dict | str):
        from aifab.data.features import fit_features, load_feature_transform

        if isinstance(cfg.features, dict):
            ft = fit_features(v.ref, cfg.features).transform
        else:
            with _named("features"):
                ft = load_feature_transform(cfg.features)
        table = ft.transform_table(table)
        names = [c for c in ft.output_columns if c not in ft.passthrough]
        data.transform = ft
        data.preprocess["feature_transform"] = {
            "digest": ft.digest,
            "file": "feature_transform.json",
        }
        data.preprocess["features"] = names
        return datasets.numeric_matrix(table, names)
    names = cfg.features or _default_features(v, cfg)
    x = datasets.numeric_matrix(table, names)
    data.preprocess["features"] = names
    if cfg.standardize:
        scaler = datasets.Standardizer.fit(x[data.index["train"]])
        x = scaler(x)
        data.preprocess["standardize"] = scaler.to_dict()
    return x


def _text_inputs(cfg: Config, table: Any, data: ClassifyData) -> None:
    """Train a BPE tokenizer on the training texts, then tokenize every row."""
    from aifab.models.tokenizer import train_bpe_tokenizer

    assert cfg.text_column is not None
    texts = [str(t) if t is not None else "" for t in table.column(cfg.text_column).to_pylist()]
    tok = train_bpe_tokenizer((texts[i] for i in data.index["train"]), cfg.vocab_size)
    data.tokenizer = tok
    data.inputs.update(datasets.tokenize(texts, tok, cfg.max_length))
    data.preprocess.update(text_column=cfg.text_column, max_length=cfg.max_length)
    data.model_defaults = {
        "vocab_size": len(tok),
        "num_classes": len(data.classes),
        "max_len": cfg.max_length,
        "pad_token_id": int(tok.pad_token_id or 0),
    }


def build_model(cfg: Config, data: ClassifyData) -> tuple[torch.nn.Module, str, Any]:
    """The zoo model for the data's modality sized from the data (or the base model).

    Returns:
        ``(module, zoo name, validated zoo config)``.

    Raises:
        InvalidInputError: a model that does not fit the modality, or a base model whose
            number of classes differs from the data's.
    """
    from aifab.models.zoo import build_model as build_zoo_model
    from aifab.models.zoo import model_config

    name = MODELS[data.modality]
    if cfg.model.name not in ("auto", name):
        raise InvalidInputError(
            f"model.name: {cfg.model.name!r} does not take {data.modality} input (use {name!r})"
        )
    if cfg.base_model:
        from aifab.models.checkpoint import load_model

        module, sidecar = load_model(cfg.base_model)
        base_cfg = model_config(str(sidecar["builder"]), sidecar["config"])
        for key, want in data.model_defaults.items():
            if sidecar["builder"] != name or getattr(base_cfg, key, want) != want:
                have = getattr(base_cfg, key, None)
                raise InvalidInputError(
                    f"base_model: {cfg.base_model} is a {sidecar['builder']} with {key}={have}; "
                    f"this data needs {name} with {key}={want}"
                )
        return module.train(), name, base_cfg
    from aifab.train.multimodal_data import merge_config

    model_cfg = model_config(name, merge_config(data.model_defaults, cfg.model.config))
    return build_zoo_model(name, model_cfg), name, model_cfg


def finish_run(
    cfg: Config,
    run: Any,
    data: ClassifyData,
    state: dict[str, torch.Tensor],
    model: tuple[str, Any],
    metrics: dict[str, float],
) -> dict[str, Any]:
    """Rank 0's last part: save the model directory, log config/transform/model, register.

    Returns:
        ``model_dir``, ``model_version`` (None unless registered) and ``registered_as``.
    """
    from aifab.core.workspace import get_workspace
    from aifab.models.checkpoint import save_model
    from aifab.models.zoo import build_model as build_zoo_model
    from aifab.track.codeversion import code_version
    from aifab.train.lifecycle import publish

    name, model_cfg = model
    step = int(metrics.get("steps", 0))
    run.log_metrics(metrics, step)
    module = build_zoo_model(name, model_cfg)
    module.load_state_dict(state)
    out = Path(cfg.output_dir) if cfg.output_dir else get_workspace().artifacts / "models" / run.id
    meta = {
        "recipe": "classify",
        "run_id": run.id,
        "preprocess": data.preprocess,
        "datasets": [{"ref": d["ref"], "digest": d["digest"]} for d in data.dataset_inputs],
        "metrics": metrics,
        "code_version": {k: v for k, v in code_version().items() if k != "packages"},
    }
    save_model(out, module, builder=name, config=model_cfg, meta=meta, tokenizer=data.tokenizer)
    if data.transform is not None:
        data.transform.save(out / "feature_transform.json")
        run.log_artifact(out / "feature_transform.json", "features")
    elif "standardize" in data.preprocess:
        run.log_dict(data.preprocess, "features/preprocess.json")
    dataset_ref = data.dataset_inputs[0]["ref"]
    version = publish(run, out, recipe="classify", cfg=cfg, dataset_ref=dataset_ref)
    return {"model_dir": str(out), "model_version": version, "registered_as": cfg.register_as}
