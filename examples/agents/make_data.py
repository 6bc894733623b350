"""Generate the agents example's data: tool-use conversations built from the tools' schemas.

Deterministic (seeded), so the committed file is exactly this script's output:

    python examples/agents/make_data.py

``data/tool_chats.jsonl`` has columns ``messages`` (the system message offering the tools, in
the very format aifab's chat endpoint renders them, a user request, and the assistant's
``<tool_call>`` answer), ``text`` (the same conversation rendered with the chat template, for
pre-training), ``expected`` (the call as JSON) and ``split``. Requests ask about the
quickstart's customers: counts and averages answered with the ``sql`` tool, churn questions
about one customer answered with the ``predict`` tool (the customer's fields copied from the
request). The test split holds requests whose slot values the training split never saw
together, so the evaluation measures more than memorisation.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import jinja2

from aifab.inference.tool_calls import CALL_CLOSE, CALL_OPEN, tools_prompt
from aifab.models.tokenizer import CHAT_TEMPLATE

SEED = 5
ROWS = 1000
HERE = Path(__file__).resolve().parent
CUSTOMERS = HERE.parent / "quickstart" / "data" / "customers.csv"

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "sql",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "predict",
            "parameters": {
                "type": "object",
                "properties": {"records": {"type": "array", "items": {"type": "object"}}},
                "required": ["records"],
            },
        },
    },
]
COUNTRIES = ["US", "GB", "DE", "FR", "ES", "BR", "JP", "IN", "CA", "AU"]
PLANS = ["basic", "pro", "enterprise"]
TABLE = "customers"


def _sql(rng: random.Random) -> tuple[str, dict[str, Any], str]:
    country, plan, k = rng.choice(COUNTRIES), rng.choice(PLANS), rng.randint(1, 5)
    asks = [
        (
            f"How many customers are from {country}?",
            f"WHERE country = '{country}'",
            "count",
            country,
        ),
        (f"How many customers are on the {plan} plan?", f"WHERE plan = '{plan}'", "count", plan),
        (
            f"What is the average income in {country}?",
            f"WHERE country = '{country}'",
            "income",
            country,
        ),
        (
            f"What is the average monthly spend on the {plan} plan?",
            f"WHERE plan = '{plan}'",
            "spend",
            plan,
        ),
        (
            f"How many customers opened more than {k} tickets?",
            f"WHERE support_tickets > {k}",
            "count",
            str(k),
        ),
    ]
    question, where, what, slot = rng.choice(asks)
    select = {
        "count": "count(*) AS n",
        "income": "avg(income) AS v",
        "spend": "avg(monthly_spend) AS v",
    }[what]
    return question, {"query": f"SELECT {select} FROM {TABLE} {where}"}, f"{what}:{slot}"


def _predict(
    rng: random.Random, customers: list[dict[str, str]]
) -> tuple[str, dict[str, Any], str]:
    row = rng.choice(customers)
    record = {
        "age": int(row["age"]),
        "income": float(row["income"]),
        "monthly_spend": float(row["monthly_spend"]),
        "support_tickets": int(row["support_tickets"]),
        "plan": row["plan"],
        "country": row["country"],
        "signup_date": row["signup_date"],
        "ticket_text": row["ticket_text"][:60],
    }
    question = (
        f"Will this customer churn? Age {record['age']}, income {record['income']:g}, spend "
        f"{record['monthly_spend']:g} a month, {record['support_tickets']} tickets, plan "
        f"{record['plan']}, country {record['country']}, signed up {record['signup_date']}, "
        f"wrote: {record['ticket_text']}"
    )
    return question, {"records": [record]}, f"predict:{row['customer_id']}"


def _clean_customers() -> list[dict[str, str]]:
    with CUSTOMERS.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep = []
    for row in rows:
        try:
            float(row["income"]), float(row["monthly_spend"]), int(row["age"])
            int(row["support_tickets"])
        except (TypeError, ValueError):
            continue
        if (
            row["plan"] in PLANS
            and row["country"] in COUNTRIES
            and row["signup_date"]
            and row["ticket_text"]
        ):
            keep.append(row)
    return keep


def main() -> None:
    """Write data/tool_chats.jsonl."""
    rng = random.Random(SEED)
    customers = _clean_customers()
    system = {"role": "system", "content": tools_prompt(TOOLS)}
    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    out = []
    for _ in range(ROWS):
        if rng.random() < 0.6:
            question, arguments, key = _sql(rng)
            name = "sql"
        else:
            question, arguments, key = _predict(rng, customers)
            name = "predict"
        call = {"name": name, "arguments": arguments}
        # A request family and slot seen in test is never in train: a fixed hash of the key.
        bucket = sum(key.encode()) % 10
        split = "test" if bucket == 0 else "valid" if bucket == 1 else "train"
        answer = CALL_OPEN + json.dumps(call, separators=(",", ":")) + CALL_CLOSE
        messages = [
            system,
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
        text = template.render(messages=messages, add_generation_prompt=False)
        out.append(
            {"messages": messages, "text": text, "expected": json.dumps(call), "split": split}
        )
    (HERE / "data").mkdir(exist_ok=True)
    with (HERE / "data" / "tool_chats.jsonl").open("w", encoding="utf-8") as fh:
        for row in out:
            fh.write(json.dumps(row) + "\n")
    counts = {s: sum(r["split"] == s for r in out) for s in ("train", "valid", "test")}
    print(f"wrote {len(out)} conversations: {counts}")


if __name__ == "__main__":
    main()
