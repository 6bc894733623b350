"""Pipeline steps of prompts and RAG: ``kb_build``, ``kb_eval`` and ``prompt_eval``.

They always run (a knowledge base, a prompt and a chat model live outside what a fingerprint
of the step's files can see) and ``kb_build`` is idempotent: unchanged documents make no new
version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class KBBuildParams(StrictConfig):
    """``with`` of a ``kb_build`` step."""

    name: str = Field(description="Knowledge base name.")
    source: str = Field(
        alias="from", description="File or folder (relative to the pipeline file) or dataset."
    )
    text_column: str | None = Field(None, description="With a dataset: its text column.")
    id_column: str | None = Field(None, description="With a dataset: its document id column.")
    image_column: str | None = Field(
        None, description="With a dataset: its column of image bytes (a dual-encoder KB)."
    )
    config: dict[str, Any] = Field(default_factory=dict, description="KBConfig fields.")


class KBEvalParams(StrictConfig):
    """``with`` of a ``kb_eval`` step."""

    kb: str = Field(description="Knowledge base name.")
    qa: str = Field(description="QA file (JSONL or YAML), relative to the pipeline file.")
    k: int = Field(5, ge=1, le=100, description="Recall cut-off.")


class PromptEvalParams(StrictConfig):
    """``with`` of a ``prompt_eval`` step."""

    prompt: str = Field(description="NAME, NAME@VERSION or NAME@ALIAS.")
    data: str = Field(description="Dataset of inputs and expected outputs.")
    chat: str = Field(description="LM deployment name or OpenAI-compatible base URL.")
    expected_column: str = Field("expected", description="Column of expected answers.")
    scorers: list[str] = Field(default_factory=lambda: ["exact", "contains"])
    max_tokens: int = Field(64, ge=1, le=4096)


def kb_build(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Create the knowledge base, or add what changed (unchanged: no new version)."""
    p = ctx.params(KBBuildParams, params)
    is_dataset = p.text_column is not None or p.image_column is not None
    source = p.source if is_dataset else str(ctx.path(p.source))
    files = [] if is_dataset else [ctx.path(p.source)]

    def run() -> StepOutputs:
        from aifab.rag import sync_kb

        kb = sync_kb(
            p.name,
            source,
            text_column=p.text_column,
            id_column=p.id_column,
            config=p.config,
            image_column=p.image_column,
        )
        counts = kb.get("counts", {})
        details = {
            "kb": f"{kb['name']}@{kb['version']}",
            "action": kb["action"],
            "documents": counts.get("documents"),
            "chunks": counts.get("chunks"),
            "quarantined": len(kb.get("quarantine", [])),
        }
        return StepOutputs(details=details)

    return PreparedStep(run=run, files=files, always_run=True)


def kb_eval(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Retrieval metrics of each search mode over a QA file (an MLflow run)."""
    p = ctx.params(KBEvalParams, params)
    qa = ctx.path(p.qa)

    def run() -> StepOutputs:
        from aifab.rag import eval_kb

        out = eval_kb(p.kb, str(qa), k=p.k)
        return StepOutputs(
            details={
                "kb": f"{p.kb}@{out['version']}",
                "run_id": out["run_id"],
                "metrics": out["metrics"],
            }
        )

    return PreparedStep(run=run, files=[qa], always_run=True)


def prompt_eval(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Score a prompt version through a chat model over a dataset (an MLflow run)."""
    p = ctx.params(PromptEvalParams, params)
    version = ctx.dataset(p.data)

    def run() -> StepOutputs:
        from aifab.prompts import eval_prompt

        out = eval_prompt(
            p.prompt,
            version.ref,
            p.chat,
            expected_column=p.expected_column,
            scorers=p.scorers,
            max_tokens=p.max_tokens,
        )
        return StepOutputs(
            details={"prompt": out["prompt"], "run_id": out["run_id"], "scores": out["scores"]}
        )

    return PreparedStep(run=run, datasets=[version], always_run=True)
