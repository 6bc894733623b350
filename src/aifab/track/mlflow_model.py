"""Registered aifab models as MLflow models: an ``MLmodel`` logged as a LoggedModel of its run.

The MLflow model has a ``python_function`` flavor (:class:`aifab.track.pyfunc.AifabPythonModel`:
raw records in, ``/v1/predict`` outputs out), the native flavor where one fits (``pytorch`` for
zoo classifiers, ``transformers`` for causal LMs), an ``aifab`` flavor naming the aifab model
directory inside it (aifab's own loaders read those same files), a signature and an input
example.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from aifab.core.registry import load_target
from aifab.core.workspace import get_workspace
from aifab.track.model_wheel import WHEELS_DIR, write_aifab_wheel

#: Flavor name under which ``MLmodel`` records the aifab model directory.
FLAVOR = "aifab"
#: The aifab model directory's sidecar (``aifab.models.checkpoint.SIDECAR``; same layer, so
#: named here rather than imported).
SIDECAR_FILE = "aifab-model.json"
_LOAD_MODULE = "aifab.models.checkpoint:load_model"
_CLASSIFIERS = ("mlp", "cnn", "transformer-classifier")
_LMS = ("causal-lm", "hf-causal-lm")
#: Columns MLflow checks by type: text only. Numbers, booleans and dates are declared ``Any``:
#: MLflow's enforcement refuses int64 for ``double`` ("Can not safely convert int64 to
#: float64": every whole-number income ``pd.read_csv`` reads), 41.0 for ``long`` and parsed
#: dates for ``string``, all of which ``/v1/predict`` takes; aifab's handler checks each value
#: as it checks an HTTP request (and names the column when one is wrong).
_CHECKED_BY_MLFLOW = {"string": "string"}
_EXAMPLE_VALUES: dict[str, Any] = {
    "integer": 1,
    "number": 1.0,
    "boolean": False,
    "date": "2024-01-01",
}
#: What loading the pyfunc needs besides aifab (its wheel): passed explicitly (inferring costs
#: seconds per log). aifab's other dependencies come from the wheel's metadata.
_REQUIREMENTS = ("mlflow", "torch", "transformers", "safetensors", "duckdb", "pyarrow")


def _pinned(names: tuple[str, ...]) -> list[str]:
    """``name==version`` of each installed package, without a local version label.

    ``torch==2.13.0+cpu`` names a build only PyTorch's own index has; ``torch==2.13.0`` is
    on PyPI (and on PyTorch's CPU index, for whoever adds it with ``--extra-index-url``).
    """
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={version(name).split('+', 1)[0]}")
        except PackageNotFoundError:
            pins.append(name)
    return pins


def model_requirements(wheel: str) -> list[str]:
    """The pip requirements of an aifab MLflow model.

    Its aifab wheel (a path inside the model directory) and the pinned packages loading it
    needs.
    """
    return [wheel, *_pinned(_REQUIREMENTS)]


def aifab_model_dir(mlflow_model_dir: Path) -> Path | None:
    """The aifab model directory inside an MLflow model directory, or None if it has none."""
    mlmodel = mlflow_model_dir / "MLmodel"
    if not mlmodel.is_file():
        return None
    flavors = (yaml.safe_load(mlmodel.read_text(encoding="utf-8")) or {}).get("flavors") or {}
    sub = (flavors.get(FLAVOR) or {}).get("model_dir")
    return mlflow_model_dir / str(sub) if sub else None


def _signature(describe: Mapping[str, Any]) -> tuple[Any, Any]:
    """MLflow signature and an input example (None when none can be made) for a handler."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema
    from mlflow.types.schema import AnyType

    kind = describe.get("kind")
    if kind == "classifier":
        cols = list(describe.get("input_columns") or [])
        schema = Schema(
            [ColSpec(_CHECKED_BY_MLFLOW.get(c["type"]) or AnyType(), c["name"]) for c in cols]
        )
        example = None
        if describe.get("modality") == "tabular":
            example = [{c["name"]: _EXAMPLE_VALUES.get(c["type"], "a") for c in cols}]
        return ModelSignature(inputs=schema), example
    if kind == "lm":
        # Defaults as aifab.inference.generation.GenerationParams (a layer above: not imported).
        params = ParamSchema(
            [
                ParamSpec("max_tokens", "long", 64),
                ParamSpec("temperature", "double", 1.0),
                ParamSpec("top_p", "double", 1.0),
                ParamSpec("top_k", "long", 0),
            ]
        )
        inputs = Schema([ColSpec("string", "prompt")])
        return ModelSignature(inputs=inputs, params=params), [{"prompt": "Hello"}]
    return ModelSignature(inputs=Schema([ColSpec("string", "input")])), [{"input": "Hello"}]


def _native_flavor(model_dir: Path, builder: str, scratch: Path) -> tuple[str, dict, Path] | None:
    """Save the native MLflow flavor of the model in ``scratch``: (flavor, config, directory)."""
    if builder in _CLASSIFIERS:
        import mlflow.pytorch

        module, _ = load_target(_LOAD_MODULE)(model_dir)
        mlflow.pytorch.save_model(
            module,
            scratch,
            serialization_format="pickle",
            pip_requirements=_pinned(_REQUIREMENTS),  # its own files are not kept
        )
        flavor = "pytorch"
    elif builder in _LMS:
        import mlflow.transformers
        from transformers import AutoTokenizer

        model, _ = load_target(_LOAD_MODULE)(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        mlflow.transformers.save_model(
            {"model": model, "tokenizer": tokenizer},
            scratch,
            task="text-generation",
            pip_requirements=_pinned(_REQUIREMENTS),
        )
        flavor = "transformers"
    else:
        return None
    config = yaml.safe_load((scratch / "MLmodel").read_text(encoding="utf-8"))["flavors"][flavor]
    return flavor, config, scratch


def build_mlflow_model(
    model_dir: Path, dst: Path, *, run_id: str, model_id: str, loaded: Any = None
) -> Path:
    """Write the MLflow model of aifab model directory ``model_dir`` to ``dst`` (not existing).

    ``loaded`` is the directory already loaded by aifab's loader (loaded here when None).

    Raises:
        InvalidInputError: the directory is no model aifab can load (named by its loader).
    """
    import mlflow.pyfunc
    from mlflow.models import Model

    from aifab.track.pyfunc import ARTIFACT_KEY, LOADER

    loaded = loaded or load_target(LOADER)(str(model_dir))
    signature, example = _signature(loaded.handler.describe())
    builder = str(loaded.sidecar.get("builder"))
    wheels = Path(tempfile.mkdtemp(prefix="wheel-", dir=get_workspace().tmp))
    try:
        wheel = write_aifab_wheel(wheels)
        mlflow.pyfunc.save_model(
            dst,
            python_model=str(Path(__file__).with_name("pyfunc_code.py")),
            artifacts={ARTIFACT_KEY: str(model_dir)},
            signature=signature,
            input_example=example,
            pip_requirements=model_requirements(f"{WHEELS_DIR}/{wheel.name}"),
            mlflow_model=Model(run_id=run_id, model_id=model_id),
        )
        (dst / WHEELS_DIR).mkdir()
        shutil.copy2(wheel, dst / WHEELS_DIR / wheel.name)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    mlmodel = Model.load(dst / "MLmodel")
    inner = mlmodel.flavors["python_function"]["artifacts"][ARTIFACT_KEY]["path"]
    mlmodel.add_flavor(FLAVOR, model_dir=inner, builder=builder, format="aifab-model/1")
    scratch = Path(tempfile.mkdtemp(prefix="native-", dir=get_workspace().tmp))
    try:
        native = _native_flavor(model_dir, builder, scratch / "m")
        if native is not None:
            flavor, config, where = native
            for entry in where.iterdir():
                if entry.is_dir() and not (dst / entry.name).exists():
                    shutil.copytree(entry, dst / entry.name)
            mlmodel.add_flavor(flavor, **config)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mlmodel.save(dst / "MLmodel")
    return dst


def log_mlflow_model(run_id: str, model_dir: Path, *, name: str) -> tuple[str, str]:
    """Log aifab model directory ``model_dir`` as a LoggedModel of run ``run_id``.

    Raises:
        InvalidInputError: aifab cannot load the directory (nothing is created then).

    Returns:
        The LoggedModel's id and artifact location (the model version's source: the registry
        resolves ``models:/<id>`` sources through MLflow's global tracking URI, not ours).
    """
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    from aifab.track.client import get_client
    from aifab.track.pyfunc import LOADER

    loaded = load_target(LOADER)(str(model_dir))  # before creating anything: it may not load
    client = get_client()
    run = client.get_run(run_id)
    builder = str(servable_builder(model_dir))
    logged = client.create_logged_model(
        run.info.experiment_id,
        name=name,
        source_run_id=run_id,
        tags={"aifab.builder": builder},
        model_type=builder,
    )
    scratch = Path(tempfile.mkdtemp(prefix="mlmodel-", dir=get_workspace().tmp))
    try:
        with _quiet():
            built = build_mlflow_model(
                model_dir, scratch / "model", run_id=run_id, model_id=logged.model_id, loaded=loaded
            )
        client.log_model_artifacts(logged.model_id, str(built))
    except BaseException:
        client.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
    return str(logged.model_id), str(logged.artifact_location)


def servable_builder(model_dir: Path) -> str | None:
    """The builder of an aifab model directory that aifab's handlers serve, else None.

    Other directories (no or another sidecar, adapters, a model logged by plain MLflow) are
    registered as they are.
    """
    if (model_dir / "MLmodel").is_file():
        return None
    try:
        sidecar = json.loads((model_dir / SIDECAR_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    builder = sidecar.get("builder") if isinstance(sidecar, dict) else None
    return builder if builder in (*_CLASSIFIERS, *_LMS) else None


def link_version(model_id: str, name: str, version: int) -> None:
    """Record model version ``name``/``version`` on its LoggedModel, as MLflow's fluent API does.

    MLflow's SQL registry keeps no model id on a version; the LoggedModel's
    ``mlflow.modelVersions`` tag is the link its UI and clients read.
    """
    from aifab.track.client import get_client

    client = get_client()
    tag = "mlflow.modelVersions"
    linked = json.loads(client.get_logged_model(model_id).tags.get(tag) or "[]")
    linked.append({"name": name, "version": str(version)})
    client.set_logged_model_tags(model_id, {tag: json.dumps(linked)})


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence MLflow's notes while saving (input validation, pickle advice, type hints).

    They address MLflow users writing their own models; registering from the CLI they would
    print over its output.
    """
    names = ("mlflow.pyfunc", "mlflow.pytorch", "mlflow.transformers", "mlflow.models")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)
