"""Generate the quickstart's customers.csv: a churn-prone SaaS customer list, with dirt in it.

Deterministic (seeded), so the committed data/customers.csv is exactly this script's output:

    python examples/quickstart/make_data.py

Each customer has a last support ticket whose wording follows whether they are about to churn
(cancel, switch, refund... versus thanks, upgrade, how-to questions); the labeling step turns
those cues into a ``churn``/``stay`` label, which the numeric columns (plan, tenure, tickets)
also predict in part. The dirt is what the clean and validate steps exist for: exact duplicate
rows, near-duplicate re-entries of the same customer, nulls, malformed CSV lines, impossible
ages, bad emails, unknown countries, unparseable dates, emails and phone numbers inside the
ticket text, and income outliers.
"""

from __future__ import annotations

import csv
import io
import math
import random
from datetime import date, timedelta
from pathlib import Path

SEED = 7
CUSTOMERS = 1000
OUT = Path(__file__).resolve().parent / "data" / "customers.csv"
COLUMNS = [
    "customer_id",
    "name",
    "email",
    "phone",
    "country",
    "age",
    "income",
    "signup_date",
    "plan",
    "monthly_spend",
    "support_tickets",
    "ticket_text",
]

FIRST = [
    "Maria",
    "James",
    "Wei",
    "Aisha",
    "Lukas",
    "Sofia",
    "Carlos",
    "Emma",
    "Hiroshi",
    "Olga",
    "Noah",
    "Priya",
    "Mateo",
    "Chloe",
    "Ahmed",
    "Lena",
    "Diego",
    "Yuki",
    "Fatima",
    "Jonas",
    "Grace",
    "Omar",
    "Ines",
    "Ravi",
    "Nora",
    "Pierre",
    "Zoe",
    "Kwame",
    "Elif",
    "Tom",
]
LAST = [
    "Garcia",
    "Smith",
    "Chen",
    "Khan",
    "Muller",
    "Rossi",
    "Silva",
    "Brown",
    "Tanaka",
    "Ivanova",
    "Martin",
    "Patel",
    "Lopez",
    "Dubois",
    "Hassan",
    "Schmidt",
    "Santos",
    "Sato",
    "Ali",
    "Jensen",
    "Kim",
    "Nowak",
    "Costa",
    "Singh",
    "Berg",
    "Moreau",
    "Evans",
    "Mensah",
]
DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "proton.me", "acme.io", "example.org"]
COUNTRIES = ["US", "US", "US", "GB", "DE", "FR", "IN", "BR", "CA", "AU", "JP", "ES"]
PLANS = ["basic", "pro", "enterprise"]
PRICE = {"basic": 19.0, "pro": 49.0, "enterprise": 199.0}

CHURN_TEXT = [
    "I want to cancel my subscription, the service keeps going down.",
    "Please close my account. We are switching to a competitor next month.",
    "Too expensive for what we get. Requesting a refund and cancellation.",
    "Third outage this week. We are leaving unless this is fixed.",
    "How do I cancel? Nobody answered my last two tickets.",
    "The price increase is too much, we will not renew our plan.",
    "Thanks for trying, but we still want to cancel at the end of the month.",
    "Sync has been broken for days. Moving our team to another tool.",
]
STAY_TEXT = [
    "Thanks for the quick fix, everything works great now.",
    "Love the new dashboard! Could you add CSV export?",
    "How do I add a teammate to our workspace?",
    "We'd like to upgrade to the enterprise plan, who should I talk to?",
    "Great support as always, thank you.",
    "Question about invoices: can I get them monthly by email?",
    "Quick question: is there an API for exporting reports?",
    "Thank you, the onboarding session was really helpful.",
]
OPENERS = ["", "", "Hi, ", "Hello team, ", "Hey, ", "Good morning, "]
CLOSERS = ["", "", " Regards, {first}.", " Best, {first}.", " Sent from my phone."]


def _phone(rng: random.Random) -> str:
    a, b, c = rng.randint(200, 989), rng.randint(200, 999), rng.randint(1000, 9999)
    return rng.choice([f"+1 ({a}) {b}-{c}", f"{a}.{b}.{c}", f"+44 20 {b} {c}", f"+49 {a} {c}{b}"])


def _churns(rng: random.Random, plan: str, tickets: int, tenure_days: int, age: int) -> bool:
    z = (
        -1.3
        + {"basic": 1.1, "pro": 0.0, "enterprise": -0.9}[plan]
        + 0.45 * (tickets - 2)
        + (0.9 if tenure_days < 365 else 0.0)
        - 0.015 * (age - 40)
    )
    return rng.random() < 1 / (1 + math.exp(-z))


