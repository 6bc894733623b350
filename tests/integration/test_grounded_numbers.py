"""Grounded numbers and sampling defaults through the official ``openai`` SDK and a live server.

A tiny LM is pushed to write digits (a logit bias on every token holding one) after a tool
result; with ``extra_body={"aifab": {"grounded_numbers": True}}`` (chat completions and the
Responses API) or a deployment's default, every number it writes is one of the conversation's.
A deployment's sampling defaults apply when a request omits them, as frameworks' requests do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from aifab.inference.deployments import create_deployment
from aifab.inference.loading import load_served_model
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration

NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
RESULT = '[{"n": 4321, "avg": 17.25}]'
ALLOWED = {"4321", "17.25", "3"}
CHAT: list[dict[str, Any]] = [
    {"role": "user", "content": "How many of the 3 plans are used?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sql", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": RESULT},
]


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(tiny_lm: dict[str, Any], live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    create_deployment("tiny-lm@1", name="tiny", max_batch_size=4, max_wait_ms=5)
    create_deployment(
        "tiny-lm@1",
        name="tiny-grounded",
        options={"temperature": 0, "max_tokens": 24, "grounded_numbers": True},
    )
    _, secret = create_key("client", name="client", rate=None, token_quota=None)
    server = live_server(reconcile_interval_s=0.2)
    try:
        yield {"url": server.url, "key": secret}
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(env: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{env['url']}/v1", api_key=env["key"], max_retries=0)


@pytest.fixture(scope="module")
def digits_bias(tiny_lm: dict[str, Any]) -> dict[str, int]:
    """A bias that makes the tiny LM write digits: numbers to ground, most of them wrong."""
    vocab = load_served_model("tiny-lm@1").handler._lm.vocabulary()
    return {str(t): 8 for t, text in vocab.texts if any(c.isdigit() for c in text)}


def _numbers(text: str | None) -> set[str]:
    return set(NUMBER.findall(text or ""))


def test_grounded_chat_writes_only_the_conversations_numbers(
    client: openai.OpenAI, digits_bias: dict[str, int]
) -> None:
    free: set[str] = set()
    written: set[str] = set()
    for seed in range(4):
        args: dict[str, Any] = {
            "model": "tiny",
            "messages": CHAT,
            "max_tokens": 30,
            "temperature": 1.0,
            "seed": seed,
            "logit_bias": digits_bias,
        }
        free |= _numbers(client.chat.completions.create(**args).choices[0].message.content)
        grounded = client.chat.completions.create(
            **args, extra_body={"aifab": {"grounded_numbers": True}}
        )
        written |= _numbers(grounded.choices[0].message.content)
    assert free - ALLOWED, f"the bias wrote no stray number to ground: {free}"
    assert written and written <= ALLOWED, written


def test_rounding_rule_allows_the_rounded_form(
    client: openai.OpenAI, digits_bias: dict[str, int]
) -> None:
    written: set[str] = set()
    for seed in range(4):
        out = client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            max_tokens=30,
            temperature=1.0,
            seed=seed,
            logit_bias=digits_bias,
            extra_body={"aifab": {"grounded_numbers": True, "round": 1}},
        )
        written |= _numbers(out.choices[0].message.content)
    assert written <= ALLOWED | {"17.2"}, written  # 17.25 rounds half to even


def test_grounded_responses_api(client: openai.OpenAI, digits_bias: dict[str, int]) -> None:
    items: list[Any] = [
        {"role": "user", "content": CHAT[0]["content"]},
        {"type": "function_call", "call_id": "c1", "name": "sql", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": RESULT},
    ]
    written: set[str] = set()
    for _ in range(3):
        out = client.responses.create(
            model="tiny-grounded",  # greedy by default; the request asks for sampling
            input=items,
            max_output_tokens=30,
            temperature=1.0,
            extra_body={"aifab": {"grounded_numbers": True}},
        )
        written |= _numbers(out.output_text)
    assert written <= ALLOWED, written


def test_a_deployments_defaults_apply_when_a_request_omits_them(
    client: openai.OpenAI, digits_bias: dict[str, int]
) -> None:
    omitted = client.chat.completions.create(model="tiny-grounded", messages=CHAT[:1])
    greedy = client.chat.completions.create(
        model="tiny", messages=CHAT[:1], temperature=0, max_tokens=24
    )
    assert omitted.choices[0].message.content == greedy.choices[0].message.content
    assert omitted.usage is not None and omitted.usage.completion_tokens <= 24
    # grounded by default after tool results, unless the request says otherwise
    biased: dict[str, Any] = {"model": "tiny-grounded", "messages": CHAT, "logit_bias": digits_bias}
    grounded = client.chat.completions.create(**biased)
    assert _numbers(grounded.choices[0].message.content) <= ALLOWED
    off = client.chat.completions.create(
        **biased, extra_body={"aifab": {"grounded_numbers": False}}
    )
    assert _numbers(off.choices[0].message.content) - ALLOWED


def test_a_bad_aifab_option_is_refused_by_name(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            extra_body={"aifab": {"grounded_numbers": True, "round": 40}},
        )
    assert "round" in str(caught.value.body)
