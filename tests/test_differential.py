"""The runner equals a plain restatement of the tutorial's §5 code, for configs other than the default.

`plain_section5` below is written from the tutorial's text, not from attnlab's modules: if the
runner's order of parameter creation, scaling, target or loss drifts from the tutorial, the whole
loss curve and every snapshot stop matching.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn

from attnlab.core.tokenizer import get_encoding
from attnlab.core.training import train


def plain_section5(text, seed, d_model, d_out, std, steps, snapshot_steps, make_opt, positional=True):
    token_ids = get_encoding("gpt2").encode(text, allowed_special="all")
    vocab_size, seq_len = 50257, len(token_ids)
    torch.manual_seed(seed)
    tok_emb = nn.Embedding(vocab_size, d_model)
    pos_emb = nn.Embedding(seq_len, d_model)
    nn.init.normal_(tok_emb.weight, std=std)
    nn.init.normal_(pos_emb.weight, std=std)
    X = tok_emb(torch.tensor(token_ids))
    if positional:
        X = X + pos_emb(torch.arange(seq_len))
    X = X.detach()
    Wq = nn.Linear(d_model, d_out, bias=False)
    Wk = nn.Linear(d_model, d_out, bias=False)
    Wv = nn.Linear(d_model, d_model, bias=False)
    target = torch.zeros_like(X)
    target[:-1] = X[1:]
    target[-1] = X[-1]
    optimizer = make_opt(list(Wq.parameters()) + list(Wk.parameters()) + list(Wv.parameters()))
    losses, snapshots = [], []
    for step in range(steps):
        Q = Wq(X); K = Wk(X); V = Wv(X)
        scores = Q @ K.T / d_out ** 0.5
        weights = torch.softmax(scores, dim=-1)
        Z = weights @ V
        loss = ((Z - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step in snapshot_steps:
            snapshots.append((step, weights.detach().clone().numpy()))
    return np.array(losses), snapshots


CASES = [
    # overrides, plain-code arguments
    (["sentence=The quick brown fox jumps over the lazy dog", "seed=7"],
     dict(text="The quick brown fox jumps over the lazy dog", seed=7, d_model=6, d_out=4, std=1.0, lr=0.05, opt="adam")),
    (["model.d_model=16", "model.d_k=8", "train.steps=120", "train.snapshot_steps=[0,60,119]"],
     dict(d_model=16, d_out=8, steps=120, snapshot_steps=[0, 60, 119], opt="adam")),
    (["model.init_std=0.3", "optimizer.lr=0.01", "train.steps=80", "train.snapshot_steps=[5,79]"],
     dict(std=0.3, lr=0.01, steps=80, snapshot_steps=[5, 79], opt="adam")),
    (["optimizer=sgd", "optimizer.lr=0.2", "train.steps=60", "train.snapshot_steps=[0,59]"],
     dict(lr=0.2, steps=60, snapshot_steps=[0, 59], opt="sgd")),
    (["optimizer=adamw", "model.d_model=8", "model.d_k=3", "seed=0", "train.snapshot_steps=[0,100]"],
     dict(d_model=8, d_out=3, seed=0, snapshot_steps=[0, 100], opt="adamw")),
    (["model.positional=none", "sentence=Your journey starts with step one", "train.steps=50",
      "train.snapshot_steps=[49]"],
     dict(text="Your journey starts with step one", positional=False, steps=50, snapshot_steps=[49], opt="adam")),
]


@pytest.mark.parametrize("overrides,plain", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_runner_equals_plain_tutorial_code(cfg_of, overrides, plain):
    args = dict(text="Your journey starts with one step", seed=42, d_model=6, d_out=4, std=1.0, lr=0.05,
                steps=201, snapshot_steps=[0, 20, 50, 100, 200], positional=True)
    args.update(plain)
    lr, opt = args.pop("lr"), args.pop("opt")
    make_opt = {
        "adam": lambda p: torch.optim.Adam(p, lr=lr),
        "adamw": lambda p: torch.optim.AdamW(p, lr=lr),  # torch's default weight_decay is 0.01, as ours
        "sgd": lambda p: torch.optim.SGD(p, lr=lr),
    }[opt]
    expected_losses, expected_snaps = plain_section5(make_opt=make_opt, **args)

    result = train(cfg_of(*overrides))
    assert result.status == "completed"
    assert result.steps_run == args["steps"]
    np.testing.assert_allclose(result.losses, expected_losses, rtol=0, atol=1e-6)
    assert [s.step for s in result.snapshots] == [s for s, _ in expected_snaps]
    for snap, (_, w) in zip(result.snapshots, expected_snaps):
        np.testing.assert_allclose(snap.weights[0], w, rtol=0, atol=1e-6)
    # the curve is not flat: the comparison above had something to compare
    assert expected_losses[-1] < expected_losses[0]
