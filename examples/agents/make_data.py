"""Generate the agents example's data: tool-use conversations built from the tools' schemas.

Deterministic (seeded), so the committed file is exactly this script's output:

    python examples/agents/make_data.py

``data/tool_chats.jsonl.gz`` has columns ``messages`` (the system message offering the tools, in
the very format aifab's chat endpoint renders them, a user request, and the assistant's
``<tool_call>`` answer), ``text`` (the same conversation rendered with the chat template, for
pre-training), ``expected`` (the call as JSON) and ``split``.
Some training conversations go on after the call: the tool's result and a short answer
quoting it, so an agent's run ends with words.

Requests ask about customers: counts, averages and lookups answered with the ``sql`` tool,
churn questions about one customer answered with the ``predict`` tool (30%: eight fields, the
harder copy). Every answer copies the request's slot values (countries, plans, numbers, names,
dates, ticket texts) verbatim into the arguments, and every slot's values vary widely (dozens
of plans, ticket texts made of support words), so the model must learn to copy rather than
guess: a field with three values was always written from memory. Text values are mostly
quoted as the call writes them (``'GB'`` for SQL, ``"GB"`` for JSON), sometimes bare. Each
slot's values are split in two pools: train and valid requests use the train pool only, and
every test request holds at least one value the training split never saw, so the ``test``
split measures copying of unseen values.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from aifab.agents.builtin_tools import predict_tool, sql_tool
from aifab.inference.tool_calls import CALL_CLOSE, CALL_OPEN, template_messages, tools_prompt
from aifab.models.tokenizer import CHAT_TEMPLATE

SEED = 5
ROWS = {"train": 24000, "valid": 100, "test": 140}
HERE = Path(__file__).resolve().parent

# Exactly the tools analyst.yaml gives its agent (their descriptions included), so the agent's
# requests look like the conversations the model was tuned on.
TOOLS: list[dict[str, Any]] = [
    sql_tool({"max_rows": 20, "timeout_s": 10}, None).openai(),  # type: ignore[arg-type]
    predict_tool({"deployment": "churn"}, None).openai(),  # type: ignore[arg-type]
]
# The quickstart's countries (always in the train pool: the README asks about them) and many more.
KNOWN = ["US", "GB", "DE", "FR", "ES", "BR", "JP", "IN", "CA", "AU"]
OTHER = (  # noqa: SIM905 - one line of names reads better than one name a line
    "AR AT BE BG BO CH CL CN CO CR CU CZ DK DZ EC EE EG FI GH GR GT HK HR HU ID IE IL IQ "
    "IR IS IT JM JO KE KR KW KZ LB LK LT LU LV MA MX MY NG NL NO NP NZ OM PA PE PH PK PL "
    "PT PY QA RO RS RU SA SE SG SI SK SN TH TN TR TW TZ UA UG UY UZ VE VN ZA ZM ZW"
).split()
# The quickstart table's plans and many more, so a plan is copied from the request, not guessed
# among three.
PLANS = ["basic", "pro", "enterprise"]
MORE_PLANS = (  # noqa: SIM905 - one line of names reads better than one name a line
    "free starter team business premium growth scale plus ultimate trial student nonprofit "
    "legacy partner lite standard advanced professional unlimited founder gold silver bronze "
    "platinum diamond essential essentials core elite select prime solo duo family agency "
    "startup studio classic flex annual monthly edu education creator maker hobby indie "
    "launch rocket orbit summit peak apex base plusplus premier signature bundle suite "
    "cloud hosted onprem campus clinic retail merchant seller vendor reseller wholesale"
).split()
FIRST = (  # noqa: SIM905 - one line of names reads better than one name a line
    "Noah James Omar Wei Elif Grace Sofia Pierre Aisha Ravi Lukas Diego Nora Ines Hiroshi "
    "Olga Emma Jonas Tom Chloe Liam Mia Yuki Carlos Fatima Ivan Anna Marco Leila Sven "
    "Priya Kofi Hana Mateo Zara Oskar Lena Tariq Maya Felix"
).split()
LAST = (  # noqa: SIM905 - one line of names reads better than one name a line
    "Muller Brown Sato Berg Nowak Mensah Santos Lopez Garcia Khan Rossi Smith Dubois "
    "Jensen Kim Silva Hassan Patel Chen Ito Novak Costa Ali Weber Moreau Tanaka Okafor "
    "Ivanova Haddad Larsen Singh Fischer Reyes Yilmaz Kowalski Ahmed Nguyen Park Bianchi "
    "Ortiz"
).split()
TICKETS = [
    "Too expensive",
    "Love the new dashboard",
    "Please close my account",
    "Sync is broken",
    "How do I add a teammate",
    "Great support",
    "Third outage this week",
    "Need monthly invoices",
    "Want to upgrade",
    "Nobody answered me",
]
# Support-ticket words: a ticket text is a few of them (or a canned one), so it is copied too.
TICKET_WORDS = (  # noqa: SIM905 - one line of words reads better than one word a line
    "login invoice export refund password sync crash slow billing account upgrade cancel "
    "report dashboard email alert api key team seat plan price discount outage error timeout "
    "mobile app chart csv import webhook token limit quota backup restore data missing wrong "
    "broken failed late double charged locked reset support urgent please thanks again still"
).split()
TABLE = "customers"
#: Share of predict requests: their eight fields, three of them text, are the harder copy.
PREDICT_SHARE = 0.3


def _held_out(value: object) -> bool:
    """About one value in five of each slot is reserved for the test split (a fixed hash).

    The quickstart's countries stay in the train pool: the README's questions ask about them.
    """
    return value not in KNOWN and zlib.crc32(str(value).encode()) % 5 == 0


class Slots:
    """Draws slot values from the train pool or (test) with at least one held-out value."""

    def __init__(self, rng: random.Random, test: bool) -> None:
        self.rng, self.test, self.fresh = rng, test, False

    def pick(self, draw: Callable[[random.Random], Any]) -> Any:
        """A value from ``draw``; test requests prefer held-out values, train ones never get any."""
        want_new = self.test and self.rng.random() < 0.7
        value = draw(self.rng)
        while _held_out(value) != want_new:
            value = draw(self.rng)
        self.fresh |= _held_out(value)
        return value

    def country(self) -> str:
        """A country code."""
        return str(self.pick(lambda r: r.choice(KNOWN + OTHER)))

    def plan(self) -> str:
        """A plan: one of the table's three half the time, else one of many others.

        Never held out: a plan is one word, and a word the training split never shows would be
        tokens the LM never trained on (a vocabulary gap, not a copying one). Held-out values
        are unseen as values but made of seen tokens: countries, numbers, names, emails.
        """
        return self.rng.choice(PLANS if self.rng.random() < 0.5 else MORE_PLANS)

    def ticket(self) -> str:
        """What a customer wrote: a canned text, or a few support words."""

        def draw(r: random.Random) -> str:
            if r.random() < 0.3:
                return r.choice(TICKETS)
            return " ".join(r.choice(TICKET_WORDS) for _ in range(r.randint(2, 5))).capitalize()

        return str(self.pick(draw))

    def number(self, low: int, high: int, step: int = 1) -> int:
        """An integer in ``[low, high]``."""
        return int(self.pick(lambda r: r.randrange(low, high + 1, step)))

    def name(self) -> str:
        """A customer's full name."""
        return str(self.pick(lambda r: f"{r.choice(FIRST)} {r.choice(LAST)}"))

    def quoted(self, value: str, mark: str = "'") -> str:
        """Mostly quoted as in the call (``'`` for SQL, ``"`` for JSON), sometimes bare."""
        return f"{mark}{value}{mark}" if self.rng.random() < 0.7 else value

    def email(self) -> str:
        """A random email address."""
        abc = "abcdefghijklmnopqrstuvwxyz0123456789"

        def word(r: random.Random, n: int) -> str:
            return "".join(r.choice(abc) for _ in range(n))

        return str(
            self.pick(
                lambda r: (
                    f"{word(r, r.randint(3, 8))}@{word(r, r.randint(2, 6))}."
                    + r.choice(["com", "io", "org", "net"])
                )
            )
        )

    def customer_id(self) -> str:
        """A customer id like the quickstart's (C10000)."""
        return str(self.pick(lambda r: f"C{r.randint(10000, 99999)}"))

    def date(self) -> str:
        """An ISO date."""
        return str(
            self.pick(
                lambda r: f"{r.randint(2018, 2025)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
            )
        )


