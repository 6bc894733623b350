"""The ``lm`` handler: a causal LM behind the completion, chat and predict routes."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, first_line
from aifab.inference.generation import (
    GenerationChunk,
    GenerationParams,
    GenerationRequest,
    GenerationResult,
    LanguageModel,
    generate,
    generate_stream,
)

__all__ = ["LMHandler"]

ROLES = ("system", "user", "assistant", "tool")
MAX_STOP = 4
MAX_PROMPTS = 64
_PARAM_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "stop", "seed")
#: Sampling fields a deployment may give defaults for.
_DEFAULT_FIELDS = ("temperature", "top_p", "max_tokens")


def detokenize_ids(tokenizer: Any, ids: list[int], *, keep_special: bool) -> str:
    """Token ids -> text with ``tokenizer`` (an id outside its vocabulary: InvalidInputError)."""
    size = len(tokenizer)
    bad = next((i for i in ids if not 0 <= i < size), None)
    if bad is not None:
        raise InvalidInputError(f"token id {bad} is not in the model's vocabulary of {size}")
    text: str = tokenizer.decode(ids, skip_special_tokens=not keep_special)
    return text


def _number(name: str, value: Any, *, integer: bool = False) -> float:
    """Check a numeric parameter's type (bool is not a number here)."""
    ok = isinstance(value, int) or (not integer and isinstance(value, float))
    if isinstance(value, bool) or not ok:
        kind = "an integer" if integer else "a number"
        raise InvalidInputError(f"{name}: must be {kind}, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidInputError(f"{name}: must be finite, got {value!r}")
    return number


class LMHandler:
    """Serves a ``causal-lm`` (or plain Hugging Face causal LM) directory.

    ``predict`` decodes all its requests as one left-padded batch; ``stream`` yields one
    request's text piece by piece. Both may run on several server threads at once: the model
    is only read, and every request samples from its own ``torch.Generator``.
    """

    kind = "lm"
    #: The server's batcher queues a request of more prompts in chunks of this many, so other
    #: keys' requests take turns with a 64-prompt one (each prompt has its own generator, so
    #: chunking changes no result).
    chunk_items = 8

    def __init__(self) -> None:
        self.lm: LanguageModel | None = None
        self.model_id = ""
        self.max_context = 0
        self.max_tokens_limit = 512
        #: What a request that omits them samples with (temperature, top_p, max_tokens).
        self.defaults: dict[str, float] = {}
        #: Number grounding of answers after tool results, unless a request says otherwise.
        self.grounding: Any = None

    def setup(
        self, model_dir: Path, sidecar: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """Load the model and its tokenizer from ``model_dir``.

        Options: ``model_id`` (the ref it was loaded as; default the directory name),
        ``max_tokens_limit`` (cap on ``max_tokens``, default 512), ``temperature``, ``top_p``
        and ``max_tokens`` (what a request that omits them gets; default those of the model's
        ``generation_config.json``, then OpenAI's), ``grounded_numbers`` (``true`` or
        ``{"grounded_numbers": true, "round": N}``: answers after tool results write only the
        conversation's numbers unless a request says otherwise).

        Raises:
            InvalidInputError: Missing or corrupt model or tokenizer files.
        """
        from transformers import AutoTokenizer

        from aifab.models.checkpoint import load_model

        limit = options.get("max_tokens_limit", 512)
        if _number("max_tokens_limit", limit, integer=True) < 1:
            raise InvalidInputError(f"max_tokens_limit: must be >= 1, got {limit}")
        self.max_tokens_limit = int(limit)
        path = Path(model_dir)
        model: Any = load_model(path)[0]
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        # Damaged files surface as many library-specific types (SafetensorError, ...).
        except Exception as exc:
            first = first_line(exc)
            raise InvalidInputError(f"{path}: cannot load the tokenizer: {first}") from None
        config = model.config
        max_context = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        if not max_context:
            raise InvalidInputError(f"{path}: config.json has no max_position_embeddings")
        eos = model.generation_config.eos_token_id
        eos_ids = {int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None}
        if tokenizer.eos_token_id is not None:
            eos_ids.add(int(tokenizer.eos_token_id))
        pad = tokenizer.pad_token_id
        pad_id = int(pad if pad is not None else next(iter(sorted(eos_ids)), 0))
        self.lm = LanguageModel(model, tokenizer, int(max_context), frozenset(eos_ids), pad_id)
        self.max_context = int(max_context)
        self.model_id = str(options.get("model_id") or path.name)
        self.defaults = self._sampling_defaults(path, options)
        if options.get("grounded_numbers") is not None:
            from aifab.inference.number_grounding import grounding_option

            self.grounding = grounding_option(options["grounded_numbers"], "grounded_numbers")

    def _sampling_defaults(self, path: Path, options: Mapping[str, Any]) -> dict[str, float]:
        """Sampling defaults: the options', else the model's ``generation_config.json``'s.

        Only the keys the file sets count, as in vLLM; ``do_sample: false`` is greedy.
        """
        import json

        found: dict[str, Any] = {}
        try:
            config = json.loads((path / "generation_config.json").read_text())
        except (OSError, ValueError):
            config = {}
        if isinstance(config, dict):
            if config.get("do_sample") is False:
                found["temperature"] = 0.0
            elif "temperature" in config:
                found["temperature"] = config["temperature"]
            for key, name in (("top_p", "top_p"), ("max_new_tokens", "max_tokens")):
                if key in config:
                    found[name] = config[key]
        if isinstance(found.get("max_tokens"), int):  # a model's own long default fits the cap
            found["max_tokens"] = min(found["max_tokens"], self.max_tokens_limit)
        found.update({k: options[k] for k in _DEFAULT_FIELDS if options.get(k) is not None})
        params = GenerationParams(**{"max_tokens": min(64, self.max_tokens_limit), **found})
        self._check_params(params)  # a bad default names its setting, as a request's would
        return {k: float(v) if k != "max_tokens" else int(v) for k, v in found.items()}

    @property
    def _lm(self) -> LanguageModel:
        if self.lm is None:
            raise RuntimeError("LMHandler.setup() has not been called")
        return self.lm

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` encodes to (as a prompt)."""
        return len(self._lm.encode(text))

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        """Render chat messages with the tokenizer's chat template, opening the assistant turn.

        Raises:
            InvalidInputError: Not a non-empty list of ``{"role", "content"}`` objects with role
                system, user or assistant and string content (the message names the index).
        """
        if not isinstance(messages, list) or not messages:
            raise InvalidInputError("messages: must be a non-empty list of messages")
        clean = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, Mapping):
                raise InvalidInputError(f"messages[{i}]: must be an object with role and content")
            role, content = msg.get("role"), msg.get("content")
            if role not in ROLES:
                raise InvalidInputError(
                    f"messages[{i}].role: must be one of {', '.join(ROLES)}, got {role!r}"
                )
            if not isinstance(content, str):
                raise InvalidInputError(f"messages[{i}].content: must be a string")
            clean.append({"role": role, "content": content})
        tokenizer = self._lm.tokenizer
        if not getattr(tokenizer, "chat_template", None):
            # A base model without a template still gets a readable transcript.
            lines = [f"{m['role'].capitalize()}: {m['content']}" for m in clean]
            return "\n".join([*lines, "Assistant:"])
        prompt: str = tokenizer.apply_chat_template(
            clean, tokenize=False, add_generation_prompt=True
        )
        return prompt

    def detokenize(self, ids: list[int]) -> str:
        """Token ids of this model's vocabulary -> text (special tokens kept as written).

        Raises:
            InvalidInputError: an id outside the vocabulary (named).
        """
        return detokenize_ids(self._lm.tokenizer, ids, keep_special=True)

    def grounded_numbers(self, numbers: frozenset[str]) -> Any:
        """A fresh constraint making one answer write only ``numbers`` (and any other text)."""
        from aifab.inference.number_grounding import GroundedNumbers

        return GroundedNumbers(numbers, self._lm.vocabulary())

    def json_constraint(self, schema: dict[str, Any]) -> Any:
        """A fresh constraint making one generation emit JSON valid for ``schema``.

        Raises:
            InvalidInputError: the schema uses keywords beyond the supported subset (named).
        """
        from aifab.inference.json_constraint import JsonConstraint

        return JsonConstraint(schema, self._lm.vocabulary())

    def request(self, prompt: str, params: GenerationParams) -> GenerationRequest:
        """Validate one prompt and its parameters against the model's limits.

        Raises:
            InvalidInputError: Naming ``prompt``, ``max_tokens``, ``temperature``, ``top_p``,
                ``top_k``, ``stop`` or ``seed``.
        """
        if not isinstance(prompt, str):
            raise InvalidInputError("prompt: must be a string")
        self._check_params(params)
        n = len(self._lm.prompt_ids(prompt))
        if n >= self.max_context:
            raise InvalidInputError(
                f"prompt: {n} tokens; the model's context is {self.max_context} tokens"
            )
        if n + params.max_tokens > self.max_context:
            raise InvalidInputError(
                f"max_tokens: prompt ({n} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"the model's context of {self.max_context} tokens; use max_tokens <= "
                f"{self.max_context - n}"
            )
        return GenerationRequest(prompt, params)

    def _check_params(self, p: GenerationParams) -> None:
        limit = self.max_tokens_limit
        if not 1 <= _number("max_tokens", p.max_tokens, integer=True) <= limit:
            raise InvalidInputError(
                f"max_tokens: must be between 1 and {limit}, got {p.max_tokens}"
            )
        if not 0 <= _number("temperature", p.temperature) <= 2:
            raise InvalidInputError(f"temperature: must be between 0 and 2, got {p.temperature}")
        if not 0 < _number("top_p", p.top_p) <= 1:
            raise InvalidInputError(f"top_p: must be in (0, 1], got {p.top_p}")
        if _number("top_k", p.top_k, integer=True) < 0:
            raise InvalidInputError(f"top_k: must be >= 0 (0 = no limit), got {p.top_k}")
        if p.seed is not None and not 0 <= _number("seed", p.seed, integer=True) < 2**63:
            raise InvalidInputError(f"seed: must be between 0 and 2**63 - 1, got {p.seed}")
        stop = p.stop
        if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
            raise InvalidInputError("stop: must be a list of non-empty strings")
        if len(stop) > MAX_STOP:
            raise InvalidInputError(f"stop: at most {MAX_STOP} stop sequences, got {len(stop)}")

    def decode(self, payload: Any) -> list[GenerationRequest]:
        """``{"prompt": str | [str]}`` or ``{"messages": [...]}`` plus parameter fields.

        Raises:
            InvalidInputError: A missing or unknown field, or a bad value (named).
        """
        if not isinstance(payload, Mapping):
            raise InvalidInputError("body: must be an object with a prompt")
        unknown = sorted(set(payload) - {"prompt", "messages", *_PARAM_FIELDS})
        if unknown:
            raise InvalidInputError(f"{unknown[0]}: unknown field")
        if ("prompt" in payload) == ("messages" in payload):
            raise InvalidInputError("prompt: give exactly one of prompt or messages")
        if "messages" in payload:
            prompts = [self.chat_prompt(payload["messages"])]
        else:
            raw = payload["prompt"]
            prompts = raw if isinstance(raw, list) else [raw]
            if not prompts or len(prompts) > MAX_PROMPTS:
                raise InvalidInputError(f"prompt: give 1 to {MAX_PROMPTS} prompts")
            for i, p in enumerate(prompts):
                if not isinstance(p, str):
                    where = f"prompt[{i}]" if isinstance(raw, list) else "prompt"
                    raise InvalidInputError(f"{where}: must be a string")
        # null means "the default", as in OpenAI's API.
        fields: dict[str, Any] = {**self.defaults}
        fields.update({k: payload[k] for k in _PARAM_FIELDS if payload.get(k) is not None})
        stop = fields.get("stop", [])
        fields["stop"] = [stop] if isinstance(stop, str) else stop
        params = GenerationParams(**fields)
        return [self.request(p, params) for p in prompts]

    def predict(self, items: list[GenerationRequest]) -> list[GenerationResult]:
        """Complete the requests as one left-padded batch (greedy results equal one-by-one)."""
        return generate(self._lm, items)

    def stream(self, item: GenerationRequest) -> Iterator[GenerationChunk]:
        """Blocking generator of text chunks; the last has finish_reason and token counts."""
        return generate_stream(self._lm, item)

    def encode(self, output: GenerationResult) -> dict[str, Any]:
        """A result -> ``{"text", "finish_reason", "usage": {...}}``."""
        return {
            "text": output.text,
            "finish_reason": output.finish_reason,
            "usage": {
                "prompt_tokens": output.prompt_tokens,
                "completion_tokens": output.completion_tokens,
                "total_tokens": output.prompt_tokens + output.completion_tokens,
            },
        }

    def describe(self) -> dict[str, Any]:
        """Kind, model id, context length, vocabulary size and the max_tokens cap."""
        return {
            "kind": self.kind,
            "model_id": self.model_id,
            "max_context": self.max_context,
            "vocab_size": len(self._lm.tokenizer),
            "max_tokens_limit": self.max_tokens_limit,
            "chat_template": bool(getattr(self._lm.tokenizer, "chat_template", None)),
        }
