"""The model registry on MLflow: register run artifacts as versions, aliases, resolve, download.

A model reference is ``NAME`` (the latest version), ``NAME@3`` (a version) or ``NAME@champion``
(an alias); MLflow's URIs ``models:/NAME/3`` and ``models:/NAME@champion`` name the same.
Registering and moving aliases are audited with the acting user.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from aifab.core import names
from aifab.core.audit import audited
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.ids import digest
from aifab.core.workspace import get_workspace
from aifab.track.client import MAX_TAG_LENGTH
from aifab.track.mlflow_model import aifab_model_dir, link_version
from aifab.track.tracking import get_client, tracking_uri, translate_error

_log = logging.getLogger(__name__)
_ALIAS_RE = re.compile(r"^[A-Za-z_][\w\-]{0,99}$")
_VERSION_LIKE = re.compile(r"^[vV]?\d+$")


def _check_model_name(name: str) -> str:
    return names.check_name(name, "model")


#: MLflow's model URI scheme; ``models:/NAME/VERSION`` is how artifacts point at a version.
MODELS_URI = "models:/"


def model_uri(name: str, version: int) -> str:
    """The MLflow model URI of a version, ``models:/NAME/VERSION`` (a pinned reference)."""
    return f"{MODELS_URI}{name}/{version}"


def parse_ref(ref: str) -> tuple[str, str | None]:
    """Split ``NAME[@VERSION|@ALIAS]`` into the name and the selector (None: latest).

    MLflow's ``models:/NAME/VERSION`` (or ``/latest``) and ``models:/NAME@ALIAS`` are read too.
    """
    text = ref.strip()
    if text.startswith(MODELS_URI):
        text = text.removeprefix(MODELS_URI)
        name, slash, version = text.partition("/")
        if slash:
            if not (version.isdigit() or version == "latest"):
                raise InvalidInputError(
                    f"model ref {ref!r}: expected models:/NAME/VERSION or models:/NAME@ALIAS"
                )
            text = f"{name}@{version}"
    name, sep, selector = text.partition("@")
    if sep and (not selector or "@" in selector):
        raise InvalidInputError(f"model ref {ref!r}: expected NAME, NAME@VERSION or NAME@ALIAS")
    return _check_model_name(name), (selector or None)


def canonical_ref(ref: str) -> str:
    """``ref`` in aifab's own form: ``models:/NAME/3`` is ``NAME@3`` (an alias stays one)."""
    name, selector = parse_ref(ref)
    return f"{name}@{selector}" if selector else name


def _version_dict(mv: Any) -> dict[str, Any]:
    return {
        "name": mv.name,
        "version": int(mv.version),
        "run_id": mv.run_id,
        "source": mv.source,
        "aliases": sorted(mv.aliases or []),
        "tags": dict(mv.tags or {}),
        "status": mv.status,
        "created_at": mv.creation_timestamp / 1000.0 if mv.creation_timestamp else None,
    }


