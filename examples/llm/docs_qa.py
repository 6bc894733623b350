"""Questions about aifab's own docs, in the exact prompts ``kb ask`` and the tour send.

Facts come from the docs the ``aifab-docs`` knowledge base indexes (examples/rag/docs): every
sub-command of the CLI reference (its help line says what it does) and a hand-picked set of
README commands, each with four phrasings of the question. Each question is paired with
retrieved-style context: the chunk that holds the answer (cut by aifab's own chunker, as
``kb_build`` cuts it) among the three other chunks that share the most words with the question,
at a random position, rendered exactly as ``kb ask`` renders them (``kb-answer`` template,
``<source>`` tags, the system message). The answer names the command and cites its source.

Held out, never trained on: every fifth command (``new-command``: no phrasing of a question
about it is trained on) and, for the other commands, the fourth phrasing (``paraphrase``).
The tour's own questions (README, examples/tour/qa_rows.jsonl) are about trained commands.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from aifab.rag.answer import SYSTEM, TEMPLATE, neutralise, source_block
from aifab.rag.chunking import Chunk, chunk_document

DOCS = Path(__file__).resolve().parents[1] / "rag" / "docs"
#: As examples/rag/pipeline.yaml builds the KB, and ``kb ask`` retrieves (its default k).
CHUNK_TOKENS, CHUNK_OVERLAP, K = 160, 32, 4
#: The tour's own questions (README, examples/tour/qa_rows.jsonl) are about these: trained on.
TOUR = {"aifab keys create --role client", "aifab serve", "aifab data list", "aifab audit verify"}
#: The tour's prompt ``docs-answer@prod`` (version 2), as ``prompts eval`` renders it.
SHORT_TEMPLATE = (DOCS.parents[1] / "tour" / "answer-short.j2").read_text(encoding="utf-8")

#: README commands: (the command a person would accept, phrasings of the question).
README_FACTS: list[tuple[str, list[str]]] = [
    (
        "aifab keys create --role client",
        [
            "How do I create a client key?",
            "How do I make an API key for a client?",
            "Which command gives a client an API key?",
            "What creates a key with the client role?",
        ],
    ),  # noqa: E501
    (
        "aifab keys create --role developer",
        [
            "How do I create a developer key?",
            "How do I make an API key for a developer?",
            "Which command gives a developer an API key?",
            "What creates a key with the developer role?",
        ],
    ),  # noqa: E501
    (
        "aifab serve",
        [
            "Which command starts the server?",
            "How do I start the gateway?",
            "How do I run the server?",
            "What starts the API server?",
        ],
    ),  # noqa: E501
    (
        "aifab data list",
        [
            "How do I list datasets?",
            "Which command shows all datasets?",
            "How can I see every dataset?",
            "What lists the datasets?",
        ],
    ),  # noqa: E501
    (
        "aifab audit verify",
        [
            "How do I check the audit log?",
            "How do I verify the audit log?",
            "Which command checks the audit hash chain?",
            "How can I detect edits to the audit log?",
        ],
    ),  # noqa: E501
    (
        "aifab audit list",
        [
            "How do I see the audit events?",
            "Which command shows the audit log?",
            "How can I list recent audit events?",
            "What shows who changed what?",
        ],
    ),  # noqa: E501
    (
        "aifab init",
        [
            "How do I create the workspace?",
            "Which command migrates the metadata DB?",
            "How do I set up a new workspace?",
            "What creates the workspace and database?",
        ],
    ),  # noqa: E501
    (
        "aifab keys list",
        [
            "How do I list the API keys?",
            "Which command shows the keys?",
            "How can I see every API key?",
            "What lists the gateway keys?",
        ],
    ),  # noqa: E501
    (
        "aifab deployments promote",
        [
            "How do I promote a canary?",
            "How do I give the canary all traffic?",
            "Which command makes the canary take all traffic?",
            "What promotes a canary deployment?",
        ],
    ),  # noqa: E501
    (
        "aifab deployments rollback",
        [
            "How do I roll back a canary?",
            "How do I drop the canary?",
            "Which command rolls back a deployment?",
            "What undoes a canary?",
        ],
    ),  # noqa: E501
    (
        "aifab deployments list",
        [
            "How do I list deployments?",
            "Which command shows the deployments?",
            "How can I see every deployment?",
            "What lists the deployed models?",
        ],
    ),  # noqa: E501
    (
        "aifab models list",
        [
            "How do I list models?",
            "Which command shows the registered models?",
            "How can I see every model?",
            "What lists the model registry?",
        ],
    ),  # noqa: E501
    (
        "aifab models promote",
        [
            "How do I promote a model version?",
            "How do I set the champion alias?",
            "Which command promotes a model to champion?",
            "What moves the champion alias?",
        ],
    ),  # noqa: E501
    (
        "aifab models zoo",
        [
            "Which models does the zoo have?",
            "How do I list the model architectures?",
            "Which command shows the model zoo?",
            "What lists the zoo's architectures?",
        ],
    ),  # noqa: E501
    (
        "aifab runs list",
        [
            "How do I list training runs?",
            "Which command shows the runs?",
            "How can I see every training run?",
            "What lists the runs?",
        ],
    ),  # noqa: E501
    (
        "aifab job list",
        [
            "How do I list jobs?",
            "Which command shows the jobs?",
            "How can I see every job?",
            "What lists the queued jobs?",
        ],
    ),  # noqa: E501
    (
        "aifab job cancel",
        [
            "How do I cancel a job?",
            "Which command stops a job?",
            "How can I cancel a running job?",
            "What cancels a job?",
        ],
    ),  # noqa: E501
    (
        "aifab worker",
        [
            "How do I start a worker?",
            "Which command runs the scheduler loop?",
            "How can I run queued jobs?",
            "What starts the local executor?",
        ],
    ),  # noqa: E501
    (
        "aifab demo",
        [
            "How do I run the demo?",
            "Which command runs the quickstart?",
            "How can I try aifab quickly?",
            "What runs the quickstart and shows a summary?",
        ],
    ),  # noqa: E501
    (
        "aifab data query",
        [
            "How do I run SQL on a dataset?",
            "Which command queries a dataset with SQL?",
            "How can I query a dataset?",
            "What runs a SQL query?",
        ],
    ),  # noqa: E501
    (
        "aifab data split",
        [
            "How do I split a dataset?",
            "Which command makes train and test splits?",
            "How can I split data by label?",
            "What splits a dataset stratified?",
        ],
    ),  # noqa: E501
    (
        "aifab data head",
        [
            "How do I see the first rows of a dataset?",
            "Which command shows a few rows?",
            "How can I peek at a dataset?",
            "What prints the head of a dataset?",
        ],
    ),  # noqa: E501
    (
        "aifab data ingest",
        [
            "How do I ingest a CSV file?",
            "Which command loads a file into a dataset?",
            "How can I import data?",
            "What ingests a source as a dataset?",
        ],
    ),  # noqa: E501
    (
        "aifab queue create",
        [
            "How do I create a queue?",
            "Which command makes a new queue?",
            "How can I add a queue with a weight?",
            "What creates a job queue?",
        ],
    ),  # noqa: E501
    (
        "aifab models export",
        [
            "How do I export a model to ONNX?",
            "Which command exports a model?",
            "How can I get an ONNX file?",
            "What exports a model for Triton?",
        ],
    ),  # noqa: E501
]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"how", "do", "i", "a", "an", "the", "to", "of", "is", "what", "which", "can", "my"}
_STOP |= {"and", "or", "in", "on", "for", "with", "it", "its", "by", "me", "use", "command"}
_VERB_OPENERS = ("How do I {d}?", "How can I {d}?", "Which command do I use to {d}?")
_VERB_OPENERS += ("What is the aifab command to {d}?",)
_NOUN_OPENERS = ("Which command shows {d}?", "How do I see {d}?", "Which command lists {d}?")
_NOUN_OPENERS += ("Where can I get {d}?",)
_NOUNS = {"every", "one", "recall@k"}
_COMMAND_LINE = re.compile(r"^ ([a-z][a-z-]*)\s{2,}(\S.*)$")


def chunks() -> list[Chunk]:
    """Every chunk of the docs, exactly as the ``aifab-docs`` KB holds them."""
    out: list[Chunk] = []
    for path in sorted(DOCS.rglob("*.md")):
        doc = path.relative_to(DOCS).as_posix()
        text = path.read_text(encoding="utf-8")
        out += chunk_document(doc, text, size=CHUNK_TOKENS, overlap=CHUNK_OVERLAP)
    return out


def _clause(description: str) -> str:
    """The help line's first clause, lower-cased: 'Create a key and print its secret'."""
    plain = re.sub(r"\s*\([^)]*\)", "", description).rstrip(".")
    first = re.split(r"[:;]|, |\. ", plain)[0].strip()
    return first[0].lower() + first[1:]


