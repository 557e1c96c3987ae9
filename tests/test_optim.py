"""attnlab.core.optim's direct updates against the torch.optim classes (the fallback): every
parameter, gradient and state tensor bitwise equal after every step, and a whole run gives the
same losses on both paths."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlab.core import optim, training
from attnlab.core.training import train

from conftest import compose_cfg

CASES = [
    ("Adam", dict(lr=0.05)),
    ("Adam", dict(lr=0.01, betas=(0.5, 0.9), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=0.2, betas=(0.0, 0.99), eps=1e-3, weight_decay=0.5)),
    ("AdamW", dict(lr=0.2)),  # AdamW's own default weight_decay (0.01), not Adam's
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True)),
    ("SGD", dict(lr=0.05)),
]
needs_fast_path = pytest.mark.skipif(not optim.fast_path_ok(), reason="this torch's update functions differ")


def params(seed: int) -> list[torch.nn.Parameter]:
    """§5's shapes (embedding (6, 6), W_q/W_k/W_v (6, 4)) and one (3,) whose first gradient comes late."""
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(6, 6), (6, 4), (6, 4), (6, 4), (3,)]]


@needs_fast_path
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_direct_update_is_the_torch_optim_class_bit_for_bit(name, kwargs):
    ours_p, theirs_p = params(11), params(11)
    ours, theirs = optim.build(name, ours_p, fast=True, **kwargs), optim.build(name, theirs_p, fast=False, **kwargs)
    assert isinstance(theirs, torch.optim.Optimizer) and not isinstance(ours, torch.optim.Optimizer)
    losses = []
    for step in range(30):
        for opt, ps in ((ours, ours_p), (theirs, theirs_p)):
            opt.zero_grad()
            X, Wq, Wk, Wv, extra = ps
            V = X[:, :4] if step % 5 == 2 else X @ Wv  # W_v without a gradient on some steps
            loss = ((torch.softmax((X @ Wq) @ (X @ Wk).T / 2.0, dim=-1) @ V) - X[:, :4]).pow(2).mean()
            if step >= 7 and step % 3 == 0:
                loss = loss + extra.pow(2).sum()
            loss.backward()
            opt.step()
        losses.append(loss.item())
        for k, (a, b) in enumerate(zip(ours_p, theirs_p)):
            assert torch.equal(a, b), f"{name} step {step}: parameter {k} differs"
            assert torch.equal(a.grad, b.grad) if b.grad is not None else a.grad is None
    for a, b in zip(ours_p, theirs_p):  # the state too, so a longer run stays identical
        assert set(ours.state.get(a, {})) == set(theirs.state.get(b, {}))
        for key, value in theirs.state.get(b, {}).items():
            assert torch.equal(ours.state[a][key], value) and ours.state[a][key].dtype == value.dtype, key
    if name != "SGD":  # Adam counts a parameter's own steps: the late one's 7 gradients
        assert int(ours.state[ours_p[-1]]["step"]) == 7
    ours.zero_grad()
    assert all(p.grad is None for p in ours_p)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("extra", [[], ["optimizer=adamw"], ["optimizer=sgd", "optimizer.momentum=0.9"]],
                         ids=["adam", "adamw", "sgd-momentum"])
def test_a_run_on_the_torch_optim_fallback_has_the_same_losses(monkeypatch, extra):
    cfg = compose_cfg("train.steps=40", *extra)
    fast = train(cfg)
    monkeypatch.setattr(optim, "fast_path_ok", lambda: False)
    assert isinstance(training.build_optimizer(cfg.optimizer, params(0)), torch.optim.Optimizer)
    slow = train(cfg)
    assert fast.status == slow.status == "completed"
    assert fast.losses.tobytes() == slow.losses.tobytes()
    for a, b in zip(fast.snapshots, slow.snapshots, strict=True):
        assert np.array_equal(a.weights, b.weights)


def test_deterministic_algorithms_public_fallback(monkeypatch):
    torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(training, "DETERMINISTIC_SETTER", "_a_name_this_torch_lacks")
    called = []
    public = torch.use_deterministic_algorithms
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda mode: called.append(mode) or public(mode))
    training.deterministic_algorithms()
    assert called == [True] and torch.are_deterministic_algorithms_enabled()


@needs_fast_path
def test_training_does_not_import_the_compiler_stack():
    """With the direct updates and the private deterministic setter, a run (Adam's update with
    AdamW's decay, SGD with momentum) never imports torch._dynamo, which building a torch.optim
    class does."""
    code = (
        "import sys\n"
        "from attnlab.core.config import apply_schema\n"
        "from attnlab.core.training import train\n"
        "for opt in ({'_target_': 'torch.optim.AdamW'}, {'_target_': 'torch.optim.SGD', 'momentum': 0.9}):\n"
        "    cfg = apply_schema({'optimizer': opt, 'train': {'steps': 3}})\n"
        "    assert train(cfg).status == 'completed'\n"
        "import torch\n"
        "print('torch._dynamo' in sys.modules, torch.are_deterministic_algorithms_enabled())\n"
        "torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]
