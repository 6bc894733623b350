"""``/v1/prompts``: developers create versions and move aliases; clients read and render.

Thin callers of :mod:`aifab.prompts` (which validates and audits), run on a thread as the key.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from aifab.prompts import create_prompt, get_prompt, list_prompts, render_prompt, set_prompt_alias
from aifab.prompts.template import MAX_TEMPLATE_CHARS
from aifab.serve.auth import Principal, require

router = APIRouter(prefix="/v1/prompts", tags=["prompts"])


class PromptCreate(BaseModel):
    """A new prompt version (see ``aifab prompts create``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=100)
    template: str = Field(..., max_length=MAX_TEMPLATE_CHARS, description="Jinja2 source.")
    variables: list[str] | None = Field(
        None, max_length=200, description="Declared variables (default: those used)."
    )
    description: str = Field("", max_length=2000)
    alias: str | None = Field(None, max_length=64, description="Point NAME@ALIAS here.")


class PromptRender(BaseModel):
    """Variables to render a prompt with."""

    model_config = ConfigDict(extra="forbid")

    variables: dict[str, Any] = Field(default_factory=dict, max_length=200)


class AliasSet(BaseModel):
    """Where an alias points."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(..., ge=1, lt=2**31)


@router.get("")
async def list_all(
    principal: Principal = Depends(require("read", "invoke")),
) -> list[dict[str, Any]]:
    """Every prompt's latest version."""
    return await principal.call(list_prompts)


@router.post("", status_code=201)
async def create(
    body: PromptCreate, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Register a new immutable version (the same content as the latest: that version)."""
    return await principal.call(
        create_prompt,
        body.name,
        body.template,
        variables=body.variables,
        description=body.description,
        alias=body.alias,
    )


@router.get("/{ref}")
async def show(ref: str, principal: Principal = Depends(require("read", "invoke"))) -> dict:
    """One version: ``NAME``, ``NAME@VERSION`` or ``NAME@ALIAS``."""
    return await principal.call(get_prompt, ref)


@router.get("/{name}/versions")
async def versions(
    name: str, principal: Principal = Depends(require("read", "invoke"))
) -> list[dict[str, Any]]:
    """Every version of one prompt, newest first."""
    return await principal.call(list_prompts, name)


@router.post("/{ref}/render")
async def render(
    ref: str, body: PromptRender, principal: Principal = Depends(require("invoke", "read"))
) -> dict[str, Any]:
    """Render with ``variables``; missing or extra ones answer 422 naming them."""
    return await principal.call(render_prompt, ref, body.variables)


@router.put("/{name}/aliases/{alias}")
async def alias(
    name: str, alias: str, body: AliasSet, principal: Principal = Depends(require("deploy"))
) -> dict[str, Any]:
    """Point ``NAME@ALIAS`` at a version (audited)."""
    return await principal.call(set_prompt_alias, name, alias, body.version)
