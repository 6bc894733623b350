"""Model cards built from lineage: what a model version was made from, how it does, for whom.

``build_card`` gathers the registry entry, the model's sidecar (datasets with content hashes,
code version, config, metrics), the datasets as the catalog knows them, export reports,
evaluation by slice and fairness (fairlearn), a global explanation, and the owner's intended
use and limitations; it writes ``card.md``, ``card.html`` and ``card.json`` and attaches them
to the version (``exports/card`` of its run, tag ``aifab.export.card``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from aifab.core.atomic import atomic_write_text
from aifab.core.audit import audited
from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import AifabError, NotFoundError
from aifab.core.workspace import get_workspace
from aifab.data.catalog import resolve
from aifab.models.checkpoint import read_sidecar
from aifab.ops.card.render import render_html, render_markdown
from aifab.track.registry import attach_export, download_model, resolve_model

__all__ = ["CardOwnerFields", "build_card"]

_CARD_FORMAT = "card"


class CardOwnerFields(StrictConfig):
    """What only the model's owner can say (``--owner-file card.yaml`` or flags)."""

    intended_use: str | None = Field(None, description="What the model is for, and for whom.")
    limitations: str | None = Field(None, description="Where it should not be trusted.")
    owners: list[str] = Field(default_factory=list, description="Who answers for it.")
    sensitive: list[str] = Field(
        default_factory=list, description="Columns to report fairness and slices over."
    )


