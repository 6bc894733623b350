"""The ``onnx`` embedder: a sentence-transformers model run with ONNX Runtime.

The model is exported to ONNX once; mean pooling and normalisation run in numpy. It makes KB
builds faster on CPUs.

``onnx:builtin:all-minilm-l6-v2`` (any local source after ``onnx:``). The export is cached
under ``indexes/.onnx/`` by model directory, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.atomic import atomic_path
from aifab.core.workspace import get_workspace
from aifab.rag.embedders import BATCH, EmbedderUnavailable, normalise

__all__ = ["OnnxEmbedder"]

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _check_mean_pooling(model_dir: Path) -> None:
    """Only mean pooling is re-implemented here; other poolings are refused by name."""
    config = model_dir / "1_Pooling" / "config.json"
    try:
        pooling = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise EmbedderUnavailable(
            f"onnx embedder: {model_dir} has no 1_Pooling/config.json"
        ) from None
    if not pooling.get("pooling_mode_mean_tokens"):
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        raise EmbedderUnavailable(f"onnx embedder: only mean pooling is supported, not {modes}")


def _export(model_dir: Path, target: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    encoder: Any = st[0].auto_model
    encoder.eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            out = self.encoder(input_ids=ids, attention_mask=mask, token_type_ids=types)
            return out.last_hidden_state

    sample = st.tokenizer(
        ["an example", "a second, longer example"], padding=True, return_tensors="pt"
    )
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "hidden")}
    with atomic_path(target) as tmp, torch.no_grad():
        torch.onnx.export(
            Encoder(),
            tuple(sample[n] for n in _INPUTS),
            str(tmp),
            input_names=list(_INPUTS),
            output_names=["hidden"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


class OnnxEmbedder:
    """A sentence-transformers model (mean pooling) run with ONNX Runtime."""

    def __init__(self, source: str) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        from aifab.inference.loading import load_served_model

        inner = source.removeprefix("onnx:")
        loaded = load_served_model(inner)
        handler: Any = loaded.handler
        if getattr(handler, "kind", None) != "embeddings":
            raise EmbedderUnavailable(f"embedder {source!r}: not an embedding model")
        model_dir = Path(loaded.model_dir)
        _check_mean_pooling(model_dir)
        key = hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:16]
        target = get_workspace().indexes / ".onnx" / key / "model.onnx"
        if not target.is_file():
            _export(model_dir, target)
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("AIFAB_ONNX_THREADS", "0"))
        self.session = ort.InferenceSession(
            str(target), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.max_length = int(getattr(handler.model, "max_seq_length", 256))
        self.name = source
        self.dimension = int(handler.dimension)

    def embed(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """Embed in batches of :data:`BATCH`: unit vectors of mean-pooled token states."""
        out = np.zeros((len(texts), self.dimension), dtype="float32")
        for start in range(0, len(texts), BATCH):
            batch = [t or " " for t in texts[start : start + BATCH]]
            enc = self.tokenizer(
                batch,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="np",
            )
            feeds = {n: enc[n].astype("int64") for n in _INPUTS if n in enc}
            hidden = self.session.run(None, feeds)[0]
            mask = enc["attention_mask"][..., None].astype("float32")
            out[start : start + len(batch)] = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            if progress is not None:
                progress(start + len(batch))
        return normalise(out)
