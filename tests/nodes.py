"""Processes standing for machines: each with its own empty AIFAB_HOME (or one shared), sharing
what the test's environment names (the metadata DB, the store), started to work at one moment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def run_nodes(
    script: str, tmp_path: Path, *args: str, nodes: str = "ab", home: Path | None = None
) -> None:
    """Run ``script`` as one process per node and wait for all of them.

    The script gets ``node at *args`` in ``sys.argv[1:]``; it should sleep until ``at`` (a
    time a few seconds ahead, past every process's start-up) so the nodes run together.
    ``home``: every process uses this AIFAB_HOME (processes of one machine) instead of its own.

    Raises:
        AssertionError: a node failed (with the end of its stderr).
    """
    at = str(time.time() + 4)
    procs = []
    for node in nodes:
        env = {**os.environ, "AIFAB_HOME": str(home or tmp_path / f"node-{node}")}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, node, at, *args], env=env, stderr=subprocess.PIPE
            )
        )
    errors = [p.communicate(timeout=300)[1].decode()[-1500:] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), errors
