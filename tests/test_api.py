import os

import numpy as np

from attnlab.commands.api import compose, train


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


def test_threads_training_at_once_each_get_their_runs_numbers():
    """torch's random generator is the process's: runs in threads take turns (training.RUN_LOCK),
    so each result equals its config run alone, dropout (drawn while training) included."""
    import threading

    configs = [compose("train.steps=40", f"seed={seed}", "model.dropout=0.1", "train.snapshot_steps=[0,39]")
               for seed in (5, 6, 7)]
    alone = [train(cfg).losses for cfg in configs]
    together: list[tuple[int, np.ndarray]] = []
    threads = [threading.Thread(target=lambda k=k, cfg=cfg: together.append((k, train(cfg).losses)))
               for k, cfg in enumerate(configs) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k for k, _ in together) == [0, 0, 1, 1, 2, 2]
    for k, losses in together:
        assert np.array_equal(losses, alone[k]), k
    assert not np.array_equal(alone[0], alone[1])


def test_compose_speaks_as_the_command_and_train_keeps_the_callers_threads():
    import pytest
    import torch

    from attnlab.core.errors import AttnlabError

    for overrides, line in [(("model.d_mdl=3",), "model.d_mdl=3: no such config key (`attnlab --help` lists every key); "
                                              "did you mean model.d_model?"),
                            (("optimizer=rmsprop",), "optimizer=rmsprop: no such option; allowed: adam, adamw, sgd"),
                            (("+train.stepz=1",), "+train.stepz=1: no such config key; attnlab's keys are fixed by its "
                                                  "schema and cannot be added or removed (`attnlab --help` lists them); "
                                                  "did you mean train.steps?"),
                            (("sentence=caf\udce9",), "'sentence=caf\\xe9': not UTF-8 text (the terminal's encoding is "
                                                      "another); set a UTF-8 locale (e.g. LANG=C.UTF-8) or put the "
                                                      "text in a UTF-8 file: text_file=FILE")]:
        with pytest.raises(AttnlabError) as err:
            compose(*overrides)
        assert str(err.value) == line
    caller = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert train(compose("train.steps=2", "threads=1")).status == "completed"
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(caller)
