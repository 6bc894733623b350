"""A knowledge base built on one machine is searched on another that shares only the metadata
DB and the object store (moto's S3 server, the stand-in for S3/MinIO)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from aifab.core.storage import COMPLETE, get_store
from aifab.rag import create_kb

_SEARCH = """
import json
from aifab.rag import search
hits = search("docs", "DuckDB Parquet", k=1, mode="bm25")["results"]
print(json.dumps([h["document"] for h in hits]))
"""


def test_a_kb_built_here_is_searched_from_another_workspace(
    s3_storage: str, workspace: Path, module_docs: Path, tmp_path: Path
) -> None:
    create_kb("docs", str(module_docs), config={"chunk_tokens": 48, "chunk_overlap": 8})
    keys = get_store().list("indexes/docs/v1")
    assert f"indexes/docs/v1/{COMPLETE}" in keys and "indexes/docs/v1/manifest.json" in keys
    shutil.rmtree(workspace / "indexes" / "docs")  # the other node cannot see this disk
    env = {
        **os.environ,
        "AIFAB_HOME": str(tmp_path / "node2"),
        "AIFAB_DB_URL": f"sqlite:///{workspace / 'aifab.db'}",
    }
    out = subprocess.run(
        [sys.executable, "-c", _SEARCH], env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["notes.txt"]
    assert (tmp_path / "node2" / "indexes" / "docs" / "v1" / "manifest.json").is_file()
