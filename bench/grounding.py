"""Grounded numbers: what they cost the answer step, and what they buy on a trained agent-lm.

Part 1 (cost): tokens/s of the answer step (the conversation after a DuckDB-shaped ``sql``
result, decoded to its last token) free and with grounded numbers, on LMs of the agents
example's shape (``tiny``, hidden 128, built from the zoo, untrained, with a BPE tokenizer
trained here), one thread, median of repeats, for models of three seeds and two vocabulary
sizes; a small logit bias on digit tokens makes the untrained model write numbers, so the
constraint is exercised. The grounded time includes building the constraint (collecting the
conversation's numbers). Baseline: the same decoding unconstrained. Goal: grounded / free
time <= 1.2x.

Part 2 (``--model agent-lm``, in the workspace ``AIFAB_HOME`` where
``examples/agents/pipeline.yaml`` ran; any registered tool-use LM of that prompt format):
60 held-out (question, tool result, expected answer) conversations whose results are shaped
like DuckDB's (counts of 1-6 digits, averages as full float reprs, dates, emails with
digits), answered by the LM in-process, greedy, as the agent's answer step is: the share of
answers whose numbers are exactly the result's, with grounding and without. Goal: >= 0.98
with grounding.

    .venv/bin/python bench/grounding.py
    AIFAB_HOME=DIR .venv/bin/python bench/grounding.py --model agent-lm
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from typing import Any

NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
COUNTRIES = ["US", "GB", "DE", "FR", "ES", "BR", "JP", "IN", "CA", "AU"]


def held_out(n: int, seed: int = 35) -> list[dict[str, Any]]:
    """``n`` conversations up to a sql result, with the value an answer must quote."""
    rng = random.Random(seed)
    kinds = ["count", "average", "date", "email"]
    rows = []
    for i in range(n):
        kind, country = kinds[i % len(kinds)], rng.choice(COUNTRIES)
        value: Any
        if kind == "count":
            value = rng.randint(0, 10 ** rng.randint(1, 6) - 1)
            question, column = f"How many customers are from {country}?", "n"
            query = f"SELECT count(*) AS n FROM customers WHERE country = '{country}'"
        elif kind == "average":
            value = rng.uniform(10, 200_000)  # DuckDB's avg: a double, its full repr
            question, column = f"What is the average income in {country}?", "v"
            query = f"SELECT avg(income) AS v FROM customers WHERE country = '{country}'"
        elif kind == "date":
            value = f"20{rng.randint(10, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            question, column = f"When did the newest customer from {country} sign up?", "d"
            query = f"SELECT max(signup_date) AS d FROM customers WHERE country = '{country}'"
        else:
            value = (
                f"{rng.choice(['noah', 'wei', 'elif', 'ravi'])}{rng.randint(1, 999)}@example.com"
            )
            question, column = f"What is the email of the oldest customer in {country}?", "email"
            query = (
                f"SELECT email FROM customers WHERE country = '{country}' ORDER BY age DESC LIMIT 1"
            )
        result = {"columns": [column], "rows": [{column: value}], "truncated": False}
        rows.append(
            {"question": question, "query": query, "result": json.dumps(result), "value": value}
        )
    return rows


def _messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    call = {"name": "sql", "arguments": json.dumps({"query": row["query"]})}
    return [
        {"role": "user", "content": row["question"]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": row["result"]},
    ]


def cost(repeats: int, tokens: int) -> None:
    """Part 1: the answer step's decoding time with and without grounded numbers."""
    import torch

    from aifab.inference.generation import (
        GenerationParams,
        GenerationRequest,
        LanguageModel,
        generate,
    )
    from aifab.inference.number_grounding import (
        GroundedNumbers,
        NumberGrounding,
        conversation_numbers,
    )
    from aifab.inference.tool_calls import template_messages
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.models.zoo import build_model

    torch.set_num_threads(1)
    rows = held_out(8)
    corpus = [
        f"{r['question']} {r['result']} The answer is {r['value']}." for r in held_out(600, 1)
    ]
    prompts = ["\n".join(m["content"] for m in template_messages(_messages(r), None)) for r in rows]
    worst = 0.0
    for vocab_size in (512, 4096):
        tok = train_bpe_tokenizer(corpus, vocab_size=vocab_size)
        eos = frozenset({int(tok.eos_token_id)})
        for seed in range(3):
            torch.manual_seed(seed)
            config = {"preset": "tiny", "hidden_size": 128, "intermediate_size": 256}
            model = build_model(
                "causal-lm", {**config, "vocab_size": len(tok), "max_position_embeddings": 1024}
            ).eval()
            lm = LanguageModel(model, tok, 1024, eos, int(tok.pad_token_id))
            vocab = lm.vocabulary()  # built once per model, as a server does
            bias = {t: 2.0 for t, text in vocab.texts if any(c.isdigit() for c in text)}

            def seconds(
                grounded: bool, lm: Any = lm, vocab: Any = vocab, bias: Any = bias
            ) -> float:
                t0 = time.perf_counter()
                for row, prompt in zip(rows, prompts, strict=True):
                    params = GenerationParams(
                        max_tokens=tokens, min_tokens=tokens, temperature=0.0, logit_bias=bias
                    )
                    if grounded:
                        numbers = conversation_numbers(_messages(row), NumberGrounding())
                        params.constraint = GroundedNumbers(numbers, vocab)
                    generate(lm, [GenerationRequest(prompt, params)])
                return time.perf_counter() - t0

            seconds(False), seconds(True)  # warm-up
            # Free and grounded back to back in each repeat, so the machine's load (shared
            # cores) hits both alike; the median of the per-repeat ratios is reported.
            pairs = [(seconds(False), seconds(True)) for _ in range(repeats)]
            ratio = statistics.median(b / f for f, b in pairs)
            free = statistics.median(f for f, _ in pairs)
            bound = statistics.median(b for _, b in pairs)
            worst = max(worst, ratio)
            per = len(rows) * tokens
            print(
                f"vocab {len(tok):5d}, model seed {seed}: free {per / free:7.1f} tokens/s, "
                f"grounded {per / bound:7.1f} tokens/s, time {ratio:.2f}x"
            )
    print(f"answer step, grounded / free time : {worst:6.2f}x worst of 6 (goal <= 1.2x)")


