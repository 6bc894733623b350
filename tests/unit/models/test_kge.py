"""RotatE and TransE: score shapes, all-entity scoring, negatives, losses, and learning."""

from __future__ import annotations

import pytest
import torch

from aifab.models.kge import corrupt_triples, margin_ranking_loss, self_adversarial_loss
from aifab.models.zoo import build_model

E, R = 12, 2


def make(name: str, **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, {"num_entities": E, "num_relations": R, "dim": 8, **extra})


@pytest.mark.parametrize("name", ["rotate", "transe"])
def test_score_shapes_broadcast(name: str):
    model = make(name)
    triples = torch.tensor([[0, 1, 2], [3, 0, 4], [5, 1, 6]])
    assert model(triples).shape == (3,)
    assert model(triples[None].repeat(4, 1, 1)).shape == (4, 3)
    h, r, t = triples.T
    assert model.score(h[:, None], r[:, None], torch.arange(E)[None]).shape == (3, E)
    assert model.score_all_tails(h, r).shape == (3, E)
    assert model.score_all_heads(r, t).shape == (3, E)
    assert (model(triples) <= 0).all()  # a negative distance


@pytest.mark.parametrize("name,extra", [("rotate", {}), ("transe", {"p_norm": 2})])
def test_all_entity_scoring_agrees_with_per_triple_scoring(name: str, extra: dict):
    model = make(name, **extra)
    h = torch.tensor([0, 5, 11])
    r = torch.tensor([1, 0, 1])
    t = torch.tensor([3, 3, 7])
    tails, heads = model.score_all_tails(h, r), model.score_all_heads(r, t)
    for i in range(3):
        for e in range(E):
            one_tail = model(torch.tensor([h[i], r[i], e]))
            one_head = model(torch.tensor([e, r[i], t[i]]))
            assert torch.allclose(tails[i, e], one_tail, atol=1e-5)
            assert torch.allclose(heads[i, e], one_head, atol=1e-5)


def test_rotate_is_the_complex_rotation_distance():
    model = make("rotate")
    h, r, t = 1, 0, 2
    ent, phase = model.entities.weight, model.relations.weight
    hc = torch.complex(*ent[h].chunk(2))
    tc = torch.complex(*ent[t].chunk(2))
    rc = torch.polar(torch.ones_like(phase[r]), phase[r])
    expected = -(hc * rc - tc).abs().sum()
    assert torch.allclose(model(torch.tensor([h, r, t])), expected, atol=1e-5)


def test_corrupt_triples_replaces_exactly_the_head_or_the_tail():
    triples = torch.tensor([[0, 1, 2], [3, 0, 4]])
    g = torch.Generator().manual_seed(1)
    neg = corrupt_triples(triples, E, 50, generator=g)
    assert neg.shape == (2, 50, 3)
    assert (neg[..., 1] == triples[:, None, 1]).all()
    for row in range(2):
        same_head = (neg[row, :, 0] == triples[row, 0]).all()
        same_tail = (neg[row, :, 2] == triples[row, 2]).all()
        assert same_head or same_tail
    assert neg.min() >= 0 and neg[..., [0, 2]].max() < E


def test_losses():
    pos = torch.tensor([-1.0, -2.0])
    neg = torch.tensor([[-8.0, -3.0], [-9.0, -9.0]])
    # With temperature 0 negatives weigh uniformly: compare with the closed form.
    logsig = torch.nn.functional.logsigmoid
    expected = (-logsig(6 + pos).mean() - (0.5 * logsig(-6 - neg)).sum(-1).mean()) / 2
    assert torch.allclose(self_adversarial_loss(pos, neg, 6.0, temperature=0.0), expected)
    # Adversarial weights favour the hardest (highest-scoring) negative: a larger loss.
    assert self_adversarial_loss(pos, neg, 6.0, 1.0) > self_adversarial_loss(pos, neg, 6.0, 0.0)
    assert margin_ranking_loss(pos, neg, 1.0).item() == pytest.approx((0 + 0 + 0 + 0) / 4)
    assert margin_ranking_loss(pos, neg, 5.0).item() == pytest.approx((0 + 3 + 0 + 0) / 4)


def toy_graph() -> torch.Tensor:
    # Three groups of four: relation 0 maps A_i -> B_i, relation 1 maps B_i -> C_i. One-to-one
    # and acyclic, so both a rotation (RotatE) and a translation (TransE) can fit it.
    return torch.tensor([(i, 0, i + 4) for i in range(4)] + [(i + 4, 1, i + 8) for i in range(4)])


@pytest.mark.parametrize("name", ["rotate", "transe"])
def test_true_triples_outscore_corruptions_after_training(name: str):
    model = make(name, dim=16)
    triples = toy_graph()
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(200):
        neg = corrupt_triples(triples, E, 8, generator=g)
        loss = model.loss(model(triples), model(neg))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        tails = model.score_all_tails(triples[:, 0], triples[:, 1])
        heads = model.score_all_heads(triples[:, 1], triples[:, 2])
    # Every true triple beats every corruption of its tail and of its head (rank 1).
    assert ((tails > tails.gather(1, triples[:, 2:3])).sum(dim=1) == 0).all()
    assert ((heads > heads.gather(1, triples[:, 0:1])).sum(dim=1) == 0).all()
    negatives = corrupt_triples(triples, E, 16, generator=g)
    is_true = (negatives[..., None, :] == triples).all(-1).any(-1)
    with torch.no_grad():
        margin = model(triples)[:, None] - model(negatives)
    assert (margin[~is_true] > 0).all()
