"""``live_server``: start real uvicorn servers running ``create_app()`` on 127.0.0.1 threads."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """A real uvicorn server running ``create_app(**app_kwargs)`` on a background thread.

    It is returned once ``/readyz`` answers 200 (every deployment loaded or failed).
    """

    def __init__(self, ready_timeout_s: float = 180.0, **app_kwargs: Any) -> None:
        import uvicorn

        from aifab.serve.app import create_app

        self.app = create_app(**app_kwargs)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # log_config=None: uvicorn leaves logging alone, so its records reach the root logger
        # (where the key-leak test captures them).
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", log_config=None
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready():
            if time.monotonic() > deadline or not self.thread.is_alive():
                self.stop()
                raise AssertionError(f"server at {self.url} not ready in {ready_timeout_s} s")
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        """Shut the server down (again is harmless)."""
        self.server.should_exit = True
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def live_server() -> Iterator[Callable[..., LiveServer]]:
    """Start a :class:`LiveServer` with ``create_app`` keywords; all stop with the module."""
    started: list[LiveServer] = []

    def start(**app_kwargs: Any) -> LiveServer:
        server = LiveServer(**app_kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