def _registered(name: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return get_client().get_registered_model(name)
    except MlflowException as exc:
        raise translate_error(exc, f"model {name!r}") from None


def list_versions(name: str) -> list[dict[str, Any]]:
    """The versions of model ``name``, newest first, each with its aliases.

    Raises:
        NotFoundError: no model has this name.
    """
    rm = _registered(_check_model_name(name))
    by_version: dict[int, list[str]] = {}
    # MLflow's version search leaves aliases out; the registered model has them all.
    for alias, version in (rm.aliases or {}).items():
        by_version.setdefault(int(version), []).append(alias)
    versions = _versions(name)
    for v in versions:
        v["aliases"] = sorted(set(v["aliases"]) | set(by_version.get(v["version"], [])))
    return versions


def _versions(name: str) -> list[dict[str, Any]]:
    """The versions of the registered model ``name``, newest first (no existence check)."""
    found = get_client().search_model_versions(f"name = '{name}'")
    return sorted((_version_dict(mv) for mv in found), key=lambda v: -v["version"])


def list_models() -> list[dict[str, Any]]:
    """Every registered model with its latest version and aliases (alias -> version)."""
    client = get_client()
    rows = []
    for rm in client.search_registered_models(order_by=["name ASC"]):
        versions = [int(mv.version) for mv in client.search_model_versions(f"name = '{rm.name}'")]
        rows.append(
            {
                "name": rm.name,
                "latest": max(versions, default=None),
                "versions": len(versions),
                "aliases": {a: int(v) for a, v in (rm.aliases or {}).items()},
                "description": rm.description,
                "tags": dict(rm.tags or {}),
                "updated_at": rm.last_updated_timestamp / 1000.0,
            }
        )
    return rows


def resolve_model(ref: str) -> dict[str, Any]:
    """The model version ``ref`` names (``NAME``, ``NAME@3``, ``NAME@champion``).

    Returns:
        ``{"name", "version", "run_id", "source", "aliases", "tags", "status", "created_at"}``.

    Raises:
        NotFoundError: the model, version or alias does not exist (the message says which and
            lists what does).
    """
    from mlflow.exceptions import MlflowException

    name, selector = parse_ref(ref)
    rm = _registered(name)
    client = get_client()
    if selector is None or selector == "latest":
        versions = _versions(name)  # ``rm`` proved the model exists
        if not versions:
            raise NotFoundError(f"model {name!r} has no versions")
        return versions[0]
    try:
        if selector.isdigit():
            return _version_dict(client.get_model_version(name, selector))
        found = _version_dict(client.get_model_version_by_alias(name, selector))
    except MlflowException:
        if selector.isdigit():
            have = ", ".join(str(v["version"]) for v in reversed(_versions(name))) or "none"
            raise NotFoundError(
                f"model {name!r} has no version {selector} (versions: {have})"
            ) from None
        aliases = ", ".join(sorted(rm.aliases or {})) or "none"
        raise NotFoundError(
            f"model {name!r} has no alias {selector!r} (aliases: {aliases})"
        ) from None
    _note_alias(name, selector, found["version"], (rm.tags or {}).get(_ALIAS_TAG + selector))
    return found


#: Registered-model tag prefix: where aifab last saw each alias (``aifab.alias.champion``).
_ALIAS_TAG = "aifab.alias."


def _note_alias(name: str, alias: str, version: int, noted: str | None) -> None:
    """Audit an alias that moved outside aifab (MLflow's UI or API) when first seen moved."""
    if noted == str(version):
        return
    get_client().set_registered_model_tag(name, _ALIAS_TAG + alias, str(version))
    previous = int(noted) if noted and noted.isdigit() else None
    audited(
        "model.alias",
        f"model:{name}@{version}",
        {"alias": alias, "previous": previous, "moved_in": "mlflow"},
    )


def _check_artifact(run_id: str, artifact_path: str) -> None:
    """Raise NotFoundError unless run ``run_id`` exists and has ``artifact_path``."""
    from mlflow.exceptions import MlflowException

    client = get_client()
    parent = posixpath.dirname(artifact_path.strip("/")) or None
    try:
        client.get_run(run_id)
        entries = [e.path for e in client.list_artifacts(run_id, parent)]
    except MlflowException as exc:
        raise translate_error(exc, f"run {run_id!r}") from None
    if artifact_path.strip("/") not in entries:
        have = ", ".join(entries) or "none"
        raise NotFoundError(f"run {run_id} has no artifact {artifact_path!r} (has: {have})")


def register_model(
    run_id: str, artifact_path: str, name: str, *, tags: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Register ``runs:/<run_id>/<artifact_path>`` as a new version of model ``name``.

    The model is created on first registration. Returns the new version (as
    :func:`resolve_model`).

    Raises:
        NotFoundError: the run or its artifact does not exist.
    """
    from mlflow.exceptions import MlflowException

    _check_model_name(name)
    _check_artifact(run_id, artifact_path)
    client = get_client()
    try:
        client.get_registered_model(name)
    except MlflowException:
        try:
            client.create_registered_model(name)
        except MlflowException as exc:  # a concurrent registration may have created it
            if getattr(exc, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise translate_error(exc, f"model {name!r}") from None
    source = f"runs:/{run_id}/{artifact_path.strip('/')}"
    model_id, location, why_not = _as_mlflow_model(run_id, artifact_path, name)
    source = location or source
    str_tags = {str(k): str(v) for k, v in (tags or {}).items()}
    if why_not:
        str_tags["aifab.mlflow_model"] = f"not built: {why_not}"[:MAX_TAG_LENGTH]
    mv = client.create_model_version(name, source, run_id=run_id, tags=str_tags, model_id=model_id)
    version = _version_dict(mv)
    if model_id:
        link_version(model_id, name, version["version"])
    audited(
        "model.register",
        f"model:{name}@{version['version']}",
        {"run_id": run_id, "artifact_path": artifact_path, "tags": str_tags},
    )
    return version


def _as_mlflow_model(
    run_id: str, artifact_path: str, name: str
) -> tuple[str | None, str | None, str | None]:
    """Log the run's aifab model directory as an MLflow model: (LoggedModel id, location, None).

    (None, None, None) for any other artifact; (None, None, why) for an aifab directory that
    aifab itself cannot load (registered as plain files, with a warning).

    A directory without an aifab sidecar (e.g. a model logged by plain MLflow) is registered
    as it is.
    """
    from aifab.track.mlflow_model import log_mlflow_model, servable_builder

    scratch = Path(tempfile.mkdtemp(prefix="register-", dir=get_workspace().tmp))
    try:
        path = artifact_path.strip("/")
        local = Path(get_client().download_artifacts(run_id, path, str(scratch)))
        if servable_builder(local) is None:
            return None, None, None
        try:
            model_id, location = log_mlflow_model(run_id, local, name=name)
        except InvalidInputError as exc:
            _log.warning("model %s from run %s: no MLflow model: %s", name, run_id, exc.message)
            return None, None, exc.message
        return model_id, location, None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def set_alias(name: str, alias: str, version: int | str) -> dict[str, Any]:
    """Point ``alias`` (e.g. ``champion``) of model ``name`` at ``version``; it moves if set.

    Returns:
        The version now holding the alias, plus ``previous``: the version that held it before.

    Raises:
        InvalidInputError: a malformed alias (or one that looks like a version number).
        NotFoundError: the model or version does not exist.
    """
    if not _ALIAS_RE.fullmatch(alias) or _VERSION_LIKE.fullmatch(alias) or alias == "latest":
        raise InvalidInputError(
            f"alias {alias!r}: use letters, digits, '_' and '-', not 'latest' or a version number"
        )
    target = resolve_model(f"{name}@{int(version)}")
    previous = (_registered(name).aliases or {}).get(alias)
    get_client().set_registered_model_alias(name, alias, str(target["version"]))
    get_client().set_registered_model_tag(name, _ALIAS_TAG + alias, str(target["version"]))
    audited(
        "model.alias",
        f"model:{name}@{target['version']}",
        {"alias": alias, "previous": previous},
    )
    return {**resolve_model(f"{name}@{alias}"), "previous": int(previous) if previous else None}


def download_model(ref: str) -> Path:
    """A local directory with the files of model version ``ref`` (downloaded once per version).

    Files land in ``<workspace>/cache/models/<name>/v<version>-<source digest>``; later calls
    reuse them. The directory is moved into place whole, so it is complete when it exists.
    """
    mv = resolve_model(ref)
    cache = get_workspace().root / "cache" / "models" / mv["name"]
    target = cache / f"v{mv['version']}-{digest(mv['source'])[:12]}"
    if not target.is_dir():
        _download_to(mv["source"], cache, target)
    # An MLflow model built by register_model holds the aifab directory inside it.
    return aifab_model_dir(target) or target


def _download_to(source: str, cache: Path, target: Path) -> None:
    """Download ``source`` and move it to ``target`` whole (a concurrent download may win)."""
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="model-", dir=get_workspace().tmp))
    try:
        fetched = _fetch(source, scratch / "dl")
        if fetched.is_file():  # a single-file artifact still yields a directory
            (scratch / "one").mkdir()
            fetched = Path(shutil.move(fetched, scratch / "one" / fetched.name)).parent
        try:
            os.replace(fetched, target)
        except OSError:
            if not target.is_dir():  # anything but a concurrent download finishing first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _fetch(source: str, dst: Path) -> Path:
    """Download a model version's source (``runs:/...`` or any artifact URI) under ``dst``."""
    dst.mkdir(parents=True)
    if source.startswith("runs:/"):
        run_id, _, path = source.removeprefix("runs:/").partition("/")
        return Path(get_client().download_artifacts(run_id, path, str(dst)))
    from mlflow.artifacts import download_artifacts

    return Path(
        download_artifacts(artifact_uri=source, dst_path=str(dst), tracking_uri=tracking_uri())
    )


_EXPORT_FORMAT_RE = re.compile(r"^[a-z0-9][a-z0-9\-]{0,39}$")


def attach_export(ref: str, local_dir: Path | str, fmt: str) -> str:
    """Attach exported files to model version ``ref``: the run's ``exports/<fmt>`` artifacts.

    The files of ``local_dir`` are logged to the version's run under ``exports/<fmt>`` (a
    re-export overwrites them) and the version gets the tag ``aifab.export.<fmt>`` = their URI,
    so ``aifab models show`` lists the exports.

    Returns:
        The artifact URI, ``runs:/<run_id>/exports/<fmt>``.

    Raises:
        InvalidInputError: a malformed format name, a missing directory, or a version with no run.
        NotFoundError: the model version does not exist.
    """
    from mlflow.exceptions import MlflowException

    if not _EXPORT_FORMAT_RE.fullmatch(fmt):
        raise InvalidInputError(f"format {fmt!r}: use lowercase letters, digits and '-'")
    local = Path(local_dir)
    if not local.is_dir():
        raise InvalidInputError(f"{local}: export directory does not exist")
    mv = resolve_model(ref)
    where = f"model:{mv['name']}@{mv['version']}"
    if not mv["run_id"]:
        raise InvalidInputError(f"{where} has no run to attach exported files to")
    client = get_client()
    artifact_path = f"exports/{fmt}"
    uri = f"runs:/{mv['run_id']}/{artifact_path}"
    try:
        client.log_artifacts(mv["run_id"], str(local), artifact_path)
        client.set_model_version_tag(mv["name"], str(mv["version"]), f"aifab.export.{fmt}", uri)
    except MlflowException as exc:
        raise translate_error(exc, where) from None
    audited("model.export", where, {"format": fmt, "uri": uri})
    return uri