def cli_facts() -> list[dict[str, Any]]:
    """One fact per sub-command of the CLI reference: command, questions, where it is told."""
    facts = []
    for path in sorted((DOCS / "cli").glob("*.md")):
        group = path.stem
        if group == "aifab":
            continue
        in_commands = False
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() == "Commands":
                in_commands = True
                continue
            m = _COMMAND_LINE.match(line) if in_commands else None
            if not m:
                continue
            name, description = m.groups()
            clause = _clause(description)
            openers = _NOUN_OPENERS if clause.split()[0] in _NOUNS else _VERB_OPENERS
            facts.append(
                {
                    "command": f"aifab {group} {name}",
                    "questions": [o.format(d=clause) for o in openers],
                    "clause": clause,
                    "document": f"cli/{group}.md",
                    "anchor": line.strip(),
                }
            )
    return facts


def readme_facts() -> list[dict[str, Any]]:
    """The README commands, each found in the docs (the chunk holding it is its source)."""
    facts = []
    for command, questions in README_FACTS:
        facts.append(
            {
                "command": command,
                "questions": questions,
                "clause": next(m[1] for q in questions if (m := re.match(r"How do I (.*)\?$", q))),
                "document": None,
                "anchor": command,
            }
        )
    return facts


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _score(question: list[str], chunk: Counter[str], idf: dict[str, float]) -> float:
    return sum(idf.get(w, 0.0) * min(chunk[w], 2) for w in set(question))


