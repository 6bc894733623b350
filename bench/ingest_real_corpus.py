"""Ingest real files written by others and count how each came out.

    python bench/ingest_real_corpus.py FILE... [--json out.json]
    python bench/ingest_real_corpus.py --list files.txt

Each file goes through ``aifab.data.ingest.ingest`` in a scratch workspace and lands in one
bucket: ``read`` (rows, columns and every inferred choice printed, for a person to check that
nothing was silently changed), ``refused, named option reads it`` (a refusal naming
``--format csv``, retried with it), ``refused, names what to do`` (the message names an option
or another step), ``refused badly`` (it does not), ``crash`` or ``hang`` (over 60 s). Run it
with another checkout's ``src`` first on ``PYTHONPATH`` for a baseline to compare against.
Whether a read is right is a person's judgment: the script prints what to judge it by.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HANG_SECONDS = 60
#: A refusal names what to do when it names an option or another step.
_WHAT_TO_DO = re.compile(r"--[a-z]|convert|unpack|export|save the|decompress|pass ")


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def _retried(index: int, path: Path, outcome: dict[str, Any]) -> dict[str, Any]:
    """A refusal that names ``--format csv``, tried with it: does the named option work?"""
    if "--format csv" not in outcome.get("message", ""):
        return outcome
    again = _one(index, path, {"format": "csv"})
    outcome["with --format csv"] = again
    if again["bucket"] == "read":
        outcome["bucket"] = "refused, named option reads it"
    return outcome


def _one(index: int, path: Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
    from aifab.core.errors import AifabError
    from aifab.data.ingest import ingest

    started = time.perf_counter()
    signal.alarm(_HANG_SECONDS)
    try:
        r = ingest(f"f{index}{'r' if options else ''}", path, options=options)
    except _Hang:
        return {"file": str(path), "bucket": "hang"}
    except AifabError as exc:
        message = str(exc)
        bucket = "refused, names what to do" if _WHAT_TO_DO.search(message) else "refused badly"
        return {"file": str(path), "bucket": bucket, "message": message}
    except Exception as exc:  # noqa: BLE001 - a crash is an outcome to count, not to stop on
        return {"file": str(path), "bucket": "crash", "message": f"{type(exc).__name__}: {exc}"}
    finally:
        signal.alarm(0)
    return {
        "file": str(path),
        "bucket": "read",
        "rows": r.rows,
        "rejected": r.rejected,
        "columns": list(r.version.columns)[:8],
        "notes": r.details.get("inferred", []),
        "format": r.details.get("format"),
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--list", type=Path, help="A file naming one input file a line.")
    parser.add_argument("--json", type=Path, help="Write every outcome here as JSON.")
    args = parser.parse_args()
    files = list(args.files)
    if args.list:
        files += [Path(line) for line in args.list.read_text().split("\n") if line.strip()]
    os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="aifab-corpus-")
    signal.signal(signal.SIGALRM, _alarm)
    outcomes = [_retried(i, path, _one(i, path)) for i, path in enumerate(files)]
    for o in outcomes:
        if o["bucket"] == "read":
            notes = "; ".join(o["notes"])
            print(
                f"read    {o['file']}: {o['rows']} rows, {o['rejected']} rejected, "
                f"columns {o['columns']}{' | ' + notes if notes else ''}"
            )
        else:
            print(f"{o['bucket']}: {o['file']}: {o.get('message', '')}")
            if "with --format csv" in o:
                again = o["with --format csv"]
                print(
                    f"  with --format csv: {again['bucket']} {again.get('rows', '')} "
                    f"{again.get('columns', '')} {again.get('message', '')}"
                )
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o["bucket"]] = counts.get(o["bucket"], 0) + 1
    print(json.dumps({"files": len(outcomes), **counts}))
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1))


if __name__ == "__main__":
    sys.exit(main())
