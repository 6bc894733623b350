"""Request bodies of the OpenAI-compatible routes, mirroring OpenAI's fields.

Supported fields are used; OpenAI fields we cannot honour are accepted only at their neutral
value (``logprobs: false``, ``tools: []``, ...) and answer 422 naming the field otherwise, so a
client never silently gets something other than it asked for; unknown fields answer 422.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

__all__ = [
    "AifabOptions",
    "MAX_ITEM_CHARS",
    "MAX_REQUEST_CHARS",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "EmbeddingRequest",
    "StreamOptions",
]

#: Most characters of one text (a prompt, a message, an embedding input): checked before any
#: tokenizer sees it, so a 10 MB text costs a length check, not seconds of tokenizing.
MAX_ITEM_CHARS = 32_768
#: Most characters of all texts of one request together.
MAX_REQUEST_CHARS = 1_048_576


def check_sizes(texts: list[str], field: str) -> None:
    """Refuse a text over :data:`MAX_ITEM_CHARS` or texts over :data:`MAX_REQUEST_CHARS`."""
    total = 0
    for i, text in enumerate(texts):
        if len(text) > MAX_ITEM_CHARS:
            where = field if len(texts) == 1 else f"{field}[{i}]"
            raise ValueError(
                f"{where}: {len(text)} characters, over the limit of {MAX_ITEM_CHARS} "
                "characters per text"
            )
        total += len(text)
    if total > MAX_REQUEST_CHARS:
        raise ValueError(
            f"{field}: {total} characters in all, over the limit of {MAX_REQUEST_CHARS} "
            "characters per request"
        )


#: OpenAI fields aifab cannot honour -> (the values that ask for nothing, why not).
#: Bookkeeping fields (user, metadata, store, service_tier, ...) are accepted with any value.
_NEUTRAL: dict[str, tuple[tuple[Any, ...], str]] = {
    "logprobs": ((False, 0), "log probabilities of chat completions only"),
    "functions": (([],), "the deprecated functions API: use tools"),
    "function_call": (("none", "auto"), "the deprecated functions API: use tool_choice"),
    "modalities": ((["text"],), "text only"),
    "best_of": ((1,), "only 1"),
    "suffix": (("",), "no suffix"),
}


def _neutral(value: Any, info: ValidationInfo) -> Any:
    """Reject ``value`` unless it is None or asks for nothing (OpenAI's default)."""
    field = str(info.field_name)
    neutral, why = _NEUTRAL[field]
    if value is None or any(value == n for n in neutral):
        return value
    raise ValueError(f"{field} is not supported by aifab ({why})")


class StreamOptions(BaseModel):
    """``stream_options``: with ``include_usage`` a last chunk carries the token counts."""

    model_config = ConfigDict(extra="forbid")

    include_usage: bool | None = None
    include_obfuscation: bool | None = Field(None, description="Accepted and ignored.")


class AifabOptions(BaseModel):
    """``aifab``: aifab's own options of a chat request, an extra body field (OpenAI has none).

    With the openai SDK: ``extra_body={"aifab": {"grounded_numbers": True}}``.
    """

    model_config = ConfigDict(extra="forbid")

    grounded_numbers: bool | None = Field(
        None,
        description="Every number the answer writes is one of the user's messages or the tool "
        "results, copied digit for digit (decoding enforces it). Default: the deployment's, "
        "which applies to answers after tool results.",
    )
    round: int | None = Field(
        None, ge=0, le=12, description="Grounded numbers may also be rounded to this many decimals."
    )


class ChatMessage(BaseModel):
    """One chat message; content is text or a list of ``{"type": "text"}`` parts."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(None, max_length=256, description="Accepted and ignored.")
    refusal: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(
        None, max_length=64, description="An assistant turn's calls (OpenAI's shape)."
    )
    tool_call_id: str | None = Field(None, max_length=256, description="A tool result's call.")

    @field_validator("content")
    @classmethod
    def _text_parts(cls, value: str | list[dict[str, Any]] | None) -> str | None:
        if value is None or isinstance(value, str):
            return value
        texts = []
        for i, part in enumerate(value):
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"part {i}: only text parts ({{'type': 'text', 'text': ...}})")
            texts.append(part["text"])
        return "".join(texts)

    @field_validator("tool_calls")
    @classmethod
    def _calls(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, call in enumerate(value or []):
            fn = call.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ValueError(
                    f"tool_calls[{i}]: expected {{'function': {{'name', 'arguments'}}}}"
                )
        return value

    def as_template_message(self) -> dict[str, Any]:
        """The message as a plain dict (content text, calls, call id) for the prompt."""
        out: dict[str, Any] = {"role": self.role, "content": str(self.content or "")}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


class _Generation(BaseModel):
    """The sampling fields chat and text completions share."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., min_length=1, max_length=200, description="The deployment name.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens to generate.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 = greedy.")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0, description="aifab extension (vLLM's): 0 = off.")
    n: int | None = Field(None, ge=1, le=8, description="Choices to generate (1-8).")
    stop: str | list[str] | None = Field(None, description="Up to 4 stop sequences.")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1, description="Same seed, same text.")
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = Field(
        None, max_length=300, description="Token id -> bias in [-100, 100]."
    )
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (value or {}).items():
            if not token.isdigit() or not -100 <= bias <= 100:
                raise ValueError(f"logit_bias: {token!r}: token ids map to biases in [-100, 100]")
        return value

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> list[str]:
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    @property
    def stops(self) -> list[str]:
        """The stop sequences as a list (the validator already normalised them)."""
        return list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        """Whether a streamed response ends with a usage chunk."""
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Generation):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Wins over max_tokens.")
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    modalities: list[str] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    aifab: AifabOptions | None = Field(None, description="aifab's own options (grounding).")

    _chat_unsupported = field_validator("functions", "function_call", "modalities")(_neutral)

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(value or []):
            fn = tool.get("function")
            if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(
                    f"tools[{i}]: expected {{'type': 'function', 'function': {{'name'}}}}"
                )
        return value

    @field_validator("response_format")
    @classmethod
    def _format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        kind = (value or {}).get("type", "text")
        if kind not in ("text", "json_object", "json_schema"):
            raise ValueError(
                f"response_format.type: text, json_object or json_schema, not {kind!r}"
            )
        if kind == "json_schema":
            spec = (value or {}).get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
                raise ValueError("response_format.json_schema: expected {'name', 'schema'}")
        return value

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must satisfy (``response_format``), or None for text."""
        fmt = self.response_format or {}
        if fmt.get("type") == "json_object":
            return {"type": "object"}
        if fmt.get("type") == "json_schema":
            schema: dict[str, Any] = fmt["json_schema"].get("schema") or {}
            return schema
        return None

    @property
    def offered_tools(self) -> list[dict[str, Any]]:
        """The tools the model may call (none when ``tool_choice`` is ``none``)."""
        return [] if self.tool_choice == "none" else list(self.tools or [])

    @field_validator("messages")
    @classmethod
    def _sizes(cls, value: list[ChatMessage]) -> list[ChatMessage]:
        check_sizes([m.as_template_message()["content"] for m in value], "messages")
        return value

    @property
    def limit(self) -> int | None:
        """The requested completion length (``max_completion_tokens`` first)."""
        return self.max_completion_tokens or self.max_tokens


#: Most token ids in one token-id input (a text is capped by characters instead).
MAX_IDS = 32_768

TokenInput = str | list[str] | list[int] | list[list[int]]


def _split_tokens(value: TokenInput, field: str) -> tuple[list[str], list[list[int]]]:
    """Texts and token-id lists of an input that OpenAI lets be either (checked sizes)."""
    items: list[Any] = [value] if isinstance(value, str) else list(value)
    if items and all(isinstance(i, int) for i in items):
        items = [items]  # one prompt given as token ids
    texts = [i for i in items if isinstance(i, str)]
    ids = [i for i in items if isinstance(i, list)]
    if texts and ids:
        raise ValueError(f"{field}: give texts or token-id lists, not both")
    for i, seq in enumerate(ids):
        if not seq or len(seq) > MAX_IDS or any(t < 0 for t in seq):
            raise ValueError(f"{field}[{i}]: 1 to {MAX_IDS} non-negative token ids")
    check_sizes(texts, field)
    return texts, ids


class CompletionRequest(_Generation):
    """``POST /v1/completions`` (legacy text completions)."""

    prompt: TokenInput = Field(
        ...,
        description="One prompt, or a list (not streamed); token ids are read in the model's "
        "own vocabulary.",
    )
    echo: bool | None = Field(False, description="Prepend the prompt to the completion.")
    best_of: int | None = None
    logprobs: int | None = None
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, value: TokenInput) -> TokenInput:
        texts, ids = _split_tokens(value, "prompt")
        if not 1 <= len(texts) + len(ids) <= 64:
            raise ValueError("give 1 to 64 prompts")
        return value

    _text_unsupported = field_validator("best_of", "logprobs", "suffix")(_neutral)

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts as a list: texts, or token-id lists."""
        texts, ids = _split_tokens(self.prompt, "prompt")
        return [*texts, *ids]

    @property
    def limit(self) -> int:
        """The completion length: OpenAI's default for text completions is 16 tokens."""
        return self.max_tokens or 16


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., min_length=1, max_length=200, description="The deployment name.")
    input: TokenInput = Field(
        ...,
        description="A text or a list of texts, or token ids in the model's own vocabulary.",
    )
    encoding_format: Literal["float", "base64"] | None = "float"
    dimensions: int | None = Field(None, ge=1, description="Must equal the model's dimension.")
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _sizes(cls, value: TokenInput) -> TokenInput:
        _split_tokens(value, "input")
        return value

    @property
    def texts(self) -> list[str | list[int]]:
        """The inputs as a list: texts, or token-id lists."""
        texts, ids = _split_tokens(self.input, "input")
        return [*texts, *ids]
