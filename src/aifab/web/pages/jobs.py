"""``/ui/jobs``: queues' share and quota use, jobs, a timeline of what ran where, and a job's page.

A job's page follows its log live (server-sent events) and offers cancel / retry to developers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from aifab.core.actor import acting_as
from aifab.core.errors import AifabError
from aifab.jobs import (
    LogCursor,
    LogTail,
    attempt_timeline,
    cancel,
    get_job,
    list_jobs,
    queue_usage,
    retry,
    tail_log,
)
from aifab.web import charts
from aifab.web.auth import LoginRequired, UiError, Viewer, need, read_form, viewer
from aifab.web.paging import Page
from aifab.web.render import SECURITY_HEADERS, page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

STATES = ("pending", "running", "succeeded", "failed", "cancelled")
#: The HTTP API has no jobs routes; stopping or re-running someone's work changes what the
#: platform runs, which the API's roles give to developers as "deploy" (the CLI needs none).
CHANGE_PERMISSION = "deploy"
#: Attempts drawn on the list page's timeline.
TIMELINE_ATTEMPTS = 40
#: How often a live log looks for new lines, and how long one stream lasts before the browser
#: reconnects (with Last-Event-ID, so nothing is lost) and a keep-alive comment's interval.
POLL_S = 0.3
STREAM_S = 300.0
KEEPALIVE_S = 15.0
#: How often an open stream checks that its key is still active.
KEY_RECHECK_S = 5.0


def _timeline(attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not attempts:
        return None
    bars = [
        {
            "lane": f"{a['executor'] or '?'} · {a['host'] or '?'} · {a['worker_id'][-6:]}",
            "label": f"{a['job_name']} #{a['number']} ({a['state']})",
            "start": a["started_at"],
            "end": a["finished_at"],
            "state": a["state"],
        }
        for a in reversed(attempts)
    ]
    return charts.timeline(bars)


def _list_data(p: Page, state: str | None, queue: str | None) -> dict[str, Any]:
    usage = queue_usage()
    known = [q["name"] for q in usage["queues"]]
    if state and state not in STATES:
        raise UiError(400, f"state {state!r} is not one of {', '.join(STATES)}")
    if queue and queue not in known:
        raise UiError(400, f"queue {queue!r} does not exist (queues: {', '.join(known)})")
    rows = list_jobs(state=state, queue=queue, limit=p.limit + 1, offset=p.offset)
    return {
        "usage": usage,
        "jobs": rows[: p.limit],
        "prev": p.link(p.offset - p.limit) if p.offset > 0 else None,
        "next": p.link(p.offset + p.limit) if len(rows) > p.limit else None,
        "timeline": _timeline(attempt_timeline(limit=TIMELINE_ATTEMPTS)),
    }


@router.get("/ui/jobs")
async def jobs_page(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Queues, the timeline and the jobs (filtered by state and queue, paginated)."""
    p = Page.of(request, default_limit=50, max_limit=200)
    state = request.query_params.get("state") or None
    queue = request.query_params.get("queue") or None
    data = await asyncio.to_thread(_list_data, p, state, queue)
    return page(request, "jobs/list.html", states=STATES, state=state, queue=queue, **data)


def _replica(request: Request) -> int:
    text = request.query_params.get("replica", "0")
    if not (text.isascii() and text.isdigit()):  # str.isdigit alone accepts "²"
        raise UiError(400, f"replica {text!r} is not a rank (0, 1, ...)")
    return int(text)


def _job_data(job_id: str, replica: int) -> dict[str, Any]:
    job = get_job(job_id)
    replicas = int(job["spec"]["replicas"])
    if replica >= replicas:
        raise UiError(400, f"replica {replica}: job {job_id} has ranks 0..{replicas - 1}")
    return {
        "job": job,
        "replicas": replicas,
        "timeline": _timeline(attempt_timeline(job_id=job_id)),
    }


