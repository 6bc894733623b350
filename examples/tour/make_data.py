"""Write the small inputs the README's tour ingests (already run: the files are committed).

    python examples/tour/make_data.py

Each file has the shape its README line demonstrates: a folder of notes, an image folder with
one sub-folder per label, pushed device events, a spreadsheet with a named sheet, a CSV with
semicolons and decimal commas, a header-less export with a comment preamble, a cp1252 file, a
JSON dump with its records under ``data.items``, and ``site/``: a stand-in for a paginated REST
API and a small web site (the tour serves it with ``python -m http.server``).
"""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
COUNTRIES = ["de", "fr", "gb", "es", "it"]


def _write(path: Path, text: str, encoding: str = "utf-8") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))


def notes() -> None:
    """A folder of text, markdown and HTML notes, and one more folder added to a KB later."""
    _write(
        HERE / "notes/onboarding.md",
        "# Onboarding\n\nNew customers get a welcome call in their first week.\n\n"
        "## Plans\n\nThe basic plan has email support; the pro plan adds phone support.\n",
    )
    _write(
        HERE / "notes/old.md",
        "# Old pricing\n\nBefore 2024 the pro plan cost 30 EUR a month.\n",
    )
    _write(
        HERE / "notes/churn.txt",
        "Customers who open many support tickets in a month are more likely to churn.\n"
        "A retention call within two days halves that risk.\n",
    )
    _write(
        HERE / "notes/faq.html",
        '<html><head><meta charset="utf-8"><title>FAQ</title></head><body>'
        "<h1>FAQ</h1><p>Refunds are paid within 14 days.</p>"
        "<p>Invoices are sent on the first day of the month.</p></body></html>\n",
    )
    _write(
        HERE / "more-notes/support.md",
        "# Support hours\n\nPhone support is open 8:00-18:00 CET on weekdays.\n",
    )


def images() -> None:
    """Tiny PNGs of circles and squares, one sub-folder per label."""
    from PIL import Image, ImageDraw

    rng = random.Random(7)
    for label in ("circle", "square"):
        for i in range(4):
            img = Image.new("RGB", (24, 24), (255, 255, 255))
            draw = ImageDraw.Draw(img)
            x, y, r = rng.randint(6, 10), rng.randint(6, 10), rng.randint(5, 7)
            color = tuple(rng.randint(0, 200) for _ in range(3))
            box = (x, y, x + 2 * r, y + 2 * r)
            (draw.ellipse if label == "circle" else draw.rectangle)(box, fill=color)
            path = HERE / "images" / label / f"{label}-{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            img.save(path)


def events() -> None:
    """Device events as they are pushed: one JSON object per line."""
    rng = random.Random(11)
    lines = [
        json.dumps(
            {
                "device": f"sensor-{i % 3}",
                "ts": f"2026-11-0{1 + i // 10}T0{i % 10}:00:00Z",
                "temperature": round(18 + rng.random() * 6, 2),
                "humidity": round(40 + rng.random() * 20, 1),
            }
        )
        for i in range(30)
    ]
    _write(HERE / "events.jsonl", "\n".join(lines) + "\n")


def _xlsx(path: Path, sheet: str, rows: list[list[object]]) -> None:
    """A minimal Office Open XML workbook with one named sheet (inline strings, no styles)."""

    def cell(ref: str, value: object) -> str:
        if isinstance(value, int | float):
            return f'<c r="{ref}"><v>{value}</v></c>'
        return f'<c r="{ref}" t="inlineStr"><is><t>{escape(str(value))}</t></is></c>'

    body = "".join(
        f'<row r="{r}">'
        + "".join(cell(f"{chr(65 + c)}{r}", v) for c, v in enumerate(row))
        + "</row>"
        for r, row in enumerate(rows, 1)
    )
    ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    files = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/>'
            "</Relationships>"
        ),
        "xl/workbook.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{ns}" xmlns:r="{rel}">'
            f'<sheets><sheet name="{sheet}" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ),
        "xl/_rels/workbook.xml.rels": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
            "</Relationships>"
        ),
        "xl/worksheets/sheet1.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{ns}">'
            f"<sheetData>{body}</sheetData></worksheet>"
        ),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            # A fixed date keeps the file byte-identical across runs.
            zf.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), text)