def _sql(s: Slots) -> tuple[str, str]:
    """A question and the SQL that answers it."""
    kind = s.rng.randrange(13)
    if kind == 0:
        c = s.country()
        return (
            f"How many customers are from {s.quoted(c)}?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE country = '{c}'",
        )
    if kind == 1:
        c = s.country()
        return (
            f"What is the average income in {s.quoted(c)}?",
            f"SELECT avg(income) AS v FROM {TABLE} WHERE country = '{c}'",
        )
    if kind == 2:
        c, p = s.country(), s.plan()
        return (
            f"How many customers from {s.quoted(c)} are on the {p} plan?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE country = '{c}' AND plan = '{p}'",
        )
    if kind == 12:
        p = s.plan()
        return (
            f"How many customers are on the {p} plan?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE plan = '{p}'",
        )
    if kind == 3:
        p = s.plan()
        return (
            f"What is the average monthly spend on the {p} plan?",
            f"SELECT avg(monthly_spend) AS v FROM {TABLE} WHERE plan = '{p}'",
        )
    if kind == 4:
        k = s.number(0, 99)
        return (
            f"How many customers opened more than {k} tickets?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE support_tickets > {k}",
        )
    if kind == 5:
        a = s.number(18, 95)
        return (
            f"How many customers are older than {a}?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE age > {a}",
        )
    if kind == 6:
        n = s.number(10000, 250000, 100)
        return (
            f"How many customers earn more than {n}?",
            f"SELECT count(*) AS n FROM {TABLE} WHERE income > {n}",
        )
    if kind == 7:
        name = s.name()
        return (
            f"What plan is {s.quoted(name)} on?",
            f"SELECT plan FROM {TABLE} WHERE name = '{name}'",
        )
    if kind == 8:
        name = s.name()
        return (
            f"How many tickets did {s.quoted(name)} open?",
            f"SELECT support_tickets FROM {TABLE} WHERE name = '{name}'",
        )
    if kind in (9, 10):  # long random strings: every character is copied, none can be guessed
        email = s.email()
        return (
            f"What plan is the customer with email '{email}' on?",
            f"SELECT plan FROM {TABLE} WHERE email = '{email}'",
        )
    cid = s.customer_id()
    return (f"Show customer '{cid}'.", f"SELECT * FROM {TABLE} WHERE customer_id = '{cid}'")


