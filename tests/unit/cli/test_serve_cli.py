"""``aifab serve`` on a port that is taken fails at once, naming --port, before "serving on"."""

from __future__ import annotations

import socket
from typing import Any


def test_a_busy_port_is_one_error_line_and_no_serving_message(cli: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = cli("serve", "--port", str(port), "--no-worker")
    assert r.exit_code != 0
    assert "serving on" not in r.stderr
    assert f"--port {port}" in r.stderr and "already in use" in r.stderr
