"""``/v1/keys``: API keys (admin only; the secret is shown once) and their dashboard sessions."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from aifab.serve import keys as svc
from aifab.serve import sessions
from aifab.serve.auth import Principal, forget_keys, require

router = APIRouter(prefix="/v1/keys", tags=["keys"])


class KeyCreate(BaseModel):
    """A new API key."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(..., description="admin | developer | viewer | client")
    name: str = Field("", max_length=100, description="A label for listings.")
    rate: str | None = Field("600/min", description="Requests per period (600/min, 10/s, none).")
    token_quota: int | str | None = Field(
        None, description="Model tokens per UTC day (N or N/day)."
    )
    datasets: list[str] | str | None = Field(
        None, description="Client keys: datasets it may push to (names or prefixes ending in *)."
    )


class SignOut(BaseModel):
    """Whose dashboard sessions to end: one key's, or everyone's."""

    model_config = ConfigDict(extra="forbid")

    key_id: str | None = Field(None, max_length=32, description="End this key's sessions.")
    all: bool = Field(False, description="End every dashboard session.")

    @model_validator(mode="after")
    def _one_target(self) -> SignOut:
        if (self.key_id is None) == (not self.all):
            raise ValueError("give key_id or all: true (not both)")
        return self


@router.get("")
async def list_keys(_: Principal = Depends(require("keys"))) -> list[dict[str, Any]]:
    """Every key (ids, prefixes, roles, limits; never the secrets or hashes)."""
    return await asyncio.to_thread(svc.list_keys)


@router.post("", status_code=201)
async def create_key(
    body: KeyCreate, principal: Principal = Depends(require("keys"))
) -> dict[str, Any]:
    """Create a key; ``key`` in the answer is the secret, shown this once."""
    record, secret = await principal.call(
        svc.create_key,
        body.role,
        name=body.name,
        rate=body.rate,
        token_quota=body.token_quota,
        datasets=body.datasets,
    )
    return {**record, "key": secret}


@router.delete("/{key_id}")
async def revoke_key(
    key_id: str, request: Request, principal: Principal = Depends(require("keys"))
) -> dict[str, Any]:
    """Revoke a key (takes effect within a second on this server)."""
    revoked = await principal.call(svc.revoke_key, key_id)
    forget_keys(request.app)  # this server stops accepting it at once
    return revoked


@router.post("/sign-out")
async def sign_out(
    body: SignOut, principal: Principal = Depends(require("keys"))
) -> dict[str, int]:
    """End dashboard sessions on the server ("sign out everywhere" with ``all``)."""
    ended = await principal.call(sessions.end_sessions, None if body.all else body.key_id)
    return {"ended": ended}
