"""Names ending in a newline (issue 9, fault 7) are refused by every kind added since: the
checks must use core.names' full match, not a ``^...$`` regex (``$`` matches before ``\\n``)."""

from __future__ import annotations

import re

import pytest

from aifab.core.errors import InvalidInputError


def test_ops_and_rag_names_refuse_a_trailing_newline() -> None:
    from aifab.ops import create_monitor, set_budget
    from aifab.ops.policy.service import create_policy
    from aifab.ops.schedules import create_schedule
    from aifab.rag import create_kb

    calls = [
        ("m\n", lambda: create_monitor("m\n", {"deployment": "churn"})),
        ("p\n", lambda: create_policy("p\n", {})),
        ("s\n", lambda: create_schedule("s\n", "0 * * * *", "pipeline", "x.yaml")),
        ("kb\n", lambda: create_kb("kb\n", "nowhere")),
        ("team\n", lambda: set_budget("team\n", 10.0)),
    ]
    for name, call in calls:
        # The name itself is refused (not a later check of the spec or the source).
        with pytest.raises(InvalidInputError, match=re.escape(repr(name))):
            call()


def test_prompt_names_aliases_and_variables_refuse_a_trailing_newline() -> None:
    """Issue 19, item 11: ``nl\\n`` was created (201) and then unreachable."""
    from aifab.prompts import create_prompt, set_prompt_alias

    with pytest.raises(InvalidInputError, match=re.escape(repr("nl\n"))):
        create_prompt("nl\n", "hello")
    with pytest.raises(InvalidInputError, match=re.escape(repr("prod\n"))):
        create_prompt("nl", "hello", alias="prod\n")
    create_prompt("nl", "hello")
    with pytest.raises(InvalidInputError, match=re.escape(repr("prod\n"))):
        set_prompt_alias("nl", "prod\n", 1)
    with pytest.raises(InvalidInputError, match="not a valid variable name"):
        create_prompt("nl", "{{ x }}", variables=["x", "y\n"])
