"""Fixtures of the multimodal tests: the example's parcels ingested, a tiny dual encoder.

Each module that uses them gets its own (they follow ``module_workspace``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

FAST = {"system_metrics": False, "threads": 1, "progress": False}
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "multimodal" / "make_data.py"
CLIP = {
    "dataset": "parcels@1",
    "text_column": "caption",
    "image_size": 16,
    "vocab_size": 300,
    "max_length": 12,
    "batch_size": 16,
    "model": {"embed_dim": 16, "image": {"channels": [4]}, "text": {"d_model": 16}},
    **FAST,
}


def make_data() -> Any:
    """The example's ``make_data.py`` as a module (its ``rows`` and ``sticker``)."""
    spec = importlib.util.spec_from_file_location("mm_make_data", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parcels(module_workspace: Path) -> list[dict[str, Any]]:
    """60 parcels of the example (PNG bytes in a Parquet column) ingested as ``parcels``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aifab.data import ingest

    cols = make_data().rows(60)
    path = module_workspace.parent / "parcels.parquet"
    pq.write_table(pa.table({**cols, "image": pa.array(cols["image"], pa.binary())}), path)
    ingest("parcels", str(path))
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


@pytest.fixture(scope="module")
def clip(parcels: list[dict[str, Any]], module_workspace: Path) -> dict[str, Any]:
    """A dual encoder trained for one epoch, then resumed from its checkpoint for a second."""
    from aifab.train.recipes.contrastive import main

    ckpt = {"checkpoint_dir": str(module_workspace.parent / "clip-ckpt"), "checkpoint_every": 1}
    first = main({**CLIP, **ckpt, "epochs": 1})
    out = main({**CLIP, **ckpt, "epochs": 2, "register": "parcels-clip"})
    return {"first": first, **out}
