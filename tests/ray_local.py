"""A small local Ray instance for tests that stand in for a cluster's nodes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

#: The smallest object store Ray accepts, so spilling and streaming are exercised.
OBJECT_STORE = 96 * 1024 * 1024


@contextmanager
def local_ray(namespace: str, clear: tuple[str, ...] = (), **runtime_env: Any) -> Iterator[Any]:
    """``ray.init`` on 2 CPUs with ``runtime_env`` for every worker; shut down at the end.

    The variables named in ``clear`` are removed from the environment while Ray starts, so
    its processes inherit nothing of the driver's but what ``runtime_env`` gives them.
    """
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        for key in clear:
            mp.delenv(key, raising=False)
        ray.init(
            num_cpus=2,
            object_store_memory=OBJECT_STORE,
            include_dashboard=False,
            log_to_driver=False,
            namespace=namespace,
            runtime_env=runtime_env or None,
        )
    try:
        yield ray
    finally:
        ray.shutdown()
