"""``threads``: auto picks torch's intra-op threads from the problem size, the count used is
recorded in summary.json, and where auto changes the count the losses do not change."""
from __future__ import annotations

import json

import pytest
import torch

from attnlab.commands.job import run_job
from attnlab.core import threads
from attnlab.core.training import train

from conftest import compose_cfg

QUIET = ("logging=off", "logging.console=false")
# (T, d_model) below threads.MIN_WORK_FOR_MORE, d_k = d_v = d_model
BELOW_THRESHOLD = [(16, 16), (32, 32), (48, 48)]


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_work_per_step_counts_the_forward_and_backward_multiply_adds():
    # tutorial §5: T=6, d_model=6, d_k=4, d_v=6: Q, K, V = 6*6*(4+4+6), scores 36*4, Z 36*6; x3 for backward
    assert threads.work_per_step(6, 6, 4, 6) == 3 * (6 * 6 * 14 + 36 * 4 + 36 * 6)
    assert threads.work_per_step(1024, 768) == 3 * (1024 * 768 * 3 * 768 + 1024 * 1024 * 2 * 768)
    assert threads.work_per_step(8, 8, n_heads=2) == 2 * threads.work_per_step(8, 8)


def test_auto_is_one_thread_for_small_problems_and_torchs_count_for_large(monkeypatch):
    monkeypatch.setattr(threads, "_default", 4)  # as on a 4-core machine
    assert threads.auto_threads(6, 6, 4, 6) == 1  # the tutorial
    for seq_len, d_model in BELOW_THRESHOLD:
        assert threads.auto_threads(seq_len, d_model) == 1
    assert threads.work_per_step(1024, 768) >= threads.MIN_WORK_FOR_MORE
    assert threads.auto_threads(1024, 768) == 4
    monkeypatch.setattr(threads, "_default", 1)  # OMP_NUM_THREADS=1: never more
    assert threads.auto_threads(1024, 768) == 1


def test_the_whole_step_counts_the_head_the_mlp_the_layers_and_the_batch():
    # a GPT block: attention (with W_out) and the MLP; 2 blocks; the 50,257-way head; a batch of 8
    attention = 2 * (16 * 32 * 24 + 16 * 16 * 16) + 16 * 2 * 8 * 32
    mlp = 2 * 16 * 32 * 128
    assert threads.work_per_step(16, 32, 8, 8, 2, out_proj=True, n_layers=2, vocab_size=50257, batch_size=8) == (
        3 * 8 * (2 * (attention + mlp) + 16 * 32 * 50257))
    # the tutorial with §5's next-token head: the head is most of the step
    assert threads.work_per_step(6, 6, 4, 6, vocab_size=50257) == threads.work_per_step(6, 6, 4, 6) + 3 * 6 * 6 * 50257


@pytest.mark.parametrize("overrides, expected", [
    ((), 1),  # the tutorial's §5: attention on 6 tokens, one thread
    (("experiment=tutorial_walkthrough",), 1),
    (("train.objective=next_token",), 4),  # its 50,257-way head: torch's count
    (("experiment=gpt",), 4),
    (("experiment=gpt", "model.n_layers=6", "model.d_model=384", "model.n_heads=6", "model.d_k=64", "model.d_v=64",
      "train.batch_size=32", "model.context=128", "tokenizer.max_tokens=100000"), 4),
], ids=["tutorial", "walkthrough", "tutorial-next-token", "gpt", "gpt-6x384"])
def test_auto_gives_a_model_with_a_vocabulary_head_the_cores_it_has(overrides, expected, monkeypatch,
                                                                     restore_threads):
    """The count build_model sets (torch's count 4, as on a 4-core machine) for a tutorial config and a GPT's."""
    from attnlab.core.tokenizer import tokenize
    from attnlab.core.training import build_model

    monkeypatch.setattr(threads, "_default", 4)
    cfg = compose_cfg(*overrides)
    build_model(cfg, tokenize(cfg), order="walkthrough" if cfg.task == "walkthrough" else "training")
    assert torch.get_num_threads() == expected


@pytest.mark.parametrize("value, shown", [("0", "0"), ("-2", "-2"), ("1.5", "1.5"), ("true", "True"),
                                          ("many", "'many'")])
def test_bad_threads_value_is_one_line(tmp_path, value, shown):
    result = run_job(compose_cfg(f"threads={value}", *QUIET), tmp_path)
    assert result.status == "failed"
    assert result.bad_input
    assert result.error == f"threads={shown}: must be auto or a positive integer"


def test_summary_records_the_threads_used(tmp_path, restore_threads):
    for value, expected in (("2", 2), ("auto", 1)):  # auto at the tutorial's size: one thread
        run = tmp_path / value
        assert run_job(compose_cfg(f"threads={value}", "train.steps=3", "train.snapshot_steps=[0]", *QUIET),
                       run).status == "completed"
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        assert summary["versions"]["torch_threads"] == expected == torch.get_num_threads()


def test_for_reproduction_reads_the_recorded_count_only():
    assert threads.for_reproduction({"torch": "2.13.0", "torch_threads": 2}) == 2
    for bad in (None, {}, {"torch_threads": 0}, {"torch_threads": "2"}, {"torch_threads": True},
                {"torch_threads": 1.0}, ["torch_threads"]):
        assert threads.for_reproduction(bad) is None


@pytest.mark.parametrize("size", [None, *BELOW_THRESHOLD], ids=["tutorial", *(f"{t}x{d}" for t, d in BELOW_THRESHOLD)])
def test_losses_are_bitwise_identical_across_thread_counts_where_auto_picks_one(size, restore_threads):
    """Where auto uses one thread instead of torch's default (every size below the threshold on a
    machine with more than one core), it changes no bit of a run: a run recorded with another
    thread count reproduces exactly."""
    overrides = ["train.steps=12", "train.snapshot_steps=[0,11]"]
    if size is not None:
        seq_len, d_model = size
        assert threads.work_per_step(seq_len, d_model) < threads.MIN_WORK_FOR_MORE
        words = [" journey", " starts", " with", " one", " step", " Your"]
        sentence = "Your" + "".join(words[i % 6] for i in range(seq_len - 1))  # seq_len GPT-2 tokens
        overrides += [f"sentence='{sentence}'", f"model.d_model={d_model}", f"model.d_k={d_model}",
                      "tokenizer.max_tokens=4096"]
    results = {n: train(compose_cfg(*overrides, f"threads={n}")) for n in (1, 2, 4)}
    assert results[1].steps_run == 12
    if size is not None:
        assert len(results[1].tokens) == size[0]
    for n in (2, 4):
        assert results[n].losses.tobytes() == results[1].losses.tobytes(), n
        for ours, theirs in zip(results[n].snapshots, results[1].snapshots):
            assert ours.weights.tobytes() == theirs.weights.tobytes()
