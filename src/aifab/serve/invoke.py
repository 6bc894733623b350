"""The request path every model route shares: run items through a target, count, log.

``invoke`` submits decoded items to the target's batcher and records the request (metrics,
sampled request log, token counts) whatever the outcome; ``record`` does the recording alone,
for routes that answer otherwise (streaming) or fail before ``invoke`` (decode errors).
Token counts come from outputs that carry ``prompt_tokens`` / ``completion_tokens``
(language-model results), so routes need not count them again; ``record`` adds them to the
metrics and to the key's daily token quota (``app.state.quota``); a route that reserved the
request's most tokens first (:func:`reserve`) has the reservation settled to them instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request

from aifab.core.errors import AifabError
from aifab.serve.errors import ApiError, as_api_error
from aifab.serve.guard import DEPLOYMENT_STATE_KEY

log = logging.getLogger("aifab.serve")

__all__ = ["invoke", "key_id", "needs_reservation", "record", "reserve", "route_name"]

#: At most this many items of one request go into its request-log entry.
LOG_ITEMS = 100
#: A request-log input or output, or a function making it (called only for kept entries).
LogField = Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None


def key_id(request: Request) -> str:
    """The id of the API key behind ``request`` (``-`` when unauthenticated)."""
    principal = getattr(request.state, "principal", None)
    return str(getattr(principal, "key_id", None) or "-")


def route_name(request: Request) -> str:
    """The route's path template (``/v1/predict/{deployment}``): few label values."""
    route = request.scope.get("route")
    return str(getattr(route, "path", None) or request.url.path)


def needs_reservation(request: Request) -> bool:
    """Whether the caller's key has a token quota (so its requests reserve tokens first)."""
    principal = getattr(request.state, "principal", None)
    key = getattr(principal, "key", None)
    quota = getattr(request.app.state, "quota", None)
    return quota is not None and getattr(key, "token_quota_day", None) is not None


def reserve(request: Request, tokens: int) -> None:
    """Hold the most tokens this request may use against its key's quota.

    It writes to the metadata DB, so call it off the event loop; :func:`record` settles the
    reservation to the tokens really used.

    Raises:
        ApiError: 429 naming the quota when the reservation does not fit.
    """
    if not needs_reservation(request):
        return
    request.state.reservation = request.app.state.quota.reserve(request.state.principal.key, tokens)


def record(
    request: Request,
    deployment: str,
    *,
    status: int,
    started: float,
    model: str | None = None,
    route: str | None = None,
    input: LogField = None,
    output: LogField = None,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    request_id: str | None = None,
) -> None:
    """Record one answered request: metrics, tokens (and quota), sampled request log.

    Args:
        request: the request (its app holds metrics, request_log, quota; its principal the key).
        deployment: the deployment name.
        status: the HTTP status answered.
        started: ``time.perf_counter()`` when the route began.
        model: the ``name@version`` that answered, if one did.
        route: metric/log label; defaults to the route's path template.
        input: request-log input (features, or ``{"prompt_tokens": n}``), or a function
            making it: it is called only when the entry is sampled in.
        output: request-log output (prediction, or ``{"completion_tokens": n}``), or a
            function making it.
        prompt_tokens: prompt tokens used (language models).
        completion_tokens: generated tokens (language models).
        request_id: the id the response carries (feedback labels join on it).
    """
    latency = time.perf_counter() - started
    state = request.app.state
    # The guard labels this response's aifab_requests/aifab_errors with it.
    setattr(request.state, DEPLOYMENT_STATE_KEY, deployment)
    key = key_id(request)
    route = route or route_name(request)
    metrics = getattr(state, "metrics", None)
    if metrics is not None:
        metrics.observe_request(deployment, route, status, key, latency)
        if prompt_tokens or completion_tokens:
            metrics.add_tokens(deployment, key, prompt_tokens, completion_tokens)
    tokens = prompt_tokens + completion_tokens
    quota = getattr(state, "quota", None)
    reservation = getattr(request.state, "reservation", None)
    if reservation is not None and quota is not None:
        request.state.reservation = None  # settled once, whatever else records later
        quota.settle(reservation, tokens)
    elif tokens and quota is not None and key != "-":
        quota.add(key, tokens)
    logger = getattr(state, "request_log", None)
    if logger is not None and logger.wants(status):  # build the entry only when it is kept
        logger.append(
            {
                "ts": time.time(),
                "deployment": deployment,
                "model_version": model,
                "key_id": None if key == "-" else key,
                "route": route,
                "status": status,
                "latency_ms": latency * 1000.0,
                "input": _field(input),
                "output": _field(output),
                "tokens": tokens,
                "request_id": request_id,
            }
        )


