"""One full-match name rule: a trailing newline never passes (issue 9, fault 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.core.names import NAME, SLUG, check_name, is_full_match


@pytest.mark.parametrize("bad", ["x\n", "x\n\n", "", " x", "x y", "é", "a" * 201, None, 3])
def test_names_are_full_matched(bad: object) -> None:
    assert not is_full_match(NAME, bad)
    with pytest.raises(InvalidInputError, match="invalid dataset name"):
        check_name(bad, "dataset")


def test_good_names_pass() -> None:
    assert check_name("Sensor_events.v2-a", "dataset") == "Sensor_events.v2-a"
    assert is_full_match(SLUG, "churn-v2") and not is_full_match(SLUG, "Churn")


def test_every_boundary_refuses_a_trailing_newline(workspace: Path) -> None:
    from aifab.data.append import append_records
    from aifab.inference.deployment_settings import check_name as deployment_name
    from aifab.jobs.service import create_queue
    from aifab.serve.keys import create_key
    from aifab.track.registry import parse_ref

    with pytest.raises(InvalidInputError, match="dataset name"):
        append_records("x\n", [{"a": 1}])
    with pytest.raises(InvalidInputError, match="deployment name"):
        deployment_name("x\n")
    with pytest.raises(InvalidInputError, match="model name"):
        parse_ref("churn\n@1")
    with pytest.raises(InvalidInputError, match="queue name"):
        create_queue("team\n")
    with pytest.raises(InvalidInputError, match="name"):
        create_key("client", name="ops\n")
