"""Score the ``llm`` deployment on the held-out docs questions, the way the tour asks them.

    aifab run examples/rag/pipeline.yaml && aifab run examples/llm/pipeline.yaml
    python examples/llm/eval_docs.py [--chat llm] [--kb aifab-docs]

Two formats, each over the two held-out kinds of data/docs_qa.jsonl (``new-command``:
a command no training question was about; ``paraphrase``: a trained command asked a new way):

- ``kb ask``: the real retrieval over the ``aifab-docs`` KB, the ``kb-answer`` prompt, the
  deployment's answer (``aifab kb ask aifab-docs QUESTION --chat llm``);
- ``short``: the tour's ``docs-answer@prod`` prompt over two one-line sources (what
  ``aifab prompts eval ... --scorer contains`` scores).

An answer counts when it contains the expected command. Printed beside each rate: how often
retrieval found a chunk with the command at all (the ceiling for ``kb ask``), and the baseline
of always answering the most common command.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHORT = (HERE.parent / "tour" / "answer-short.j2").read_text(encoding="utf-8")


def main() -> None:
    """Print contains-rates per format and held-out kind."""
    from aifab.prompts import chat_model
    from aifab.rag import ask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chat", default="llm")
    parser.add_argument("--kb", default="aifab-docs")
    parser.add_argument("--limit", type=int, default=0, help="rows per kind (0: all)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (HERE / "data" / "docs_qa.jsonl").open()]
    model = chat_model(args.chat)
    trained = Counter(r["expected"] for r in rows if r["split"] == "train")
    common = trained.most_common(1)[0][0]
    print(
        f"{'held out':<12} {'rows':>4} {'kb ask':>7} {'retrieved':>9} {'short':>6} {'baseline':>8}"
    )
    for kind in ("new-command", "paraphrase"):
        group = [r for r in rows if r["split"] == kind][: args.limit or None]
        kb_ok = found = short_ok = 0
        for r in group:
            answer = ask(args.kb, r["question"], chat=args.chat, max_tokens=48)
            kb_ok += r["expected"] in answer["answer"]
            found += any(r["anchor"] in c["text"] for c in answer["citations"])
            prompt = SHORT.replace("{{ context }}", r["context"])
            prompt = prompt.replace("{{ question }}", r["question"])
            reply = model.complete([{"role": "user", "content": prompt}], max_tokens=48)
            short_ok += r["expected"] in reply.text
            if kind == "new-command" and group.index(r) < 3:
                print(f"  {r['question']!r} -> {answer['answer']!r}")
        n = len(group)
        base = sum(r["expected"] == common for r in group) / n
        print(
            f"{kind:<12} {n:>4} {kb_ok / n:>7.2f} {found / n:>9.2f} {short_ok / n:>6.2f}"
            f" {base:>8.2f}"
        )


if __name__ == "__main__":
    main()
