"""What a LoRA adapter directory says about itself: its base and its model card.

The base is named by a reference that means something outside this workspace
(``adapter_config.json``); the card is ``README.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aifab.core.atomic import atomic_write_text

#: Where the adapter names its base, in PEFT's ``adapter_config.json``.
BASE_KEY = "base_model_name_or_path"
_HUB_PREFIX = "hf:"


def base_reference(base: str, directory: Path) -> str:
    """The base an adapter records: pinned, and meaningful to a person and to PEFT.

    Args:
        base: the recipe's ``base`` as the user wrote it.
        directory: where it was loaded from (a registered base's is a workspace cache path,
            which is what PEFT would record, and means nothing elsewhere).

    Returns:
        ``org/name`` for a Hub base (``hf:org/name``), the absolute path for a directory,
        else the registry version trained on as ``models:/NAME/VERSION`` (an alias or
        "latest" resolved to the version it named when training started).
    """
    if base.startswith(_HUB_PREFIX):
        return base.removeprefix(_HUB_PREFIX)
    given = Path(base).expanduser()
    if given.is_dir() and given.resolve() == directory.resolve():
        return str(directory.resolve())
    from aifab.track.registry import model_uri, resolve_model

    version = resolve_model(base)
    return model_uri(version["name"], int(version["version"]))


def point_at_base(adapter_dir: Path, base_ref: str) -> None:
    """Write ``base_ref`` as the base in ``adapter_config.json`` (PEFT wrote the load path)."""
    path = adapter_dir / "adapter_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config[BASE_KEY] = base_ref
    atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _front_matter(base_ref: str, datasets: list[dict[str, Any]]) -> str:
    import yaml

    front: dict[str, Any] = {
        "library_name": "peft",
        "pipeline_tag": "text-generation",
        "tags": ["lora", "peft", "aifab"],
    }
    if not base_ref.startswith(("models:/", "/")):  # a Hub id: the Hub links the base
        front["base_model"] = base_ref
    front["aifab"] = {"base": base_ref, "datasets": [d["ref"] for d in datasets]}
    return "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n"


def _load_snippet(base_ref: str) -> str:
    if base_ref.startswith("models:/"):
        head = "from aifab.track import download_model  # from this workspace's registry\n"
        base = f"download_model({base_ref!r})"
    else:
        head, base = "", repr(base_ref)
    return (
        "```python\n"
        f"{head}from peft import PeftModel\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        'adapter_dir = "."  # the directory holding this card\n'
        f"base = AutoModelForCausalLM.from_pretrained({base})\n"
        "model = PeftModel.from_pretrained(base, adapter_dir).eval()\n"
        "tokenizer = AutoTokenizer.from_pretrained(adapter_dir)\n"
        "```\n"
    )


def _table(header: tuple[str, str], rows: list[tuple[str, str]]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} |" for a, b in rows]) + "\n"


def render_card(
    meta: Mapping[str, Any],
    *,
    name: str,
    max_length: int,
    intended_use: str,
    limitations: str,
) -> str:
    """The adapter's model card (Hugging Face ``README.md`` shape, YAML front matter first).

    Args:
        meta: the adapter sidecar: ``base``, ``base_ref``, ``datasets`` (ref and content
            hash), ``lora``, ``metrics``, ``run_id``, ``code_version``.
        name: what the adapter is called (its registered name, else its directory's).
        max_length: the token cap training truncated conversations to.
        intended_use: the user's statement, or empty.
        limitations: the user's statement, or empty (facts from training are added).
    """
    base_ref, lora, metrics = meta["base_ref"], meta["lora"], meta["metrics"]
    datasets = list(meta["datasets"])
    given = meta["base"] if meta["base"] != base_ref else ""
    scale = lora["alpha"] / lora["r"]
    lora_rows = [
        ("rank r", str(lora["r"])),
        ("alpha", f"{lora['alpha']} (updates scaled alpha/r = {scale:g})"),
        ("dropout", f"{lora['dropout']:g}"),
        ("target modules", ", ".join(f"`{m}`" for m in lora["target_modules"])),
    ]
    for key in ("trainable_parameters", "total_parameters"):
        if key in metrics:
            lora_rows.append((key.replace("_", " "), f"{int(metrics[key]):,}"))
    shown = [(k, f"{v:.4g}") for k, v in sorted(metrics.items()) if "parameters" not in k]
    facts = (
        f"Conversations longer than {max_length} tokens were truncated in training. "
        "Evaluated only by the loss per assistant token on held-out rows of the training "
        "data (the metrics above), not on any task benchmark."
    )
    code = meta.get("code_version") or {}
    return "\n".join(
        [
            _front_matter(base_ref, datasets),
            f"# {name}: a LoRA adapter",
            "",
            f"A PEFT LoRA adapter for the causal LM `{base_ref}`"
            + (f" (given as `{given}`)" if given else "")
            + f", trained by aifab's `lora` recipe in run `{meta.get('run_id')}`.",
            "",
            "## Base model",
            "",
            f"`{base_ref}` (`{BASE_KEY}` in adapter_config.json). " + _base_note(base_ref),
            "",
            "## Training data",
            "",
            _table(
                ("dataset version", "content hash (SHA-256 of its rows)"),
                [(f"`{d['ref']}`", f"`{d['digest']}`") for d in datasets],
            ),
            "## LoRA configuration",
            "",
            _table(("setting", "value"), lora_rows),
            "## Metrics",
            "",
            _table(("metric", "value"), shown),
            "## Intended use",
            "",
            intended_use.strip() or "Not stated: set `intended_use` in the lora config.",
            "",
            "## Limitations",
            "",
            (limitations.strip() + "\n\n" if limitations.strip() else "") + facts,
            "",
            "## How to load it with PEFT",
            "",
            _load_snippet(base_ref),
            "## Provenance",
            "",
            f"aifab {code.get('aifab_version', '?')}, code commit "
            f"`{code.get('git_commit') or 'unknown'}`"
            + (" (with uncommitted changes)" if code.get("git_dirty") else "")
            + "; the full lineage is in `aifab-adapter.json` beside this card.",
            "",
        ]
    )


def _base_note(base_ref: str) -> str:
    if base_ref.startswith("models:/"):
        return (
            "A version in aifab's model registry, written as MLflow's model URI; "
            "`aifab.track.download_model` fetches its files from the workspace's registry."
        )
    if base_ref.startswith("/"):
        return "A local model directory: copy it along with the adapter."
    return "A Hugging Face Hub model."