def _predict(s: Slots) -> tuple[str, dict[str, Any]]:
    """A churn question about one customer, every field copied into the record."""
    spend = s.number(1000, 40000) / 100
    record = {
        "age": s.number(18, 95),
        "income": s.number(10000, 250000, 100),
        "monthly_spend": spend,
        "support_tickets": s.number(0, 20),
        "plan": s.plan(),
        "country": s.country(),
        "signup_date": s.date(),
        "ticket_text": s.ticket(),
    }
    plan, country, text = (s.quoted(record[k], '"') for k in ("plan", "country", "ticket_text"))
    question = (
        f"Will this customer churn? Age {record['age']}, income {record['income']}, spend "
        f"{json.dumps(spend)} a month, {record['support_tickets']} tickets, plan {plan}, "
        f"country {country}, signed up {record['signup_date']}, wrote: {text}"
    )
    return question, {"records": [record]}


def _row(rng: random.Random, split: str, system: dict[str, str], template: Any) -> dict[str, Any]:
    call: dict[str, Any]
    while True:
        slots = Slots(rng, test=split == "test")
        if rng.random() < PREDICT_SHARE:
            question, arguments = _predict(slots)
            call = {"name": "predict", "arguments": arguments}
        else:
            question, sql = _sql(slots)
            call = {"name": "sql", "arguments": {"query": sql}}
        if slots.fresh == (split == "test"):  # test: some value unseen in train; else none
            break
    answer = CALL_OPEN + json.dumps(call, separators=(",", ":")) + CALL_CLOSE
    messages = [
        system,
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
    ]
    query = call["arguments"].get("query", "SELECT *")
    if split == "train" and not query.startswith("SELECT *") and rng.random() < 0.15:
        messages += _result_and_answer(rng, query)
    # Pre-training text: most conversations without the (long, constant) tools prompt, so the
    # steps go to the requests and calls; the fine-tuning messages always carry it.
    shown = messages if rng.random() < 0.25 else messages[1:]
    text = template.render(messages=shown, add_generation_prompt=False)
    return {"messages": messages, "text": text, "expected": json.dumps(call), "split": split}


def _result_and_answer(rng: random.Random, query: str) -> list[dict[str, str]]:
    """The sql tool's result (as the agent loop sends it) and a short answer that quotes it."""
    column = query.split(" AS ")[1].split()[0] if " AS " in query else query.split()[1]
    value: Any
    if column == "n":
        value = rng.randint(0, 1000)
    elif column == "v":
        value = round(rng.uniform(10, 200000), rng.randint(1, 6))
    elif column == "plan":
        value = rng.choice(PLANS)
    else:
        value = rng.randint(0, 20)
    rows = [] if column in ("plan", "support_tickets") and rng.random() < 0.3 else [{column: value}]
    result = {"columns": [column], "rows": rows, "truncated": False}
    answer = f"The answer is {value}." if rows else "No customer matched."
    tool = {"role": "tool", "content": json.dumps(result)}
    return [*template_messages([tool], None), {"role": "assistant", "content": answer}]


def main() -> None:
    """Write data/tool_chats.jsonl.gz."""
    rng = random.Random(SEED)
    system = {"role": "system", "content": tools_prompt(TOOLS)}
    template = jinja2.Environment().from_string(CHAT_TEMPLATE)
    out = [_row(rng, split, system, template) for split, n in ROWS.items() for _ in range(n)]
    rng.shuffle(out)
    (HERE / "data").mkdir(exist_ok=True)
    body = "".join(json.dumps(row) + "\n" for row in out).encode()
    # gzip'd (aifab ingests .jsonl.gz as is); mtime 0 keeps the bytes the same on every run
    (HERE / "data" / "tool_chats.jsonl.gz").write_bytes(gzip.compress(body, mtime=0))
    counts = {s: sum(r["split"] == s for r in out) for s in ROWS}
    print(f"wrote {len(out)} conversations: {counts}")


if __name__ == "__main__":
    main()
