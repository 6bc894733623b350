"""Explanations of tabular classifiers: per prediction (Shapley values) and global.

Explainers are a ``Protocol`` plus a registry by name, like handlers: ``shapley`` (exact or
sampled Shapley values of raw features against background rows) is the default. Global
explanations are permutation importance on the test split and mean |Shapley| over a sample.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.core.registry import Registry
from aifab.ops.explain.model import TabularModel, load_tabular, one_class_warning
from aifab.ops.explain.shapley import EXACT_MAX, coalitions, masked_inputs, owners

__all__ = [
    "EXPLAINERS",
    "Explainer",
    "ShapleyExplainer",
    "explain_records",
    "global_explanation",
    "permutation_importance",
]

#: Records one explain call may carry (each costs one model run over every coalition).
MAX_RECORDS = 100


class Explainer(Protocol):
    """Explains predictions of a :class:`TabularModel` in raw-feature terms."""

    name: str

    def explain(self, model: TabularModel, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per decoded record: ``label``, ``value``, ``base`` and ``contributions``.

        ``value`` is its probability, ``base`` the background's mean probability of that
        class, and ``contributions``
        (``feature``, ``value``, ``contribution``), which sum to ``value - base``.
        """


class ShapleyExplainer:
    """Interventional Shapley values (SHAP) of raw features, averaged over background rows."""

    name = "shapley"

    def explain(self, model: TabularModel, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :class:`Explainer`."""
        cols, bg = model.columns, model.background
        m, k = len(cols), len(bg)
        masks, weights = coalitions(m)
        x = model.handler.encode_inputs(records)["x"].reshape(len(records), -1)
        x_bg = model.x_background.astype(np.float32, copy=False)
        # Rows (record, background row, coalition) in that order, built by broadcasting.
        stacked = np.empty((len(records), k, len(masks), x.shape[1]), dtype=np.float32)
        for r, rec in enumerate(records):
            if not _needs_probe(model, x[r]):
                np.copyto(stacked[r], np.where(_keep(model, masks), x[r], x_bg[:, None, :]))
                continue
            for j in range(k):
                owner = _owner_for(model, rec, x[r], j)
                stacked[r, j] = masked_inputs(x[r], x_bg[j], owner, masks)
        proba = model.proba_x(stacked.reshape(-1, x.shape[1]))
        proba = proba.reshape(len(records), k, len(masks), -1)
        out = []
        for r, rec in enumerate(records):
            full = proba[r, 0, -1]  # the all-kept coalition is the record itself
            target = int(full.argmax())
            v = proba[r, :, :, target]  # (k, coalitions)
            phi = (weights @ v.T).mean(axis=1)
            out.append(
                {
                    "label": model.classes[target],
                    "value": float(full[target]),
                    "base": float(v[:, 0].mean()),
                    "contributions": _ranked(cols, rec, phi),
                }
            )
        return out


def _needs_probe(model: TabularModel, x_rec: np.ndarray) -> bool:
    """Whether a column no feature owns differs between the record and a background row."""
    unknown = model.owner < 0
    return bool((x_rec[unknown] != model.x_background[:, unknown]).any())


def _keep(model: TabularModel, masks: np.ndarray) -> np.ndarray:
    """``(coalitions, cols)``: where a coalition keeps the record's encoded value.

    From the model's own column ownership; columns no feature owns keep the record's values
    (they equal every background row's wherever this is used). Exact coalitions are the same
    for every record, so their mask is built once per model.
    """
    exact = masks.shape[1] <= EXACT_MAX
    if exact and masks.shape[1] in model.keep_cache:
        return model.keep_cache[masks.shape[1]]
    keep = np.ones((masks.shape[0], model.owner.shape[0]), dtype=bool)
    owned = model.owner >= 0
    keep[:, owned] = masks[:, model.owner[owned]]
    if exact:
        model.keep_cache[masks.shape[1]] = keep
    return keep


def _owner_for(model: TabularModel, rec: dict[str, Any], x_rec: np.ndarray, j: int) -> np.ndarray:
    """The model's column ownership, completed for this record where it is unknown.

    A column no swap at load time moved (a category the test split lacks) but that differs
    from background row ``j`` is attributed by swapping each feature of this record.
    """
    unknown = (model.owner < 0) & (x_rec != model.x_background[j])
    if not unknown.any():
        return model.owner
    swapped = [{**rec, c: model.background[j][c]} for c in model.columns]
    x_swapped = model.handler.encode_inputs(swapped)["x"].reshape(len(swapped), -1)
    owner = model.owner.copy()
    owner[unknown] = owners(x_rec, x_swapped)[unknown]
    return owner


def _ranked(cols: list[str], rec: dict[str, Any], phi: np.ndarray) -> list[dict[str, Any]]:
    order = np.argsort(-np.abs(phi), kind="stable")
    return [
        {"feature": cols[i], "value": _shown(rec[cols[i]]), "contribution": float(phi[i])}
        for i in order
    ]


def _shown(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    return value


EXPLAINERS = Registry("explainer", {"shapley": "aifab.ops.explain.explainers:ShapleyExplainer"})


def explain_records(
    ref: str, records: Any, *, method: str = "shapley", top: int | None = None
) -> dict[str, Any]:
    """Explain the predictions of model version ``ref`` for raw ``records``.

    Args:
        ref: ``NAME@VERSION`` or ``NAME@ALIAS`` of a tabular classifier, or of a multimodal
            one (explained per modality: ``aifab.ops.explain.modality``).
        records: request records, as ``POST /v1/predict`` takes them.
        method: an explainer name (``shapley``).
        top: keep the ``top`` largest contributions per record (default: all).

    Returns:
        ``{"model", "method", "explanations": [{label, value, base, contributions}]}``.

    Raises:
        InvalidInputError: bad records (row and field named), too many, a bad ``top``, or a
            model that is not a tabular classifier.
        NotFoundError: an unknown model version or explainer.
    """
    if top is not None and top < 1:
        raise InvalidInputError(f"top: expected at least 1, got {top}")
    from aifab.ops.explain.modality import explain_modalities, is_multimodal

    # A multimodal model is explained per modality (Shapley over image, text, fields).
    if method in ("shapley", "modality") and is_multimodal(ref):
        result = explain_modalities(ref, records, max_records=MAX_RECORDS)
        if top is not None:
            for e in result["explanations"]:
                e["contributions"] = e["contributions"][:top]
        return result
    explainer: Explainer = EXPLAINERS.get(method)()
    model = load_tabular(ref)
    decoded = model.decode(records)
    if len(decoded) > MAX_RECORDS:
        raise InvalidInputError(f"records: at most {MAX_RECORDS} per call, got {len(decoded)}")
    explanations = explainer.explain(model, decoded)
    if top is not None:
        for e in explanations:
            e["contributions"] = e["contributions"][:top]
    return {"model": model.ref, "method": method, "explanations": explanations}


def permutation_importance(
    model: TabularModel, *, repeats: int = 3, max_rows: int = 500, seed: int = 0
) -> list[dict[str, Any]]:
    """Accuracy lost when each raw feature's values are shuffled across test rows.

    Returns:
        ``[{feature, importance, std}]``, most important first (mean and spread of the drop).
    """
    rng = np.random.default_rng(seed)
    n = min(len(model.test_records), max_rows)
    records, truth = model.test_records[:n], np.asarray(model.test_labels[:n])
    classes = np.asarray(model.classes)

    def accuracy(rows: list[dict[str, Any]]) -> float:
        return float(np.mean(classes[model.proba(rows).argmax(axis=1)] == truth))

    base = accuracy(records)
    out: list[dict[str, Any]] = []
    for c in model.columns:
        drops = []
        for _ in range(repeats):
            shuffled = [records[i][c] for i in rng.permutation(n)]
            drops.append(
                base - accuracy([{**r, c: v} for r, v in zip(records, shuffled, strict=True)])
            )
        out.append({"feature": c, "importance": float(np.mean(drops)), "std": float(np.std(drops))})
    out.sort(key=lambda d: -float(d["importance"]))
    return out


def global_explanation(ref: str, *, sample: int = 50, repeats: int = 3) -> dict[str, Any]:
    """What drives model version ``ref`` overall (stored with its card).

    Args:
        ref: a tabular classifier.
        sample: test rows whose Shapley values are averaged.
        repeats: shuffles per feature for permutation importance.

    Returns:
        ``{"model", "rows", "accuracy", "permutation_importance": [...],
        "mean_abs_shap": [{feature, mean_abs}], "warnings": [...]}``.
    """
    model = load_tabular(ref)
    rows = model.test_records[:sample]
    shap_values = ShapleyExplainer().explain(model, rows)
    mean_abs: dict[str, float] = {c: 0.0 for c in model.columns}
    for e in shap_values:
        for c in e["contributions"]:
            mean_abs[c["feature"]] += abs(c["contribution"]) / len(shap_values)
    truth = np.asarray(model.test_labels)
    pred = np.asarray(model.classes)[model.proba(model.test_records).argmax(axis=1)]
    return {
        "model": model.ref,
        "rows": len(model.test_records),
        "accuracy": float(np.mean(pred == truth)),
        "permutation_importance": permutation_importance(model, repeats=repeats),
        "mean_abs_shap": sorted(
            ({"feature": f, "mean_abs": v} for f, v in mean_abs.items()),
            key=lambda d: -d["mean_abs"],
        ),
        "warnings": [w] if (w := one_class_warning(pred, f"the test split of {model.ref}")) else [],
    }