def _ticket(rng: random.Random, churn: bool, first: str, email: str, phone: str) -> str:
    # A few customers write against type, so labels are not a pure function of the numbers.
    pool = CHURN_TEXT if churn != (rng.random() < 0.08) else STAY_TEXT
    text = rng.choice(OPENERS) + rng.choice(pool) + rng.choice(CLOSERS).format(first=first)
    pii = rng.random()
    if pii < 0.06:
        text += f" You can reach me at {email}."
    elif pii < 0.12:
        text += f" Call me on {phone}."
    return text


def customer(rng: random.Random, i: int) -> dict[str, object]:
    """One clean customer row (dirt is added afterwards)."""
    first, last = rng.choice(FIRST), rng.choice(LAST)
    email = f"{first}.{last}{rng.randint(1, 99)}@{rng.choice(DOMAINS)}".lower()
    phone = _phone(rng)
    plan = rng.choices(PLANS, weights=[5, 4, 1])[0]
    age = max(18, min(85, int(rng.gauss(41, 12))))
    signup = date(2019, 1, 1) + timedelta(days=rng.randint(0, 6 * 365))
    tenure = (date(2025, 6, 30) - signup).days
    tickets = min(12, int(rng.expovariate(1 / 2.2)))
    churn = _churns(rng, plan, tickets, tenure, age)
    return {
        "customer_id": f"C{10000 + i}",
        "name": f"{first} {last}",
        "email": email,
        "phone": phone,
        "country": rng.choice(COUNTRIES),
        "age": age,
        "income": round(rng.lognormvariate(math.log(58000), 0.45), -2),
        "signup_date": signup.isoformat(),
        "plan": plan,
        "monthly_spend": round(PRICE[plan] * rng.uniform(0.9, 1.6), 2),
        "support_tickets": tickets,
        "ticket_text": _ticket(rng, churn, first, email, phone),
    }


def dirty(rng: random.Random, rows: list[dict[str, object]]) -> None:
    """Corrupt some rows in place, the way real exports are corrupted."""
    picks = rng.sample(range(len(rows)), 140)
    for j, k in enumerate(picks):
        r = rows[k]
        if j < 12:
            r["email"] = rng.choice(["{}(at)gmail.com", "{}@", "@{}.com", "{} at work"]).format(
                str(r["name"]).split()[0].lower()
            )
        elif j < 20:
            r["age"] = rng.choice([-4, 0, 3, 142, 199, 230, 7, 131])
        elif j < 30:
            r["income"] = rng.choice([9_999_999.0, 25_000_000.0, 12_500_000.0])
        elif j < 36:
            r["country"] = rng.choice(["U.S.A.", "Deutschland", "Narnia"])
        elif j < 41:
            r["signup_date"] = rng.choice(["31/02/2021", "last spring", "2021-13-45", "n/a"])
        elif j < 66:
            r[rng.choice(["country", "age", "income", "plan", "phone"])] = None
        elif j < 72:
            r["ticket_text"] = None
        elif j < 100:
            r["country"] = rng.choice([" us", "gb ", "De", " fr "])
        else:
            r["ticket_text"] = "  " + str(r["ticket_text"]).upper().replace(" ", "   ", 2) + "  "


def render(rng: random.Random) -> str:
    """The CSV text: clean rows, dirt, duplicates, near-duplicates and malformed lines."""
    rows = [customer(rng, i) for i in range(CUSTOMERS)]
    dirty(rng, rows)
    for k in rng.sample(range(CUSTOMERS), 20):  # exact duplicates (a double export)
        rows.insert(rng.randint(0, len(rows)), dict(rows[k]))
    for k in rng.sample(range(CUSTOMERS), 15):  # the same customer re-entered by hand
        again = dict(rows[k])
        again["ticket_text"] = str(again["ticket_text"] or "").lower().rstrip(".!?") + " !!"
        again["name"] = str(again["name"]).upper()
        rows.insert(rng.randint(0, len(rows)), again)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    lines = buf.getvalue().splitlines()
    broken = [
        "C19991,Truncated Row,truncated@example.org",
        "C19992,Extra Fields,extra@example.org,555-0100,US,33,51000,2022-05-01,pro,60.0,1,"
        "fine thanks,unexpected,columns",
        "C19993;Semicolon Export;semi@example.org;555-0101;DE;29;48000;2021-01-01;basic",
        "C19994,Short Row,short@example.org,555-0102,FR,41,62000,2020-02-02,pro,55.0,0",
        "C19995,Half Row,,,,",
        "garbage line from a pasted log",
    ]
    for line in broken:
        lines.insert(rng.randint(50, len(lines)), line)  # not near the header, where sniffing is
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write data/customers.csv."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(random.Random(SEED)), encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
