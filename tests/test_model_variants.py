"""Multi-head, causal mask, dropout, bias and the sdpa path of attnlab.core.model.MultiHeadSelfAttention.

`reference_multi_head` is an independent restatement of multi-head causal attention following the
maths of rasbt/LLMs-from-scratch ch03 `MultiHeadAttention` (project, split into heads, scores,
mask, scale, softmax, weights @ V, concatenate, project), written here with einsum and without
attnlab's code: attnlab must give the same Z for the same parameter values.
"""
import itertools

import pytest
import torch
import torch.nn as nn
from torch.func import functional_call

from attnlab.core.model import (
    AttentionModel,
    ModelSpec,
    MultiHeadSelfAttention,
    mse,
    next_token_targets,
)
from attnlab.core.tokenizer import GPT2_VOCAB_SIZE

from conftest import TUTORIAL_IDS

PATHS = ("explicit", "sdpa")


def reference_multi_head(x, W_q, W_k, W_v, n_heads, causal, W_o=None, b_qkv=(None, None, None)):
    """x (T, d_in); W_q, W_k (H·d_k, d_in); W_v (H·d_v, d_in); optional W_o (d_out, H·d_v) and
    biases. Returns (context (T, d_out), attention weights (H, T, T))."""
    T = x.shape[0]
    projected = []
    for W, b in zip((W_q, W_k, W_v), b_qkv):
        y = torch.einsum("ti,oi->to", x, W)
        projected.append(y if b is None else y + b)
    # split the last axis into heads: (T, H·d) -> (H, T, d)
    q, k, v = (p.reshape(T, n_heads, p.shape[1] // n_heads).permute(1, 0, 2) for p in projected)
    s = torch.einsum("hid,hjd->hij", q, k)
    if causal:
        future = torch.triu(torch.ones(T, T), diagonal=1).bool()
        s = s.masked_fill(future, -torch.inf)
    a = torch.softmax(s / k.shape[-1] ** 0.5, dim=-1)
    ctx = torch.einsum("hij,hjd->hid", a, v).permute(1, 0, 2).reshape(T, -1)  # heads side by side
    if W_o is not None:
        ctx = torch.einsum("tc,oc->to", ctx, W_o)
    return ctx, a


def make(path, n_heads=1, causal=False, d_model=6, d_k=4, d_v=6, seed=0, **kw):
    torch.manual_seed(seed)
    return MultiHeadSelfAttention(d_model, d_k, d_v, n_heads, causal=causal, attention=path, **kw)


def twin(att, path):
    """A module like ``att`` on the other path, with the same parameter values."""
    other = MultiHeadSelfAttention(att.d_model, att.d_k, att.d_v, att.n_heads, causal=att.causal,
                                   dropout=att.dropout, qkv_bias=att.W_query.bias is not None, attention=path,
                                   out_proj=att.W_out is not None)
    other.load_state_dict(att.state_dict())
    return other


VARIANTS = [  # n_heads, d_k, d_v, extra
    (1, 4, 6, {}),
    (3, 2, 2, {}),
    (2, 3, 4, dict(qkv_bias=True, out_proj=True)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n_heads,d_k,d_v,extra", VARIANTS, ids=["H1", "H3", "H2-bias-proj"])
def test_causal_mask_hides_the_future(path, n_heads, d_k, d_v, extra):
    torch.manual_seed(3)
    table = nn.Embedding(100, 6)
    ids = torch.tensor([5, 17, 42, 8, 99, 23, 61])
    att = make(path, n_heads, True, d_k=d_k, d_v=d_v, **extra)
    out = att(table(ids))
    w = out.weights
    assert torch.equal(w.triu(diagonal=1), torch.zeros_like(w))  # exactly 0 above the diagonal
    future = torch.ones(7, 7, dtype=torch.bool).triu(diagonal=1)
    assert torch.all(torch.isneginf(out.scores[:, future]))  # masked before the softmax
    assert torch.all(torch.isfinite(out.scores[:, ~future]))
    torch.testing.assert_close(w.sum(-1), torch.ones(n_heads, 7), rtol=0, atol=1e-6)
    assert torch.all(w.diagonal(dim1=-2, dim2=-1) > 0)  # no row is all masked
    for j in range(1, 7):  # change token j's embedding: every earlier Z row stays exactly the same
        changed = ids.clone()
        changed[j] = 77
        Z2 = att(table(changed)).Z
        assert torch.equal(Z2[:j], out.Z[:j]), j
        assert not torch.equal(Z2[j], out.Z[j])  # token j itself sees its new embedding
    # without the mask the change leaks backwards (so the check above can fail)
    open_att = twin(att, path)
    open_att.causal = False
    changed = ids.clone()
    changed[6] = 77
    assert not torch.equal(open_att(table(changed)).Z[0], open_att(table(ids)).Z[0])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_heads,d_k,d_v,extra", VARIANTS, ids=["H1", "H3", "H2-bias-proj"])
def test_explicit_and_sdpa_agree_on_Z_weights_and_gradients(causal, n_heads, d_k, d_v, extra):
    explicit = make("explicit", n_heads, causal, d_k=d_k, d_v=d_v, seed=11, **extra)
    sdpa = twin(explicit, "sdpa")
    torch.manual_seed(12)
    X = torch.randn(9, 6)
    R = torch.randn(9, explicit(X).Z.shape[-1])  # a fixed direction for the loss
    results = []
    for att in (explicit, sdpa):
        x = X.clone().requires_grad_(True)
        out = att(x)
        (out.Z * R).sum().backward()
        results.append((out, x.grad, {n: p.grad for n, p in att.named_parameters()}))
    (oe, gxe, gpe), (os_, gxs, gps) = results
    for a, b in ((oe.Z, os_.Z), (oe.weights, os_.weights), (gxe, gxs), *((gpe[n], gps[n]) for n in gpe)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert set(gpe) == set(gps)
    assert all(g.abs().sum() > 0 for g in gpe.values())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_heads,d_k", [(1, 4), (2, 2)], ids=["H1", "H2"])
def test_explicit_and_sdpa_give_the_same_first_10_losses(causal, n_heads, d_k):
    """The tutorial's §5 run for 10 steps on each path (the whole curve is not compared: with the
    mask, float rounding grows with the steps)."""
    curves = {}
    for path in PATHS:
        torch.manual_seed(42)
        model = AttentionModel(ModelSpec(6, d_k, 6, 1.0, n_heads=n_heads, causal=causal, attention=path),
                               GPT2_VOCAB_SIZE, 6)
        X = model.embedding(torch.tensor(TUTORIAL_IDS)).detach()
        target = next_token_targets(X)
        opt = torch.optim.Adam(model.trained_parameters(), lr=0.05)
        losses = []
        for _ in range(10):
            loss = mse(model.attention(X, need_weights=False).Z, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves[path] = torch.tensor(losses, dtype=torch.float64)
    torch.testing.assert_close(curves["explicit"], curves["sdpa"], rtol=0, atol=1e-5)
    assert curves["explicit"][-1] < curves["explicit"][0]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gradcheck_explicit_path_float64(causal):
    att = make("explicit", 2, causal, d_model=5, d_k=3, d_v=2, seed=4, qkv_bias=True, out_proj=True).double()
    names = [n for n, _ in att.named_parameters()]
    torch.manual_seed(5)
    X = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_(True) for p in att.parameters()]

    def Z_of(x, *ps):
        return functional_call(att, dict(zip(names, ps)), (x,)).Z

    assert torch.autograd.gradcheck(Z_of, (X, *params), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_dropout_is_seeded_training_only_and_never_in_the_recorded_weights(path):
    att = make(path, 2, True, d_k=2, d_v=3, seed=6, dropout=0.3)
    plain = twin(att, path)
    plain.dropout = 0.0
    torch.manual_seed(7)
    X = torch.randn(8, 6)
    att.train()
    runs = []
    for seed in (100, 100, 101):
        torch.manual_seed(seed)
        runs.append(att(X))
    assert torch.equal(runs[0].Z, runs[1].Z)  # same seed, same masks, bit for bit
    assert not torch.equal(runs[0].Z, runs[2].Z)  # another seed, other masks
    reference = plain(X)
    assert not torch.equal(runs[0].Z, reference.Z)  # dropout did something
    for run in runs:  # the recorded weights are the ones without dropout
        assert torch.equal(run.weights, reference.weights)
    att.eval()
    state = torch.get_rng_state()
    evaluated = att(X)
    assert torch.equal(torch.get_rng_state(), state)  # eval mode draws nothing
    torch.testing.assert_close(evaluated.Z, reference.Z, rtol=0, atol=0)


def test_no_dropout_draws_no_random_numbers():
    att = make("explicit", 2, False, d_k=2, d_v=3).train()
    state = torch.get_rng_state()
    att(torch.ones(4, 6))
    assert torch.equal(torch.get_rng_state(), state)


CASES = list(itertools.product((1, 2, 4), (False, True), PATHS))


@pytest.mark.parametrize("n_heads,causal,path", CASES, ids=[f"H{h}-{'causal' if c else 'full'}-{p}" for h, c, p in CASES])
def test_equals_an_independent_restatement_of_llms_from_scratch_multi_head(n_heads, causal, path):
    d_model, d_head = 8, 8 // n_heads  # LLMs-from-scratch: d_out split evenly, d_k = d_v = d_out / H
    att = make(path, n_heads, causal, d_model=d_model, d_k=d_head, d_v=d_head, seed=20 + n_heads, out_proj=True)
    torch.manual_seed(30)
    X = torch.randn(10, d_model)
    with torch.no_grad():
        out = att(X)
        Z, weights = reference_multi_head(X, att.W_query.weight, att.W_key.weight, att.W_value.weight, n_heads,
                                          causal, att.W_out.weight)
    torch.testing.assert_close(out.Z, Z, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.weights, weights, rtol=0, atol=1e-6)


def test_restatement_with_bias_and_unequal_head_sizes():
    att = make("explicit", 3, True, d_model=6, d_k=2, d_v=5, seed=40, qkv_bias=True, out_proj=True)
    torch.manual_seed(41)
    X = torch.randn(7, 6)
    with torch.no_grad():
        Z, _ = reference_multi_head(X, att.W_query.weight, att.W_key.weight, att.W_value.weight, 3, True,
                                    att.W_out.weight, (att.W_query.bias, att.W_key.bias, att.W_value.bias))
        torch.testing.assert_close(att(X).Z, Z, rtol=0, atol=1e-6)
