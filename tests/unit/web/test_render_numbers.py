"""How the dashboard writes numbers: readable at every size (a p99 of 4350 ms was "4.35e+03")."""

from __future__ import annotations

import pytest

from aifab.web.render import environment


def num(value: object, digits: int = 4) -> str:
    return str(environment().filters["num"](value, digits))


@pytest.mark.parametrize(
    ("value", "digits", "shown"),
    [
        (4352.4, 3, "4,352"),
        (435.24, 3, "435"),
        (0.012345, 3, "0.0123"),
        (12_345_678.9, 4, "12,345,679"),
        (1234, 3, "1,234"),
        (None, 3, "—"),
        (float("nan"), 3, "nan"),
        (3.2e17, 4, "3.200e+17"),
    ],
)
def test_numbers_read_plainly(value: object, digits: int, shown: str) -> None:
    assert num(value, digits) == shown
