"""httpx's calls for tests that talk to a live server, with a timeout a loaded machine meets.

httpx waits 5 s by default; on a loaded 2-core CI machine a server thread may take longer
to answer (a model load, a seal, a sibling test's training), which failed tests that were
right. A call that passes its own ``timeout`` keeps it.
"""

from __future__ import annotations

import functools

import httpx

#: Seconds a test's call waits for a live server.
TIMEOUT_S = 60.0

get = functools.partial(httpx.get, timeout=TIMEOUT_S)
post = functools.partial(httpx.post, timeout=TIMEOUT_S)
put = functools.partial(httpx.put, timeout=TIMEOUT_S)
delete = functools.partial(httpx.delete, timeout=TIMEOUT_S)
request = functools.partial(httpx.request, timeout=TIMEOUT_S)
