"""OpenAI-compatible routes (models, chat and text completions, embeddings) for OpenAI's SDKs.

``model`` is a deployment name. Non-streamed generation goes through the deployment's batcher
(:func:`aifab.serve.invoke.invoke`); a streamed one runs ``handler.stream`` on its own thread
and is forwarded as Server-Sent Events, and stops when the client goes away.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from aifab.core.errors import InvalidInputError
from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError, as_api_error
from aifab.serve.invoke import invoke, key_id, needs_reservation, record, reserve
from aifab.serve.openai_models import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from aifab.serve.openai_stream import Completion, sse_events

router = APIRouter(tags=["openai"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "Malformed JSON, a bad or unsupported field (``param`` names it), "
        "a prompt too long for the model, or not an LM."
    },
    401: {"description": "No or unknown API key."},
    403: {"description": "The key's role may not invoke models."},
    404: {"description": "No deployment of that name."},
    429: {"description": "Rate limit or token quota; see Retry-After."},
    503: {"description": "The deployment is not loaded (yet)."},
}
_invoke = require("invoke")
#: Listing models is for callers of models (clients) and readers (viewers) alike; ``read``
#: first, so only a key that merely invokes has its token quota checked (as when invoking).
_invoke_or_read = require("read", "invoke")


def _model_object(name: str, created: float) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": int(created), "owned_by": "aifab"}


async def _created_times() -> dict[str, float]:
    from aifab.inference.deployments import list_deployments

    rows = await asyncio.to_thread(list_deployments)
    return {r["name"]: float(r.get("created_at") or 0) for r in rows}


@router.get("/v1/models", responses=ERRORS)
async def list_models(
    request: Request, principal: Principal = Depends(_invoke_or_read)
) -> dict[str, Any]:
    """Every deployment that is serving, as an OpenAI model object (``id`` = its name)."""
    created = await _created_times()
    served = sorted(request.app.state.manager.served(), key=lambda s: s.name)
    return {
        "object": "list",
        "data": [_model_object(s.name, created.get(s.name, 0)) for s in served],
    }


@router.get("/v1/models/{model}", responses=ERRORS)
async def get_model(
    model: str, request: Request, principal: Principal = Depends(_invoke_or_read)
) -> dict[str, Any]:
    """One serving deployment as an OpenAI model object."""
    served = _served(request, model)
    created = await _created_times()
    return _model_object(served.name, created.get(served.name, 0))


def _served(request: Request, model: str, kind: str | None = None) -> Any:
    """The deployment ``model``: 404 (OpenAI's ``model_not_found``) or 400 if the wrong kind."""
    try:
        served = request.app.state.manager.get(model)
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise ApiError(
            404, f"model {model!r} does not exist", param="model", code="model_not_found"
        ) from None
    if kind is not None and served.kind != kind:
        what = {"lm": "a language model", "embeddings": "an embedding model"}[kind]
        raise ApiError(
            400,
            f"model {model!r} is not {what} (it is a {served.kind!r} deployment)",
            param="model",
        )
    return served


#: Below this a temperature is greedy: dividing logits by ~1e-38 overflows to inf (NaN probs).
MIN_TEMPERATURE = 1e-6
#: top_p is raised to this: a smaller one rounds to 0 in float32 and filters out every token.
MIN_TOP_P = 1e-6


def _temperature(value: float | None, handler: Any) -> float:
    """The deployment's default (else OpenAI's, 1) when omitted; a vanishing one is greedy."""
    if value is None:
        value = float(getattr(handler, "defaults", {}).get("temperature", 1.0))
    return 0.0 if value < MIN_TEMPERATURE else value


def sampling(handler: Any, temperature: float | None, top_p: float | None) -> dict[str, float]:
    """A request's temperature and top_p, the deployment's defaults where it omits them."""
    defaults = getattr(handler, "defaults", {})
    if top_p is None:
        top_p = float(defaults.get("top_p", 1.0))
    return {"temperature": _temperature(temperature, handler), "top_p": max(top_p, MIN_TOP_P)}


def default_max_tokens(handler: Any, room: int) -> int:
    """The completion length a request that omits it gets: the deployment's, within the room."""
    limit = getattr(handler, "defaults", {}).get("max_tokens", handler.max_tokens_limit)
    return max(1, min(int(limit), handler.max_tokens_limit, room))


def _generation(
    handler: Any,
    prompt: str,
    body: ChatCompletionRequest | CompletionRequest,
    field: str,
    choice: int = 0,
) -> Any:
    """The handler's validated request; a prompt too long for the context is a 400."""
    from aifab.inference.generation import GenerationParams

    n = handler.count_tokens(prompt)
    room = handler.max_context - n
    asked = body.limit
    if room < 1 or (asked is not None and asked > room):
        raise ApiError(
            400,
            f"This model's maximum context length is {handler.max_context} tokens. However, "
            f"you requested {n + (asked or 1)} tokens ({n} in the {field}, {asked or 1} in the "
            f"completion). Please reduce the length of the {field} or completion.",
            param=field,
            code="context_length_exceeded",
        )
    chosen = sampling(handler, body.temperature, body.top_p)
    params = GenerationParams(
        max_tokens=asked if asked is not None else default_max_tokens(handler, room),
        temperature=chosen["temperature"],
        top_p=chosen["top_p"],
        top_k=body.top_k or 0,
        stop=body.stops,
        # Choice i of n gets seed + i: n different samples that a seed still reproduces.
        seed=None if body.seed is None else (body.seed + choice) % 2**63,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logit_bias={int(k): float(v) for k, v in (body.logit_bias or {}).items()},
        logprobs=_logprobs(body),
    )
    try:
        return handler.request(prompt, params)
    except InvalidInputError as exc:
        raise as_api_error(exc) from None


def _logprobs(body: ChatCompletionRequest | CompletionRequest) -> int | None:
    if isinstance(body, ChatCompletionRequest) and body.logprobs:
        return body.top_logprobs or 0
    return None


async def prepare_generations(
    request: Request, body: Any, started: float, build: Any
) -> tuple[Any, Any, list[Any]]:
    """Pick the deployment and target, build the generation requests; record failures."""
    served = _served(request, body.model, "lm")
    target = served.pick(request.headers)
    reserving = needs_reservation(request)

    def built(handler: Any) -> list[Any]:
        items = build(handler)
        if reserving:  # the most it may use: every prompt's tokens and max_tokens
            reserve(
                request,
                sum(handler.count_tokens(i.prompt) + i.params.max_tokens for i in items),
            )
        return items

    try:
        # Templating and tokenizing a long prompt takes milliseconds: not on the event loop.
        items = await asyncio.to_thread(built, target.handler)
    except ApiError as exc:
        record(request, served.name, status=exc.status, started=started, model=target.model)
        raise
    return served, target, items


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


@router.post("/v1/chat/completions", responses=ERRORS, response_model=None)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    principal: Principal = Depends(_invoke),
) -> JSONResponse | StreamingResponse:
    """Chat with a language-model deployment (``stream: true`` answers Server-Sent Events).

    With ``tools`` the model may answer with ``tool_calls`` (``tool_choice`` ``required`` or a
    named function forces one, decoded under its JSON schema); ``response_format`` with
    ``json_object`` or ``json_schema`` constrains decoding so the answer always parses.
    """
    started = time.perf_counter()
    tools = body.offered_tools
    plans: list[Any] = []

    def build(handler: Any) -> list[Any]:
        plan, items = chat_generations(handler, body, tools)
        plans.append(plan)
        return items

    served, target, items = await prepare_generations(request, body, started, build)
    done = Completion(
        kind="chat",
        id=f"chatcmpl-{uuid.uuid4().hex}",
        model=body.model,
        fingerprint=target.model,
    )
    plain = not tools and len(items) == 1 and not body.logprobs
    if body.stream and plain:
        return _stream(request, served, target, items[0], done, body.include_usage, started)
    results = await invoke(request, served, target, items, started=started)
    choices = [chat_choice(r, plans[0], body.parallel_tool_calls, done.id) for r in results]
    usage = _usage(sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results))
    if body.stream:  # tool calls, n > 1, logprobs: the finished choices, sent as chunks
        events = done.replay(choices, usage if body.include_usage else None)
        return StreamingResponse(iter(events), media_type="text/event-stream")
    return JSONResponse(done.response(choices, usage))


