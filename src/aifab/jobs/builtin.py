"""Built-in recipes used by tests, benchmarks and health checks."""

from __future__ import annotations

import time
from typing import Any


def noop(config: dict[str, Any]) -> None:
    """Do nothing (measures scheduling overhead)."""


def sleep(config: dict[str, Any]) -> None:
    """Sleep ``config["seconds"]`` seconds, then exit ``config.get("exit_code", 0)``."""
    time.sleep(float(config.get("seconds", 1.0)))
    code = int(config.get("exit_code", 0))
    if code:
        raise SystemExit(code)


def echo(config: dict[str, Any]) -> None:
    """Print each of ``config["lines"]`` (one every ``config.get("every_s", 0)`` seconds)."""
    for line in config.get("lines", []):
        print(line, flush=True)
        time.sleep(float(config.get("every_s", 0.0)))
