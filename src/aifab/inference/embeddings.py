"""The ``embeddings`` handler: a local sentence-transformers model behind ``/v1/embeddings``."""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, first_line

__all__ = ["MAX_INPUTS", "EmbeddingHandler"]

#: Most texts one request may embed (OpenAI's limit is 2048; a small server wants fewer).
MAX_INPUTS = 256
_BATCH = 32


class EmbeddingHandler:
    """Serves a sentence-transformers directory: texts -> L2-normalised float vectors."""

    kind = "embeddings"
    #: The server's batcher queues bigger requests in chunks of this many texts, so keys
    #: take turns on the model instead of one big request holding it throughout.
    chunk_items = 16

    def __init__(self) -> None:
        self.model: Any = None
        self.model_id = ""
        self.dimension = 0
        # encode() tokenizes with a shared Rust tokenizer whose settings it may change; one
        # call at a time keeps concurrent server workers from tripping over it.
        self._lock = threading.Lock()
        # Counting and detokenizing use their own copy of the tokenizer: a small request's
        # count must not wait for the lock a big batch holds while it runs on the model.
        self._counter: Any = None
        self._count_lock = threading.Lock()

    def setup(
        self, model_dir: Path, sidecar: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """Load the model from a local directory, never from a hub.

        Options: ``model_id`` (the ref it was loaded as; default the directory name).

        Raises:
            InvalidInputError: Not a sentence-transformers directory, or corrupt files.
        """
        path = Path(model_dir)
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise InvalidInputError(
                f"{path} is not a sentence-transformers model: no modules.json or config.json"
            )
        os.environ["HF_HUB_OFFLINE"] = "1"
        from sentence_transformers import SentenceTransformer

        from aifab.models.checkpoint import quiet_transformers

        try:
            with quiet_transformers():
                model: Any = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        # Damaged files surface as many library-specific types (SafetensorError, ...).
        except Exception as exc:
            first = first_line(exc)
            raise InvalidInputError(f"{path}: cannot load the embedding model: {first}") from None
        # sentence-transformers 6 renamed the method; older releases only have the long name.
        get_dim = getattr(model, "get_embedding_dimension", None)
        if get_dim is None:
            get_dim = model.get_sentence_embedding_dimension
        dimension = get_dim()
        if not dimension:
            raise InvalidInputError(f"{path}: the model does not say its embedding dimension")
        self.model = model.eval()
        self._counter = copy.deepcopy(model.tokenizer)
        self.dimension = int(dimension)
        self.model_id = str(options.get("model_id") or path.name)

    def decode(self, payload: Any) -> list[str]:
        """``str`` | ``list[str]`` | ``{"input": str | list[str]}`` -> texts.

        Raises:
            InvalidInputError: Empty input, an empty or non-string item (named by index), more
                than :data:`MAX_INPUTS` items, or an unknown field.
        """
        if isinstance(payload, Mapping):
            unknown = sorted(set(payload) - {"input"})
            if unknown:
                raise InvalidInputError(f"{unknown[0]}: unknown field")
            if "input" not in payload:
                raise InvalidInputError("input: field required")
            payload = payload["input"]
        if isinstance(payload, str):
            if not payload:
                raise InvalidInputError("input: must not be an empty string")
            return [payload]
        if not isinstance(payload, list) or not payload:
            raise InvalidInputError("input: must be a non-empty string or list of strings")
        if len(payload) > MAX_INPUTS:
            raise InvalidInputError(
                f"input: at most {MAX_INPUTS} texts per request, got {len(payload)}"
            )
        for i, text in enumerate(payload):
            if not isinstance(text, str):
                raise InvalidInputError(f"input[{i}]: must be a string")
            if not text:
                raise InvalidInputError(f"input[{i}]: must not be an empty string")
        return list(payload)

    def predict(self, items: list[str]) -> list[list[float]]:
        """Embed texts in batches; one normalised vector of ``dimension`` floats per text."""
        if not items:
            return []
        with self._lock:
            vectors = self.model.encode(
                list(items),
                batch_size=_BATCH,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        result: list[list[float]] = vectors.astype("float32").tolist()
        return result

    def encode(self, output: list[float]) -> list[float]:
        """A vector is already JSON-ready."""
        return output

    def detokenize(self, ids: list[int]) -> str:
        """Token ids of this model's vocabulary -> text (special tokens dropped).

        Raises:
            InvalidInputError: an id outside the vocabulary (named).
        """
        from aifab.inference.lm import detokenize_ids

        with self._count_lock:
            return detokenize_ids(self._counter, ids, keep_special=False)

    def count_tokens(self, text: str) -> int:
        """Tokens the model reads for ``text`` (special tokens included, after truncation)."""
        with self._count_lock:
            ids = self._counter(text, truncation=True, max_length=self.model.max_seq_length)[
                "input_ids"
            ]
        return len(ids)

    def describe(self) -> dict[str, Any]:
        """Kind, model id, vector dimension and the longest input in tokens."""
        return {
            "kind": self.kind,
            "model_id": self.model_id,
            "dimension": self.dimension,
            "max_seq_length": int(self.model.max_seq_length),
            "max_inputs": MAX_INPUTS,
        }