def chat_generations(
    handler: Any, body: ChatCompletionRequest, tools: list[dict[str, Any]]
) -> tuple[Any, list[Any]]:
    """The chat request's plan (``aifab.inference.chat_completion``) and one item per choice.

    Bad messages, tools or schemas are 422s naming the field; ``max_tokens`` below the
    shortest valid answer of a forced call or ``json_schema`` is a 400 naming the minimum.
    """
    from aifab.inference.chat_completion import (
        TooFewTokensError,
        constrain,
        grounding_for,
        plan_chat,
    )

    messages = [m.as_template_message() for m in body.messages]
    asked = body.aifab.model_dump(exclude_none=True) if body.aifab else None
    try:
        plan = plan_chat(handler, messages, tools, body.tool_choice, body.output_schema)
        grounding = grounding_for(handler, plan, asked)
    except InvalidInputError as exc:
        raise as_api_error(exc) from None
    items = []
    for i in range(body.n or 1):
        item = _generation(handler, plan.prompt, body, "messages", choice=i)
        try:
            constrain(handler, plan, item.params, grounding)
        except TooFewTokensError as exc:
            raise ApiError(400, exc.message, param="max_tokens") from None
        except InvalidInputError as exc:
            raise as_api_error(exc) from None
        items.append(item)
    return plan, items


