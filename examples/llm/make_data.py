"""Generate the LLM example's data: a small English corpus and an instruction set.

Deterministic (seeded), so the committed files are exactly this script's output:

    python examples/llm/make_data.py

- ``data/corpus.jsonl``: short paragraphs (columns ``text``, ``split``) about a small village,
  written from varied sentence templates: who lives where, what animals say, the weather,
  counting and the days of the week. Regular enough that a tiny language model learns much of
  it in a minute on a CPU, varied enough that it has to.
- ``data/instructions.jsonl``: about 200 instruction/response pairs (columns ``instruction``,
  ``input``, ``output``, ``split``) over the same world: plurals, opposites, animal sounds,
  simple sums, the next day of the week, and facts about the village.
- ``data/pretrain.jsonl.gz`` and ``data/chats.jsonl.gz``: what the pipeline trains on: the
  above plus aifab's docs and questions about them (``docs_qa.py``), and
  ``data/docs_qa.jsonl``: those questions with their split (held-out ones never trained on).
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docs_qa

SEED = 11
PARAGRAPHS = 1000
OUT = Path(__file__).resolve().parent / "data"

PEOPLE = ["Anna", "Ben", "Clara", "David", "Ella", "Finn", "Grace", "Hugo", "Iris", "Jack"]
PLACES = ["the bakery", "the school", "the farm", "the library", "the river", "the market"]
ANIMALS = {"cow": "moo", "dog": "woof", "cat": "meow", "duck": "quack", "sheep": "baa"}
COLORS = ["red", "blue", "green", "yellow", "white", "brown"]
THINGS = ["apple", "book", "hat", "ball", "cup", "boat", "kite", "box"]
WEATHER = {
    "sunny": "The sky is clear and the sun is warm.",
    "rainy": "Rain falls on the roofs and the streets are wet.",
    "windy": "The wind moves the trees and the kites fly high.",
    "snowy": "Snow covers the fields and the children build a snowman.",
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "fast": "slow",
    "happy": "sad",
    "up": "down",
    "day": "night",
    "old": "young",
    "open": "closed",
}
PLURALS = {"cat": "cats", "box": "boxes", "child": "children", "sheep": "sheep", "mouse": "mice"}
PLURALS |= {"apple": "apples", "duck": "ducks", "bus": "buses", "foot": "feet", "book": "books"}


def _home(person: str) -> str:
    """Each person lives by one place, always: a fact the model can learn."""
    return PLACES[PEOPLE.index(person) % len(PLACES)]


def _pet(person: str) -> str:
    return list(ANIMALS)[PEOPLE.index(person) % len(ANIMALS)]


def _person(rng: random.Random) -> str:
    p = rng.choice(PEOPLE)
    pet = _pet(p)
    return f"{p} lives near {_home(p)}. {p} has a {pet}, and the {pet} says {ANIMALS[pet]}."


def _morning(rng: random.Random) -> str:
    p, day, thing = rng.choice(PEOPLE), rng.choice(DAYS), rng.choice(THINGS)
    color = rng.choice(COLORS)
    return (
        f"On {day} morning {p} walks to {rng.choice(PLACES)}. "
        f"{p} carries a {color} {thing}. After {day} comes {DAYS[(DAYS.index(day) + 1) % 7]}."
    )


def _weather(rng: random.Random) -> str:
    kind = rng.choice(list(WEATHER))
    who, where = rng.choice(PEOPLE), rng.choice(PLACES)
    return f"Today the weather is {kind}. {WEATHER[kind]} {who} stays near {where}."


def _counting(rng: random.Random) -> str:
    a, b = rng.randint(0, 5), rng.randint(0, 5)
    thing = rng.choice(THINGS)
    return (
        f"{rng.choice(PEOPLE)} has {NUMBERS[a]} {thing}s and finds {NUMBERS[b]} more. "
        f"Now there are {NUMBERS[a + b]} {thing}s. {a} plus {b} is {a + b}."
    )


def _animals(rng: random.Random) -> str:
    names = rng.sample(list(ANIMALS), 3)
    said = " ".join(f"The {a} says {ANIMALS[a]}." for a in names)
    return f"At the farm there is a {names[0]}, a {names[1]} and a {names[2]}. {said}"


def _opposites(rng: random.Random) -> str:
    word = rng.choice(list(OPPOSITES))
    return f"The opposite of {word} is {OPPOSITES[word]}. {rng.choice(PEOPLE)} knows many words."


TEMPLATES: list[Callable[[random.Random], str]] = [
    _person,
    _morning,
    _weather,
    _counting,
    _animals,
    _opposites,
]


def corpus(rng: random.Random) -> list[dict[str, str]]:
    """Paragraphs of two or three template sentences, split 90/5/5."""
    rows = []
    for i in range(PARAGRAPHS):
        text = " ".join(rng.choice(TEMPLATES)(rng) for _ in range(rng.randint(2, 3)))
        split = "valid" if i % 20 == 18 else "test" if i % 20 == 19 else "train"
        rows.append({"text": text, "split": split})
    return rows


def instructions(rng: random.Random) -> list[dict[str, str]]:
    """About 200 instruction/response pairs over the corpus's world."""
    rows: list[tuple[str, str, str]] = []
    rows += [("Give the plural of the word.", w, p) for w, p in PLURALS.items()]
    rows += [("What is the opposite of this word?", w, o) for w, o in OPPOSITES.items()]
    rows += [("What does this animal say?", a, f"The {a} says {s}.") for a, s in ANIMALS.items()]
    rows += [("Which day comes after this one?", d, DAYS[(i + 1) % 7]) for i, d in enumerate(DAYS)]
    rows += [("Where does this person live?", p, f"{p} lives near {_home(p)}.") for p in PEOPLE]
    rows += [("Which pet does this person have?", p, f"{p} has a {_pet(p)}.") for p in PEOPLE]
    for a in range(6):
        for b in range(6):
            rows.append(("Add the two numbers.", f"{a} and {b}", f"{a} plus {b} is {a + b}."))
            rows.append((f"How much is {NUMBERS[a]} plus {NUMBERS[b]}?", "", NUMBERS[a + b]))
    rows += [("Which day comes before this one?", d, DAYS[i - 1]) for i, d in enumerate(DAYS)]
    rows += [("Write the number in words.", str(i), w) for i, w in enumerate(NUMBERS)]
    rows += [("Write the number as a digit.", w, str(i)) for i, w in enumerate(NUMBERS)]
    pairs = [(c, t) for c in COLORS for t in THINGS]
    for color, thing in rng.sample(pairs, 25):
        rows.append(("What color is the thing?", f"a {color} {thing}", color))
    for kind, text in WEATHER.items():
        rows.append(("Describe the weather.", kind, text))
    for thing in THINGS:
        color = rng.choice(COLORS)
        rows.append(
            (
                "Write a short sentence about the thing.",
                f"a {color} {thing}",
                f"I see a {color} {thing}.",
            )
        )
    rng.shuffle(rows)
    return [
        {"instruction": i, "input": x, "output": y, "split": "valid" if n % 10 == 9 else "train"}
        for n, (i, x, y) in enumerate(rows)
    ]