def tables() -> None:
    """The spreadsheet, the European CSV, the header-less export, cp1252 and the JSON dump."""
    rng = random.Random(3)
    months = [f"2024-{m:02d}" for m in range(1, 13)]
    sales = [["month", "country", "units", "revenue"]] + [
        [m, c, rng.randint(10, 90), round(rng.uniform(500, 5000), 2)]
        for m in months
        for c in COUNTRIES[:2]
    ]
    _xlsx(HERE / "sales.xlsx", "2024", sales)
    prices = ["product;price;valid_from"] + [
        f"P{i:03d};{rng.randint(1, 99)},{rng.randint(0, 99):02d};2024-0{1 + i % 9}-01"
        for i in range(20)
    ]
    _write(HERE / "prices.csv", "\n".join(prices) + "\n")
    export = ["# exported by billing v2.3", "# columns: invoice, customer, amount"] + [
        f"INV{i:04d},C{10000 + i},{rng.uniform(10, 500):.2f}" for i in range(25)
    ]
    _write(HERE / "export.csv", "\n".join(export) + "\n")
    legacy = ["name,city,amount"] + [
        f"{n},{c},{rng.randint(1, 900)} €"
        for n, c in [("Zoë", "Köln"), ("José", "Málaga"), ("Chloé", "Besançon"), ("Åsa", "Malmö")]
    ]
    _write(HERE / "legacy.csv", "\n".join(legacy) + "\n", encoding="cp1252")
    items = [{"id": i, "sku": f"S{i:03d}", "stock": rng.randint(0, 40)} for i in range(15)]
    dump = {"meta": {"exported": "2026-11-30"}, "data": {"items": items}}
    _write(HERE / "dump.json", json.dumps(dump, indent=1) + "\n")


def site() -> None:
    """A stand-in REST API (two pages linked by ``next``) and a three-page web site."""
    tickets = [
        {"id": i, "subject": f"Ticket {i}", "priority": ["low", "high"][i % 2]} for i in range(8)
    ]
    _write(
        HERE / "site/api/tickets.json",
        json.dumps({"items": tickets[:5], "next": "tickets-2.json"}) + "\n",
    )
    _write(HERE / "site/api/tickets-2.json", json.dumps({"items": tickets[5:], "next": None}))
    _write(HERE / "site/robots.txt", "User-agent: *\nAllow: /\n")
    pages = {
        "index.html": ("Home", "Welcome to the shop. See <a href='plans.html'>plans</a>."),
        "plans.html": ("Plans", "Basic and pro plans. <a href='help.html'>Help</a>."),
        "help.html": ("Help", "Write to support for refunds. <a href='index.html'>Home</a>."),
    }
    for name, (title, body) in pages.items():
        _write(
            HERE / "site" / name,
            f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{body}</p></body></html>\n",
        )


def prompts() -> None:
    """A second version of the docs-answer prompt, and rows to evaluate a prompt on."""
    _write(
        HERE / "answer-short.j2",
        "Answer in one sentence from the numbered sources, citing them as [n].\n\n"
        "{{ context }}\n\nQuestion: {{ question }}\nAnswer:",
    )
    rows = [
        (
            "[1] Client keys are created with: aifab keys create --role client.",
            "How do I create a client key?",
            "aifab keys create",
        ),
        (
            "[1] aifab serve starts the gateway on 127.0.0.1:8000.",
            "Which command starts the server?",
            "aifab serve",
        ),
        (
            "[1] aifab data list shows every dataset and its latest version.",
            "How do I list datasets?",
            "aifab data list",
        ),
        (
            "[1] aifab audit verify recomputes the hash chain of the audit log.",
            "How do I check the audit log?",
            "aifab audit verify",
        ),
    ]
    lines = [json.dumps({"context": c, "question": q, "expected": e}) for c, q, e in rows]
    _write(HERE / "qa_rows.jsonl", "\n".join(lines) + "\n")


def record() -> None:
    """One customer record for predict and ``aifab explain --records``; the same with ``top``."""
    rec = {
        "age": 41,
        "income": 52000,
        "monthly_spend": 48.5,
        "support_tickets": 3,
        "plan": "pro",
        "country": "fr",
        "signup_date": "2021-04-12",
        "ticket_text": "The app keeps logging me out, please help.",
        "customer_id": "C10042",
    }
    _write(HERE / "record.json", json.dumps({"records": [rec]}, indent=1) + "\n")
    _write(HERE / "explain.json", json.dumps({"records": [rec], "top": 4}, indent=1) + "\n")


if __name__ == "__main__":
    notes()
    images()
    events()
    tables()
    site()
    prompts()
    record()