def chat_choice(result: Any, plan: Any, parallel: bool | None, call_id: str) -> dict[str, Any]:
    """One finished generation as a chat choice (with its log probabilities when asked)."""
    from aifab.inference.chat_completion import chat_choice as parsed_choice

    choice = parsed_choice(result, plan, parallel, call_id)
    if result.logprobs is not None:
        choice["logprobs"] = {"content": [_logprob(t) for t in result.logprobs], "refusal": None}
    return choice


def _logprob(entry: dict[str, Any]) -> dict[str, Any]:
    def one(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    top = [one(t, lp) for t, lp in entry["top"]]
    return {**one(entry["token"], entry["logprob"]), "top_logprobs": top}


@router.post("/v1/completions", responses=ERRORS, response_model=None)
async def completions(
    body: CompletionRequest,
    request: Request,
    principal: Principal = Depends(_invoke),
) -> JSONResponse | StreamingResponse:
    """Complete text with a language-model deployment (``stream: true``: one prompt only)."""
    started = time.perf_counter()
    if body.stream and len(body.prompts) > 1:
        raise ApiError(422, "prompt: stream one prompt at a time", param="prompt")
    n = body.n or 1
    if body.stream and n > 1:
        raise ApiError(422, "n: stream one choice at a time", param="n")

    def build(handler: Any) -> list[Any]:
        # OpenAI's order: the n choices of the first prompt, then those of the next.
        return [
            _generation(handler, _text(handler, p), body, "prompt", choice=i)
            for p in body.prompts
            for i in range(n)
        ]

    served, target, items = await prepare_generations(request, body, started, build)
    done = Completion(
        kind="text",
        id=f"cmpl-{uuid.uuid4().hex}",
        model=body.model,
        fingerprint=target.model,
        echo=items[0].prompt if body.echo else "",
    )
    if body.stream:
        return _stream(request, served, target, items[0], done, body.include_usage, started)
    results = await invoke(request, served, target, items, started=started)
    texts = [i.prompt for i in items[::n]]
    echo = [p for p in texts for _ in range(n)] if body.echo else [""] * len(results)
    choices = [
        {"text": e + r.text, "finish_reason": r.finish_reason}
        for e, r in zip(echo, results, strict=True)
    ]
    usage = _usage(sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results))
    return JSONResponse(done.response(choices, usage))


