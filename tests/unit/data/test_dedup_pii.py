from __future__ import annotations

import random

import duckdb
import numpy as np
import pytest

from aifab.data import lake
from aifab.data.catalog import commit_query
from aifab.data.clean import clean
from aifab.data.dedup import (
    lsh_params,
    minhash,
    near_duplicates,
    permutations,
    shingle_hashes,
)
from aifab.data.pii import PII_KINDS, luhn_valid, redact_sql, redact_text, register_functions

FOX = "The quick brown fox jumps over the lazy dog near the river bank"


def jaccard(a: str, b: str, k: int = 5) -> float:
    sa = {a[i : i + k] for i in range(len(a) - k + 1)}
    sb = {b[i : i + k] for i in range(len(b) - k + 1)}
    return len(sa & sb) / len(sa | sb)


def test_near_duplicates_keep_first_and_distinct_texts() -> None:
    texts = [
        FOX,
        "Completely different: a recipe for lemon cake with sugar",
        FOX + "!",  # near-duplicate of 0
        "the QUICK  brown fox jumps over the lazy dog near the river bank",  # case/space only
        None,
        None,
        "Another unrelated sentence about distributed training",
        "Completely different: a recipe for lemon cake with sugar.",  # near-duplicate of 1
        "The quick brown cat sleeps under the old oak tree all day",  # shares words, not near
    ]
    assert near_duplicates(texts, 0.8) == [2, 3, 7]
    assert near_duplicates(texts, 0.8, unit="word", size=2) == [2, 3, 7]
    assert near_duplicates(["", "", "a", "a"]) == [1, 3]


def test_minhash_estimates_jaccard() -> None:
    rng = random.Random(0)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    base = " ".join(rng.choice(words) for _ in range(40))
    variants = [base] + [" ".join(base.split()[:n]) + " omega" * 3 for n in (35, 25, 15)]
    sig = minhash(*shingle_hashes(variants), permutations(256, seed=3))
    for i in range(1, len(variants)):
        estimate = float((sig[0] == sig[i]).mean())
        assert estimate == pytest.approx(jaccard(variants[0], variants[i]), abs=0.1)


def test_minhash_is_independent_of_batching() -> None:
    long = " ".join(str(i) for i in range(5000))  # spans several numpy chunks
    perms = permutations(64, seed=1)
    alone = minhash(*shingle_hashes([long]), perms)
    batched = minhash(*shingle_hashes(["x", long, "y"]), perms)
    assert np.array_equal(alone[0], batched[1])


def test_lsh_params_fit_the_permutations() -> None:
    for threshold in (0.5, 0.8, 0.95):
        bands, rows = lsh_params(threshold, 128)
        assert bands * rows <= 128
        # the S-curve's midpoint sits near the threshold
        assert (1 / bands) ** (1 / rows) == pytest.approx(threshold, abs=0.15)


def test_luhn() -> None:
    assert luhn_valid("4111 1111 1111 1111")
    assert luhn_valid("5500-0000-0000-0004")
    assert not luhn_valid("4111 1111 1111 1112")


CASES = [
    ("mail john.doe+x@mail.example.co.uk now", "mail <EMAIL> now"),
    ("call +1 (555) 123-4567 or 555.123.4567", "call <PHONE> or <PHONE>"),
    ("ring 5551234567 or +4915112345678", "ring <PHONE> or <PHONE>"),
    ("pay 4111 1111 1111 1111 / 4111-1111-1111-1111", "pay <CARD> / <CARD>"),
    ("not a card 4111 1111 1111 1112 ok", "not a card 4111 1111 1111 1112 ok"),
    ("ssn 123-45-6789.", "ssn <ID>."),
    ("on 2024-01-15 order #12345", "on 2024-01-15 order #12345"),
]


def test_redaction_in_python_and_sql_agree() -> None:
    con = duckdb.connect()
    register_functions(con)
    for text, expected in CASES:
        assert redact_text(text) == expected
        for kinds in (PII_KINDS, ("card",), ("email", "id")):
            for luhn in (True, False):
                got = con.execute(f"SELECT {redact_sql('$1', kinds, luhn)}", [text]).fetchall()
                assert got[0][0] == redact_text(text, kinds, luhn), (text, kinds, luhn)
    assert redact_text("4111 1111 1111 1112", ("card",), luhn=False) == "<CARD>"
    assert redact_text(None) is None


def test_clean_steps_redact_and_drop_near_duplicates() -> None:
    values = ", ".join(
        f"({i}, '{t}')"
        for i, t in enumerate(
            [
                "contact ann@example.com or 555-123-4567",
                "contact ann@example.com or 555-123-4567 ",
                "card 4111 1111 1111 1111, ssn 123-45-6789",
                "nothing to hide here at all",
            ]
        )
    )
    commit_query(
        "notes",
        f"SELECT * FROM (VALUES {values}) t(id, txt)",
        source="test",
        transform={"kind": "test"},
    )
    spec = {
        "steps": [
            {"drop_near_duplicates": {"column": "txt", "threshold": 0.9}},
            {"redact_pii": {"columns": ["txt"]}},
        ]
    }
    v = clean("notes", spec).version
    got = lake.connect().execute(f"SELECT * FROM {v.scan_sql()}").fetchall()
    assert got == [
        (0, "contact <EMAIL> or <PHONE>"),
        (2, "card <CARD>, ssn <ID>"),
        (3, "nothing to hide here at all"),
    ]
    assert v.transform["steps"][0]["dropped"] == 1
