"""Focus metrics on the tutorial's own run: ' journey' ends on 'Your' with weight 0.99 (tutorial §5)."""
import math

import numpy as np
import pytest
import torch

from attnlab.core.focus import first_step_above, focus, row_entropy
from attnlab.core.training import train

from conftest import GOLDEN_SECTION5


@pytest.fixture(scope="module")
def tutorial_run():
    from conftest import compose_cfg

    result = train(compose_cfg())
    steps = [s.step for s in result.snapshots]
    weights = np.stack([s.weights for s in result.snapshots])  # (S, H=1, T, T), as attention.npz holds
    return steps, weights


def test_focus_of_journey_over_the_tutorial_run(tutorial_run):
    steps, weights = tutorial_run
    f = focus(weights, query=1)
    assert f.key.shape == f.weight.shape == (5, 1)
    assert f.key[:, 0].tolist() == [0, 0, 0, 0, 0]  # 'Your' is the strongest key at every snapshot
    assert [f"{w:.2f}" for w in f.weight[:, 0]] == [f"{GOLDEN_SECTION5[s][1][0]:.2f}" for s in steps]
    assert first_step_above(steps, f.weight[:, 0], 0.9) == 100
    assert first_step_above(steps, f.weight[:, 0], 0.5) == 20


def test_row_entropy_equals_torch_categorical(tutorial_run):
    _, weights = tutorial_run
    ent = row_entropy(weights)
    assert ent.shape == (5, 1, 6)
    expected = torch.distributions.Categorical(probs=torch.tensor(weights, dtype=torch.float64)).entropy().numpy()
    # Categorical renormalises each row; float32 rows sum to 1 within ~1e-7
    np.testing.assert_allclose(ent, expected, rtol=0, atol=1e-6)
    # ' journey' starts nearly uniform (ln 6 = 1.79 nats) and ends nearly certain
    assert 1.7 < ent[0, 0, 1] < math.log(6)
    assert ent[-1, 0, 1] < 0.1


def test_row_entropy_limits_and_masked_rows():
    T = 5
    np.testing.assert_allclose(row_entropy(np.full((2, T, T), 1 / T)), math.log(T), rtol=0, atol=1e-12)
    assert row_entropy(np.eye(T)).tolist() == [0.0] * T
    causal = np.tril(np.ones((T, T)))
    causal /= causal.sum(-1, keepdims=True)  # row i uniform over keys 0..i, exact zeros above
    np.testing.assert_allclose(row_entropy(causal), [math.log(i + 1) for i in range(T)], rtol=0, atol=1e-12)


def test_focus_per_head_and_ties():
    w = np.zeros((2, 3, 3))
    w[0, 2] = [0.2, 0.7, 0.1]
    w[1, 2] = [0.4, 0.2, 0.4]  # a tie: the first key
    f = focus(w, 2)
    assert f.key.tolist() == [1, 0]
    assert f.weight.tolist() == [0.7, 0.4]


def test_first_step_above_is_strict_and_may_find_none():
    assert first_step_above([0, 10, 20], [0.5, 0.9, 0.95]) == 20
    assert first_step_above([0, 10, 20], [0.5, 0.6, 0.7]) is None
    assert first_step_above([], []) is None


@pytest.mark.parametrize("call,message", [
    (lambda: focus(np.ones((2, 3, 4)), 0), r"must be \(\.\.\., T, T\), got shape \(2, 3, 4\)"),
    (lambda: focus(np.ones((1, 3, 3)), 3), r"query=3: must be a position in \[0, 3\)"),
    (lambda: row_entropy(np.ones(3)), r"must be \(\.\.\., T, T\)"),
    (lambda: first_step_above([0, 1], [0.5]), "same length"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