def _stream(
    request: Request,
    served: Any,
    target: Any,
    item: Any,
    done: Completion,
    include_usage: bool,
    started: float,
) -> StreamingResponse:
    events = sse_events(
        request, served.name, target, item, done, include_usage=include_usage, started=started
    )
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post("/v1/embeddings", responses=ERRORS)
async def embeddings(
    body: EmbeddingRequest,
    request: Request,
    principal: Principal = Depends(_invoke),
) -> JSONResponse:
    """Embed a text or a list of texts with an embeddings deployment."""
    started = time.perf_counter()
    served = _served(request, body.model, "embeddings")
    target = served.pick(request.headers)
    handler = target.handler
    try:
        if body.dimensions is not None and body.dimensions != handler.dimension:
            raise ApiError(
                422,
                f"dimensions: model {body.model!r} has {handler.dimension} dimensions "
                f"(shortening is not supported), got {body.dimensions}",
                param="dimensions",
            )
        try:
            # Off the event loop: images wait here on the worker pool.
            texts = await principal.call(
                handler.decode, [_embedding_text(handler, t) for t in body.texts]
            )
        except InvalidInputError as exc:
            raise as_api_error(exc) from None
    except ApiError as exc:
        record(request, served.name, status=exc.status, started=started, model=target.model)
        raise
    # Counting takes the handler's tokenizer lock, which a running batch may hold.
    tokens = await asyncio.to_thread(lambda: sum(handler.count_tokens(t) for t in texts))
    try:
        await asyncio.to_thread(reserve, request, tokens)
    except ApiError as exc:
        record(request, served.name, status=exc.status, started=started, model=target.model)
        raise
    vectors = await invoke(
        request,
        served,
        target,
        texts,
        started=started,
        input={"prompt_tokens": tokens, "items": len(texts)},
    )
    _charge(request, served.name, tokens)
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(v, body.encoding_format)}
        for i, v in enumerate(vectors)
    ]
    return JSONResponse(
        {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _text(handler: Any, item: str | list[int]) -> str:
    """A text input as is; token ids decoded with the model's own tokenizer (422 if unknown)."""
    if isinstance(item, str):
        return item
    try:
        text: str = handler.detokenize(item)
    except InvalidInputError as exc:
        raise as_api_error(exc) from None
    return text


#: Why token ids from elsewhere are refused: LangChain's OpenAIEmbeddings tokenizes with
#: OpenAI's tiktoken and sends those ids, which mean other words (or nothing) to this model.
_FOREIGN_IDS = (
    "input: {reason}; token-id input must come from this model's own tokenizer. LangChain's "
    "OpenAIEmbeddings sends OpenAI token ids unless created with "
    "check_embedding_ctx_length=False (then it sends text)"
)


def _embedding_text(handler: Any, item: str | list[int]) -> str:
    """An embedding input as text; ids outside the model's vocabulary are a 400."""
    if isinstance(item, str):
        return item
    try:
        text: str = handler.detokenize(item)
    except InvalidInputError as exc:
        raise ApiError(400, _FOREIGN_IDS.format(reason=exc.message), param="input") from None
    return text


def _vector(vector: list[float], encoding: str | None) -> list[float] | str:
    """A vector as floats, or (``base64``) its little-endian float32 bytes, as OpenAI sends."""
    if encoding != "base64":
        return vector
    import numpy as np

    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _charge(request: Request, deployment: str, tokens: int) -> None:
    """Count an embedding request's input tokens (invoke counts only LM outputs' tokens)."""
    state = request.app.state
    key = key_id(request)
    metrics = getattr(state, "metrics", None)
    if metrics is not None and tokens:
        metrics.add_tokens(deployment, key, tokens, 0)
    quota = getattr(state, "quota", None)
    if quota is not None and tokens and key != "-":
        quota.add(key, tokens)
