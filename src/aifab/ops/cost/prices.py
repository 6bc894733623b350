"""Prices of compute and tokens: defaults, ``AIFAB_PRICE_*`` variables, ``<workspace>/prices.yaml``.

The file wins over the variables, the variables over the defaults; a bad file is an error
naming the field, never silently ignored.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig, load_yaml, parse_config
from aifab.core.workspace import get_workspace

__all__ = ["PRICES_FILE", "Prices", "load_prices"]

PRICES_FILE = "prices.yaml"


class Prices(StrictConfig):
    """What one unit of each resource costs (in ``currency``)."""

    currency: str = Field("USD", description="Currency of every price and report.")
    cpu_hour: float = Field(0.05, ge=0, description="One CPU core for one hour.")
    gpu_hour: float = Field(2.5, ge=0, description="One GPU for one hour.")
    memory_gb_hour: float = Field(0.005, ge=0, description="One GiB of memory for one hour.")
    tokens_1k: float = Field(0.002, ge=0, description="One thousand model tokens (gateway).")
    request: float = Field(0.0, ge=0, description="One gateway request.")


def load_prices() -> Prices:
    """The prices in force: ``prices.yaml`` in the workspace over ``AIFAB_PRICE_<FIELD>``.

    Raises:
        InvalidInputError: the file or a variable holds an unknown field or a bad number.
    """
    data: dict[str, Any] = {}
    for name in Prices.model_fields:
        value = os.environ.get(f"AIFAB_PRICE_{name.upper()}")
        if value is not None:
            data[name] = value
    path = get_workspace().root / PRICES_FILE
    if path.is_file():
        loaded = load_yaml(path) or {}
        if isinstance(loaded, dict):
            data.update(loaded)
        else:
            data = loaded
    return parse_config(Prices, data, source=str(path) if path.is_file() else "AIFAB_PRICE_*")