def _field(value: LogField) -> dict[str, Any] | None:
    if value is None:
        return None
    return dict(value() if callable(value) else value)


async def invoke(
    request: Request,
    served: Any,
    target: Any,
    items: list[Any],
    *,
    started: float | None = None,
    route: str | None = None,
    input: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    input_tokens: int = 0,
) -> list[Any]:
    """Run ``items`` through ``target``'s batcher; record the request whatever happens.

    Args:
        request: the request being answered.
        served: the :class:`~aifab.serve.manager.Served` deployment.
        target: the :class:`~aifab.serve.manager.Target` picked for this request.
        items: decoded items (``handler.decode``).
        started: ``time.perf_counter()`` at the route's start (default: now).
        route: label override (default: the route's path template).
        input: request-log input (default: the items, when they are records).
        request_id: the id the response carries, logged with the request.
        input_tokens: tokens the decoded input cost besides the model's own (images, priced
            by pixels), counted as prompt tokens.

    Returns:
        One output per item, in order (not yet encoded).

    Raises:
        ApiError: 422 naming the field for bad input, 500 when the model itself fails.
    """
    started = time.perf_counter() if started is None else started
    name = served.name
    try:
        outputs = await _submit(request, served, target, items)
    except (ApiError, AifabError) as exc:
        err = as_api_error(exc)
        record(request, name, status=err.status, started=started, model=target.model, route=route)
        raise err from None
    except Exception:
        log.exception("deployment %s (%s) failed on a request", name, target.model)
        record(request, name, status=500, started=started, model=target.model, route=route)
        raise ApiError(500, f"model {target.model} failed on this request") from None
    prompt, completion = _tokens(outputs)
    record(
        request,
        name,
        status=200,
        started=started,
        model=target.model,
        route=route,
        input=input if input is not None else lambda: _log_input(items, prompt),
        output=lambda: _log_output(outputs, completion),
        prompt_tokens=prompt + input_tokens,
        completion_tokens=completion,
        request_id=request_id,
    )
    return outputs


async def _submit(request: Request, served: Any, target: Any, items: list[Any]) -> list[Any]:
    """Submit to the target; if a swap closed its batcher meanwhile, to its successor."""
    from aifab.inference.batcher import BatcherClosedError

    for _ in range(3):
        try:
            result: list[Any] = await target.batcher.submit(items, key=key_id(request))
            return result
        except BatcherClosedError:
            manager = getattr(request.app.state, "manager", None)
            if manager is None:
                break
            fresh = manager.get(served.name)  # 404/503 if it went away meanwhile
            same = [t for t in fresh.targets() if t.role == target.role] or [fresh.primary]
            target = same[0]
    raise ApiError(
        503, f"deployment {served.name!r} is reloading; retry", headers={"Retry-After": "1"}
    )


def _tokens(outputs: list[Any]) -> tuple[int, int]:
    prompt = completion = 0
    for out in outputs:
        prompt += int(getattr(out, "prompt_tokens", 0) or 0)
        completion += int(getattr(out, "completion_tokens", 0) or 0)
    return prompt, completion


def _log_input(items: list[Any], prompt_tokens: int) -> dict[str, Any]:
    if prompt_tokens:
        return {"prompt_tokens": prompt_tokens, "items": len(items)}
    if items and isinstance(items[0], Mapping):
        return {"records": list(items[:LOG_ITEMS]), "items": len(items)}
    return {"items": len(items)}


def _log_output(outputs: list[Any], completion_tokens: int) -> dict[str, Any]:
    if completion_tokens:
        return {"completion_tokens": completion_tokens}
    if outputs and isinstance(outputs[0], Mapping):
        return {"predictions": list(outputs[:LOG_ITEMS])}
    return {"items": len(outputs)}