def accuracy(model: str, n: int) -> None:
    """Part 2: answers whose numbers are the result's, on the trained LM, with and without."""
    from aifab.agents.builtin_tools import predict_tool, sql_tool
    from aifab.inference.chat_completion import complete_chat
    from aifab.inference.generation import GenerationParams
    from aifab.inference.loading import shared_model

    handler = shared_model(model).handler
    tools = [
        sql_tool({"max_rows": 20, "timeout_s": 10}, None).openai(),  # type: ignore[arg-type]
        predict_tool({"deployment": "churn"}, None).openai(),  # type: ignore[arg-type]
    ]
    rows = held_out(n)
    for grounded in (False, True):
        right: dict[str, list[bool]] = {}
        t0 = time.perf_counter()
        for i, row in enumerate(rows):
            params = GenerationParams(max_tokens=160, temperature=0.0)
            option = {"grounded_numbers": grounded}
            choice, result = complete_chat(
                handler, _messages(row), params, tools=tools, grounded=option
            )
            answer = choice.get("content") or result.text
            expected = set(NUMBER.findall(str(row["value"])))
            ok = set(NUMBER.findall(answer or "")) == expected and not choice.get("tool_calls")
            right.setdefault(["count", "average", "date", "email"][i % 4], []).append(ok)
            if not ok and i < 12:
                label = "grounded" if grounded else "free    "
                print(f"  {label} miss: {answer!r} for {row['value']!r}")
        share = sum(sum(v) for v in right.values()) / len(rows)
        kinds = ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in right.items())
        print(
            f"{'grounded' if grounded else 'free    '}: numbers equal the result's "
            f"{share:5.2f} ({kinds}); {time.perf_counter() - t0:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=32, help="answer tokens per request")
    parser.add_argument("--model", default=None, help="a registered tool-use LM (part 2)")
    parser.add_argument("--rows", type=int, default=60)
    args = parser.parse_args()
    if args.model:
        accuracy(args.model, args.rows)
        return
    cost(args.repeats, args.tokens)


if __name__ == "__main__":
    main()
