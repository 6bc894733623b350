"""The OpenAI-compatible API against the official ``openai`` client and a real uvicorn server.

A tiny causal LM (``tiny``) and the offline all-MiniLM-L6-v2 (``minilm``) are deployed; what
the server answers is compared with the same handlers run in-process.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from tests import live_http

from aifab.inference.deployments import create_deployment
from aifab.inference.generation import GenerationParams
from aifab.inference.loading import load_served_model
from aifab.serve.app import create_app
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration

#: The OpenAI routes of the app's schema, fuzzed below against the live deployments.
SCHEMA = schemathesis.openapi.from_dict(create_app().openapi()).include(
    path_regex="^/v1/(models|chat/completions|completions|embeddings)"
)
CHAT = [{"role": "user", "content": "what does the cow say?"}]
PROMPT = "the cat sat on the"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def _wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.TransportError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def env(tiny_lm: dict[str, Any], live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    create_deployment("tiny-lm@1", name="tiny", max_batch_size=4, max_wait_ms=5)
    create_deployment("builtin:all-minilm-l6-v2", name="minilm")
    create_deployment("tiny-lm@1", name="tiny-small", options={"max_tokens_limit": 8})
    secrets = {
        name: create_key(role, name=name, rate=None, token_quota=quota)[1]
        for name, role, quota in [
            ("client", "client", None),
            ("viewer", "viewer", None),
            ("tight", "client", 5),
            ("ten", "client", 10),
            ("hundred", "client", 100),
            ("other", "client", None),
        ]
    }
    server = live_server(reconcile_interval_s=0.2)
    try:
        yield {"url": server.url, "keys": secrets}
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(env: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{env['url']}/v1", api_key=env["keys"]["client"], max_retries=0)


def _sdk(env: dict[str, Any], key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{env['url']}/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def lm(tiny_lm: dict[str, Any]) -> Any:
    """The same LM handler, in-process."""
    return load_served_model("tiny-lm@1").handler


@pytest.fixture(scope="module")
def embedder(env: dict[str, Any]) -> Any:
    return load_served_model("builtin:all-minilm-l6-v2").handler


def _local(lm: Any, prompt: str, **params: Any) -> Any:
    [result] = lm.predict([lm.request(prompt, GenerationParams(temperature=0.0, **params))])
    return result


def test_models_list_and_get(env: dict[str, Any], client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list()}
    assert {"tiny", "minilm", "tiny-small"} <= ids
    model = client.models.retrieve("tiny")
    assert (model.id, model.object, model.owned_by) == ("tiny", "model", "aifab")
    assert model.created > 0
    # viewers may list too (read), they just cannot invoke
    assert "tiny" in {m.id for m in _sdk(env, env["keys"]["viewer"]).models.list()}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_chat_matches_in_process_greedy(client: openai.OpenAI, lm: Any) -> None:
    out = client.chat.completions.create(model="tiny", messages=CHAT, temperature=0, max_tokens=12)
    expected = _local(lm, lm.chat_prompt(CHAT), max_tokens=12)
    choice = out.choices[0]
    assert out.object == "chat.completion" and out.model == "tiny"
    assert choice.message.role == "assistant"
    assert choice.message.content == expected.text
    assert choice.finish_reason == expected.finish_reason
    assert out.usage is not None
    assert out.usage.prompt_tokens == expected.prompt_tokens
    assert out.usage.completion_tokens == expected.completion_tokens
    assert out.usage.total_tokens == expected.prompt_tokens + expected.completion_tokens


def test_streaming_chat_equals_non_stream(client: openai.OpenAI) -> None:
    args: dict[str, Any] = {"model": "tiny", "messages": CHAT, "temperature": 0, "max_tokens": 20}
    whole = client.chat.completions.create(**args)
    chunks = list(
        client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == whole.choices[0].finish_reason
    assert all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_completions_stream_and_not(client: openai.OpenAI, lm: Any) -> None:
    out = client.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=10)
    expected = _local(lm, PROMPT, max_tokens=10)
    assert out.object == "text_completion"
    assert out.choices[0].text == expected.text
    assert out.usage is not None and out.usage.completion_tokens == expected.completion_tokens
    stream = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=0, max_tokens=10, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == expected.text
    assert chunks[-1].choices[0].finish_reason == expected.finish_reason
    # several prompts: one choice each, in order
    many = client.completions.create(
        model="tiny", prompt=[PROMPT, "the dog"], temperature=0, max_tokens=5
    )
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[1].text == _local(lm, "the dog", max_tokens=5).text


def test_max_tokens_gives_length_and_stop_cuts(client: openai.OpenAI, lm: Any) -> None:
    out = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=0, max_tokens=3, stop=None
    )
    local = _local(lm, PROMPT, max_tokens=3)
    if local.finish_reason == "length":  # the tiny model did not stop by itself within 3
        assert out.choices[0].finish_reason == "length"
        assert out.usage is not None and out.usage.completion_tokens == 3
    longer = _local(lm, PROMPT, max_tokens=24).text
    assert len(longer) >= 2, "the tiny model generated almost nothing"
    stop = longer[len(longer) // 2 : len(longer) // 2 + 2]
    cut = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=0, max_tokens=24, stop=[stop]
    )
    assert cut.choices[0].text == longer[: longer.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=0, max_tokens=24, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text


def test_embeddings_match_in_process(client: openai.OpenAI, embedder: Any) -> None:
    texts = ["a cat sat on the mat", "the weather is nice today"]
    out = client.embeddings.create(model="minilm", input=texts)  # the SDK asks for base64
    expected = np.asarray(embedder.predict(texts))
    got = np.asarray([d.embedding for d in out.data])
    assert got.shape == (2, 384)
    assert np.abs(got - expected).max() < 1e-5
    assert out.usage.prompt_tokens == sum(embedder.count_tokens(t) for t in texts)
    single = client.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    assert np.abs(np.asarray(single.data[0].embedding) - expected[0]).max() < 1e-5


def test_embeddings_base64_raw(env: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    body = {"model": "minilm", "input": "hello", "encoding_format": "base64"}
    r = live_http.post(f"{env['url']}/v1/embeddings", json=body, headers=headers)
    assert r.status_code == 200
    vec = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    assert vec.shape == (384,) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-4


def test_errors_through_the_sdk(env: dict[str, Any], client: openai.OpenAI) -> None:
    with pytest.raises(openai.AuthenticationError):
        _sdk(env, "aifab-not-a-key").chat.completions.create(model="tiny", messages=CHAT)
    with pytest.raises(openai.PermissionDeniedError):
        _sdk(env, env["keys"]["viewer"]).chat.completions.create(model="tiny", messages=CHAT)
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="nope", messages=CHAT)
    assert "nope" in str(nf.value)
    with pytest.raises(openai.BadRequestError) as not_lm:
        client.chat.completions.create(model="minilm", messages=CHAT)
    assert "model" in str(not_lm.value)
    with pytest.raises(openai.BadRequestError) as not_emb:
        client.embeddings.create(model="tiny", input="x")
    assert "model" in str(not_emb.value)
    long = "the cat sat on the mat and " * 200
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": long}], max_tokens=4
        )
    assert "context" in str(too_long.value)
    with pytest.raises(openai.BadRequestError) as n9:
        client.chat.completions.create(model="tiny", messages=CHAT, n=9)
    assert "n" in n9.value.body["param"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as cap:
        client.completions.create(model="tiny-small", prompt=PROMPT, max_tokens=9)
    assert "max_tokens" in str(cap.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("functions", [{"name": "f"}]),
        ("tools", [{"type": "function", "function": {}}]),
        ("response_format", {"type": "yaml"}),
        ("response_format", {"type": "json_schema", "json_schema": {"schema": {"anyOf": []}}}),
        ("tool_choice", "required"),
        ("frequency_penalty", 2.5),
        ("logit_bias", {"x": 1}),
        ("top_logprobs", 21),
        ("no_such_field", 1),
    ],
)
def test_unsupported_fields_are_400(env: dict[str, Any], field: str, value: Any) -> None:
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    body = {"model": "tiny", "messages": CHAT, field: value}
    r = live_http.post(f"{env['url']}/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_neutral_openai_fields_are_accepted(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "developer", "content": "be brief"}, *CHAT],
        max_completion_tokens=2,
        temperature=0,
        logprobs=False,
        presence_penalty=0,
        frequency_penalty=0,
        user="someone",
        seed=1,
        n=1,
    )
    assert out.usage is not None and out.usage.completion_tokens <= 2


def test_malformed_json_is_400(env: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    r = live_http.post(
        f"{env['url']}/v1/completions",
        content=b'{"model": "tiny", "prompt": ',
        headers={**headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 400 and "error" in r.json()


def test_token_quota_answers_429(env: dict[str, Any], lm: Any) -> None:
    tight = _sdk(env, env["keys"]["tight"])
    # the prompt's tokens and max_tokens do not fit the 5-token quota: refused before running
    assert lm.count_tokens(PROMPT) + 4 > 5
    with pytest.raises(openai.RateLimitError) as caught:
        tight.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=4)
    assert caught.value.response.headers.get("retry-after")
    assert "token quota" in str(caught.value) and "5 tokens a day" in str(caught.value)


def _stored_tokens(key_id: str) -> int:
    from aifab.core.db import session_scope
    from aifab.serve.limits import utc_day
    from aifab.serve.tables import KeyUsageRow

    with session_scope() as s:
        row = s.get(KeyUsageRow, (key_id, utc_day(time.time())))
        return row.tokens if row is not None else 0


def _key_id(secret: str) -> str:
    from aifab.serve.keys import authenticate

    info = authenticate(secret)
    assert info is not None
    return info.id


def test_quota_reserves_the_most_and_charges_the_actual(env: dict[str, Any], lm: Any) -> None:
    """Issue 9, fault 4: a 10-token/day key completed 64 prompts x 200 tokens in one request."""
    secret = env["keys"]["ten"]
    ten = _sdk(env, secret)
    with pytest.raises(openai.RateLimitError) as caught:
        ten.completions.create(model="tiny", prompt=[PROMPT] * 64, max_tokens=200)
    assert "10 tokens a day" in str(caught.value)
    assert caught.value.response.headers.get("retry-after")
    key = _key_id(secret)
    assert _stored_tokens(key) == 0  # a refused request costs nothing
    room = 10 - lm.count_tokens(PROMPT)
    out = ten.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=room)
    used = out.usage.total_tokens
    assert used <= 10
    # charged what it used, not what it reserved (the settle is written within a second)
    _wait_for(lambda: _stored_tokens(key) == used, 10, "the actual usage to be stored")


def test_concurrent_requests_never_pass_the_quota(env: dict[str, Any], lm: Any) -> None:
    import concurrent.futures

    secret = env["keys"]["hundred"]
    each = lm.count_tokens(PROMPT) + 20  # what every request reserves

    def one(_: int) -> int:
        try:
            out = _sdk(env, secret).completions.create(
                model="tiny", prompt=PROMPT, temperature=1.0, max_tokens=20, seed=_
            )
        except openai.RateLimitError:
            return -1
        return out.usage.total_tokens

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, range(12)))
    done = [r for r in results if r >= 0]
    assert -1 in results and len(done) >= 100 // each
    assert sum(done) <= 100
    key = _key_id(secret)
    _wait_for(lambda: _stored_tokens(key) == sum(done), 10, "the usage to be stored")


def test_oversized_texts_are_refused_before_tokenizing(env: dict[str, Any]) -> None:
    """Issue 9, fault 3: a 10 MB text took 20 s to embed and was charged 256 tokens.

    A body over the route's cap is a 413 before it is read (test_gateway_hardening); a text
    under that cap but over the per-text limit is refused before any tokenizer runs.
    """
    from aifab.serve.openai_models import MAX_ITEM_CHARS, MAX_REQUEST_CHARS

    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    huge = "word " * 400_000  # 2 MB: under the 8 MB body cap, over the per-text limit
    for route, body in [
        ("/v1/embeddings", {"model": "minilm", "input": huge}),
        ("/v1/completions", {"model": "tiny", "prompt": huge}),
        (
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": huge}]},
        ),
    ]:
        r = live_http.post(f"{env['url']}{route}", json=body, headers=headers, timeout=60)
        assert r.status_code == 400, (route, r.text)
        assert f"limit of {MAX_ITEM_CHARS} characters per text" in r.json()["error"]["message"]
    many = ["x" * MAX_ITEM_CHARS] * (MAX_REQUEST_CHARS // MAX_ITEM_CHARS + 1)
    r = live_http.post(
        f"{env['url']}/v1/embeddings",
        json={"model": "minilm", "input": many},
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 400
    assert f"limit of {MAX_REQUEST_CHARS} characters per request" in r.json()["error"]["message"]


def test_embedding_tokens_are_what_the_model_read(
    env: dict[str, Any], client: openai.OpenAI, embedder: Any
) -> None:
    texts = ["short text", "word " * 5000]  # the second is truncated to the model's length
    out = client.embeddings.create(model="minilm", input=texts)
    assert out.usage.prompt_tokens == sum(embedder.count_tokens(t) for t in texts)
    assert embedder.count_tokens(texts[1]) == embedder.model.max_seq_length


def test_a_big_embedding_request_does_not_block_another_key(env: dict[str, Any]) -> None:
    import concurrent.futures

    big = _sdk(env, env["keys"]["client"])
    other = _sdk(env, env["keys"]["other"])
    finished: list[str] = []

    def embed_big() -> None:
        big.embeddings.create(model="minilm", input=["many words here " * 60] * 256)
        finished.append("big")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(embed_big)
        time.sleep(0.3)  # the big request is queued (in chunks) and running
        other.embeddings.create(model="minilm", input="a small one")
        finished.append("small")
        job.result()
    assert finished == ["small", "big"]


def test_streamed_tokens_reach_metrics_and_log(env: dict[str, Any], client: openai.OpenAI) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from aifab.inference.request_log import recent_requests

    def completion_tokens() -> float:
        viewer = {"Authorization": f"Bearer {env['keys']['viewer']}"}
        text = live_http.get(f"{env['url']}/metrics", headers=viewer).text
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "aifab_tokens_total"
            and s.labels.get("deployment") == "tiny"
            and s.labels.get("kind") == "completion"
        )

    before = completion_tokens()
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=CHAT,
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    used = chunks[-1].usage
    assert used is not None
    _wait_for(lambda: completion_tokens() >= before + used.completion_tokens, 10, "metrics")

    def logged() -> list[dict[str, Any]]:
        return [
            r
            for r in recent_requests("tiny", limit=50)
            if r["route"] == "/v1/chat/completions"
            and r["status"] == 200
            and (r.get("input") or {}).get("prompt_tokens") == used.prompt_tokens
        ]

    entry = _wait_for(logged, 10, "the request log")[0]
    assert json.dumps(entry)  # plain JSON
    assert entry["tokens"] > 0


def test_abandoned_stream_leaves_the_server_serving(
    env: dict[str, Any], client: openai.OpenAI
) -> None:
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{env['url']}/v1/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        next(r.iter_lines())  # read one event, then hang up
    out = client.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=2)
    assert out.choices[0].finish_reason in ("stop", "length")


def test_edge_values_are_4xx_or_greedy(env: dict[str, Any], client: openai.OpenAI) -> None:
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    url = f"{env['url']}/v1/completions"
    for field, value in [("seed", 2**70), ("max_tokens", 0), ("temperature", 3), ("top_p", 0)]:
        body = {"model": "tiny", "prompt": PROMPT, field: value}
        r = live_http.post(url, json=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    huge = live_http.post(
        url, json={"model": "tiny", "prompt": PROMPT, "max_tokens": 10**9}, headers=headers
    )
    assert huge.status_code == 400 and huge.json()["error"]["code"] == "context_length_exceeded"
    # a vanishing temperature is greedy, not NaN probabilities
    tiny_t = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=1e-300, max_tokens=5
    )
    greedy = client.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=5)
    assert tiny_t.choices[0].text == greedy.choices[0].text


@SCHEMA.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_fuzzed_bodies_never_500(case: Any, env: dict[str, Any]) -> None:
    if isinstance(case.body, dict):  # fuzz the fields against real models, not the name
        case.body["model"] = "minilm" if case.path == "/v1/embeddings" else "tiny"
        if isinstance(case.body.get("max_tokens"), int):
            case.body["max_tokens"] = min(case.body["max_tokens"], 16)
    headers = {"Authorization": f"Bearer {env['keys']['client']}"}
    response = case.call(base_url=env["url"], headers=headers, timeout=60)
    assert response.status_code < 500, f"{case.path} {case.body!r}: {response.text[:500]}"
    if response.status_code >= 400:
        assert "error" in response.json(), response.text[:500]
    elif "text/event-stream" in str(response.headers.get("content-type")):
        assert response.text.rstrip().endswith("data: [DONE]") or '"error"' in response.text


def test_a_many_prompt_completion_does_not_block_another_key(env: dict[str, Any]) -> None:
    import concurrent.futures

    finished: list[str] = []

    def many() -> None:
        # Long enough (8 chunks of 8 prompts x 200 tokens) that the other key's request,
        # sent 0.3 s later, cannot lose the race to it on a loaded machine: at 40 tokens
        # the tiny model could finish all 64 prompts before the other request arrived.
        _sdk(env, env["keys"]["client"]).completions.create(
            model="tiny", prompt=[PROMPT] * 64, max_tokens=200, temperature=0
        )
        finished.append("many")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        job = pool.submit(many)
        time.sleep(0.3)  # the 64 prompts are queued (in chunks) and running
        other = _sdk(env, env["keys"]["other"])
        other.completions.create(model="tiny", prompt=PROMPT, max_tokens=2)
        finished.append("one")
        job.result()
    assert finished == ["one", "many"]


def test_token_id_inputs_are_read_in_the_models_vocabulary(
    env: dict[str, Any], client: openai.OpenAI, lm: Any, embedder: Any
) -> None:
    """LangChain-style token-id arrays: completions and embeddings equal their text's."""
    ids = lm._lm.encode(PROMPT)
    text = lm._lm.tokenizer.decode(ids)
    by_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=0)
    by_text = client.completions.create(model="tiny", prompt=text, max_tokens=5, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    st_ids = embedder.model.tokenizer("a cat on a mat", add_special_tokens=False)["input_ids"]
    vec_ids = client.embeddings.create(model="minilm", input=[st_ids]).data[0].embedding
    vec_text = client.embeddings.create(model="minilm", input="a cat on a mat").data[0].embedding
    assert max(abs(a - b) for a, b in zip(vec_ids, vec_text, strict=True)) < 1e-5
    with pytest.raises(openai.BadRequestError, match="not in the model's vocabulary"):
        client.completions.create(model="tiny", prompt=[10**9], max_tokens=2)
    # Issue 22: tiktoken ids (what LangChain sends by default) beyond the vocabulary are a 400
    # that says how to make LangChain send text instead.
    with pytest.raises(openai.BadRequestError, match="check_embedding_ctx_length=False") as caught:
        client.embeddings.create(model="minilm", input=[[9906, 100257]])
    assert caught.value.body["param"] == "input"
