"""Knowledge-graph embeddings (``rotate``, ``transe``): scoring, negatives and their losses.

Triples are integer index tensors ``(..., 3)`` of (head, relation, tail). Higher scores mean
more plausible triples; both models score with a negative distance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from aifab.models.zoo import RotatEConfig, TransEConfig


class RotatE(nn.Module):
    """RotatE (Sun et al., 2019): ``t ~ h o r`` with ``|r_i| = 1``, i.e. r rotates h.

    Entities are complex vectors stored as ``[real | imaginary]`` halves; relations are
    phase vectors. ``score = -sum_i |h_i r_i - t_i|``.

    Args:
        config: The validated config.
    """

    def __init__(self, config: RotatEConfig) -> None:
        super().__init__()
        self.num_entities = config.num_entities
        self.gamma = config.gamma
        self.adversarial_temperature = config.adversarial_temperature
        self.entities = nn.Embedding(config.num_entities, 2 * config.dim)
        self.relations = nn.Embedding(config.num_relations, config.dim)
        # The paper's initialisation: uniform in +-(gamma + 2) / dim, phases over the circle.
        bound = (config.gamma + 2.0) / config.dim
        nn.init.uniform_(self.entities.weight, -bound, bound)
        nn.init.uniform_(self.relations.weight, -math.pi, math.pi)

    def _distance(self, h: torch.Tensor, phase: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h_re, h_im = h.chunk(2, dim=-1)
        t_re, t_im = t.chunk(2, dim=-1)
        r_re, r_im = torch.cos(phase), torch.sin(phase)
        re = h_re * r_re - h_im * r_im - t_re
        im = h_re * r_im + h_im * r_re - t_im
        return torch.sqrt(re * re + im * im + 1e-12).sum(dim=-1)

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Score index tensors that broadcast together; returns their broadcast shape."""
        return -self._distance(self.entities(h), self.relations(r), self.entities(t))

    def forward(self, triples: torch.Tensor) -> torch.Tensor:
        """Score ``(..., 3)`` triples; returns shape ``(...)``."""
        return self.score(triples[..., 0], triples[..., 1], triples[..., 2])

    def score_all_tails(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Score ``(h, r, e)`` for every entity e: ``(batch,)`` indices -> ``(batch, E)``."""
        every = self.entities.weight[None]
        return -self._distance(self.entities(h)[:, None], self.relations(r)[:, None], every)

    def score_all_heads(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Score ``(e, r, t)`` for every entity e: ``(batch,)`` indices -> ``(batch, E)``."""
        every = self.entities.weight[None]
        return -self._distance(every, self.relations(r)[:, None], self.entities(t)[:, None])

    def loss(self, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        """Self-adversarial negative-sampling loss with this model's gamma and temperature."""
        return self_adversarial_loss(
            positive, negative, self.gamma, temperature=self.adversarial_temperature
        )


class TransE(nn.Module):
    """TransE (Bordes et al., 2013): ``t ~ h + r``; ``score = -||h + r - t||_p``.

    Entity vectors are L2-normalised when looked up (the paper's unit-norm constraint, applied
    functionally so no step hook is needed).

    Args:
        config: The validated config.
    """

    def __init__(self, config: TransEConfig) -> None:
        super().__init__()
        self.num_entities = config.num_entities
        self.p_norm = config.p_norm
        self.margin = config.margin
        self.entities = nn.Embedding(config.num_entities, config.dim)
        self.relations = nn.Embedding(config.num_relations, config.dim)
        bound = 6.0 / math.sqrt(config.dim)
        nn.init.uniform_(self.entities.weight, -bound, bound)
        nn.init.uniform_(self.relations.weight, -bound, bound)
        with torch.no_grad():
            self.relations.weight.copy_(F.normalize(self.relations.weight, dim=-1))

    def _entity(self, index: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.entities(index), dim=-1)

    def _score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return -torch.linalg.vector_norm(h + r - t, ord=self.p_norm, dim=-1)

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Score index tensors that broadcast together; returns their broadcast shape."""
        return self._score(self._entity(h), self.relations(r), self._entity(t))

    def forward(self, triples: torch.Tensor) -> torch.Tensor:
        """Score ``(..., 3)`` triples; returns shape ``(...)``."""
        return self.score(triples[..., 0], triples[..., 1], triples[..., 2])

    def score_all_tails(self, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Score ``(h, r, e)`` for every entity e: ``(batch,)`` indices -> ``(batch, E)``."""
        every = F.normalize(self.entities.weight, dim=-1)[None]
        return self._score(self._entity(h)[:, None], self.relations(r)[:, None], every)

    def score_all_heads(self, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Score ``(e, r, t)`` for every entity e: ``(batch,)`` indices -> ``(batch, E)``."""
        every = F.normalize(self.entities.weight, dim=-1)[None]
        return self._score(every, self.relations(r)[:, None], self._entity(t)[:, None])

    def loss(self, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        """Margin ranking loss with this model's margin."""
        return margin_ranking_loss(positive, negative, self.margin)


def corrupt_triples(
    triples: torch.Tensor,
    num_entities: int,
    num_negatives: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Negative samples: copies of each triple with its head or its tail replaced at random.

    Each row corrupts its head or its tail (half each), with uniformly random entities.

    Args:
        triples: ``(batch, 3)`` positive triples.
        num_entities: Entities to draw replacements from.
        num_negatives: Negatives per positive.
        generator: Optional RNG for reproducible sampling.

    Returns:
        ``(batch, num_negatives, 3)`` corrupted triples.
    """
    batch = triples.shape[0]
    shape = (batch, num_negatives)
    device = triples.device
    negatives = triples[:, None, :].repeat(1, num_negatives, 1)
    random = torch.randint(num_entities, shape, generator=generator, device=device)
    corrupt_head = torch.rand((batch, 1), generator=generator, device=device) < 0.5
    negatives[..., 0] = torch.where(corrupt_head, random, negatives[..., 0])
    negatives[..., 2] = torch.where(corrupt_head, negatives[..., 2], random)
    return negatives


def self_adversarial_loss(
    positive: torch.Tensor, negative: torch.Tensor, gamma: float, temperature: float = 1.0
) -> torch.Tensor:
    """RotatE's loss: ``-log s(gamma + pos) - sum_j p_j log s(-gamma - neg_j)``, averaged.

    Negatives are weighted by ``softmax(temperature * neg)`` (no gradient through the
    weights), so hard negatives count more; ``temperature=0`` weights them uniformly.

    Args:
        positive: ``(batch,)`` scores of true triples.
        negative: ``(batch, k)`` scores of their corruptions.
        gamma: The margin.
        temperature: The adversarial sampling temperature.

    Returns:
        A scalar loss.
    """
    weights = torch.softmax(temperature * negative.detach(), dim=-1)
    positive_loss = -F.logsigmoid(gamma + positive).mean()
    negative_loss = -(weights * F.logsigmoid(-gamma - negative)).sum(dim=-1).mean()
    return (positive_loss + negative_loss) / 2


def margin_ranking_loss(
    positive: torch.Tensor, negative: torch.Tensor, margin: float
) -> torch.Tensor:
    """``mean(relu(margin - pos + neg))``: ``(batch,)`` positives, ``(batch, k)`` negatives."""
    return F.relu(margin - positive[:, None] + negative).mean()


def build_rotate(config: RotatEConfig) -> RotatE:
    """Build a :class:`RotatE` model from its config."""
    return RotatE(config)


def build_transe(config: TransEConfig) -> TransE:
    """Build a :class:`TransE` model from its config."""
    return TransE(config)
