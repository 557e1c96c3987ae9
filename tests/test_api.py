import os

import numpy as np

from attnlab.api import compose, train


def test_api_returns_losses_and_snapshots_without_writing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = train(compose("train.steps=30", "train.snapshot_steps=[0,29]", "model.d_model=8"))
    assert result.status == "completed"
    assert result.losses.shape == (30,)
    assert result.losses.dtype == np.float64
    assert [s.step for s in result.snapshots] == [0, 29]
    assert result.snapshots[1].weights.shape == (1, 6, 6)
    assert result.snapshots[0].loss == result.losses[0]
    assert os.listdir(tmp_path) == []


def test_compose_applies_experiment_and_interpolation():
    cfg = compose("model.d_model=16")
    assert cfg.model.d_v == 16  # d_v follows d_model
    walk = compose("experiment=tutorial_walkthrough")
    assert walk.task == "walkthrough"
    assert walk.seed == 123
    assert walk.model.init_std == 0.02
    assert walk.model.d_v == 4