def village_questions() -> list[dict[str, str]]:
    """Plain questions about the village (``chat.py "What does the cow say?"``), for the chats.

    The docs questions are plain questions too; without these the model answers every
    question with a command.
    """
    rows = [(f"What does the {a} say?", f"The {a} says {s}.") for a, s in ANIMALS.items()]
    rows += [(f"Where does {p} live?", f"{p} lives near {_home(p)}.") for p in PEOPLE]
    rows += [(f"Which pet does {p} have?", f"{p} has a {_pet(p)}.") for p in PEOPLE]
    return [{"instruction": q, "input": "", "output": a, "split": "train"} for q, a in rows]


def docs_corpus() -> list[dict[str, str]]:
    """The docs' chunks as pre-training text: the tokenizer and the model learn their words."""
    return [{"text": c.text, "split": "train"} for c in docs_qa.chunks()]


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same rows give the same bytes, so the committed file is checkable.
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def main() -> None:
    """Write the files under ``data/``."""
    rng = random.Random(SEED)
    village = corpus(rng)
    instructions_rows = instructions(rng)
    _write(OUT / "corpus.jsonl", _jsonl(village))
    _write(OUT / "instructions.jsonl", _jsonl(instructions_rows))
    docs = docs_qa.rows(random.Random(SEED))
    pretrain = village + docs_corpus() + docs_qa.closed_book(docs)
    _write(OUT / "pretrain.jsonl.gz", _jsonl(pretrain))
    village_chats = [{"system": "", **r} for r in instructions_rows + village_questions()]
    _write(OUT / "chats.jsonl.gz", _jsonl(village_chats + docs_qa.chat_rows(docs)))
    keep = ("question", "expected", "context", "anchor", "split")
    _write(OUT / "docs_qa.jsonl", _jsonl([{k: r[k] for k in keep} for r in docs]))


if __name__ == "__main__":
    main()
