"""Two gateway processes count one key's tokens into one database and lose none.

Each gateway process holds one ``serve.limits.TokenQuota`` that adds to the ``key_usage`` row
every second; here two processes (the gateway's own counter, without HTTP in front) add to one
key at once, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
import time

from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.serve.tables import KeyUsageRow

# Each process adds 1 token per call, flushing often so the two writers interleave.
_GATEWAY = """
import sys, time
from aifab.serve.limits import TokenQuota
quota = TokenQuota(flush_interval_s=0.01)
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
for i in range(int(sys.argv[2])):
    quota.add("key_shared", 1, requests=1)
    if i % 7 == 0:
        quota.flush()
quota.close()
"""


def test_two_gateway_processes_lose_no_quota_count(db_url: str) -> None:
    from aifab.core.db import get_engine

    get_engine()  # migrate once before the processes start
    n = 300
    at = str(time.time() + 6)
    procs = [
        subprocess.Popen([sys.executable, "-c", _GATEWAY, at, str(n)], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [p.communicate(timeout=180)[1].decode()[-1500:] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with session_scope() as s:
        rows = list(s.scalars(select(KeyUsageRow).where(KeyUsageRow.key_id == "key_shared")))
    assert sum(r.tokens for r in rows) == 2 * n
    assert sum(r.requests for r in rows) == 2 * n
