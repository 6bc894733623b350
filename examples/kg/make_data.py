"""Export PyKEEN's bundled Nations graph to ``data/nations.csv`` (head, relation, tail, split).

Nations ships inside the pykeen package (no download): 14 countries, 55 relations, 1,992
triples in PyKEEN's fixed train/valid/test split. Deterministic, so the committed CSV is exactly
this script's output:

    python examples/kg/make_data.py            # or: --dataset kinships|umls --out FILE
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "nations.csv"
SPLITS = {"training": "train", "validation": "valid", "testing": "test"}


def triples(dataset: str = "nations") -> list[tuple[str, str, str, str]]:
    """The dataset's labeled triples with their split, in PyKEEN's order.

    Args:
        dataset: a PyKEEN dataset bundled with the package: ``nations``, ``kinships`` or ``umls``.
    """
    from pykeen.datasets import get_dataset

    ds = get_dataset(dataset=dataset)
    rows: list[tuple[str, str, str, str]] = []
    for attr, split in SPLITS.items():
        factory = getattr(ds, attr)
        ent, rel = factory.entity_id_to_label, factory.relation_id_to_label
        for h, r, t in factory.mapped_triples.tolist():
            rows.append((ent[h], rel[r], ent[t], split))
    return rows


def write_csv(path: Path, rows: list[tuple[str, str, str, str]]) -> None:
    """Write ``head,relation,tail,split`` rows to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["head", "relation", "tail", "split"])
        writer.writerows(rows)


def main() -> None:
    """Parse ``--dataset``/``--out`` and write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="nations", choices=["nations", "kinships", "umls"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or OUT.with_name(f"{args.dataset}.csv")
    write_csv(out, triples(args.dataset))


if __name__ == "__main__":
    main()
