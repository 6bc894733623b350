"""Engines that run data specs.

DuckDB in-process is the default (in the step modules); Ray Data (``engine: ray``, in this
package) is for tables that outgrow one machine.
"""

from __future__ import annotations

from typing import Literal

Engine = Literal["duckdb", "ray"]