def _datasets(meta: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in meta.get("datasets") or []:
        entry: dict[str, Any] = {"ref": d.get("ref"), "digest": d.get("digest")}
        try:
            v = resolve(str(d.get("ref")))
            entry.update(
                content_hash=v.content_hash, rows=v.num_rows, source=v.source, parents=v.parents
            )
        except NotFoundError:
            entry["note"] = "this version no longer exists in the catalog"
        out.append(entry)
    return out


def model_inputs(pre: dict[str, Any], datasets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each modality the model reads: its columns, source dataset and preprocessing."""
    source = ", ".join(str(d.get("ref")) for d in datasets) or None
    out: list[dict[str, Any]] = []
    if pre.get("image_column") or pre.get("image_shape"):
        shape = "x".join(str(n) for n in pre.get("image_shape") or [])
        cols = [pre["image_column"]] if pre.get("image_column") else pre.get("features") or []
        how = f"decoded, resized to {shape}, /255" if pre.get("image_column") else "pixels"
        out.append({"modality": "image", "columns": cols, "dataset": source, "preprocess": how})
    if pre.get("text_column"):
        how = f"BPE tokenizer trained on the train split, {pre.get('max_length')} tokens"
        out.append(
            {
                "modality": "text",
                "columns": [pre["text_column"]],
                "dataset": source,
                "preprocess": how,
            }
        )
    if pre.get("features") and (pre.get("modality") == "multimodal" or not pre.get("image_shape")):
        how = (
            "feature transform"
            if pre.get("feature_transform")
            else ("standardized (train statistics)" if pre.get("standardize") else "as is")
        )
        out.append(
            {
                "modality": "tabular",
                "columns": list(pre["features"]),
                "dataset": source,
                "preprocess": how,
            }
        )
    return out


def _exports(
    name: str, version: int, run_id: str | None, tags: dict[str, str]
) -> list[dict[str, Any]]:
    out = []
    for tag, uri in sorted(tags.items()):
        fmt = tag.removeprefix("aifab.export.")
        if not tag.startswith("aifab.export.") or fmt == _CARD_FORMAT:
            continue
        entry: dict[str, Any] = {"format": fmt, "uri": uri}
        r = _export_report(get_workspace().exports / name / f"v{version}" / fmt, run_id, fmt)
        if r is not None:
            entry.update(
                {k: r.get(k) for k in ("size_ratio", "speedup", "accuracy", "max_abs_diff")}
            )
        out.append(entry)
    return out


def _export_report(local: Path, run_id: str | None, fmt: str) -> dict[str, Any] | None:
    """An export's report: this machine's copy, else the one attached to the version's run.

    Another node has no local exports directory; the run's artifacts (on the object store in
    team mode) are reachable from every machine.
    """
    from aifab.core.errors import InvalidInputError
    from aifab.track.runs import read_artifact

    if (local / "report.json").is_file():
        report: dict[str, Any] = json.loads((local / "report.json").read_text())
        return report
    if not run_id:
        return None
    try:
        attached = json.loads(read_artifact(run_id, f"exports/{fmt}/report.json"))
    except (NotFoundError, InvalidInputError, ValueError):
        return None
    return attached if isinstance(attached, dict) else None


def _section(notes: list[str], what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one optional section; a model it does not apply to gets a note, not a failure."""
    try:
        return fn(*args, **kwargs)
    except AifabError as exc:
        notes.append(f"no {what}: {exc.message}")
        return None


def gather(ref: str, owner: CardOwnerFields, *, explain: bool = True) -> dict[str, Any]:
    """Everything a card shows, as one JSON-ready dict."""
    from aifab.ops.explain.explainers import global_explanation
    from aifab.ops.fairness import fairness_report

    mv = resolve_model(ref)
    key = f"{mv['name']}@{mv['version']}"
    sidecar = read_sidecar(download_model(key))
    meta = sidecar.get("meta") or {}
    pre = meta.get("preprocess") or {}
    notes: list[str] = []
    fairness = (
        _section(notes, "fairness", fairness_report, key, owner.sensitive)
        if owner.sensitive
        else None
    )
    if not owner.sensitive:
        notes.append("no fairness or slices: the owner declared no sensitive features")
    explanation = _section(notes, "explanation", global_explanation, key) if explain else None
    for section in (fairness, explanation):
        notes += [w for w in (section or {}).get("warnings", []) if w not in notes]
    return {
        "model": key,
        "name": mv["name"],
        "version": mv["version"],
        "aliases": mv.get("aliases") or [],
        "run_id": mv.get("run_id"),
        "created_at": mv.get("created_at"),
        "owner": owner.model_dump(),
        "builder": sidecar.get("builder"),
        "task": sidecar.get("task"),
        "config": sidecar.get("config") or {},
        "recipe": meta.get("recipe"),
        "code_version": meta.get("code_version") or {},
        "datasets": _datasets(meta),
        "inputs": model_inputs(pre, meta.get("datasets") or []),
        "classes": pre.get("classes") or [],
        "label": pre.get("label"),
        "features": len(pre.get("features") or []),
        "metrics": meta.get("metrics") or {},
        "fairness": fairness,
        "explanation": explanation,
        "exports": _exports(mv["name"], int(mv["version"]), mv.get("run_id"), mv.get("tags") or {}),
        "notes": notes,
    }


def _previous_owner(card_dir: Path) -> dict[str, Any]:
    """The owner fields of the card last written to ``card_dir`` ({} if none or unreadable)."""
    try:
        owner = json.loads((card_dir / "card.json").read_text()).get("owner")
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(owner, dict):
        return {}
    return {k: v for k, v in owner.items() if k in CardOwnerFields.model_fields and v}


def build_card(
    ref: str,
    owner: CardOwnerFields | Path | str | dict[str, Any] | None = None,
    *,
    intended_use: str | None = None,
    limitations: str | None = None,
    sensitive: list[str] | None = None,
    explain: bool = True,
    attach: bool = True,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Write the model card of version ``ref`` (Markdown, HTML, JSON) and attach it.

    Args:
        ref: ``NAME@VERSION`` or ``NAME@ALIAS``.
        owner: owner fields: a :class:`CardOwnerFields`, a YAML file or a mapping.
        intended_use: overrides the owner file's.
        limitations: overrides the owner file's.
        sensitive: overrides the owner file's sensitive columns.
        explain: include the global explanation (permutation importance and mean |SHAP|).
        attach: log the files to the version's run and tag the version.
        out_dir: where the files go (default ``<workspace>/exports/<name>/v<version>/card``).

    Returns:
        ``{"model", "path", "files", "artifact_uri", "card"}``.

    Raises:
        InvalidInputError: a bad owner file.
        NotFoundError: no such model version.
    """
    mv = resolve_model(ref)
    target = out_dir or get_workspace().exports / mv["name"] / f"v{mv['version']}" / "card"
    target = Path(target).absolute()
    given = as_config(CardOwnerFields, owner, "card owner fields").model_dump(exclude_unset=True)
    changes = {"intended_use": intended_use, "limitations": limitations, "sensitive": sensitive}
    given.update({k: v for k, v in changes.items() if v is not None})
    # A rebuild (``--html`` a moment later) keeps what the owner stated before unless restated.
    fields = CardOwnerFields.model_validate({**_previous_owner(target), **given})
    card = gather(ref, fields, explain=explain)
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target / "card.md", render_markdown(card))
    atomic_write_text(target / "card.html", render_html(card))
    atomic_write_text(target / "card.json", json.dumps(card, indent=2, default=str) + "\n")
    uri = attach_export(card["model"], target, _CARD_FORMAT) if attach else None
    if not attach:
        audited("model.card", f"model:{card['model']}", {"path": str(target)})
    return {
        "model": card["model"],
        "path": str(target),
        "files": ["card.html", "card.json", "card.md"],
        "artifact_uri": uri,
        "card": card,
    }