@router.get("/ui/jobs/{job_id}")
async def job_page(job_id: str, request: Request, who: Viewer = Depends(viewer)) -> Response:
    """One job: state, why it waits or failed, accounting, attempts, events, spec, live log."""
    replica = _replica(request)
    data = await asyncio.to_thread(_job_data, job_id, replica)
    can_change = who.can(CHANGE_PERMISSION)
    return page(request, "jobs/job.html", replica=replica, can_change=can_change, **data)


def sse(kind: str, text: str, event_id: str | None = None) -> str:
    """One server-sent event; every line of ``text`` (CR, LF or CRLF ended) is a data line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    head = f"event: {kind}\n" + (f"id: {event_id}\n" if event_id else "")
    return head + "".join(f"data: {line}\n" for line in lines) + "\n"


async def _signed_in(request: Request) -> bool:
    """Whether the stream's session still holds (a revoked key ends its open streams too)."""
    try:
        await viewer(request)
    except (LoginRequired, UiError):
        return False
    return True


async def _follow(request: Request, job_id: str, replica: int, tail: LogTail) -> AsyncIterator[str]:
    """Send the log as it grows: ``log`` events (id = cursor) and ``state`` changes.

    It ends with ``end`` (the job is final) or ``stop`` (why the stream cannot go on).
    """
    yield "retry: 2000\n\n"
    if tail.skipped:
        yield sse("log", f"[{tail.skipped:,} earlier bytes not shown: aifab job logs {job_id}]\n")
    started = last_sent = checked = time.monotonic()
    state = None
    while True:
        if tail.text:
            yield sse("log", tail.text, str(tail.cursor))
            last_sent = time.monotonic()
        if tail.state != state:
            state = tail.state
            yield sse("state", state)
        if tail.final:
            yield sse("end", tail.state)
            return
        now = time.monotonic()
        if now - started > STREAM_S:
            return  # the browser reconnects from its Last-Event-ID (a gone one was cancelled)
        if now - checked > KEY_RECHECK_S:
            if not await _signed_in(request):
                yield sse("stop", "the session ended: sign in again")
                return
            checked = now
        if now - last_sent > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            last_sent = now
        if not tail.text:
            await asyncio.sleep(POLL_S)
        try:
            tail = await asyncio.to_thread(tail_log, job_id, tail.cursor, replica=replica)
        except AifabError as exc:
            yield sse("stop", str(exc))
            return


@router.get("/ui/jobs/{job_id}/logs/stream")
async def log_stream(job_id: str, request: Request, who: Viewer = Depends(viewer)) -> Response:
    """A job's log as server-sent events, following it until the job is final."""
    replica = _replica(request)
    cursor = LogCursor.parse(request.headers.get("last-event-id"))
    first = await asyncio.to_thread(tail_log, job_id, cursor, replica=replica)
    headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _follow(request, job_id, replica, first), media_type="text/event-stream", headers=headers
    )


def _as(actor: str, action: Callable[[str], Any], job_id: str) -> None:
    with acting_as(actor):
        action(job_id)


async def _change(
    request: Request, who: Viewer, job_id: str, action: Callable[[str], Any]
) -> Response:
    await read_form(request, who)
    need(who, CHANGE_PERMISSION)
    await asyncio.to_thread(_as, who.actor, action, job_id)
    return RedirectResponse(f"/ui/jobs/{quote(job_id, safe='')}", status_code=303)


@router.post("/ui/jobs/{job_id}/cancel")
async def cancel_job(job_id: str, request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Cancel a pending or running job (audited as the viewer's key: ``job.cancel``)."""
    return await _change(request, who, job_id, cancel)


@router.post("/ui/jobs/{job_id}/retry")
async def retry_job(job_id: str, request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Queue a failed or cancelled job again (audited as the viewer's key: ``job.retry``)."""
    return await _change(request, who, job_id, retry)
