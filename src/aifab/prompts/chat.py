"""Chat models behind one interface, chosen by target string; the one OpenAI chat client.

An aifab LM deployment in-process, or any OpenAI-compatible endpoint (an aifab server, or
a user's) by base URL.

Agents (tool calls) and RAG answering talk to endpoints through :class:`OpenAIChat` here.
A target that is down, slow or answers nonsense raises :class:`UpstreamError` (HTTP 502) or
:class:`UpstreamTimeout` (504), never a hang: every call has a deadline.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from aifab.core.errors import AifabError, InvalidInputError, first_line

__all__ = [
    "ChatModel",
    "ChatResult",
    "UpstreamError",
    "UpstreamTimeout",
    "chat_model",
]

#: Environment variable holding the key for an OpenAI-compatible base URL.
API_KEY_ENV = "AIFAB_CHAT_API_KEY"
DEFAULT_TIMEOUT_S = 60.0


class UpstreamError(AifabError):
    """The chat model's endpoint is down or answered with an error."""

    http_status = 502


class UpstreamTimeout(AifabError):
    """The chat model did not answer within the deadline."""

    http_status = 504


@dataclass
class ChatResult:
    """A finished chat completion."""

    text: str
    model: str
    usage: dict[str, int] = field(default_factory=dict)
    #: True when the prompt was cut (from the front) to fit the model's context.
    truncated: bool = False


class ChatModel(Protocol):
    """Something that answers chat messages."""

    name: str

    def fit(self, max_tokens: int) -> tuple[int, str | None]:
        """``max_tokens`` capped to what the model can give, and why when capped."""

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int) -> ChatResult:
        """The whole answer."""

    def stream(self, messages: list[dict[str, str]], *, max_tokens: int) -> Iterator[str]:
        """The answer piece by piece."""


class DeploymentChat:
    """An aifab LM deployment's model, loaded in this process (once per model version)."""

    def __init__(self, deployment: str, timeout_s: float) -> None:
        from aifab.inference.deployments import get_deployment
        from aifab.inference.loading import shared_model

        loaded = shared_model(get_deployment(deployment)["model"])
        ref = loaded.ref
        self.handler: Any = loaded.handler
        if getattr(self.handler, "kind", None) != "lm":
            raise InvalidInputError(f"chat model {deployment!r}: deployment of {ref} is not an LM")
        self.name = ref
        self.timeout_s = timeout_s

    def fit(self, max_tokens: int) -> tuple[int, str | None]:
        """Cap an answer at half the context, so the prompt keeps the other half.

        Small local models have short contexts: a default made for large ones (256 tokens)
        would leave no room for the sources and the question.
        """
        context = self.handler.max_context
        room = max(1, context // 2)
        if max_tokens <= room:
            return max_tokens, None
        return room, (
            f"max_tokens {max_tokens} capped to {room}: {self.name} has a context of "
            f"{context} tokens, and the prompt needs room too"
        )

    def _request(self, messages: list[dict[str, str]], max_tokens: int) -> tuple[Any, bool]:
        from aifab.inference.generation import GenerationParams

        prompt = self.handler.chat_prompt(messages)
        lm = self.handler.lm
        limit = self.handler.max_context - max_tokens - 1
        ids = lm.prompt_ids(prompt)
        truncated = len(ids) > limit
        if truncated:
            # Small local models have short contexts: keep the end (question and answer cue).
            prompt = lm.tokenizer.decode(ids[-limit:], skip_special_tokens=False)
        params = GenerationParams(max_tokens=max_tokens, temperature=0.0)
        return self.handler.request(prompt, params), truncated

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int) -> ChatResult:
        """Generate greedily on a worker thread, waiting at most ``timeout_s``."""
        request, truncated = self._request(messages, max_tokens)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = pool.submit(self.handler.predict, [request])
        try:
            result = future.result(timeout=self.timeout_s)[0]
        except concurrent.futures.TimeoutError:
            raise UpstreamTimeout(
                f"chat model {self.name} did not answer within {self.timeout_s:g} s"
            ) from None
        finally:
            pool.shutdown(wait=False)
        usage = {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
        }
        return ChatResult(result.text, self.name, usage, truncated)

    def stream(self, messages: list[dict[str, str]], *, max_tokens: int) -> Iterator[str]:
        """Yield generated text pieces."""
        request, _ = self._request(messages, max_tokens)
        for chunk in self.handler.stream(request):
            if chunk.text:
                yield chunk.text


def _refusal(base_url: str, status: int, text: str, key_env: str = API_KEY_ENV) -> AifabError:
    """An endpoint's error answer as ours.

    A request it finds malformed or too long (400, 413, 422) is the caller's to fix; anything
    else means the endpoint is failing (502).
    """
    try:
        message = str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = text
    message = message.strip()[:300]
    if status in (400, 413, 422):
        return InvalidInputError(f"chat endpoint {base_url} refused the request: {message}")
    if status in (401, 403):
        # The caller's to fix: say where the key comes from.
        return InvalidInputError(
            f"chat endpoint {base_url} answered {status}: {message} (the key sent is "
            f"${key_env}; set it to an API key of that endpoint)"
        )
    return UpstreamError(f"chat endpoint {base_url} answered {status}: {message}")


