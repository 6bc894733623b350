"""Which models this server holds: the deployments table reconciled into loaded targets.

A background task polls the deployments table. A new generation or a moved alias loads the
model on a thread and swaps it in when ready (the old targets serve until then); a failed load
is reported with its reason and never takes the server (or the previous targets) down.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aifab.inference.batcher import Batcher
from aifab.serve.errors import ApiError

log = logging.getLogger("aifab.serve")

__all__ = ["DeploymentManager", "Served", "Target"]


@dataclass(frozen=True)
class Target:
    """One loaded model version behind a deployment, with its own batcher."""

    model: str  # "name@version" (or the source string of a builtin/local model)
    handler: Any
    batcher: Batcher
    role: str  # "primary" | "canary"
    #: What identifies the load (model + backend + options + batching); equal keys share it.
    key: str = ""


@dataclass(frozen=True)
class Served:
    """A deployment as served right now: its primary, optional canary and routing rule."""

    name: str
    kind: str
    primary: Target
    canary: Target | None = None
    canary_weight: float = 0.0
    sticky_header: str | None = None
    generation: int = 0

    def targets(self) -> list[Target]:
        """The primary, then the canary if any."""
        return [self.primary] if self.canary is None else [self.primary, self.canary]

    def pick(self, headers: Mapping[str, str]) -> Target:
        """The target for one request: sticky by header hash, else random by canary weight."""
        if self.canary is None or self.canary_weight <= 0:
            return self.primary
        if self.canary_weight >= 100:
            return self.canary
        point: float
        value = headers.get(self.sticky_header) if self.sticky_header else None
        if value is not None:
            digest = hashlib.blake2b(value.encode(), digest_size=8).digest()
            point = int.from_bytes(digest, "big") % 10_000 / 100.0
        else:
            point = random.random() * 100.0
        return self.canary if point < self.canary_weight else self.primary


@dataclass
class _State:
    """What the manager knows about one deployment."""

    want: str = ""  # the desired-state key last acted on
    status: str = "pending"  # pending | ready | failed
    reason: str | None = None
    loading: asyncio.Task[None] | None = None
    served: Served | None = None
    serving: dict[str, Any] = field(default_factory=dict)


def _target_key(model: str, row: Mapping[str, Any]) -> str:
    return json.dumps(
        [
            model,
            row.get("backend", "torch"),
            row.get("options") or {},
            row.get("max_batch_size", 1),
            row.get("max_wait_ms", 0.0),
            row.get("replicas", 1),
        ],
        sort_keys=True,
        default=str,
    )


class DeploymentManager:
    """Keeps this server's loaded models in line with the deployments table."""

    def __init__(
        self,
        *,
        interval_s: float = 1.0,
        on_batch: Callable[[str, int], None] | None = None,
        on_ready: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._on_batch = on_batch
        self._on_ready = on_ready
        self._states: dict[str, _State] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._reconciled = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Reconcile once (starting the loads) and keep reconciling in the background."""
        await self.reconcile()
        self._task = asyncio.create_task(self._loop(), name="aifab-reconcile")

    async def stop(self) -> None:
        """Stop reconciling, cancel loads and close every batcher."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for st in self._states.values():
            if st.loading is not None:
                st.loading.cancel()
        for st in self._states.values():
            if st.served is not None:
                await self._close(st.served.targets(), keep=[])
        self._states.clear()

    def poke(self) -> None:
        """Reconcile now rather than at the next interval (after a change made through HTTP)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            self._wake.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a DB hiccup must not end reconciliation
                log.exception("reconciling deployments failed")

    # -- reconciliation --------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Compare the table with what is loaded; start loads, drop deleted deployments."""
        rows = await asyncio.to_thread(_desired)
        for name, (row, want, error) in rows.items():
            st = self._states.setdefault(name, _State())
            if want == st.want:
                continue
            st.want = want
            if st.loading is not None:
                st.loading.cancel()
            if error is not None:
                await self._failed(name, row, st, error)
                continue
            st.loading = asyncio.create_task(self._load(name, row, want), name=f"load-{name}")
        for name in [n for n in self._states if n not in rows]:
            st = self._states.pop(name)
            if st.loading is not None:
                st.loading.cancel()
            if st.served is not None:
                await self._close(st.served.targets(), keep=[])
            if self._on_ready:
                self._on_ready(name, False)
            log.info("deployment %s removed", name)
        self._reconciled = True

    async def _load(self, name: str, row: dict[str, Any], want: str) -> None:
        st = self._states[name]
        refs = json.loads(want)["resolved"]
        old = {t.key: t for t in st.served.targets()} if st.served else {}
        made: list[Target] = []
        try:
            primary = await self._target(name, refs["primary"], row, "primary", old)
            made.append(primary)
            canary = None
            if refs.get("canary"):
                canary = await self._target(name, refs["canary"], row, "canary", old)
                made.append(canary)
        except BaseException as exc:
            self._done_loading(st)
            await self._close(made, keep=list(old.values()))
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
            reason = str(exc) or type(exc).__name__
            log.warning("deployment %s failed to load: %s", name, reason)
            await self._failed(name, row, st, reason)
            return
        self._done_loading(st)
        served = Served(
            name=name,
            kind=str(getattr(primary.handler, "kind", "")),
            primary=primary,
            canary=canary,
            canary_weight=float(row.get("canary_weight") or 0.0),
            sticky_header=row.get("sticky_header") or None,
            generation=int(row.get("generation", 0)),
        )
        previous, st.served = st.served, served
        st.status, st.reason = "ready", None
        st.serving = {"primary": primary.model, "canary": canary.model if canary else None}
        if previous is not None:
            await self._close(previous.targets(), keep=served.targets())
        if self._on_ready:
            self._on_ready(name, True)
        await asyncio.to_thread(_report, name, served.generation, "ready", None, st.serving)
        log.info("deployment %s serving %s", name, st.serving)

    @staticmethod
    def _done_loading(st: _State) -> None:
        # A load cancelled by a newer change must not forget the newer load's task.
        if st.loading is asyncio.current_task():
            st.loading = None

    async def _target(
        self, name: str, model: str, row: dict[str, Any], role: str, old: dict[str, Target]
    ) -> Target:
        key = _target_key(model, row)
        if key in old:  # same model and settings: reuse the loaded handler and its batcher
            return replace(old[key], role=role)
        from aifab.inference.loading import load_served_model

        options = dict(row.get("options") or {})
        loaded = await asyncio.to_thread(
            load_served_model, model, backend=row.get("backend") or "torch", options=options
        )
        on_batch = self._on_batch

        def observe(size: int) -> None:
            if on_batch is not None:
                on_batch(name, size)

        batcher = Batcher(
            loaded.handler.predict,
            max_batch_size=int(row.get("max_batch_size") or 1),
            max_wait_ms=float(row.get("max_wait_ms") or 0.0),
            workers=int(row.get("replicas") or 1),
            name=f"{name}:{role}",
            on_batch=observe,
            chunk_items=getattr(loaded.handler, "chunk_items", None),
        )
        return Target(model=loaded.ref, handler=loaded.handler, batcher=batcher, role=role, key=key)

    async def _failed(self, name: str, row: dict[str, Any], st: _State, reason: str) -> None:
        st.status, st.reason = "failed", reason
        if self._on_ready:
            self._on_ready(name, st.served is not None)
        await asyncio.to_thread(
            _report, name, int(row.get("generation", 0)), "failed", reason, st.serving
        )

    @staticmethod
    async def _close(targets: list[Target], keep: list[Target]) -> None:
        kept = {id(t.batcher) for t in keep}
        for t in targets:
            if id(t.batcher) not in kept:
                kept.add(id(t.batcher))  # a batcher shared by two roles is closed once
                try:
                    await t.batcher.close()
                except Exception:  # noqa: BLE001 - closing must not stop the swap
                    log.exception("closing the batcher of %s failed", t.model)

    # -- queries ---------------------------------------------------------------------------

    def get(self, name: str) -> Served:
        """The served deployment ``name``: 404 if unknown, 503 if not loaded (yet)."""
        st = self._states.get(name)
        if st is None:
            raise ApiError(404, f"deployment {name!r} not found", param="deployment")
        if st.served is None:
            if st.status == "failed":
                msg = f"deployment {name!r} failed to load: {st.reason}"
            else:
                msg = f"deployment {name!r} is still loading"
            raise ApiError(503, msg, headers={"Retry-After": "1"})
        return st.served

    def served(self) -> list[Served]:
        """Every deployment that is serving."""
        return [st.served for st in self._states.values() if st.served is not None]

    def status(self, name: str) -> dict[str, Any] | None:
        """Status, reason and served refs of ``name`` on this server; None if unknown."""
        st = self._states.get(name)
        if st is None:
            return None
        return {"status": st.status, "reason": st.reason, "serving": dict(st.serving)}

    def ready(self) -> tuple[bool, list[str]]:
        """True once every deployment has been loaded or has failed; else the pending names."""
        pending = [n for n, st in self._states.items() if st.status == "pending"]
        return self._reconciled and not pending, pending

    def counts(self) -> dict[str, int]:
        """How many deployments are serving and how many failed to load (names stay private)."""
        states = self._states.values()
        return {
            "deployments": len(self._states),
            "serving": sum(st.served is not None for st in states),
            "failed": sum(st.status == "failed" for st in states),
        }

    async def wait_ready(self, name: str, timeout: float = 60.0) -> Served:
        """Wait until ``name`` is loaded or failed; ApiError on failure or timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.poke()
        while True:
            st = self._states.get(name)
            if st is not None and st.loading is None and st.status in ("ready", "failed"):
                return self.get(name)
            if loop.time() > deadline:
                raise ApiError(503, f"deployment {name!r} not ready after {timeout:g} s")
            await asyncio.sleep(0.05)


def _desired() -> dict[str, tuple[dict[str, Any], str, str | None]]:
    """Per deployment: its row, the desired-state key, and an error if its refs do not resolve."""
    from aifab.inference.deployments import list_deployments
    from aifab.inference.loading import resolve_source

    out: dict[str, tuple[dict[str, Any], str, str | None]] = {}
    for row in list_deployments():
        error = None
        resolved: dict[str, str | None] = {"primary": None, "canary": None}
        try:
            resolved["primary"] = resolve_source(row["model"])
            if row.get("canary"):
                resolved["canary"] = resolve_source(row["canary"])
        except Exception as exc:  # noqa: BLE001 - an unresolvable ref fails this deployment only
            error = str(exc) or type(exc).__name__
        want = json.dumps(
            {"generation": row.get("generation"), "resolved": resolved, "error": error},
            sort_keys=True,
        )
        out[row["name"]] = (row, want, error)
    return out


def _report(
    name: str, generation: int, status: str, reason: str | None, serving: dict[str, Any]
) -> None:
    from aifab.inference.deployments import report_status

    try:
        report_status(name, generation, status, reason=reason, serving=serving)
    except Exception:  # noqa: BLE001 - e.g. deleted meanwhile; the next reconcile sorts it out
        log.debug("reporting the status of %s failed", name, exc_info=True)
