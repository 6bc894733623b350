"""Shapley arithmetic, pure: known games, efficiency, and the sampled estimate above 10 features."""

from __future__ import annotations

import numpy as np
import pytest

from aifab.ops.explain.shapley import EXACT_MAX, coalitions, masked_inputs, owners


def test_exact_values_of_a_known_game() -> None:
    # v(S) = 3*[a in S] + 2*[b in S] + 4*[a and c in S]: a gets 3 + 2, c gets 2, b gets 2.
    masks, w = coalitions(3)
    v = 3.0 * masks[:, 0] + 2.0 * masks[:, 1] + 4.0 * (masks[:, 0] & masks[:, 2])
    np.testing.assert_allclose(w @ v, [5.0, 2.0, 2.0])


@pytest.mark.parametrize("m", [1, 4, 7])
def test_exact_values_are_efficient_and_symmetric(m: int) -> None:
    masks, w = coalitions(m)
    rng = np.random.default_rng(m)
    v = rng.normal(size=len(masks))
    v[0] = 0.0
    phi = w @ v
    assert phi.sum() == pytest.approx(v[-1] - v[0])  # all kept minus none kept
    sym = masks.sum(axis=1).astype(float) ** 2  # depends on coalition size only
    np.testing.assert_allclose(w @ sym, np.full(m, (sym[-1] - sym[0]) / m))


def test_sampled_values_are_efficient_and_close_on_an_additive_game() -> None:
    m = EXACT_MAX + 2
    masks, w = coalitions(m, np.random.default_rng(0))
    weights = np.arange(1, m + 1, dtype=float)
    phi = w @ (masks @ weights)
    np.testing.assert_allclose(phi, weights)  # additive: every permutation gives the weight
    assert phi.sum() == pytest.approx(weights.sum())


def test_owners_and_masking() -> None:
    x_rec = np.array([1.0, 2.0, 3.0, 9.0])
    x_bg = np.array([0.0, 0.0, 0.0, 9.0])
    # Feature 0 owns column 0; feature 1 owns columns 1 and 2 (e.g. a one-hot); col 3 is shared.
    swapped = np.array([[0.0, 2.0, 3.0, 9.0], [1.0, 0.0, 0.0, 9.0]])
    owner = owners(x_rec, swapped)
    np.testing.assert_array_equal(owner, [0, 1, 1, -1])
    masks = np.array([[False, False], [True, False], [False, True], [True, True]])
    np.testing.assert_array_equal(
        masked_inputs(x_rec, x_bg, owner, masks),
        [[0, 0, 0, 9], [1, 0, 0, 9], [0, 2, 3, 9], [1, 2, 3, 9]],
    )
