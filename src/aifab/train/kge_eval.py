"""Filtered link-prediction metrics for knowledge-graph embeddings: MRR and Hits@k.

Every test triple is ranked twice, once predicting its tail from (head, relation) and once its
head from (relation, tail), among all entities; other triples known to be true (in train, valid
or test) are filtered out of the ranking, as in Bordes et al. (2013) and every KGE paper since.
Ties count half (the "realistic" rank), so a model that scores everything equal gets no credit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import torch

#: ``score(heads, relations, tails)`` with broadcasting: higher is more plausible.
ScoreFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

HITS_AT = (1, 3, 10)


def known_answers(
    triples: torch.Tensor,
) -> tuple[dict[tuple[int, int], list[int]], dict[tuple[int, int], list[int]]]:
    """Index true triples (an ``[N, 3]`` id tensor) as (h, r) -> tails and (r, t) -> heads."""
    tails: dict[tuple[int, int], list[int]] = defaultdict(list)
    heads: dict[tuple[int, int], list[int]] = defaultdict(list)
    for h, r, t in triples.tolist():
        tails[(h, r)].append(t)
        heads[(r, t)].append(h)
    return tails, heads


def _filter_mask(
    keys: Sequence[tuple[int, int]],
    answers: dict[tuple[int, int], list[int]],
    num_entities: int,
    device: torch.device,
) -> torch.Tensor:
    """A ``[B, E]`` mask of the entities known true for each query."""
    rows: list[int] = []
    cols: list[int] = []
    for i, key in enumerate(keys):
        found = answers.get(key, ())
        rows.extend([i] * len(found))
        cols.extend(found)
    mask = torch.zeros(len(keys), num_entities, dtype=torch.bool)
    mask[torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)] = True
    return mask.to(device)


def _realistic_ranks(
    scores: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """1-based ranks of ``target`` in each row of ``scores``, other known answers removed."""
    true_score = scores.gather(1, target[:, None])
    mask = mask.clone()
    mask[torch.arange(len(target), device=target.device), target] = True
    scores = scores.masked_fill(mask, float("-inf"))
    better = (scores > true_score).sum(dim=1)
    # The target itself is masked, so ties among the rest are exactly the other equal scores.
    ties = (scores == true_score).sum(dim=1)
    return better.double() + 1.0 + ties.double() / 2.0


@torch.no_grad()
def link_prediction_ranks(
    score: ScoreFn,
    test: torch.Tensor,
    all_true: torch.Tensor,
    num_entities: int,
    batch_size: int = 256,
) -> torch.Tensor:
    """Filtered ranks of the tail and the head of each test triple (``[2 * N]``, tails first).

    Args:
        score: the model's scoring function over (head, relation, tail) id tensors.
        test: ``[N, 3]`` (head, relation, tail) ids to rank.
        all_true: ``[M, 3]`` every known true triple (train + valid + test), for filtering.
        num_entities: how many entities to rank against.
        batch_size: test triples scored at once.
    """
    tails_of, heads_of = known_answers(all_true)
    entities = torch.arange(num_entities, device=test.device)[None, :]
    tail_ranks, head_ranks = [], []
    for batch in test.split(batch_size):
        h, r, t = batch[:, 0:1], batch[:, 1:2], batch[:, 2:3]
        tail_scores = score(h, r, entities).float()
        mask = _filter_mask(
            [(a, b) for a, b in batch[:, :2].tolist()], tails_of, num_entities, test.device
        )
        tail_ranks.append(_realistic_ranks(tail_scores, batch[:, 2], mask))
        head_scores = score(entities, r, t).float()
        mask = _filter_mask(
            [(b, c) for b, c in batch[:, 1:].tolist()], heads_of, num_entities, test.device
        )
        head_ranks.append(_realistic_ranks(head_scores, batch[:, 0], mask))
    return torch.cat([*tail_ranks, *head_ranks]).cpu()


def rank_metrics(ranks: torch.Tensor, prefix: str = "") -> dict[str, float]:
    """MRR and Hits@1/3/10 of filtered ranks, keys like ``test_mrr``, ``test_hits_at_10``."""
    metrics = {f"{prefix}mrr": float((1.0 / ranks).mean())}
    for k in HITS_AT:
        metrics[f"{prefix}hits_at_{k}"] = float((ranks <= k).double().mean())
    return metrics


def evaluate_link_prediction(
    score: ScoreFn,
    test: torch.Tensor,
    all_true: torch.Tensor,
    num_entities: int,
    prefix: str = "",
) -> dict[str, float]:
    """Filtered MRR and Hits@1/3/10 over head and tail prediction of ``test``."""
    return rank_metrics(link_prediction_ranks(score, test, all_true, num_entities), prefix)
