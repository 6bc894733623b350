"""Model cards as text, pure: the gathered card dict -> Markdown, or HTML (escaped by Jinja2).

Every value that came from a user (owner fields, dataset sources, group names) is escaped:
HTML by autoescaping, Markdown by escaping HTML and table pipes, so a card renders as text.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

__all__ = ["render_html", "render_markdown"]

_UNSTATED = "_Not stated by the owner._"


def _md(value: Any) -> str:
    """A value safe inside Markdown text and table cells."""
    text = "" if value is None else str(value)
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", "<br>")


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return _md(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_num(c) for c in row) + " |" for row in rows]
    return [*out, ""]


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _owner(card: dict[str, Any]) -> list[str]:
    o = card["owner"]
    return [
        "## Intended use",
        "",
        _md(o.get("intended_use")) if o.get("intended_use") else _UNSTATED,
        "",
        "## Limitations",
        "",
        _md(o.get("limitations")) if o.get("limitations") else _UNSTATED,
        "",
    ]


def _lineage(card: dict[str, Any]) -> list[str]:
    code = card["code_version"]
    lines = ["## Training data", ""]
    lines += _table(
        ["dataset", "content hash", "rows", "source"],
        [
            [d["ref"], d.get("content_hash") or d.get("digest"), d.get("rows"), d.get("source")]
            for d in card["datasets"]
        ],
    )
    if card.get("inputs"):
        lines += ["### Inputs by modality", ""]
        lines += _table(
            ["modality", "columns", "dataset", "preprocessing"],
            [
                [i["modality"], ", ".join(i["columns"]), i["dataset"], i["preprocess"]]
                for i in card["inputs"]
            ],
        )
    lines += ["## Code and config", ""]
    lines += [
        f"- recipe: `{_md(card['recipe'])}`, builder: `{_md(card['builder'])}`",
        f"- aifab {_md(code.get('aifab_version'))}, git commit `{_md(code.get('git_commit'))}`"
        + (" (uncommitted changes)" if code.get("git_dirty") else ""),
        f"- config: `{_md(_compact(card['config']))}`",
        f"- label `{_md(card['label'])}`, classes: {_md(', '.join(map(str, card['classes'])))}, "
        f"{card['features']} encoded features",
        "",
    ]
    return lines


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, default=str)


def _fairness(card: dict[str, Any]) -> list[str]:
    f = card["fairness"]
    if not f:
        return []
    lines = [
        "## Evaluation by slice and fairness",
        "",
        f"Over {_md(', '.join(f['sensitive']))} on {f['rows']} rows of {_md(f['data'])}; "
        "positive class "
        f"`{_md(f['positive'])}`. Demographic parity difference "
        f"**{_num(f['demographic_parity_difference'])}**, equalized odds difference "
        f"**{_num(f['equalized_odds_difference'])}** (groups under {f['min_group_rows']} rows "
        "left out of both).",
        "",
    ]
    rates = ["count", "accuracy", "selection_rate", "true_positive_rate", "false_positive_rate"]
    lines += _table(
        ["group", *rates], [[g["group"], *(g[r] for r in rates)] for g in f["by_group"]]
    )
    return lines


def _explanation(card: dict[str, Any]) -> list[str]:
    e = card["explanation"]
    if not e:
        return []
    shap = {d["feature"]: d["mean_abs"] for d in e["mean_abs_shap"]}
    lines = [
        "## What drives it",
        "",
        f"Permutation importance (accuracy lost when a feature is shuffled, test split of "
        f"{e['rows']} rows) and mean |SHAP| of the predicted class's probability.",
        "",
    ]
    rows = [
        [d["feature"], d["importance"], d["std"], shap.get(d["feature"])]
        for d in e["permutation_importance"]
    ]
    return lines + _table(["feature", "importance", "std", "mean abs SHAP"], rows)


def render_markdown(card: dict[str, Any]) -> str:
    """The card as Markdown."""
    lines = [
        f"# Model card: {_md(card['model'])}",
        "",
        f"Registered {_when(card['created_at'])}; aliases: "
        f"{_md(', '.join(card['aliases']) or 'none')}; run `{_md(card['run_id'])}`; "
        f"owners: {_md(', '.join(card['owner'].get('owners') or []) or 'not stated')}.",
        "",
        *_owner(card),
        *_lineage(card),
        "## Metrics",
        "",
        *_table(["metric", "value"], [[k, v] for k, v in sorted(card["metrics"].items())]),
        *_fairness(card),
        *_explanation(card),
    ]
    if card["exports"]:
        lines += ["## Exports", ""]
        lines += _table(
            ["format", "size ratio", "speedup", "accuracy", "uri"],
            [
                [
                    x["format"],
                    x.get("size_ratio"),
                    x.get("speedup"),
                    _compact(x.get("accuracy")),
                    x["uri"],
                ]
                for x in card["exports"]
            ],
        )
    if card["notes"]:
        lines += ["## Notes", "", *(f"- {_md(n)}" for n in card["notes"]), ""]
    return "\n".join(lines).rstrip() + "\n"


_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Model card: {{ card.model }}</title>
<style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;
text-align:left}code{background:#f4f4f4}</style></head><body>
<h1>Model card: {{ card.model }}</h1>
<p>Registered {{ created }}; aliases: {{ card.aliases | join(", ") or "none" }};
run <code>{{ card.run_id }}</code>;
owners: {{ card.owner.owners | join(", ") or "not stated" }}.</p>
<h2>Intended use</h2><p>{{ card.owner.intended_use or "Not stated by the owner." }}</p>
<h2>Limitations</h2><p>{{ card.owner.limitations or "Not stated by the owner." }}</p>
<h2>Training data</h2><table><tr><th>dataset</th><th>content hash</th><th>rows</th>
<th>source</th></tr>{% for d in card.datasets %}<tr><td>{{ d.ref }}</td>
<td><code>{{ d.content_hash or d.digest }}</code></td><td>{{ d.rows }}</td><td>{{ d.source }}</td>
</tr>{% endfor %}</table>
{% if card.inputs %}<h3>Inputs by modality</h3><table><tr><th>modality</th><th>columns</th>
<th>dataset</th><th>preprocessing</th></tr>{% for i in card.inputs %}<tr><td>{{ i.modality }}</td>
<td>{{ i.columns | join(", ") }}</td><td>{{ i.dataset }}</td><td>{{ i.preprocess }}</td></tr>
{% endfor %}</table>{% endif %}
<h2>Code and config</h2><ul><li>recipe <code>{{ card.recipe }}</code>, builder
<code>{{ card.builder }}</code></li><li>aifab {{ card.code_version.aifab_version }}, git commit
<code>{{ card.code_version.git_commit }}</code>{% if card.code_version.git_dirty %}
(uncommitted changes){% endif %}</li><li>config <code>{{ config }}</code></li></ul>
<h2>Metrics</h2><table>{% for k, v in metrics %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>
{% endfor %}</table>
{% if card.fairness %}{% set f = card.fairness %}<h2>Evaluation by slice and fairness</h2>
<p>Over {{ f.sensitive | join(", ") }} on {{ f.rows }} rows of {{ f.data }}, positive class
<code>{{ f.positive }}</code>: demographic parity difference
<b>{{ f.demographic_parity_difference }}</b>, equalized odds difference
<b>{{ f.equalized_odds_difference }}</b>.</p><table><tr><th>group</th><th>count</th>
<th>accuracy</th><th>selection rate</th><th>TPR</th><th>FPR</th></tr>
{% for g in f.by_group %}<tr><td>{{ g.group }}</td><td>{{ g.count }}</td><td>{{ g.accuracy }}</td>
<td>{{ g.selection_rate }}</td><td>{{ g.true_positive_rate }}</td>
<td>{{ g.false_positive_rate }}</td></tr>{% endfor %}</table>{% endif %}
{% if card.explanation %}<h2>What drives it</h2><table><tr><th>feature</th>
<th>permutation importance</th><th>std</th></tr>
{% for d in card.explanation.permutation_importance %}<tr><td>{{ d.feature }}</td>
<td>{{ d.importance }}</td><td>{{ d.std }}</td></tr>{% endfor %}</table>{% endif %}
{% if card.exports %}<h2>Exports</h2><ul>{% for x in card.exports %}<li>{{ x.format }}:
{{ x.uri }}</li>{% endfor %}</ul>{% endif %}
{% if card.notes %}<h2>Notes</h2><ul>{% for n in card.notes %}<li>{{ n }}</li>{% endfor %}
</ul>{% endif %}
</body></html>
"""


def render_html(card: dict[str, Any]) -> str:
    """The card as a standalone HTML page (every value autoescaped)."""
    from jinja2 import Environment

    env = Environment(autoescape=True)
    return env.from_string(_HTML).render(
        card=card,
        created=_when(card["created_at"]),
        config=_compact(card["config"]),
        metrics=sorted(card["metrics"].items()),
    )