#: Answers (``kb ask``, ``prompts eval``) decode greedily wherever the model runs: the same
#: deployment gives the same answer through its URL as in-process, and evals are reproducible.
_GREEDY = {"temperature": 0.0}

_CLIENT_LOCK = threading.Lock()
_CLIENT: tuple[int, Any] | None = None


def _shared_client() -> Any:
    """The HTTP client of this process: its pool keeps connections, its SSL context loads once.

    A client per request cost an SSL context (the CA bundle read, ~5-35 ms) and a TCP connect
    on every model call of an agent. httpx's client is thread-safe; a forked child makes its
    own rather than share the parent's sockets.
    """
    global _CLIENT
    import httpx

    with _CLIENT_LOCK:
        if _CLIENT is None or _CLIENT[0] != os.getpid():
            limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
            _CLIENT = (os.getpid(), httpx.Client(limits=limits))
        return _CLIENT[1]


class OpenAIChat:
    """An OpenAI-compatible ``/chat/completions`` endpoint at ``base_url``."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"{self.base_url}#{model}"
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        self.timeout_s = timeout_s
        #: Where the key came from, for messages: callers that pass their own say so.
        self.key_env = API_KEY_ENV

    def fit(self, max_tokens: int) -> tuple[int, str | None]:
        """Unchanged: the endpoint refuses a request too long for its model, naming why."""
        return max_tokens, None

    def _post(
        self,
        messages: list[dict[str, Any]],
        max_tokens: int,
        stream: bool,
        extra: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        import httpx

        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            **(extra or {}),
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = self.timeout_s if timeout_s is None else timeout_s
        client = _shared_client()
        try:
            request = client.build_request(
                "POST",
                f"{self.base_url}/chat/completions",
                json={**body, "stream": stream},
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)),
            )
            try:
                response = client.send(request, stream=stream)
            except httpx.RemoteProtocolError:
                # A kept-alive connection the server closed as we reused it: send once more
                # on a fresh one (no answer was read, so nothing is repeated for the caller).
                response = client.send(request, stream=stream)
        except httpx.TimeoutException:
            raise UpstreamTimeout(
                f"chat endpoint {self.base_url} did not answer within {timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(
                f"chat endpoint {self.base_url} unreachable: {first_line(exc)}"
            ) from None
        if response.status_code >= 400:
            response.read()
            response.close()
            raise _refusal(self.base_url, response.status_code, response.text, self.key_env)
        return response

    def post_json(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        extra: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One non-streaming request with extra body fields (``tools``...): the JSON answer.

        Raises:
            UpstreamError: the endpoint is down, failing or did not answer JSON.
            UpstreamTimeout: no answer within ``timeout_s`` (default: the model's).
            InvalidInputError: the endpoint refused the request as malformed (400/413/422).
        """
        response = self._post(messages, max_tokens, False, extra, timeout_s)
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(
                f"chat endpoint {self.base_url} answered {response.status_code}, not JSON"
            ) from None
        finally:
            response.close()

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int) -> ChatResult:
        """One non-streaming request, greedy (as an in-process model answers)."""
        response = self._post(messages, max_tokens, stream=False, extra=_GREEDY)
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"]
            usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(
                f"chat endpoint {self.base_url}: not an OpenAI chat completion ({exc!r})"
            ) from None
        finally:
            response.close()
        return ChatResult(str(text or ""), str(data.get("model") or self.model), usage)

    def stream(self, messages: list[dict[str, str]], *, max_tokens: int) -> Iterator[str]:
        """Yield the ``delta.content`` pieces of the SSE stream (greedy, as :meth:`complete`)."""
        import httpx

        response = self._post(messages, max_tokens, stream=True, extra=_GREEDY)
        try:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    delta = json.loads(payload)["choices"][0].get("delta") or {}
                except (ValueError, KeyError, IndexError, TypeError):
                    continue
                if delta.get("content"):
                    yield str(delta["content"])
        except httpx.TimeoutException:
            raise UpstreamTimeout(f"chat endpoint {self.base_url} stalled mid-answer") from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"chat endpoint {self.base_url}: {first_line(exc)}") from None
        finally:
            response.close()


def chat_model(
    target: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ChatModel:
    """The chat model ``target`` names.

    Args:
        target: an aifab LM deployment name (run in this process), or an OpenAI-compatible
            base URL (``http://host:port/v1``; an aifab server is one).
        model: the model name sent to a base URL (default: the URL's ``#fragment`` or
            ``default``).
        api_key: key for a base URL (default: ``$AIFAB_CHAT_API_KEY``).
        timeout_s: the deadline of one call.

    Raises:
        NotFoundError: no deployment of that name.
        InvalidInputError: the deployment is not a language model, or a bad timeout.
    """
    if not 0 < timeout_s <= 600:
        raise InvalidInputError(f"timeout_s: must be in (0, 600], got {timeout_s}")
    if target.startswith(("http://", "https://")):
        base, _, fragment = target.partition("#")
        return OpenAIChat(base, model or fragment or "default", api_key, timeout_s)
    return DeploymentChat(target.removeprefix("deployment:"), timeout_s)
