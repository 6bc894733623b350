"""The dashboard's audit page over a long log: server time per page vs reading the whole log.

A scratch workspace gets ``--events`` audit events (a valid keyed chain, inserted in bulk: one
``record_event`` call each would take minutes), then the real app (FastAPI TestClient, signed
in as a viewer) serves ``/ui/audit`` pages: the newest page, a page deep in the log (keyset,
``before=``), and filters by actor, object prefix and time. The baseline is what a page without
paging in the query costs: reading every event (``audit_events(limit=N)``) to show 50 of them.
Also reported: one on-demand chain verification (the "Verify now" link).

    .venv/bin/python bench/ui_audit.py --events 100000 --repeats 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any


def seed(n: int) -> None:
    """``n`` events by 7 actors over 100 objects' groups, as one valid keyed chain."""
    from sqlalchemy import insert

    from aifab.core import init_workspace, session_scope
    from aifab.core.audit import GENESIS, AuditEvent, AuditHead, _event_hash, write_anchor
    from aifab.core.audit_keys import load_key
    from aifab.core.ids import digest

    init_workspace()
    with session_scope() as s:
        head = s.get(AuditHead, 1)
        assert head is not None
        key = load_key(create_with_unkeyed=head.count)
        prev, rows, start = head.hash, [], time.time() - n
        for i in range(n):
            actor, action, obj = f"user:u{i % 7}", f"thing.{'ab'[i % 2]}", f"obj:{i // 1000}:{i}"
            ts, pd = start + i, digest({"i": i})
            h = _event_hash(key, prev, ts, actor, action, obj, pd)
            rows.append(
                dict(
                    ts=ts,
                    actor=actor,
                    action=action,
                    object=obj,
                    params_digest=pd,
                    prev_hash=prev,
                    hash=h,
                )
            )
            prev = h
        s.execute(insert(AuditEvent), rows)
        head.count += n
        head.hash = prev
    write_anchor()
    assert prev != GENESIS


def timed(call: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(p50, p99) milliseconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="aifab-bench-ui-")
    t0 = time.perf_counter()
    seed(args.events)
    print(f"seeded {args.events:,} audit events in {time.perf_counter() - t0:.1f} s")

    from fastapi.testclient import TestClient

    from aifab.core import audit_events
    from aifab.serve.app import create_app
    from aifab.serve.keys import create_key

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        _, secret = create_key("viewer", name="bench")
        client.post("/ui/login", data={"key": secret})
        deep = args.events // 50
        since = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 600))
        pages = {
            "newest page": "/ui/audit",
            f"deep page (before={deep})": f"/ui/audit?before={deep}",
            "actor filter": "/ui/audit?actor=user:u3",
            "actor with no event": "/ui/audit?actor=user:nobody",
            "object prefix": "/ui/audit?object=obj:7:",
            "last 10 minutes": f"/ui/audit?since={since}",
        }
        print(f"{'page':32s} {'p50 ms':>9s} {'p99 ms':>9s}")
        for name, url in pages.items():
            assert client.get(url).status_code == 200
            p50, p99 = timed(lambda url=url: client.get(url), args.repeats)
            print(f"{name:32s} {p50:9.1f} {p99:9.1f}")
        page50, _ = timed(lambda: client.get("/ui/audit"), args.repeats)
        base50, base99 = timed(lambda: audit_events(args.events)[:50], max(3, args.repeats // 5))
        print(f"{'baseline: read all, show 50':32s} {base50:9.1f} {base99:9.1f}")
        print(f"ratio baseline/newest page (p50): {base50 / page50:.1f}x")
        t0 = time.perf_counter()
        reply = client.get("/ui/audit/verify")
        print(
            f"verify on demand: {time.perf_counter() - t0:.2f} s, intact={'intact' in reply.text}"
        )


if __name__ == "__main__":
    main()