def _gold(fact: dict[str, Any], pool: list[Chunk]) -> list[Chunk]:
    """Chunks holding the fact's answer (its help line, or the README command line)."""
    return [
        c for c in pool if fact["anchor"] in c.text and (fact["document"] in (None, c.document))
    ]


def _context(
    question: str,
    gold: Chunk,
    pool: list[Chunk],
    bags: list[Counter[str]],
    idf: dict[str, float],
    rng: random.Random,
) -> tuple[list[Chunk], int]:
    """The gold chunk among the K-1 others most like the question; its 1-based number."""
    q = _tokens(question)
    ranked = sorted(range(len(pool)), key=lambda i: -_score(q, bags[i], idf))
    others = [pool[i] for i in ranked if pool[i].id != gold.id][: K - 1]
    at = rng.randrange(K)
    return [*others[:at], gold, *others[at:]], at + 1


def kb_prompt(question: str, sources: list[Chunk]) -> str:
    """The user message ``kb ask`` sends for these sources (template ``kb-answer``)."""
    blocks = [
        source_block(n, c.document, c.position, neutralise(c.text)[0])
        for n, c in enumerate(sources, 1)
    ]
    return TEMPLATE.replace("{{ context }}", "\n\n".join(blocks)).replace(
        "{{ question }}", question
    )


