"""Server time of the dashboard's data pages with 1,000 versions of one dataset.

A dataset gets ``--versions`` versions (each derived from the one before, so lineage is a long
chain) and a second dataset ``--columns`` wide. Every data page is fetched ``--repeats`` times
through the real app (FastAPI TestClient: server time, no network) after a warm-up; p50/p99
are printed per page. Baseline for the versions list: the catalog call a page without paging
would make (``aifab.data.list_versions``: every version with its schema and profile) against
the page (``list_version_summaries`` offset/limit, rendered). Goal: p99 <= 200 ms per page.

    .venv/bin/python bench/ui_data.py --versions 1000 --columns 2000 --repeats 30 --home /tmp/b

Making the data takes minutes (1,000 real commits); ``--home`` keeps it for the next run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def _timed(call: Callable[[], object], repeats: int) -> list[float]:
    call()  # warm-up: first imports and caches
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _make_data(versions: int, columns: int) -> None:
    from aifab.data.catalog import commit_query

    parent = None
    for i in range(versions):
        sql = f"SELECT range AS x, range * {i} AS y, 'k' || (range % 5) AS s FROM range(20)"
        made = commit_query(
            "many", sql, source="bench", transform={"kind": "bench"},
            parents=[parent] if parent else [],
        )  # fmt: skip
        parent = made.version
    cols = ", ".join(f"range * {i} AS c{i}" for i in range(columns))
    commit_query("wide", f"SELECT {cols} FROM range(50)", source="bench", transform={"kind": "b"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--columns", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--home", help="Workspace to reuse (made once; setup takes minutes).")
    args = parser.parse_args()
    os.environ["AIFAB_HOME"] = args.home or tempfile.mkdtemp(prefix="aifab-bench-ui-data-")
    os.environ.setdefault("AIFAB_ACTOR", "user:bench")

    from fastapi.testclient import TestClient

    from aifab.data import list_datasets, list_versions
    from aifab.serve.app import create_app
    from aifab.serve.keys import create_key

    start = time.perf_counter()
    if not list_datasets():
        _make_data(args.versions, args.columns)
    print(f"setup: {args.versions} versions + a {args.columns}-column version in "
          f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    _, secret = create_key("developer", name="bench")
    middle = args.versions // 2
    pages = {
        "datasets": "/ui/data",
        "versions (first page)": "/ui/data/many",
        "versions (last page)": f"/ui/data/many?offset={args.versions - 50}",
        "version": f"/ui/data/many/versions/{middle}",
        f"version, {args.columns} columns": "/ui/data/wide/versions/1",
        "quarantine": "/ui/data/many/quarantine",
        "diff": f"/ui/data/many/diff?a={middle}&b={args.versions}",
        "lineage (25-node chain)": f"/ui/data/many/versions/{middle}/lineage",
        "labeling queue": "/ui/data/many/label",
    }
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        client.post("/ui/login", data={"key": secret})
        print(f"{'page':34} {'p50 ms':>8} {'p99 ms':>8}")
        results = {}
        for label, path in pages.items():

            def get(path: str = path) -> None:
                reply = client.get(path)
                assert reply.status_code == 200, (path, reply.status_code, reply.text[:300])

            results[label] = _quantiles(_timed(get, args.repeats))
            print(f"{label:34} {results[label][0]:8.1f} {results[label][1]:8.1f}")
    base = _quantiles(_timed(lambda: list_versions("many"), max(3, args.repeats // 5)))
    page = results["versions (last page)"]
    print(f"baseline list_versions('many') (all {args.versions}): p50 {base[0]:.1f} ms")
    print(f"paged versions page p50 {page[0]:.1f} ms: {base[0] / page[0]:.1f}x faster")
    worst = max(results.items(), key=lambda kv: kv[1][1])
    print(f"worst p99: {worst[0]} {worst[1][1]:.1f} ms (goal <= 200 ms)")


if __name__ == "__main__":
    main()
