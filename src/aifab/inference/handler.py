"""What a served model is to the server: a handler with ``setup / decode / predict / encode``.

The server owns batching, threads, timeouts and the HTTP/OpenAI surface; a handler owns one
model (DESIGN.md principle 8). ``decode`` turns one request body into items, ``predict`` runs a
batch of items that may come from many requests, ``encode`` makes one output JSON-ready.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from aifab.core.registry import Registry

__all__ = ["HANDLERS", "Handler", "StreamingHandler"]


@runtime_checkable
class Handler(Protocol):
    """One loaded model behind a deployment."""

    #: ``classifier`` | ``lm`` | ``embeddings``: which routes may call it.
    kind: str

    def setup(
        self, model_dir: Path, sidecar: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """Load the model from ``model_dir``; raise InvalidInputError when files are bad."""

    def decode(self, payload: Any) -> list[Any]:
        """One request body -> items; raise InvalidInputError naming the bad field or row."""

    def predict(self, items: list[Any]) -> list[Any]:
        """One output per item, in order (the batch may mix several requests)."""

    def encode(self, output: Any) -> Any:
        """One output -> JSON-ready value."""

    def describe(self) -> dict[str, Any]:
        """What callers need to know: inputs, classes, dimension, context length..."""


@runtime_checkable
class StreamingHandler(Handler, Protocol):
    """A handler that can also yield one item's output piece by piece (language models)."""

    def stream(self, item: Any) -> Iterator[Any]:
        """Blocking generator of pieces; the server iterates it on a worker thread."""


#: Handler class per sidecar ``builder`` (plus ``sentence-transformers`` directories).
HANDLERS = Registry(
    "handler",
    {
        "mlp": "aifab.inference.classifier:ClassifierHandler",
        "cnn": "aifab.inference.classifier:ClassifierHandler",
        "transformer-classifier": "aifab.inference.classifier:ClassifierHandler",
        "fusion-classifier": "aifab.inference.classifier:ClassifierHandler",
        "dual-encoder": "aifab.inference.dual_encoder:DualEncoderHandler",
        "causal-lm": "aifab.inference.lm:LMHandler",
        "hf-causal-lm": "aifab.inference.lm:LMHandler",
        "sentence-transformers": "aifab.inference.embeddings:EmbeddingHandler",
    },
)