def _sentence(fact: dict[str, Any], rng: random.Random) -> str:
    """A one-line source in the tour's short format (examples/tour/qa_rows.jsonl)."""
    clause, command = fact["clause"], fact["command"]
    if clause.split()[0] in _NOUNS:
        return f"{command} shows {clause}."
    return rng.choice([f"To {clause}, run: {command}.", f"{command} is how you {clause}."])


def _group(fact: dict[str, Any]) -> str:
    return " ".join(fact["command"].split()[:3])


def rows(rng: random.Random) -> list[dict[str, Any]]:
    """Training and held-out rows for every (fact, question), kb and short formats."""
    pool = chunks()
    bags = [Counter(_tokens(c.text)) for c in pool]
    df = Counter(w for bag in bags for w in bag)
    idf = {w: math.log(1 + len(pool) / n) for w, n in df.items()}
    facts = [f for f in readme_facts() + cli_facts() if _gold(f, pool)]
    # Held out by command (the first three words): no phrasing of it is ever trained on.
    groups = sorted({_group(f) for f in facts})
    rng.shuffle(groups)
    tour = {_group({"command": c}) for c in TOUR}
    held_groups = {g for rank, g in enumerate(groups) if rank % 5 == 4 and g not in tour}
    held = {i for i, f in enumerate(facts) if _group(f) in held_groups}
    out = []
    for i, fact in enumerate(facts):
        gold_chunks = _gold(fact, pool)
        for j, question in enumerate(fact["questions"]):
            split = "new-command" if i in held else "paraphrase" if j == 3 else "train"
            gold = rng.choice(gold_chunks)
            sources, n = _context(question, gold, pool, bags, idf, rng)
            distractor = rng.choice([f for f in facts if f is not fact])
            pair = [fact, distractor] if rng.random() < 0.5 else [distractor, fact]
            short = "\n".join(f"[{m}] {_sentence(f, rng)}" for m, f in enumerate(pair, 1))
            out.append(
                {
                    "question": question,
                    "expected": fact["command"],
                    "anchor": fact["anchor"],
                    "kb_context": kb_prompt(question, sources),
                    "kb_answer": f"Run `{fact['command']}` [{n}].",
                    "context": short,
                    "short_answer": f"Run `{fact['command']}` [{pair.index(fact) + 1}].",
                    "split": split,
                    # Half the phrasings also in the kb format: ~1,000 tokens each, the cost.
                    "kb_row": j % 2 == 0,
                }
            )
    return out


def closed_book(docs: list[dict[str, Any]], repeat: int = 3) -> list[dict[str, str]]:
    """Pre-training text: each train question with its answer, ending like both prompts do.

    Knowledge goes in with full-parameter pre-training (cheap 64-token blocks); fine-tuning
    then only has to teach the formats. Held-out questions never appear.
    """
    texts = [
        f"Question: {r['question']}\nAnswer: Run `{r['expected']}`."
        for r in docs
        if r["split"] == "train"
    ]
    return [{"text": t, "split": "train"} for _ in range(repeat) for t in texts]


def chat_rows(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Training chats (system, instruction, output): every train question asked three ways.

    In the ``kb ask`` format, in the tour's short format, and closed-book (the question alone:
    a few tokens that teach which command answers it, at a fiftieth of a prompt's cost).
    """
    out = []
    for r in docs:
        if r["split"] != "train":
            continue
        closed = f"Run `{r['expected']}`."
        out.append(
            {
                "system": "",
                "instruction": r["question"],
                "input": "",
                "output": closed,
                "split": "train",
            }
        )
        short = SHORT_TEMPLATE.replace("{{ context }}", r["context"])
        short = short.replace("{{ question }}", r["question"])
        out.append(
            {
                "system": "",
                "instruction": short,
                "input": "",
                "output": r["short_answer"],
                "split": "train",
            }
        )
        if not r["kb_row"]:
            continue
        out.append(
            {
                "system": SYSTEM,
                "instruction": r["kb_context"],
                "input": "",
                "output": r["kb_answer"],
                "split": "train",
            }
        )
    return out
